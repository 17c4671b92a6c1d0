"""FedNMap, Zhang and FedCanon on torch clients (issue 14): equal to the GLM backend on a linear logistic model,
the same record-level ledger with noise, minibatch calibration, a shallow network on label-sorted digits."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_normec import linear_model, logistic_loss  # noqa: E402  (the linear logistic model, x_0 = 0)
from torch import nn  # noqa: E402

from privfedstat import FedCanon, FederatedData, FedNMap, ZhangComposite  # noqa: E402
from privfedstat.deep import TensorFederatedData  # noqa: E402
from privfedstat.deep.data import FailingTensorData  # noqa: E402
from privfedstat.deep.fednmap import DeepFedCanon, DeepFedNMap, DeepZhang  # noqa: E402
from privfedstat.federation import FailingData  # noqa: E402
from privfedstat.simulations.composite_metrics import hoyer_sparsity  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SIZES = (12, 16, 10, 14)
PAIRS = [(FedNMap, DeepFedNMap), (ZhangComposite, DeepZhang), (FedCanon, DeepFedCanon)]


def logistic_data(seed=0):
    rng = np.random.default_rng(seed)
    n = sum(SIZES)
    X = rng.normal(size=(n, 3))
    y = (X @ np.array([1.0, -0.5, 0.0]) + rng.logistic(size=n) > 0).astype(np.int64)
    order = np.argsort(y, kind="stable")  # label-sorted clients: heterogeneous
    return X[order], y[order], np.repeat(np.arange(len(SIZES)), SIZES)


def pair(glm_cls, deep_cls, data_cls=TensorFederatedData, **kw):
    X, y, labels = logistic_data()
    tensors = data_cls.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))
    glm = glm_cls(family="logistic", unpenalized=(), **kw).fit(X, y, clients=labels)
    deep = deep_cls(model=linear_model(), loss=logistic_loss, **kw).fit(tensors)
    return glm, deep


@pytest.mark.parametrize("glm_cls, deep_cls", PAIRS)
@pytest.mark.parametrize("penalty", [dict(penalty="l1", alpha=0.1),
                                     dict(penalty="elasticnet", alpha=0.1, l1_ratio=0.5)])
def test_equals_the_glm_backend_without_noise(glm_cls, deep_cls, penalty):
    kw = dict(mu=math.inf, clip=math.inf, n_rounds=8, n_local_steps=3, step_size=0.4, server_step_size=0.8,
              random_state=1, **penalty)
    glm, deep = pair(glm_cls, deep_cls, **kw)
    np.testing.assert_allclose(np.asarray(deep.history_), np.asarray(glm.history_), atol=1e-6, rtol=0)
    if penalty["penalty"] == "l1":
        assert np.any(glm.coef_ == 0)  # the prox thresholds: phi is in play
    assert deep.communication_.floats_per_client == glm.communication_.floats_per_client


@pytest.mark.parametrize("glm_cls, deep_cls", PAIRS)
def test_same_record_level_ledger_as_the_glm_backend(glm_cls, deep_cls):
    kw = dict(mu=1.5, clip=0.8, n_rounds=4, n_local_steps=3, step_size=0.3, alpha=0.05, random_state=3)
    glm, deep = pair(glm_cls, deep_cls, **kw)
    a, b = glm.privacy_, deep.privacy_
    assert b.mu == pytest.approx(1.5, rel=1e-12) and a.mu == pytest.approx(b.mu, rel=1e-12)
    assert b.units == a.units == ("record",)
    assert len(a.releases) == len(b.releases) == 4 * 3
    for ra, rb in zip(a.releases, b.releases):
        assert (ra.stage, ra.kind, ra.round) == (rb.stage, rb.kind, rb.round) == ("local-gradient", "local", ra.round)
        np.testing.assert_allclose(rb.sensitivity, 2 * 0.8 / np.array(SIZES), rtol=1e-12)
        np.testing.assert_allclose(rb.sigma, ra.sigma, rtol=1e-12)
    again = pair(glm_cls, deep_cls, **kw)[1]
    np.testing.assert_array_equal(again.coef_, deep.coef_)  # same seed, same numbers


def test_minibatch_noise_is_calibrated_to_the_batch():
    X, y, _ = logistic_data()
    data = TensorFederatedData.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))
    est = DeepFedNMap(model=linear_model(), loss=logistic_loss, mu=1.0, clip=0.5, n_rounds=2, n_local_steps=2,
                      batch_size=8, random_state=0).fit(data)
    b = np.minimum(SIZES, 8)
    for rec in est.privacy_.releases:
        np.testing.assert_allclose(rec.sensitivity, 2 * 0.5 / b, rtol=1e-12)
    assert est.privacy_.mu == pytest.approx(1.0)


@pytest.mark.parametrize("glm_cls, deep_cls", PAIRS)
def test_a_failed_client_is_dropped_as_on_the_glm_backend(glm_cls, deep_cls):
    kw = dict(mu=math.inf, clip=math.inf, n_rounds=4, n_local_steps=2, step_size=0.3, alpha=0.05, random_state=0,
              on_client_failure="skip")
    X, y, _ = logistic_data()
    glm = glm_cls(family="logistic", unpenalized=(), **kw).fit(
        FailingData(FederatedData.from_pooled(X, y, sizes=list(SIZES)), {1: 2}))
    tensors = TensorFederatedData.from_pooled(torch.from_numpy(X), torch.from_numpy(y), sizes=list(SIZES))
    deep = deep_cls(model=linear_model(), loss=logistic_loss, **kw).fit(FailingTensorData(tensors, {1: 2}))
    np.testing.assert_allclose(np.asarray(deep.history_), np.asarray(glm.history_), atol=1e-6, rtol=0)
    assert len(deep.history_) == 5


def test_shallow_network_on_label_sorted_digits_gets_sparse():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = X[:400] / 16.0, y[:400]
    order = np.argsort(y, kind="stable")
    data = TensorFederatedData.from_pooled(torch.tensor(X[order], dtype=torch.float32), torch.from_numpy(y[order]),
                                           sizes=[100] * 4)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    kw = dict(model=net, mu=math.inf, clip=math.inf, n_rounds=15, n_local_steps=5, step_size=0.1, random_state=0)
    dense = DeepFedNMap(alpha=0.0, **kw).fit(data)
    sparse = DeepFedNMap(alpha=5e-3, **kw).fit(data)
    assert dense.score(data) > 0.5
    assert np.mean(sparse.coef_ == 0) > 0.2 and hoyer_sparsity(sparse.coef_) > hoyer_sparsity(dense.coef_)
    with pytest.raises(ValueError, match="step_size must be a number"):
        DeepFedNMap(step_size="auto", **{k: v for k, v in kw.items() if k != "step_size"}).fit(data)
