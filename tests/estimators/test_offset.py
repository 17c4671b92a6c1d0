"""Offsets of the linear predictor (``offset=`` / ``exposure=``): FederatedData, the estimators, glm().

Fits at mu = inf without clipping are checked against statsmodels' ``GLM(offset=, exposure=)``
(an independent implementation) to 1e-6, predictions too.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from privfedstat import FederatedData, glm
from privfedstat.algorithms import FedSGD, LocalFit, PooledMLE
from privfedstat.algorithms.registry import REGISTRY

INF = math.inf
SM_FAMILY = {"poisson": sm.families.Poisson(), "gaussian": sm.families.Gaussian()}


@pytest.fixture(scope="module")
def df():
    rng = np.random.default_rng(11)
    n = 500
    d = pd.DataFrame({"x": rng.normal(size=n), "z": rng.uniform(-1, 1, size=n), "t": rng.uniform(0.2, 5.0, size=n),
                      "o": rng.normal(0.0, 0.5, size=n), "site": rng.integers(0, 6, size=n)})
    d["count"] = rng.poisson(d.t * np.exp(d.o + 0.2 + 0.5 * d.x - 0.4 * d.z)).astype(float)
    d["value"] = 1.0 + 2.0 * d.x - d.z + d.o + np.log(d.t) + rng.normal(size=n)
    return d


def reference(df, family, offset, exposure):
    response = "count" if family == "poisson" else "value"
    kw = {k: df[v] for k, v in (("offset", offset), ("exposure", exposure)) if v is not None}
    return response, sm.GLM(df[response], sm.add_constant(df[["x", "z"]]), family=SM_FAMILY[family], **kw).fit()


CASES = [("poisson", None, "t"), ("poisson", "o", None), ("poisson", "o", "t"), ("gaussian", "o", None)]
METHODS = {"pooled": {}, "fedirls": {"clip": INF}, "fedsgd": {"clip": INF, "n_iter": 500}}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("family, offset, exposure", CASES)
def test_glm_matches_statsmodels(df, method, family, offset, exposure):
    response, ref = reference(df, family, offset, exposure)
    est = glm(f"{response} ~ x + z", df, client="site", family=family, method=method, mu=INF, offset=offset,
              exposure=exposure, **METHODS[method])
    np.testing.assert_allclose(est.coef_, ref.params.to_numpy(), rtol=0, atol=1e-6)
    assert est.has_offset_ and est.offset_columns_ == {k: v for k, v in (("offset", offset), ("exposure", exposure))
                                                       if v is not None}
    # predict(df) reads the same columns from new rows; statsmodels' predict with the same offset
    new = df.iloc[:40]
    kw = {k: new[v] for k, v in (("offset", offset), ("exposure", exposure)) if v is not None}
    want = ref.predict(sm.add_constant(new[["x", "z"]], has_constant="add"), **kw).to_numpy()
    np.testing.assert_allclose(est.predict(new), want, rtol=1e-5)


def test_offset_changes_the_fit(df):
    # a test that could not fail if the offset were ignored: the fits with and without it differ
    with_offset = glm("count ~ x + z", df, client="site", family="poisson", method="pooled", mu=INF, exposure="t")
    without = glm("count ~ x + z", df, client="site", family="poisson", method="pooled", mu=INF)
    assert np.max(np.abs(with_offset.coef_ - without.coef_)) > 0.1


def test_an_offset_term_in_the_formula_says_to_pass_it_as_an_argument(df):
    """R writes ``y ~ x + offset(log(t))``; glm(), as statsmodels, takes ``offset=`` / ``exposure=``: the error says so."""
    for term in ("offset(o)", "exposure(t)"):
        with pytest.raises(ValueError, match="offset is an argument, not a term: glm"):
            glm(f"count ~ x + {term}", df, client="site", family="poisson", mu=INF)


def test_array_api_equals_glm_and_statsmodels(df):
    _, ref = reference(df, "poisson", "o", "t")
    X = sm.add_constant(df[["x", "z"]]).to_numpy()
    o = df.o.to_numpy() + np.log(df.t.to_numpy())
    y = df["count"].to_numpy()
    for est in (PooledMLE(family="poisson"), FedSGD(family="poisson", mu=INF, clip=INF, n_iter=500, scaling=None)):
        est.fit(X, y, clients=df.site.to_numpy(), offset=o)
        np.testing.assert_allclose(est.coef_, ref.params.to_numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(est.predict(X[:30], offset=o[:30]), ref.fittedvalues.to_numpy()[:30], rtol=1e-5)
        np.testing.assert_allclose(est.predict(X[:30], offset=df.o.to_numpy()[:30], exposure=df.t.to_numpy()[:30]),
                                   ref.fittedvalues.to_numpy()[:30], rtol=1e-5)
        with pytest.raises(ValueError, match="fitted with an offset"):
            est.predict(X[:30])
        # a FederatedData brings its own offset to predict and score
        data = FederatedData.from_pooled(X, y, sizes=[len(y)], offset=o)
        np.testing.assert_allclose(est.predict(data), ref.fittedvalues.to_numpy(), rtol=1e-5)
        dev = float(np.mean(sm.families.Poisson().resid_dev(y, ref.fittedvalues.to_numpy()) ** 2))
        np.testing.assert_allclose(est.score(data, metric="deviance"), dev, rtol=1e-5)
        np.testing.assert_allclose(est.score(X, y, offset=o, metric="deviance"), dev, rtol=1e-5)


def test_localfit_uses_each_clients_offset(df):
    X = sm.add_constant(df[["x", "z"]]).to_numpy()
    o, y, site = np.log(df.t.to_numpy()), df["count"].to_numpy(), df.site.to_numpy()
    est = LocalFit(family="poisson", alpha=0.0).fit(X, y, clients=site, offset=o)
    for i, label in enumerate(np.unique(site)):
        rows = site == label
        ref = sm.GLM(y[rows], X[rows], family=sm.families.Poisson(), offset=o[rows]).fit()
        np.testing.assert_allclose(est.local_coefs_[i], ref.params, atol=1e-6)
        np.testing.assert_allclose(est.predict(X[rows], client=i, offset=o[rows]), ref.fittedvalues, rtol=1e-5)


@pytest.mark.filterwarnings("ignore::UserWarning")  # tiny private fits: the accuracy diagnostics speak up
@pytest.mark.parametrize("name", sorted(n for n, spec in REGISTRY.items() if spec.private))
def test_private_fits_with_offset_are_finite_and_spend_exactly_mu(df, name):
    # finite mu: offsets (huge finite ones included) go through clipping and every private protocol
    spec = REGISTRY[name]
    big = df.assign(o=np.where(np.arange(len(df)) % 50 == 0, 1e300, df.o))
    est = glm("count ~ x + z", big, client="site", family="poisson", method=name, mu=1.0, offset="o", random_state=0,
              **spec.test_params)
    assert np.all(np.isfinite(est.coef_))
    np.testing.assert_allclose(est.privacy_.client_mu, 1.0, rtol=1e-9)


# --------------------------------------------------------------------------- glm() and predict errors
def test_glm_with_offset_array_needs_the_offset_to_predict(df):
    est = glm("count ~ x + z", df, client="site", family="poisson", method="pooled", mu=INF,
              exposure=df.t.to_numpy())
    assert est.offset_columns_ is None
    with pytest.raises(ValueError, match="fitted with an offset"):
        est.predict(df)
    by_column = glm("count ~ x + z", df, client="site", family="poisson", method="pooled", mu=INF, exposure="t")
    np.testing.assert_allclose(est.predict(df, exposure=df.t), by_column.predict(df), rtol=1e-12)
    with pytest.raises(ValueError, match=r"offset column\(s\) \['t'\] are not in the data"):
        by_column.predict(df.drop(columns="t"))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"exposure": "nope"}, ValueError, "exposure column 'nope' is not in the data"),
    ({"offset": np.zeros(3)}, ValueError, r"one value per row of data \(500\)"),
    ({"offset": "site_name"}, TypeError, "must be numeric"),
    ({"exposure": "neg"}, ValueError, r"exposure must be > 0.*1 row"),
    ({"offset": "gap"}, ValueError, r"offset: 2 row\(s\) have a missing or non-finite value"),
    ({"exposure": "t", "family": "gaussian"}, ValueError, r"exposure is for the log link \(family='poisson'\)"),
])
def test_glm_offset_errors(df, kwargs, error, match):
    bad = df.assign(site_name="a", neg=np.where(np.arange(len(df)) == 3, 0.0, 1.0),
                    gap=np.where(np.arange(len(df)) < 2, np.nan, 0.0))
    kwargs = {"family": "poisson", **kwargs}
    with pytest.raises(error, match=match):
        glm("count ~ x", bad, client="site", method="pooled", mu=INF, **kwargs)


def test_multinomial_takes_no_offset(df):
    cls = df.assign(k=pd.Categorical(np.asarray(df["count"]).clip(0, 2).astype(int), categories=[0, 1, 2]))
    with pytest.raises(ValueError, match="multinomial family takes no offset"):
        glm("k ~ x", cls, client="site", family="multinomial", method="pooled", mu=INF, offset="o")
    est = glm("k ~ x", cls, client="site", family="multinomial", method="pooled", mu=INF)
    with pytest.raises(ValueError, match="multinomial family takes no offset"):
        est.predict(cls, offset=cls.o)


# --------------------------------------------------------------------------- FederatedData
def test_federated_data_carries_the_offset_with_its_rows():
    rng = np.random.default_rng(0)
    X, y, o = rng.normal(size=(9, 2)), rng.normal(size=9), np.arange(9.0)
    labels = np.array([2, 0, 1, 0, 2, 1, 1, 0, 2])
    fd = FederatedData.from_pooled(X, y, clients=labels, offset=o)
    for i in range(3):
        Xi, yi, oi = fd.client(i)
        np.testing.assert_array_equal(oi, o[labels == i])  # reordered with its rows
        np.testing.assert_array_equal(Xi, X[labels == i])
    again = FederatedData.from_arrays([fd.client(i) for i in range(3)])  # client() gives what from_arrays takes
    np.testing.assert_array_equal(again.offset, fd.offset)
    a, b = fd.split_halves(random_state=1)
    for half in (a, b):  # each row keeps its offset (o_j = j identifies the row)
        rows = half.offset.astype(int)
        np.testing.assert_array_equal(half.X, X[rows])
        np.testing.assert_array_equal(half.y, y[rows])
    assert not fd.offset.flags.writeable and not fd.eta_offset.flags.writeable
    assert o.flags.writeable  # the caller's array is copied, not frozen
    plain = FederatedData.from_pooled(X, y, sizes=[4, 5])
    assert plain.offset is None and plain.eta_offset.size == 0 and len(plain.client(0)) == 2
    assert "with offset" in repr(fd) and "offset" not in repr(plain)


@pytest.mark.parametrize("build, match", [
    (lambda X, y: FederatedData.from_pooled(X, y, sizes=[2, 2], offset=[0.0, np.inf, 0.0, 0.0]), "offset contains 1 NaN"),
    (lambda X, y: FederatedData.from_pooled(X, y, sizes=[2, 2], offset=np.zeros(3)), "offset has 3 entries"),
    (lambda X, y: FederatedData(X, y, [0, 4], offset=np.zeros(5)), "offset has 5 entries"),
    (lambda X, y: FederatedData.from_arrays([(X[:2], y[:2], np.zeros(2)), (X[2:], y[2:])]), "either every client"),
    (lambda X, y: FederatedData.from_arrays([(X[:2], y[:2], np.zeros(3))]), "offset has 3 entries"),
])
def test_federated_data_rejects_bad_offsets(build, match):
    with pytest.raises(ValueError, match=match):
        build(np.ones((4, 1)), np.zeros(4))


def test_fit_with_federated_data_refuses_a_second_offset():
    data = FederatedData.from_pooled(np.ones((4, 1)), np.zeros(4), sizes=[2, 2], offset=np.zeros(4))
    with pytest.raises(TypeError, match="already holds y, the clients and any offset"):
        PooledMLE(family="gaussian").fit(data, offset=np.zeros(4))
