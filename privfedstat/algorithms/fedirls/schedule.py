"""FedIRLS's policy as one object: the run mode, the phases and their budget shares, the rules between them.

:class:`IRLSSchedule` is built once per fit (:meth:`IRLSSchedule.of`) from the estimator's parameters
and the public settings the fit chose before its rounds (sizes, weights, bounds, estimation budget);
the fit (:mod:`.rounds`) and :func:`~privfedstat.planning.power.plan_study` both walk its
:attr:`~IRLSSchedule.stages`, and every phase's releases (:class:`Phase`) are derived from it. The
derivation of the split and the measurements behind each constant: ``docs/algorithms/fedirls.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..._linalg import floor_eigenvalues
from ...federation.protocol import ChangeOfBasis, Setup, parameter_basis
from ...federation.secure import least_round_mu, secure_count, verb_spec
from ...federation.server import resolve_participation
from ...fitting.stages import bound_search, count_precision, pending_bounds
from ...inference.config import critical_value
from ...inference.core import DISPERSION_SHARE
from ...privacy.calibration import aggregated_noise_sd, auto_budget_split, calibrated_sigma, hessian_sensitivity, pooled_hessians
from ...privacy.clipping import AutoClip
from ...privacy.secure_noise import SkellamSpec
from ...theory.noise import IRLSNoise
from .insurance import blind_raise
from .refine_split import derived_refine_split
from .site_weights import planned_weighing
from .whitening import reference_class, whitening

__all__ = ["IRLSSchedule", "CurvatureRules", "CURVATURE_RULES", "Phase", "curvature_class", "default_search"]


def _table(rows: list[list[float]]) -> np.ndarray:
    split = np.array(rows)
    split.setflags(write=False)
    return split


@dataclass(frozen=True, eq=False)
class CurvatureRules:
    """The choices that differ between families of bounded curvature (a loss growing at most quadratically) and of
    unbounded curvature (Poisson); one row of :data:`CURVATURE_RULES`.

    Attributes
    ----------
    refine_split : ndarray of shape (R, 2)
        Shares of what the locate rounds and the new search leave, per refine round (gradient, Hessian): the first
        round's and the combined gradients' proportions; the combined rounds' Hessian share is derived after the locate
        rounds (:meth:`IRLSSchedule.refine_shares`), the table's where the derivation's premise fails.
    grows_region : bool
        The trust region grows with the iterate (``max(max_step, ||theta||)``).
    hessian_quantile : float or None
        The quantile of the locate rounds' Hessian bound with ``clip="auto"`` (None: the gradient's).
    """

    refine_split: np.ndarray
    grows_region: bool
    hessian_quantile: float | None


#: bounded: two Hessians, the last one reused by the last gradient (45% of the rest); unbounded: four rounds, two
#: fresh Hessians, the third gradient twice the first two's share; the second Hessian's share is derived after the
#: locate rounds (docs/algorithms/fedirls.md, "Schedule" and "The refine Hessian's share, derived")
CURVATURE_RULES = {
    "bounded": CurvatureRules(_table([[0.1, 0.15], [0.15, 0.15], [0.45, 0.0]]), True, None),
    "unbounded": CurvatureRules(_table([[0.05, 0.2], [0.05, 0.2], [0.1, 0.0], [0.4, 0.0]]), False,
                                AutoClip.pilot_quantile),
}


def curvature_class(family) -> str:
    """``"bounded"`` or ``"unbounded"``: the family's key in :data:`CURVATURE_RULES`."""
    return "bounded" if math.isfinite(family.max_curvature) else "unbounded"


def default_search(family) -> AutoClip:
    """The bound search of ``clip="auto"`` (:attr:`FedIRLS._default_search`): the bounds at theta^(0), the Hessian's
    at the curvature class's quantile, the coarse queries leaning by :attr:`IRLSSchedule.coarse_lean`."""
    quantile = CURVATURE_RULES[curvature_class(family)].hessian_quantile
    if quantile is None:
        return AutoClip(coarse_lean=IRLSSchedule.coarse_lean)
    return AutoClip(hessian_quantile=quantile, coarse_lean=IRLSSchedule.coarse_lean)


@dataclass(frozen=True)
class Phase:
    """The releases of one phase of private rounds, public and fixed before its first round.

    Per round: the shares of the estimation mu^2 (gradient, Hessian), their budgets, and the
    floor, diagonal noise variance of the Hessian the step uses (a round with Hessian share 0
    repeats the last released one's) and the aggregated gradient noise's variance and sd, as
    :class:`~privfedstat.theory.noise.IRLSNoise` takes them; the bounds B and C_H and the clients'
    sensitivities ``2 B / n_i`` and ``sqrt(2) C_H / n_i``. Under secure aggregation, each round's
    arithmetic (:class:`~privfedstat.privacy.secure_noise.SkellamSpec`; None for a round without a
    Hessian), and the variances are those of the summed noise and rounding, every site surviving.
    """

    shares: np.ndarray
    clip: float
    hessian_clip: float
    gradient_sensitivity: np.ndarray
    hessian_sensitivity: np.ndarray
    mu_gradient: np.ndarray
    mu_hessian: np.ndarray
    floors: np.ndarray
    hessian_var: np.ndarray
    gradient_var: np.ndarray
    gradient_sd: np.ndarray
    gradient_specs: tuple[SkellamSpec, ...] | None = None
    hessian_specs: tuple[SkellamSpec | None, ...] | None = None


@dataclass(frozen=True, eq=False)
class IRLSSchedule:
    """One FedIRLS fit's schedule: what runs, in which order, on which shares of the budget, by which rules.

    Attributes
    ----------
    mode : {"exact", "derived", "explicit", "phased"}
        mu = inf (exact aggregates, safeguarded steps); one phase on the derived split (an int ``n_rounds``);
        one phase on the user's ``budget_split``; locate + refine (``n_rounds="auto"``, ``budget_split="auto"``).
    stages : tuple of str
        The stages in order, walked by the fit and by the plan: ``exact``, ``rounds`` (one phase), or ``locate``,
        [``whiten``], [``research``], [``disperse``], [``insure``], ``refine``.
    shares : tuple of ndarray of shape (R_k, 2)
        Per phase the shares of the estimation mu^2 (gradient, Hessian); mode exact: ones, or the user's split
        (its zero Hessian shares reuse the last Hessian), over the cap on rounds.
    research : tuple of str
        The norms whose bounds are searched again at the located point (those the fit chose by a private search).
    mu_research : float
        That search's budget, ``research_share`` of the estimation mu^2 (0 without it).
    mu_dispersion : float
        The budget of the Pearson dispersion released at the located point (stage ``disperse``: a family whose counts
        can be overdispersed, :attr:`~privfedstat.families.base.Family.overdispersion`, with the insurance), the
        inference's ``DISPERSION_SHARE`` of the new search's share of the estimation mu^2 (0 without it).
    mu_insurance : float
        The budget of the tested raise's clipped excess at the located point (stage ``insure``,
        :func:`.insurance.tested_raise`), ``insurance_share`` of the estimation mu^2, taken from the refine phase's
        shares where the test runs (:meth:`tested`); 0 without whitened rounds or where it does not run.
    curvature : CurvatureRules
        The family's row of :data:`CURVATURE_RULES`.
    search : AutoClip
        The configuration of the bound searches (the new search's level is its ``pilot_quantile``, its grid the
        insurance's).
    family : Family
    sizes, weights : ndarray of shape (n_clients,)
        n_i and w_i (public).
    setup : Setup
        The bounds of the first phase and the estimation mu.
    n_params : int
    step_size, max_step : float
        eta and the trust region's radius (estimator parameters).
    hessian_floor : float or None
        A fixed eigenvalue floor; None: ``floor_noise_sds`` noise sds (``"auto"``).
    tol : float
        With mu = inf: the rounds stop when ``max|step| <= tol (1 + max|theta|)``.
    max_rounds_nonprivate : int
        The cap on rounds with mu = inf and ``n_rounds="auto"``, which stop when the step is below ``tol`` (Newton
        needs far fewer where it converges).
    locate_rounds : int
        Rounds of the locate phase, from theta^(0) with the bounds chosen there; chosen on the tuning half of
        ``bench_natural_sites.py`` and confirmed on the validation half, as the two shares below (the planned variance
        cannot price bringing theta into range: docs/algorithms/fedirls.md, "Schedule shares chosen on the tuning half").
    locate_share : float
        Share of the estimation mu^2 of all locate rounds together, equal, gradient and Hessian halves (same).
    research_share : float
        Share of the new bound search at the located point, whose norms are the ones the refine rounds clip (same);
        under secure aggregation ``1 / m`` of it, the same count noise in rows
        (:func:`~privfedstat.fitting.stages.count_precision`), the rest to the refine rounds.
    floor_noise_sds : float
        The eigenvalue floor in sds of a noisy eigenvalue: lower floors blew up, higher ones damp the steps on
        ill-conditioned designs (measured: docs/algorithms/fedirls.md, "Eigenvalue floor").
    damped_kept : float
        A direction whose floored steps kept more than this share of its error over the last phase is reported as
        damped, not an optimum (benchmarks/RESULTS.md, section "Real data with natural sites").
    secant_noise_sds : float
        The gradients' change along the last step counts as curvature beyond this many sds of its noise: the one-sided
        critical value ``z_(1 - DIAGNOSTIC_ALPHA)`` = 3.09 (the slope's noise is one normal; a false raise, 0.1% a round
        under the noise model, only shortens one step; :func:`.secant.secant_scale`, docs/guide/constants.md); the same
        margin decides where the slope it measures shows an error of the last Newton matrix (:func:`.secant.newton_error`).
    coarse_lean : float
        ``AutoClip.coarse_lean`` of ``clip="auto"``: a wrong upward decision of the coarse queries sends the whitened
        bound far too high (benchmarks/RESULTS.md, section "FedIRLS whitened refine rounds").
    insurance_sd : float
        The whitened refine rounds' gradient bound is raised while the estimate's gradient noise sd per coordinate stays
        at most ``insurance_sd s / sqrt(N)``, s one row's score sd (:meth:`score_sd`), with per-site noise (under
        secure aggregation too): insurance against a clipping bias the search's counts cannot resolve
        (:meth:`insured_bounds`; benchmarks/RESULTS.md, section "Response location and the refine bound's insurance").
    insurance_steps : int
        At most this many grid points (same) blindly; beyond them only where the tested raise's release resolves a
        displacement (:func:`.insurance.tested_raise`).
    insurance_share : float
        The tested raise's share of the estimation mu^2 (chosen on the tuning half of ``bench_natural_sites.py`` and
        confirmed on the validation half: benchmarks/RESULTS.md, "The refine bound raised by a released test").
    dispersion_sds : float
        The released dispersion counts in the insurance's unit at its lower confidence bound, this many noise sds
        below it (``z_(1 - DIAGNOSTIC_ALPHA)``; :meth:`score_sd`).
    max_halvings : int
        Step halvings a mu = inf round tries before it gives up on decreasing the gradient norm (at the optimum up
        to rounding).
    reweigh : bool
        The refine rounds after the first re-weigh the sites by :mod:`.site_weights` (``weights="optimal"``, sites
        of unequal size, local aggregation, whitened rounds, a family without a scale); otherwise :attr:`weights`
        throughout.
    located : tuple of float or None
        After the locate rounds (:meth:`located_at`): ``(T_a, tr(N^-1), tr(N^-2), lambda_min)``, the located point's
        planned error in the sampling metric, the traces of the refine rounds' Newton matrix N there and the smallest
        eigenvalue of its release before the floor, from which the refine phase's Hessian share is derived
        (:meth:`refine_shares`); None: :attr:`shares` as built (the curvature class's table).
    """

    mode: str
    stages: tuple[str, ...]
    shares: tuple[np.ndarray, ...]
    research: tuple[str, ...]
    mu_research: float
    mu_dispersion: float
    mu_insurance: float
    curvature: CurvatureRules
    search: AutoClip
    family: object
    sizes: np.ndarray
    weights: np.ndarray
    setup: Setup
    n_params: int
    step_size: float
    max_step: float
    hessian_floor: float | None
    tol: float
    max_rounds_nonprivate: int = 100
    locate_rounds: int = 4
    locate_share: float = 0.2
    research_share: float = 0.05
    floor_noise_sds: float = 3.0
    damped_kept: float = 0.8
    secant_noise_sds: float = critical_value(sides=1)
    coarse_lean: float = 0.5
    insurance_sd: float = 0.4
    insurance_steps: int = 3
    insurance_share: float = 0.05
    dispersion_sds: float = critical_value(sides=1)
    max_halvings: int = 60
    min_surviving: int | None = None
    reweigh: bool = False
    located: tuple[float, float, float, float] | None = None

    @classmethod
    def of(cls, estimator, family, sizes: np.ndarray, weights: np.ndarray, setup: Setup, n_params: int) -> IRLSSchedule:
        """The schedule of a fit of ``estimator`` (its parameters checked) with these public settings: the one
        builder, called once by the fit and once by the plan of a design."""
        rules = CURVATURE_RULES[curvature_class(family)]
        mu, split = setup.mu, estimator.budget_split
        explicit = None if isinstance(split, str) else estimator._explicit_split()
        research, mu_research, mu_dispersion, mu_insurance = (), 0.0, 0.0, 0.0
        if math.isinf(mu):  # every round fresh, or the user's split's Hessian shares (a cap: the rounds stop at tol)
            cap = int(estimator.n_rounds) if estimator.n_rounds != "auto" else cls.max_rounds_nonprivate
            mode, stages, shares = "exact", ("exact",), (np.ones((cap, 2)) if explicit is None else explicit,)
        elif explicit is not None:
            mode, stages, shares = "explicit", ("rounds",), (explicit,)
        elif estimator.n_rounds != "auto":
            beta = _beta(family, sizes, weights, setup.hessian_clip, mu, n_params)
            mode, stages, shares = "derived", ("rounds",), (auto_budget_split(int(estimator.n_rounds), beta),)
        else:
            mode = "phased"
            _, todo, how = pending_bounds(estimator, mu)
            share = cls.research_share * count_precision(estimator, len(sizes), mu)[1] ** 2  # 1 / m of it if secure
            if how == "search" and todo:
                research, mu_research = tuple(todo), mu * math.sqrt(share)
            whiten = set(research) == set(estimator._norms)  # a bound the user fixed keeps its meaning on the columns
            disperse = whiten and family.overdispersion  # the insurance's unit: a count's dispersion (score_sd)
            share_d = DISPERSION_SHARE * share if disperse else 0.0
            mu_dispersion = mu * math.sqrt(share_d)
            mu_insurance = mu * math.sqrt(cls.insurance_share) if whiten else 0.0  # from the refine's where it runs
            locate = np.full((cls.locate_rounds, 2), cls.locate_share / (2 * cls.locate_rounds))
            left = 1.0 - cls.locate_share - (share if research else 0.0) - share_d
            shares = (locate, left * rules.refine_split)
            stages = ("locate", *(("whiten",) if whiten else ()), *(("research",) if research else ()),
                      *(("disperse",) if disperse else ()), *(("insure",) if whiten else ()), "refine")
        floor = None if estimator.hessian_floor == "auto" else float(estimator.hessian_floor)
        secure = None if getattr(estimator, "aggregation", "local") == "local" or math.isinf(mu) else \
            secure_count(estimator.min_surviving, len(sizes), mu,
                         resolve_participation(getattr(estimator, "participation", None), len(sizes)))
        if secure is not None and mode == "derived":  # a share a secure sum cannot serve joins the next (docs: Schedule)
            least = least_round_mu("secure_hessians", n_params * (n_params + 1) // 2) / mu
            shares = (pooled_hessians(shares[0], least * least),)
        # weights="optimal": the refine rounds re-weigh sites of unequal size (site_weights), where the per-site
        # messages are seen (local aggregation) and the whitened score's covariance is its Hessian times a released
        # dispersion (1, or a count's: stage disperse; a family with a scale releases none before the refine rounds)
        reweigh = (isinstance(estimator.weights, str) and estimator.weights == "optimal" and mode == "phased"
                   and "whiten" in stages and secure is None and not family.has_dispersion and bool(np.ptp(sizes) > 0))
        return cls(mode, stages, shares, research, mu_research, mu_dispersion, mu_insurance, rules, bound_search(estimator),
                   family, sizes, weights, setup, n_params, estimator.step_size, estimator.max_step, floor, estimator.tol,
                   min_surviving=secure, reweigh=reweigh)

    # ------------------------------------------------------------------ derived
    def floor(self, noise_sd: float) -> float:
        """Eigenvalue floor lambda for a Hessian whose averaged noise has diagonal sd ``noise_sd``: the fixed one,
        or ``floor_noise_sds`` sds and at least ``1e-8 ell''(0)``."""
        if self.hessian_floor is not None:
            return self.hessian_floor
        tiny = 1e-8 * float(self.family.curvature_at_zero)
        return max(tiny, self.floor_noise_sds * noise_sd)

    def located_at(self, newton_matrix: np.ndarray, released: np.ndarray, basis: np.ndarray | None = None
                   ) -> IRLSSchedule:
        """This schedule once the locate rounds ended with the floored Hessian ``newton_matrix`` and its release before
        the floor ``released``, in the refine rounds' coordinates (``theta = basis phi``; None: the fitting columns):
        the refine phase's Hessian share is then derived (:attr:`located`; post-processing of released values and the
        public schedule). The located point's planned error is the locate phase's noise model (:class:`IRLSNoise`) at
        that Hessian on the fitting columns, Hf, as a trace in the sampling metric ``T_a = tr(Hf C_a)`` (invariant
        under the whitening)."""
        if self.mode != "phased":
            return self
        P = np.eye(newton_matrix.shape[0]) if basis is None else basis
        hessian = np.linalg.solve(P.T, np.linalg.solve(P.T, newton_matrix).T)  # P^-T N P^-1
        located = self.phase(0)
        C = IRLSNoise(located.gradient_var, located.hessian_var, located.floors, float(self.step_size),
                      hessian).covariance(hessian)
        inverse = np.linalg.inv(newton_matrix)
        return replace(self, located=(float(np.trace(hessian @ C)), float(np.trace(inverse)),
                                      float(np.trace(inverse @ inverse)), float(np.linalg.eigvalsh(released)[0])))

    def refine_shares(self, bounds: Setup | None = None) -> np.ndarray:
        """The refine phase's shares with ``bounds``: :attr:`shares`' last row, its combined rounds' Hessian share
        derived where :attr:`located` is known (:func:`.refine_split.derived_refine_split`: gamma and rho from the
        table's releases with these bounds, in the refine rounds' coordinates) and the derivation's premise holds:
        the table's eigenvalue floor of that Hessian below the located release's smallest eigenvalue, the derived
        share at least the one whose floor reaches it (docs/algorithms/fedirls.md, "Schedule")."""
        table = self.shares[-1]
        if self.located is None:
            return table
        T_a, t1, t2, smallest = self.located
        ph = self._phase(table, self.setup if bounds is None else bounds)
        fresh = np.flatnonzero(table[:, 1] > 0)
        f, floor = int(fresh[-1]), float(ph.floors[fresh[-1]])
        if not floor < smallest:  # the floor, not the noise, sets the steps: outside the expansion
            return table
        gamma = float(ph.gradient_var[0] * table[0, 0]) * t1
        rho = float(ph.hessian_var[f] * table[f, 1]) * (t1**2 + t2) / (2.0 * self.n_params)
        least = 0.0 if self.hessian_floor is not None else float(table[f, 1]) * (floor / smallest) ** 2  # floor ~ h^-1/2
        return derived_refine_split(table, gamma, rho, T_a, least)

    def phase(self, k: int, bounds: Setup | None = None) -> Phase:
        """The releases of phase ``k`` with ``bounds`` (default: the first phase's, :attr:`setup`); the refine phase
        on :meth:`refine_shares`."""
        setup = self.setup if bounds is None else bounds
        refine = self.mode == "phased" and k == len(self.shares) - 1
        return self._phase(self.refine_shares(setup) if refine else self.shares[k], setup)

    def _phase(self, shares: np.ndarray, setup: Setup) -> Phase:
        sizes, w = self.sizes, self.weights
        sens_g, sens_h = 2.0 * setup.clip / sizes, hessian_sensitivity(setup.hessian_clip, sizes)
        mu_g, mu_h = setup.mu * np.sqrt(shares[:, 0]), setup.mu * np.sqrt(shares[:, 1])
        R = len(shares)
        floors, hessian_var = np.empty(R), np.empty(R)
        lam = var = math.nan
        for r in range(R):
            if shares[r, 1] > 0:
                lam = self.floor(aggregated_noise_sd(sens_h, mu_h[r], w))
                var = float(np.sum((w * calibrated_sigma(sens_h, mu_h[r])) ** 2))
            floors[r], hessian_var[r] = lam, var
        gradient_var = np.array([float(np.sum((w * calibrated_sigma(sens_g, mu_g[r])) ** 2)) for r in range(R)])
        gradient_sd = np.array([aggregated_noise_sd(sens_g, mu_g[r], w) for r in range(R)])
        phase = Phase(shares, setup.clip, setup.hessian_clip, sens_g, sens_h, mu_g, mu_h, floors, hessian_var,
                      gradient_var, gradient_sd)
        return phase if self.min_surviving is None else self._secure(phase)

    def _secure(self, phase: Phase) -> Phase:
        """``phase`` under secure aggregation: each round's specs, and the summed noise's variances and floors."""
        w, m, k, p, n = self.weights, self.sizes.size, self.min_surviving, self.n_params, int(np.sum(self.sizes))
        g_specs = tuple(verb_spec("secure_gradients", float(np.max(w * phase.gradient_sensitivity)), float(np.max(w))
                                  * phase.clip, p, float(mu), m, k, n) for mu in phase.mu_gradient)
        h_specs = tuple(verb_spec("secure_hessians", float(np.max(w * phase.hessian_sensitivity)), float(np.max(w))
                                  * phase.hessian_clip, p * (p + 1) // 2, float(mu), m, k, n, self.family.n_outputs)
                        if share > 0 else None for mu, share in zip(phase.mu_hessian, phase.shares[:, 1]))
        floors, hessian_var = phase.floors.copy(), phase.hessian_var.copy()
        for r, spec in enumerate(h_specs):
            if spec is not None:
                hessian_var[r] = spec.variance(m)
                floors[r] = self.floor(math.sqrt(hessian_var[r]))
            elif r > 0:
                floors[r], hessian_var[r] = floors[r - 1], hessian_var[r - 1]
        gradient_var = np.array([spec.variance(m) for spec in g_specs])
        return replace(phase, floors=floors, hessian_var=hessian_var, gradient_var=gradient_var,
                       gradient_sd=np.sqrt(gradient_var), gradient_specs=g_specs, hessian_specs=h_specs)

    def phases(self, refine: Setup | None = None) -> list[Phase]:
        """Every phase's releases, the refine phase with the bounds ``refine`` (default :attr:`setup`'s)."""
        return [self.phase(k, refine if k else None) for k in range(len(self.shares))]

    def whitening(self, H_floored: np.ndarray) -> ChangeOfBasis:
        """The map of the rows of the refine rounds and their reference class, from the last locate round's floored
        Hessian (:func:`.whitening.whitening`, :func:`.whitening.reference_class`; post-processing)."""
        reference = reference_class(H_floored, self.family.n_outputs)
        return ChangeOfBasis(whitening(H_floored, self.family.n_outputs, reference), reference)

    def refine_setup(self, found: dict[str, float]) -> Setup:
        """The refine rounds' bounds: those ``found`` by the new search, the first phase's for the others."""
        return Setup(found.get("gradient", self.setup.clip), found.get("hessian", self.setup.hessian_clip), self.setup.mu)

    def score_sd(self, dispersion: tuple[float, float] | None) -> float:
        """The sd of one row's score per whitened coordinate, the insurance's unit: 1 for a family of unit dispersion
        (the whitened Fisher information is the identity), ``sqrt(phi)`` for counts of dispersion phi (their score's
        variance is phi times the information), phi the released ``dispersion`` ``(phi, sd)`` at its lower confidence
        bound ``phi - dispersion_sds sd``, at least 1 (post-processing; docs/algorithms/fedirls.md, "Insurance of the
        refine bound")."""
        if dispersion is None:
            return 1.0
        phi, sd = dispersion
        return math.sqrt(max(1.0, phi - self.dispersion_sds * sd))

    def tested(self, runs: bool) -> IRLSSchedule:
        """This schedule once the tested raise is decided: where it ``runs``, :attr:`mu_insurance`^2 taken from the refine
        phase's shares (their proportions kept); otherwise :attr:`mu_insurance` 0 (post-processing: public values)."""
        if not runs:
            return replace(self, mu_insurance=0.0)
        left = float(np.sum(self.shares[-1]))  # the refine phase's share of the estimation mu^2
        taken = (self.mu_insurance / self.setup.mu) ** 2
        return replace(self, shares=(*self.shares[:-1], self.shares[-1] * (1.0 - taken / left)))

    def insured_bounds(self, found: dict[str, float], dispersion: tuple[float, float] | None = None,
                       tau2: float | None = None) -> dict[str, float]:
        """The whitened refine rounds' bounds before the test: ``found`` raised by the noise ceiling
        (:func:`.insurance.blind_raise`; post-processing of the released bound and dispersion)."""
        return blind_raise(self, found, dispersion, tau2)

    def combination(self, phases: list[Phase], apart: np.ndarray | None = None) -> np.ndarray | None:
        """Weights w_r of the rounds' Newton targets ``t_r = theta_r - eta N^-1 g_r`` in the estimate ``sum_r w_r t_r``
        (N: the last round's Newton matrix; public: post-processing of the schedule), or None: the last iterate.

        Phased fits only: the refine rounds from the last fresh Hessian on (same bounds, basis and Newton matrix, so
        ``t_r = theta_(r+1)``), each weighted by its gradient's precision ``1 / v_r``, the generalised least squares
        estimate of a common root where ``N = J`` (the targets' errors ``-eta N^-1 xi_r`` are then independent).
        ``apart``: the phase's rounds whose step was not the last matrix's (cut by the trust region, or raised by the
        secant or the chord by another factor than the last round's: their target lies where the step was kept from
        going), left out; where the last one was cut, the last iterate alone (docs/algorithms/fedirls.md, "Combined
        estimate").
        """
        if self.mode != "phased":
            return None
        last = phases[-1]
        fresh = np.flatnonzero(last.shares[:, 1] > 0)
        precision = np.zeros(len(last.shares))
        precision[int(fresh[-1]):] = 1.0 / last.gradient_var[int(fresh[-1]):]
        if apart is not None:
            if apart[-1]:
                return None
            precision[apart] = 0.0
        before = np.zeros(sum(len(ph.shares) for ph in phases[:-1]))
        return np.concatenate([before, precision / np.sum(precision)])

    def combined_sd(self, phases: list[Phase]) -> float:
        """The planned gradient noise sd per coordinate that the estimate carries: ``sqrt(sum_r w_r^2 v_r)`` over
        :meth:`combination`'s weights (the last gradient's sd where the estimate is the last iterate)."""
        weights = self.combination(phases)
        if weights is None:
            return float(phases[-1].gradient_sd[-1])
        return math.sqrt(float(np.sum(weights**2 * np.concatenate([ph.gradient_var for ph in phases]))))

    def planned_noise(self, newton_matrix: np.ndarray, refine: Setup | None = None, basis: np.ndarray | None = None,
                      tau2: float | None = None) -> IRLSNoise:
        """The privacy-noise model a fit on this schedule reports, before any data are seen.

        A fit's :class:`~privfedstat.theory.noise.IRLSNoise` is a function of the schedule's public quantities and of the
        floored Hessian the last round releases; here that Hessian is ``newton_matrix`` (the noise-free Newton matrix of
        a planned design, on the fitting scale) floored at the last round's floor; every round is assumed to run.
        ``refine``: the refine phase's bounds (default :attr:`setup`'s); ``basis``: the map of the rows in the refine
        rounds (:meth:`whitening`), in whose coordinates phi ``newton_matrix``, ``refine``'s bounds and the model's H
        and covariance then are (:meth:`IRLSNoise.in_basis`); ``tau2``: the site effects' variance for a fit that
        re-weighs (:func:`.site_weights.planned_weighing`; None: the schedule's weights)."""
        phases = planned_weighing(self, refine, tau2)[1]
        last = floor_eigenvalues(np.asarray(newton_matrix, dtype=np.float64), float(phases[-1].floors[-1]))
        rounds = (np.concatenate([ph.gradient_var for ph in phases]), np.concatenate([ph.hessian_var for ph in phases]),
                  np.concatenate([ph.floors for ph in phases]), float(self.step_size), last)
        combination = self.combination(phases)
        if basis is None:
            return IRLSNoise(*rounds, combination=combination)
        return IRLSNoise(*rounds, parameter_basis(basis, newton_matrix.shape[0]), len(phases[0].shares),
                         combination=combination).in_basis()

    def walk(self, handler) -> None:
        """Call ``handler``'s method of each stage's name, in order (the fit's rounds; the plan of a design)."""
        for stage in self.stages:
            getattr(handler, stage)()


def _beta(family, sizes: np.ndarray, w: np.ndarray, hessian_clip: float, mu: float, p: int) -> float:
    """beta of the budget-split derivation for Hessian bound C_H, budget ``mu`` and p parameters (public;
    docs/algorithms/fedirls.md, "Budget split of one phase")."""
    c0 = float(family.curvature_at_zero)
    sens_h = hessian_sensitivity(hessian_clip, sizes)
    return (p + 1) / 2 * float(np.sum((w * sens_h) ** 2)) * (2.0 / c0) ** 2 / mu**2
