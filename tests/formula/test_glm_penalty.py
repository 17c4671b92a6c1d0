"""glm(..., penalty=, alpha=, l1_ratio=) reaches FedNMap (issue 14, item 5): the pooled elastic net from a formula."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from _enet_reference import enet_glm

from privfedstat import FedNMap, ZhangComposite
from privfedstat.formula import glm

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def df():
    rng = np.random.default_rng(1)
    n = 600
    d = pd.DataFrame(rng.standard_normal((n, 5)), columns=[f"x{j}" for j in range(1, 6)])
    d["site"] = rng.integers(0, 4, n)
    d["x1"] += 0.5 * d["site"]  # heterogeneous sites
    eta = 0.2 + 0.9 * d["x1"] - 0.7 * d["x3"]
    d["y"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    d["g"] = eta + rng.standard_normal(n)
    return d


def _design(df, intercept=True):
    cols = [df[f"x{j}"].to_numpy() for j in range(1, 6)]
    order = np.argsort(df["site"].to_numpy(), kind="stable")  # glm orders the clients by label
    X = np.column_stack(([np.ones(len(df))] if intercept else []) + cols)[order]
    return X, order


@pytest.mark.parametrize("family, response, penalty, ratio", [
    ("logistic", "y", "l1", None), ("gaussian", "g", "elasticnet", 0.5)])
def test_a_penalised_formula_fit_is_the_pooled_elastic_net(df, family, response, penalty, ratio):
    est = glm(f"{response} ~ x1 + x2 + x3 + x4 + x5", data=df, client="site", family=family, penalty=penalty,
              alpha=0.05, l1_ratio=ratio, mu=math.inf, scaling=None, n_rounds=1500, n_local_steps=4, step_size=0.1)
    assert type(est) is FedNMap and est.unpenalized == (0,) and est.penalty == penalty
    X, order = _design(df)
    ref = enet_glm(X, df[response].to_numpy()[order], family, 0.05, 1.0 if ratio is None else ratio)
    assert np.max(np.abs(est.coef_ - ref)) < 1e-6 and np.sum(ref == 0) >= 1
    assert list(est.summary().to_frame().index) == ["Intercept", "x1", "x2", "x3", "x4", "x5"]


def test_the_default_method_with_a_penalty_is_fednmap_and_other_methods_refuse_it(df):
    formula = "y ~ x1 + x2 + x3"
    est = glm(formula, data=df, client="site", family="logistic", penalty="l1", alpha=0.02, random_state=0)
    assert type(est) is FedNMap and est.inference_ is None
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=0, atol=1e-12)
    assert est.scaler_ is not None and est.scaler_.intercept == 0  # the default private scaling, intercept unpenalised
    assert type(glm(formula, data=df, client="site", family="logistic", method="zhang", penalty="l1", alpha=0.02,
                    random_state=0)) is ZhangComposite
    with pytest.raises(ValueError, match="needs its strength: pass alpha="):
        glm(formula, data=df, client="site", family="logistic", penalty="l1")  # no silent default alpha
    with pytest.raises(ValueError, match="needs a penalised method"):
        glm(formula, data=df, client="site", family="logistic", method="fedirls", penalty="l1")
    with pytest.raises(TypeError, match="does not take"):
        glm(formula, data=df, client="site", family="logistic", alpha=0.1)  # FedIRLS has no penalty strength
    with pytest.raises(ValueError, match="needs l1_ratio"):
        glm(formula, data=df, client="site", family="logistic", penalty="elasticnet", alpha=0.1)


def test_without_an_intercept_every_coefficient_is_penalised(df):
    est = glm("y ~ x1 + x2 - 1", data=df, client="site", family="logistic", penalty="l1", alpha=0.05, mu=math.inf,
              scaling=None, n_rounds=1500, n_local_steps=4, step_size=0.1)
    assert est.unpenalized == () and est.feature_names_in_ == ["x1", "x2"]
    X, order = _design(df, intercept=False)
    ref = enet_glm(X[:, :2], df["y"].to_numpy()[order], "logistic", 0.05, 1.0, unpenalized=())
    assert np.max(np.abs(est.coef_ - ref)) < 1e-6
