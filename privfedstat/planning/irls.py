"""The prediction of one planned fit on one design: the fit's stages run on the design's population instead of the
clients (:func:`predict`, used by :class:`~privfedstat.planning.power.StudyPlan`).

The protocol's part is the estimator's own schedule (FedIRLS's
:class:`~privfedstat.algorithms.fedirls.schedule.IRLSSchedule`, built by its ``plan_schedule`` as the fit builds
it): the plan walks its stages (locate, whiten, research, disperse, insure, refine) with the population's noise-free
counterparts of the fit's releases; see :mod:`privfedstat.planning.power` for the approximations.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np

from .._linalg import floor_eigenvalues
from ..algorithms.fedirls.insurance import runs_test
from ..algorithms.fedirls.site_weights import located_noise, null_heterogeneity, planned_tau2, planned_weighing, shift_covariance
from ..exceptions import PrivacyNoiseWarning
from ..families import get_family
from ..federation.clients import RESPONSE
from ..federation.protocol import Setup
from ..fitting.stages import autoclip_bounds, bound_search, count_precision, make_scaler, pending_bounds, plan_budget
from ..fitting.steps import resolve_step_size
from ..inference.config import resolve_inference
from ..inference.core import plan_inference
from ..inference.covariance import original_scale_map, original_scale_origin, weighted_factor
from ..privacy.clipping import grid_quantile_outcomes, private_grid_quantile, search_level
from ..theory._population import Population, make_spec

__all__ = ["Design", "Unplannable", "predict"]

#: results of a private bound search less likely than this are left out of the plan (their mass with them)
LEAST_OUTCOME = 0.05


class Unplannable(ValueError):
    """The planned fit has no estimate to predict (e.g. every row clipped): the setting is out of reach."""


@dataclasses.dataclass(frozen=True)
class Design:
    """The public design guess: covariate sample (with the intercept column), coefficients, family, residual sd."""

    X: np.ndarray
    coef: np.ndarray
    family: str
    noise_sd: float
    names: tuple


def predict(estimator, design: Design, sizes: np.ndarray) -> dict:
    """Per outcome of the refine bound search (one case without it): its probability ``prob``, the sampling and
    privacy variances (original scale) and the effect theta*; and the resolved settings of the fit."""
    mu = float(estimator.mu)
    family = get_family(estimator.family)
    X = design.X
    d, m, N = X.shape[1], sizes.size, int(sizes.sum())
    estimator._validate_params(mu)
    task = plan_inference(estimator.inference, family, m, d, None, bound_search(estimator))
    with warnings.catch_warnings():  # the plan reports the scaling it can do; the fit will warn
        warnings.simplefilter("ignore", PrivacyNoiseWarning)
        plan = plan_budget(estimator, mu, task, n_features=d, n_clients=m, n_samples=N, family=family)
    mean_response, sd = X @ design.coef, design.noise_sd

    def count(j, threshold, center, mu_q, stage):
        if j == RESPONSE:  # the Gaussian law of y given each design row
            from scipy.stats import norm  # here, not at module level: scipy.stats is slow to import

            if center is None:
                return N * float(np.mean(norm.cdf((threshold - mean_response) / sd)))
            return N * float(np.mean(norm.cdf((center + threshold - mean_response) / sd)
                                     - norm.cdf((center - threshold - mean_response) / sd)))
        x = X[:, j] if center is None else np.abs(X[:, j] - center)
        return N * float(np.mean(x <= threshold))

    scaler = make_scaler(estimator, count, N, m, d, plan, family)
    back = None if scaler is None else scaler.coef_to_original
    G, origin = original_scale_map(back, d, 1), original_scale_origin(back, d, 1)
    theta = np.linalg.solve(G, design.coef - origin)
    response_scale = 1.0 if scaler is None else scaler.response_scale
    spec = dataclasses.replace(make_spec(family=family.name, beta=theta), noise_sd=design.noise_sd / response_scale)
    pop = Population.of_covariates(spec, X if scaler is None else scaler.transform_rows(X))
    setup, outcomes = _bounds(estimator, pop, plan, sizes)
    schedule = estimator.plan_schedule(family, np.asarray(sizes, dtype=np.float64), setup, d)
    stages = _PlannedStages(schedule, pop, G, outcomes, mu, sizes)
    schedule.walk(stages)
    pop, G, roots, basis, cases = stages.pop, stages.G, stages.roots, stages.basis, stages.cases
    results = []
    reported = None if resolve_inference(estimator.inference) is None else task.cov_type
    for prob, refine, schedule in cases:
        try:
            results.append((prob, *_case(schedule, pop, refine, mu, sizes, roots, basis, reported)))
        except Unplannable:
            if len(cases) == 1:
                raise
    if not results:
        raise Unplannable(f"at mu = {mu:g} with {m} sites of {int(sizes.min())}-{int(sizes.max())} rows the fit would "
                          "clip nearly every row at every bound its search can choose; a larger mu or more rows per "
                          "site is needed.")
    prob = np.array([r[0] for r in results])
    stack = {key: np.array([G @ r[1][key] @ G.T for r in results]) for key in ("sampling", "privacy")}
    settings = {"mu: scaling": f"{plan.scaling:.3g}", "clip search": f"{plan.clip:.3g}",
                "estimation": f"{plan.estimation:.3g}", "inference": f"{plan.inference:.3g}",
                "B": _outcome_text(prob, [r[2].clip for r in results]),
                "C_H": _outcome_text(prob, [r[2].hessian_clip for r in results]),
                "clipped": _outcome_text(prob, [r[1]["clipped"] for r in results], "{:.1%}"),
                "cov_type": "none" if resolve_inference(estimator.inference) is None else task.cov_type}
    return {"prob": prob / prob.sum(), "sampling": np.diagonal(stack["sampling"], axis1=1, axis2=2),
            "privacy": np.diagonal(stack["privacy"], axis1=1, axis2=2),
            "effect": np.array([G @ r[1]["target"] + origin for r in results]), "settings": settings}


class _PlannedStages:
    """The fit's schedule walked on the design's population (:meth:`IRLSSchedule.walk`): each stage the noise-free
    counterpart of the fit's, ending in the cases of the refine bounds (``(probability, Setup or None, schedule)``).

    locate: the located point is the root of the clipped equation at the first bounds; whiten: the basis from its
    clipped Hessian floored at the last locate round's floor (the population, the located point, the map to the
    original scale and the roots' cache then in phi: one output); research: the distribution of the new search's
    result there; disperse: nothing (the design's law has unit dispersion); insure: each outcome's raised gradient
    bound, and whether the tested raise runs (:func:`~privfedstat.algorithms.fedirls.insurance.runs_test`: its budget
    then leaves the refine rounds; planned without a raise); refine: one case per outcome.
    """

    def __init__(self, schedule, pop: Population, G: np.ndarray, outcomes, mu: float, sizes: np.ndarray) -> None:
        self.schedule, self.pop, self.G, self.outcomes, self.mu, self.sizes = schedule, pop, G, outcomes, mu, sizes
        self.roots: dict = {}  # B -> the root of the clipped equation, its moments and J^-1
        self.located = self.basis = self.parameters = self.hessian = self.released = None
        self.found: list = []
        self.tested: list = []  # per outcome of the search, the schedule with the tested raise's budget decided
        self.cases: list = [(1.0, None, schedule)]

    def exact(self) -> None:
        pass

    rounds = exact

    def locate(self) -> None:
        schedule = self.schedule
        self.located = _root(self.pop, schedule.setup, self.mu, self.sizes, self.roots)[0]
        self.released = np.asarray(self.pop.clipped_hessian(self.located, schedule.setup.hessian_clip), dtype=np.float64)
        self.hessian = floor_eigenvalues(self.released, float(schedule.phase(0).floors[-1]))
        self.schedule = schedule.located_at(self.hessian, self.released)

    def whiten(self) -> None:
        change = self.schedule.whitening(self.hessian)
        self.basis = change.design
        self.parameters = basis = change.parameters(self.schedule.n_params)
        self.schedule = self.schedule.located_at(basis.T @ self.hessian @ basis, basis.T @ self.released @ basis, basis)
        self.pop, self.located = self.pop.in_basis(self.basis), np.linalg.solve(self.basis, self.located)
        self.G, self.roots = self.G @ self.basis, {}

    def research(self) -> None:
        schedule = self.schedule
        self.found = self.outcomes(list(schedule.research), self.located, schedule.search.pilot_quantile,
                                   schedule.mu_research, self.pop)

    def disperse(self) -> None:
        """Nothing: the design's law is the model's, of unit dispersion (:meth:`IRLSSchedule.score_sd` 1)."""

    def insure(self) -> None:
        schedule, tau2 = self.schedule, None  # a fit that re-weighs: the tau^2 it estimates without site effects
        if schedule.reweigh:
            tau2 = null_heterogeneity(self.sizes.astype(np.float64), *located_noise(schedule, self.parameters))
        self.found = [(prob, schedule.insured_bounds(found, tau2=tau2)) for prob, found in self.found]
        newton = self.parameters.T @ self.hessian @ self.parameters  # the located Newton matrix in phi
        self.tested = [schedule.tested(runs_test(schedule, found, newton)) for _, found in self.found]

    def refine(self) -> None:
        self.cases = [(1.0, None, self.schedule)]
        if self.schedule.research:
            self.cases = [(prob, tested.refine_setup(found), tested)
                          for (prob, found), tested in zip(self.found, self.tested or [self.schedule] * len(self.found))]


def _case(schedule, pop: Population, refine: Setup | None, mu: float, sizes: np.ndarray, roots: dict,
          basis: np.ndarray | None = None, cov_type: str | None = "model") -> tuple[dict, Setup]:
    """Sampling and privacy covariances (fitting scale, or the coordinates of the refine rounds' ``basis``, which
    ``pop`` then has), theta* and the clipped share of one choice of the refine bounds (None: the bounds of the
    schedule's first phase), and the final bounds (``mu``: the fit's, for the messages; ``roots``: :func:`_root`'s
    cache; ``cov_type``: the covariance the fit reports, :func:`_reported`)."""
    final = schedule.setup if refine is None else refine
    target, mom, J_inv = _root(pop, final, mu, sizes, roots)
    tau2 = planned_tau2(schedule, refine)
    weights = planned_weighing(schedule, refine, tau2)[0]
    c = weighted_factor(weights, sizes)[0]
    H, M = _reported(pop, target, final, mom, J_inv, cov_type, int(np.sum(sizes)))
    privacy = np.zeros_like(J_inv)
    if schedule.mode != "exact":
        newton = pop.clipped_hessian(target, final.hessian_clip)
        privacy = schedule.planned_noise(newton, refine, basis, tau2).expected_covariance(H)
    if tau2 is not None:  # the site effects' shift that a fit which re-weighs adds to its privacy covariance (T = tau2 I)
        H_inv = np.linalg.inv(H)
        privacy = privacy + H_inv @ shift_covariance(weights, sizes, tau2 * np.eye(J_inv.shape[0])) @ H_inv
    return {"sampling": c * M, "privacy": privacy, "target": target,
            "clipped": pop.clip_fraction(target, final.clip)}, final


def _reported(pop: Population, target: np.ndarray, final: Setup, mom: dict, J_inv: np.ndarray, cov_type: str | None,
              n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The Jacobian H at which the fit's inference linearises its covariance, and M of its sampling part ``c M``.

    ``cov_type`` "model" or "sandwich": H is the mean of the inference's release, the clipped score's Jacobian with
    each row's Hessian clipped at the refine rounds' C_H (the oracle's ``hessians(theta, C_H, B)``: for Poisson rows
    of large mean that clip lowers H below the Jacobian J of the clipped equation, and the reported SEs rise), and M
    is ``phi H^-1`` (phi: a Gaussian's released Pearson dispersion, capped at ``B^2`` per row, over ``N - p``; 1 for
    the others) or ``H^-1 S H^-1``; otherwise (the bootstrap, no inference) the estimate's own variability,
    ``J^-1 S J^-1`` at J."""
    if cov_type not in ("model", "sandwich"):
        return mom["J"], J_inv @ mom["S"] @ J_inv
    H = mom["J"] if math.isnan(final.hessian_clip) else pop.clipped_hessian(target, final.hessian_clip, final.clip)
    H_inv = np.linalg.inv(H)
    if cov_type == "sandwich":
        return H, H_inv @ mom["S"] @ H_inv
    if not pop.family.has_dispersion:
        return H, H_inv
    phi = pop.pearson_dispersion(target, final.clip**2) * n_rows / (n_rows - H.shape[0])
    return H, phi * H_inv


def _outcome_text(prob: np.ndarray, values: list, form: str = "{:.3g}") -> str:
    """``values`` by probability: the single value, or ``"v1 (p1), v2 (p2), ..."`` over the distinct values."""
    share: dict = {}
    for p, v in zip(prob / prob.sum(), values):
        key = form.format(v)
        share[key] = share.get(key, 0.0) + p
    if len(share) == 1:
        return next(iter(share))
    return ", ".join(f"{v} ({p:.0%})" for v, p in sorted(share.items(), key=lambda kv: -kv[1]))


def _bounds(estimator, pop: Population, plan, sizes: np.ndarray) -> tuple[Setup, object]:
    """The clipping bounds the fit would choose on this population (fixed, infinite, or the AutoClip search on
    exact counts; the pilot: noise-free population FedSGD), and the distribution of a later search's result
    ``outcomes(norms, theta, quantile, mu_stage[, population]) -> [(probability, {norm: bound})]``: its count queries' noise
    sends each search to neighbouring grid points (:func:`~privfedstat.privacy.clipping.grid_quantile_outcomes`;
    results below ``LEAST_OUTCOME`` are dropped), and the searches of the norms are independent."""
    bounds, todo, how = pending_bounds(estimator, plan.mu)
    config = bound_search(estimator)
    N, m = float(sizes.sum()), count_precision(estimator, sizes.size, plan.mu)[0]  # m: the noises in a pooled count

    def counts(which, theta, population=pop):
        return lambda t: N * population.share_at_most(which, theta, t)

    def search(norms, theta, quantile, mu_stage):
        mu_query = config.query_budget(mu_stage, len(norms))
        return {which: private_grid_quantile(counts(which, theta), config.grid,
                                             config.target(search_level(quantile, which), N, m, mu_query))
                for which in norms}

    def outcomes(norms, theta, quantile, mu_stage, population=pop):
        mu_query = config.query_budget(mu_stage, len(norms))
        sd = config.count_sd(m, mu_query)
        joint = [(1.0, {})]
        for which in norms:
            target = config.target(search_level(quantile, which), N, m, mu_query)
            found = grid_quantile_outcomes(counts(which, theta, population), config.grid, target, sd,
                                           least=LEAST_OUTCOME)
            joint = [(p * q, {**bound, which: value}) for p, bound in joint for value, q in found.items()
                     if q >= LEAST_OUTCOME]
        return joint

    if how == "paper":
        raise ValueError("clip='paper' reads the raw data (not private) and is not planned; use clip='auto' or a number.")
    if how == "infinite":
        bounds.update(dict.fromkeys(todo, math.inf))
    elif how == "search":

        def pilot(theta0, clip, mu_stage):
            eta = resolve_step_size("auto", pop.family, pop.X.shape[1])
            theta = theta0
            for _ in range(config.pilot_rounds):
                theta = theta - eta * pop.gradient(theta, clip)
            return theta

        bounds.update(autoclip_bounds(config, plan.clip, np.zeros(pop.X.shape[1]),
                                      lambda theta, q, mu_stage: search(todo, theta, q, mu_stage), pilot,
                                      fixed=bounds))
    return Setup(bounds.get("gradient", math.inf), bounds.get("hessian", math.nan), plan.estimation), outcomes


def _root(pop: Population, setup: Setup, mu: float, sizes: np.ndarray, roots: dict):
    """The root of the clipped estimating equation at ``setup``'s B, its moments and ``J^-1`` (cached in ``roots`` by
    B); Unplannable if none."""
    if setup.clip not in roots:
        B = None if math.isinf(setup.clip) else setup.clip
        try:
            target = pop.root(B)
            mom = pop.moments(target, B)
            roots[setup.clip] = target, mom, np.linalg.inv(mom["J"])
        except np.linalg.LinAlgError:
            raise Unplannable(f"at mu = {mu:g} with {sizes.size} sites of {int(sizes.min())}-{int(sizes.max())} rows "
                              f"the fit would clip nearly every row (B = {setup.clip:.3g}): its estimating equation has "
                              "no root on this design; a larger mu or more rows per site is needed.") from None
    return roots[setup.clip]
