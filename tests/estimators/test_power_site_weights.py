"""plan_study under FedIRLS's site weights (``weights="optimal"``, the default): the plan reads the fit's rule
(:mod:`privfedstat.algorithms.fedirls.site_weights`) at the site-effect variance tau^2 the fit estimates where the
sites share one law, and predicts the SEs the fits report on sites of unequal size."""


import numpy as np
import pytest
from _power_design import COEF, NAMES, UNEQUAL, rows, unequal_fits
from scipy.stats import wishart

import privfedstat as pfs
from privfedstat.algorithms.fedirls.site_weights import null_heterogeneity


@pytest.fixture(scope="module")
def design():
    return rows(20_000, np.random.default_rng(0))


def test_null_heterogeneity_is_the_wishart_median():
    """Equal sizes without noise: Q ~ Wishart(m - 1, I) / 1 and the estimate ``tr psd(Q - (m - 1) I) / (p n (m - 1))``;
    its median from 20000 scipy Wishart draws (the plan's 201 draws: Monte-Carlo sd about 9% of the spread) within 15%;
    with one coordinate the median is 0 (the median of chi^2_(m-1) is below m - 1)."""
    m, n, p = 30, 50.0, 3
    Q = wishart(df=m - 1, scale=np.eye(p)).rvs(size=20_000, random_state=1)
    ref = np.median([np.maximum(np.linalg.eigvalsh(q - (m - 1) * np.eye(p)), 0).sum() / (p * n * (m - 1)) for q in Q])
    assert null_heterogeneity(np.full(m, n), np.zeros(m), np.eye(p)) == pytest.approx(ref, rel=0.15)
    assert null_heterogeneity(np.full(m, n), np.zeros(m), np.eye(1)) == 0.0


def test_equal_sizes_plan_as_size_weights(design):
    """Equal sizes: the rule gives size weights, so the default plan is the size-weighted one."""
    plans = [pfs.plan_study(design, COEF, family="logistic", sizes=[300] * 10, mu=2.0, names=NAMES, weights=w).frame
             for w in ("optimal", "size")]
    np.testing.assert_allclose(plans[0].to_numpy(float), plans[1].to_numpy(float), rtol=1e-12)


def test_unequal_sizes_plan_the_fits_weights(design):
    """Unequal sizes at mu = 1: the default plan re-weighs as the fit does (SE 10-12% below the size-weighted plan's,
    asserted at 5%; its sampling part raised by ``N sum w_i^2 / n_i > 1``); ``weights="size"`` plans size weights."""
    opt, size = (pfs.plan_study(design, COEF, family="logistic", sizes=UNEQUAL, mu=1.0, names=NAMES, weights=w).frame
                 for w in ("optimal", "size"))
    assert np.all(opt["se"] < 0.95 * size["se"])
    assert np.all(opt["se_sampling"] > size["se_sampling"]) and np.all(opt["se_privacy"] < size["se_privacy"])


def test_unequal_sizes_plan_within_ten_percent_of_the_fits(design):
    """20 default fits on data drawn from the plan's population (2 x 1000 + 40 x 25 rows, mu = 1): the planned SE within
    10% of the median SE the fits report, per coefficient (the size-weighted plan is 8-12% above it; 1-2 s)."""
    plan = pfs.plan_study(design, COEF, family="logistic", sizes=UNEQUAL, mu=1.0, names=NAMES)
    ses = [np.ravel(est.bse_) for est in unequal_fits("logistic", 20)]
    np.testing.assert_allclose(plan.frame["se"], np.nanmedian(ses, axis=0), rtol=0.1)
