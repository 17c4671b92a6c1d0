"""The two building blocks of every algorithm: server gradient descent and local noisy GD.

Both take their noise budget per message and derive sensitivities from the clipping bound B:
a mean of per-sample gradients each clipped to norm B changes by at most ``2B / n_i`` in L2 norm
when one of client i's n_i data is replaced (the paper's Lemma 3.1).
"""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import DivergenceError
from .base import FitContext

__all__ = ["server_gradient_descent", "local_gradient_descent", "gradient_noise_sd", "check_iterate", "DIVERGENCE_NORM"]

#: An iterate with a larger Euclidean norm (or a non-finite entry) is reported as divergence.
DIVERGENCE_NORM = 1e10


def check_iterate(theta: np.ndarray, where: str, step_size: float) -> None:
    """Raise ``DivergenceError`` if ``theta`` is non-finite or exploded."""
    if not np.all(np.isfinite(theta)) or float(np.max(np.abs(theta))) > DIVERGENCE_NORM:
        raise DivergenceError(
            f"iterates diverged during {where} (non-finite or |theta| > {DIVERGENCE_NORM:g}). "
            f"Reduce step_size (now {step_size:g}), standardise the covariates, or use a finite clip."
        )


def gradient_noise_sd(ctx: FitContext, n_iter: int, mu: float) -> np.ndarray:
    """Noise sd of each client's gradient message in :func:`server_gradient_descent`: ``2 B sqrt(K) / (mu n_i)``."""
    if math.isinf(mu):
        return np.zeros(ctx.sizes.size)
    return 2.0 * ctx.clip * math.sqrt(n_iter) / (mu * ctx.sizes)


def server_gradient_descent(
    ctx: FitContext,
    theta0: np.ndarray,
    *,
    n_iter: int,
    step_size: float,
    mu: float,
    weights: np.ndarray,
    stage: str,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """K steps of FedSGD (Algorithm 1): clients send noisy clipped mean gradients, the server steps.

    Each client's message ``g_i + sigma_i Z`` has sensitivity ``2B/n_i`` and budget
    ``mu / sqrt(K)``, i.e. ``sigma_i = 2 B sqrt(K) / (mu n_i)`` as in Algorithm 1.

    Returns the final parameter and the path ``[theta^(1), ..., theta^(K)]``.
    """
    sens = 2.0 * ctx.clip / ctx.sizes
    mu_msg = mu / math.sqrt(n_iter)
    theta = np.array(theta0, dtype=np.float64)
    path = []
    for _ in range(n_iter):
        g = ctx.oracle.clipped_gradients(theta, ctx.clip)
        g_noisy = ctx.channel.release(g, sensitivity=sens, mu=mu_msg, stage=stage, weights=weights)
        theta = theta - step_size * (weights @ g_noisy)
        check_iterate(theta, stage, step_size)
        path.append(theta)
    return theta, path


def local_gradient_descent(
    ctx: FitContext,
    oracle,
    theta0: np.ndarray,
    *,
    n_steps: int,
    step_size: float,
    mu: float,
    stage: str,
) -> np.ndarray:
    """Noisy local GD on every client, noise added to the parameter at each step (Algorithms 2-4).

    Step ``theta_i <- theta_i - eta g_i(theta_i) + s_i Z``: the statistic ``eta g_i`` has
    sensitivity ``2 B eta / n_i``; with budget ``mu / sqrt(n_steps)`` per step this gives
    ``s_i = 2 B eta sqrt(n_steps) / (mu n_i)``. The result stays on the clients; the caller sends it.

    Parameters
    ----------
    oracle : ClientOracle
        The data the steps use (the full data or FedNewton's first half).
    theta0 : ndarray of shape (d,) or (n_clients, d)
        Starting point(s).
    mu : float
        Budget of the whole run of ``n_steps`` steps.

    Returns
    -------
    ndarray of shape (n_clients, d)
    """
    sens = 2.0 * ctx.clip * step_size / oracle.sizes
    mu_step = mu / math.sqrt(n_steps)
    theta = np.array(np.broadcast_to(theta0, (oracle.n_clients, oracle.n_params)), dtype=np.float64)
    for _ in range(n_steps):
        g = oracle.clipped_gradients(theta, ctx.clip)
        theta = ctx.channel.perturb(theta - step_size * g, sensitivity=sens, mu=mu_step, stage=stage)
        check_iterate(theta, stage, step_size)
    return theta
