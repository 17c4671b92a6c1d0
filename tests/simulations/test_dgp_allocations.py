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


def test_rho_zero_keeps_the_paper_draws_and_key():
    from privfedstat.simulations import Scenario

    sizes = [30, 40]
    a = GLMDesign("poisson").sample(sizes, np.random.default_rng(4))
    b = GLMDesign("poisson", rho=0.0, correlation="ar1").sample(sizes, np.random.default_rng(4))
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    # the independent design, drawn by hand as before rho existed
    rng = np.random.default_rng(4)
    X = np.column_stack([np.ones(70), rng.standard_normal((70, 4))])
    np.testing.assert_array_equal(a.X, X)
    key = "logistic|beta=default|sc=1|m=8|Equal(60,)|mu=2|K=None|clip=auto"
    assert Scenario(GLMDesign("logistic", rho=0.0), 8, Equal(60)).key == key
    assert Scenario(GLMDesign("logistic", rho=0.5), 8, Equal(60)).key != key


@pytest.mark.parametrize("correlation", ["equi", "ar1"])
def test_correlated_covariates(correlation):
    design = GLMDesign("logistic", rho=0.5, correlation=correlation, sigma_c=2.0)
    R = design.covariate_correlation
    lag = np.abs(np.subtract.outer(np.arange(4), np.arange(4)))
    np.testing.assert_allclose(R, np.where(lag == 0, 1.0, 0.5) if correlation == "equi" else 0.5**lag)
    data = design.sample([100000], np.random.default_rng(5))
    np.testing.assert_array_equal(data.X[:, 0], 1.0)
    C = data.X[:, 1:]
    np.testing.assert_allclose(np.cov(C, rowvar=False), 4.0 * R, atol=0.06)  # sd(cov) ~ 0.03 at N = 1e5


def test_correlated_design_recovers_beta_by_mle():
    import statsmodels.api as sm

    design = GLMDesign("poisson", rho=0.5)
    data = design.sample([40000], np.random.default_rng(6))
    fit = sm.GLM(data.y, data.X, family=sm.families.Poisson()).fit()
    assert np.all(np.abs(fit.params - design.beta_true) < 4 * fit.bse)


def test_correlation_validation():
    with pytest.raises(ValueError, match="rho"):
        GLMDesign(rho=1.0)
    with pytest.raises(ValueError, match="correlation"):
        GLMDesign(rho=0.5, correlation="toeplitz")
    with pytest.raises(ValueError, match="exceed -1/3"):
        GLMDesign(rho=-0.4)  # 4 equicorrelated covariates need rho > -1/3
    assert GLMDesign(rho=-0.4, correlation="ar1").rho == -0.4
