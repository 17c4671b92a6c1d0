"""Numerics of feature scaling for every finite input: the rescaled data stays finite, no warnings."""

from __future__ import annotations

import numpy as np
from _scaling import private_scaler

from privfedstat.data.federated import FederatedData
from privfedstat.fitting.scaling import MAX_SCALED, FeatureBounds, PrivateStandardize, Scaler

DMAX = float(np.finfo(np.float64).max)


def _data(X):
    X = np.asarray(X, dtype=np.float64)
    return FederatedData.from_pooled(X, np.zeros(X.shape[0]), sizes=[X.shape[0]])


def test_transform_clamps_entries_that_overflow():
    # (x - c) / s = inf for x near the largest double: FederatedData would reject the rescaled rows
    # (an error on one dataset and not on its neighbour); the clamp keeps them finite
    scaler = Scaler(center=np.array([0.0, -1e300, 0.0]), scale=np.array([1.0, 1e-6, 1e-300]), intercept=0)
    out = scaler.transform(_data([[1.0, DMAX, 2.0], [1.0, -DMAX, -DMAX], [1.0, 3.0, 0.5]]))
    assert np.all(np.isfinite(out.X))
    np.testing.assert_array_equal(out.X[:, 0], 1.0)  # the intercept column
    np.testing.assert_array_equal(out.X[0, 1:], [MAX_SCALED, MAX_SCALED])
    np.testing.assert_array_equal(out.X[1, 1:], [-MAX_SCALED, -MAX_SCALED])
    np.testing.assert_allclose(out.X[2, 1:], [MAX_SCALED, 0.5e300])  # (3 + 1e300) / 1e-6 is clamped, 5e299 is not
    assert np.all(np.isfinite(out.row_norms))


def test_bounds_near_the_largest_double_give_a_finite_centre_and_scale():
    scaler = Scaler.from_bounds(FeatureBounds(lower=(1.0, -DMAX, 2.0), upper=(1.0, DMAX, 6.0)), 3)
    np.testing.assert_array_equal(scaler.center, [0.0, 0.0, 4.0])
    np.testing.assert_array_equal(scaler.scale, [1.0, DMAX, 2.0])


def test_private_scaling_of_huge_entries_is_finite_and_silent():
    X = np.column_stack([np.ones(40), np.r_[np.linspace(-1, 1, 39), DMAX], np.r_[-DMAX, np.linspace(0, 5, 39)]])
    data = _data(X)
    scaler = private_scaler(PrivateStandardize(), data, lambda counts, mu, stage: counts, float("inf"))
    assert np.all(np.isfinite(scaler.center)) and np.all(scaler.scale > 0)
    assert np.all(np.isfinite(scaler.transform(data).X))
