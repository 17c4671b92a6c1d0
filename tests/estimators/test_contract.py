"""The estimator contract, checked for every registered estimator (scikit-learn's check_estimator in spirit).

Every test is parametrized over ``privfedstat.algorithms.registry.methods()`` with each spec's
``test_params``: a new estimator joins the suite by being registered. The only per-estimator facts
used are the registry's (``private``, ``test_params``, ``fixed_clip_params``, ``per_client``) and
the parameter names an estimator accepts; the noise-free covariance reference also knows FedNewton's
half-sample map and LocalFit's ridge (:func:`reference_covariance`).
"""

import functools
import math
import pickle

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from _contract import (
    assert_same_fit,
    check_clone,
    check_communication,
    check_fit_keeps_parameters,
    check_parameters,
    check_pickle_round_trip,
    record_uploads,
)
from conftest import simulate
from scipy import stats

from privfedstat import AutoClip, FederatedData, NoInferenceError, NotFittedError
from privfedstat.algorithms.registry import methods
from privfedstat.families import get_family
from privfedstat.federation.channel import Communication
from privfedstat.privacy.ledger import PrivacyLedger

SPECS = methods()
#: estimators that report standard errors (client-level ones cannot: their inference releases would be record-level)
INFERENCE = [s for s in SPECS if s.cls.supports_inference]
PRIVATE = methods(private=True)
NON_PRIVATE = methods(private=False)
FAMILIES = ("logistic", "poisson", "multinomial")
SIZES = (30, 45, 60, 80, 50, 40)  # unequal: per-client calibration errors show
N_CLASSES = 3
MU = 1.7


def ids(specs):
    return [s.name for s in specs]


@functools.cache
def dataset(family: str) -> FederatedData:
    if family != "multinomial":
        return simulate(family, SIZES, [0.3, 0.5, -0.5], seed=1)
    rng = np.random.default_rng(1)
    N = sum(SIZES)
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    P = get_family("multinomial", n_classes=N_CLASSES).mean(X @ np.array([[0.2, -0.3], [1.0, 0.5], [-0.5, 0.8]]))
    y = (P.cumsum(axis=1) < rng.random(N)[:, None]).sum(axis=1).astype(float)
    return FederatedData.from_pooled(X, y, sizes=SIZES)


def accepts(spec, name: str) -> bool:
    return name in spec.cls(**spec.test_params).get_params()


def make(spec, family: str = "logistic", **params):
    """The spec's estimator with its test parameters, the family, a fixed seed (if it has one) and ``params``."""
    fam = get_family("multinomial", n_classes=N_CLASSES) if family == "multinomial" else family
    seed = {"random_state": 0} if accepts(spec, "random_state") else {}
    return spec.cls(**{**spec.test_params, "family": fam, **seed, **params})


# ---------------------------------------------------------------------------------- fitting
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_fit_returns_self_and_is_idempotent(spec, family):
    data = dataset(family)
    est = make(spec, family)
    assert est.fit(data) is est
    first = pickle.loads(pickle.dumps(est))
    est.fit(data)
    assert_same_fit(est, first)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_fitted_attributes_mean_the_same_in_every_estimator(spec, family):
    data = dataset(family)
    est = make(spec, family).fit(data)
    d, K = data.n_features, N_CLASSES
    assert est.coef_.shape == ((d, K - 1) if family == "multinomial" else (d,))
    assert np.all(np.isfinite(est.coef_))
    assert est.history_.shape[1:] == est.coef_.shape and len(est.history_) >= 2
    np.testing.assert_array_equal(est.history_[-1], est.coef_)
    assert isinstance(est.n_iter_, int) and est.n_iter_ >= 1
    assert est.clip_ > 0 and est.mu_ == est.get_params().get("mu", float("inf"))
    assert (est.n_features_in_, est.n_clients_, est.n_samples_) == (d, len(SIZES), sum(SIZES))
    assert isinstance(est.privacy_, PrivacyLedger) and est.privacy_.n_clients == len(SIZES)
    assert isinstance(est.communication_, Communication)
    assert est.family_.name == family
    P = est.predict(data.X[:7])
    assert P.shape == ((7, K) if family == "multinomial" else (7,))
    assert est.mse(np.zeros_like(est.coef_)) == pytest.approx(float(np.sum(est.coef_**2)))
    if family == "poisson":
        assert not hasattr(est, "classes_")
    else:
        proba = est.predict_proba(data.X[:7])
        assert proba.shape == (7, est.classes_.size)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.isfinite(est.score(data)) and est.score(data) == est.score(data.X, data.y)


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_fit_does_not_mutate_or_replace_parameters(spec):
    data = dataset("logistic")
    extra = {}
    if accepts(spec, "weights"):
        extra["weights"] = np.array(SIZES, dtype=float)[::-1] / sum(SIZES)
    if accepts(spec, "init"):
        extra["init"] = np.full(data.n_features, 0.1)
    est = make(spec, **extra)
    check_fit_keeps_parameters(est, data)


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_no_learned_attributes_before_fit(spec):
    est = make(spec)
    public = [a for a in dir(est) if a.endswith("_") and not a.startswith("_")]
    assert "classes_" in public  # a property: must raise NotFittedError, not return data
    for name in public:
        with pytest.raises(NotFittedError):
            getattr(est, name)
    for call in (lambda: est.predict(dataset("logistic").X), lambda: est.mse(np.zeros(3)), est.summary,
                 lambda: est.score(dataset("logistic")), lambda: est.predict_proba(dataset("logistic").X)):
        with pytest.raises(NotFittedError, match="not fitted"):
            call()


# ---------------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_get_params_set_params_clone(spec):
    check_parameters(spec.cls(**spec.test_params), spec.cls().get_params(), spec.test_params, lambda: spec.cls(1.0))
    check_clone(make(spec).fit(dataset("logistic")), dataset("logistic"))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_pickle_round_trip(spec, family):
    data = dataset(family)
    check_pickle_round_trip(make(spec, family).fit(data), data.X)


# ---------------------------------------------------------------------------------- privacy
@pytest.mark.parametrize("spec", PRIVATE, ids=ids(PRIVATE))
def test_same_seed_same_numbers_different_seed_different_numbers(spec):
    data = dataset("logistic")
    a = make(spec, mu=MU, random_state=7).fit(data)
    assert_same_fit(make(spec, mu=MU, random_state=7).fit(data), a)
    b = make(spec, mu=MU, random_state=8).fit(data)
    assert np.all(a.coef_ != b.coef_)


def privacy_configs(specs):
    """(spec, family, extra parameters) for the ways a private fit chooses its bounds and scaling."""
    cases = []
    for spec in specs:
        for family in FAMILIES:
            cases.append(pytest.param(spec, family, {}, id=f"{spec.name}-{family}-auto"))
        cases.append(pytest.param(spec, "logistic", spec.fixed_clip_params(1.3), id=f"{spec.name}-fixed-clip"))
        if accepts(spec, "clip"):
            cases.append(pytest.param(spec, "logistic", {"clip": AutoClip(budget=0.3, quantile=0.5)},
                                      id=f"{spec.name}-autoclip"))
        if accepts(spec, "scaling"):
            cases.append(pytest.param(spec, "poisson", {"scaling": "private"}, id=f"{spec.name}-private-scaling"))
    return cases


@pytest.mark.parametrize("spec, family, params", privacy_configs(PRIVATE))
def test_ledger_spends_exactly_mu_per_client(spec, family, params):
    est = make(spec, family, mu=MU, **params).fit(dataset(family))
    led = est.privacy_
    np.testing.assert_allclose(led.client_mu, MU, rtol=0, atol=1e-12)
    assert led.is_private and led.leaks == [] and est.mu_ == MU


@pytest.mark.parametrize("spec", NON_PRIVATE, ids=ids(NON_PRIVATE))
def test_non_private_estimator_says_so(spec):
    est = make(spec).fit(dataset("logistic"))
    led = est.privacy_
    assert not led.is_private and led.leaks and np.all(np.isinf(led.client_mu))
    assert "NOT fully private" in est.summary().as_text()


@pytest.mark.parametrize("spec, family, params", privacy_configs(PRIVATE))
def test_communication_counts_every_transmission_once(spec, family, params, monkeypatch):
    """Every upload reaches the server through Channel.receive; the communication counts are exactly these
    uploads, with aggregated releases only in rounds of noisy messages and local releases only in rounds of
    perturbed values sent (:func:`_contract.check_communication`)."""
    sent = record_uploads(monkeypatch)
    data = dataset(family)
    check_communication(make(spec, family, mu=MU, **params).fit(data), sent, data.n_clients)


# ---------------------------------------------------------------------------------- results
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_summary_text_frame_html(spec, family):
    data = dataset(family)
    est = make(spec, family).fit(data)
    s = est.summary()
    text = s.as_text()
    for needle in (est.method, family, "No. Clients", "No. Observations", "Df Residuals"):
        assert needle in text
    assert (s.header["No. Clients"], s.header["No. Observations"]) == (str(data.n_clients), str(data.n_samples))
    frame = s.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == est.coef_.size
    np.testing.assert_array_equal(frame["coef"].to_numpy(), est.coef_.ravel(order="F"))  # one equation per class
    assert "<table>" in s._repr_html_()


# ---------------------------------------------------------------------------------- inference
INFERENCE_STAGES = ("inference-",)


def inference_stages(est) -> set:
    return {r.stage for r in est.privacy_.releases if r.stage.startswith(INFERENCE_STAGES)}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", INFERENCE, ids=ids(INFERENCE))
def test_every_fit_reports_its_uncertainty(spec, family):
    """inference_ is there, its covariance is symmetric PSD, bse_ > 0 finite, the summary shows statsmodels'
    columns; private fits spend exactly mu with inference stages listed."""
    data = dataset(family)
    params = {"mu": MU} if spec.private else {}
    est = make(spec, family, **params).fit(data)
    inf = est.inference_
    p = est.coef_.size
    names = est._coef_names()[0]
    cov = est.cov_params()
    assert cov.shape == (p, p) and list(cov.index) == list(names) and list(cov.columns) == list(names)
    V = cov.to_numpy()
    withheld = spec.private and not np.all(est.converged_)
    if withheld:  # a private fit that did not converge withholds bse_ and intervals (NaN); the two parts stay
        assert np.all(np.isnan(V)) and np.all(np.isnan(est.bse_)) and "withheld" in " ".join(inf.notes)
        V = inf.cov_sampling + inf.cov_privacy
    np.testing.assert_array_equal(V, V.T)
    # coefficients along directions the released Hessian does not identify: withheld (NaN rows), with a note
    shown = np.isfinite(np.diag(V))
    if not shown.all():
        assert spec.private and np.all(np.isnan(V[~shown])) and "withheld (NaN) for coefficient(s)" in " ".join(inf.notes)
        V = V[np.ix_(shown, shown)]
    assert not shown.any() or np.linalg.eigvalsh(V)[0] > 0
    bse = np.sqrt(np.diag(V)) if withheld else est.bse_.ravel(order="F")[shown]
    assert est.bse_.shape == est.coef_.shape and np.all(np.isfinite(bse)) and np.all(bse > 0)
    assert est.zvalues_.shape == est.pvalues_.shape == est.coef_.shape
    ci = est.conf_int()
    assert list(ci.columns) == ["lower", "upper"] and list(ci.index) == list(names)
    frame = est.summary().to_frame()
    stat = "t" if spec.private else "z"  # Student's t where the variance comes from noisy releases
    assert list(frame.columns) == ["coef", "std err", stat, f"P>|{stat}|", "[0.025", "0.975]"]
    np.testing.assert_array_equal(frame["std err"].to_numpy(), est.bse_.ravel(order="F"))
    assert "Inference" in est.summary().header
    if spec.private:
        np.testing.assert_allclose(est.privacy_.client_mu, MU, rtol=0, atol=1e-12)
        assert "inference-hessian" in inference_stages(est)
        assert inf.mu == pytest.approx(0.25 * MU) and inf.cov_type == "model"
        assert np.all(np.linalg.eigvalsh(inf.cov_privacy) > 0)  # the protocol's noise reaches every coefficient
    else:
        assert inference_stages(est) == set() and math.isinf(inf.mu)


def statsmodels_model(family: str, X: np.ndarray, y: np.ndarray):
    return {"logistic": sm.Logit, "poisson": sm.Poisson, "multinomial": sm.MNLogit}[family](y, X)


def reference_covariance(spec, est, data: FederatedData, family: str) -> np.ndarray:
    """The model-based covariance of an unclipped, noise-free fit, from statsmodels' Hessians of the log-likelihood.

    An M-estimate of all rows: ``(-hess(coef_))^-1`` (``-hess`` = N H). FedNewton's last step is a
    Newton step on the second halves (n2_i = n_i - floor(n_i / 2) rows) from a FedAvg stage on the
    first: ``c2 N (-hess)^-1`` with ``c2 = sum_i w_i^2 / n2_i``, w_i = n_i / N
    (:meth:`~privfedstat.theory.noise.NewtonNoise.sampling_maps`). LocalFit's average of independent
    local ridge fits: ``sum_i w_i^2 A_i^-1 I_i A_i^-1`` with ``I_i = -hess_i(theta_i)`` on client
    i's rows and ``A_i = I_i + n_i alpha I`` (the penalised objective's). Coefficients in
    ``coef_.ravel(order="F")`` order, as MNLogit's.
    """
    n = data.sizes
    w = n / n.sum()
    if spec.per_client:
        V = 0.0
        for wi, ni, rows, theta in zip(w, n, np.split(np.arange(data.n_samples), np.cumsum(n)[:-1]), est.local_coefs_):
            info = -statsmodels_model(family, data.X[rows], data.y[rows]).hessian(theta)
            penalised = np.linalg.inv(info + ni * est.alpha * np.eye(info.shape[0]))
            V = V + wi**2 * penalised @ info @ penalised
        return V
    V = np.linalg.inv(-statsmodels_model(family, data.X, data.y).hessian(est.coef_))
    if spec.name == "fednewton":
        V *= np.sum(w**2 / (n - n // 2)) * n.sum()
    return V


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", INFERENCE, ids=ids(INFERENCE))
def test_noise_free_inference_matches_statsmodels_and_scipy(spec, family):
    """With mu = inf and no clipping, cov_params, bse_, zvalues_, pvalues_ and conf_int equal statsmodels'
    inverse observed information at the estimate and scipy's normal quantiles; the privacy part is 0."""
    data = dataset(family)
    params = {"mu": math.inf, **spec.fixed_clip_params(math.inf)} if spec.private else {}
    est = make(spec, family, **params).fit(data)
    R = reference_covariance(spec, est, data, family)
    scale = np.max(np.abs(R))
    np.testing.assert_allclose(est.cov_params().to_numpy(), R, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(est.inference_.cov_sampling, R, rtol=0, atol=1e-9 * scale)
    np.testing.assert_array_equal(est.inference_.cov_privacy, 0.0)
    coef, se = est.coef_.ravel(order="F"), np.sqrt(np.diag(R))
    np.testing.assert_allclose(est.bse_.ravel(order="F"), se, rtol=1e-9)
    z = coef / se
    np.testing.assert_allclose(est.zvalues_.ravel(order="F"), z, rtol=1e-9)
    np.testing.assert_allclose(est.pvalues_.ravel(order="F"), 2 * stats.norm.sf(np.abs(z)), rtol=1e-8)
    ci = est.conf_int(0.1).to_numpy()
    np.testing.assert_allclose(ci, coef[:, None] + np.outer(se, stats.norm.ppf([0.05, 0.95])), rtol=1e-9)


@pytest.mark.parametrize("spec", INFERENCE, ids=ids(INFERENCE))
def test_inference_none_spends_nothing_on_it_and_says_how_to_get_it(spec):
    data = dataset("logistic")
    params = {"mu": MU} if spec.private else {}
    est = make(spec, inference=None, **params).fit(data)
    assert est.inference_ is None and inference_stages(est) == set()
    if spec.private:
        np.testing.assert_allclose(est.privacy_.client_mu, MU, rtol=0, atol=1e-12)
    for call in (lambda: est.bse_, lambda: est.pvalues_, lambda: est.zvalues_, est.cov_params, est.conf_int,
                 lambda: est.wald_test(np.eye(est.coef_.size))):
        with pytest.raises(NoInferenceError, match="inference='auto'"):
            call()
    assert "std err" not in est.summary().to_frame() and "inference=None" in est.summary().as_text()
