"""HiFedProx's client computation, shared by every clients backend: the power-p proximal term and Armijo steps.

A HiFedProx client (Kabgani & Ahookhosh) minimises, from the server's model w, the local objective
``Q_i(u) = f_i(u) + phi(u - w)`` with the scale-matched power regulariser
``phi(d) = mu / (p R^(p-2)) ||d||^p`` (:class:`PowerProx`; mu is called ``prox_coef`` in this
package, where mu is the privacy parameter) by S_i minibatch gradient steps, each with
same-minibatch Armijo backtracking (:class:`Armijo`, :func:`armijo_step`); it sends
``Delta_i = u - w``. :func:`power_prox_descent` runs those steps for any model through two
callables (the minibatch loss, and the loss with its gradient), so that the numba clients
(:func:`~privfedstat.algorithms.hifedprox.hifedprox_round`) and the torch clients
(:mod:`privfedstat.deep.hifedprox`) take exactly the same steps. Minibatches come from per-client
streams (:func:`client_batch_rng`, :func:`minibatch_rows`) that depend only on the round's seed and
the client, never on p: runs with different powers and the same seed see the same minibatches.

References
----------
Kabgani, A. and Ahookhosh, M. Beyond conventional federated learning via high-order
regularization (HiFedProx), eqs. (4)-(11) and Section V-B.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real

import numpy as np

from .._linalg import row_norms
from .._rng import child_seed
from .._validation import check_positive_float, check_positive_int

__all__ = ["PowerProx", "Armijo", "armijo_step", "power_prox_descent", "client_batch_rng", "minibatch_rows"]


def _real(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class PowerProx:
    """The scale-matched power regulariser ``phi(d) = mu / (p R^(p-2)) ||d||^p`` of HiFedProx (eq. (4)).

    Every power has the same gradient norm, mu R, at ``||d|| = R`` (the scale matching); p > 2
    pulls less below R and more above it. p = 2 is FedProx's ``(mu/2) ||d||^2``, and ``coef = 0``
    removes the term (FedAvg).

    Parameters
    ----------
    coef : float
        mu in the paper, >= 0 (``prox_coef``).
    radius : float
        R > 0, the reference displacement (``prox_radius``).
    power : float
        p >= 2.
    """

    coef: float
    radius: float
    power: float

    def __post_init__(self) -> None:
        if not (_real(self.coef) and math.isfinite(self.coef) and self.coef >= 0):
            raise ValueError(f"prox_coef (mu in the paper) must be a finite number >= 0, got {self.coef!r}.")
        check_positive_float(self.radius, "prox_radius")
        if not (_real(self.power) and math.isfinite(self.power) and self.power >= 2):
            raise ValueError(f"power (p) must be a finite number >= 2, got {self.power!r}.")

    def value(self, d: np.ndarray) -> np.ndarray:
        """``phi(d_j)`` for each row d_j of ``d`` (n_rows, n), computed as ``(mu R^2 / p) (||d_j|| / R)^p``."""
        with np.errstate(over="ignore"):  # a huge displacement: phi = inf, which no Armijo trial accepts
            return self.coef * self.radius**2 / self.power * (row_norms(d) / self.radius) ** self.power

    def gradient(self, d: np.ndarray) -> np.ndarray:
        """``grad phi(d_j) = mu R^(2-p) ||d_j||^(p-2) d_j`` for each row, computed as
        ``(mu (||d_j|| / R)^(p-2)) d_j``; exactly 0 at d_j = 0."""
        with np.errstate(over="ignore", invalid="ignore"):
            factor = self.coef * (row_norms(d) / self.radius) ** (self.power - 2.0)  # 0^0 = 1 for p = 2: times d = 0
            return factor[:, None] * d

    def affine_displacement(self, g: np.ndarray) -> np.ndarray:
        """The minimiser ``d_p(g) = -R theta^(1/(p-1)) g / ||g||``, ``theta = ||g|| / (mu R)``, of
        ``<g, d> + phi(d)`` for each row g (Proposition 1, eqs. (10)-(11)); 0 for g = 0. Needs mu > 0."""
        if not self.coef > 0:
            raise ValueError("the affine reference needs prox_coef > 0 (with mu = 0 the linear model has no "
                             "minimiser).")
        r = row_norms(g)
        theta = r / (self.coef * self.radius)
        length = self.radius * theta ** (1.0 / (self.power - 1.0))
        return -np.divide(length, r, out=np.zeros_like(r), where=r > 0)[:, None] * g


@dataclass(frozen=True)
class Armijo:
    """Same-minibatch Armijo backtracking: trial steps ``alpha0 rho^j``, j = 0..J, accepted when
    ``Q_B(u - alpha g) <= Q_B(u) - c alpha ||g||^2`` (Section V-B: c = 1e-4, rho = 0.5, J = 12, so at
    most 13 trial points).

    Parameters
    ----------
    c : float
        Sufficient-decrease constant in (0, 1).
    rho : float
        Backtracking factor in (0, 1).
    max_backtracks : int
        J >= 0.
    """

    c: float = 1e-4
    rho: float = 0.5
    max_backtracks: int = 12

    def __post_init__(self) -> None:
        for name in ("c", "rho"):
            value = getattr(self, name)
            if not (_real(value) and 0 < value < 1):
                raise ValueError(f"Armijo's {name} must lie in (0, 1), got {value!r}.")
        check_positive_int(self.max_backtracks, "max_backtracks", minimum=0)


def armijo_step(u: np.ndarray, g: np.ndarray, q0: np.ndarray, objective: Callable[[np.ndarray], np.ndarray],
                alpha0: np.ndarray, armijo: Armijo) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One backtracking step from each row of ``u`` along ``-g``; every trial evaluation is counted.

    Parameters
    ----------
    u, g : ndarray of shape (k, n)
        Current iterates and the gradients of their minibatch objectives Q_B.
    q0 : ndarray of shape (k,)
        ``Q_B(u)``.
    objective : callable
        ``objective(U)`` -> ``Q_B`` at the rows of U (k, n), each on its own minibatch.
    alpha0 : ndarray of shape (k,)
        Initial trial steps.
    armijo : Armijo

    Returns
    -------
    u_new : ndarray of shape (k, n)
        The accepted trial point, or ``u`` where all J + 1 trials failed.
    trials : ndarray of int, shape (k,)
        Trial points evaluated (1 to J + 1).
    failed : ndarray of bool, shape (k,)
        Rows where every trial failed.
    """
    gg = np.einsum("ij,ij->i", g, g)
    new = np.array(u, dtype=np.float64)
    trials = np.zeros(u.shape[0], dtype=np.int64)
    pending = np.ones(u.shape[0], dtype=bool)
    for j in range(armijo.max_backtracks + 1):
        alpha = alpha0 * armijo.rho**j
        with np.errstate(over="ignore", invalid="ignore"):  # a non-finite trial value is simply not accepted
            trial = u - alpha[:, None] * g
            accepted = pending & (objective(trial) <= q0 - armijo.c * alpha * gg)
        trials += pending
        new[accepted] = trial[accepted]
        pending &= ~accepted
        if not pending.any():
            break
    return new, trials, pending


#: ``batch_objective(step, who)`` -> (loss(U), loss_and_gradient(U)) on that step's minibatches of rows ``who``
BatchObjective = Callable[[int, np.ndarray], tuple[Callable, Callable]]


def power_prox_descent(w: np.ndarray, n_steps: np.ndarray, step_size: np.ndarray, prox: PowerProx, armijo: Armijo,
                       batch_objective: BatchObjective) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HiFedProx's local solver for k clients from the server's model w: S_i Armijo steps on ``f_B + phi(u - w)``.

    At local step s every client i with ``n_steps[i] > s`` draws a minibatch B (inside
    ``batch_objective(s, who)``, which returns the minibatch mean loss ``f_B(U)`` and
    ``(f_B(U), grad f_B(U))`` for the rows ``who``), forms ``Q_B(u) = f_B(u) + phi(u - w)`` and its
    gradient g (one gradient evaluation) and takes :func:`armijo_step` from ``step_size[i]``
    (alpha0, restarted every step [I: ALGORITHMS.md 2(c)]).

    Parameters
    ----------
    w : ndarray of shape (n,)
    n_steps : ndarray of int, shape (k,)
        S_i >= 1.
    step_size : ndarray of shape (k,)
        alpha0 of each client.
    prox : PowerProx
    armijo : Armijo
    batch_objective : callable

    Returns
    -------
    u : ndarray of shape (k, n)
        The final local iterates.
    trials : ndarray of int, shape (k,)
        Armijo trial points evaluated by each client.
    failures : ndarray of int, shape (k,)
        Local steps at which all trials failed (u kept).
    """
    k = n_steps.size
    u = np.tile(np.asarray(w, dtype=np.float64), (k, 1))
    trials = np.zeros(k, dtype=np.int64)
    failures = np.zeros(k, dtype=np.int64)
    for s in range(int(n_steps.max(initial=0))):
        who = np.flatnonzero(n_steps > s)
        loss, loss_and_gradient = batch_objective(s, who)
        f0, grad_f = loss_and_gradient(u[who])
        d = u[who] - w
        g = grad_f + prox.gradient(d)
        new, t, failed = armijo_step(u[who], g, f0 + prox.value(d), lambda U, loss=loss: loss(U) + prox.value(U - w),
                                     step_size[who], armijo)
        u[who] = new
        trials[who] += t
        failures[who] += failed
    return u, trials, failures


def client_batch_rng(seed: np.random.SeedSequence, client: int) -> np.random.Generator:
    """Client ``client``'s minibatch stream for a round: the child ``client`` of the round's ``seed``
    (``SeedSequence`` spawn key, computed without spawning, so the same seed gives the same stream on
    every call and every backend)."""
    return np.random.default_rng(child_seed(seed, client))


def minibatch_rows(rng: np.random.Generator, n: int, batch_size: int | None) -> np.ndarray:
    """Indices of a minibatch of ``min(batch_size, n)`` of a client's n rows, uniform without replacement;
    all rows in order (and no draw) when ``batch_size`` is None or at least n."""
    if batch_size is None or batch_size >= n:
        return np.arange(n)
    return rng.choice(n, size=int(batch_size), replace=False)
