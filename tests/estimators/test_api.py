"""Results of particular estimators against independent references (the shared contract is in test_contract.py)."""

import numpy as np
import pytest
from conftest import simulate
from test_contract import dataset

from privfedstat import AutoClip, FedAvg, FedHybrid, FedNewton, FedSGD, get_family

ESTIMATORS = [FedSGD, FedHybrid, FedAvg, FedNewton]


def test_summary_names_the_terms_and_states_the_budget(logistic_data):
    est = FedSGD(random_state=0).fit(logistic_data)
    s = est.summary()
    assert (s.header["No. Clients"], s.header["No. Observations"]) == ("20", "4000")
    for needle in ("mu = 2 per client", "Clipping bound B", "x3"):
        assert needle in s.as_text()
    assert list(s.to_frame().index) == ["x0", "x1", "x2", "x3"]


def test_predict_is_the_inverse_link_of_the_linear_predictor():
    """Against the textbook formulas (not the family objects the code uses)."""
    X = np.random.default_rng(0).standard_normal((6, 3))
    for family, beta in [("logistic", [0.5, -1.0, 2.0]), ("poisson", [0.1, 0.3, -0.2])]:
        data = simulate(family, [100] * 3, beta)
        est = FedSGD(family=family, n_iter=5, random_state=0).fit(data)
        eta = X @ est.coef_
        np.testing.assert_allclose(est.predict(X), 1 / (1 + np.exp(-eta)) if family == "logistic" else np.exp(eta),
                                   rtol=1e-12)
    est = FedSGD(family=get_family("multinomial", n_classes=3), n_iter=5, random_state=0).fit(dataset("multinomial"))
    E = np.exp(np.column_stack([np.zeros(6), X @ est.coef_]))  # class 0 is the reference
    np.testing.assert_allclose(est.predict(X), E / E.sum(axis=1, keepdims=True), rtol=1e-12)


def test_communication_matches_table_1():
    """The protocols' own communication (inference=None: no inference releases after them)."""
    data = simulate("logistic", [100] * 10, [0.2, 0.3, -0.1])
    d, q = 3, 6  # q: log2(64) private clip queries of one float each (the paper's bound at theta = 0)
    off = {"inference": None, "random_state": 0}
    assert FedSGD(n_iter=50, clip=AutoClip(), **off).fit(data).communication_.floats_per_client == 50 * d + q
    pilot = FedSGD(n_iter=50, **off).fit(data).communication_  # clip="auto": search, 5 pilot rounds, search
    assert pilot.rounds == 50 + 2 * q + 5 and pilot.floats_per_client == (50 + 5) * d + 2 * q
    hy = FedHybrid(clip=AutoClip(), **off).fit(data).communication_
    assert hy.rounds == 1 + 20 + q and hy.floats_per_client == (1 + 20) * d + q
    assert FedAvg(clip=1.0, inference=None).fit(data).communication_.rounds == 2
    nw = FedNewton(clip=1.0, hessian_clip=1.0, inference=None).fit(data).communication_
    assert nw.rounds == 3 and nw.floats_per_client == 2 * d + d * (d + 1) // 2  # the shared Hessian: d (d + 1) / 2
    paper = FedNewton(clip=1.0, hessian_clip=1.0, newton_noise="paper", inference=None).fit(data).communication_
    assert paper.rounds == 2 and paper.floats_per_client == 2 * d  # Algorithm 4: the Newton step only


def test_inference_releases_add_one_round_each():
    """Model-based inference at the default budget: FedSGD searches C_H (6 counts), releases the score at the
    estimate (d floats, the convergence verdict), counts its clipped gradients there (1 float), releases what
    clipping removes there (d floats, the clipping bias) and the Hessian (d (d + 1) / 2 floats); FedNewton reuses
    its C_H, so adds the score, the count, the clipped excess and the Hessian."""
    data = simulate("logistic", [100] * 10, [0.2, 0.3, -0.1])
    d, q = 3, 6
    base = FedSGD(n_iter=50, clip=AutoClip(), inference=None, random_state=0).fit(data).communication_
    full = FedSGD(n_iter=50, clip=AutoClip(), random_state=0).fit(data).communication_
    assert full.rounds - base.rounds == q + 4
    assert full.floats_per_client - base.floats_per_client == q + 2 * d + 1 + d * (d + 1) // 2
    nw = FedNewton(clip=1.0, hessian_clip=1.0).fit(data).communication_
    assert nw.rounds == 7 and nw.floats_per_client == 4 * d + 1 + 2 * (d * (d + 1) // 2)


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
    assert est.score(data.X, data.y, metric="deviance") == pytest.approx(dev, rel=1e-10)
    np.testing.assert_allclose(est.predict_proba(data.X[:3]).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="unknown metric"):
        est.score(data, metric="f1")


def test_poisson_deviance_matches_statsmodels():
    import statsmodels.api as sm

    data = simulate("poisson", [300] * 4, [0.3, 0.2, -0.2], seed=9)
    est = FedSGD(family="poisson", mu=float("inf"), clip=float("inf"), n_iter=2000, step_size=0.3).fit(data)
    fit = sm.GLM(data.y, data.X, family=sm.families.Poisson()).fit()
    assert est.score(data, metric="deviance") == pytest.approx(fit.deviance / data.n_samples, rel=1e-6)
    with pytest.raises(AttributeError, match="classifiers"):
        est.predict_proba(data.X)
    assert not hasattr(est, "predict_proba")  # a regressor: scikit-learn's tools do not take it for a classifier
