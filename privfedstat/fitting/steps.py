"""The two building blocks of every algorithm -- server gradient descent and local noisy GD -- and the
iteration counts, step sizes and convergence test the protocols share.

Both loops talk to the clients through the fit's :class:`~privfedstat.federation.session.Session`,
take their noise budget per message and derive sensitivities from the clipping bound B: a mean of
per-sample gradients each clipped to norm B changes by at most ``2B / n_i`` in L2 norm when one of
client i's n_i data is replaced (the paper's Lemma 3.1).
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_iterate
from ..families.curvature import auto_step_size
from ..federation.secure import secure_mean, verb_spec
from ..federation.server import aggregate, effective_weights
from ..federation.session import Session
from ..privacy.calibration import gradient_calibration, local_step_calibration
from ..privacy.secure_noise import SkellamSpec

__all__ = [
    "server_gradient_descent", "local_gradient_descent", "gradient_noise_sd", "resolve_step_size", "resolve_count", "settled",
    "TOL", "MAX_ITER_NONPRIVATE", "MAX_ROUNDS_NONPRIVATE",
]

#: Relative size of the last update below which an iteration counts as settled (``converged_``).
TOL = 1e-6
#: Cap on the iterations of an ``"auto"`` count with mu = inf (the loop stops earlier once settled).
MAX_ITER_NONPRIVATE = 5000
#: Cap on the rounds (each of many local steps) of an ``"auto"`` round count with mu = inf.
MAX_ROUNDS_NONPRIVATE = 200


def resolve_step_size(step_size, family, n_features: int, square_norm: float | None = None) -> float:
    """``step_size`` as a number: :func:`~privfedstat.families.curvature.auto_step_size` for ``"auto"`` (with the
    fitting scale's ``square_norm``, :attr:`~privfedstat.federation.protocol.Setup.square_norm`), else the given
    value."""
    return auto_step_size(family, n_features, square_norm) if step_size == "auto" else float(step_size)


def resolve_count(value, mu: float, private_default: int, cap: int = MAX_ITER_NONPRIVATE) -> tuple[int, bool]:
    """An iteration count that may be ``"auto"``, and whether the loop may stop once settled.

    ``"auto"`` is ``private_default`` (the paper's setting) with finite mu, where the noise of
    every round is calibrated to the number of rounds fixed in advance; with mu = inf it is
    ``cap`` (:data:`MAX_ITER_NONPRIVATE` for single steps), and the loop stops as soon as the
    update is below :data:`TOL` (:func:`settled`).
    """
    if value != "auto":
        return int(value), False
    if math.isfinite(mu):
        return int(private_default), False
    return cap, True


def settled(new: np.ndarray, old: np.ndarray, noise_sd: float = 0.0, tol: float = TOL, scale: int = 1) -> bool:
    """Whether the mean update ``(new - old) / scale`` over ``scale`` updates is negligible.

    Negligible: ``max|new - old| / scale <= tol (1 + max|new|) + 4 noise_sd``, where
    ``noise_sd`` is the public standard deviation (per coordinate) of the privacy noise in that
    mean update (``s / sqrt(scale)`` for updates with independent noise of sd s): a drift no
    larger than a few noise standard deviations is all the released values can resolve, and
    averaging over a window makes a slow drift visible under noise.
    """
    change = float(np.max(np.abs(new - old))) / scale if np.size(new) else 0.0
    return change <= tol * (1.0 + float(np.max(np.abs(new)))) + 4.0 * float(np.max(noise_sd))


def gradient_noise_sd(clip: float, sizes: np.ndarray, n_iter: int, mu: float) -> np.ndarray:
    """Noise sd of each client's gradient message in :func:`server_gradient_descent`: ``2 B sqrt(K) / (mu n_i)``.

    The closed form of ``calibrated_sigma(*gradient_calibration(...))`` (equal up to rounding), the
    form the ``"optimal"`` weights use.
    """
    if math.isinf(mu):
        return np.zeros(sizes.size)
    return 2.0 * clip * math.sqrt(n_iter) / (mu * sizes)


def server_gradient_descent(
    session: Session,
    theta0: np.ndarray,
    *,
    clip: float,
    n_iter: int,
    step_size: float,
    mu: float,
    weights: np.ndarray,
    stage: str,
    stop_early: bool = False,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """K steps of FedSGD (Algorithm 1): clients send noisy clipped mean gradients, the server steps.

    Each client's message ``g_i + sigma_i Z`` (verb ``gradients``, per-sample gradients clipped to
    ``clip`` = B) has sensitivity ``2B/n_i`` and
    budget ``mu / sqrt(K)``, i.e. ``sigma_i = 2 B sqrt(K) / (mu n_i)`` as in Algorithm 1. With
    partial participation each round asks a sample of the clients and averages their messages
    with the weights renormalised over them. With ``stop_early`` (only with mu = inf, where
    nothing is calibrated to K) the loop ends once a step is negligible (:func:`settled`).

    In a secure fit (``session.secure``, finite mu) the weighted messages ``w_i g_i`` are summed under secure
    aggregation (``secure_gradients``, :func:`secure_gradient_spec`), every client asked each round.

    Returns the final parameter and the path ``[theta^(1), ..., theta^(k)]``.
    """
    sens, mu_msg = gradient_calibration(clip, session.sizes, n_iter, mu)
    spec = secure_gradient_spec(session, weights, clip, n_iter, mu)
    theta = np.array(theta0, dtype=np.float64)
    path = []
    for _ in range(n_iter):
        if spec is None:
            g = session.mean("gradients", weights=weights, theta=theta, clip=clip, sensitivity=sens, mu=mu_msg,
                             stage=stage, active=session.participants())
        else:
            g = secure_mean(session, "secure_gradients", weights=weights, spec=spec, theta=theta, clip=clip,
                            sensitivity=weights * sens, stage=stage)
        old, theta = theta, theta - step_size * g
        check_iterate(theta, stage, step_size)
        path.append(theta)
        if stop_early and settled(theta, old):
            break
    return theta, path


def secure_gradient_spec(session: Session, weights: np.ndarray, clip: float, n_iter: int, mu: float
                         ) -> SkellamSpec | None:
    """The arithmetic of the secure rounds of :func:`server_gradient_descent` (None outside a secure fit or with mu =
    inf): site i's weighted message ``w_i g_i`` has sensitivity ``w_i 2 B / n_i`` and norm at most ``w_i B``; a round's
    budget is ``mu / sqrt(K)`` (:func:`~privfedstat.federation.secure.verb_spec`: each row rounded into its ball)."""
    sens, mu_msg = gradient_calibration(clip, session.sizes, n_iter, mu)
    if session.secure is None or math.isinf(mu_msg):
        return None
    w = np.asarray(weights, dtype=np.float64)
    return verb_spec("secure_gradients", float(np.max(w * sens)), float(np.max(w)) * clip, session.clients.n_params,
                     mu_msg, session.clients.n_clients, session.secure, int(np.sum(session.sizes)))


def local_gradient_descent(
    session: Session,
    clients,
    theta0: np.ndarray,
    *,
    clip: float,
    n_steps: int,
    step_size: float,
    mu: float,
    stage: str,
    weights: np.ndarray,
) -> np.ndarray:
    """Noisy local GD on every (participating) client, noise added to the parameter at each step (Algorithms 2-4); the
    server's weighted average of the final iterates.

    Step ``theta_i <- theta_i - eta g_i(theta_i) + s_i Z`` (verb ``local_descent``): the statistic
    ``eta g_i`` has sensitivity ``2 B eta / n_i``; with budget ``mu / sqrt(n_steps)`` per step this
    gives ``s_i = 2 B eta sqrt(n_steps) / (mu n_i)``. The clients send their final iterates.

    Parameters
    ----------
    clients : InProcessClients
        The clients (``session.clients``, or FedNewton's first halves).
    theta0 : ndarray of shape (d,)
        The server's model.
    clip : float
        B, the per-sample gradient clipping bound.
    mu : float
        Budget of the whole run of ``n_steps`` steps.
    weights : ndarray of shape (n_clients,)
        The server's aggregation weights.

    Returns
    -------
    ndarray of shape (d,)
    """
    sens, mu_step = local_step_calibration(clip, step_size, clients.sizes, n_steps, mu)
    reply = clients.local_descent(theta0, clip=clip, step_size=step_size, n_steps=n_steps, sensitivity=sens,
                                  mu=mu_step, stage=stage, active=session.participants())
    w = effective_weights(weights, reply.answered)
    return aggregate(weights, session.channel.receive(reply, weights=w), reply.answered)
