"""With mu = inf nothing is noised: standard errors, intervals and Wald tests equal statsmodels' (1e-6).

Statsmodels' bundled data sets: ``fair`` (logistic; Gaussian sandwich on ``rate_marriage``),
``randhie`` (Poisson), ``anes96`` (multinomial, party identification in three classes).
"""

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from privfedstat import FederatedData, FedIRLS, LocalFit, PooledMLE, get_family, glm

INF = float("inf")
FAIR = "affair ~ rate_marriage + age + yrs_married + children + religious + educ + occupation + occupation_husb"
RTOL = 1e-6


@pytest.fixture(scope="module")
def fair():
    df = sm.datasets.fair.load_pandas().data
    df["affair"] = (df["affairs"] > 0).astype(float)
    df["site"] = np.random.default_rng(0).permutation(len(df)) % 10
    return df


def federated(X, y, n_sites: int = 8, seed: int = 0) -> FederatedData:
    return FederatedData.from_pooled(np.asarray(X, float), np.asarray(y, float),
                                     clients=np.random.default_rng(seed).permutation(len(y)) % n_sites)


def converged(model, **kw):
    """A statsmodels GLM fit at the exact MLE (its default tolerance stops one IRLS step early, whose weights
    its nonrobust covariance then uses)."""
    return model.fit(tol=1e-14, **kw)


@pytest.mark.parametrize("method", ["pooled", "fedirls"])
def test_logistic_model_based_se_equal_statsmodels_on_fair(fair, method):
    """glm() with its defaults (private scaling at mu = inf: exact centres and scales, mapped back by the Jacobian)."""
    fit = glm(FAIR, fair, client="site", family="logistic", method=method, mu=INF, random_state=0)
    ref = converged(smf.glm(FAIR, fair, family=sm.families.Binomial()))
    np.testing.assert_allclose(fit.coef_, ref.params.to_numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fit.bse_, ref.bse.to_numpy(), rtol=RTOL)
    np.testing.assert_allclose(fit.pvalues_, ref.pvalues.to_numpy(), rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(fit.conf_int(0.1).to_numpy(), ref.conf_int(0.1).to_numpy(), rtol=RTOL)
    pd.testing.assert_index_equal(fit.cov_params().index, pd.Index(ref.params.index, name="term"))
    np.testing.assert_allclose(fit.cov_params().to_numpy(), ref.cov_params().to_numpy(), rtol=RTOL, atol=1e-14)
    assert fit.inference_.cov_type == "model" and not fit.inference_.cov_privacy.any()
    text = fit.summary().as_text()
    assert "rate_marriage" in text and "[0.025" in text and "0.975]" in text and "std err" in text


def test_poisson_model_and_sandwich_equal_statsmodels_on_randhie():
    df = sm.datasets.randhie.load_pandas().data.iloc[:4000]
    cols = ["lncoins", "idp", "lpi", "physlm", "disea"]
    X = sm.add_constant(df[cols].to_numpy())
    data = federated(X, df["mdvis"])
    for cov_type, kw in (("model", {}), ("sandwich", {"cov_type": "HC0"})):
        ref = converged(sm.GLM(df["mdvis"].to_numpy(), X, family=sm.families.Poisson()), **kw)
        for est in (PooledMLE(family="poisson", inference=cov_type),
                    FedIRLS(family="poisson", mu=INF, inference=cov_type)):
            est.fit(data)
            np.testing.assert_allclose(est.bse_, ref.bse, rtol=RTOL, err_msg=f"{est.method} {cov_type}")
            np.testing.assert_allclose(est.cov_params().to_numpy(), ref.cov_params(), rtol=RTOL, atol=1e-14)


def test_gaussian_default_is_model_based_with_statsmodels_scale(fair):
    """Gaussian: "auto" is the model-based covariance scaled by SSR / (N - p), statsmodels' default (its Scale line
    in the summary); the HC0 sandwich by request; Huber (no likelihood) refuses "model"."""
    X = sm.add_constant(fair[["age", "yrs_married", "religious", "educ"]].to_numpy())
    y = fair["rate_marriage"].to_numpy()
    ref = sm.GLM(y, X, family=sm.families.Gaussian()).fit()
    hc0 = sm.GLM(y, X, family=sm.families.Gaussian()).fit(cov_type="HC0")
    for est in (PooledMLE(family="gaussian"), FedIRLS(family="gaussian", mu=INF)):
        est.fit(federated(X, y))
        assert est.inference_.cov_type == "model"
        np.testing.assert_allclose(est.bse_, ref.bse, rtol=RTOL)
        assert est.summary().header["Scale"] == f"{ref.scale:.4g}"
        np.testing.assert_allclose(est.set_params(inference="sandwich").fit(federated(X, y)).bse_,
                                   hc0.bse, rtol=RTOL)
    with pytest.raises(ValueError, match="likelihood"):
        PooledMLE(family="huber", inference="model").fit(federated(X, y))


def test_gaussian_glm_summary_with_scaled_response_matches_statsmodels(fair):
    """glm()'s private scaling centres and scales the response; the Scale line is on the response's own scale."""
    f = "rate_marriage ~ age + yrs_married + religious + educ"
    fit = glm(f, fair, client="site", family="gaussian", mu=INF)
    ref = smf.glm(f, fair).fit()
    np.testing.assert_allclose(fit.bse_, ref.bse.to_numpy(), rtol=RTOL)
    assert fit.summary().header["Scale"] == f"{ref.scale:.4g}"


def test_huber_sandwich_against_the_textbook_formula(fair):
    """psi = clip(r, -c, c): V = A^-1 B A^-1 / N, A = mean(1{|r| <= c} x x^T), B = mean(psi^2 x x^T)."""
    X = sm.add_constant(fair[["age", "yrs_married", "religious"]].to_numpy())
    y = fair["rate_marriage"].to_numpy()
    est = PooledMLE(family="huber").fit(federated(X, y))
    r = y - X @ est.coef_
    c = get_family("huber").param
    A = (X.T * (np.abs(r) <= c)) @ X / len(y)
    B = (X.T * np.clip(r, -c, c) ** 2) @ X / len(y)
    Ai = np.linalg.inv(A)
    np.testing.assert_allclose(est.cov_params().to_numpy(), Ai @ B @ Ai / len(y), rtol=1e-9)


@pytest.fixture(scope="module")
def anes():
    df = sm.datasets.anes96.load_pandas().data
    y = np.digitize(df["PID"], [2.5, 3.5]).astype(float)  # Democrat (0-2), independent (3), Republican (4-6)
    X = sm.add_constant(df[["logpopul", "selfLR", "age", "educ"]].to_numpy())
    return X, y


def test_multinomial_model_based_equals_mnlogit_in_equation_major_order(anes):
    X, y = anes
    ref = sm.MNLogit(y, X).fit(method="newton", tol=1e-14, maxiter=100, disp=False)
    fam = get_family("multinomial", n_classes=3)
    for est in (PooledMLE(family=fam), FedIRLS(family=fam, mu=INF)):
        est.fit(federated(X, y))
        np.testing.assert_allclose(est.coef_, ref.params, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(est.bse_, ref.bse, rtol=RTOL)  # (d, K - 1), as MNLogit's
        np.testing.assert_allclose(est.cov_params().to_numpy(), ref.cov_params(), rtol=RTOL, atol=1e-14)
        names = est.cov_params().index
        assert names.names == ["equation", "term"] and names[5] == ("y=2", "x0")
        test = est.wald_test([("y=1", "x2"), ("y=2", "x2")])  # selfLR in both equations
        ref_test = ref.wald_test(np.eye(10)[[2, 7]], use_f=False, scalar=True)
        assert test.statistic == pytest.approx(float(ref_test.statistic), rel=1e-5) and test.df == 2


def test_wald_test_equals_statsmodels_on_the_same_covariance(fair):
    fit = glm(FAIR, fair, client="site", family="logistic", method="pooled", mu=INF)
    ref = converged(smf.glm(FAIR, fair, family=sm.families.Binomial()))
    V = fit.cov_params().to_numpy()
    R = np.zeros((2, 9))
    R[0, 2], R[1, 3], R[1, 4] = 1.0, 1.0, -1.0  # age = 0 and yrs_married = children
    q = np.array([-0.05, 0.1])
    ours = fit.wald_test(R, q)
    theirs = ref.wald_test((R, q), cov_p=V, use_f=False, scalar=True)
    assert ours.statistic == pytest.approx(float(theirs.statistic), rel=1e-10)
    assert ours.pvalue == pytest.approx(float(theirs.pvalue), rel=1e-8) and ours.df == 2
    by_name = fit.wald_test(["age", "educ"])
    R2 = np.eye(9)[[2, 6]]
    assert by_name.statistic == pytest.approx(float(ref.wald_test(R2, cov_p=V, use_f=False, scalar=True).statistic))
    with pytest.raises(ValueError, match="unknown coefficient name"):
        fit.wald_test(["agee"])
    with pytest.raises(ValueError, match=r"shape \(r, 9\)"):
        fit.wald_test(np.eye(3))
    with pytest.raises(ValueError, match="linearly dependent"):
        fit.wald_test(np.vstack([R2, R2]))


def test_localfit_covariance_is_the_weighted_sum_of_the_sites(fair):
    """coef_ = sum_i w_i theta_i of independent local MLEs: V = sum_i w_i^2 V_i, V_i statsmodels' per site."""
    cols = ["rate_marriage", "age", "yrs_married", "religious"]
    X = sm.add_constant(fair[cols].to_numpy())
    y = fair["affair"].to_numpy()
    site = fair["site"].to_numpy() % 4
    est = LocalFit(alpha=0.0).fit(X, y, clients=site)
    w = np.bincount(site) / len(y)
    V = sum(w[i] ** 2 * converged(sm.GLM(y[site == i], X[site == i], family=sm.families.Binomial())).cov_params()
            for i in range(4))
    np.testing.assert_allclose(est.cov_params().to_numpy(), V, rtol=RTOL, atol=1e-14)


def test_bootstrap_is_refused_for_the_exact_baselines(fair):
    with pytest.raises(ValueError, match="not private"):
        PooledMLE(inference="bootstrap").fit(federated(np.ones((50, 1)), np.arange(50) % 2))
