"""The optimisation-gap check of fixed-iteration fits (diagnostics.optimisation_gap), from the released Hessian."""

import warnings

import numpy as np
import pytest

from privfedstat import ConvergenceWarning, FedAvg, FederatedData, FedIRLS, FedSGD
from privfedstat.fitting.diagnostics import error_transport, optimisation_gap, warn_optimisation_gap


def _data(seed=0, n_clients=10, n=400):
    rng = np.random.default_rng(seed)
    N = n_clients * n
    Z = rng.standard_normal((N, 3)) @ np.linalg.cholesky([[1, .8, .6], [.8, 1, .7], [.6, .7, 1]]).T
    X = np.column_stack([np.ones(N), Z])
    beta = np.array([0.5, -1.0, 1.0, 0.5])
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ beta))).astype(float)
    return FederatedData.from_pooled(X, y, sizes=[n] * n_clients)


def _fit(cls, data, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = cls(family="logistic", clip=50.0, random_state=0, **kw).fit(data)
    return est, [w for w in caught if issubclass(w.category, ConvergenceWarning)]


def test_gap_matches_the_distance_to_the_optimum():
    """Nearly noise-free (mu = 1e7), FedSGD stopped after 15 steps: the estimated gap is the measured one."""
    data = _data()
    short, _ = _fit(FedSGD, data, mu=1e7, n_iter=15, step_size=0.5)
    optimum, _ = _fit(FedIRLS, data, mu=float("inf"), hessian_clip=50.0, inference=None)
    true_gap = optimum.coef_ - short.coef_
    H = _pooled_hessian(data, short.coef_)
    est_gap = optimisation_gap(short_noise_model(data, 15, 0.5), H, short.coef_, np.zeros(4))
    assert np.linalg.norm(true_gap) > 0.05  # the short run really is short
    np.testing.assert_allclose(est_gap, true_gap, rtol=0.15, atol=0.01)


def short_noise_model(data, n_iter, step):
    from privfedstat.theory.noise import fedsgd_noise

    w = data.sizes / data.sizes.sum()
    return fedsgd_noise(clip=50.0, sizes=data.sizes, mu=1e7, n_iter=n_iter, step_size=step, weights=w)


def _pooled_hessian(data, theta):
    p = 1 / (1 + np.exp(-data.X @ theta))
    return (data.X * (p * (1 - p))[:, None]).T @ data.X / data.n_samples


@pytest.mark.parametrize("cls, kw", [(FedSGD, {"n_iter": 10}), (FedAvg, {"n_rounds": 1, "n_local_steps": 5})])
def test_short_private_fits_warn_with_the_size_in_standard_errors(cls, kw):
    _, caught = _fit(cls, _data(), mu=2.0, step_size=0.2, **kw)
    messages = [str(w.message) for w in caught]
    assert any("stopped before the optimum" in m and "standard errors" in m for m in messages), messages


def test_converged_fits_do_not_warn():
    _, caught = _fit(FedSGD, _data(), mu=2.0, n_iter=200, step_size=0.5)
    assert not any("stopped before the optimum" in str(w.message) for w in caught)


def test_newton_type_protocols_are_not_judged_by_transport():
    est, caught = _fit(FedIRLS, _data(), mu=2.0, hessian_clip=50.0)
    assert not any("stopped before the optimum" in str(w.message) for w in caught)
    assert error_transport(None, np.eye(4)) is None
    assert est.inference_ is not None


def test_optimisation_gap_warning_names_a_real_ratio_when_a_standard_error_is_withheld():
    """A withheld (NaN) standard error used to make the warning read "about nan standard errors"."""
    with pytest.warns(ConvergenceWarning, match=r"about 3 standard errors in b") as caught:
        warn_optimisation_gap(FedSGD(), np.array([0.1, 0.3, 0.2]), np.array([np.nan, 0.1, 1.0]), ["a", "b", "c"])
    assert "nan" not in str(caught[0].message)
