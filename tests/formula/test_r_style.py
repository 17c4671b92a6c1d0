"""R-style inputs of glm(): family="binomial" and statsmodels' family objects, a two-level string or categorical
response for logistic fits (first level failure, as in R) and a multi-level one for the multinomial; summaries
that read like statsmodels' (t where Student's t is used, 4 significant digits, McFadden's pseudo-R^2)."""

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from privfedstat import glm

INF = float("inf")
F = "affair ~ rate_marriage + age + religious"


@pytest.fixture(scope="module")
def fair():
    df = sm.datasets.fair.load_pandas().data
    df["affair"] = np.where(df["affairs"] > 0, "yes", "no")
    df["y"] = (df["affairs"] > 0).astype(float)
    df["site"] = np.random.default_rng(0).permutation(len(df)) % 8
    return df


@pytest.fixture(scope="module")
def logit(fair):
    return smf.logit(F.replace("affair", "y"), fair).fit(disp=0, tol=1e-12)


@pytest.mark.parametrize("family", ["binomial", "Binomial", sm.families.Binomial()])
def test_binomial_names_the_logistic_family(fair, logit, family):
    fit = glm(F.replace("affair", "y"), fair, client="site", family=family, mu=INF)
    assert fit.family == "logistic" and fit.family_.name == "logistic"
    np.testing.assert_allclose(fit.coef_, logit.params.to_numpy(), rtol=1e-7)
    np.testing.assert_allclose(fit.bse_, logit.bse.to_numpy(), rtol=1e-6)


def test_statsmodels_families_with_another_link_are_refused(fair):
    probit = sm.families.Binomial(link=sm.families.links.Probit())
    with pytest.raises(ValueError, match="Probit"):
        glm(F.replace("affair", "y"), fair, client="site", family=probit, mu=INF)
    fit = glm("children ~ age", fair.assign(children=np.round(fair["children"])), client="site",
              family=sm.families.Poisson(), mu=INF)
    assert fit.family == "poisson"


def test_two_level_string_response_models_the_second_level(fair, logit):
    fit = glm(F, fair, client="site", family="binomial", mu=INF)
    np.testing.assert_allclose(fit.coef_, logit.params.to_numpy(), rtol=1e-7)
    np.testing.assert_allclose(fit.bse_, logit.bse.to_numpy(), rtol=1e-6)
    assert fit.levels_["affair"] == ["no", "yes"]
    assert fit.summary().header["Modelled level"].startswith("affair=yes (against no")
    np.testing.assert_allclose(fit.predict(fair.head(5)), logit.predict(fair.head(5)), rtol=1e-7)
    assert 0.5 < fit.score(fair) < 1  # AUC, with the response read through the same levels


def test_categorical_response_order_sets_failure_first(fair, logit):
    df = fair.assign(affair=pd.Categorical(fair["affair"], categories=["yes", "no"]))
    fit = glm(F, df, client="site", family="logistic", mu=INF)
    np.testing.assert_allclose(fit.coef_, -logit.params.to_numpy(), rtol=1e-7)  # "no" modelled against "yes"
    assert fit.summary().header["Modelled level"].startswith("affair=no")


def test_private_string_response_needs_declared_levels(fair):
    with pytest.raises(ValueError, match="levels declared"):
        glm(F, fair, client="site", family="binomial", mu=2, random_state=0)
    fit = glm(F, fair, client="site", family="binomial", mu=2, random_state=0, levels={"affair": ["no", "yes"]})
    assert fit.levels_["affair"] == ["no", "yes"] and np.all(np.isfinite(fit.bse_))
    assert list(fit.summary().to_frame().columns)[1:3] == ["std err", "t"]  # Student's t with finite mu



def test_levels_written_in_the_formula_are_said_not_to_declare(fair):
    """mlmRev's Contraception, as a user wrote it: C(livch, levels=[...]) in the formula with finite mu is refused
    (one way to declare), and the message says why the levels already written there do not count."""
    df = fair.assign(kids=np.where(fair["children"] > 2, "3+", "0-2"))
    with pytest.raises(ValueError, match=r"inside the formula \(C\(..., levels=\[...\]\)\) are not a declaration"):
        glm("y ~ age + C(kids, levels=['0-2', '3+'])", df, client="site", family="binomial", mu=2, random_state=0)
    with pytest.raises(ValueError, match="must be declared") as plain:
        glm("y ~ age + kids", df, client="site", family="binomial", mu=2, random_state=0)
    assert "inside the formula" not in str(plain.value)


def test_a_logistic_fit_refuses_three_levels(fair):
    df = fair.assign(affair=np.where(fair["affairs"] > 1, "often", fair["affair"]))
    with pytest.raises(ValueError, match="two levels"):
        glm(F, df, client="site", family="binomial", mu=INF)


def test_multinomial_string_response_and_mcfadden_match_mnlogit():
    df = sm.datasets.anes96.load_pandas().data
    df["party"] = np.select([df["PID"] <= 2, df["PID"] == 3], ["Democrat", "Independent"], "Republican")
    df["site"] = np.arange(len(df)) % 5
    fit = glm("party ~ logpopul + selfLR + age", df, client="site", family="multinomial", mu=INF)
    codes = pd.Categorical(df["party"]).codes
    X = sm.add_constant(df[["logpopul", "selfLR", "age"]])
    ref = sm.MNLogit(codes, X).fit(method="newton", tol=1e-14, maxiter=100, disp=False)
    np.testing.assert_allclose(fit.coef_, ref.params.to_numpy(), rtol=1e-6, atol=1e-9)
    header = fit.summary(data=df).header
    assert header["Pseudo R-squ. (McFadden)"] == f"{ref.prsquared:.4g}"
    assert header["Reference class"] == "party=Democrat"


def test_summary_prints_four_significant_digits_and_z_without_noise(fair, logit):
    fit = glm(F.replace("affair", "y"), fair, client="site", family="logistic", mu=INF)
    text = fit.summary().as_text()
    assert f"{logit.params['rate_marriage']:.4g}" in text and f"{logit.params['rate_marriage']:.6g}" not in text
    assert list(fit.summary().to_frame().columns)[2:4] == ["z", "P>|z|"]
    assert "c H^-1" not in text and "linearised" not in text and "C_H" not in text


def test_get_family_reads_r_and_statsmodels_names():
    from privfedstat import get_family

    assert get_family("binomial").name == get_family(sm.families.Binomial()).name == "logistic"
    assert get_family("normal").name == get_family(sm.families.Gaussian()).name == "gaussian"
    with pytest.raises(ValueError, match="binomial"):
        get_family("bernoulli")  # the error lists the aliases too
    with pytest.raises(ValueError, match="not supported"):
        get_family(sm.families.Gamma())

