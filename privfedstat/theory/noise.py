"""Privacy-noise models of the federated protocols: the noise each step adds and the maps it goes through.

Every private estimator's ``_run`` reports one of the models below (``Run.noise_model``), built from
the noise scales its releases were calibrated with (the functions of
:mod:`privfedstat.privacy.calibration`, which the protocols and
:func:`~privfedstat.theory.predict_mse_from_params` share). Each model's docstring derives its
recursion; :func:`~privfedstat.theory.protocol_noise_covariance` (:mod:`privfedstat.theory.noise_covariance`,
with the linearisation, its approximations and their accuracy) sums it into the covariance of the estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..privacy.calibration import calibrated_sigma, gradient_calibration, local_step_calibration, stage_budget
from ._engine import Stage, privacy_transport
from .noise_maps import (
    NewtonMaps,
    antithetic_releases,
    floored,
    one_blas_thread,
    psd,
    refloored,
    step_map,
    symmetric_noise_sandwich,
)
from .noise_targets import combined_covariance, target_round

__all__ = [
    "GradientNoise", "NewtonNoise", "ScaffoldNoise", "IRLSNoise",
    "server_stage", "local_stage", "fedsgd_noise", "fedavg_noise", "fedhybrid_noise",
]


#: antithetic pairs of draws of a released Hessian's noise in :meth:`IRLSNoise.expected_covariance`
RELEASE_PAIRS = 256


def server_stage(*, clip: float, sizes: np.ndarray, mu: float, n_steps: int, step_size: float,
                 weights: np.ndarray) -> Stage:
    """The stage of :func:`~privfedstat.fitting.steps.server_gradient_descent` with these arguments.

    Each of the ``n_steps`` steps moves the server's parameter by ``-eta sum_i w_i (g_i + sigma_i z_i)``
    with ``sigma_i`` from :func:`~privfedstat.privacy.calibration.gradient_calibration`: isotropic noise
    of per-coordinate variance ``eta^2 sum_i w_i^2 sigma_i^2`` per step.
    """
    w = np.asarray(weights, dtype=np.float64)
    sigma = calibrated_sigma(*gradient_calibration(clip, sizes, n_steps, mu))
    return Stage(int(n_steps), w, step_size**2 * float(np.sum(w**2 * sigma**2)))


def local_stage(*, clip: float, sizes: np.ndarray, mu: float, n_steps: int, step_size: float,
                weights: np.ndarray) -> Stage:
    """The stage of :func:`~privfedstat.fitting.steps.local_gradient_descent` averaged with ``weights``.

    Every client adds noise of sd ``s_i`` (:func:`~privfedstat.privacy.calibration.local_step_calibration`)
    to its parameter after each of the ``n_steps`` steps; the server averages the clients' iterates
    with w_i: per step, isotropic noise of variance ``sum_i w_i^2 s_i^2`` in the average.
    """
    w = np.asarray(weights, dtype=np.float64)
    s = calibrated_sigma(*local_step_calibration(clip, step_size, sizes, n_steps, mu))
    return Stage(int(n_steps), w, float(np.sum(w**2 * s**2)), local=True, client_noise=s**2)


@dataclass(frozen=True)
class GradientNoise:
    """Noisy gradient steps of one size eta, in stages (FedSGD, FedHybrid, FedAvg).

    Attributes
    ----------
    step_size : float
        eta (every stage's).
    stages : tuple of Stage
        In order; ``Stage.noise_var`` is the per-coordinate noise variance one step adds to the
        server's parameter (see :func:`server_stage`, :func:`local_stage`).

    Notes
    -----
    With A = I - eta H the noise of step s (of S) reaches theta_S as ``A^(S-1-s)`` times it:
    covariance ``sum_s v_s A^(S-1-s) A^(S-1-s)`` (FedSGD: ``eta^2 sum_i w_i^2 sigma_i^2 sum_k A^2k``).
    Local steps (FedAvg, FedHybrid stage I) have the same form: client i's noise after local step
    t goes through its remaining local steps, the server's average and every later round, whose
    linearised map is again A per step (FedAvg's average of K local steps from a common point is
    A^K of it, up to the client data terms, which carry no noise).
    """

    step_size: float
    stages: tuple

    @property
    def n_steps(self) -> int:
        return sum(st.n_steps for st in self.stages)

    @property
    def is_zero(self) -> bool:
        return all(st.noise_var == 0 for st in self.stages)

    def step_variances(self) -> np.ndarray:
        """Per-coordinate noise variance of every step, shape (S,)."""
        return np.concatenate([np.full(st.n_steps, st.noise_var) for st in self.stages])

    def covariance(self, H: np.ndarray) -> np.ndarray:
        A = step_map(H, self.step_size)
        return privacy_transport([A] * self.n_steps, self.step_variances())

    def error_transport(self, H: np.ndarray) -> np.ndarray:
        """``A^S``: ``theta_S - theta* ~ A^S (theta_0 - theta*)`` for the noise-free path (local steps
        from a common point average to the same map to first order)."""
        return np.linalg.matrix_power(step_map(H, self.step_size), self.n_steps)


def fedsgd_noise(*, clip: float, sizes: np.ndarray, mu: float, n_iter: int, step_size: float,
                 weights: np.ndarray) -> GradientNoise:
    """FedSGD (Algorithm 1): ``n_iter`` server steps with budget ``mu``."""
    return GradientNoise(float(step_size), (server_stage(clip=clip, sizes=sizes, mu=mu, n_steps=n_iter,
                                                         step_size=step_size, weights=weights),))


def fedavg_noise(*, clip: float, sizes: np.ndarray, mu: float, n_rounds: int, n_local_steps: int, step_size: float,
                 weights: np.ndarray) -> GradientNoise:
    """FedAvg (Algorithm 3, :func:`~privfedstat.algorithms.fedavg.run_fedavg`): ``n_rounds`` rounds of
    ``n_local_steps`` local steps, each round with budget ``mu / sqrt(n_rounds)``."""
    mu_round = stage_budget(mu, n_rounds)
    stage = local_stage(clip=clip, sizes=sizes, mu=mu_round, n_steps=n_local_steps, step_size=step_size,
                        weights=weights)
    return GradientNoise(float(step_size), (stage,) * int(n_rounds))


def fedhybrid_noise(*, clip: float, sizes: np.ndarray, mu: float, n_local_steps: int, n_server_iter: int,
                    step_size: float, weights: np.ndarray) -> GradientNoise:
    """FedHybrid (Algorithm 2): K1 local steps averaged with n_i / N, then K2 server steps with
    ``weights``; each stage has budget ``mu / sqrt(2)``."""
    mu_stage = stage_budget(mu, 2)
    n = np.asarray(sizes, dtype=np.float64)
    return GradientNoise(float(step_size), (
        local_stage(clip=clip, sizes=n, mu=mu_stage, n_steps=n_local_steps, step_size=step_size, weights=n / n.sum()),
        server_stage(clip=clip, sizes=n, mu=mu_stage, n_steps=n_server_iter, step_size=step_size, weights=weights),
    ))


@dataclass(frozen=True)
class NewtonNoise:
    """FedNewton (Algorithm 4): a FedAvg stage, then one private Newton step per client, averaged.

    Attributes
    ----------
    fedavg : GradientNoise
        The FedAvg stage on the first halves (client sizes n1_i, budget mu / sqrt 2).
    newton_var : ndarray of shape (n_clients,)
        Variance per coordinate of each client's Newton-step release noise (sigma_i^2).
    weights : ndarray of shape (n_clients,)
        Server weights w_i of the Newton step.
    hessian_floor : float
        The eigenvalue floor lambda of the clients' Newton matrices.

    Notes
    -----
    Linearised at the estimate, client i's step from theta_1 = theta-hat + e_1 is
    ``-Ht_i^-1 (H_i2 e_1 + psi_i2)``, so ``e_New = (I - Ht^-1 H) e_1 + sum_i w_i sigma_i z_i`` and

        Cov = D C_1 D^T + (sum_i w_i^2 sigma_i^2) I,   D = I - Ht^-1 H,

    with C_1 the FedAvg stage's covariance and ``Ht = floor(N, lambda)``, N the pooled Newton matrix:
    the weighted mean of per-sample Hessians clipped at C_H over all rows (``newton_matrix`` of
    :func:`~privfedstat.theory.protocol_noise_covariance`; default H). N differs from H where gradients are clipped
    (their rows add curvature to N, not to H) or Hessians are clipped (lowering N); the Newton
    step then lets ``D e_1`` through even without a floor. Inferred approximations: the clients'
    own Newton matrices Ht_i (first-half means, floored client by client) and second-half
    Jacobians H_i2 are replaced by Ht and H -- their average ``sum_i w_i Ht_i^-1 H_i2`` differs at
    O(p / n1_i) (Jensen: client-level floors and inverses shorten the steps; +9% variance at
    n_i = 400 and +2% at 1000 with the floor above H's spectrum on a logistic design); the
    gradient's projection onto the ball of radius G_i is taken as inactive (near the optimum the
    mean gradients are O(1/sqrt(n_i)) plus the FedAvg stage's noise times H). With N = H and the
    floor inactive D = 0 and only the Newton noise remains. The random split into halves is data
    randomness, not privacy noise, and is not included (it belongs to the sampling variance: the
    Newton step uses the second half's gradient only, about twice the full-data variance).
    """

    fedavg: GradientNoise
    newton_var: np.ndarray
    weights: np.ndarray
    hessian_floor: float

    @property
    def is_zero(self) -> bool:
        return self.fedavg.is_zero and not np.any(self.newton_var)

    def sampling_maps(self, H: np.ndarray, sizes: np.ndarray) -> list[tuple[float, np.ndarray]]:
        """FedNewton's sampling covariance as ``sum_k c_k L_k M L_k^T``, ``M = H^-1 S H^-1`` (S: per-sample score covariance).

        Linearised at the estimate with one Jacobian H for all clients and the Newton matrix N
        taken as H (as in :meth:`covariance` without ``newton_matrix``): FedAvg on the first halves
        (n1_i = floor(n_i / 2) rows) ends at ``theta_1 = theta* + P e_1``, ``e_1`` the error of the
        first halves' weighted M-estimate (covariance ``c1 M``, ``c1 = sum_i w_i^2 / n1_i``) and
        ``P = I - A^S`` the part of it the S local steps of size eta (``A = I - eta H``) reach from
        the start; the Newton step on the second halves' gradients (n2_i = n_i - n1_i rows,
        independent of e_1) gives ``theta_2 - theta* = D P e_1 - Ht^-1 sum_i w_i gbar_i2(theta*)``
        with ``Ht = floor(H, lambda)`` and ``D = I - Ht^-1 H``. Hence

            Cov = c2 (Ht^-1 H) M (Ht^-1 H)^T + c1 (D P) M (D P)^T,   c2 = sum_i w_i^2 / n2_i,

        about twice the pooled ``M / N`` when the floor is inactive (D = 0), less along the
        directions it lifts (the step is shortened there; part of e_1 survives instead). Inferred
        approximations, as for the privacy noise: the clients' own floored first-half Hessians
        are replaced by Ht (their inverses average higher at small n1_i, O(p / n1_i)); FedAvg's
        deterministic remainder ``A^S (theta_0 - theta*)`` is a bias, not a variance.

        Accuracy (checked over data replicates by ``tests/inference/test_private.py``, mu = inf):
        the estimates' SD matches the RMS of this SE to within about 15% at n_i = 400, also with a
        floor above H's spectrum, where the pooled SE scaled by ``sqrt(c2 / c)`` would overstate
        the SD; at n_i = 100-200 the SD exceeds the SE by up to about 30% (the clients' own first-half
        Hessian inverses, above); with FedAvg far from the optimum (a bias of several SDs) the
        linearisation fails. Measurements in ``benchmarks/RESULTS.md``.

        Parameters
        ----------
        H : ndarray of shape (p, p)
            Symmetric positive definite Jacobian of the clipped score at the estimate.
        sizes : ndarray of shape (n_clients,)
            n_i, the clients' full sizes (split as in :meth:`~privfedstat.FederatedData.split_halves`).

        Returns
        -------
        list of (float, ndarray of shape (p, p))
            ``[(c2, Ht^-1 H), (c1, D P)]``.
        """
        n = np.asarray(sizes, dtype=np.int64)
        n1 = n // 2
        w2 = np.asarray(self.weights, dtype=np.float64) ** 2
        p = H.shape[0]
        step = np.linalg.solve(floored(H, self.hessian_floor), H)
        P = np.eye(p) - np.linalg.matrix_power(step_map(H, self.fedavg.step_size), self.fedavg.n_steps)
        return [(float(np.sum(w2 / (n - n1))), step), (float(np.sum(w2 / n1)), (np.eye(p) - step) @ P)]

    def covariance(self, H: np.ndarray, newton_matrix: np.ndarray | None = None) -> np.ndarray:
        p = H.shape[0]
        N = H if newton_matrix is None else newton_matrix
        D = np.eye(p) - np.linalg.solve(floored(N, self.hessian_floor), H)
        A = step_map(H, self.fedavg.step_size)
        # the FedAvg steps (map A), then the Newton step (map D), whose own noise is added after it
        newton = float(np.sum(self.weights**2 * self.newton_var))
        return privacy_transport([A] * self.fedavg.n_steps + [D], np.append(self.fedavg.step_variances(), newton))


@dataclass(frozen=True)
class ScaffoldNoise:
    """DP-SCAFFOLD: R rounds of K local steps on noisy gradients with control variates.

    Attributes
    ----------
    step_var : float
        Per-coordinate variance of ``eta sum_i w_i sigma_i z_i``, the noise one local step adds to
        the weighted average of the clients' iterates (sigma_i of
        :func:`~privfedstat.privacy.calibration.gradient_calibration` with R K messages).
    n_local_steps : int
        K.
    n_rounds : int
        R (rounds run).
    step_size : float
        Local step eta_l.
    server_step_size : float
        Global step eta_g.

    Notes
    -----
    Derivation (inferred; Karimireddy et al. and Noble et al. give no variance). With one Hessian
    H for all clients, the noise parts of the states evolve linearly: in a round from x, client i's
    local iterate ends at ``A^K x - eta S_K (c - c_i) - eta N_i`` with ``S_K = sum_{t<K} A^t`` and
    ``N_i = sum_t A^(K-1-t) sigma_i z_it``. The server keeps ``c = sum_i w_i c_i`` (true at 0 and
    preserved by the update ``c <- c + sum_i w_i (c_i+ - c_i)`` since the weights sum to 1), so
    the control variates cancel in the weighted average and

        x+ = Q x - eta_g eta sum_i w_i N_i,   Q = I - eta_g (I - A^K):

    each round adds ``eta_g^2 sum_t A^t (step_var) A^t`` (the within-round transport) and the rounds
    go through Q. With eta_g = 1, Q = A^K and this is FedSGD's transport over R K steps. With
    client Hessians H_i the control variates' noise no longer cancels exactly: an error of second
    order in ``H_i - H`` times the noise.
    """

    step_var: float
    n_local_steps: int
    n_rounds: int
    step_size: float
    server_step_size: float

    @property
    def is_zero(self) -> bool:
        return self.step_var == 0

    def _round_map(self, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(A, Q)``: the local step map and the map of one round, ``Q = I - eta_g (I - A^K)``."""
        eye = np.eye(H.shape[0])
        A = step_map(H, self.step_size)
        return A, eye - self.server_step_size * (eye - np.linalg.matrix_power(A, self.n_local_steps))

    def covariance(self, H: np.ndarray) -> np.ndarray:
        p = H.shape[0]
        K, R = self.n_local_steps, self.n_rounds
        A, Q = self._round_map(H)
        round_cov = self.server_step_size**2 * privacy_transport([A] * K, np.full(K, self.step_var))
        return privacy_transport([Q] * R, np.broadcast_to(round_cov, (R, p, p)))

    def error_transport(self, H: np.ndarray) -> np.ndarray:
        """``Q^R``: how the noise-free rounds carry the initial error (see :meth:`GradientNoise.error_transport`)."""
        return np.linalg.matrix_power(self._round_map(H)[1], self.n_rounds)


@dataclass(frozen=True)
class IRLSNoise:
    """FedIRLS: R server Newton rounds on released gradients and released (symmetric-noise) Hessians.

    Attributes
    ----------
    gradient_var : ndarray of shape (R,)
        Per-coordinate variance v_r of the aggregated gradient noise xi_r of each round.
    hessian_var : ndarray of shape (R,)
        Diagonal variance s_r^2 of the aggregated Hessian noise Xi_r used in round r (off-diagonal
        s_r^2 / 2); a round that reuses an earlier Hessian repeats its variance.
    floors : ndarray of shape (R,)
        Eigenvalue floor lambda_r of the Hessian used in round r.
    step_size : float
        eta.
    last_hessian : ndarray of shape (p, p)
        The floored released Hessian Hf_R of the last step (public: post-processing of releases),
        in the coordinates phi of ``basis`` when one is given.
    basis : ndarray of shape (p, p) or None, default None
        A public change of coordinates ``theta = basis phi`` the clients made before round ``basis_from`` (FedIRLS
        whitens its refine rounds): from that round on, the gradient noise is ``v_r I`` and the Hessian noise
        symmetric in phi, and the rounds' floors apply there. None: every round in theta.
    basis_from : int, default 0
        The first round run in phi; the earlier rounds ran in theta, where their gradient noise ``v_r I`` is ``v_r
        basis^T basis`` in phi, their Hessian noise ``basis^T Xi basis`` and their floors apply to ``basis^-T N basis^-1``.
    in_phi : bool, default False
        With a ``basis``: :meth:`covariance` takes H and returns the covariance in phi (the view of :meth:`in_basis`).
    last_step : ndarray of shape (p, p) or None, default None
        Covariance of the error ``J^-1 (J - N) s_R`` the last step s_R leaves where the released gradients show its
        Newton matrix N wrong (coordinates of the last round; the fit's rounds compute it from released values:
        :func:`privfedstat.algorithms.fedirls.secant.newton_error`), and where the refine rounds re-weighed the sites
        the site effects' shift of the weighted root (:mod:`privfedstat.algorithms.fedirls.site_weights`); added to
        the recursion's result. None: 0.
    combination : ndarray of shape (R,) or None, default None
        Weights w_r of the estimate ``sum_r w_r (theta_r - eta N^-1 g_r)``, N the last round's matrix
        (:mod:`~privfedstat.theory.noise_targets`). None: the last iterate alone.

    Notes
    -----
    Near the optimum (the derivation of :class:`~privfedstat.FedIRLS`'s budget split), round r
    maps the error e_{r-1} of theta_{r-1} to

        e_r = M_r e_{r-1} - eta Hf_r^-1 xi_r,   M_r = I - eta Hf_r^-1 H,   Hf_r = floor(N + Xi_r, lambda_r),

    with xi_r, Xi_r independent of e_{r-1}, N the noise-free Newton matrix and H the Jacobian of
    the clipped score (the argument of :func:`~privfedstat.theory.protocol_noise_covariance`). N is not H: the
    clients release means of per-sample Hessians clipped at C_H over *all* rows, while rows whose
    gradient is clipped at B do not move the clipped score of a GLM (their clipped gradient
    ``B sign(ell') x / ||x||`` does not depend on theta), and Hessian clipping lowers N; Newton
    then converges only linearly, at the rate ``D = I - eta N^-1 H``, and earlier rounds' noise
    matters. To first order in Xi_r, ``M_r = D_r + eta N_r^-1 Xi_r N_r^-1 H`` with
    ``N_r = floor(N, lambda_r)``, ``D_r = I - eta N_r^-1 H``, and

        C_r = D_r C_{r-1} D_r^T + eta^2 N_r^-1 E[Xi_r G_r Xi_r] N_r^-1 + eta^2 v_r Hf_r^-1 Hf_r^-1,

    ``G_r = N_r^-1 H C_{r-1} H N_r^-1``, with :func:`~privfedstat.theory.noise_maps.symmetric_noise_sandwich` for the middle term
    (with eta = 1 and N = H: ``H^-1 E[Xi C Xi] H^-1``; Newton forgets the previous error up to
    the Hessian's relative noise).

    **Which Newton matrix.** The only public one is the released Hf_R = floor(N + Xi_R) of the
    last step, and it is exactly the matrix that multiplies the last gradient noise: that term
    uses Hf_R itself, the covariance *given* the released Hessian (exact in Xi_R, and on average
    it contains the inflation ``E[Hf^-2] > N^-2``). In D, Hf_R stands for N: ``D_R = I - eta
    Hf_R^-1 H`` is the realised map of the last round, whose average over Xi_R is
    ``D C D^T + E[F C F^T]`` -- it already contains the last round's Hessian-noise term (adding it
    again double-counts it: twice the variance on the multinomial design of the tests). So the middle term
    is added only with the *excess* variance ``max(s_r^2 - s_R^2, 0)`` of earlier, noisier
    rounds, whose maps D_r are built from Hf_R too (floored at lambda_r).

    **The last map's overshoot.** Every map clamps the spectrum of ``eta Hf^-1/2 H Hf^-1/2`` to [0, 1]. Given
    ``hessian_sd`` (H = J + E, a release of J), the last round adds what the map clamped to [0, 2] carries beyond
    that, where Hf is flatter than J, less the part E makes: ``psd(D_2 C D_2^T - D_1 C D_1^T - eta^2 Hf^-1 E[E C E]
    Hf^-1)`` (docs/guide/inference.md, "What the privacy covariance covers").

    Inferred approximations: every round uses the Newton matrix and H at the estimate (early
    rounds from theta = 0 are not near it, but their noise is damped by the later maps); the
    floor's own response to Xi and terms of second order in Xi (beyond those the realised Hf_R
    carries) are neglected, relative ``s_r^2 (p + 1) / (2 lambda^2)``, which the auto floor
    ``3 s_r`` keeps below ~(p + 1) / 18 and the later rounds damp; the trust region
    ``max_step`` is taken as inactive (the last steps are small); a reused Hessian's noise is
    treated as independent of the earlier rounds'. If H is Hf_R itself (no independent
    Hessian), D_R = 0 and the last round's forgetting term ``E[F C F^T]`` is lost (small:
    relative ``s_R^2 (p + 1) / (2 lambda^2)``).

    With a ``basis`` the recursion runs in phi (``H`` becomes ``basis^T H basis``) and the
    covariance is mapped back, ``basis C basis^T``; the excess Hessian variance of a round in theta
    is compared with the last round's in phi as if they were on one scale (those rounds' noise is
    forgotten by the later ones up to the clipped rows' share).
    """

    gradient_var: np.ndarray
    hessian_var: np.ndarray
    floors: np.ndarray
    step_size: float
    last_hessian: np.ndarray
    basis: np.ndarray | None = None
    basis_from: int = 0
    in_phi: bool = False
    last_step: np.ndarray | None = None
    combination: np.ndarray | None = None

    def in_basis(self) -> IRLSNoise:
        """The same model with H given and the covariance returned in phi (``theta = basis phi``)."""
        return replace(self, in_phi=True)

    @property
    def is_zero(self) -> bool:
        return not np.any(self.gradient_var) and not np.any(self.hessian_var)

    def covariance(self, H: np.ndarray, hessian_sd: float | None = None) -> np.ndarray:
        """The recursion of the class docstring at H (a stack of ``last_hessian`` gives a stack of covariances).

        ``hessian_sd``: the diagonal noise sd of H, in the coordinates H is given in, when H is a release (None:
        unknown); with it the last round keeps the overshoot beyond that noise (class docstring).
        """
        p = H.shape[-1]
        if self.last_hessian.shape[-2:] != (p, p):
            raise ValueError(f"H has shape {H.shape} but this FedIRLS fit has {self.last_hessian.shape[-1]} parameters.")
        eta = self.step_size
        R = len(self.gradient_var)
        P = np.eye(p) if self.basis is None else np.asarray(self.basis, dtype=np.float64)
        if not self.in_phi:
            H = P.T @ H @ P
        maps = NewtonMaps(H, eta)  # the rounds share few Newton matrices: each one's spectra once
        last_inv, C = np.linalg.inv(self.last_hessian), np.zeros(np.broadcast_shapes(self.last_hessian.shape, H.shape))
        combo, total, cross, K = self.combination, np.zeros_like(C), np.zeros_like(C), maps(self.last_hessian, 2.0)
        for r in range(R):
            native = r >= self.basis_from  # a round before basis_from was floored in theta
            N_r = self.last_hessian if r == R - 1 else refloored(self.last_hessian, float(self.floors[r]),
                                                                    None if native else P)
            N_inv = last_inv if N_r is self.last_hessian else np.linalg.inv(N_r)
            D = maps(N_r)
            G = N_inv @ H @ C @ H @ N_inv
            transport = D @ C @ D.mT
            spurious = None if hessian_sd is None or (combo is None and r < R - 1) else (  # E[E C E], E: H = J + E
                symmetric_noise_sandwich(C, hessian_sd**2) if self.in_phi
                else P.T @ symmetric_noise_sandwich(P @ C @ P.T, hessian_sd**2) @ P)
            if r == R - 1 and hessian_sd is not None:  # the overshoot beyond that noise
                over = maps(N_r, 2.0)
                transport = transport + psd(over @ C @ over.mT - transport - eta**2 * N_inv @ spurious @ N_inv)
            excess = max(float(self.hessian_var[r]) - float(self.hessian_var[-1]), 0.0)  # Hf_R carries s_R^2
            middle = (symmetric_noise_sandwich((G + G.mT) / 2, excess) if native
                      else P.T @ symmetric_noise_sandwich(P @ ((G + G.mT) / 2) @ P.T, excess) @ P)
            gradient = N_inv @ N_inv if native else N_inv @ (P.T @ P) @ N_inv
            if combo is not None:
                total, cross = target_round(total, cross, C, D, K, float(combo[r]) if r < R - 1 else 0.0,
                                            eta**2 * float(self.gradient_var[r]), last_inv, N_inv,
                                            np.eye(p) if native else P.T @ P, None if spurious is None else eta**2 * spurious)
            C = (transport + eta**2 * N_inv @ middle @ N_inv + eta**2 * float(self.gradient_var[r]) * gradient)
            C = (C + C.mT) / 2
        C = C if combo is None else combined_covariance(total, cross, C, float(combo[-1]))
        if self.last_step is not None:
            C = C + self.last_step
        return C if self.basis is None or self.in_phi else P @ C @ P.T

    def expected_covariance(self, H: np.ndarray, *, n_pairs: int = RELEASE_PAIRS, seed: int = 0) -> np.ndarray:
        """:meth:`covariance` averaged over the noise of the last released Hessian, when ``last_hessian`` is noise-free.

        A fit reports :meth:`covariance` at the Hessian it released, ``Hf_R = floor(N + Xi_R,
        lambda_R)``; a plan knows only the noise-free Newton matrix N (here ``last_hessian``) and the
        variance ``s_R^2`` of Xi_R (``hessian_var[-1]``). To first order in Xi_R the average is
        :meth:`covariance` at N; the second-order terms are not small where privacy noise
        dominates: ``E[Hf_R^-1 Hf_R^-1] > N^-2`` (the last gradient's noise goes through the
        inverse of a noisy matrix) and the last round's forgetting term ``E[F C F^T]``, which
        :meth:`covariance` carries only through a realised ``Hf_R != H``, comes back, about
        ``s_R^2 (p + 1) / (2 lambda^2)`` of the earlier rounds' variance. With the auto floor
        ``lambda_R = 3 s_R`` the floor bounds the inverse, and the expectation is taken with it:
        the mean over ``n_pairs`` antithetic pairs ``+-Xi`` (symmetric Gaussian, diagonal variance
        ``s_R^2``, off-diagonal ``s_R^2 / 2``) drawn from a fixed ``seed``, so a plan is
        reproducible. On the planning designs of ``benchmarks/bench_power.py`` (p = 3,
        ``s_R / lambda_min(N)`` from 0.05 to 0.25) it raises the privacy sd by 1-40%; the Monte-Carlo
        error of the default 256 pairs is about 1% of the sd at ``s_R / lambda_min(N) = 0.25``.

        Parameters
        ----------
        H : ndarray of shape (p, p)
            As in :meth:`covariance`.
        n_pairs : int, default ``RELEASE_PAIRS``
        seed : int, default 0

        Returns
        -------
        ndarray of shape (p, p)
        """
        var = float(self.hessian_var[-1])
        if not var > 0:
            return self.covariance(H)
        with one_blas_thread():
            released = antithetic_releases(self.last_hessian, float(np.sqrt(var)), float(self.floors[-1]), n_pairs, seed)
            return replace(self, last_hessian=released).covariance(H).mean(axis=0)
