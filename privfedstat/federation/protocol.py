"""What a protocol is given (:class:`Setup`) and what it returns (:class:`Run`).

Every algorithm's server loop (an estimator's ``_run(session, setup)``) is a function of the
session it talks through (:class:`~privfedstat.federation.session.Session`), the public settings
the fit chose before it (the clipping bounds and the estimation budget: :class:`Setup`) and the
estimator's parameters. It reports everything later stages need in a :class:`Run`: the
diagnostics judge convergence and noise from it and the inference linearises its noise model, so
no stage reads or writes another stage's state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["Setup", "Run", "ChangeOfBasis", "NewtonSteps", "parameter_basis", "reference_map"]


@dataclass(frozen=True)
class Setup:
    """The public settings a protocol runs with.

    Attributes
    ----------
    clip : float
        Per-sample gradient clipping bound (B); inf without clipping (mu = inf only).
    hessian_clip : float
        Per-sample Hessian norm bound (C_H), ``nan`` for estimators that clip no Hessian.
    mu : float
        Per-client GDP budget of the protocol's releases (the estimation share of the
        :class:`~privfedstat.privacy.plan.BudgetPlan`).
    square_norm : float or None
        A public bound on the mean squared row norm ``mean_j ||x_j||^2`` of the design on the fitting scale, which
        sets ``step_size="auto"`` (:func:`~privfedstat.families.curvature.auto_step_size`): the rescaling's
        (:meth:`~privfedstat.fitting.scaling.Scaler.square_norm`), or None (the number of columns: unit scale).
    """

    clip: float = math.inf
    hessian_clip: float = math.nan
    mu: float = math.inf
    square_norm: float | None = None


@dataclass(frozen=True, eq=False)
class ChangeOfBasis:
    """A public map of the clients' rows under which a protocol's last rounds ran (the clients' ``change_basis``
    verb; FedIRLS whitens its refine rounds).

    Attributes
    ----------
    design : ndarray of shape (n_features, n_features)
        Every row x becomes ``design^T x``.
    reference : int
        For a multinomial model, the class the clients take as reference (its labels swapped with class 0's); 0
        otherwise.
    """

    design: np.ndarray
    reference: int = 0

    def parameters(self, n_params: int) -> np.ndarray:
        """The map ``theta = B phi`` of the flat parameters (:func:`parameter_basis`)."""
        return parameter_basis(self.design, n_params, self.reference)


@dataclass(frozen=True)
class NewtonSteps:
    """What a protocol whose server steps solve with a released Hessian, floored at its noise and cut to a trust
    region, reports of its last steps (FedIRLS); the diagnostics and the inference read it.

    Attributes
    ----------
    hessian_sd : float
        The standard deviation of the last released Hessian's diagonal noise, in the coordinates it was released
        in (phi of the run's ``basis`` when there is one, as :meth:`Run.in_basis` shows it).
    shortened : tuple of (float, float) or None
        For a last server update cut short by the trust region: the norm of the update it computed and the
        radius it was cut to (fitting scale). Far above its noise, the path was still travelling when the rounds
        ran out.
    damped : tuple of (int, float, ndarray) or None
        For released curvature that stayed below the eigenvalue floor along some directions in every round of the
        last phase: how many directions kept most of their error (the floored steps remove only
        ``lambda / floor`` of it per round; the protocol sets the threshold), the largest fraction kept and the unit
        direction that kept it (fitting scale, flat). The estimate along them is where the path was, not an optimum.
    """

    hessian_sd: float = 0.0
    shortened: tuple[float, float] | None = None
    damped: tuple[int, float, np.ndarray] | None = None


@dataclass
class Run:
    """A protocol's result: the estimate, the server's path and the public noise levels of both.

    Attributes
    ----------
    theta : ndarray
        The estimate (fitting scale, flat in the clients' parameter order).
    path : list of ndarray
        The server's model after each round that changed it, ``path[0]`` the initial model and
        ``path[-1]`` equal to ``theta`` (FedIRLS: the estimate that combines its last rounds' Newton targets in place
        of the last iterate; docs/algorithms/fedirls.md, "Combined estimate").
    n_iter : int
        Gradient evaluations per client (the estimator's ``n_iter_``).
    noise_sd : float or ndarray of shape (n_params,)
        A lower bound on the standard deviation, per coordinate of theta (fitting scale), of its
        privacy noise, known from the calibrated sigmas (typically the noise of the last release,
        which nothing after it removes); 0 with mu = inf.
    update_noise_sd : float or None
        The noise standard deviation per coordinate that the last server update
        (``path[-1] - path[-2]``) carries, used to judge convergence; None if unknown (then
        ``converged_`` is only judged with mu = inf).
    update_noise_sds : ndarray of shape (len(path) - 1,) or None
        Where a protocol's rounds release with different noise, the noise sd (largest over coordinates) of each
        update ``path[k + 1] - path[k]``; the oscillation check compares a window of updates with the noise of those
        updates. None: every update carries ``update_noise_sd``.
    hessian : ndarray of shape (n_params, n_params) or None
        The server's aggregated released Hessian of the last round (before any eigenvalue
        floor), for protocols that release one; checked for ill-conditioning.
    noise_model : object or None
        The protocol's privacy-noise recursion (noise scales, weights, step sizes, stages), from
        which :func:`privfedstat.theory.protocol_noise_covariance` gives the covariance of the
        privacy noise in theta, linearised at a Hessian.
    weights : ndarray of shape (n_clients,) or None
        The server's aggregation weights w_i of the estimate; None: size weights (the inference
        aggregates with them).
    setup : Setup or None
        The clipping bounds the estimate's last rounds used, when the protocol chose new ones on the
        way (FedIRLS re-searches them at a located point; the inference describes the equation
        solved with them); None: the :class:`Setup` it was given.
    settle_from : int
        The index in ``path`` of the model the protocol's last phase started from (FedIRLS's refine
        rounds start from the located point); the convergence diagnostics judge only the updates
        after it, since an earlier phase's moves (a path still travelling from theta^(0)) say
        nothing about whether the last phase settled.
    basis : ChangeOfBasis or None
        The public map of the clients' rows under which the protocol's last rounds ran: the coefficients became
        ``theta = B phi`` with ``B = basis.parameters(n_params)``. ``setup``'s bounds are norms there, and the
        inference releases there too (:meth:`in_basis`). Every other attribute is in theta. None: the fitting
        columns throughout.
    newton : NewtonSteps
        The last steps of a protocol that solves with a floored released Hessian (FedIRLS); for others the
        default: no released Hessian noise, nothing shortened or damped.
    """

    theta: np.ndarray
    path: list[np.ndarray]
    n_iter: int
    noise_sd: float | np.ndarray = 0.0
    update_noise_sd: float | None = None
    update_noise_sds: np.ndarray | None = None
    hessian: np.ndarray | None = None
    noise_model: object | None = None
    weights: np.ndarray | None = None
    setup: Setup | None = None
    settle_from: int = 0
    basis: ChangeOfBasis | None = None
    newton: NewtonSteps = NewtonSteps()

    def in_basis(self) -> Run:
        """The run in the coordinates phi of ``basis``, for stages that talk to clients in that basis (the
        inference): the estimate, the path and the Hessian mapped (``phi = B^-1 theta``, ``B^T H B`` with
        ``B = basis.parameters(n_params)``), the noise model's view there (its ``in_basis()``), and no basis."""
        if self.basis is None:
            return self
        P = self.basis.parameters(self.theta.size)
        to_phi = np.linalg.inv(P)
        return replace(self, theta=to_phi @ self.theta, path=[to_phi @ t for t in self.path],
                       hessian=None if self.hessian is None else P.T @ self.hessian @ P,
                       noise_model=None if self.noise_model is None else self.noise_model.in_basis(),
                       noise_sd=math.nan, update_noise_sd=None, basis=None,
                       newton=replace(self.newton, shortened=None))


def parameter_basis(basis: np.ndarray, n_params: int, reference: int = 0) -> np.ndarray:
    """The map ``theta = B phi`` of the flat parameters when every row x becomes ``basis^T x`` (and, for a
    multinomial model, the clients take class ``reference`` as the reference class).

    A coefficient matrix Theta of shape (d, q) (q = ``n_params / d`` outputs, flattened in C order)
    becomes ``Theta = basis Phi M^T`` with M = :func:`reference_map` (the identity for reference 0), so
    ``B = kron(basis, M)``; for scalar-response families B is ``basis`` itself.
    """
    d = basis.shape[0]
    if n_params == d:
        if reference:
            raise ValueError(f"a reference class ({reference}) needs a multinomial model (several outputs).")
        return basis
    return np.kron(basis, reference_map(n_params // d, reference))


def reference_map(n_outputs: int, reference: int) -> np.ndarray:
    """The (q, q) map M of a multinomial model's class coefficients when class ``reference`` (of 0..q) becomes the
    reference instead of class 0: ``theta_k = M phi`` per covariate, an involution.

    The model's coefficients theta_k (k = 1..q) are class k's logit relative to class 0's. With the labels
    of classes 0 and j = ``reference`` swapped, phi_c is the logit of label c relative to label 0, that is of
    class c (c != j) or class 0 (c = j) relative to class j: ``theta_k = phi_k - phi_j`` for k != j and
    ``theta_j = -phi_j``.
    """
    if not 0 <= reference <= n_outputs:
        raise ValueError(f"reference must be a class of 0..{n_outputs}, got {reference}.")
    M = np.eye(n_outputs)
    if reference:
        M[:, reference - 1] -= 1.0
        M[reference - 1, reference - 1] = -1.0
    return M
