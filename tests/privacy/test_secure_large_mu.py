"""A secure fit at a large mu reports epsilon without building an exact PLD of astronomical size.

Its summary used to crash: the ledger composed the Skellam releases' exact PLDs with a Gaussian of the rest's GDP, whose
grid grows with mu (``glm(..., aggregation="secure", mu=1e6).summary()``: MemoryError, a 4.36 PiB array). Above
``EXACT_PLD_MAX_MU`` epsilon is GDP's, an upper bound of the exact one.
"""

import numpy as np
import pandas as pd
import pytest

from privfedstat import glm
from privfedstat.privacy.gdp import epsilon_from_mu


@pytest.fixture(scope="module")
def secure_fit():
    rng = np.random.default_rng(0)
    n = 1200
    df = pd.DataFrame({"x": rng.normal(size=n), "site": rng.integers(0, 3, n)})
    df["y"] = (rng.random(n) < 1.0 / (1.0 + np.exp(-0.5 * df.x))).astype(float)
    return glm("y ~ x", df, client="site", family="binomial", mu=1e6, aggregation="secure", random_state=0)


def test_large_mu_secure_epsilon_is_the_gdp_bound(secure_fit):
    led = secure_fit.privacy_
    assert led.epsilon(1e-5) == pytest.approx(epsilon_from_mu(led.mu, 1e-5), rel=1e-12)
    assert led.delta(10.0) <= 1.0


def test_large_mu_secure_summary_prints(secure_fit):
    text = str(secure_fit.summary())
    eps = f"eps = {secure_fit.privacy_.epsilon(1e-5):.4g}"
    assert "Towards the server" in text and eps in " ".join(text.split())
