"""The unequal-site design the plan tests share (tests/estimators/test_power_site_weights.py, test_power_reported.py):
coefficients, two large sites and forty small ones (at mu = 1 the size-weighted plan's SE is 11-14% above the
re-weighed one's), and the rows' law."""

import warnings

import numpy as np

import privfedstat as pfs
from privfedstat import FederatedData, FedIRLS, PrivateStandardize

NAMES = ["Intercept", "x1", "x2"]
COEF = (-0.5, 0.3, 0.4)
UNEQUAL = np.array([1000] * 2 + [25] * 40)


def rows(n, rng):
    return np.column_stack([np.ones(n), rng.standard_normal(n), (rng.random(n) < 0.4).astype(float)])


def unequal_fits(family, reps, mu=1.0):
    """``reps`` default fits (privately standardised, seeds 0, 1, ...) on data drawn from the design's law over the
    UNEQUAL sites (one generator, seed 7): yields each fitted estimator."""
    rng = np.random.default_rng(7)
    est = FedIRLS(family=family, mu=mu, scaling=PrivateStandardize(intercept=0))
    for r in range(reps):
        X = rows(int(UNEQUAL.sum()), rng)
        y = pfs.get_family(family).simulate(X @ np.asarray(COEF), rng, 1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.set_params(random_state=r).fit(FederatedData.from_pooled(X, y, clients=np.repeat(np.arange(42), UNEQUAL)))
        yield est
