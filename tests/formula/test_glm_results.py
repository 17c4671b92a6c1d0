"""glm() results a statistician expects (issue 9, item 6): predict/score through the stored formula,
the intercept's name, multinomial equations named by their levels (checked against statsmodels)."""

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from privfedstat import FedSGD
from privfedstat.fitting.scaling import FeatureBounds, PrivateStandardize
from privfedstat.formula import glm

INF = float("inf")
REGIONS = ["north", "south", "west"]
PARTIES = ["Democrat", "Independent", "Republican"]  # sorted, so statsmodels' reference class is ours


@pytest.fixture(scope="module")
def df():
    rng = np.random.default_rng(5)
    n = 1500
    d = pd.DataFrame({
        "age": rng.uniform(20, 80, n),
        "income": rng.lognormal(10, 0.5, n),
        "region": rng.choice(REGIONS, n),
        "site": rng.integers(0, 6, n),
    })
    eta = -1 + 0.02 * d["age"] - 0.1 * np.log(d["income"]) + 0.5 * (d["region"] == "south")
    d["y"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    logits = np.column_stack([np.zeros(n), 0.04 * (d["age"] - 50), -0.03 * (d["age"] - 50) + 0.4 * (d["region"] == "west")])
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    d["party"] = np.array(PARTIES)[(p.cumsum(1) < rng.random(n)[:, None]).sum(1)]
    return d


def new_rows():
    """Held-out rows: fewer rows than levels, one level absent (columns must still line up)."""
    return pd.DataFrame({"age": [25.0, 61.0], "income": [2e4, 9e4], "region": ["west", "north"],
                         "party": ["Republican", "Democrat"], "y": [1.0, 0.0]})


FORMULA = "y ~ center(age) + np.log(income) + C(region)"  # a stateful transform: its fitted state is reused


@pytest.fixture(scope="module")
def logistic_fits(df):
    est = glm(FORMULA, data=df, client="site", family="logistic", method="pooled", mu=INF)
    ref = smf.glm(FORMULA, data=df, family=sm.families.Binomial()).fit()
    return est, ref


def test_predict_df_uses_the_fitted_formula_as_statsmodels_does(logistic_fits, df):
    est, ref = logistic_fits
    np.testing.assert_allclose(est.coef_, ref.params[est.feature_names_in_].to_numpy(), rtol=1e-6, atol=1e-8)
    new = new_rows()
    np.testing.assert_allclose(est.predict(new), ref.predict(new).to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(est.predict(df), ref.fittedvalues.to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(est.predict_proba(new)[:, 1], est.predict(new))


def test_score_df_reads_the_response_through_the_formula(logistic_fits):
    est, ref = logistic_fits
    new = pd.concat([new_rows()] * 3, ignore_index=True)
    new["y"] = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    mu = ref.predict(new).to_numpy()
    deviance = -2 * np.mean(new["y"] * np.log(mu) + (1 - new["y"]) * np.log(1 - mu))
    np.testing.assert_allclose(est.score(new, metric="deviance"), deviance, rtol=1e-6)
    with pytest.raises(TypeError, match="without y"):
        est.score(new, new["y"])
    with pytest.raises(ValueError, match="response column 'y' is not in the data"):
        est.score(new.drop(columns="y"))
    assert np.isfinite(est.predict(new.drop(columns="y"))).all()  # predict needs no response


def test_new_rows_outside_the_declared_levels_raise_with_column_and_count(df):
    # (a small step: the automatic one sends the raw age column back and forth, which raises DivergenceError)
    est = glm("y ~ age + C(region)", data=df, client="site", family="logistic", mu=2.0, method="fedsgd", n_iter=3, clip=1.0,
              step_size=1e-3, scaling=None, random_state=0, levels={"region": REGIONS})
    bad = new_rows()
    bad["region"] = ["east", "east"]
    with pytest.raises(ValueError, match=r"column 'region': 2 row\(s\) have a value outside the fitted model's levels") as err:
        est.predict(bad)
    assert "east" not in str(err.value)  # counts, never values
    assert f"levels ({', '.join(map(repr, REGIONS))}); recode" in str(err.value)  # the public levels (was: '3 levels')
    with pytest.raises(ValueError, match="column 'region': 2 row"):
        est.score(bad)


def test_predict_array_still_works(logistic_fits, df):
    est, _ = logistic_fits
    X = np.asarray(est.model_spec_.rhs.get_model_matrix(df.head(4)))
    np.testing.assert_allclose(est.predict(X), est.predict(df.head(4)))


# ---------------------------------------------------------------------- names
def test_intercept_is_named_intercept(logistic_fits, df):
    est, _ = logistic_fits
    assert est.summary().to_frame().index[0] == "Intercept"
    X = np.column_stack([np.ones(len(df)), df["age"]])
    common = {"family": "logistic", "mu": INF, "n_iter": 2, "step_size": 1e-4}  # the raw age: no run-away step
    for scaling in (PrivateStandardize(intercept=0), FeatureBounds(lower=(1, 20), upper=(1, 80), intercept=0)):
        fit = FedSGD(scaling=scaling, **common).fit(X, df["y"], clients=df["site"])
        assert list(fit.summary().to_frame().index) == ["Intercept", "x1"]
    fit = FedSGD(**common).fit(X, df["y"], clients=df["site"])  # no intercept declared: no name given
    assert list(fit.summary().to_frame().index) == ["x0", "x1"]


def test_multinomial_equations_carry_the_levels_as_in_statsmodels_mnlogit(df):
    formula = "party ~ age + C(region)"
    est = glm(formula, data=df, client="site", family="multinomial", method="pooled", mu=INF)
    X = est.model_spec_.rhs.get_model_matrix(df)
    ref = sm.MNLogit(df["party"], X).fit(disp=0)
    _, equations = ref._get_endog_name(None, None)  # the equation labels of statsmodels' summary
    s = est.summary()
    frame = s.to_frame()
    assert list(frame.index.names) == ["equation", "term"]
    assert list(frame.index.get_level_values("equation").unique()) == list(equations) == ["party=Independent", "party=Republican"]
    assert s.header["Reference class"] == "party=Democrat"
    expected = pd.Series(ref.params.to_numpy().ravel(order="F"),
                         index=pd.MultiIndex.from_product([equations, X.columns]))
    np.testing.assert_allclose(frame["coef"].to_numpy(), expected.to_numpy(), rtol=1e-5, atol=1e-7)
    assert frame.loc[("party=Republican", "C(region)[T.west]"), "coef"] == est.coef_[3, 1]
    text = s.as_text()
    assert "party=Republican" in text and "Reference class" in text
    # held-out rows: probabilities as statsmodels', score from the string labels
    new = new_rows()
    P = est.predict(new)
    np.testing.assert_allclose(P, ref.predict(est.model_spec_.rhs.get_model_matrix(new)), rtol=1e-5)
    assert est.score(new, metric="accuracy") == np.mean(P.argmax(1) == [2, 0])
    bad = new.assign(party=["Green", "Democrat"])
    with pytest.raises(ValueError, match=r"column 'party': 1 row\(s\) have a value outside"):
        est.score(bad)
    est.predict(bad)  # the response is not needed to predict


def test_the_clipping_bound_says_its_scale():
    """HI (Ecdat): a Gaussian fit of weekly hours printed "Clipping bound B 13.89", read as hours; B bounds each row's
    gradient on the fitting scale that the private scaling sets."""
    import numpy as np
    import pandas as pd

    from privfedstat import glm

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(40, 10, 800), "site": rng.integers(0, 4, 800)})
    df["hours"] = 30 + 0.2 * df.x + rng.normal(0, 15, 800)
    scaled = glm("hours ~ x", df, client="site", mu=4, random_state=0).summary().header["Clipping bound B"]
    assert "each row's gradient norm, on the fitting scale" in scaled and "scaler_" in scaled
    plain = glm("hours ~ x", df, client="site", mu=float("inf"), scaling=None).summary().header["Clipping bound B"]
    assert plain == "inf"
