"""Releases of the in-process clients stay within their stated sensitivity for tiny (1e-300) and huge (1e300) bounds.

Each test replaces one row by an adversarial one (tiny, huge, zero, mixed magnitudes) and checks
``||release(D) - release(D')|| <= sensitivity`` on the noiseless statistic, the quantity the noise
is calibrated to.
"""

from __future__ import annotations

import numpy as np
import pytest

from privfedstat._linalg import smoothed_normalize
from privfedstat.algorithms.fednewton import newton_step
from privfedstat.data.federated import FederatedData
from privfedstat.families import get_family
from privfedstat.federation.oracle import make_oracle
from privfedstat.privacy.calibration import shared_newton_sensitivity

ROWS = [np.array([1e-300, -1e-300]), np.array([1e-170, 1e-171]), np.array([1e300, -1e300]),
        np.array([0.0, 0.0]), np.array([1.0, 1e-320]), np.array([3.0, -2.0])]


def _halves(replaced: np.ndarray | None, scale: float):
    """Two one-client halves (Hessian half, gradient half) of a Gaussian-family dataset; row 0 of the gradient half
    replaced by ``replaced`` when given. ``scale`` multiplies the responses (so the gradients are of that size)."""
    rng = np.random.default_rng(3)
    X1, X2 = rng.standard_normal((8, 2)), rng.standard_normal((9, 2))
    if replaced is not None:
        X2 = X2.copy()
        X2[0] = replaced
    fam = get_family("gaussian")
    return (make_oracle(FederatedData.from_pooled(X1, np.zeros(8), sizes=[8]), fam),
            make_oracle(FederatedData.from_pooled(X2, scale * rng.standard_normal(9), sizes=[9]), fam))


@pytest.mark.parametrize("clip, grad_clip", [(1e-170, 1e-200), (1e-250, 1e-280), (1e-162, 1e-165), (1.0, 1e-3),
                                             (1e150, 1e140)])
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r[0]:g}")
def test_newton_step_within_sensitivity(clip, grad_clip, row):
    """Replacing a row moves the Newton step with a public Hessian (smallest eigenvalue lambda) by at most
    ``min(2 B / n2, 2 G) / lambda`` (G the gradient radius): the projection of ``gbar`` onto the ball of radius G
    holds for tiny and huge gradients, and the step is at most G / lambda long."""
    lam, C_H = 0.05, 1.0
    theta = np.zeros(2)
    G = np.array([grad_clip])
    kw = {"clip": clip, "hessian_clip": C_H, "hessian_floor": lam, "grad_clip": G, "hessian": np.diag([lam, 1.0])}
    base = newton_step(*_halves(None, clip * 1e3), theta, **kw)
    moved = newton_step(*_halves(row, clip * 1e3), theta, **kw)
    sens = shared_newton_sensitivity(clip, lam, G, np.array([9.0]))
    # the projected gradient's norm is at most G, so the step is at most G / lambda
    assert np.all(np.abs(base) <= G[0] / lam * (1 + 1e-12))
    diff = np.linalg.norm((moved - base) / sens[0])  # scaled first: sens may be 1e-290
    assert diff <= 1.0


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1.0, 1e200, 1e300])
def test_smoothed_normalize_below_one(scale):
    u = scale * np.array([[1.0, 1.0], [3.0, -4.0], [1e-20, 1.0], [0.0, 0.0]])
    out = smoothed_normalize(u, 1e-300)
    s = np.max(np.abs(out), axis=1, keepdims=True)
    s[s == 0] = 1.0
    assert np.all(s[:, 0] * np.sqrt(np.sum((out / s) ** 2, axis=1)) < 1.0)


@pytest.mark.parametrize("family", ["gaussian", "logistic", "multinomial"])
@pytest.mark.parametrize("clip", [1e-280, 1e-200, 1.0, 1e300])
def test_clipped_gradient_and_hessian_releases_within_sensitivity(family, clip):
    """One row replaced by each extreme row: the clients' mean clipped gradient moves by at most ``2 B / n``, the
    mean clipped Hessian by at most ``2 C_H / n`` (Frobenius; ``sqrt(2) C_H / n`` after sym_to_vec)."""
    fam = get_family(family, n_classes=3) if family == "multinomial" else get_family(family)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 2))
    y = rng.integers(0, 2, 6).astype(float)
    n = X.shape[0]
    bound = min(clip, 1e307 / n)
    theta = np.full(fam.n_outputs * 2 if family == "multinomial" else 2, 0.3)
    base = make_oracle(FederatedData.from_pooled(X, y, sizes=[n]), fam)
    g0, H0 = base.clipped_gradients(theta, bound), base.hessians(theta, bound)
    for row in ROWS:
        Xr = X.copy()
        Xr[0] = row
        o = make_oracle(FederatedData.from_pooled(Xr, y, sizes=[n]), fam)
        dg = o.clipped_gradients(theta, bound) - g0
        dH = o.hessians(theta, bound) - H0
        s = 2.0 * bound / n
        assert np.linalg.norm(dg / s) <= 1.0 and np.linalg.norm(dH / s) <= 1.0
