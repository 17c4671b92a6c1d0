"""The convergence verdict from the score at the returned point (derivations: docs/guide/convergence.md).

A fit has converged when the estimating equation it solves, ``sum_i w_i mean_j clip_B(g_j(theta)) = 0``, holds
at the point it returns up to what its own noise explains. With mu = inf the server evaluates the size-weighted
gradient g and Hessian H exactly (:func:`~privfedstat.fitting.diagnostics.exact_score`); with finite mu and
inference on, the inference stage releases the clipped mean gradient at the estimate once more, with
``SCORE_SHARE`` of its budget (:func:`release_score`, stage ``"inference-score-test"``, accounted in the ledger).
:func:`judge` then measures the Newton distance ``delta = H^-1 g`` to the root against the noise it carries: the
release's own (``s^2 H^-2``) and the protocol's privacy noise in the estimate (the inference's ``cov_privacy``: a
converged private estimate sits that far from the root), a chi-square statistic on p degrees of freedom, and
against the intervals' standard errors (a distance below ``TOL_SE`` of them keeps a 95% interval's coverage at
93% or more; a coefficient whose standard error is withheld, not identified by the released Hessian, has no such
distance, so a rejection stands). Two path diagnostics come with it: whether a gradient protocol's steps still
contract at the released curvature (a step with ``eta lambda_max > 2`` cannot settle, whatever the score says:
:func:`unstable`), and whether the curvature has vanished in every direction (:func:`_vanished`: divergence where the
score released there points along the path's travel beyond its noise, any protocol, or where a gradient step exceeds
what the public curvature bound shows stable and could not be stable at the start,
:mod:`~privfedstat.fitting.stability`; not converged where it only exceeds the former). The mu = inf verdict is
:mod:`~privfedstat.fitting.exact_verdict`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .._warn import warn
from ..exceptions import ConvergenceWarning, DivergenceError
from ..federation.protocol import Run, Setup
from ..federation.queries import private_mean
from ..federation.session import Session
from ..inference.config import DIAGNOSTIC_ALPHA, critical_value, tolerated_bias
from .stability import columns, gradient_steps, stable_step, start_unstable

__all__ = ["SCORE_SHARE", "TOL_SE", "Score", "Verdict", "release_score", "judge", "unstable", "contracts", "remedy",
           "divergence", "review_score", "scored", "released_sd", "noise_eigenvalue", "score_spent", "along_last_update"]

#: share of the inference budget mu_inf^2 spent on the score at the estimate (the others: clipped count 5%,
#: dispersion 5%, Hessian-bound search 10%); at n_i = 200, 10 sites, mu = 2 its noise sd is about twice the score's
#: sampling sd, which resolves a distance of about 4 sampling SEs (docs/guide/convergence.md)
SCORE_SHARE = 0.1
#: a distance to the root below this many standard errors counts as converged whatever the test says: the bias b
#: that lowers a 95% normal interval's coverage to 93% (the lower end of the package's coverage target, 93-97%),
#: Phi(1.96 - b) - Phi(-1.96 - b) = 0.93 (b = 0.416; :func:`~privfedstat.inference.config.tolerated_bias`)
TOL_SE = tolerated_bias(0.05)


def noise_eigenvalue(p: int, alpha: float = DIAGNOSTIC_ALPHA) -> float:
    """An upper bound, in noise sds s, on the ``1 - alpha`` quantile of the largest eigenvalue of a released
    Hessian's noise Xi (p x p, symmetric, ``sym_to_vec(Xi)`` iid N(0, s^2): sd s on the diagonal, s / sqrt(2) off
    it): ``sqrt(2) E||g_p|| + z_(1 - alpha)``, g_p standard normal in R^p (docs/guide/constants.md).

    ``Xi = s (W + W^T) / 2`` with W iid N(0, 1), so lambda_max(Xi) is convex and s-Lipschitz in W; its mean is at
    most ``s sqrt(2) E||g_p||`` (Sudakov-Fernique), its median at most its mean (convex), and it exceeds its median
    by ``s z_(1 - alpha)`` with probability at most alpha (Gaussian isoperimetry). 4.22 (p = 1), 6.10 (5), 7.45 (10);
    the simulated 99.9% quantiles are 3.12, 4.64, 5.86: the bound's level is about 1e-5."""
    mean_norm = math.sqrt(2.0) * math.exp(math.lgamma((p + 1) / 2.0) - math.lgamma(p / 2.0))
    return math.sqrt(2.0) * mean_norm + critical_value(sides=1, alpha=alpha)


@dataclass(frozen=True)
class Score:
    """The clipped mean gradient released at the estimate: ``gradient`` (in the coordinates the inference
    releases in) and the per-coordinate sd ``sd`` of its aggregated noise (public)."""

    gradient: np.ndarray
    sd: float


@dataclass(frozen=True)
class Verdict:
    """The score test at the returned point.

    Attributes
    ----------
    converged : bool
        ``p_value > DIAGNOSTIC_ALPHA``, or every coefficient has a standard error and none's distance less its noise
        margin exceeds ``TOL_SE`` SEs.
    statistic, dof, p_value : float, int, float
        ``delta^T V^-1 delta`` with V the noise covariance of delta under convergence, its degrees of freedom
        and the chi-square tail.
    distance : float
        ``max_j |delta_j| / se_j`` (original scale, the intervals' standard errors).
    coefficient : int
        The j of that maximum (-1 where every standard error is withheld).
    unidentified : tuple of int
        The coefficients the chi-square tests whose standard error is withheld (not identified by the released
        Hessian): no distance in SEs shows a drift along them immaterial.
    """

    converged: bool
    statistic: float
    dof: int
    p_value: float
    distance: float
    coefficient: int
    unidentified: tuple[int, ...] = ()


def release_score(session: Session, setup: Setup, run: Run, mu: float) -> Score:
    """Each client's clipped mean gradient at ``run.theta`` (sensitivity ``2 B / n_i``, budget ``mu``),
    aggregated with the fit's weights (a secure sum in a secure fit: :func:`~privfedstat.federation.queries.
    private_mean`): one more release, recorded in the ledger like every other."""
    w = run.weights if run.weights is not None else session.size_weights
    g, sd = private_mean(session, "gradients", weights=w, sensitivity=2.0 * setup.clip / session.sizes,
                         bound=setup.clip, mu=mu, stage="inference-score-test", theta=run.theta, clip=setup.clip)
    return Score(np.ravel(g), sd)


def judge(score: Score, H: np.ndarray, to_original: np.ndarray, cov: np.ndarray,
          cov_privacy: np.ndarray | None) -> Verdict:
    """The score test: ``delta = G H^-1 g`` (G = ``to_original``) against ``V = s^2 G H^-2 G^T + cov_privacy``, a
    chi-square over every coefficient, and its size in the standard errors ``sqrt(diag(cov))``. Not converged when the
    chi-square test rejects at ``DIAGNOSTIC_ALPHA`` and either some coefficient's standard error is withheld (NaN: not
    identified by the released Hessian, so nothing measures its distance in SEs, and nothing can show a drift there
    immaterial) or some ``|delta_j|``, less ``z_(1 - DIAGNOSTIC_ALPHA / 2p) sqrt(V_jj)``, still exceeds ``TOL_SE se_j``:
    a distance the released values show beyond their noise, coefficient by coefficient (Bonferroni), and large enough
    to move an interval's coverage. (The margin keeps a fit whose release noise alone puts the root several SEs away
    from being flagged for it.)"""
    # in units of the score's noise sd: at a tiny clip its square (and the privacy covariance) underflow doubles
    unit = score.sd if score.sd > 0 else 1.0
    M = to_original @ np.linalg.inv(H)
    delta = M @ (score.gradient / unit)
    V = M @ M.T * (score.sd / unit) ** 2 + (0.0 if cov_privacy is None else cov_privacy / unit / unit)
    se = np.sqrt(np.diag(cov)) / unit
    tested = np.isfinite(np.diag(V))
    if not np.any(tested):
        return Verdict(True, math.nan, 0, math.nan, math.nan, -1)
    from scipy.stats import chi2  # at fit time: importing privfedstat loads no scipy.stats

    d, Vk = delta[tested], V[np.ix_(tested, tested)]
    statistic = float(d @ np.linalg.pinv(Vk, hermitian=True) @ d)
    dof = int(np.sum(tested))
    p_value = float(chi2.sf(statistic, dof))
    keep = tested & np.isfinite(se) & (se > 0)
    unidentified = tuple(int(k) for k in np.flatnonzero(tested & ~keep))
    if not np.any(keep):  # every SE withheld: no distance in SEs (coefficient -1)
        return Verdict(p_value > DIAGNOSTIC_ALPHA, statistic, dof, p_value, math.nan, -1, unidentified)
    safe = np.where(keep, se, 1.0)
    z = np.where(keep, np.abs(delta) / safe, 0.0)
    # the distance less its noise at the Bonferroni level: what the released values show beyond doubt
    margin = critical_value(dof) * np.sqrt(np.maximum(np.diag(V), 0.0))
    shown = np.where(keep, (np.abs(delta) - margin) / safe, -np.inf)
    j = int(np.argmax(z))
    immaterial = not unidentified and float(np.max(shown)) <= TOL_SE
    return Verdict(p_value > DIAGNOSTIC_ALPHA or immaterial, statistic, dof, p_value, float(z[j]), j, unidentified)


def along_last_update(score: Score, H: np.ndarray, to_original: np.ndarray, cov_privacy: np.ndarray | None,
                      path: list[np.ndarray]) -> float:
    """The Newton distance ``delta = G H^-1 g`` (as in :func:`judge`) along the path's last update ``u`` (unit
    ``v = G u / ||G u||``, fixed before the score's release), in its noise sds: ``v^T delta / sqrt(v^T V v)``.

    Under convergence ``delta ~ N(0, V)``, so this is one standard normal, whatever the path did; in a 2-cycle of a
    step that overshoots by a factor 2 or more, the root lies at or behind the midpoint of the last two iterates,
    at least ``|G u| / 2`` back along v, where it is positive. 0 when the path has no last update."""
    unit = score.sd if score.sd > 0 else 1.0
    M = to_original @ np.linalg.inv(H)
    v = to_original @ np.ravel(path[-1] - path[-2]) if len(path) > 1 else np.zeros(H.shape[0])
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        return 0.0
    v = v / norm
    noise = float(v @ M @ M.T @ v) * (score.sd / unit) ** 2
    if cov_privacy is not None:
        noise += float(v @ cov_privacy @ v) / unit / unit
    return float(v @ M @ (score.gradient / unit)) / math.sqrt(noise) if noise > 0 else 0.0


def unstable(noise_model, H: np.ndarray, hessian_sd: float = 0.0) -> float:
    """``|1 - eta lambda|`` of a gradient protocol's step (``noise_model.step_size``, eta) along the released
    curvature's steepest direction, lambda the largest eigenvalue of H less ``noise_eigenvalue(p)`` noise sds
    ``hessian_sd`` (the bound on its noise's: noise alone makes a sound step look unstable with probability below
    ``DIAGNOSTIC_ALPHA``); 0 for protocols that take no gradient steps (no ``error_transport``) or where that is within
    [-1, 1]. Above 1 every step amplifies the error along it: the path cannot settle where the curvature is
    this large (the noise model's step map clamps ``eta lambda`` to [0, 1] and cannot show it)."""
    eta = getattr(noise_model, "step_size", None)
    if getattr(noise_model, "error_transport", None) is None or not eta:
        return 0.0
    lam = float(np.linalg.eigvalsh(0.5 * (H + H.T))[-1]) - noise_eigenvalue(H.shape[0]) * hessian_sd
    factor = abs(1.0 - float(eta) * lam)
    return factor if float(eta) * lam > 2.0 else 0.0


def _iteration_parameters(est) -> list[str]:
    names = est.get_params()
    return [n for n in ("n_rounds", "n_iter", "n_server_iter", "n_local_steps") if n in names]


def remedy(est, cause: str) -> str:
    """What to change, naming parameters the estimator has: ``"slow"`` (the path was still travelling),
    ``"oscillating"`` (steps too large), ``"separation"`` (no finite optimum)."""
    params = est.get_params()
    step = params.get("step_size")
    counts = " or ".join(_iteration_parameters(est))
    if cause == "separation":
        return ("The data separate the outcome along this direction, so the maximum-likelihood estimate does not exist "
                "(a coefficient grows without bound): drop or merge the separating column(s) or categories, or fit a "
                "penalised model (glm(..., penalty='elasticnet', alpha=..., l1_ratio=0), a ridge penalty).")
    if cause == "oscillating":
        if step == "auto" and params.get("scaling") is not None:  # the step already reads the scaled columns
            return "Give a smaller numeric step_size than the automatic one (it is set from the scaled columns)."
        if step == "auto":  # eta = 1 / (kappa d) assumes columns of mean square about 1
            scale = " (scaling='private')" if "scaling" in params else ""
            return ("step_size='auto' assumes columns on the unit scale (mean square about 1): standardise them"
                    f"{scale}, or give a smaller numeric step_size.")
        auto = " or step_size='auto' (with columns on the unit scale)" if "auto" in _accepted(est, "step_size") else ""
        return f"Lower step_size (now {step!r}){auto}." if step is not None else "Check the data's scale."
    parts = []
    newton = est.method in ("FedIRLS", "FedNewton")
    if step is not None and step != "auto" and not (newton and step >= 1.0):
        full = " towards 1 (the full Newton step)" if newton else ""
        parts.append(f"raise step_size (now {step!r}){full}")
    if counts:
        parts.append(f"raise {counts}")
    if not parts:
        return "Increase mu or the rows per site."
    return ("Either " + ", or ".join(parts) + ".") if len(parts) > 1 else parts[0][0].upper() + parts[0][1:] + "."


def _accepted(est, name: str) -> tuple:
    """The string options the estimator's rule for ``name`` accepts."""
    rule = est._parameter_table().get(name, [])
    return tuple(r for r in (rule if isinstance(rule, list) else [rule]) if isinstance(r, str))


def divergence(est, why: str) -> DivergenceError:
    """The error of a fit whose estimate is not an optimum and that no more rounds would bring to one."""
    step = est.get_params().get("step_size")
    too_large = f" The step (step_size = {step!r}) is too large for this problem." if step is not None else ""
    return DivergenceError(f"{est.method} diverged: {why}{too_large} Its coefficients are not an estimate and are not "
                           f"returned as one. {remedy(est, 'oscillating')}")


def released_sd(ledger, stage: str) -> float:
    """The per-entry sd of the last aggregated release of ``stage`` (public): ``sqrt(sum_i (w_i sigma_i)^2)`` of the
    clients' Gaussian noises, or for a secure sum that of its summed integer noise and rounding errors times its
    publication weight ``1 / sum_i w_i`` (:func:`~privfedstat.federation.secure.mean_noise_sd`)."""
    last = next((r for r in reversed(ledger.releases) if r.stage == stage), None)
    if last is None or last.weights is None:
        return 0.0
    if last.integer is not None:
        return math.sqrt(last.integer.variance) * float(np.max(last.weights))
    return float(np.sqrt(np.sum((np.asarray(last.weights) * np.asarray(last.sigma)) ** 2)))


def contracts(est, noise_model, H: np.ndarray, hessian_sd: float = 0.0) -> bool:
    """Whether the protocol's gradient steps contract at the curvature H; a ConvergenceWarning where they do not
    (the path cannot settle there: it has not diverged yet, and its last iterate is returned, not converged)."""
    rho = unstable(noise_model, H, hessian_sd)
    if rho <= 1.0:
        return True
    step = est.get_params().get("step_size")
    warn(f"{est.method} did not converge: at the curvature released at its estimate each of its gradient "
         f"steps multiplies the error along the steepest direction by {rho:.3g} (step_size = {step!r} times "
         f"the curvature, less {noise_eigenvalue(H.shape[0]):.3g} noise sds, exceeds 2), so its path cannot "
         f"settle there; more steps would make it bounce or diverge. {remedy(est, 'oscillating')} (or standardise "
         "the columns: the automatic step assumes unit-scale columns)", ConvergenceWarning)
    return False


def _vanished(est, score: Score, H: np.ndarray, hessian_sd: float, run: Run) -> bool:
    """Whether the released curvature is within noise of 0 in every direction and the fit, judged there, did not
    converge: the ``DivergenceError`` of :func:`review_score` where the path ran away (any protocol) or a gradient
    step could not be stable at its start, and a ConvergenceWarning where a gradient step exceeds ``stable_step``
    (nothing released then shows that the protocol's noise model, which assumes contracting steps, describes the path:
    the curvature at the estimate says nothing of that about the root)."""
    edge = noise_eigenvalue(H.shape[0])
    if float(np.linalg.eigvalsh(H)[-1]) > edge * hessian_sd:
        return False
    vanished = f"the curvature released at its estimate is within {edge:.3g} noise sds of zero in every direction"
    # the protocol's noise model (linearised at a floored Hessian) does not describe the estimate, so the score is
    # tested against its release alone, along the path's travel (fixed before the release: one normal under a root)
    travel = np.ravel(run.path[-1] - run.path[0])
    length = float(np.linalg.norm(travel))
    along = float(travel @ (score.gradient / score.sd)) / length if length > 0 else 0.0  # sd**2 may underflow
    if along > critical_value(sides=1):
        raise divergence(est, f"{vanished} (every fitted value saturated) while the score released there points along "
                              f"the path's travel, {along:.3g} noise sds (one-sided test at {DIAGNOSTIC_ALPHA:g}): the "
                              "path ran away from the optimum instead of towards it.")
    if not gradient_steps(run.noise_model):
        return False
    eta, bound = float(getattr(run.noise_model, "step_size", None) or 0.0), stable_step(est)
    if eta <= bound:
        return False
    unshown = (f"its step (step_size = {eta:.3g}) exceeds {bound:.3g}, the largest that the public bound on the "
               f"curvature (that of step_size='auto', {bound / 2.0:.3g}, for {columns(est)}) shows stable")
    thrown = start_unstable(est, eta)
    if thrown:
        raise divergence(est, f"{vanished}, so nothing released identifies its estimate (coefficients up to "
                              f"{float(np.max(np.abs(est.coef_))):.3g}), and {unshown}; beyond that, {thrown} to where the model "
                              f"saturates. A step that the public bound shows stable is step_size <= {bound:.3g}.")
    warn(f"{est.method} did not converge: {vanished}, so the score there cannot show an optimum, and {unshown}: "
         "its steps may have thrown the path out to where the model saturates (coefficients up to "
         f"{float(np.max(np.abs(est.coef_))):.3g}). Lower step_size below {bound:.3g} or use "
         "step_size='auto' (if the columns are far below the unit scale, standardise them instead).",
         ConvergenceWarning)
    return True


def review_score(est, score: Score, H: np.ndarray, hessian_sd: float, inference, to_original: np.ndarray, run: Run,
                 oscillating: float | None, path_converged: bool | None) -> bool:
    """``converged_`` of a private fit from the score released at its estimate (:func:`release_score`), with the
    warning that names the cause and the remedy; ``path_converged`` is the path's own verdict (a cut, damped or
    oscillating last phase stays not converged).

    A Newton protocol's path whose last updates point back and forth (``oscillating``, its lag-1 correlation) is
    judged by the score along its last update (:func:`along_last_update`, one-sided at ``DIAGNOSTIC_ALPHA``): the
    updates' size against their gradient noise has no null there, since steps on released Hessians forget the
    previous error only up to the Hessian's noise (docs/guide/convergence.md).

    ``H`` is the Hessian the inference released at the estimate (floored; ``hessian_sd`` the sd of its aggregated
    noise, :func:`released_sd`), ``run`` the run in the coordinates
    the inference released in (its noise model there), ``to_original`` their map to the original scale.

    Raises
    ------
    DivergenceError
        Where the released Hessian's largest eigenvalue is below ``noise_eigenvalue(p)`` noise sds (within noise of
        0 in every direction) while the score released there, projected on the path's travel ``theta_K - theta_0``
        (unit u), is positive beyond its noise: ``u . g / s > z_(1 - DIAGNOSTIC_ALPHA)`` (u is fixed before the
        release, so under a root ``u . g / s`` is one standard normal). The path then went up the score: it ran
        away (going down it, the path was still travelling, as under heavy clipping, and the score test says so).
        Any protocol: FedNewton's one step on a floored Hessian from a FedAvg point thrown out by its step. Or, for a
        gradient protocol, where, with the curvature so vanished (the estimate not identified), the step exceeds ``2 / L``, the
        largest the public bound shows stable (``stable_step``), and could not be stable at the start: ``eta``
        times the public lower bound on the curvature at theta = 0 (``start_curvature``: ``ell''(0)`` along an
        intercept, or along a column of the fitting scale's mean square) exceeds 2. A step above ``2 / L`` short of
        that is not converged (:func:`_vanished`).
    """
    if _vanished(est, score, H, hessian_sd, run):
        return False
    if oscillating is not None and not gradient_steps(run.noise_model):
        cycle = along_last_update(score, H, to_original, inference.cov_protocol, run.path)
        if cycle > critical_value(sides=1):
            warn(f"{est.method} did not converge: its last updates point back and forth (lag-1 correlation "
                 f"{oscillating:.2f}) and the gradient released at its estimate puts the root back along its "
                 f"last update, {cycle:.3g} noise sds (one-sided test at {DIAGNOSTIC_ALPHA:g}): the estimate is "
                 f"at one end of a cycle, not at the optimum. {remedy(est, 'oscillating')}",
                 ConvergenceWarning)
            return False
    if not contracts(est, run.noise_model, H, hessian_sd):  # the score test's null assumes contracting steps
        return False
    # the privacy noise alone: the path remainder (cov_path) is the error of a path that stopped short, which the test
    # is there to detect, not noise around the root
    verdict = judge(score, H, to_original, inference.cov, inference.cov_privacy)
    if verdict.converged:
        return path_converged is not False
    names = est._coef_labels()
    if oscillating is not None:
        why, advice = (f"its last updates point back and forth (lag-1 correlation {oscillating:.2f})",
                       remedy(est, "oscillating"))
    elif verdict.coefficient < 0:
        why = ("the Hessian released there identifies none of its coefficients (every standard error withheld): "
               "the path ended where the fitted values saturate, where a step too large for the columns' scale throws it")
        advice = remedy(est, "oscillating") if gradient_steps(run.noise_model) else est._advice()
    elif verdict.unidentified:
        unnamed = ", ".join(names[k] for k in verdict.unidentified)
        why = (f"the Hessian released there does not identify {unnamed} (standard errors withheld), so nothing "
               "measures the distance along them or shows it immaterial: the fitted values saturate there (where a step "
               "too large for the columns' scale throws a path), or the data or mu do not resolve them")
        advice = (remedy(est, "oscillating") + " Otherwise increase mu or the rows per site."
                  if gradient_steps(run.noise_model) else est._advice())
    else:
        why, advice = "its path stopped short of it", est._advice()
        if "hessian_clip" in est.get_params() and inference.cov_path is not None and np.any(np.diag(inference.cov_path) > 0):
            why += (", and the released gradients along its last step show its Newton matrix flatter than the score "
                    "(a path remainder, cov_path), as where the per-row curvature bound clips the rows that carry most "
                    "of the curvature")
            advice += " Or give a larger hessian_clip (the per-row curvature bound)."
    where = ("beyond its noise" if verdict.coefficient < 0 else
             f"{verdict.distance:.3g} standard errors away in {names[verdict.coefficient]}")
    warn(
        f"{est.method} did not converge: the gradient released at its estimate puts the root of its estimating "
        f"equation {where} (score test against "
        f"the noise of that release and the privacy noise of the estimate: chi-square {verdict.statistic:.3g} on "
        f"{verdict.dof} df, p = {verdict.p_value:.2g}): {why}. {advice}",
        ConvergenceWarning)
    return False


def scored(task, mu: float, family) -> bool:
    """Whether a fit releases the score at its estimate: finite mu, a GLM family, and an inference task other
    than the bootstrap (whose refits simulate the path instead)."""
    return task is not None and math.isfinite(mu) and family is not None and task.cov_type != "bootstrap"


def score_spent(inference, mu_inference: float):
    """``inference`` (released with what the score left of the inference budget) reporting the whole budget
    ``mu_inference``, the score release's share of it stated in its notes."""
    note = (f"{SCORE_SHARE:.0%} of the inference budget's mu^2 (mu = {math.sqrt(SCORE_SHARE) * mu_inference:.4g}) went "
            "to the score at the estimate, from which the fit judged its convergence")
    return replace(inference, mu=mu_inference, notes=[*inference.notes, note])
