"""A multinomial fit with two classes is the logistic model (class 0 the reference): glm(family="multinomial")
with two declared levels must give the logistic MLE, not another estimator's root.

It used to fall through to the scalar kernels with the multinomial's family code, which they read as Huber's (with
the class count 2 as its threshold): a least-squares-like fit, converged, summary and all, off by 12 SEs at mu = inf.
"""

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from privfedstat import glm
from privfedstat.families import get_family
from privfedstat.inference.bootstrap import simulate_response


def two_classes(seed: int = 0, n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "site": rng.integers(0, 4, n)})
    p = 1.0 / (1.0 + np.exp(-(0.3 + df.a - 0.5 * df.b)))
    df["y"] = np.where(rng.random(n) < p, "yes", "no")
    return df


def test_two_class_multinomial_is_the_logistic_mle_at_mu_inf():
    df = two_classes()
    fit = glm("y ~ a + b", df, client="site", family="multinomial", mu=float("inf"), levels={"y": ["no", "yes"]})
    X = sm.add_constant(df[["a", "b"]].to_numpy())
    ref = sm.Logit((df.y == "yes").to_numpy(float), X).fit(disp=0, tol=1e-12)
    np.testing.assert_allclose(np.ravel(fit.coef_), ref.params, atol=1e-8 * ref.bse.min())
    np.testing.assert_allclose(np.ravel(fit.bse), ref.bse, rtol=1e-6)


def test_two_class_multinomial_private_fit_matches_the_logistic_one():
    """Same seed, same noise: the two parametrisations of one model release the same clipped gradients."""
    df = two_classes(1)
    kw = dict(client="site", mu=2.0, levels={"y": ["no", "yes"]}, random_state=0)
    multi = glm("y ~ a + b", df, family="multinomial", **kw)
    logit = glm("y ~ a + b", df, family="binomial", **kw)
    np.testing.assert_allclose(np.ravel(multi.coef_), np.ravel(logit.coef_), rtol=1e-8, atol=1e-10)


def test_two_class_multinomial_refuses_an_offset():
    df = two_classes().assign(o=0.1)
    with pytest.raises(ValueError, match="multinomial family takes no offset"):
        glm("y ~ a + b", df, client="site", family="multinomial", mu=float("inf"), levels={"y": ["no", "yes"]},
            offset="o")


def test_two_class_multinomial_simulates_classes_per_row():
    """The bootstrap's draws: one class per row (a 1-d predictor used to be read as one row of n classes)."""
    fam = get_family("multinomial", n_classes=2)
    X = np.c_[np.ones(500), np.linspace(-2, 2, 500)]
    y = simulate_response(fam, np.array([0.0, 1.0]), X, None, np.random.default_rng(0))
    assert y.shape == (500,) and set(np.unique(y)) <= {0.0, 1.0}


def test_two_class_multinomial_log_likelihood_is_the_logistic_one():
    """summary(data=...) evaluates the family at flat (n,) predictors: read as one row of n predictors, it gave
    -25646 for statsmodels' -1726."""
    df = two_classes()
    fit = glm("y ~ a + b", df, client="site", family="multinomial", mu=float("inf"), levels={"y": ["no", "yes"]})
    ref = sm.Logit((df.y == "yes").to_numpy(float), sm.add_constant(df[["a", "b"]].to_numpy())).fit(disp=0)
    stats = fit.fit_statistics(df)
    assert stats.llf == pytest.approx(ref.llf, rel=1e-9)
    assert stats.llnull == pytest.approx(ref.llnull, rel=1e-9)
