"""The analytical Renyi bound of the secure releases (Agarwal, Kairouz & Liu 2021, Theorem 3.5), the Gaussian's exact
Renyi curve and dp-accounting's conversion: :meth:`~privfedstat.privacy.ledger.PrivacyLedger.renyi_epsilon`, about 9%
looser in epsilon than the GDP accounting of :mod:`.secure_noise`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .secure_noise import IntegerNoise

__all__ = ["RDP_ORDERS", "skellam_rdp", "gaussian_rdp", "rdp_epsilon"]

#: integer Renyi orders of the accounting (the bound holds for integer alpha > 1)
RDP_ORDERS = tuple(range(2, 129)) + (160, 192, 256, 384, 512, 1024)


def skellam_rdp(orders: Sequence[int], noise: IntegerNoise) -> np.ndarray:
    """Upper bound on the Renyi DP of the summed Skellam release at each integer order (Agarwal et al. 2021, Thm 3.5)."""
    a = np.asarray(orders, dtype=np.float64)
    lam, l2, l1 = noise.lam, noise.l2, noise.l1
    if lam == 0:
        return np.full(a.shape, np.inf)
    extra = np.minimum((2.0 * a * l2 * l2 + 6.0 * l1) / (16.0 * lam * lam), 3.0 * l1 / (4.0 * lam))
    return a * l2 * l2 / (4.0 * lam) + extra


def gaussian_rdp(orders: Sequence[int], mu: float) -> np.ndarray:
    """Exact Renyi DP ``alpha mu^2 / 2`` of a Gaussian mechanism with ``Delta / sigma = mu``."""
    return np.asarray(orders, dtype=np.float64) * mu * mu / 2.0


def rdp_epsilon(rdp: np.ndarray, delta: float, orders: Sequence[int] = RDP_ORDERS) -> float:
    """Epsilon at ``delta`` of composed RDP values (dp-accounting's conversion)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
    eps, _ = compute_epsilon(list(orders), list(np.asarray(rdp, dtype=np.float64)), float(delta))
    return float(eps)
