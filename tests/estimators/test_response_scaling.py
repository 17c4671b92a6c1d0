"""Private location and scale of a Gaussian or Huber response (issue 24: a response far from 0).

The rescaled fit must be the same estimator (least squares exactly; Huber with its threshold
divided by the scale), its intervals must map back, the counts must be accounted like the
columns', and a private fit of a response around 600 must reach the MLE where the unscaled
response leaves the Newton rounds short.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _scaling import private_scaler
from scipy.optimize import minimize

from privfedstat import plan_study
from privfedstat.algorithms import FedIRLS, PooledMLE
from privfedstat.data.federated import FederatedData
from privfedstat.exceptions import ConvergenceWarning
from privfedstat.families import get_family
from privfedstat.fitting.scaling import PrivateStandardize, Scaler

RATIO = 10 ** (30 / 255)  # spacing of the public scale grid


def _far_response(seed=0, n=4000, n_clients=20, level=620.0, noise=40.0):
    """Intercept, a continuous and a binary column; y around ``level`` (test scores), residual sd ``noise``."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal(n), rng.random(n) < 0.3])
    y = level + X[:, 1:] @ np.array([8.0, -12.0]) + noise * rng.standard_normal(n)
    return FederatedData.from_pooled(X, y, sizes=[n // n_clients] * n_clients)


def test_exact_response_centre_and_scale_are_its_median_and_quantile():
    data = _far_response()
    scaler = private_scaler(PrivateStandardize(), data, lambda c, mu, s: c, math.inf, get_family("gaussian"))
    med = np.median(data.y)
    assert abs(scaler.response_center - med) <= 0.3 * np.std(data.y)  # the centre grid's fine step near 620
    q = np.quantile(np.abs(data.y - scaler.response_center), 0.9)
    assert q <= scaler.response_scale <= q * RATIO
    # a family whose response is not a location (logistic), or response=False: nothing located
    for config, family in ((PrivateStandardize(), "logistic"), (PrivateStandardize(response=False), "gaussian")):
        off = private_scaler(config, data, lambda c, mu, s: c, math.inf, get_family(family))
        assert (off.response_center, off.response_scale) == (0.0, 1.0)


def test_least_squares_on_the_transformed_response_maps_back_exactly():
    rng = np.random.default_rng(1)
    data = _far_response(seed=1)
    offset = rng.standard_normal(data.n_samples)
    data = FederatedData(data.X, data.y, data.offsets, offset)
    scaler = Scaler(np.array([0.0, 0.3, 0.5]), np.array([1.0, 2.0, 0.5]), 0, 611.0, 53.0)
    fitted = scaler.transform(data)
    np.testing.assert_allclose(fitted.y, (data.y - 611.0) / 53.0)
    np.testing.assert_allclose(fitted.offset, offset / 53.0)
    theta = np.linalg.lstsq(fitted.X, fitted.y - fitted.offset, rcond=None)[0]
    direct = np.linalg.lstsq(data.X, data.y - offset, rcond=None)[0]
    np.testing.assert_allclose(scaler.coef_to_original(theta), direct, rtol=1e-10)


def test_huber_threshold_follows_the_response_scale():
    """Huber on y / s with threshold c / s is Huber on y with c, divided by s: checked against a direct
    minimisation of the mean Huber loss on the pooled rows (scipy), at mu = inf."""
    rng = np.random.default_rng(2)
    data = _far_response(seed=2, n=2000, n_clients=5)
    y = data.y + np.where(rng.random(data.n_samples) < 0.05, 400.0, 0.0)  # 5% gross outliers
    data = FederatedData(data.X, y, data.offsets)
    family = get_family("huber", c=30.0)  # in units of the response (residual sd 40)
    assert family.for_response_scale(60.0).param == pytest.approx(0.5)

    def loss(b):
        return float(np.mean(family.loss(y, data.X @ b)))

    ref = minimize(loss, np.linalg.lstsq(data.X, y, rcond=None)[0], method="Nelder-Mead",
                   options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 40000, "maxfev": 40000}).x
    est = FedIRLS(family=family, mu=math.inf, scaling=PrivateStandardize(), inference=None).fit(data)
    assert est.scaler_.response_scale > 10.0  # the response was rescaled, and the threshold with it
    np.testing.assert_allclose(est.coef_, ref, rtol=1e-6, atol=1e-6)
    ols = np.linalg.lstsq(data.X, y, rcond=None)[0]
    assert abs(ols[0] - ref[0]) > 10.0  # the outliers move least squares: the check can fail


def _deviation(est, data):
    mle = PooledMLE(family="gaussian").fit(data)
    return np.max(np.abs(est.coef_ - mle.coef_) / mle.bse_)


def test_a_private_fit_of_a_response_far_from_zero_reaches_the_mle():
    data = _far_response()
    devs = []
    for seed in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            est = FedIRLS(family="gaussian", mu=4.0, scaling=PrivateStandardize(), random_state=seed).fit(data)
        assert est.converged_ is True or np.all(est.converged_)
        devs.append(_deviation(est, data))
        intervals = est.conf_int()
        assert np.all(np.isfinite(intervals))
    assert np.median(devs) < 2.0, devs
    # the response left on its own scale: the Newton rounds from theta = 0 stop far short
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = FedIRLS(family="gaussian", mu=4.0, scaling=PrivateStandardize(response=False), random_state=0).fit(data)
    assert _deviation(raw, data) > 20.0 or not np.all(raw.converged_)


def test_the_response_counts_are_accounted_like_the_columns():
    data = _far_response(n=2000, n_clients=10)
    est = FedIRLS(family="gaussian", mu=2.0, scaling=PrivateStandardize(), random_state=0).fit(data)
    ledger = est.privacy_
    response = [r for r in ledger.releases if r.stage == "scaling-y"]
    column = [r for r in ledger.releases if r.stage == "scaling-x1"]
    assert len(response) == len(column) == PrivateStandardize().queries_per_column()
    assert all(np.all(r.sensitivity == 1.0) for r in response)
    np.testing.assert_allclose([r.sigma for r in response], [r.sigma for r in column])
    np.testing.assert_allclose(ledger.client_mu, 2.0, rtol=1e-9)


def test_a_plan_does_not_depend_on_the_level_of_the_response():
    """Shifting every response by 600 changes the intercept only: the located response makes the planned
    slopes' standard errors the same (up to the public grids of the searches)."""
    rng = np.random.default_rng(4)
    X = np.column_stack([np.ones(3000), rng.standard_normal(3000), rng.random(3000) < 0.3])
    plans = [plan_study(X, [level, 0.2, -0.3], sizes=[200] * 20, family="gaussian", mu=2.0, noise_sd=1.0).frame
             for level in (0.0, 600.0)]
    se = [p["se"].to_numpy()[1:] for p in plans]
    np.testing.assert_allclose(se[1], se[0], rtol=0.1)


def test_public_response_bounds_locate_the_response_for_free():
    """``FeatureBounds(response=(lo, hi))``: centre the midpoint, scale the half-range, no budget; the fit at mu = inf
    is least squares; a family whose response cannot be rescaled refuses them."""
    from privfedstat.fitting.scaling import FeatureBounds

    data = _far_response(n=2000, n_clients=5)
    bounds = FeatureBounds((1.0, -4.0, 0.0), (1.0, 4.0, 1.0), intercept=0, response=(400.0, 800.0))
    est = FedIRLS(family="gaussian", mu=math.inf, scaling=bounds).fit(data)
    assert (est.scaler_.response_center, est.scaler_.response_scale) == (600.0, 200.0)
    np.testing.assert_allclose(est.coef_, np.linalg.lstsq(data.X, data.y, rcond=None)[0], rtol=1e-9)
    assert not any(r.stage.startswith("scaling") for r in FedIRLS(family="gaussian", mu=2.0, scaling=bounds,
                                                                 random_state=0).fit(data).privacy_.releases)
    with pytest.raises(ValueError, match="response"):
        FedIRLS(family="logistic", mu=math.inf, scaling=bounds).fit(FederatedData(data.X, (data.y > 620).astype(float),
                                                                                  data.offsets))
    with pytest.raises(ValueError, match="lower < upper"):
        FeatureBounds((1.0,), (1.0,), response=(5.0, 5.0))


def test_a_huber_threshold_tiny_next_to_the_located_response_warns():
    """c = 1.345 (the default, meant for a unit residual scale) on a response with residual sd 40: the located scale says
    so, with what to change; a threshold in the response's units does not warn."""
    from privfedstat.exceptions import IllConditionedWarning

    data = _far_response(n=2000, n_clients=5)
    with pytest.warns(IllConditionedWarning, match="Huber's threshold c = 1.345"):
        FedIRLS(family="huber", mu=math.inf, scaling=PrivateStandardize(), inference=None).fit(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedWarning)
        FedIRLS(family=get_family("huber", c=50.0), mu=math.inf, scaling=PrivateStandardize(), inference=None).fit(data)
