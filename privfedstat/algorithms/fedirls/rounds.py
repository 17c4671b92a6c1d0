"""FedIRLS's server rounds: the private Newton rounds of each phase, the exact (mu = inf) rounds with safeguarded
steps, and the fit's walk through its schedule's stages (:meth:`.schedule.IRLSSchedule.walk`)."""

from __future__ import annotations

import math
from contextlib import ExitStack

import numpy as np

from ..._linalg import floor_eigenvalues, vec_to_sym
from ..._validation import DIVERGENCE_NORM, check_iterate
from ...federation.protocol import ChangeOfBasis, NewtonSteps, Run, Setup
from ...federation.queries import search_bounds
from ...federation.secure import secure_mean
from ...federation.server import aggregate
from ...federation.session import Session
from ...inference.core import count_dispersion
from ...privacy.calibration import hessian_sensitivity
from ...theory.noise import IRLSNoise
from .insurance import insure
from .schedule import IRLSSchedule, Phase
from .secant import chord_scale, newton_error, secant_scale, secant_update
from .site_weights import reweighed_refine
from .support import check_support

__all__ = ["ScheduledRun"]


class ScheduledRun:
    """One fit walking its schedule's stages (:attr:`~.schedule.IRLSSchedule.stages`) through its session.

    After :meth:`walk`: ``budget_split`` (the shares of the estimation mu^2 the rounds used; mu = inf: ones)
    and ``hessian_floor`` (the floor of the last Hessian), which the estimator reports.
    """

    def __init__(self, schedule: IRLSSchedule, session: Session, labels: list[str]) -> None:
        self.schedule, self.session, self.labels = schedule, session, labels  # labels: the coefficients' names
        self.newton: _Rounds | None = None
        self.found: dict[str, float] = {}
        self.dispersion: tuple[float, float] | None = None  # (phi, sd) of the stage disperse
        self.final: Setup | None = None  # the refine rounds' bounds when they were searched again
        self.mapped = ExitStack()  # the clients' rows mapped (whiten) until the refine rounds end
        self.run: Run | None = None
        self.budget_split: np.ndarray | None = None
        self.hessian_floor = math.nan

    def walk(self) -> Run:
        """Every stage in order; the :class:`Run`."""
        with self.mapped:
            self.schedule.walk(self)
        if self.run is None:
            self.run = self.newton.result(self.final)
            self.budget_split = np.vstack([phase.shares for phase in self.newton.phases])
            self.hessian_floor = self.newton.lam
        return self.run

    def exact(self) -> None:
        self.run, self.budget_split, self.hessian_floor = _run_exact(self.schedule, self.session)

    def rounds(self) -> None:
        self.newton = _Rounds(self.schedule, self.session, self.session.clients.initial_parameters())
        self.newton.run(self.schedule.phase(0))

    locate = rounds

    def whiten(self) -> None:
        change = self.schedule.whitening(self.newton.H_floored)
        self.newton.change_basis(change)
        # the later stages (diagnostics, inference) read the fitting columns again
        self.mapped.enter_context(self.session.rows_mapped(change))

    def research(self) -> None:
        """The bounds at the located point: its per-sample norms are the ones the refine rounds clip."""
        config = self.schedule.search
        self.found = search_bounds(self.session, list(self.schedule.research), self.newton.theta, config.pilot_quantile,
                                   config, self.schedule.mu_research, stage="irls-clip")

    def disperse(self) -> None:
        """A count model's Pearson dispersion at the located point: the insurance's unit (:meth:`.IRLSSchedule.score_sd`)."""
        self.dispersion = count_dispersion(self.session, self.newton.theta, self.schedule.mu_dispersion, "irls-dispersion")

    def insure(self) -> None:
        self.found, self.schedule = insure(self.schedule, self.session, self.newton, self.found, self.dispersion)

    def refine(self) -> None:
        """The refine rounds on the split derived at the located point, once :func:`.support.check_support` found that
        they can reach an optimum at this mu (it refuses early, with the numbers, where they cannot)."""
        self.final = self.schedule.refine_setup(self.found) if self.schedule.research else self.final
        newton, change = self.newton, self.newton.change
        self.schedule = newton.schedule = self.schedule.located_at(newton.H_floored, newton.H, newton.basis)
        check_support(self.schedule, newton.H, newton.basis, self.final, None if change is None else change.design,
                      float(np.max(self.session.ledger.client_mu)), self.labels, newton.released[-1][1])
        phase = self.schedule.phase(1, self.final)
        newton.confined = "hessian" in self.schedule.research  # its C_H clips the pilot quantile's tail there
        if self.schedule.reweigh:  # weights="optimal" (:mod:`.site_weights`)
            return reweighed_refine(newton, self.schedule, phase, self.final, self.session.sizes, self.dispersion)
        newton.run(phase)


class _Rounds:
    """The private Newton rounds of one FedIRLS fit: the server's state across phases and the noise it recorded.

    Round r releases the clipped mean gradient at theta and, with a Hessian share > 0, the mean
    of per-sample Hessians clipped at C_H (otherwise the last one is reused), floors its
    eigenvalues and takes the trust-region Newton step.
    """

    def __init__(self, schedule: IRLSSchedule, session: Session, theta: np.ndarray) -> None:
        self.schedule, self.session, self.w = schedule, session, schedule.weights
        self.theta, self.path = theta, [theta]
        self.H = self.H_floored = None
        self.lam, self.shortened = math.nan, None
        self.phases: list[Phase] = []
        self.scales: list[np.ndarray] = []  # each round's whole raise (:func:`secant_update`, :func:`chord_scale`)
        self.matrices: list[np.ndarray] = []  # the last phase's rounds' Newton matrices
        self.confined = False  # C_H was searched at the located point: the secant corrects along its step alone
        self.released: list[tuple] = []  # the last phase's rounds: their point, gradient and whether the step was cut
        # the last step, the gradient it started from, its floored Hessian and that gradient's noise variance; kept
        # into the next phase where its gradients are comparable (same bounds and basis): the secant's evidence
        self.previous: tuple | None = None
        # the last round's secant evidence: the step before it, the released gradients' change along it, its noise
        self.evidence: tuple | None = None
        # the low end of the last bracket (:func:`chord_scale`): a point, its released gradient and that gradient's
        # noise variance, and the unit direction along which the loss's slope there was negative; kept as the previous
        self.low: tuple | None = None
        # the clients' rows are mapped by change from round basis_from on; theta = basis phi (theta, H held in phi)
        self.change: ChangeOfBasis | None = None
        self.basis, self.basis_from = None, 0
        self.messages: tuple[np.ndarray, np.ndarray] | None = None  # the last gradient release's per-site (values, answered)
        self.joined, self.shift = 0, None  # the last phase's rounds before a re-weighing; the site effects' move

    def reweigh(self, weights: np.ndarray, moved_var: float) -> None:
        """New site weights; the earlier gradients stay evidence, their noise raised by the aggregate's move."""
        self.w, self.joined = weights, len(self.phases[-1].shares)
        if self.previous is not None:
            self.previous = (*self.previous[:3], self.previous[3] + moved_var, self.previous[4])
        if self.low is not None:
            self.low = (*self.low[:2], self.low[2] + moved_var, self.low[3])

    def change_basis(self, change: ChangeOfBasis) -> None:
        """From the next round on, the clients' rows are mapped by ``change`` and the server's state is in phi."""
        basis = change.parameters(self.theta.size)
        self.theta = np.linalg.solve(basis, self.theta)
        self.H, self.H_floored = basis.T @ self.H @ basis, basis.T @ self.H_floored @ basis
        self.change, self.basis, self.basis_from = change, basis, len(self.path) - 1

    def _in_theta(self, value: np.ndarray) -> np.ndarray:
        return value if self.basis is None else self.basis @ value

    def run(self, phase: Phase) -> None:
        """The rounds of ``phase``."""
        schedule, session = self.schedule, self.session
        p = session.clients.n_params
        scales = np.ones(len(phase.shares))
        matrices: list[np.ndarray] = []  # each round's Newton matrix (the secant's and the chord's raises in)
        rebased = self.basis is not None and self.basis_from == len(self.path) - 1
        if self.phases and (rebased or phase.clip != self.phases[-1].clip):
            self.previous = self.low = None  # new bounds or a new basis: the gradients are not comparable
        self.released = []
        for r in range(len(phase.shares)):
            g = self._gradient(phase, r)
            if phase.shares[r, 1] > 0:
                self.H = vec_to_sym(self._hessian(phase, r), p)
                self.lam = float(phase.floors[r])
                self.H_floored = floor_eigenvalues(self.H, self.lam)
            self.evidence = None
            if self.previous is not None:
                step, g_before, behind, var_before, shared = self.previous
                self.evidence = (step, g - g_before, var_before + float(phase.gradient_var[r]), shared)
                raised = secant_scale(*self.evidence[:3], self.H_floored, schedule.secant_noise_sds, behind)
                newton = secant_update(self.H_floored, step, self.evidence[1], raised, self.confined)
                scales[r] = 1.0 if self.confined else raised
            else:
                newton = self.H_floored
            newton_inverse = np.linalg.inv(newton)
            step = schedule.step_size * newton_inverse @ g
            bracket = 1.0 if self.basis is None else self._bracket(g, float(phase.gradient_var[r]), step)
            if bracket > 1.0:  # the update may not carry the iterate back past a chord's root (:func:`chord_scale`)
                scales[r] *= bracket
                newton, newton_inverse, step = bracket * newton, newton_inverse / bracket, step / bracket
            matrices.append(newton)
            length, radius = float(np.linalg.norm(step)), float(schedule.max_step)
            if schedule.curvature.grows_region:  # the loss grows at most quadratically: the region may grow with theta
                radius = max(radius, float(np.linalg.norm(self.theta)))
            taken = _within(step, radius)
            self.shortened = ((float(np.linalg.norm(self._in_theta(step))), float(np.linalg.norm(self._in_theta(taken))))
                              if length > radius else None)
            # the step carries -eta N^-1 xi_r and the next gradient change -xi_r: their product's mean, eta v_r tr N^-1
            shared = schedule.step_size * float(phase.gradient_var[r]) * float(np.trace(newton_inverse))
            shared *= 1.0 if length <= radius else radius / length
            self.previous = (-taken, g, self.H_floored, float(phase.gradient_var[r]), shared)
            self.released.append((self.theta, g, length > radius))
            self.theta = self.theta - taken
            check_iterate(self.theta, "FedIRLS", schedule.step_size)
            self.path.append(self._in_theta(self.theta))
        self.phases.append(phase)
        self.scales.append(scales)
        self.matrices = matrices

    def _bracket(self, g: np.ndarray, var: float, planned: np.ndarray) -> float:
        """The factor by which the planned update shrinks so that it stays above the chord's root of every bracket the
        released gradients resolve (:func:`chord_scale`): the last step's, and the low end kept from an earlier one,
        which moves up to the current point where the slope there is still negative beyond its noise.

        Whitened rounds only: the chord's root bounds the minimum of the loss along the bracket's line, which is the
        optimum's coordinate along u only where the curvature is isotropic. The whitening makes the located point's
        floored Hessian the identity; on the fitting columns a coupled Hessian moves the optimum off the line
        (docs/algorithms/fedirls.md, "The chord: updates that cannot run past the root")."""
        z, lows = self.schedule.secant_noise_sds, []
        if self.previous is not None:
            step, g_before, _, var_before, _ = self.previous
            length = float(np.linalg.norm(step))
            if length > 0:
                lows.append((self.theta - step, g_before, var_before, step / length))
        if self.low is not None:
            lows.append(self.low)
        factor, kept = 1.0, self.low
        for low in lows:
            k, resolved = chord_scale(low, self.theta, g, var, planned, z)
            factor = max(factor, k)
            if resolved == "above":  # a root between the low end and here (the last step's bracket replaces older ones)
                kept = low
                break
            if resolved == "below" and low is self.low:  # the root lies beyond the current point: the low end moves up
                kept = (self.theta, g, var, low[3])
        self.low = kept
        return factor

    def _gradient(self, phase: Phase, r: int) -> np.ndarray:
        """Round r's aggregated gradient: each site's noisy message averaged, or their secure sum."""
        session, w, theta = self.session, self.w, self.theta
        if phase.gradient_specs is not None:
            return secure_mean(session, "secure_gradients", weights=w, spec=phase.gradient_specs[r], theta=theta,
                               clip=phase.clip, sensitivity=w * phase.gradient_sensitivity, stage="irls-gradient")
        values, _, answered = session.ask("gradients", weights=w, theta=theta, clip=phase.clip, mu=phase.mu_gradient[r],
                                          sensitivity=phase.gradient_sensitivity, stage="irls-gradient")
        self.messages = (values, answered)
        return aggregate(w, values, answered)

    def _hessian(self, phase: Phase, r: int) -> np.ndarray:
        """Round r's aggregated ``sym_to_vec`` Hessian, as :meth:`_gradient`."""
        session, w, theta = self.session, self.w, self.theta
        if phase.hessian_specs is not None:
            return secure_mean(session, "secure_hessians", weights=w, spec=phase.hessian_specs[r], theta=theta,
                               hessian_clip=phase.hessian_clip, sensitivity=w * phase.hessian_sensitivity,
                               stage="irls-hessian")
        return session.mean("hessians", weights=w, theta=theta, hessian_clip=phase.hessian_clip,
                            sensitivity=phase.hessian_sensitivity, mu=phase.mu_hessian[r], stage="irls-hessian")

    def result(self, setup: Setup | None) -> Run:
        """The :class:`Run` (``setup``: the bounds of the last phase when they were searched again)."""
        phases = self.phases
        # a Newton matrix raised whole, c Hf (the secant's raise, the chord's): floor c lambda, noise variance c^2 s^2
        # (the secant's correction along a step alone, :func:`secant_update`, keeps the released Hessian's)
        scales = np.concatenate(self.scales)
        newton = self.matrices[-1]  # the matrix of the last step
        hessian_var = np.concatenate([ph.hessian_var for ph in phases]) * scales**2
        eta = float(self.schedule.step_size)
        # a round cut, or whose matrix was raised unlike the last's: its target is not its next iterate
        own = np.array([not np.array_equal(matrix, newton) for matrix in self.matrices])
        weights = self.schedule.combination(phases, np.array([cut for _, _, cut in self.released]) | own)
        estimate, step = self.theta, self.previous[0]
        if weights is not None:  # the precision-weighted Newton targets of the last rounds (IRLSSchedule.combination)
            moves = -eta * np.linalg.solve(newton, np.array([g for _, g, _ in self.released]).T).T
            kept = weights[-len(self.released):]
            step = kept @ moves
            estimate = kept @ np.array([theta for theta, _, _ in self.released]) + step
        last_step = newton_error(step, newton / eta, self.evidence, self.schedule.secant_noise_sds)
        if self.shift is not None:  # the site effects' shift of the re-weighed root, -J^-1 sum (w_i - pi_i) delta_i
            last_step = last_step + np.linalg.solve(newton / eta, np.linalg.solve(newton / eta, self.shift).T)
        gradient_var = np.concatenate([ph.gradient_var for ph in phases])
        noise_model = IRLSNoise(gradient_var, hessian_var, np.concatenate([ph.floors for ph in phases]) * scales, eta,
                                newton, self.basis, self.basis_from, last_step=last_step, combination=weights)
        noise_sd, update_noise_sd, update_noise_sds = _noise(self.schedule.step_size, newton,
                                                             np.concatenate([ph.gradient_sd for ph in phases]), self.basis)
        path = self.path
        if weights is not None:  # the estimate ends the path; its noise and its update's (docs/algorithms/fedirls.md)
            combined, before = float(weights**2 @ gradient_var), float(gradient_var[-2])
            noise_sd = noise_sd * math.sqrt(combined / float(gradient_var[-1]))
            shrink = math.sqrt((combined + (1.0 - 2.0 * float(weights[-2])) * before) / (before + float(gradient_var[-1])))
            update_noise_sd, update_noise_sds = update_noise_sd * shrink, np.append(update_noise_sds[:-1],
                                                                                    update_noise_sds[-1] * shrink)
            path = [*path[:-1], self._in_theta(estimate)]
        hessian = self.H if self.basis is None else np.linalg.solve(self.basis.T, np.linalg.solve(self.basis.T, self.H).T)
        lost = damped(self.H, phases[-1].floors, self.schedule.damped_kept)  # its direction: on the fitting columns
        lost = None if lost is None else (*lost[:2], self._in_theta(lost[2]) / np.linalg.norm(self._in_theta(lost[2])))
        steps = NewtonSteps(float(scales[-1]) * math.sqrt(float(phases[-1].hessian_var[-1])), self.shortened, lost)
        return Run(self._in_theta(estimate), path, len(self.path) - 1, noise_sd=noise_sd,
                   update_noise_sd=update_noise_sd, update_noise_sds=update_noise_sds,
                   hessian=(hessian + hessian.T) / 2, noise_model=noise_model,
                   weights=self.w, setup=setup, settle_from=len(self.path) - 1 - len(phases[-1].shares) - self.joined,
                   basis=self.change, newton=steps)


def damped(H: np.ndarray, floors: np.ndarray, threshold: float) -> tuple[int, float, np.ndarray] | None:
    """Directions along which the floored Newton rounds of a phase kept more than ``threshold`` of their error.

    Along an eigenvector of the released Hessian H with eigenvalue lambda below a round's floor, the floored step
    removes ``lambda / floor`` of the error there (none where lambda <= 0); over the phase's rounds the kept share is
    ``prod_r (1 - max(lambda, 0) / max(lambda, floor_r))`` (post-processing of H and the public floors). Returns
    their number, the largest kept share and the unit eigenvector that kept it (the smallest eigenvalue's), or None.
    """
    vals, vecs = np.linalg.eigh(0.5 * (H + H.T))
    positive = np.maximum(vals, 0.0)[:, None]
    kept = np.prod(1.0 - positive / np.maximum(positive, np.asarray(floors)[None, :]), axis=1)
    if not np.any(kept > threshold):
        return None
    return int(np.sum(kept > threshold)), float(np.max(kept)), vecs[:, int(np.argmax(kept))]


def _noise(step_size: float, H_floored: np.ndarray, gradient_sd: np.ndarray, basis: np.ndarray | None = None
           ) -> tuple[np.ndarray, float, np.ndarray]:
    """Noise sd of the estimate, of the last update and of every update (largest over coordinates of theta).

    The last step adds ``eta H^{-1} xi_R`` (sd ``s_R sqrt(diag(H^{-2}))`` for gradient noise of
    sd s_R per coordinate; with the rounds in phi, ``theta = basis phi``, the step in theta is
    ``eta basis H^{-1} xi_R``); the last update also removes the noise that round R - 1 left. Update r carries
    ``sqrt(s_(r-1)^2 + s_r^2)`` through the same matrix (the last one's: an approximation for the earlier rounds,
    whose rounds' shares, and so their noise, differ).
    """
    M = np.linalg.inv(H_floored) if basis is None else basis @ np.linalg.inv(H_floored)
    scale = step_size * np.sqrt(np.sum(M**2, axis=1))
    pairs = np.sqrt(gradient_sd**2 + np.concatenate([[0.0], gradient_sd[:-1]]) ** 2) * float(np.max(scale))
    return gradient_sd[-1] * scale, float(pairs[-1]), pairs


def _run_exact(schedule: IRLSSchedule, session: Session) -> tuple[Run, np.ndarray, float]:
    """mu = inf: Newton rounds on exact aggregates, the Newton matrix raised by the secant (:func:`secant_scale`, no
    noise) and each step halved until the loss or the gradient norm decreases.

    Returns the :class:`Run`, the rounds' shares (ones) and the last floor."""
    p, clip, hessian_clip, w = session.clients.n_params, schedule.setup.clip, schedule.setup.hessian_clip, schedule.weights
    fresh = schedule.shares[0][:, 1] > 0

    def gradient_and_loss(theta):
        loss = float(session.mean("losses", weights=w, theta=theta, stage="irls-loss")[0])
        g = session.mean("gradients", weights=w, theta=theta, clip=clip, sensitivity=2.0 * clip / session.sizes,
                         mu=math.inf, stage="irls-gradient")
        return g, loss

    theta = session.clients.initial_parameters()
    path = [theta]
    g, f = gradient_and_loss(theta)
    H, lam, n_iter, previous = None, math.nan, 0, None
    sens_h = hessian_sensitivity(hessian_clip, session.sizes)
    for r in range(len(fresh)):
        if fresh[r]:
            H = vec_to_sym(session.mean("hessians", weights=w, theta=theta, hessian_clip=hessian_clip,
                                        sensitivity=sens_h, mu=math.inf, stage="irls-hessian"), p)
            lam = schedule.floor(0.0)
            H_floored = floor_eigenvalues(H, lam)
        scale = 1.0 if previous is None else secant_scale(previous[0], g - previous[1], 0.0, H_floored, 0.0, previous[2])
        step = schedule.step_size * np.linalg.solve(scale * H_floored, g)
        n_iter += 1
        if _negligible(step, theta, schedule.tol):
            path.append(theta - step)
            theta = path[-1]
            break
        accepted = _safeguarded_step(theta, step, g, f, gradient_and_loss, schedule.max_halvings)
        if accepted is None:  # no decrease along the Newton direction: at the optimum up to rounding
            break
        previous = (accepted[0] - theta, g, H_floored)
        theta, g, f = accepted
        path.append(theta)
    noise_model = IRLSNoise(np.zeros(n_iter), np.zeros(n_iter), np.full(n_iter, lam), float(schedule.step_size),
                            H_floored)
    return Run(theta, path, n_iter, hessian=H, noise_model=noise_model, weights=w), np.ones((n_iter, 2)), lam


def _within(step: np.ndarray, radius: float) -> np.ndarray:
    """``step`` shortened to Euclidean norm ``radius`` if it is longer (a trust region)."""
    norm = float(np.linalg.norm(step))
    return step * (radius / norm) if norm > radius else step


def _negligible(step: np.ndarray, theta: np.ndarray, tol: float) -> bool:
    return float(np.max(np.abs(step))) <= tol * (1.0 + float(np.max(np.abs(theta))))


def _safeguarded_step(theta: np.ndarray, step: np.ndarray, g: np.ndarray, f: float, evaluate, max_halvings: int):
    """Non-private step: halve ``step`` (at most ``max_halvings`` times) until, at ``theta - step``, the aggregated
    loss does not increase or the aggregated gradient is shorter (``evaluate(point) -> (gradient, loss)``).

    The Newton direction decreases both the loss and ``||g||^2``; the loss test handles regions
    where the gradient norm is flat (Huber far from the data), the gradient test the clipped
    problem, whose fixed point is not the loss minimiser. Returns the new point, its gradient and
    loss, or None if no halving was accepted.
    """
    g_norm, slack = float(np.linalg.norm(g)), 1e-13 * max(1.0, abs(f))
    for _ in range(max_halvings):
        candidate = theta - step
        if np.all(np.isfinite(candidate)) and float(np.max(np.abs(candidate))) <= DIVERGENCE_NORM:
            g_new, f_new = evaluate(candidate)
            with np.errstate(over="ignore", invalid="ignore"):  # an overshoot's gradient may overflow: a rejection
                if f_new <= f + slack or np.linalg.norm(g_new) < g_norm:
                    return candidate, g_new, f_new
        step = 0.5 * step
    return None
