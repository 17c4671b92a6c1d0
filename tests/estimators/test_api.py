"""scikit-learn style contract, results objects, summary."""

import numpy as np
import pandas as pd
import pytest

from conftest import simulate
from privfedstat import FedAvg, FedHybrid, FedNewton, FedSGD, clone

ESTIMATORS = [FedSGD, FedHybrid, FedAvg, FedNewton]


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_params_roundtrip_and_clone(Est):
    est = Est(mu=3.0, random_state=4)
    params = est.get_params()
    assert params["mu"] == 3.0 and params["random_state"] == 4
    est.set_params(mu=5.0)
    assert est.mu == 5.0
    c = clone(est)
    assert type(c) is Est and c.get_params() == est.get_params() and c is not est
    with pytest.raises(ValueError, match="invalid parameter"):
        est.set_params(nonsense=1)
    with pytest.raises(TypeError):
        Est(2.0)  # keyword-only
    assert "mu=5.0" in repr(est)


def test_paper_defaults():
    assert FedSGD().n_iter == 50 and FedSGD().step_size == 0.5
    assert FedHybrid().n_local_steps == 30 and FedHybrid().n_server_iter == 20
    assert FedAvg().n_local_steps == 50 and FedAvg().n_rounds == 2
    assert FedNewton().n_local_steps == 50 and FedNewton().n_rounds == 1
    assert FedSGD().clip == "auto"


@pytest.mark.parametrize("Est", ESTIMATORS)
def test_fitted_attributes(Est, logistic_data):
    est = Est(random_state=0).fit(logistic_data)
    assert est.coef_.shape == (4,)
    assert est.history_.ndim == 2 and est.history_.shape[1] == 4
    np.testing.assert_array_equal(est.history_[-1], est.coef_)
    assert est.n_iter_ > 0
    assert est.clip_ > 0
    comm = est.communication_
    assert comm.total_floats == comm.floats_per_client * 20
    s = est.summary()
    text = s.as_text()
    for needle in (est.method, "logistic", "mu = 2", "Clipping bound B", "x3", "20 (N = 4000"):
        assert needle in text
    assert isinstance(s.to_frame(), pd.DataFrame) and list(s.to_frame().index) == ["x0", "x1", "x2", "x3"]
    assert "<table>" in s._repr_html_()
    p = est.predict(logistic_data.X[:5])
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-logistic_data.X[:5] @ est.coef_)))
    assert est.mse(np.zeros(4)) == pytest.approx(np.sum(est.coef_**2))


def test_communication_matches_table_1():
    data = simulate("logistic", [100] * 10, [0.2, 0.3, -0.1])
    d, q = 3, 6  # q: log2(64) private clip queries of one float each
    assert FedSGD(n_iter=50, random_state=0).fit(data).communication_.floats_per_client == 50 * d + q
    hy = FedHybrid(random_state=0).fit(data).communication_
    assert hy.rounds == 1 + 20 + q and hy.floats_per_client == (1 + 20) * d + q
    assert FedAvg(clip=1.0).fit(data).communication_.rounds == 2
    nw = FedNewton(clip=1.0, hessian_clip=1.0).fit(data).communication_
    assert nw.rounds == 2 and nw.floats_per_client == 2 * d


def test_fedsgd_history_starts_at_init(logistic_data):
    init = np.array([0.1, 0.2, 0.3, 0.4])
    est = FedSGD(init=init, n_iter=5, random_state=0).fit(logistic_data)
    np.testing.assert_array_equal(est.history_[0], init)
    assert est.history_.shape == (6, 4)


@pytest.mark.parametrize("family", ["poisson", "gaussian", "huber"])
def test_other_families_fit(family):
    beta = np.array([0.5, 0.3, -0.3])
    data = simulate("poisson" if family == "poisson" else "gaussian", [300] * 10, beta, seed=3)
    for Est in ESTIMATORS:
        est = Est(family=family, mu=4.0, random_state=0).fit(data)
        assert est.mse(beta) < 0.1, (family, Est.__name__, est.coef_)


def test_scores_against_independent_formulas():
    from sklearn.metrics import roc_auc_score

    data = simulate("logistic", [300] * 5, [0.3, 1.0, -1.0], seed=8)
    est = FedSGD(mu=float("inf"), clip=float("inf"), n_iter=500, step_size=1.0).fit(data)
    p = est.predict(data.X)
    assert est.score(data) == pytest.approx(roc_auc_score(data.y, p), rel=1e-12)
    assert est.score(data, metric="accuracy") == pytest.approx(np.mean((p >= 0.5) == data.y))
    dev = -2 * np.mean(data.y * np.log(p) + (1 - data.y) * np.log(1 - p))
    assert est.score((data.X, data.y), metric="deviance") == pytest.approx(dev, rel=1e-10)
    np.testing.assert_allclose(est.predict_proba(data.X[:3]).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="unknown metric"):
        est.score(data, metric="f1")


def test_poisson_deviance_matches_statsmodels():
    import statsmodels.api as sm

    data = simulate("poisson", [300] * 4, [0.3, 0.2, -0.2], seed=9)
    est = FedSGD(family="poisson", mu=float("inf"), clip=float("inf"), n_iter=2000, step_size=0.3).fit(data)
    fit = sm.GLM(data.y, data.X, family=sm.families.Poisson()).fit()
    assert est.score(data) == pytest.approx(fit.deviance / data.n_samples, rel=1e-6)
    with pytest.raises(ValueError, match="classifiers"):
        est.predict_proba(data.X)
