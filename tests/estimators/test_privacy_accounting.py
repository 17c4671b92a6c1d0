"""Privacy invariants: ledger mu, noise scales typed from Algorithms 1-4, third-party mu, clipping rules.

Tests of a protocol's own calibration fit with ``inference=None``, so that all of mu goes to the
algorithm as in the papers (the inference releases are checked in tests/inference)."""

import math
import warnings

import numpy as np
import pytest
from conftest import simulate

from privfedstat import AutoClip, FedAvg, FedHybrid, FedNewton, FedSGD, PrivacyLeakWarning
from privfedstat.privacy.calibration import HESSIAN_SHARE

ESTIMATORS = [FedSGD, FedHybrid, FedAvg, FedNewton]


def _sigmas(ledger, stage):
    return np.array([r.sigma for r in ledger.releases if r.stage == stage])


def test_fedsgd_noise_is_algorithm_1():
    data = simulate("logistic", [50, 80, 120, 200], [0.2, 0.3, -0.1])
    B, K, mu = 1.3, 17, 0.8
    est = FedSGD(mu=mu, clip=B, n_iter=K, inference=None, random_state=0).fit(data)
    expected = 2 * B * math.sqrt(K) / (mu * data.sizes)  # Algorithm 1: sigma_i = 2 B sqrt(K) / (mu n_i)
    sig = _sigmas(est.privacy_, "gradient")
    assert sig.shape == (K, 4)
    np.testing.assert_allclose(sig, np.broadcast_to(expected, sig.shape), rtol=1e-14)


def test_fedhybrid_noise_is_algorithm_2():
    data = simulate("logistic", [50, 80, 120, 200], [0.2, 0.3, -0.1])
    B, K1, K2, eta, mu = 0.9, 7, 5, 0.3, 2.5
    est = FedHybrid(mu=mu, clip=B, n_local_steps=K1, n_server_iter=K2, step_size=eta, inference=None, random_state=0).fit(data)
    a = 2 * B * eta * math.sqrt(2 * K1) / (mu * data.sizes)  # stage I: a_i = 2 B eta_1 sqrt(2 K1) / (mu n_i)
    s2 = 2 * B * math.sqrt(2 * K2) / (mu * data.sizes)  # stage II: 2 B sqrt(2 K2) / (mu n_i)
    np.testing.assert_allclose(_sigmas(est.privacy_, "local-step"), np.tile(a, (K1, 1)), rtol=1e-14)
    np.testing.assert_allclose(_sigmas(est.privacy_, "gradient"), np.tile(s2, (K2, 1)), rtol=1e-14)


def test_fedavg_noise_is_algorithm_3():
    data = simulate("logistic", [50, 80, 120, 200], [0.2, 0.3, -0.1])
    B, R, K, eta, mu = 2.0, 3, 11, 0.4, 1.2
    est = FedAvg(mu=mu, clip=B, n_rounds=R, n_local_steps=K, step_size=eta, inference=None, random_state=0).fit(data)
    s = 2 * B * eta * math.sqrt(R * K) / (mu * data.sizes)  # sigma_i = 2 B eta sqrt(R K) / (mu n_i)
    np.testing.assert_allclose(_sigmas(est.privacy_, "local-step"), np.tile(s, (R * K, 1)), rtol=1e-14)
    assert est.communication_.rounds == R


@pytest.mark.filterwarnings("ignore::privfedstat.PrivacyLeakWarning")
@pytest.mark.parametrize("newton_noise", ["paper", "private"])
def test_fednewton_noise_is_algorithm_4_for_the_fedavg_stage(newton_noise):
    """The FedAvg stage's noise is Algorithm 4's, ``4 B eta sqrt(2K) / (mu_N n_i)``: mu_N = mu as printed, and
    ``sqrt(1 - HESSIAN_SHARE) mu`` in the private mode (its Hessian release takes that share). The private Newton
    step's sensitivity is ``2 B / (lambda n2_i)``, lambda >= the floor the smallest eigenvalue of the public Hessian."""
    data = simulate("logistic", [50, 80, 120, 200], [0.2, 0.3, -0.1])  # even sizes: halves are n_i / 2
    B, K, eta, mu = 1.1, 9, 0.5, 3.0
    est = FedNewton(mu=mu, clip=B, hessian_clip=1.0, hessian_floor=0.1, n_local_steps=K, step_size=eta,
                    newton_noise=newton_noise, tau1=0.1, inference=None, random_state=0).fit(data)
    mu_n = mu if newton_noise == "paper" else math.sqrt(1 - HESSIAN_SHARE) * mu
    s = 4 * B * eta * math.sqrt(2 * K) / (mu_n * data.sizes)  # sigma_i = 4 B eta sqrt(2K) / (mu n_i)
    np.testing.assert_allclose(_sigmas(est.privacy_, "local-step"), np.tile(s, (K, 1)), rtol=1e-14)
    newton = [r for r in est.privacy_.releases if r.stage == "newton"]
    assert len(newton) == 1
    n2 = data.sizes - data.sizes // 2
    if newton_noise == "paper":
        sens = 8 * B / (0.1 * data.sizes)
    else:
        inv_lam = newton[0].sensitivity * n2 / (2 * B)
        assert np.ptp(inv_lam) < 1e-9 * inv_lam[0] and inv_lam[0] <= 1 / 0.1 * (1 + 1e-12)
        sens = 2 * B / (n2 / inv_lam[0])
    np.testing.assert_allclose(newton[0].sensitivity, sens, rtol=1e-12)
    np.testing.assert_allclose(newton[0].sigma, sens / (mu_n / math.sqrt(2)), rtol=1e-12)
    assert est.privacy_.mu == pytest.approx(mu, rel=1e-12)


def test_auto_clip_spends_the_declared_share():
    data = simulate("logistic", [100] * 6, [0.2, 0.3, -0.1])
    mu = 2.0
    est = FedSGD(mu=mu, clip=AutoClip(budget=0.25), inference=None, random_state=0).fit(data)
    df = est.privacy_.to_frame()
    clip_mu = np.sqrt(df[df.stage == "clip-gradient"].groupby("client").mu.apply(lambda s: np.sum(s**2)))
    np.testing.assert_allclose(clip_mu, 0.25 * mu, rtol=1e-12)
    est_mu = np.sqrt(df[df.stage == "gradient"].groupby("client").mu.apply(lambda s: np.sum(s**2)))
    np.testing.assert_allclose(est_mu, math.sqrt(mu**2 - (0.25 * mu) ** 2), rtol=1e-12)
    assert len(df[df.stage == "clip-gradient"]) == 6 * 6  # log2(64) queries x 6 clients


def test_auto_clip_is_close_to_the_pooled_quantile():
    data = simulate("logistic", [500] * 40, [0.2, 0.3, -0.1, 0.5])
    est = FedSGD(mu=2.0, random_state=0).fit(data)
    norms = np.abs(0.5 - data.y) * data.row_norms  # gradient norms at theta = 0
    q = np.quantile(norms, 0.9)
    grid_ratio = (1e4 / 1e-2) ** (1 / 63)
    assert q / grid_ratio**2 <= est.clip_ <= q * grid_ratio**2


def test_paper_clip_warns_and_marks_the_ledger():
    data = simulate("logistic", [100] * 6, [0.2, 0.3, -0.1])
    with pytest.warns(PrivacyLeakWarning):
        est = FedSGD(mu=2.0, clip="paper", random_state=0).fit(data)
    norms = np.abs(0.5 - data.y) * data.row_norms
    expected = max(np.quantile(norms[o:o + 100], 0.9) for o in range(0, 600, 100))
    assert est.clip_ == pytest.approx(expected, rel=1e-12)
    assert not est.privacy_.is_private
    assert est.privacy_.leaks and "paper" in est.privacy_.leaks[0]
    assert "NOT fully private" in repr(est.privacy_)
    assert "NOT fully private" in est.summary().as_text()
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-12)  # no budget spent on B


def test_infinite_mu_is_non_private_and_adds_no_noise():
    data = simulate("logistic", [100] * 6, [0.2, 0.3, -0.1])
    a = FedSGD(mu=float("inf"), clip=1.0, random_state=0).fit(data)
    b = FedSGD(mu=float("inf"), clip=1.0, random_state=99).fit(data)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not a.privacy_.is_private
    assert "non-private" in repr(a.privacy_)
    assert math.isinf(a.privacy_.third_party_mu)


def test_third_party_mu_equal_sizes_is_mu_over_sqrt_m():
    data = simulate("logistic", [100] * 16, [0.2, 0.3, -0.1])
    est = FedSGD(mu=2.0, clip=1.0, random_state=0).fit(data)
    assert est.privacy_.third_party_mu == pytest.approx(2.0 / 4.0, rel=1e-12)  # Lemma 3.1


def test_third_party_mu_size_weights_unequal_sizes_is_mu_over_sqrt_m():
    """With w_i = n_i / N, w_i sigma_i is the same for all clients, so mu / sqrt(m) is exact."""
    data = simulate("logistic", [30, 60, 90, 400], [0.2, 0.3, -0.1])
    est = FedSGD(mu=2.0, clip=1.0, random_state=0).fit(data)
    assert est.privacy_.third_party_mu == pytest.approx(1.0, rel=1e-12)


def test_third_party_mu_unequal_weights_is_exact():
    sizes = np.array([30, 60, 90, 400])
    data = simulate("logistic", sizes, [0.2, 0.3, -0.1])
    B, K, mu = 1.0, 10, 2.0
    w = np.full(4, 0.25)
    est = FedSGD(mu=mu, clip=B, n_iter=K, weights=w, inference=None, random_state=0).fit(data)
    sigma = 2 * B * math.sqrt(K) / (mu * sizes)
    per_step = w * (2 * B / sizes) / math.sqrt(np.sum((w * sigma) ** 2))
    assert est.privacy_.third_party_mu == pytest.approx(math.sqrt(K) * per_step.max(), rel=1e-12)
    assert est.privacy_.third_party_mu != pytest.approx(mu / 2)  # not the equal-size shortcut


def test_third_party_for_local_steps_is_the_post_processing_bound():
    data = simulate("logistic", [100] * 9, [0.2, 0.3, -0.1])
    est = FedAvg(mu=2.0, clip=1.0, inference=None, random_state=0).fit(data)
    assert est.privacy_.third_party_mu == pytest.approx(2.0, rel=1e-12)


def test_epsilon_reported_is_worst_client():
    data = simulate("logistic", [100] * 4, [0.2, 0.3, -0.1])
    est = FedSGD(mu=1.0, clip=1.0, random_state=0).fit(data)
    assert est.privacy_.epsilon(1e-5) == pytest.approx(4.3772, abs=1e-4)


def test_optimal_weights_follow_eq_2():
    sizes = np.array([20, 50, 300])
    data = simulate("logistic", sizes, [0.2, 0.3, -0.1])
    B, K, mu = 1.0, 10, 0.5
    est = FedSGD(mu=mu, clip=B, n_iter=K, weights="optimal", inference=None, random_state=0).fit(data)
    w = est.privacy_.releases[0].weights
    sigma = 2 * B * math.sqrt(K) / (mu * sizes)
    expected = 1 / (B**2 / sizes + 3 * sigma**2)
    np.testing.assert_allclose(w, expected / expected.sum(), rtol=1e-12)
    with pytest.raises(ValueError, match="optimal"):
        FedAvg(mu=1.0, clip=1.0, weights="optimal").fit(data)


def test_no_privacy_warning_with_default_settings(logistic_data):
    with warnings.catch_warnings():  # (convergence diagnostics may speak up on this small data set)
        warnings.simplefilter("error", PrivacyLeakWarning)
        for Est in ESTIMATORS:
            Est(random_state=0).fit(logistic_data)
