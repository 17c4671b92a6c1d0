"""glm() with finite mu learns no public structure from private rows (issue 8, section 2)."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from privfedstat import PrivacyLeakWarning
from privfedstat._formula_design import build_design
from privfedstat.formula import NA_DROP_LEAK, glm

INF = float("inf")
REGIONS = ["north", "south", "west"]
FAST = {"n_rounds": 3, "clip": 1.0, "hessian_clip": 1.0, "scaling": None}


@pytest.fixture
def df():
    rng = np.random.default_rng(0)
    n = 400
    d = pd.DataFrame({
        "x": rng.normal(size=n),
        "k": rng.integers(1, 3, n),
        "region": rng.choice(REGIONS[:2], n),  # "west" is declared below but held by no row
        "site": rng.integers(0, 4, n),
    })
    d["y"] = (rng.random(n) < 0.5).astype(float)
    return d


def design(formula, data, *, levels=None, private=True, multinomial=False, na_action="raise"):
    return build_design(formula, data, client="site", multinomial=multinomial, levels=levels,
                        na_action=na_action, private=private)


# ---------------------------------------------------------------------- categorical levels
@pytest.mark.parametrize("formula, col", [("y ~ x + region", "region"), ("y ~ x + C(region)", "region"),
                                          ("y ~ C(k)", "k"), ("y ~ region:x", "region")])
def test_undeclared_levels_raise_with_finite_mu_and_say_how_to_declare(df, formula, col):
    with pytest.raises(ValueError, match=rf"column '{col}' is categorical.*levels=\{{'{col}'.*pd.Categorical"):
        glm(formula, data=df, client="site", family="logistic", mu=2.0)
    assert design(formula, df, private=False).names  # mu = inf: levels from the data, as before


@pytest.mark.parametrize("declare", ["argument", "categorical"])
def test_declared_levels_fix_the_design_for_neighbouring_datasets(df, declare):
    neighbour = df.copy()
    neighbour.loc[7, "region"] = "west"  # one row takes the rare level
    if declare == "argument":
        kw = {"levels": {"region": REGIONS}}
    else:
        kw = {}
        df = df.assign(region=pd.Categorical(df["region"], categories=REGIONS))
        neighbour = neighbour.assign(region=pd.Categorical(neighbour["region"], categories=REGIONS))
    a = design("y ~ x + C(region) + region:x", df, **kw)
    b = design("y ~ x + C(region) + region:x", neighbour, **kw)
    assert a.names == b.names
    assert a.X.shape == b.X.shape
    west = a.names.index("C(region)[T.west]")
    assert not a.X[:, west].any()  # declared, held by no row: an all-zero column
    assert b.X[:, west].sum() == 1
    assert a.levels == {"region": REGIONS}


def test_levels_reach_the_fitted_estimator_and_declare_numeric_columns(df):
    est = glm("y ~ x + C(k) + region", data=df, client="site", family="logistic", mu=2.0, random_state=0,
              levels={"k": [1, 2, 3], "region": REGIONS}, **FAST)
    assert est.feature_names_in_ == ["Intercept", "x", "C(k)[T.2]", "C(k)[T.3]", "region[T.south]", "region[T.west]"]
    assert est.levels_ == {"k": [1, 2, 3], "region": REGIONS}
    assert est.coef_.shape == (6,)


def test_values_outside_the_declared_levels_raise_with_column_and_count_not_values(df):
    bad = df.copy()
    bad.loc[[3, 9], "region"] = "zzz_secret_place"
    with pytest.raises(ValueError, match=r"column 'region': 2 row\(s\) have a value outside") as info:
        design("y ~ region", bad, levels={"region": REGIONS})
    assert "zzz_secret_place" not in str(info.value)
    categorical = bad.assign(region=pd.Categorical(bad["region"], categories=["zzz_secret_place", *REGIONS]))
    with pytest.raises(ValueError, match="2 row") as info:  # levels= overrides the Categorical's categories
        design("y ~ region", categorical, levels={"region": REGIONS})
    assert "zzz_secret_place" not in str(info.value)


def test_levels_of_another_type_than_the_column_say_so(df):
    """Levels declared as strings for a numeric response (``["0", "1", "2"]`` for 0.0 / 1.0 / 2.0): every row is
    outside them, and the message says why (the types, not the values)."""
    numeric = df.assign(k=df["k"].astype(float))
    with pytest.raises(ValueError, match=r"declared levels are str and the column holds float64") as info:
        design("y ~ C(k)", numeric, levels={"k": ["1", "2", "3"]})
    assert f"{len(numeric)} row(s)" in str(info.value)
    with pytest.raises(ValueError, match=r"declared levels are int and the column holds "):
        design("y ~ region", df, levels={"region": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"row\(s\) have a value outside") as info:  # same kind: no hint
        design("y ~ C(k)", numeric, levels={"k": [1]})
    assert "declared levels are" not in str(info.value)


def test_categorical_terms_must_be_declared_columns(df):
    levels = {"region": REGIONS}
    with pytest.raises(ValueError, match="computed from the data"):
        design("y ~ C(region == 'north')", df, levels=levels)
    with pytest.raises(ValueError, match="does not use the declared levels"):
        design("y ~ C(region, levels=['west', 'south', 'north'])", df, levels=levels)
    with pytest.raises(ValueError, match="outside the levels it lists") as info:  # formulaic would quote them
        design("y ~ C(region, levels=['north'])", df, private=False)
    assert "south" not in str(info.value)


def test_backquoted_column_names(df):
    d = df.rename(columns={"region": "home region"})
    got = design("y ~ C(`home region`) + `home region`", d, levels={"home region": REGIONS})
    assert got.levels == {"home region": REGIONS}
    with pytest.raises(ValueError, match="column 'home region' is categorical"):
        design("y ~ C(`home region`)", d)


@pytest.mark.parametrize("levels, exc, match", [
    (["north"], TypeError, "must be a dict"),
    ({"nowhere": REGIONS}, ValueError, "not in the data"),
    ({"region": "north"}, TypeError, "list of levels"),
    ({"region": []}, ValueError, "empty"),
    ({"region": ["north", "north"]}, ValueError, "twice"),
    ({"region": ["north", None]}, ValueError, "missing value"),
])
def test_levels_argument_validated(df, levels, exc, match):
    with pytest.raises(exc, match=match):
        glm("y ~ region", data=df, client="site", family="logistic", levels=levels)


# ---------------------------------------------------------------------- multinomial classes
@pytest.fixture
def three_class():
    rng = np.random.default_rng(1)
    n = 300
    return pd.DataFrame({"x": rng.normal(size=n), "site": rng.integers(0, 3, n),
                         "label": rng.choice(["a", "b"], n)})  # "c" is a class no row has


def test_multinomial_classes_must_be_declared(three_class):
    with pytest.raises(ValueError, match=r"levels declared.*levels=\{'label'"):
        glm("label ~ x", data=three_class, client="site", family="multinomial", mu=2.0)
    assert design("label ~ x", three_class, private=False, multinomial=True).n_classes == 2  # mu = inf: observed


@pytest.mark.parametrize("declare", ["argument", "categorical"])
def test_declared_classes_count_even_when_unobserved(three_class, declare):
    if declare == "argument":
        kw = {"levels": {"label": ["a", "b", "c"]}}
    else:
        kw = {}
        three_class = three_class.assign(label=pd.Categorical(three_class["label"], categories=["a", "b", "c"]))
    est = glm("label ~ x", data=three_class, client="site", family="multinomial", mu=2.0, random_state=0, **FAST,
              **kw)
    assert est.coef_.shape == (2, 2)  # K = 3 declared classes
    assert est.levels_ == {"label": ["a", "b", "c"]}
    if declare == "argument":
        bad = three_class.copy()
        bad.loc[0, "label"] = "d"
        with pytest.raises(ValueError, match=r"column 'label': 1 row"):
            glm("label ~ x", data=bad, client="site", family="multinomial", mu=2.0, **FAST, **kw)


# ---------------------------------------------------------------------- transforms
@pytest.mark.parametrize("term", ["scale(x)", "center(x)", "standardize(x)", "poly(x, 2)", "bs(x, df=4)",
                                  "cr(x, df=4)", "bs(x, knots=[0.0], lower_bound=-9, upper_bound=9)"])
def test_stateful_transforms_rejected_with_finite_mu(df, term):
    with pytest.raises(ValueError, match=r"stateful transform.*scaling=") as info:
        glm(f"y ~ {term}", data=df, client="site", family="logistic", mu=2.0)
    assert str(info.value).count(term.split("(")[0] + "(") == 1  # each transform named once (was: twice)
    assert design(f"y ~ {term}", df, private=False).X.shape[0] == len(df)  # allowed with mu = inf


@pytest.mark.parametrize("term, column", [("I(x - np.mean(x))", "I(x - np.mean(x))"),
                                          ("I(x / x.abs().max())", "I(x / x.abs().max())")])
def test_terms_that_read_other_rows_rejected_with_finite_mu(df, term, column):
    with pytest.raises(ValueError, match="values of other rows") as info:
        design(f"y ~ x + {term}", df)
    assert repr([column]) in str(info.value)
    assert design(f"y ~ x + {term}", df, private=False).names[-1] == column


def test_row_by_row_and_stateless_transforms_allowed(df):
    d = df.assign(z=np.abs(df["x"]) + 1)
    got = design('y ~ np.log(z) + I(x ** 2) + Q("x") + x:z', d)
    np.testing.assert_allclose(got.X[:, 1], np.log(d["z"]))
    assert got.names == ["Intercept", "np.log(z)", "I(x ** 2)", "Q('x')", "x:z"]


# ---------------------------------------------------------------------- missing values
def test_na_drop_with_finite_mu_warns_and_records_the_leak(df):
    bad = df.copy()
    bad.loc[5, "x"] = np.nan
    with pytest.warns(PrivacyLeakWarning, match="client sizes n_i after dropping.*impute"):
        est = glm("y ~ x", data=bad, client="site", family="logistic", na_action="drop", mu=2.0, random_state=0,
                  **FAST)
    assert est.n_samples_ == len(df) - 1
    assert est.privacy_.leaks == [NA_DROP_LEAK]
    assert not est.privacy_.is_private
    assert "NOT fully private" in est.summary().as_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        clean = glm("y ~ x", data=df, client="site", family="logistic", mu=2.0, random_state=0, **FAST)
        assert clean.privacy_.is_private
        est = glm("y ~ x", data=bad, client="site", family="logistic", na_action="drop", mu=INF, clip=INF)
    assert est.privacy_.leaks == []


# ---------------------------------------------------------------------- non-private baselines
@pytest.mark.parametrize("method", ["pooled", "localfit"])
def test_non_private_baselines_refuse_a_finite_mu(df, method):
    for kw in ({}, {"mu": 5.0}):
        with pytest.raises(ValueError, match=rf"method='{method}' is a non-private baseline.*mu=float\('inf'\)"):
            glm("y ~ x", data=df, client="site", family="logistic", method=method, **kw)
    est = glm("y ~ x", data=df, client="site", family="logistic", method=method, mu=INF)
    assert math.isinf(est.privacy_.mu)


def test_mu_validated_before_the_data(df):
    with pytest.raises(ValueError, match="mu must be > 0"):
        glm("y ~ x", data=df, client="site", family="logistic", mu=0.0)


# ---------------------------------------------------------------------- messages never quote data
def test_formula_errors_do_not_quote_data_values(df):
    d = df.assign(secret=np.where(df["x"] > 0, "value_A_secret", "value_B_secret"))
    with pytest.raises(ValueError, match=r"np.float64\(secret\)") as info:
        design("y ~ np.float64(secret)", d, private=False)
    assert "value_" not in str(info.value)
    with pytest.raises(ValueError, match="one numeric response column") as info:
        design("secret ~ x", d, private=False)
    assert "value_" not in str(info.value)


# ---------------------------------------------------------------------- adversarial terms that read other rows
ADVERSARIAL = [
    "I(np.clip(x, np.quantile(x, 0.05), np.quantile(x, 0.95)))",  # winsorize at data quantiles
    "I(abs(x) > np.quantile(abs(x), 0.9))",
    "I(x.rank())", "I(x - x.mean())", "I(np.cumsum(x))", "I(np.add.accumulate(x))", "I(x.shift(1))",
    "I(x[0] * x)", "I(x / np.max(np.abs(x)))", "I(np.sort(x))", "I(x * len(x))", "I(np.where(x > x.median(), 1, 0))",
    "np.log(np.abs(x - np.mean(x)) + 1)", "I(x @ x * x)", "I(x if True else x)", "lag(x)",
]


@pytest.fixture
def tied():
    """Data whose first and last x tie, so a check on the first and last rows alone misses quantile terms."""
    rng = np.random.default_rng(4)
    n = 60
    d = pd.DataFrame({"x": rng.normal(size=n), "site": rng.integers(0, 3, n)})
    d.loc[0, "x"] = d.loc[n - 1, "x"] = 0.0
    d["y"] = (rng.random(n) < 0.5).astype(float)
    return d


@pytest.mark.parametrize("term", ADVERSARIAL)
def test_every_term_that_can_read_other_rows_is_refused(tied, term):
    with pytest.raises(ValueError, match="values of other rows|missing values"):  # shift, lag: NaN in the first row
        build_design(f"y ~ x + {term}", tied, client="site", multinomial=False, levels=None, na_action="raise",
                     private=True)


def test_the_quantile_term_is_refused_by_glm_with_finite_mu(tied):
    with pytest.raises(ValueError, match="values of other rows"):
        glm("y ~ x + I(abs(x) > np.quantile(abs(x), 0.9))", data=tied, client="site", family="logistic", mu=2.0)


def test_accepted_terms_are_row_by_row(tied):
    """Every accepted term maps each row alone: the design of each row rebuilt alone equals its full-design row."""
    d = tied.assign(z=np.abs(tied["x"]) + 1, r=pd.Categorical(np.where(tied["x"] > 0, "a", "b"), categories=["a", "b"]))
    formula = ('np.log(y + 1) ~ np.log(z) + I(x ** 2) + Q("x") + x:z + np.maximum(x, 0.5) + abs(x) + I((x > 0) * z) '
               '+ C(r) + I(-x % 3) + np.exp(-z)')
    got = design(formula, d)
    for j in (0, 7, len(d) - 1):
        alone = design(formula, d.iloc[[j]].reset_index(drop=True))
        np.testing.assert_array_equal(alone.X[0], got.X[j])


def test_the_row_check_is_fast_for_many_rows():
    import time
    rng = np.random.default_rng(0)
    n = 100_000
    d = pd.DataFrame({"x": rng.normal(size=n), "z": rng.random(n) + 1, "site": rng.integers(0, 10, n),
                      "y": rng.integers(0, 2, n).astype(float)})
    start = time.perf_counter()
    design("y ~ x + np.log(z) + I(x ** 2) + x:z", d)
    private = time.perf_counter() - start
    start = time.perf_counter()
    design("y ~ x + np.log(z) + I(x ** 2) + x:z", d, private=False)
    assert private < 2.0 * (time.perf_counter() - start) + 0.5
