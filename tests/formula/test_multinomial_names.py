"""The coefficients a warning names are the summary's rows: a multinomial glm() fit names each as
``response=class term`` (not ``x5`` or a tuple; FedIRLS's refusal: tests/estimators/test_refuse_early.py)."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from privfedstat import PrivacyNoiseWarning, glm


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
