"""scikit-learn interoperability: tags, clone, fit(X, y, clients=...), Pipeline, cross-validation, grid search.

Registry-parametrized where cheap, so that a newly registered estimator is checked too.
"""

import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import simulate
from test_contract import SPECS, assert_same_fit, dataset, ids, make

from privfedstat import FederatedData, FedIRLS, FedSGD, NoInterceptWarning, NotFittedError, SingleClientWarning, clone
from privfedstat.algorithms.registry import methods

sklearn = pytest.importorskip("sklearn", minversion="1.6")  # the tags protocol (__sklearn_tags__) is 1.6+
from sklearn import base as skbase  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score, cross_validate  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils import get_tags  # noqa: E402

INF = float("inf")


def pooled(family="logistic", n_clients=12, n=50, seed=2, beta=(0.3, 1.0, -1.0)):
    """Rows of ``n_clients`` clients in random order, with string client labels: (X, y, clients)."""
    data = simulate(family, [n] * n_clients, list(beta), seed=seed)
    perm = np.random.default_rng(seed).permutation(data.n_samples)
    labels = np.repeat([f"site-{i:02d}" for i in range(n_clients)], n)
    return data.X[perm], data.y[perm], labels[perm]


@pytest.mark.parametrize("family", ["logistic", "poisson", "multinomial"])
@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_tags_and_sklearn_clone(spec, family):
    est = make(spec, family)
    tags = get_tags(est)
    classifier = family != "poisson"
    assert skbase.is_classifier(est) == classifier and skbase.is_regressor(est) == (not classifier)
    assert tags.target_tags.required
    if classifier:
        assert tags.classifier_tags.multi_class == (family == "multinomial")
    copy = skbase.clone(est)
    assert type(copy) is spec.cls and copy is not est
    assert repr(copy) == repr(est) == repr(clone(est))


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_fit_on_arrays_with_client_labels_is_fit_on_federated_data(spec):
    X, y, clients = pooled(n_clients=5, n=40)
    by_label = FederatedData.from_arrays([(X[clients == c], y[clients == c]) for c in sorted(set(clients))])
    a = make(spec).fit(X, y, clients=clients)
    assert_same_fit(a, make(spec).fit(by_label))
    assert a.n_clients_ == 5 and a.n_samples_ == 200


def test_fit_input_errors():
    X, y, clients = pooled(n_clients=3, n=20)
    data = FederatedData.from_pooled(X, y, clients=clients)
    est = FedSGD(n_iter=2)
    with pytest.raises(TypeError, match="already holds y"):
        est.fit(data, y)
    with pytest.raises(TypeError, match="already holds y"):
        est.fit(data, clients=clients)
    with pytest.raises(ValueError, match="requires y"):
        est.fit(X, clients=clients)
    with pytest.raises(ValueError, match="one label per row"):
        est.fit(X, y, clients=clients[:-1])
    with pytest.raises(ValueError, match="rows but y has"):
        est.fit(X, y[:-1], clients=clients)
    with pytest.raises(ValueError, match="dimension"):
        est.fit(X, y[:, None], clients=clients)
    with pytest.raises(ValueError, match="X"):
        est.fit(X[:, 0], y, clients=clients)


def test_score_in_the_sklearn_signature():
    X, y, clients = pooled("poisson", n_clients=4, n=50, beta=(0.3, 0.2, -0.2))
    data = FederatedData.from_pooled(X, y, clients=clients)
    est = FedSGD(family="poisson", mu=INF, clip=INF, n_iter=50, step_size=0.3).fit(X, y, clients=clients)
    dev = est.score(data, metric="deviance")
    assert est.score(data) == -dev  # greater is better: minus the mean deviance
    assert est.score(X, y) == pytest.approx(-dev, rel=1e-12)  # rows in another order
    assert est.score(X, y, metric="deviance") == pytest.approx(dev, rel=1e-12)
    with pytest.raises(TypeError, match="needs the responses"):
        est.score(X)
    with pytest.raises(TypeError, match="already holds y"):
        est.score(data, y)
    with pytest.raises(ValueError, match="one response per row"):
        est.score(X, y[:-1])
    with pytest.raises(ValueError, match="poisson"):
        est.score(X, -y - 1)
    with pytest.raises(ValueError, match="shape"):
        est.score(X[:, :2], y)


@pytest.mark.parametrize("spec", SPECS, ids=ids(SPECS))
def test_cross_validation_keeps_clients_whole(spec):
    """GroupKFold over client labels: every fold trains on whole clients (fit gets their labels
    through params=) and the scores are those of a manual loop."""
    X, y, clients = pooled()
    est = make(spec)
    cv = GroupKFold(n_splits=3)
    res = cross_validate(est, X, y, groups=clients, cv=cv, params={"clients": clients},
                         return_estimator=True, return_indices=True)
    for fitted, train, test, score in zip(res["estimator"], res["indices"]["train"], res["indices"]["test"],
                                          res["test_score"]):
        assert set(clients[train]).isdisjoint(clients[test])
        assert fitted.n_clients_ == len(set(clients[train])) == 8 and fitted.n_samples_ == train.size
        manual = clone(est).fit(X[train], y[train], clients=clients[train])
        assert score == manual.score(X[test], y[test])
    np.testing.assert_array_equal(
        cross_val_score(est, X, y, groups=clients, cv=cv, params={"clients": clients}), res["test_score"])


def test_probability_scorers_use_classes_and_predict_proba():
    X, y, clients = pooled()
    est = FedSGD(mu=2.0, n_iter=20, random_state=0)
    kw = dict(groups=clients, cv=GroupKFold(n_splits=3), params={"clients": clients})
    auc = cross_val_score(est, X, y, **kw)
    np.testing.assert_allclose(cross_val_score(est, X, y, scoring="roc_auc", **kw), auc, rtol=1e-12)
    assert np.all(cross_val_score(est, X, y, scoring="neg_log_loss", **kw) < 0)
    multi = make(methods()[0], "multinomial")
    data = dataset("multinomial")
    labels = np.repeat(np.arange(data.n_clients), data.sizes)
    acc = cross_val_score(multi, data.X, data.y, groups=labels, cv=GroupKFold(n_splits=3), params={"clients": labels})
    assert np.all((acc > 0) & (acc <= 1))


def test_pipeline_with_a_scaler_step():
    X, y, clients = pooled()
    X = X[:, 1:]  # no intercept column: the scaler would zero it
    pipe = make_pipeline(StandardScaler(), FedSGD(mu=2.0, n_iter=20, random_state=0))
    pipe.fit(X, y, fedsgd__clients=clients)
    Z = StandardScaler().fit_transform(X)
    direct = FedSGD(mu=2.0, n_iter=20, random_state=0).fit(Z, y, clients=clients)
    np.testing.assert_array_equal(pipe[-1].coef_, direct.coef_)
    np.testing.assert_array_equal(pipe.predict_proba(X), direct.predict_proba(Z))
    scores = cross_val_score(pipe, X, y, groups=clients, cv=GroupKFold(n_splits=3),
                             params={"fedsgd__clients": clients})
    assert np.all(scores > 0.7)


def test_grid_search_over_step_size_and_mu():
    """The default score is greater-is-better for every family, so the search picks the right end."""
    X, y, clients = pooled("poisson", beta=(0.3, 0.2, -0.2))
    est = FedSGD(family="poisson", mu=INF, clip=INF, n_iter=20, random_state=0)
    grid = GridSearchCV(est, {"step_size": [0.002, 0.5]}, cv=GroupKFold(n_splits=3))
    grid.fit(X, y, groups=clients, clients=clients)
    assert grid.best_params_ == {"step_size": 0.5}
    assert grid.best_estimator_.n_clients_ == 12
    X, y, clients = pooled()
    grid = GridSearchCV(FedSGD(n_iter=20, clip=1.0, random_state=0), {"mu": [0.02, 4.0]}, cv=GroupKFold(n_splits=3))
    grid.fit(X, y, groups=clients, clients=clients)
    assert grid.best_params_ == {"mu": 4.0}


@pytest.mark.slow
def test_the_package_imports_and_fits_without_sklearn():
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import numpy as np, privfedstat as pfs\n"
        "X = np.column_stack([np.ones(40), np.arange(40) % 3]); y = (np.arange(40) % 2).astype(float)\n"
        "est = pfs.FedSGD(n_iter=2, random_state=0).fit(X, y, clients=np.arange(40) % 4)\n"
        "assert pfs.clone(est).get_params() == est.get_params() and est.classes_.size == 2\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_fit_without_clients_is_one_client_and_says_so():
    X, y, clients = pooled(n_clients=3, n=40)
    with pytest.warns(SingleClientWarning, match="one client"):
        est = FedSGD(n_iter=5, random_state=0).fit(X, y)
    assert est.n_clients_ == 1 and est.n_samples_ == 120
    one = FedSGD(n_iter=5, random_state=0).fit(X, y, clients=np.zeros(120))
    np.testing.assert_array_equal(est.coef_, one.coef_)


def test_no_intercept_warning_on_caller_arrays_only():
    """A StandardScaler step zeros the column of ones: the fit warns about the design the caller passed; a
    FederatedData (the clients' rows, as the paper's studies pass them) is not inspected."""
    X, y, clients = pooled(n_clients=4, n=50)
    assert y.mean() > 0.5
    pipe = make_pipeline(StandardScaler(), FedIRLS(mu=INF))
    with pytest.warns(NoInterceptWarning, match="add_constant"):
        pipe.fit(X, y, fedirls__clients=clients)
    import warnings

    import statsmodels.api as sm
    from sklearn.preprocessing import FunctionTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("error", NoInterceptWarning)
        FedIRLS(mu=INF).fit(X, y, clients=clients)  # the column of ones is there
        FedIRLS(mu=INF).fit(FederatedData.from_pooled(X[:, 1:], y, clients=clients))
        fixed = make_pipeline(StandardScaler(), FunctionTransformer(sm.add_constant), FedIRLS(mu=INF))
        fixed.fit(X, y, fedirls__clients=clients)
    assert abs(fixed.predict_proba(X)[:, 1].mean() - y.mean()) < 1e-6  # the intercept matches the mean
    assert abs(pipe.predict_proba(X)[:, 1].mean() - y.mean()) > 0.05


def test_not_fitted_error_is_sklearns():
    from sklearn.exceptions import NotFittedError as SkNotFitted
    from sklearn.utils.validation import check_is_fitted

    assert issubclass(NotFittedError, SkNotFitted) and issubclass(NotFittedError, (ValueError, AttributeError))
    with pytest.raises(SkNotFitted):
        FedSGD().predict(np.ones((2, 3)))
    with pytest.raises(SkNotFitted):
        check_is_fitted(FedSGD())
    code = ("import sys; sys.modules['sklearn'] = None\n"
            "from privfedstat import NotFittedError\n"
            "assert NotFittedError.__mro__[1:3] == (ValueError, AttributeError)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_grid_search_over_a_numeric_clip_alone():
    """A finite clip is a complete setting: FedIRLS then chooses its Hessian bound privately."""
    X, y, clients = pooled()
    grid = GridSearchCV(FedIRLS(mu=4.0, random_state=0), {"clip": [0.5, 2.0, "auto"]}, cv=GroupKFold(n_splits=3),
                        error_score="raise")
    grid.fit(X, y, groups=clients, clients=clients)
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))
    est = FedIRLS(mu=4.0, clip=1.0, random_state=0).fit(X, y, clients=clients)
    assert est.clip_ == 1.0 and "clip-hessian" in est.privacy_.by_stage().index
    assert math.isinf(FedIRLS(mu=INF, clip=1.0).fit(X, y, clients=clients).privacy_.mu)
