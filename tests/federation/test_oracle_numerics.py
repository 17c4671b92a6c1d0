"""Oracle numerics for every finite input: per-sample norms without warnings, clipping bounds checked."""

from __future__ import annotations

import numpy as np
import pytest

from privfedstat.data.federated import FederatedData
from privfedstat.families import get_family
from privfedstat.federation.oracle import make_oracle
from privfedstat.kernels.glm_nb import MIN_BOUND

DMAX = float(np.finfo(np.float64).max)
ROWS = np.array([[1.0, 2.0], [1e-170, 1e-170], [1e200, 1e200], [1.5e308, 1.5e308], [0.0, 0.0], [1e308, 1e308]])


def _oracle(name, **kw):
    fam = get_family(name, **kw)
    y = np.array([1.0, 1e300, 3.0, 2.0, 5.0, 0.0]) if name not in ("logistic", "multinomial") else np.ones(6)
    return make_oracle(FederatedData.from_pooled(ROWS, y, sizes=[3, 3]), fam)


@pytest.mark.parametrize("name, kw", [("gaussian", {}), ("poisson", {}), ("logistic", {}),
                                      ("multinomial", {"n_classes": 3})])
def test_sample_norms_of_extreme_rows(name, kw):
    oracle = _oracle(name, **kw)
    theta = np.tile([10.0, -10.0], oracle.family.n_outputs) if name != "multinomial" else np.repeat([10.0, -10.0], 2)
    for which in ("gradient", "hessian"):
        for t in (np.zeros(oracle.n_params), theta):  # theta: x^T theta = inf - inf on the last row
            norms = oracle.sample_norms(which, t)  # RuntimeWarnings are errors in this suite
            assert norms.shape == (ROWS.shape[0],) and not np.any(np.isnan(norms)) and np.all(norms >= 0)
            assert norms[4] <= 1e-300  # a zero row (its norm bound is a few subnormals)
    g = oracle.sample_norms("gradient", np.zeros(oracle.n_params))
    assert g[1] > 0  # all |x_k| < 1e-162: the norm no longer underflows to 0
    if name == "gaussian":
        np.testing.assert_allclose(g[1], 1e300 * np.sqrt(2) * 1e-170, rtol=1e-13)


@pytest.mark.parametrize("name, kw", [("gaussian", {}), ("multinomial", {"n_classes": 3})])
@pytest.mark.parametrize("bad", [0.0, 1e-300, -1.0, float("nan"), 1e307])
def test_clipping_bounds_below_the_guarantee_are_refused(name, kw, bad):
    oracle = _oracle(name, **kw)
    theta = np.zeros(oracle.n_params)
    match = "too large" if bad == 1e307 else "at least"  # 3 rows of 1e307 would overflow a client's sum
    with pytest.raises(ValueError, match=match):
        oracle.clipped_gradients(theta, bad)
    with pytest.raises(ValueError, match=match):
        oracle.hessians(theta, bad)
    assert np.all(np.isfinite(oracle.clipped_gradients(theta, MIN_BOUND)))
    assert np.all(np.isfinite(oracle.hessians(theta, MIN_BOUND)))
    assert np.all(np.isfinite(oracle.clipped_gradients(theta, 1e307 / 3)))  # the largest bound allowed
    assert np.all(np.isfinite(oracle.hessians(theta, 1e307 / 3)))
