"""plan_study: the planned fit follows the real one (bounds, SEs), its power is statsmodels', its inversions hit
their targets, and a reduced Monte Carlo agrees with it (the full grid: benchmarks/bench_power.py)."""

import warnings

import numpy as np
import pytest
import statsmodels.api as sm
from statsmodels.stats.power import NormalIndPower

import privfedstat as pfs
from privfedstat import FederatedData, FedIRLS, PrivateStandardize
from privfedstat.algorithms.fedirls import IRLSSchedule
from privfedstat.federation.protocol import Setup
from privfedstat.planning.power import NO_SPEND, Unplannable
from privfedstat.theory import wald_half_width, wald_power

NAMES = ["Intercept", "x1", "x2"]


def rows(n, rng):
    return np.column_stack([np.ones(n), rng.standard_normal(n), (rng.random(n) < 0.4).astype(float)])


@pytest.fixture(scope="module")
def design():
    return rows(20_000, np.random.default_rng(0))


def simulate(family, coef, m, n, rng):
    X = rows(m * n, rng)
    y = pfs.get_family(family).simulate(X @ np.asarray(coef), rng, 1.0)
    return X, y, FederatedData.from_pooled(X, y, clients=np.repeat(np.arange(m), n))


def test_wald_power_is_statsmodels_normal_power():
    for effect, se in [(0.1, 0.05), (0.3, 0.2), (-0.2, 0.04), (0.0, 1.0)]:
        expected = NormalIndPower().power(effect_size=abs(effect) / se, nobs1=1, alpha=0.05, ratio=0)
        assert wald_power(effect, se) == pytest.approx(expected, abs=1e-12)
    assert wald_half_width(1.0) == pytest.approx(1.959964, abs=1e-6)


@pytest.mark.parametrize("family", ["logistic", "poisson", "gaussian"])
def test_non_private_plan_is_statsmodels(design, family):
    """mu = inf: the planned SE is the MLE's (statsmodels' bse on a large sample, scaled to N) and its power is
    NormalIndPower's at that SE."""
    coef = {"logistic": (-0.5, 0.3, 0.4), "poisson": (0.3, 0.2, 0.3), "gaussian": (1.0, 0.3, 0.4)}[family]
    plan = pfs.plan_study(design, coef, family=family, sizes=[500] * 8, mu=float("inf"), names=NAMES)
    frame = plan.frame
    assert np.all(frame["se_privacy"] == 0) and np.allclose(frame["se"], frame["se_nonprivate"])
    X, y, _ = simulate(family, coef, 40, 5000, np.random.default_rng(1))  # 200000 rows
    sm_family = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(),
                 "gaussian": sm.families.Gaussian()}[family]
    bse = sm.GLM(y, X, family=sm_family).fit().bse * np.sqrt(200_000 / 4000)
    np.testing.assert_allclose(frame["se"], bse, rtol=0.03)
    for _, row in frame.iterrows():
        es = abs(row["effect"]) / row["se"]
        assert row["power"] == pytest.approx(NormalIndPower().power(effect_size=es, nobs1=1, alpha=0.05, ratio=0))
    assert NO_SPEND in repr(plan)


def test_plan_resolves_the_fit_settings_and_matches_its_standard_errors(design):
    """The fit's budget plan, bounds and reported SEs are those the plan predicts (logistic, 8 x 1000, mu = 2)."""
    coef = (-0.5, 0.3, 0.4)
    plan = pfs.plan_study(design, coef, family="logistic", sizes=[1000] * 8, mu=2.0, names=NAMES)
    scaling = (PrivateStandardize().budget * 2.0) ** 2  # shares of mu = 2, composed in squares
    assert plan.settings["estimation"] == f"{np.sqrt(4 - scaling - 0.2**2 - 0.5**2):.3g}"
    rng = np.random.default_rng(2)
    ses, clips = [], []
    for r in range(5):
        _, _, data = simulate("logistic", coef, 8, 1000, rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = FedIRLS(family="logistic", mu=2.0, scaling=PrivateStandardize(intercept=0), random_state=r).fit(data)
        ses.append(fit.bse_)
        clips.append(fit.clip_)
        table = plan.compare(fit)
        assert list(table.columns) == ["se_planned", "se_fit", "privacy_share_planned", "privacy_share_fit"]
    likeliest_B = float(plan.settings["B"].split()[0])  # "B (probability), ..." when the search's noise spreads it
    assert likeliest_B == pytest.approx(np.median(clips), rel=5e-3)  # settings show 3 digits
    np.testing.assert_allclose(np.median(ses, axis=0), plan.frame["se"], rtol=0.15)
    assert "Privacy share of variance" in fit.summary(plan=plan).header


def monte_carlo(family, coef, m, n, mu, reps, seed):
    """``reps`` default private fits on fresh data: estimates, reported SEs, and whether each rejects coef = 0."""
    rng = np.random.default_rng(seed)
    est = FedIRLS(family=family, mu=mu, scaling=PrivateStandardize(intercept=0))
    coefs, ses = [], []
    for r in range(reps):
        _, _, data = simulate(family, coef, m, n, rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.set_params(random_state=r).fit(data)
        coefs.append(est.coef_)
        ses.append(np.ravel(est.bse_))
    coefs, ses = np.array(coefs), np.array(ses)
    return coefs, ses, np.abs(coefs) / ses > 1.959964  # a withheld interval (NaN SE) does not reject


@pytest.mark.slow
def test_reduced_monte_carlo(design):
    """Where sampling noise dominates (Poisson, 5 x 1000, mu = 2: planned privacy share 0.28-0.38), 200 private fits
    agree with the plan within their Monte-Carlo error (the full grid: benchmarks/bench_power.py).

    Tolerances, three Monte-Carlo sds of 200 fits: the SD of the estimates (over those within 6 planned SEs of the
    effect, which leaves out the rare fit that a noisy bound decision sends far off) is uncertain by
    1 / sqrt(2 * 199) = 5%, so 15%; the median of the SEs the fits report varies far less (their spread is the
    inference releases' noise), so 5%; a rejection rate by at most sqrt(0.25 / 200) = 0.035, so 0.1."""
    coef = (0.3, 0.04, 0.06)
    plan = pfs.plan_study(design, coef, family="poisson", sizes=[1000] * 5, mu=2.0, names=NAMES)
    assert np.all(plan.frame["privacy_share"] < 0.5)
    coefs, ses, rejects = monte_carlo("poisson", coef, 5, 1000, 2.0, 200, 3)
    effect, se = plan.frame["effect"].to_numpy(), plan.frame["se"].to_numpy()
    bulk = np.abs(coefs - effect) <= 6 * se
    assert bulk.mean() > 0.98
    sd = np.array([np.std(coefs[bulk[:, j], j], ddof=1) for j in range(3)])
    np.testing.assert_allclose(se, sd, rtol=0.15)
    np.testing.assert_allclose(se, np.nanmedian(ses, axis=0), rtol=0.05)
    np.testing.assert_allclose(plan.frame["power"], rejects.mean(axis=0), atol=0.1)


@pytest.mark.slow
def test_reduced_monte_carlo_privacy_dominated(design):
    """Where privacy noise dominates (logistic, 50 x 100, mu = 0.8: planned privacy share above 0.5; at mu = 1 it fell
    to 0.48-0.50 once the estimate combined the refine rounds' targets, docs/algorithms/fedirls.md) the plan is a
    looser guide: 150 fits, the planned SE within 25% of the robust SD of the estimates (1.4826 MAD, itself
    uncertain by about 1.17 / sqrt(150) = 10%) and within 15% of the median SE the fits report (which exceeds the
    plan by about 12% here: the fit reads its privacy covariance at noisy released Hessians), and the power within
    0.2 (benchmarks/RESULTS.md, Planning)."""
    coef = (-0.5, 0.1, 0.2)
    plan = pfs.plan_study(design, coef, family="logistic", sizes=[100] * 50, mu=0.8, names=NAMES)
    assert np.all(plan.frame["privacy_share"] > 0.5)
    coefs, ses, rejects = monte_carlo("logistic", coef, 50, 100, 0.8, 150, 4)
    robust_sd = 1.4826 * np.median(np.abs(coefs - np.median(coefs, axis=0)), axis=0)
    np.testing.assert_allclose(plan.frame["se"], robust_sd, rtol=0.25)
    np.testing.assert_allclose(plan.frame["se"], np.nanmedian(ses, axis=0), rtol=0.15)
    np.testing.assert_allclose(plan.frame["power"], rejects.mean(axis=0), atol=0.2)


@pytest.mark.slow
def test_required_reaches_its_target_and_no_less_would(design):
    plan = pfs.plan_study(design, (-0.5, 0.05, 0.25), family="logistic", sizes=[300] * 10, mu=2.0, names=NAMES)
    need = plan.required("x2", power=0.8)
    assert need.frame.loc["x2", "power"] >= 0.8 and plan.at(mu=need.mu / 1.03).frame.loc["x2", "power"] < 0.8
    sites = plan.required("x1", half_width=0.05, vary="sites")
    k = sites.sizes.size
    assert sites.frame.loc["x1", "half_width"] <= 0.05 < plan.at(sizes=[300] * (k - 1)).frame.loc["x1", "half_width"]
    rows_ = plan.required("x1", half_width=0.05, vary="rows")
    assert rows_.sizes.size == 10 and rows_.frame.loc["x1", "half_width"] <= 0.05
    with pytest.raises(ValueError, match="out of reach at any mu"):
        plan.required("x1", half_width=1e-4)
    with pytest.raises(ValueError, match="exactly one target"):
        plan.required("x1")


def test_curve_and_plot(design):
    import matplotlib

    matplotlib.use("Agg")
    plan = pfs.plan_study(design, (-0.5, 0.05, 0.2), family="logistic", sizes=[300] * 10, mu=2.0, names=NAMES)
    curve = plan.curve([1.0, 4.0])
    assert set(curve["mu"]) == {1.0, 4.0} and len(curve) == 6
    x1 = curve[curve["term"] == "x1"].set_index("mu")
    assert x1.loc[4.0, "se"] < x1.loc[1.0, "se"]  # more budget, less privacy noise
    ax = plan.plot("x2", "half_width", mus=[1.0, 2.0, 4.0])
    assert ax.get_xscale() == "log"


def test_unplannable_and_refused_settings(design):
    with pytest.raises(Unplannable, match="B = 0.01"):  # the clip search's target is below 0: the grid's lowest B
        pfs.plan_study(design, (-0.5, 0.05, 0.2), family="logistic", sizes=[10] * 4, mu=2.0, names=NAMES)
    noisy = pfs.plan_study(design, (-0.5, 0.05, 0.2), family="logistic", sizes=[100] * 100, mu=0.5, names=NAMES)
    assert "Note: privacy noise is at least 0.5" in repr(noisy)
    with pytest.raises(ValueError, match="plan_schedule"):
        pfs.plan_study(design, (0.0, 0.1, 0.1), family="logistic", sizes=[100] * 3, method="fedsgd")
    with pytest.raises(ValueError, match="coef must hold 3"):
        pfs.plan_study(design, (0.0, 0.1), family="logistic", sizes=[100] * 3)
    for family in ("multinomial", pfs.get_family("multinomial", n_classes=3)):  # was: "needs n_classes" / "coef"
        with pytest.raises(ValueError, match="cannot plan: for one equation of a multinomial .* family='logistic'"):
            pfs.plan_study(design, np.zeros((2, 3)), family=family, sizes=[100] * 3)
    with pytest.raises(ValueError, match="'poisson'; got family='huber', which it cannot plan"):
        pfs.plan_study(design, (0.0, 0.1, 0.1), family="huber", sizes=[100] * 3)
    with pytest.raises(ValueError, match="not planned"):
        pfs.plan_study(design, (0.0, 0.1, 0.1), family="logistic", sizes=[100] * 3, clip="paper")


def test_planned_noise_model_is_the_fits(design):
    """FedIRLS's noise model from public settings has the fit's own round variances and floors."""
    est = FedIRLS(family="logistic", mu=2.0)
    sizes = np.array([200, 300, 500])
    setup = Setup(1.5, 0.8, 1.9)
    H = np.diag([0.2, 0.1, 0.05])
    schedule = est.plan_schedule(pfs.get_family("logistic"), sizes.astype(float), setup, 3)
    noise = schedule.planned_noise(H)
    w = sizes / sizes.sum()
    shares = np.vstack([ph.shares for ph in schedule.phases()])
    rounds = schedule.locate_rounds + len(schedule.curvature.refine_split)
    assert len(noise.gradient_var) == rounds and shares.sum() == pytest.approx(1.0 - schedule.research_share)
    expected_last = np.sum((w * 2 * 1.5 / sizes) ** 2) / (1.9**2 * shares[-1, 0])
    assert noise.gradient_var[-1] == pytest.approx(expected_last)
    assert np.all(np.linalg.eigvalsh(noise.last_hessian) >= noise.floors[-1] - 1e-15)


def test_plan_study_builds_one_schedule_per_planned_fit(design, monkeypatch):
    """plan_study walks the schedule the fit builds, through the same builder: one for the private fit it predicts and
    one for the mu = inf fit it sets beside it, each with the fit's stages."""
    built = []
    of = IRLSSchedule.of

    def counting(cls, *args):
        built.append(of(*args))
        return built[-1]

    monkeypatch.setattr(IRLSSchedule, "of", classmethod(counting))
    pfs.plan_study(design, (-0.5, 0.3, 0.2), family="logistic", sizes=[200] * 20, mu=2.0, names=NAMES)
    assert [b.stages for b in built] == [("locate", "whiten", "research", "insure", "refine"), ("exact",)]
