"""The estimator contract, checked for every registered estimator (scikit-learn's check_estimator in spirit).

Every test is parametrized over ``privfedstat.estimators.registry.methods()`` with each spec's
``test_params``: a new estimator joins the suite by being registered. The only per-estimator facts
used are the registry's (``private``, ``test_params``, ``fixed_clip_params``) and the parameter
names an estimator accepts.
"""

import functools
import math
import pickle

import numpy as np
import pandas as pd
import pytest

from conftest import simulate
from privfedstat import AutoClip, FederatedData, NoInferenceError, NotFittedError, clone
from privfedstat.estimators.registry import methods
from privfedstat.families import get_family
from privfedstat.federation.channel import Channel, Communication
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


def assert_same_fit(a, b):
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.history_, b.history_)
    pd.testing.assert_frame_equal(a.privacy_.to_frame(), b.privacy_.to_frame())
    assert a.privacy_.leaks == b.privacy_.leaks
    assert a.communication_ == b.communication_


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
    before = est.get_params()
    frozen = {k: pickle.dumps(v) for k, v in before.items()}
    est.fit(data)
    after = est.get_params()
    assert after.keys() == before.keys()
    for k, v in after.items():
        assert v is before[k], k
        assert pickle.dumps(v) == frozen[k], k


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
    est = spec.cls(**spec.test_params)
    params, defaults = est.get_params(), spec.cls().get_params()
    for k, v in spec.test_params.items():
        assert params[k] is v
        assert (f"{k}={v!r}" in repr(est)) == (v != defaults[k])  # repr shows the non-default parameters
    for name in params:  # every parameter is stored as given and settable
        token = object()
        assert est.set_params(**{name: token}) is est and est.get_params()[name] is token
    est.set_params(**params)
    with pytest.raises(ValueError, match="invalid parameter 'nonsense'"):
        est.set_params(nonsense=1)
    with pytest.raises(TypeError):
        spec.cls(1.0)  # parameters are keyword-only
    fitted = make(spec).fit(dataset("logistic"))
    copy = clone(fitted)
    assert type(copy) is spec.cls and copy is not fitted and not hasattr(copy, "coef_")
    assert pickle.dumps(copy.get_params()) == pickle.dumps(fitted.get_params())
    assert_same_fit(copy.fit(dataset("logistic")), fitted)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_pickle_round_trip(spec, family):
    data = dataset(family)
    est = make(spec, family).fit(data)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict(data.X), est.predict(data.X))
    assert_same_fit(back, est)
    assert back.summary().as_text() == est.summary().as_text()


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
    """Every upload reaches the server through Channel.receive, as a reply of aggregated releases (noisy
    messages) or of local releases (post-processing of perturbed values sent); the communication counts
    are exactly these uploads, and the ledger has aggregated releases only in the former rounds and
    local releases only in the latter."""
    sent = []  # (kind, floats per client) per upload, in order
    receive = Channel.receive

    def recording_receive(self, reply, **kw):
        if kw.get("sent", True):
            kinds = {r.kind for r in reply.releases} or {"aggregated"}
            assert len(kinds) == 1
            sent.append(("release" if kinds == {"aggregated"} else "send", np.asarray(reply.values)[0].size))
        return receive(self, reply, **kw)

    monkeypatch.setattr(Channel, "receive", recording_receive)
    data = dataset(family)
    est = make(spec, family, mu=MU, **params).fit(data)
    comm = est.communication_
    assert comm.rounds == len(sent)
    assert comm.floats_per_client == sum(n for _, n in sent)
    assert comm.total_floats == comm.floats_per_client * data.n_clients
    releases = est.privacy_.releases
    aggregated = [r.round for r in releases if r.kind == "aggregated"]
    assert aggregated == [i for i, (how, _) in enumerate(sent) if how == "release"]
    local = {r.round for r in releases if r.kind == "local"}
    assert local == {i for i, (how, _) in enumerate(sent) if how == "send"}


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
    """inference_ is there, its covariance is symmetric PSD, bse_ > 0 finite, intervals contain coef_,
    and the summary shows statsmodels' columns; private fits spend exactly mu with inference stages listed."""
    data = dataset(family)
    params = {"mu": MU} if spec.private else {}
    est = make(spec, family, **params).fit(data)
    inf = est.inference_
    p = est.coef_.size
    names = est._coef_names()[0]
    cov = est.cov_params()
    assert cov.shape == (p, p) and list(cov.index) == list(names) and list(cov.columns) == list(names)
    V = cov.to_numpy()
    np.testing.assert_array_equal(V, V.T)
    assert np.linalg.eigvalsh(V)[0] > 0
    np.testing.assert_allclose(inf.cov, inf.cov_sampling + inf.cov_privacy, rtol=1e-12, atol=0)
    assert est.bse_.shape == est.coef_.shape and np.all(np.isfinite(est.bse_)) and np.all(est.bse_ > 0)
    np.testing.assert_allclose(est.bse_.ravel(order="F"), np.sqrt(np.diag(V)))
    np.testing.assert_allclose(est.zvalues_, est.coef_ / est.bse_)
    assert np.all((est.pvalues_ >= 0) & (est.pvalues_ <= 1))
    ci = est.conf_int()
    assert list(ci.columns) == ["lower", "upper"] and list(ci.index) == list(names)
    coef = est.coef_.ravel(order="F")
    assert np.all(ci["lower"].to_numpy() < coef) and np.all(coef < ci["upper"].to_numpy())
    frame = est.summary().to_frame()
    assert list(frame.columns) == ["coef", "std err", "z", "P>|z|", "[0.025", "0.975]"]
    np.testing.assert_array_equal(frame["std err"].to_numpy(), est.bse_.ravel(order="F"))
    assert "Inference" in est.summary().header
    if spec.private:
        np.testing.assert_allclose(est.privacy_.client_mu, MU, rtol=0, atol=1e-12)
        assert "inference-hessian" in inference_stages(est)
        assert inf.mu == pytest.approx(0.25 * MU) and inf.cov_type == ("model" if family != "gaussian" else "sandwich")
    else:
        assert inference_stages(est) == set() and math.isinf(inf.mu)


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
