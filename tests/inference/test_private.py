"""Private inference: what it releases and spends, the two covariance parts against Monte Carlo, the API."""

import dataclasses
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import simulate
from scipy import stats

import privfedstat.inference.core as core_module
from privfedstat import (
    AutoClip,
    FeatureBounds,
    FederatedData,
    FedIRLS,
    FedNewton,
    FedSGD,
    Inference,
    NoInferenceError,
    NotFittedError,
    PrivacyBudget,
    glm,
)
from privfedstat.fitting.verdict import SCORE_SHARE
from privfedstat.inference.clipping_bias import EXCESS_SHARE
from privfedstat.inference.core import CLIP_COUNT_SHARE
from privfedstat.kernels.glm_nb import CLIP_SAFETY
from privfedstat.privacy.calibration import hessian_sensitivity

MU = 2.0
BETA = [0.3, 0.5, -0.5]


@pytest.fixture(scope="module")
def data():
    return simulate("logistic", [300] * 10, BETA, seed=3)


def stage_mu(est, prefix: str) -> np.ndarray:
    """Per-client composed mu of the ledger stages starting with ``prefix``."""
    df = est.privacy_.to_frame()
    part = df[df.stage.str.startswith(prefix)]
    return np.sqrt(part.groupby("client").mu.apply(lambda s: float(np.sum(s**2))).to_numpy())


def quiet_fit(est, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diagnostics of small fits
        return est.fit(data)


def test_sandwich_releases_their_sensitivities_and_compose_to_the_inference_share(data):
    """FedSGD chose no C_H: a private search at the estimate (stage inference-clip-hessian, count sensitivity 1),
    then the Hessian (sqrt(2) C_H / n_i) and the clipped score outer products (sqrt(2) B^2 / n_i), in all
    0.25 mu per client; the protocol gets sqrt(mu^2 - (0.25 mu)^2 - clip share^2)."""
    B = 1.5
    est = quiet_fit(FedSGD(mu=MU, clip=B, n_iter=20, inference="sandwich", random_state=0), data)
    releases = {r.stage: r for r in est.privacy_.releases}
    assert set(releases) == {"gradient", "inference-clip-hessian", "inference-clip-count", "inference-clip-excess",
                             "inference-hessian", "inference-score", "inference-score-test"}
    assert np.all(releases["inference-clip-hessian"].sensitivity == 1.0)
    assert np.all(releases["inference-clip-count"].sensitivity == 1.0)  # a count of clipped rows
    window = releases["inference-clip-excess"].sensitivity * data.sizes / 2  # B' - B, at least B
    assert np.ptp(window) < 1e-12 * window[0] and window[0] >= B * (1 - 1e-12)
    C_H = releases["inference-hessian"].sensitivity[0] * data.sizes[0] / math.sqrt(2)
    assert np.min(np.abs(AutoClip().grid / C_H - 1)) < 1e-12  # the search returns a point of the public grid
    np.testing.assert_allclose(releases["inference-hessian"].sensitivity, hessian_sensitivity(C_H, data.sizes), rtol=1e-12)
    np.testing.assert_allclose(releases["inference-score"].sensitivity, math.sqrt(2) * B * B / data.sizes, rtol=1e-12)
    np.testing.assert_allclose(stage_mu(est, "inference-"), 0.25 * MU, rtol=1e-12)
    np.testing.assert_allclose(stage_mu(est, "gradient"), math.sqrt(MU**2 - (0.25 * MU) ** 2), rtol=1e-12)
    np.testing.assert_allclose(est.privacy_.client_mu, MU, rtol=1e-12)
    assert est.inference_.mu == pytest.approx(0.25 * MU)


def test_estimators_that_clip_hessians_reuse_their_bound(data):
    est = quiet_fit(FedIRLS(mu=MU, clip=1.5, hessian_clip=0.7, random_state=0), data)
    stages = {r.stage for r in est.privacy_.releases if r.stage.startswith("inference")}
    assert stages == {"inference-score-test", "inference-clip-count", "inference-clip-excess", "inference-hessian"}
    hess = [r for r in est.privacy_.releases if r.stage == "inference-hessian"][0]
    np.testing.assert_allclose(hess.sensitivity, hessian_sensitivity(0.7, data.sizes), rtol=1e-12)
    # the rest after the score at the estimate (the convergence verdict), the clipped-row count and the clipped excess
    mu_hessian = 0.25 * MU * math.sqrt((1 - SCORE_SHARE) * (1 - CLIP_COUNT_SHARE) * (1 - EXCESS_SHARE))
    np.testing.assert_allclose(hess.sigma, hess.sensitivity / mu_hessian, rtol=1e-12)


def test_inference_releases_do_not_change_the_estimate(data):
    """They come after the protocol, from the same clients' noise streams: coef_ is the same for every cov_type."""
    coefs = [quiet_fit(FedIRLS(mu=MU, inference=kind, random_state=4), data).coef_ for kind in ("model", "sandwich")]
    np.testing.assert_array_equal(coefs[0], coefs[1])
    again = quiet_fit(FedIRLS(mu=MU, random_state=4), data)
    np.testing.assert_array_equal(again.inference_.cov, quiet_fit(FedIRLS(mu=MU, random_state=4), data).inference_.cov)


def test_budget_that_leaves_nothing_is_refused_and_bad_cov_type_before_any_release(data):
    with pytest.raises(ValueError, match="leaves nothing for estimation"):
        FedSGD(mu=MU, clip=AutoClip(budget=0.5), inference=Inference(budget=0.9)).fit(data)
    budget = PrivacyBudget(mu=MU, n_clients=data.n_clients)
    with pytest.raises(ValueError, match="likelihood"):
        FedSGD(family="huber", mu=MU, inference="model").fit(data, budget=budget)
    assert budget.fits == []  # refused before anything was charged or released
    with pytest.raises(ValueError, match="inference must be"):
        FedSGD(inference="robust").fit(data)


@pytest.mark.slow
def test_privacy_part_matches_the_spread_over_noise_seeds():
    """Fixed data, the fit repeated with new noise: the spread of coef_ around its mean is the protocol's privacy
    noise, which cov_privacy predicts (linearised at the estimate: the regime where the fit has settled, here 200
    steps; after 50 steps the path is still far from the optimum and the intercept's variance is 25% above the
    prediction). On the original scale through the FeatureBounds Jacobian (the intercept absorbs the centre)."""
    rng = np.random.default_rng(0)
    N = 4000
    X = np.column_stack([np.ones(N), rng.normal(2.0, 3.0, N), rng.standard_normal(N)])
    y = (rng.random(N) < 1 / (1 + np.exp(-(0.2 + 0.15 * X[:, 1] - 0.5 * X[:, 2])))).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=[200] * 20)
    bounds = FeatureBounds([1, -10, -4], [1, 14, 4], intercept=0)
    coefs, predicted = [], []
    for seed in range(150):
        est = quiet_fit(FedSGD(mu=1.0, clip=1.0, n_iter=200, scaling=bounds, random_state=seed), data)
        coefs.append(est.coef_)
        predicted.append(np.diag(est.inference_.cov_privacy))
    ratio = np.var(coefs, axis=0, ddof=1) / np.mean(predicted, axis=0)
    assert np.all(np.abs(ratio - 1) < 0.3), ratio  # sd of a variance ratio over 150 draws: ~0.12; measured 0.97-1.03


def test_bias_corrected_sampling_part_is_unbiased_over_noise_seeds():
    """Fixed data and bounds large enough that nothing is clipped: the mean over noise seeds of the private
    sampling covariance is the exact one (mu = inf), within Monte Carlo error."""
    data = simulate("logistic", [150] * 8, BETA, seed=5)
    C_H = float(np.max(data.row_norms) ** 2 / 4)  # logistic: ell'' <= 1/4
    exact = FedIRLS(mu=math.inf, clip=math.inf, hessian_clip=math.inf).fit(data).inference_.cov_sampling
    draws = [quiet_fit(FedIRLS(mu=MU, clip=3.0, hessian_clip=C_H, random_state=s), data).inference_.cov_sampling
             for s in range(60)]
    mean, se = np.mean(draws, axis=0), np.std(draws, axis=0, ddof=1) / math.sqrt(len(draws))
    assert np.all(np.abs(np.diag(mean) - np.diag(exact)) < 4 * np.diag(se) + 0.1 * np.diag(exact))


def test_weighted_fit_sandwich_is_the_weighted_rows_sandwich():
    """Weights w_i solve sum_i w_i gbar_i = 0, i.e. rows weighted a_j = w_i / n_i: the sandwich is
    (sum_j a_j ell''_j x x^T)^-1 (sum_j a_j^2 ell'_j^2 x x^T) (...)^-1 (numpy reference)."""
    data = simulate("logistic", [100, 200, 300, 400], BETA, seed=6)
    w = np.array([0.4, 0.3, 0.2, 0.1])
    est = FedIRLS(mu=math.inf, weights=w, inference="sandwich").fit(data)
    a = np.repeat(w / data.sizes, data.sizes)
    p = 1 / (1 + np.exp(-data.X @ est.coef_))
    H = (data.X.T * (a * p * (1 - p))) @ data.X
    S = (data.X.T * (a * (p - data.y)) ** 2) @ data.X
    Hi = np.linalg.inv(H)
    np.testing.assert_allclose(est.cov_params().to_numpy(), Hi @ S @ Hi, rtol=1e-8)


def test_bootstrap_draws_give_the_covariance_bias_and_basic_intervals(data, monkeypatch):
    """The core maps the bootstrap's fitting-scale draws to the original scale and derives cov, bias and the
    basic intervals [2 theta - q_hi, 2 theta - q_lo] (the bootstrap itself is tested in test_bootstrap.py)."""
    seen = {}
    rng = np.random.default_rng(0)

    def fake_run_bootstrap(session, setup, theta, config, mu, refits):
        seen.update(mu=mu, n_boot=config.n_boot, seed=session.inference_seed, method=refits.method)
        z = rng.standard_normal((config.n_boot, theta.size))
        z = (z - z.mean(axis=0)) / z.std(axis=0, ddof=1)  # exactly mean 0, sd 1
        return theta + 0.05 + 0.1 * z, ["a note"]

    monkeypatch.setattr(core_module, "run_bootstrap", fake_run_bootstrap)
    bounds = FeatureBounds([1, -4, -4], [1, 4, 4], intercept=0)
    est = quiet_fit(FedSGD(mu=MU, n_iter=20, scaling=bounds, random_state=0,
                           inference=Inference(cov_type="bootstrap", n_boot=400)), data)
    inf = est.inference_
    assert seen["mu"] == pytest.approx(0.25 * MU) and seen["n_boot"] == 400
    assert isinstance(seen["seed"], np.random.SeedSequence) and seen["method"] == est.method
    G = np.diag([1.0, 0.25, 0.25])  # FeatureBounds [-4, 4]: scale 4, centre 0
    assert inf.draws.shape == (400, 3) and inf.cov_type == "bootstrap" and "a note" in inf.notes
    np.testing.assert_allclose(inf.bias, G @ np.full(3, 0.05), rtol=1e-12)
    np.testing.assert_allclose(est.bse_, np.diag(G) * 0.1, rtol=1e-12)
    lo, hi = np.quantile(inf.draws, [0.05, 0.95], axis=0)
    np.testing.assert_allclose(est.conf_int(0.1).to_numpy(), np.column_stack([2 * est.coef_ - hi, 2 * est.coef_ - lo]))
    assert inf.cov_sampling is None and inf.cov_privacy is None
    # the fake released nothing: the ledger shows the estimation's share alone, reserved before the protocol
    np.testing.assert_allclose(est.privacy_.client_mu, math.sqrt(MU**2 - (0.25 * MU) ** 2), rtol=1e-12)
    assert "bootstrap" in est.summary().header["Inference"]


def test_alpha_sets_the_summary_columns_and_conf_int(data):
    est = quiet_fit(FedIRLS(mu=MU, inference=Inference(alpha=0.1), random_state=0), data)
    frame = est.summary().to_frame()
    assert list(frame.columns[-2:]) == ["[0.05", "0.95]"]
    np.testing.assert_allclose(frame[["[0.05", "0.95]"]].to_numpy(), est.conf_int().to_numpy())
    wide, narrow = est.conf_int(0.01), est.conf_int(0.5)
    assert np.all(wide["lower"] < narrow["lower"]) and np.all(wide["upper"] > narrow["upper"])
    half = (est.conf_int(0.05)["upper"] - est.coef_) / est.bse_
    df = est.inference_.df  # the released Hessian's noise in the variances: Student's t
    assert np.all(np.isfinite(df)) and np.all(df > 30)
    np.testing.assert_allclose(half, stats.t.ppf(0.975, df), rtol=1e-6)
    np.testing.assert_allclose(est.pvalues_, 2 * stats.t.sf(np.abs(est.coef_ / est.bse_), df), rtol=1e-9)
    assert np.all(half > 1.959964)
    with pytest.raises(ValueError, match="alpha must be"):
        est.conf_int(1.5)


def test_before_fit_and_without_inference(data):
    est = FedIRLS(mu=MU)
    for call in (lambda: est.bse_, est.conf_int, est.cov_params, lambda: est.wald_test(np.eye(3))):
        with pytest.raises(NotFittedError):
            call()
    off = quiet_fit(FedIRLS(mu=MU, inference=None, random_state=0), data)
    with pytest.raises(NoInferenceError, match="refit with inference='auto'"):
        off.conf_int()


def test_glm_passes_inference_and_names_the_intervals():
    rng = np.random.default_rng(1)
    n = 3000
    df = pd.DataFrame({"age": rng.uniform(20, 70, n), "site": rng.integers(0, 10, n)})
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-(-1 + 0.03 * df["age"])))).astype(float)
    fit = glm("y ~ age", df, client="site", family="logistic", mu=MU, random_state=0)
    ci = fit.conf_int()
    assert list(ci.index) == ["Intercept", "age"]
    t = stats.t.ppf(0.975, fit.inference_.df)  # Student's t with the released noise's degrees of freedom
    np.testing.assert_allclose(ci.to_numpy(), fit.coef_[:, None] + np.column_stack([-t, t]) * fit.bse_[:, None])
    assert "age" in fit.summary().as_text() and "Inference" in fit.summary().as_text()
    off = glm("y ~ age", df, client="site", family="logistic", mu=MU, random_state=0, inference=None)
    assert off.inference_ is None


class NoNoiseModelSGD(FedSGD):
    """A user's protocol that reports no noise model (only its noise_sd lower bound)."""

    def _run(self, session, setup):
        return dataclasses.replace(super()._run(session, setup), noise_model=None)


def test_protocol_without_noise_model_gets_the_noise_sd_lower_bound_and_a_note(data):
    est = quiet_fit(NoNoiseModelSGD(mu=MU, n_iter=20, random_state=0), data)
    ref = quiet_fit(FedSGD(mu=MU, n_iter=20, random_state=0), data)
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    assert any("no noise model" in note for note in est.inference_.notes)
    V_p = est.inference_.cov_privacy
    np.testing.assert_array_equal(V_p, np.diag(np.diag(V_p)))  # diagonal: noise_sd^2 per coordinate
    assert np.all(np.diag(V_p) > 0) and np.all(np.diag(V_p) <= np.diag(ref.inference_.cov_privacy) * 1.0001)


def clipped_score_matrices(data, theta, B):
    """Naive numpy: the clipped score's Jacobian J (rows with |ell'| ||x|| <= B kappa) and score covariance S."""
    p = 1 / (1 + np.exp(-data.X @ theta))
    r = p - data.y
    norms = np.abs(r) * np.linalg.norm(data.X, axis=1)
    kept = norms <= B * CLIP_SAFETY
    g = r * np.minimum(1.0, B * CLIP_SAFETY / norms)
    J = (data.X.T * (kept * p * (1 - p))) @ data.X / data.n_samples
    S = (data.X.T * g**2) @ data.X / data.n_samples
    return J, S, float(np.mean(~kept))


@pytest.mark.parametrize("cov_type", ["model", "sandwich"])
def test_released_hessian_is_the_clipped_scores_jacobian(data, cov_type):
    """With gradient clipping B the fit solves mean_j clip_B(g_j) = 0, whose Jacobian leaves out the clipped rows:
    at mu = inf the sampling covariance is (J^-1 or J^-1 S J^-1) / N with that J, not with the all-rows Hessian."""
    B = 0.9
    est = FedIRLS(mu=math.inf, clip=B, hessian_clip=math.inf, inference=cov_type).fit(data)
    J, S, clipped = clipped_score_matrices(data, est.coef_, B)
    assert 0.05 < clipped < 0.3
    Ji = np.linalg.inv(J)
    want = (Ji if cov_type == "model" else Ji @ S @ Ji) / data.n_samples
    np.testing.assert_allclose(est.cov_params().to_numpy(), want, rtol=1e-8)
    H_all = clipped_score_matrices(data, est.coef_, math.inf)[0]
    assert np.all(np.diag(want) > 1.05 * np.diag(np.linalg.inv(H_all)) / data.n_samples)  # not the all-rows one


def replicate_fits(make, sizes, n_rep, family="logistic"):
    coefs, ses = [], []
    for r in range(n_rep):
        est = quiet_fit(make(r), simulate(family, sizes, BETA, seed=1000 + r))
        coefs.append(est.coef_)
        ses.append(est.bse_)
    return np.std(coefs, axis=0, ddof=1) / np.sqrt(np.mean(np.square(ses), axis=0))


@pytest.mark.slow
@pytest.mark.parametrize("family, floor, steps", [("logistic", "auto", 50), ("poisson", "auto", 50),
                                                  ("logistic", 0.5, 50), ("logistic", 0.5, 3)])
def test_fednewton_standard_errors_match_the_spread_over_data_replicates(family, floor, steps):
    """mu = inf, 200 data sets of 8 clients x 400 rows: FedNewton's last step uses the second half of each client's
    rows, about twice the pooled variance (sum w_i^2 / n2_i); with a floor above H's spectrum (0.5, logistic) the
    shortened step keeps part of the first stage's error, D P e_1 (NewtonNoise.sampling_maps), and with 3 local steps
    the FedAvg stage reaches only P = I - A^3 of it. SD over replicates / RMS of the SE: measured 0.93-1.13 (the
    sd of this ratio is ~0.05); sqrt(2) times the pooled SE gives 0.72-0.80 with the floor and 0.50-0.55 with
    3 steps. At n_i = 100-200 the ratio is 1.09-1.3: the clients' own first-half Hessian inverses average higher,
    O(p / n1_i), which the linearisation leaves out."""
    ratio = replicate_fits(lambda r: FedNewton(family=family, mu=math.inf, hessian_floor=floor, n_local_steps=steps,
                                               random_state=r), [400] * 8, 200, family)
    assert np.all(np.abs(ratio - 1) < 0.15), ratio


@pytest.mark.parametrize("clip", [1e-141, 1e200])
def test_a_clip_outside_the_score_releases_range_is_served_at_the_nearest_bound(data, clip):
    """score_outer needs clip^2 in [1e-280, 1e307 / max n_i]; any clip the fit accepted is released at the nearest
    bound B' (and rescaled by (clip / B')^2 below the range) with a note, so nothing is refused after the protocol."""
    if clip > 1:  # mu = inf: the release at B' ~ 1.8e152 clips nothing, so it is the unclipped sandwich exactly
        est = FedIRLS(mu=math.inf, clip=clip, hessian_clip=math.inf, inference="sandwich").fit(data)
        ref = FedIRLS(mu=math.inf, clip=math.inf, hessian_clip=math.inf, inference="sandwich").fit(data)
        np.testing.assert_allclose(est.cov_params().to_numpy(), ref.cov_params().to_numpy(), rtol=1e-10)
    else:  # every gradient is clipped at 1e-140 and at clip: the rescaled release is the one at clip (a clip this
        # small is accepted only at a small mu: LEAST_BOUND_PER_MU, its noise variance underflows otherwise)
        mu = 1e-3
        est = quiet_fit(FedSGD(family="gaussian", mu=mu, clip=clip, n_iter=5, random_state=0, inference="sandwich"), data)
        score = [r for r in est.privacy_.releases if r.stage == "inference-score"][0]
        np.testing.assert_allclose(score.sensitivity, math.sqrt(2) * 1e-280 / data.sizes, rtol=1e-10)
        np.testing.assert_allclose(est.privacy_.client_mu, mu, rtol=1e-12)
        parts = est.inference_.cov_sampling + est.inference_.cov_privacy  # kept when the unconverged fit withholds bse_
        assert np.all(np.isfinite(np.diag(parts)))
    assert any("instead of the fit's clip" in note for note in est.inference_.notes)


def test_clipped_share_at_the_estimate_is_counted_privately_and_warned():
    """The count of per-sample gradients clipped at the estimate (sensitivity 1) estimates the true share;
    a large share warns (ClippingBiasWarning), a small one does not."""
    from privfedstat import ClippingBiasWarning

    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(4000), rng.standard_normal((4000, 2))])
    y = X @ np.array([30.0, 5.0, -5.0]) + rng.standard_normal(4000)  # a Gaussian response far from 0
    data = FederatedData.from_pooled(X, y, sizes=[400] * 10)
    for B, big in ((1.0, True), (1e4, False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = FedSGD(family="gaussian", mu=4.0, clip=B, n_iter=30, random_state=0).fit(data)
        share, sd = est.inference_.clipped_fraction
        grads = np.abs(X @ est.coef_ - y) * np.linalg.norm(X, axis=1)  # the kernel's clip test, pooled
        true = float(np.mean(grads > B))
        assert abs(share - true) < 5 * sd + 1e-12
        assert any(w.category is ClippingBiasWarning for w in caught) == big
        assert ("Clipped at estimate" in est.summary().header) and (true > 0.5) == big
    counts = [r for r in est.privacy_.releases if r.stage == "inference-clip-count"]
    assert len(counts) == 1 and np.all(counts[0].sensitivity == 1.0)


def test_unidentified_coefficients_by_their_variance_along_the_floored_directions():
    """G = I: a coefficient lying along an eigendirection the floor raised (released eigenvalue below 1 noise sd)
    is withheld when more than UNIDENTIFIED_SHARE of its variance comes from there; one between 1 and 3 sds is not."""
    from privfedstat.inference.core import unidentified_coefficients

    U = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))[0]
    released = U @ np.diag([2.0, 1.0, 0.02]) @ U.T
    floored_H = U @ np.diag([2.0, 1.0, 0.1]) @ U.T  # the third raised to s = 0.1
    loads = (U[:, 2] ** 2 / 0.1) / np.sum(U**2 / np.array([2.0, 1.0, 0.1]), axis=1)
    expected = np.flatnonzero(loads > core_module.UNIDENTIFIED_SHARE)
    np.testing.assert_array_equal(unidentified_coefficients(released, floored_H, 0.1, np.eye(3)), expected)
    assert expected.size  # exercised
    assert unidentified_coefficients(released, floored_H, 0.0, np.eye(3)).size == 0  # exact: nothing to withhold
    mid = U @ np.diag([2.0, 1.0, 0.2]) @ U.T  # 2 sds: warned as weakly identified, not withheld
    assert unidentified_coefficients(mid, mid, 0.1, np.eye(3)).size == 0
    # the protocol's release (sd 0.01) sees 0.05 along it, agreeing with the inference's 0.02 (sd 0.1): identified
    agreeing = U @ np.diag([2.0, 1.0, 0.05]) @ U.T
    assert unidentified_coefficients(released, floored_H, 0.1, np.eye(3), agreeing, 0.01).size == 0
    # it sees 1.0 there: the curvature fell between the two points, the inference's (at the estimate) decides
    falling = U @ np.diag([2.0, 1.0, 1.0]) @ U.T
    np.testing.assert_array_equal(unidentified_coefficients(released, floored_H, 0.1, np.eye(3), falling, 0.01), expected)
    # it does not see it either (0.02 against its sd 0.01): unidentified
    np.testing.assert_array_equal(unidentified_coefficients(released, floored_H, 0.1, np.eye(3), released, 0.01),
                                  expected)


def test_a_near_duplicate_column_withholds_its_pair_and_reports_the_rest():
    """x2 and x2 + 1e-3 z (logistic, 4 sites of 1000, mu = 2, FedIRLS): the released Hessian cannot identify their
    difference, so the pair's standard errors are NaN with a note, while the intercept's and x1's are reported."""
    from privfedstat import FedIRLS, IllConditionedWarning

    rng = np.random.default_rng(0)
    Z = rng.standard_normal((4000, 3))
    X = np.column_stack([np.ones(4000), Z[:, 0], Z[:, 1], Z[:, 1] + 1e-3 * Z[:, 2]])
    y = (rng.random(4000) < 1 / (1 + np.exp(-(X[:, :3] @ [0.3, -0.5, 0.2])))).astype(float)
    with pytest.warns(IllConditionedWarning, match="withheld, NaN"):
        fit = FedIRLS(mu=2.0, random_state=0).fit(FederatedData.from_pooled(X, y, sizes=[1000] * 4))
    assert fit.converged_ and np.all(np.isfinite(fit.bse_[:2])) and np.all(np.isnan(fit.bse_[2:]))
    assert any("withheld (NaN) for coefficient(s) [2, 3]" in n for n in fit.inference_.notes)
