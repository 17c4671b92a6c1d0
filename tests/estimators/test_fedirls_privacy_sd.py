"""FedIRLS's stated privacy sd where the inference's own release of the Jacobian is noisy: Poisson, 10 sites of 200
rows, mu = 1 (the coverage grid's small-site cell, which over-covered). The privacy covariance is taken at the
Jacobian J, not at its release ``J + E`` (:func:`privfedstat.theory.noise_covariance.at_jacobian`); taken at the
release, E's maps carried more of the earlier rounds' errors and the stated sd was 18-30% too high per coefficient."""
import warnings

import numpy as np
import pytest

from privfedstat.simulations.allocations import Equal
from privfedstat.simulations.coverage import make_default_estimator
from privfedstat.simulations.dgp import GLMDesign
from privfedstat.simulations.runner import Scenario

SEEDS = range(120)


@pytest.mark.slow
def test_stated_privacy_sd_follows_the_noise_seeds_at_small_sites():
    """Over 120 noise seeds on one data set, the RMS stated privacy sd over the empirical sd of the coefficients,
    averaged over the 5 coefficients, within 15% of 1 (main before this change: 1.26; after: 1.07; the MC sd of an
    empirical sd at 120 seeds is about 6.5% per coefficient, 3% for the mean of five)."""
    design = GLMDesign("poisson", rho=0.5)
    scenario = Scenario(design, 10, Equal(200), 1.0, labels={"study": "coverage"})
    rng = np.random.default_rng(1000)
    data = design.sample(scenario.allocation.sizes(10, rng), rng)
    coefs, stated = [], []
    for seed in SEEDS:
        est = make_default_estimator("FedIRLS", scenario, 10_000 + seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(data)
        if est.inference_ is None or not np.all(np.isfinite(est.inference_.cov_privacy)):
            continue
        coefs.append(np.ravel(est.coef_))
        stated.append(np.diag(est.inference_.cov_privacy))
    assert len(coefs) >= 0.95 * len(SEEDS)
    ratio = np.sqrt(np.mean(stated, axis=0)) / np.std(coefs, axis=0, ddof=1)
    assert abs(float(np.mean(ratio)) - 1.0) < 0.15, ratio
