"""flchain's stand-in for FedIRLS's refine bound (tests/estimators/test_fedirls_insurance.py, test_fedirls_tested_raise.py):
a logistic covariate near 1 with 0.5% of the rows near 6 (high leverage in the whitened refine coordinates, their events
more likely), 4000 rows over 6 unequal sites; with design seed 2 the clipped root at the searched and blindly raised
bound (26.8) sits 0.51 SE from the MLE."""

import numpy as np
import statsmodels.api as sm

from privfedstat import FederatedData

SIZES = [1500, 1000, 800, 400, 200, 100]


def stand_in(seed: int = 2) -> tuple[FederatedData, object]:
    """The design drawn with ``seed`` over :data:`SIZES`, and statsmodels' pooled MLE on it."""
    rng = np.random.default_rng(seed)
    N = 4000
    c = rng.lognormal(0.0, 0.3, N)
    out = rng.random(N) < 0.005
    c[out] = 6.0 * rng.lognormal(0.0, 0.3, out.sum())
    z = rng.standard_normal(N)
    X = np.column_stack([np.ones(N), z, c])
    y = (rng.random(N) < 1 / (1 + np.exp(-(-1.0 + 0.5 * z + 0.5 * (c - 1))))).astype(float)
    mle = sm.GLM(y, X, family=sm.families.Binomial()).fit(tol=1e-12)
    return FederatedData.from_pooled(X, y, sizes=SIZES), mle
