"""FedIRLS's site weights (``weights="optimal"``, the default): the refine rounds' weights of least mean square error
against the size-weighted root under each site's privacy noise and a site effect estimated from released values."""
import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy.optimize import minimize

from privfedstat import FederatedData, FedIRLS
from privfedstat.algorithms.fedirls import IRLSSchedule
from privfedstat.algorithms.fedirls.site_weights import heterogeneity, mse_weights, sampling_var, shift_covariance
from privfedstat.families import get_family
from privfedstat.federation.protocol import Setup

SIZES = np.array([3000.0, 800.0, 120.0, 40.0, 10.0, 5.0, 2.0, 1.0])


def _stated_mse(w, sizes, tau2, privacy):
    pi = sizes / sizes.sum()
    return float(np.sum((w - pi) ** 2 * (1.0 / sizes + tau2)) + np.sum(w**2 * privacy))


@pytest.mark.parametrize("tau2", [0.0, 1e-3, 0.05])
def test_mse_weights_minimise_the_stated_error(tau2):
    """The closed form equals a numerical minimiser of ``sum (w - pi)^2 A + sum w^2 P`` over the simplex's plane, and
    beats size weights."""
    privacy = 200.0 / SIZES**2
    w = mse_weights(SIZES, tau2, privacy)
    found = minimize(lambda v: _stated_mse(v, SIZES, tau2, privacy), SIZES / SIZES.sum(), method="SLSQP",
                     constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1.0}], options={"ftol": 1e-16, "maxiter": 500})
    np.testing.assert_allclose(w, found.x, atol=1e-6)
    assert _stated_mse(w, SIZES, tau2, privacy) < _stated_mse(SIZES / SIZES.sum(), SIZES, tau2, privacy)
    assert np.all(w > 0) and math.isclose(w.sum(), 1.0)


def test_mse_weights_limits():
    """Equal sizes, or no privacy noise, give size weights; no site effect gives ``n^2 / (n + n^2 P)``."""
    equal = np.full(5, 40.0)
    np.testing.assert_allclose(mse_weights(equal, 0.01, np.full(5, 3.0)), np.full(5, 0.2), rtol=1e-12)
    np.testing.assert_allclose(mse_weights(SIZES, 0.01, np.zeros(SIZES.size)), SIZES / SIZES.sum(), rtol=1e-12)
    privacy = 50.0 / SIZES**2
    expected = 1.0 / (1.0 / SIZES + privacy)
    np.testing.assert_allclose(mse_weights(SIZES, 0.0, privacy), expected / expected.sum(), rtol=1e-10)
    assert not np.any(shift_covariance(SIZES / SIZES.sum(), SIZES, 0.3 * np.eye(2), sigma2=1.0))


def test_heterogeneity_is_the_site_effects_covariance():
    """DerSimonian-Laird's matrix moment on simulated messages (sampling + a site effect along one direction + privacy
    noise) averages to T (1000 replicates; Monte-Carlo sd of the mean about 2% of T's eigenvalue), the direction kept
    (the sites differ in their intercepts only, say)."""
    rng = np.random.default_rng(0)
    sizes = np.repeat([2000.0, 500.0, 100.0, 20.0], 10)
    noise = 30.0 / sizes**2
    p, u = 4, np.array([0.6, 0.8, 0.0, 0.0])
    T = 4e-3 * np.outer(u, u)
    sd = np.sqrt(1.0 / sizes + noise)[:, None]
    est = np.mean([heterogeneity(0.3 + sd * rng.standard_normal((sizes.size, p))
                                 + np.sqrt(4e-3) * rng.standard_normal(sizes.size)[:, None] * u, sizes, noise)
                   for _ in range(1000)], axis=0)
    assert abs(u @ est @ u / 4e-3 - 1.0) < 0.08
    np.testing.assert_allclose(est, T, atol=0.1 * 4e-3)
    assert not np.any(heterogeneity(np.zeros((1, 3)), np.array([10.0]), np.array([1.0])))


def test_heterogeneity_of_messages_released_in_other_coordinates():
    """Messages released in the fitting columns with isotropic noise and mapped to whitened coordinates (``g P``) carry
    noise of shape ``P^T P``: the moment with that shape averages to T (1000 replicates), while the isotropic moment
    with the same trace (the shape ignored) is off by more than a fifth of T along the site effects' direction."""
    rng = np.random.default_rng(1)
    sizes = np.repeat([2000.0, 500.0, 100.0, 20.0], 10)
    noise = 100.0 / sizes**2
    P = np.array([[1.0, 0.0, 0.0], [0.8, 0.3, 0.0], [0.0, 0.0, 2.0]])
    u = np.array([0.0, 0.0, 1.0])
    S = P.T @ P
    draws = [(0.3 + rng.standard_normal((sizes.size, 3)) / np.sqrt(sizes)[:, None]
              + np.sqrt(4e-3) * rng.standard_normal(sizes.size)[:, None] * u
              + (np.sqrt(noise)[:, None] * rng.standard_normal((sizes.size, 3))) @ P) for _ in range(1000)]
    est = np.mean([heterogeneity(d, sizes, noise, noise_shape=S) for d in draws], axis=0)
    np.testing.assert_allclose(est, 4e-3 * np.outer(u, u), atol=0.1 * 4e-3)
    flat = np.mean([heterogeneity(d, sizes, noise * np.trace(S) / 3) for d in draws], axis=0)
    assert abs(u @ flat @ u / 4e-3 - 1.0) > 0.2


def _judged_raise(B, grid, sizes, mu_last, tau2):
    """The raise j <= 3 judged on the noise under the site weights, computed independently: at the bound B r^j site i
    puts ``P_i = (2 B r^j / (n_i mu_last))^2`` into the estimate per unit weight (the two combined refine releases act
    as one with mu_last^2 their shares' sum), the weights minimise ``sum (w - pi)^2 (1 / n_i + tau2) + sum w^2 P``
    numerically, and the judged variance is ``sum w^2 P + tau2 sum (w - pi)^2``."""
    pi, r = sizes / sizes.sum(), grid[1] / grid[0]
    judged = []
    for k in range(4):
        P = (2 * B * r**k / (sizes * mu_last)) ** 2
        w = minimize(_stated_mse, pi, args=(sizes, tau2, P), method="SLSQP", options={"ftol": 1e-18, "maxiter": 500},
                     constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1.0}]).x
        judged.append(math.sqrt(float(np.sum(w**2 * P) + tau2 * np.sum((w - pi) ** 2))))
    j = 0
    while j < 3 and judged[j + 1] <= 0.4 / math.sqrt(sizes.sum()):
        j += 1
    return j, judged


@pytest.mark.parametrize("tau2N, expected", [(200.0, 3), (1000.0, 2), (1500.0, 1), (5e4, 0)])
def test_the_insurance_judges_the_noise_under_the_site_weights(tau2N, expected):
    """Logistic, mu = 8, two large sites and 30 of 5 rows (covid's shape): with size weights every site adds the same
    noise and the found bound's noise is above the insurance's ceiling (no raise; tau2 not given: main's rule), while
    under the weights the rule would choose with the located tau^2 it is below (raised); a tau^2 far above the sites'
    sampling variance gives nearly size weights and no raise. The raise equals the independent computation's."""
    sizes = np.array([6000.0, 3000.0] + [5.0] * 30)
    est = FedIRLS(family="logistic", mu=8.0)
    grid = est._default_search.grid
    B = float(grid[34])
    setup = Setup(B, 5.0, 8.0 * 0.9)
    plan = est.plan_schedule(get_family("logistic"), sizes, setup, 3)
    assert plan.reweigh
    mu_last = setup.mu * math.sqrt((1 - IRLSSchedule.locate_share - IRLSSchedule.research_share) * (0.15 + 0.45))
    size_sd = 2 * B * math.sqrt(np.sum((sizes / sizes.sum()) ** 2 / sizes**2)) / mu_last
    assert size_sd > 0.4 / math.sqrt(sizes.sum())  # size weights: no raise
    found = {"gradient": B, "hessian": 5.0}
    assert plan.insured_bounds(found)["gradient"] == pytest.approx(B)
    j, judged = _judged_raise(B, grid, sizes, mu_last, tau2N / sizes.sum())
    assert j == expected, judged
    assert plan.insured_bounds(found, tau2=tau2N / sizes.sum())["gradient"] == pytest.approx(grid[34 + j])
    unweighed = FedIRLS(family="logistic", mu=8.0, weights="size").plan_schedule(get_family("logistic"), sizes, setup, 3)
    assert unweighed.insured_bounds(found, tau2=tau2N / sizes.sum()) == unweighed.insured_bounds(found)


def _small_sites(seed=0):
    """Logistic, six sites of 1000 rows and sixty of 3 rows, no site effect."""
    rng = np.random.default_rng(seed)
    sizes = [1000] * 6 + [3] * 60
    N = sum(sizes)
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-X @ [-0.3, 0.8, -0.5]))).astype(float)
    return X, y, sizes


def test_default_fit_down_weights_small_sites_and_states_less_noise():
    """Sixty 3-row sites each add as much noise as a 1000-row one under size weights; the default fit weighs them
    down (per row less than the large site), its stated privacy sd is smaller than the size-weighted fit's at the
    same seed, and its estimate stays within its interval of the pooled MLE (fails before weights="optimal"
    existed for FedIRLS)."""
    X, y, sizes = _small_sites()
    data = FederatedData.from_pooled(X, y, sizes=sizes)
    mle = sm.GLM(y, X, family=sm.families.Binomial()).fit().params
    kw = dict(family="logistic", mu=2.0, random_state=1)
    default, size = FedIRLS(**kw).fit(data), FedIRLS(weights="size", **kw).fit(data)
    assert default.weights == "optimal"
    sd_default = np.sqrt(np.diag(default.inference_.cov_privacy))
    sd_size = np.sqrt(np.diag(size.inference_.cov_privacy))
    assert np.all(sd_default < 0.6 * sd_size)
    lo, hi = np.asarray(default.inference_.conf_int()).T
    assert np.all((lo <= mle) & (mle <= hi))


def test_the_summary_says_when_the_sites_are_not_weighed_by_size():
    """The fitted weights and sizes are attributes, and the summary names a re-weighing with the effective numbers
    of sites (1 / sum w^2 against N^2 / sum n^2); a size-weighted fit has no such row."""
    X, y, sizes = _small_sites()
    data = FederatedData.from_pooled(X, y, sizes=sizes)
    kw = dict(family="logistic", mu=2.0, random_state=1)
    default, size = FedIRLS(**kw).fit(data), FedIRLS(weights="size", **kw).fit(data)
    np.testing.assert_array_equal(default.client_sizes_, sizes)
    np.testing.assert_allclose(size.site_weights_, np.asarray(sizes) / sum(sizes), rtol=1e-12)
    assert default.site_weights_.sum() == pytest.approx(1.0)
    per_row = default.site_weights_ / np.asarray(sizes)
    assert per_row[-1] < per_row[0]  # a 3-row site counts less per row than a 1000-row one
    effective = 1.0 / np.sum(default.site_weights_ ** 2)
    lines = str(default.summary()).splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("Site weights")]
    assert len(start) == 1
    wrapped = [lines[start[0]]] + [line for line in lines[start[0] + 1:start[0] + 4] if line.startswith(" " * 20)]
    row = [" ".join(line.strip() for line in wrapped)]
    assert len(row) == 1 and "weights='optimal'" in row[0] and f"{effective:.3g} effective sites" in row[0]
    assert f"({sum(sizes) ** 2 / sum(n * n for n in sizes):.3g} by size" in row[0]
    ratio = default.site_weights_ / (np.asarray(sizes) / sum(sizes))
    assert f"from {ratio.min():.3g} to {ratio.max():.3g}" in row[0]
    assert "Site weights" not in str(size.summary())


def _overdispersed_sites(seed=0, sizes=(3000,) * 2 + (30,) * 40, phi=4.0):
    """Poisson counts of dispersion phi (a gamma-Poisson mixture: the rate's gamma of shape k = mu / (phi - 1) gives
    variance phi times the mean at every row), the sites drawn from one law (no site effect)."""
    rng = np.random.default_rng(seed)
    N = sum(sizes)
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    mean = np.exp(X @ [1.0, 0.4, -0.3])
    shape = mean / (phi - 1.0)
    return X, rng.poisson(rng.gamma(shape, mean / shape)).astype(float), list(sizes)


def test_overdispersed_poisson_fit_down_weights_small_sites_and_states_less_noise():
    """Poisson with overdispersed counts (phi = 4) over two 3000-row sites and forty of 30 rows: the default fit
    re-weighs its sites with the released dispersion as the rows' score variance (fails where families with
    overdispersion kept size weights), its stated privacy sd is below 0.8 of the size-weighted fit's at the same seed,
    and its intervals hold the pooled MLE."""
    X, y, sizes = _overdispersed_sites()
    data = FederatedData.from_pooled(X, y, sizes=sizes)
    mle = sm.GLM(y, X, family=sm.families.Poisson()).fit().params
    kw = dict(family="poisson", mu=2.0, random_state=1)
    default, size = FedIRLS(**kw).fit(data), FedIRLS(weights="size", **kw).fit(data)
    pi = np.asarray(sizes) / sum(sizes)
    assert not np.allclose(default.site_weights_, pi, rtol=0.05)
    assert default.site_weights_[-1] / pi[-1] < default.site_weights_[0] / pi[0]
    np.testing.assert_allclose(size.site_weights_, pi, rtol=1e-12)
    sd_default = np.sqrt(np.diag(default.inference_.cov_privacy))
    sd_size = np.sqrt(np.diag(size.inference_.cov_privacy))
    assert np.all(sd_default < 0.8 * sd_size), sd_default / sd_size
    assert np.all(np.abs(default.coef_ - mle) < 4 * np.sqrt(np.diag(default.inference_.cov)))


def test_the_moment_reads_overdispersion_as_sampling_variance_not_site_effects():
    """Overdispersed counts (phi = 4) over sites of 400 and 20 rows drawn from one law: each site's mean score in the
    coordinates whitened by the information has variance phi / n_i, so the moment with the rows' score variance of
    the Pearson dispersion (:func:`sampling_var`) finds no more than its positive part finds on Gaussian messages of
    that variance (mean tau^2 over 200 replicates; with sigma^2 = 1 it reads the overdispersion ``(phi - 1) / n_i``
    as site effects, over three times that), and the weights it chooses with little privacy noise stay within 5% of
    the size weights."""
    rng = np.random.default_rng(3)
    sizes = np.array([400] * 5 + [20] * 30)
    site = np.repeat(np.arange(sizes.size), sizes)
    beta, found, absorbed, gaps = np.array([1.0, 0.4, -0.3]), [], [], []
    for _ in range(200):
        X = np.column_stack([np.ones(site.size), rng.standard_normal((site.size, 2))])
        mean = np.exp(X @ beta)
        y = rng.poisson(rng.gamma(mean / 3.0, 3.0))
        values, vectors = np.linalg.eigh(X.T @ (mean[:, None] * X) / site.size)
        rows = (X @ (vectors / np.sqrt(values)) @ vectors.T) * (y - mean)[:, None]
        messages = np.array([rows[site == i].mean(axis=0) for i in range(sizes.size)])
        sigma2 = sampling_var((float(np.mean((y - mean) ** 2 / mean)), 0.05))
        privacy = np.full(sizes.size, 1e-6)
        T, T1 = heterogeneity(messages, sizes, privacy, sigma2), heterogeneity(messages, sizes, privacy)
        found.append(np.trace(T) / 3)
        absorbed.append(np.trace(T1) / 3)
        pi = sizes / sizes.sum()
        gaps.append(np.max(np.abs(mse_weights(sizes, found[-1], privacy, sigma2) / pi - 1.0)))
    # the moment's positive part where the messages are Gaussian of variance phi / n_i exactly (no site effect)
    null = np.mean([np.trace(heterogeneity(rng.standard_normal((sizes.size, 3)) * np.sqrt(4.0 / sizes)[:, None], sizes,
                                           privacy, 4.0)) / 3 for _ in range(200)])
    assert np.mean(found) < 1.3 * null
    assert np.mean(absorbed) > 3.0 * null  # sigma^2 = 1: (phi - 1) / n_i taken for site effects
    assert np.max(gaps) < 0.05
    assert sampling_var(None) == 1.0 and sampling_var((0.7, 0.1)) == 1.0
