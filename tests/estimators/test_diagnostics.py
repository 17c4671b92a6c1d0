"""Diagnostics from released values only (issue 9, item 4)."""

import math
import warnings

import numpy as np
import pytest
from conftest import simulate

from privfedstat import ConvergenceWarning, DivergenceError, FedAvg, FederatedData, FedNewton, FedSGD, PrivacyNoiseWarning
from privfedstat.algorithms.registry import methods
from privfedstat.fitting.diagnostics import hessian_condition, noise_dominated, undersized_clients

INF = float("inf")


def test_too_few_iterations_warn_and_say_what_to_change():
    data = simulate("logistic", [200] * 5, [0.3, -0.8, 0.6], seed=1)
    with pytest.warns(ConvergenceWarning, match="n_iter"):
        est = FedSGD(mu=INF, n_iter=3).fit(data)
    assert est.converged_ is False
    with pytest.warns(ConvergenceWarning, match="n_rounds"):
        FedAvg(mu=INF, n_rounds=1, n_local_steps=2).fit(data)


def test_a_slow_private_drift_is_seen_through_the_noise():
    """With finite mu the last quarter's mean update is compared with its noise: 5 steps of a tiny
    step size drift far more than the noise allows."""
    data = simulate("logistic", [2000] * 5, [0.3, -0.8, 0.6], seed=2)
    with pytest.warns(ConvergenceWarning):
        assert FedSGD(mu=2.0, n_iter=8, step_size=0.05, clip=1.0, random_state=0).fit(data).converged_ is False
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert FedSGD(mu=2.0, n_iter=200, clip=1.0, random_state=0).fit(data).converged_ is True


def test_blow_up_raises_divergence_error():
    data = simulate("poisson", [100] * 3, [1.0, 1.0, -1.0], seed=3)
    with pytest.raises(DivergenceError, match="step_size"):
        FedSGD(family="poisson", mu=INF, n_iter=200, step_size=50.0).fit(data)


def test_tiny_sites_warn_with_the_minimum_size():
    """FedSGD, K = 50, fixed clip (mu_est = mu = 1): each message has mu / sqrt(50), so a site
    needs n >= 2 sqrt(50) = 14.1, i.e. 15 rows."""
    small = simulate("logistic", [10] * 30, [0.3, -0.8, 0.6], seed=4)
    with pytest.warns(PrivacyNoiseWarning, match="at least n = 15 rows"):
        FedSGD(mu=1.0, n_iter=50, clip=1.0, random_state=0).fit(small)
    mixed = simulate("logistic", [200, 10, 200], [0.3, -0.8, 0.6], seed=4)
    with pytest.warns(PrivacyNoiseWarning, match="too small") as caught:  # names which site and whose mu it was
        FedSGD(mu=1.0, n_iter=50, clip=1.0, random_state=0).fit(mixed)
    text = next(str(w.message) for w in caught if "too small" in str(w.message))
    assert "site #1 counting from 0 in the clients' order, n = 10" in text and "(of mu = 1;" in text
    labelled = FederatedData.from_pooled(mixed.X, mixed.y, clients=np.repeat(["lyon", "metz", "nice"], [200, 10, 200]))
    with pytest.warns(PrivacyNoiseWarning, match="too small") as caught:  # by its label, not by its position
        est = FedSGD(mu=1.0, n_iter=50, clip=1.0, random_state=0).fit(labelled)
    assert "e.g. site 'metz', n = 10)" in next(str(w.message) for w in caught if "too small" in str(w.message))
    assert list(est.client_labels_) == ["lyon", "metz", "nice"] and FedSGD(mu=1.0).fit(mixed).client_labels_ is None
    big = simulate("logistic", [15] * 30, [0.3, -0.8, 0.6], seed=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FedSGD(mu=1.0, n_iter=50, clip=1.0, random_state=0).fit(big)
    assert not any("too small" in str(w.message) for w in caught)


def test_undersized_clients_ignore_selection_stages():
    from privfedstat.privacy.ledger import PrivacyLedger, Release

    led = PrivacyLedger(2)
    sizes = np.array([5.0, 100.0])
    led.record(Release("clip-gradient", 0, "aggregated", np.ones(2), np.full(2, 50.0), np.full(2, 0.5)))
    assert undersized_clients(led, sizes)[0].size == 0
    sens = 2.0 / sizes  # mean of vectors clipped to 1
    led.record(Release("gradient", 1, "aggregated", sens, sens / 0.2, np.full(2, 0.5)))  # n_min = 2 / 0.2 = 10
    bad, n_min = undersized_clients(led, sizes)
    assert bad.tolist() == [0] and n_min == 10


def test_noise_dominance_and_its_warning():
    theta = np.array([1.0, 0.01, 0.01])
    dominated, small = noise_dominated(theta, 0.05, 0.02)
    assert dominated.tolist() == [0, 1, 2] and small.tolist() == [1, 2]
    assert noise_dominated(theta, 0.05, 0.1)[0].size == 0  # below the sampling-SE proxy: not dominant
    data = simulate("logistic", [100] * 10, [0.3, -0.8, 0.0], seed=5)
    with pytest.warns(PrivacyNoiseWarning, match="privacy noise dominates"):
        FedAvg(mu=0.05, clip=1.0, random_state=0).fit(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FedAvg(mu=2.0, clip=1.0, random_state=0).fit(data)
    assert not any("dominates" in str(w.message) for w in caught)


def test_hessian_condition():
    assert hessian_condition(np.diag([1.0, 1e-3])) == pytest.approx(1e3)
    assert math.isinf(hessian_condition(np.array([[1.0, 1.0], [1.0, 1.0]])))


def test_every_estimator_reports_converged():
    data = simulate("logistic", [80] * 4, [0.3, -0.8, 0.6], seed=6)
    for spec in methods():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = spec.cls(**spec.test_params).fit(data)
        if spec.private:
            assert est.converged_ in (True, False, None), spec.name
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = spec.cls(**{**spec.test_params, "mu": INF}).fit(data)
            assert isinstance(est.converged_, (bool, np.bool_)), spec.name


def test_fednewton_warns_when_its_one_step_is_large():
    data = simulate("logistic", [60] * 20, [1.0, -1.5, 1.5], seed=7)
    with pytest.warns(ConvergenceWarning, match="FedIRLS"):
        FedNewton(mu=INF, n_local_steps=2, random_state=0).fit(data)


def test_privacy_share_warning_reads_the_inference_split():
    """PrivacyNoiseWarning names the coefficients whose privacy variance exceeds their sampling variance (the fit's
    own noise model), and says nothing where none does."""
    import dataclasses

    from privfedstat.fitting.diagnostics import warn_privacy_share

    data = simulate("logistic", [400] * 5, [0.3, -0.8, 0.5], seed=2)
    fit = FedSGD(mu=8.0, random_state=0).fit(data)
    inf = fit.inference_
    S = np.diag([1.0, 1.0, 1.0])
    with pytest.warns(PrivacyNoiseWarning, match=r"coefficient\(s\) x1 of FedSGD: .* up to 2 times"):
        assert warn_privacy_share(fit, dataclasses.replace(inf, cov_sampling=S, cov_privacy=np.diag([0.5, 4.0, 1.0])))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_privacy_share(fit, dataclasses.replace(inf, cov_sampling=S, cov_privacy=0.9 * S))


def test_noise_dominance_is_stated_as_a_ratio_not_in_fitting_scale_units():
    data = simulate("logistic", [200] * 5, [0.3, -0.8, 0.6], seed=5)
    with pytest.warns(PrivacyNoiseWarning, match="times a public proxy of the sampling standard error") as caught:
        FedSGD(mu=0.5, n_iter=50, clip=1.0, random_state=0).fit(data)
    assert not any("(fitting scale)" in str(w.message) for w in caught)
