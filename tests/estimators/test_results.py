"""What a fit reports beyond coef_: statsmodels-style named views, the summary's header and goodness of fit
(against statsmodels), significant digits, and the coefficient plot."""


import matplotlib
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from conftest import simulate
from test_contract import dataset

from privfedstat import FedIRLS, FedSGD, PooledMLE, get_family
from privfedstat.results.summary import Summary

matplotlib.use("Agg")
INF = float("inf")
GLM_FAMILIES = [("logistic", sm.families.Binomial(), [0.3, 1.0, -1.0]),
                ("poisson", sm.families.Poisson(), [0.3, 0.2, -0.2]),
                ("gaussian", sm.families.Gaussian(), [0.3, 1.0, -1.0])]


@pytest.mark.parametrize("family, sm_family, beta", GLM_FAMILIES, ids=[f[0] for f in GLM_FAMILIES])
def test_goodness_of_fit_at_mu_inf_equals_statsmodels_glm(family, sm_family, beta):
    data = simulate(family, [100] * 5, beta, seed=1)
    est = FedIRLS(family=family, mu=INF, random_state=0).fit(data)
    ref = sm.GLM(data.y, data.X, family=sm_family).fit(tol=1e-12)
    st = est.fit_statistics(data)
    assert st.nobs == 500 and st.n_params == 3
    for ours, theirs in ((st.llf, ref.llf), (st.deviance, ref.deviance), (st.aic, ref.aic), (st.bic, ref.bic_llf)):
        assert ours == pytest.approx(theirs, rel=1e-9)
    if family == "gaussian":  # the null model concentrated at its own variance: Cox-Snell's R^2 is OLS's R^2
        assert st.pseudo_rsquared == pytest.approx(sm.OLS(data.y, data.X).fit().rsquared, rel=1e-9)
    else:
        assert st.llnull == pytest.approx(ref.llnull, rel=1e-9)
        assert st.pseudo_rsquared == pytest.approx(ref.pseudo_rsquared("cs"), rel=1e-9)
    X = data.X  # the same from arrays, and shown in the summary
    assert est.fit_statistics(X, data.y) == st
    header = est.summary(data=data).header
    assert header["Log-Likelihood"] == f"{ref.llf:.6g}" and header["AIC"] == f"{ref.aic:.6g}"


def test_goodness_of_fit_of_the_multinomial_equals_mnlogit():
    data = dataset("multinomial")
    est = PooledMLE(family=get_family("multinomial", n_classes=3)).fit(data)
    ref = sm.MNLogit(data.y, data.X).fit(method="newton", tol=1e-14, maxiter=100, disp=False)
    st = est.fit_statistics(data)
    for ours, theirs in ((st.llf, ref.llf), (st.llnull, ref.llnull), (st.aic, ref.aic), (st.bic, ref.bic)):
        assert ours == pytest.approx(theirs, rel=1e-8)


def test_poisson_null_model_with_an_offset_equals_statsmodels():
    data = simulate("poisson", [100] * 4, [0.3, 0.2, -0.2], seed=2)
    offset = np.random.default_rng(0).uniform(-1, 1, data.n_samples)
    est = PooledMLE(family="poisson").fit(data.X, data.y, clients=np.repeat(np.arange(4), 100), offset=offset)
    ref = sm.GLM(data.y, data.X, family=sm.families.Poisson(), offset=offset).fit(tol=1e-12)
    st = est.fit_statistics(data.X, data.y, offset=offset)
    assert st.llf == pytest.approx(ref.llf, rel=1e-9) and st.llnull == pytest.approx(ref.llnull, rel=1e-9)


def test_private_fits_show_no_goodness_of_fit_and_say_why(logistic_data):
    est = FedSGD(n_iter=20, random_state=0).fit(logistic_data)
    with pytest.raises(ValueError, match="would cost budget"):
        est.fit_statistics(logistic_data)
    s = est.summary(data=logistic_data)  # refused, not computed: the line says why
    assert s.header["Log-Likelihood"].startswith("n/a (private fit") and "AIC" not in s.header
    huber = FedIRLS(family="huber", mu=INF).fit(simulate("gaussian", [100] * 3, [0.1, 0.5]))
    assert "not a likelihood" in huber.summary().header["Log-Likelihood"]
    assert "summary(data=" in FedIRLS(mu=INF).fit(logistic_data).summary().header["Log-Likelihood"]


def test_summary_header_alpha_and_significant_digits():
    data = simulate("logistic", [100] * 6, [0.3, 1.0, -1.0], seed=3)
    est = FedIRLS(mu=INF, random_state=0).fit(data)
    s = est.summary(alpha=0.1)
    assert s.header["Dep. Variable"] == "y" and s.header["Link"] == "logit" and s.header["Family"] == "logistic"
    assert (s.header["No. Observations"], s.header["No. Clients"]) == ("600", "6")
    assert (s.header["Df Model"], s.header["Df Residuals"]) == ("3", "597")  # no declared intercept
    np.testing.assert_allclose(s.to_frame()[["[0.05", "0.95]"]].to_numpy(), est.conf_int(0.1).to_numpy())
    tiny = Summary("t", {"a": "b"}, pd.DataFrame({"coef": [-1e-12, 123456.789]}), [])
    assert "-1e-12" in tiny.as_text() and "1.235e+05" in tiny.as_text() and "0.0000" not in tiny.as_text()


def test_formula_fit_names_views_and_intercept_degrees_of_freedom():
    from privfedstat import glm

    df = sm.datasets.fair.load_pandas().data
    df["affair"] = (df["affairs"] > 0).astype(float)
    df["site"] = np.arange(len(df)) % 5
    fit = glm("affair ~ rate_marriage + age", df, client="site", family="logistic", mu=INF, random_state=0)
    ref = sm.GLM.from_formula("affair ~ rate_marriage + age", df, family=sm.families.Binomial()).fit(tol=1e-12)
    for view, arr, theirs in ((fit.params, fit.coef_, ref.params), (fit.bse, fit.bse_, ref.bse),
                              (fit.zvalues, fit.zvalues_, ref.tvalues), (fit.pvalues, fit.pvalues_, ref.pvalues)):
        assert isinstance(view, pd.Series) and list(view.index) == ["Intercept", "rate_marriage", "age"]
        np.testing.assert_array_equal(view.to_numpy(), arr)
        np.testing.assert_allclose(view.to_numpy(), theirs.to_numpy(), rtol=1e-5)
    s = fit.summary(data=df)
    assert (s.header["Dep. Variable"], s.header["Df Model"]) == ("affair", str(int(ref.df_model)))
    assert s.header["Df Residuals"] == str(int(ref.df_resid))
    assert s.header["Deviance"] == f"{ref.deviance:.6g}"


def test_multinomial_views_are_terms_by_equations():
    est = FedSGD(family=get_family("multinomial", n_classes=3), n_iter=10, random_state=0).fit(dataset("multinomial"))
    params = est.params
    assert isinstance(params, pd.DataFrame) and params.shape == est.coef_.shape
    assert list(params.columns) == ["y=1", "y=2"] and list(params.index) == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(params.to_numpy(), est.coef_)
    np.testing.assert_array_equal(est.bse.to_numpy(), est.bse_)
    np.testing.assert_array_equal(est.pvalues.to_numpy(), est.pvalues_)


def test_coefficient_plot_renders_private_beside_reference(logistic_data):
    import matplotlib.pyplot as plt

    private = FedSGD(n_iter=30, random_state=0).fit(logistic_data)
    pooled = PooledMLE().fit(logistic_data)
    ax = private.plot_coefficients(reference=pooled)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x0", "x1", "x2", "x3"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["FedSGD", "PooledMLE"]
    ax.figure.canvas.draw()  # renders (Agg)
    ref = sm.GLM(logistic_data.y, logistic_data.X, family=sm.families.Binomial()).fit()
    fig, given = plt.subplots()
    assert private.plot_coefficients(ax=given, reference=ref, alpha=0.1) is given  # a statsmodels reference
    fig.canvas.draw()
    none = FedSGD(n_iter=30, inference=None, random_state=0).fit(logistic_data).plot_coefficients()
    none.figure.canvas.draw()  # no intervals: points only
    plt.close("all")


def test_coefficient_plot_keeps_a_reference_fit_of_the_same_method(logistic_data):
    import matplotlib.pyplot as plt

    private = FedSGD(n_iter=30, random_state=0).fit(logistic_data)
    other = FedSGD(n_iter=30, random_state=1).fit(logistic_data)
    ax = private.plot_coefficients(reference=other)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["FedSGD", "FedSGD (reference)"]
    plt.close("all")
