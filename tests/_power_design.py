"""The unequal-site design the plan tests share (tests/estimators/test_power_site_weights.py, test_power_reported.py):
coefficients, two large sites and forty small ones (at mu = 1 the size-weighted plan's SE is 11-14% above the
re-weighed one's), and the rows' law."""

import numpy as np

NAMES = ["Intercept", "x1", "x2"]
COEF = (-0.5, 0.3, 0.4)
UNEQUAL = np.array([1000] * 2 + [25] * 40)


def rows(n, rng):
    return np.column_stack([np.ones(n), rng.standard_normal(n), (rng.random(n) < 0.4).astype(float)])
