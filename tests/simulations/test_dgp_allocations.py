import numpy as np
import pytest

from privfedstat.simulations import DEFAULT_BETA, Equal, FixedTotal, GLMDesign, LogNormal, Uniform


def test_design_shapes_and_intercept():
    rng = np.random.default_rng(0)
    data = GLMDesign("logistic").sample([30, 40], rng)
    assert data.n_clients == 2 and data.n_features == 5
    np.testing.assert_array_equal(data.X[:, 0], 1.0)
    assert set(np.unique(data.y)) <= {0.0, 1.0}


@pytest.mark.parametrize("family", ["logistic", "poisson", "gaussian"])
def test_design_recovers_beta_by_mle(family):
    import statsmodels.api as sm

    rng = np.random.default_rng(1)
    design = GLMDesign(family, sigma_c=1.0)
    data = design.sample([20000], rng)
    fam = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(), "gaussian": sm.families.Gaussian()}[family]
    fit = sm.GLM(data.y, data.X, family=fam).fit()
    np.testing.assert_allclose(fit.params, DEFAULT_BETA[family], atol=0.06)


def test_poisson_means_moderate():
    data = GLMDesign("poisson").sample([50000], np.random.default_rng(2))
    assert 1.0 < data.y.mean() < 3.0 and np.quantile(data.y, 0.99) <= 12


def test_design_validation():
    with pytest.raises(ValueError, match="family"):
        GLMDesign("gamma")
    with pytest.raises(ValueError, match="sigma_c"):
        GLMDesign(sigma_c=0.0)


def test_allocations():
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(Equal(7).sizes(4, rng), [7, 7, 7, 7])
    u = Uniform(10, 90).sizes(5000, rng)
    assert u.min() == 10 and u.max() == 90 and abs(u.mean() - 50) < 1.5
    ln = LogNormal().sizes(20000, rng)
    assert ln.min() >= 20 and abs(np.median(ln) - np.exp(5.5)) < 15
    with pytest.raises(ValueError):
        Uniform(0, 5)


@pytest.mark.parametrize("scheme", ["equal", "uniform", "lognormal"])
@pytest.mark.parametrize("m", [25, 200, 400])
def test_fixed_total_sums_exactly(scheme, m):
    sizes = FixedTotal(20000, scheme).sizes(m, np.random.default_rng(m))
    assert sizes.sum() == 20000 and sizes.size == m and sizes.min() >= 20
    if scheme == "equal":
        assert sizes.max() - sizes.min() <= 1


def test_fixed_total_errors():
    with pytest.raises(ValueError, match="at least"):
        FixedTotal(100, "equal").sizes(10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="scheme"):
        FixedTotal(100, "pareto")
