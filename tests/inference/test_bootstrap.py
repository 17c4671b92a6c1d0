"""Parametric bootstrap (privfedstat.inference.bootstrap): it spends exactly its mu through
sensitivities that hold, reproduces a known clipping bias, matches statsmodels' standard errors
without privacy, and is reproducible from its seed."""

import math

import numpy as np
import pytest
import statsmodels.api as sm

from privfedstat import FederatedData, FedIRLS, FedSGD, PrivateStandardize
from privfedstat._linalg import sym_to_vec
from privfedstat.algorithms import registry
from privfedstat.exceptions import DivergenceError
from privfedstat.families import get_family
from privfedstat.federation import InProcessClients, make_oracle
from privfedstat.federation.protocol import Setup
from privfedstat.federation.session import Session
from privfedstat.fitting.stages import _fixed_bound
from privfedstat.inference import bootstrap
from privfedstat.inference.bootstrap import _gaussian_design, release_simulation_model, run_bootstrap, simulate_response
from privfedstat.inference.config import Inference
from privfedstat.privacy import ClientNoise, PrivacyLedger
from privfedstat.privacy.calibration import hessian_sensitivity

#: the test fits use tiny settings (a few rounds): their accuracy diagnostics are expected to speak up
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::privfedstat.ConvergenceWarning")]

INF = float("inf")
BETA = np.array([0.5, 1.0, -1.0])
#: declares column 0 the intercept and rescales nothing (the fitting scale is the original one)
INTERCEPT = PrivateStandardize(columns=(), intercept=0)
#: the correlated Gaussian covariates of every design here
MIX = np.array([[1.0, 0.0], [0.5, 0.8]])


def _design(N, seed):
    rng = np.random.default_rng(seed)
    return rng, np.column_stack([np.ones(N), rng.standard_normal((N, 2)) @ MIX])


def _logistic(N, seed, m=10, beta=BETA):
    rng, X = _design(N, seed)
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ beta))).astype(float)
    return X, y, FederatedData.from_pooled(X, y, sizes=[N // m] * m)


def _session(est, data, noise_seed=5, seed=7):
    """The fit's session as ``fit`` opens it (identity scaling: the oracle sees the original design), fresh ledger,
    inference seed ``seed``."""
    noise = ClientNoise(np.random.SeedSequence(noise_seed), data.n_clients)
    return Session.open(InProcessClients(data, est.family_, noise), PrivacyLedger(data.n_clients),
                        seed=np.random.SeedSequence(0), inference_seed=np.random.SeedSequence(seed))


def _setup(est):
    """The fit's bounds and estimation budget (the estimator's own mu: no scaling, clip search or inference spent)."""
    return Setup(est.clip_, _fixed_bound(est, "hessian") if "hessian" in est._norms else math.nan, est.mu)


def _boot(est, data, mu, n_boot, seed=7, noise_seed=5):
    session, setup = _session(est, data, noise_seed, seed), _setup(est)
    draws, notes = run_bootstrap(session, setup, est.coef_.ravel(), Inference(n_boot=n_boot), mu,
                                 est._refits(setup, est.scaler_))
    return draws, notes, session


# ---------------------------------------------------------------------------- privacy
@pytest.mark.parametrize("family, stages", [
    ("logistic", {"inference-clip-row", "inference-moments"}),
    ("gaussian", {"inference-clip-row", "inference-clip-gradient", "inference-moments", "inference-dispersion"}),
])
def test_spends_exactly_its_mu_in_inference_stages(family, stages):
    rng, X = _design(1200, 3)
    y = (rng.random(1200) < 0.5).astype(float) if family == "logistic" else X @ BETA + rng.standard_normal(1200)
    data = FederatedData.from_pooled(X, y, sizes=[100, 200, 300, 600])
    est = FedIRLS(family=family, mu=2.0, clip=1.5, hessian_clip=2.0, scaling=INTERCEPT, inference=None,
                  random_state=0).fit(data)
    draws, _, session = _boot(est, data, 0.7, 20)
    ledger = session.ledger
    np.testing.assert_allclose(ledger.client_mu, 0.7, rtol=1e-12)
    assert set(ledger.by_stage().index) == stages
    assert draws.shape == (20, 3) and np.all(np.isfinite(draws))


def test_moment_release_sensitivity_holds_and_is_attained():
    """One row replaced moves ``sym_to_vec`` of a client's clipped design moment by at most
    ``sqrt(2) C_x^2 / n_i`` (any finite rows), with equality for orthogonal rows of norm >= C_x;
    the ledger's moment release states exactly that sensitivity."""
    rng = np.random.default_rng(0)
    n, C = 40, 1.5
    X = rng.normal(size=(n, 3))
    X[0] = [0.0, 3.0 * C, 0.0]
    bound = hessian_sensitivity(C * C, np.array([n]))[0]
    family = get_family("logistic")

    def moment(X):
        return sym_to_vec(make_oracle(FederatedData(X, np.zeros(n), np.array([0, n])), family).design_moments(C))[0]

    base = moment(X)
    shifts = []
    for row in ([0.0, 0.0, 2.0 * C], [1e150, -1e150, 3.0], [0.0, 0.0, 0.0], rng.normal(size=3) * 10):
        X2 = X.copy()
        X2[0] = row
        shifts.append(np.linalg.norm(moment(X2) - base))
    assert max(shifts) <= bound * (1 + 1e-12)
    assert shifts[0] == pytest.approx(bound, rel=1e-12)  # orthogonal rows, both clipped to norm C

    _, _, data = _logistic(600, 1, m=3)
    est = FedIRLS(mu=2.0, clip=1.0, hessian_clip=1.0, scaling=INTERCEPT, inference=None, random_state=0).fit(data)
    session = _session(est, data)
    model = release_simulation_model(session, est.coef_, 1.0, 0)
    assert model.row_clip in bootstrap.ROW_SEARCH.grid
    frame = session.ledger.to_frame()
    released = frame[frame.stage == "inference-moments"]
    np.testing.assert_allclose(released.sensitivity, hessian_sensitivity(model.row_clip**2, data.sizes), rtol=1e-12)


# ---------------------------------------------------------------------------- statistics
def test_mean_shift_reproduces_the_clipping_bias():
    """Fixed B = 1 biases the logistic fit (away from 0); the bias of the clipped fit, measured by
    Monte Carlo on 10^5 rows from the true model, is reproduced in sign and size by the bootstrap's
    mean shift (private fit and private releases, mu = 4 and 1)."""
    kw = dict(clip=1.0, hessian_clip=1.0, scaling=INTERCEPT, inference=None)
    big = FedIRLS(mu=INF, **kw).fit(_logistic(100_000, 99)[2])
    bias = big.coef_ - BETA
    assert np.all(np.abs(bias) > 0.05)  # the design has a material clipping bias

    data = _logistic(2000, 1)[2]
    est = FedIRLS(mu=4.0, random_state=1, **kw).fit(data)
    draws, _, _ = _boot(est, data, 1.0, 150)
    shift = draws.mean(axis=0) - est.coef_
    assert np.all(np.sign(shift) == np.sign(bias))
    np.testing.assert_allclose(shift / bias, 1.0, atol=0.4)


def test_without_privacy_the_bootstrap_sd_is_the_model_standard_error():
    X, y, data = _logistic(2000, 2)
    est = FedIRLS(mu=INF, clip=INF, scaling=INTERCEPT, inference=None).fit(data)
    mle = sm.Logit(y, X).fit(disp=0)
    np.testing.assert_allclose(est.coef_, mle.params, atol=1e-8)
    draws, notes, _ = _boot(est, data, INF, 200)
    np.testing.assert_allclose(draws.std(axis=0, ddof=1) / mle.bse, 1.0, atol=0.15)
    shift = draws.mean(axis=0) - est.coef_  # the MLE's O(1/N) bias and Monte Carlo error only
    assert np.all(np.abs(shift) <= 4 * mle.bse / math.sqrt(200) + 0.02), shift
    assert "C_x = inf" in notes[0] and "intercept held at 1" in notes[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_whitened_fit_simulates_its_rows_on_the_fitting_columns(seed):
    """FedIRLS's refine rounds and inference run whitened (the clients' rows mapped by a public W): the simulated rows
    are drawn on the fitting columns, intercept held at 1, and mapped by W. Drawn in the mapped coordinates, the
    intercept became a centred covariate, and on a rare-outcome logistic (8% ones) the bootstrap SEs were
    0.73-1.52 of the MLE's (narrower than the sampling-only interval on the slopes); now 0.8-1.25 (100 draws)."""
    rng = np.random.default_rng(4)
    N = 6000
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    y = (rng.random(N) < 1 / (1 + np.exp(-(X @ [-2.5, 0.4, -0.3])))).astype(float)
    mle = sm.Logit(y, X).fit(disp=0)
    est = FedIRLS(mu=4.0, scaling="private", random_state=seed, inference=Inference(cov_type="bootstrap", n_boot=100))
    est.fit(FederatedData.from_pooled(X, y, sizes=[1000] * 6))
    assert any(r.stage.startswith("irls-clip") for r in est.privacy_.releases)  # the bounds searched again: whitened
    ratio = np.sqrt(np.diag(est.inference_.cov)) / mle.bse
    assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio


def test_released_covariate_model_recovers_the_design():
    """mu = inf: the simulated covariates have the sample mean and covariance (intercept held at 1);
    the Gaussian dispersion is the residual variance."""
    rng, X = _design(4000, 4)
    y = X @ BETA + 2.0 * rng.standard_normal(4000)
    data = FederatedData.from_pooled(X, y, sizes=[1000] * 4)
    est = FedIRLS(family="gaussian", mu=INF, clip=INF, scaling=INTERCEPT, inference=None).fit(data)
    model = release_simulation_model(_session(est, data), est.coef_, INF, 0)
    np.testing.assert_allclose(model.mean, X.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(model.factor @ model.factor.T, np.cov(X.T, bias=True), atol=1e-10)
    resid = y - X @ est.coef_
    assert model.dispersion == pytest.approx(np.mean(resid**2), rel=0.03)


def test_gaussian_design_conditions_on_the_declared_intercept():
    m = np.array([2.0, -1.0])
    S = np.array([[1.0, 0.3], [0.3, 0.5]])
    M = np.zeros((3, 3))  # intercept in column 1
    rest = [0, 2]
    M[1, 1] = 1.0
    M[rest, 1] = M[1, rest] = m
    M[np.ix_(rest, rest)] = S + np.outer(m, m)
    mean, factor = _gaussian_design(M, 1)
    np.testing.assert_allclose(mean, [2.0, 1.0, -1.0], atol=1e-12)
    cov = factor @ factor.T
    np.testing.assert_allclose(cov[np.ix_(rest, rest)], S, atol=1e-12)
    np.testing.assert_allclose(cov[1], 0.0, atol=1e-12)
    mean0, factor0 = _gaussian_design(M, None)
    np.testing.assert_allclose(mean0, 0.0)
    np.testing.assert_allclose(factor0 @ factor0.T, M, atol=1e-12)


@pytest.mark.parametrize("family", ["logistic", "poisson", "gaussian", "multinomial"])
def test_simulated_responses_follow_the_family(family):
    fam = get_family(family, n_classes=3) if family == "multinomial" else get_family(family)
    n = 40_000
    X = np.tile([[1.0, 0.5]], (n, 1))
    theta = np.array([0.2, -0.4, 0.6, 0.8]) if family == "multinomial" else np.array([0.3, 0.8])
    y = simulate_response(fam, theta, X, 2.25, np.random.default_rng(0))
    fam.check_y(y)
    z = X[0] @ theta.reshape(2, -1)
    if family == "multinomial":
        p = fam.mean(z[None])[0]
        freq = np.bincount(y.astype(int), minlength=3) / n
        assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n)), (freq, p)
        return
    mean = float(fam.mean(z[0]))
    var = {"logistic": mean * (1 - mean), "poisson": mean, "gaussian": 2.25}[family]
    assert abs(y.mean() - mean) < 4 * math.sqrt(var / n)
    assert y.var() == pytest.approx(var, rel=0.05)


# ---------------------------------------------------------------------------- refits
def test_reproducible_from_the_seed():
    data = _logistic(1000, 5)[2]
    est = FedIRLS(mu=2.0, clip=1.0, hessian_clip=1.0, scaling=INTERCEPT, inference=None, random_state=0).fit(data)
    first = _boot(est, data, 1.0, 20, seed=11)[0]
    np.testing.assert_array_equal(first, _boot(est, data, 1.0, 20, seed=11)[0])
    assert not np.allclose(first, _boot(est, data, 1.0, 20, seed=12)[0])


BOOTSTRAPPED = [s for s in registry.methods(private=True) if s.cls.supports_inference]


@pytest.mark.parametrize("spec", BOOTSTRAPPED, ids=lambda s: s.name)
def test_every_private_estimator_refits_with_the_fits_settings(spec, monkeypatch):
    data = _logistic(600, 6, m=4)[2]
    est = spec.cls(**spec.test_params, clip="auto", mu=3.0, scaling=INTERCEPT, inference=None, random_state=0).fit(data)
    seen = []
    fit = spec.cls.fit

    def spy(self, *args, **kwargs):
        seen.append(self.get_params())
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(spec.cls, "fit", spy)
    # the fit's chosen bounds and estimation budget, as fit would set them
    setup = Setup(0.8, 0.6 if "hessian" in est._norms else math.nan, 2.5)
    draws, _ = run_bootstrap(_session(est, data, seed=0), setup, est.coef_.ravel(), Inference(n_boot=20), 1.0,
                             est._refits(setup, est.scaler_))
    assert draws.shape == (20, 3) and np.all(np.isfinite(draws))
    expected = {"clip": 0.8, "mu": 2.5, "scaling": None, "inference": None, "secure_mode": False}
    if "hessian" in est._norms:
        expected["hessian_clip"] = 0.6
    assert len(seen) == 20 and all(p | expected == p for p in seen)
    assert len({p["random_state"].spawn_key for p in seen}) == 20


def test_multinomial_draws_are_flat_in_oracle_order():
    rng, X = _design(1500, 7)
    theta = np.array([[0.2, -0.3], [0.8, 0.1], [-0.5, 0.6]])
    y = simulate_response(get_family("multinomial", n_classes=3), theta.ravel(), X, None, rng)
    data = FederatedData.from_pooled(X, y, sizes=[500] * 3)
    est = FedIRLS(family=get_family("multinomial", n_classes=3), mu=INF, clip=INF, scaling=INTERCEPT,
                  inference=None).fit(data)
    draws, _, _ = _boot(est, data, INF, 40)
    assert draws.shape == (40, 6)
    np.testing.assert_allclose(draws.mean(axis=0), est.coef_.ravel(), atol=0.1)


def test_failed_refits_are_counted_and_all_failing_is_an_error(monkeypatch):
    data = _logistic(600, 8, m=3)[2]
    est = FedSGD(mu=2.0, clip=1.0, n_iter=5, scaling=INTERCEPT, inference=None, random_state=0).fit(data)
    fit, calls = FedSGD.fit, []

    def flaky(self, *args, **kwargs):
        calls.append(1)
        if len(calls) % 4 == 0:
            raise DivergenceError("diverged")
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(FedSGD, "fit", flaky)
    draws, notes, _ = _boot(est, data, 1.0, 20)
    assert draws.shape == (15, 3)
    assert any("5 of 20 bootstrap refits failed (DivergenceError 5)" in note for note in notes)

    def broken(self, *args, **kwargs):
        raise DivergenceError("diverged")

    monkeypatch.setattr(FedSGD, "fit", broken)
    with pytest.raises(ValueError, match="all 20 bootstrap refits failed"):
        _boot(est, data, 1.0, 20)


def test_notes_ask_for_an_intercept_declaration_and_warn_of_a_noisy_search():
    data = _logistic(600, 9, m=3)[2]
    est = FedIRLS(mu=INF, clip=INF, inference=None).fit(data)
    _, notes, _ = _boot(est, data, INF, 20)
    assert "zero-mean Gaussian covariates" in notes[0]
    assert any("PrivateStandardize(columns=(), intercept=0)" in note for note in notes)
    assert not any("noisy" in note for note in notes)
    est = FedIRLS(mu=2.0, clip=1.0, hessian_clip=1.0, scaling=INTERCEPT, inference=None, random_state=0).fit(data)
    _, notes, _ = _boot(est, data, 0.05, 20)  # count noise sd sqrt(3) / (0.05 sqrt(0.2 / 7)) = 205 rows of 600
    assert any("row-norm search is noisy at this budget: its count noise lowered the targeted quantile by 68%" in note
               for note in notes)


# ---------------------------------------------------------------------------- refusals
def test_huber_and_offsets_are_refused_with_what_to_use():
    rng, X = _design(400, 10)
    data = FederatedData.from_pooled(X, X @ BETA + rng.standard_normal(400), sizes=[200, 200])
    est = FedIRLS(family="huber", mu=INF, clip=INF, inference=None).fit(data)
    with pytest.raises(ValueError, match="huber family is not a likelihood.*sandwich"):
        _boot(est, data, INF, 20)
    y = rng.poisson(np.exp(0.1 * X[:, 1])).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=[200, 200], offset=np.full(400, 0.1))
    est = FedIRLS(family="poisson", mu=INF, clip=INF, inference=None).fit(data)
    with pytest.raises(ValueError, match="offset.*cov_type='model'"):
        _boot(est, data, INF, 20)
