"""The coefficients a warning or a refusal names are the summary's rows: a multinomial glm() fit names each as
``response=class term`` (not ``x5`` or a tuple), and FedIRLS's refusal names the formula's terms (not ``column 1``)."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from privfedstat import PrivacyNoiseWarning, UnsupportedModelError, glm


def three_classes(seed: int, n: int = 2000, m: int = 4) -> pd.DataFrame:
    """A 3-class response with string levels on two normal columns over 4 sites."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"age": rng.normal(0, 1, n), "x": rng.normal(0, 1, n), "site": rng.integers(0, m, n)})
    eta = np.column_stack([np.zeros(n), 0.3 + 0.5 * df.age, -0.5 + 0.5 * df.x])
    p = np.exp(eta)
    p /= p.sum(1, keepdims=True)
    df["y"] = np.array(["a", "b", "c"])[(p.cumsum(1) > rng.random((n, 1))).argmax(1)]
    return df


def _noise_messages(seed: int, mu: float) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        glm("y ~ age + x", three_classes(seed), client="site", family="multinomial", mu=mu,
            levels={"y": ["a", "b", "c"]}, random_state=seed)
    return [str(w.message) for w in caught if issubclass(w.category, PrivacyNoiseWarning)
            and "privacy noise dominates" in str(w.message)]


@pytest.mark.parametrize(("seed", "mu"), [(0, 0.5), (1, 1.0)])
def test_noise_dominated_multinomial_coefficients_are_named_as_the_summary_rows(seed, mu):
    """mu = 0.5 (the path's check: it named ``x0, ..., x5``) and mu = 1 (the inference's check: it named
    ``('y=b', 'Intercept')``)."""
    messages = _noise_messages(seed, mu)
    assert messages
    expected = {f"y={c} {t}" for c in "bc" for t in ("Intercept", "age", "x")}
    for message in messages:
        listed = re.search(r"coefficient\(s\) (.*?) of FedIRLS", message).group(1)
        names = [s.strip() for s in re.split(r",| and \d+ more", listed) if s.strip()]
        assert names and set(names) <= expected, message


def villages(seed: int, n: int = 2825, m: int = 119) -> pd.DataFrame:
    """A binary outcome on five household covariates and a 4-level religion with a 5% level, over 119 villages of
    Dirichlet sizes (mean 24 rows; test_refuse_early's stand-in, refused at mu = 2)."""
    rng = np.random.default_rng(seed)
    site = np.repeat(np.arange(m), rng.multinomial(n, rng.dirichlet(np.full(m, 2.0))))
    df = pd.DataFrame({"age": rng.integers(15, 70, n).astype(float), "female": rng.binomial(1, .5, n).astype(float),
                       "school": rng.poisson(5, n).astype(float), "assets": rng.gamma(2, 2, n),
                       "hh": rng.poisson(5, n).astype(float) + 1, "site": site})
    df["rel"] = pd.Categorical(rng.choice(list("abcd"), n, p=[.6, .25, .1, .05]), categories=list("abcd"))
    eta = (-1 + 0.02 * (df.age - 40) + 0.4 * df.female + 0.1 * (df.school - 5) + 0.1 * df.assets - 0.05 * df.hh
           + 0.5 * (df.rel == "c"))
    df["y"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    return df


def test_a_refused_glm_fit_names_the_formula_terms():
    """Many small sites at mu = 2: the refusal names the weak directions' terms, as its remedy ("drop or merge the
    columns or classes named") needs; it said ``column 6, column 0``."""
    formula, df = "y ~ age + female + school + assets + hh + C(rel)", villages(0)
    with warnings.catch_warnings(), pytest.raises(UnsupportedModelError) as err:
        warnings.simplefilter("ignore")
        glm(formula, df, client="site", family="logistic", mu=2.0, random_state=0)
    named = re.search(r"\(mostly (.*?)\) sums to", str(err.value))
    assert named is not None, str(err.value)
    terms = glm(formula, df, client="site", family="logistic", mu=float("inf")).feature_names_in_
    listed = [s.strip() for s in named.group(1).split(", ")]
    assert listed and set(listed) <= set(terms), str(err.value)
