"""A fit aggregated with weights other than the sites' sizes: the weighted root's move from the pooled root (the MLE)
is the protocol's, in ``cov_path`` with its sampling part (:func:`privfedstat.inference.protocol_part.weights_move`),
so ``cov_protocol`` states the fit's deviation from the MLE."""
import warnings

import numpy as np
import statsmodels.api as sm

from privfedstat import FederatedData, FedIRLS
from privfedstat.inference.covariance import weighted_factor
from privfedstat.inference.protocol_part import weights_move

SIZES = np.array([2000, 200, 200, 200, 200])


def test_the_split_matches_a_naive_loop_over_site_means():
    """Against a Monte-Carlo of the sites' mean scores (``gbar_i ~ N(0, Sigma / n_i)``, J = I): the pooled root's
    error ``sum pi_i gbar_i`` has the covariance of the returned sampling part, the move ``sum (w_i - pi_i) gbar_i``
    the covariance added to the path part, the two are uncorrelated and the total is unchanged; size weights move
    nothing."""
    rng = np.random.default_rng(0)
    sizes = np.array([900.0, 60.0, 25.0, 10.0, 5.0])
    pi, w = sizes / sizes.sum(), np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    Sigma = np.array([[2.0, 0.6], [0.6, 1.0]])
    root = np.linalg.cholesky(Sigma)
    gbar = rng.standard_normal((200_000, sizes.size, 2)) @ root.T / np.sqrt(sizes)[None, :, None]
    pooled, move = np.einsum("i,rik->rk", pi, gbar), np.einsum("i,rik->rk", w - pi, gbar)
    c = weighted_factor(w, sizes)[0]
    V_a = np.array([[0.3, 0.1], [0.1, 0.2]]) * 1e-3
    V_s, V_path = weights_move(c * Sigma, V_a, c, sizes)
    np.testing.assert_allclose(V_s, np.cov(pooled.T), rtol=0.02)
    np.testing.assert_allclose(V_path - V_a, np.cov(move.T), rtol=0.02)
    assert np.max(np.abs(np.cov(pooled.T, move.T)[:2, 2:])) < 0.02 * np.sqrt(np.max(np.diag(V_s)) * np.max(np.diag(V_path - V_a)))
    np.testing.assert_allclose(V_s + V_path, c * Sigma + V_a, rtol=1e-14)
    c_pi = weighted_factor(pi, sizes)[0]
    V_s, V_path = weights_move(c_pi * Sigma, V_a, c_pi, sizes)
    np.testing.assert_allclose(V_s, c_pi * Sigma, rtol=1e-12)
    np.testing.assert_allclose(V_path, V_a, rtol=1e-12)


def _design(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    N = int(SIZES.sum())
    X = np.column_stack([np.ones(N), rng.normal(size=N), rng.binomial(1, 0.4, N)])
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(X @ np.array([-0.5, 0.8, -0.5])))))
    return X, y.astype(float)


def test_cov_protocol_states_the_deviation_from_the_mle_under_equal_weights():
    """Equal weights on sites of 2000 and 4 x 200 rows (``sum w_i^2 / n_i`` 2.3 times the pooled ``1 / N``) at a large
    mu: the estimate sits about a sampling SE from the pooled MLE (statsmodels), which ``cov_protocol`` now states
    (mean z^2 over 8 data sets near 1; before, the privacy noise alone, z in the hundreds); the parts still add up to
    the total."""
    z = []
    for seed in range(8):
        X, y = _design(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = FedIRLS(family="logistic", mu=1e3, weights=np.full(SIZES.size, 0.2), random_state=seed).fit(
                FederatedData.from_pooled(X, y, sizes=SIZES))
        inf = fit.inference_
        mle = sm.GLM(y, X, family=sm.families.Binomial()).fit().params
        z.append((inf.params - mle) / np.sqrt(np.diag(inf.cov_protocol)))
        np.testing.assert_allclose(inf.cov, inf.cov_sampling + inf.cov_protocol, rtol=1e-10, atol=1e-14)
    assert 0.3 < float(np.mean(np.square(z))) < 2.5
