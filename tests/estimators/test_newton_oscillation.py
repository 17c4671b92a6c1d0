"""Newton paths that point back and forth while their estimate sits within its noise (issue 42: countymurders,
doctorvisits at mu = 2 withheld every interval for it). FedIRLS's refine rounds floor released Hessians at three
noise sds, so each step forgets the previous error only up to the Hessian's noise: the last updates carry the
earlier rounds' error, and their size against the gradient noise alone has no null. The verdict takes the score
released at the estimate along the last update instead (``verdict.along_last_update``), one normal under
convergence."""

import math
import warnings

import numpy as np
import pandas as pd
import statsmodels.api as sm

from privfedstat import ConvergenceWarning, glm
from privfedstat.fitting.diagnostics import OSCILLATION_CORRELATION
from privfedstat.fitting.verdict import Score, along_last_update
from privfedstat.inference.config import DIAGNOSTIC_ALPHA, critical_value


def _floored(A, floor):
    vals, vecs = np.linalg.eigh(A)
    return np.einsum("nij,nj,nkj->nik", vecs, np.maximum(vals, floor), vecs)


def _sym_noise(rng, n, p, sd):
    W = rng.standard_normal((n, p, p)) * sd
    return (W + np.swapaxes(W, 1, 2)) / 2


def test_the_score_along_the_last_update_has_its_false_alarms_at_the_diagnostic_level():
    """Refine rounds as FedIRLS runs them (p = 5, fresh Hessians with noise sd 0.1 floored at 3 noise sds, gradient
    noise falling over four rounds from a located error), 20000 draws: among the paths whose updates point back and
    forth (lag-1 correlation below -0.6, a fifth of them), the score released at the estimate along the last update,
    against the estimate's covariance (exact here: the draws') and the release's noise, exceeds the one-sided
    critical value in at most DIAGNOSTIC_ALPHA of all draws (its direction is fixed before the release)."""
    rng = np.random.default_rng(0)
    n, p, s_h = 20000, 5, 0.1
    Q = np.linalg.qr(rng.standard_normal((p, p)))[0]
    J = Q @ np.diag([0.6, 1.0, 2.0, 3.0, 4.0]) @ Q.T
    e = rng.standard_normal((n, p)) * 0.1  # the located point's error
    path = [e]
    for sd in [0.3, 0.3, 0.2, 0.1]:
        newton = _floored(J + _sym_noise(rng, n, p, s_h), 3.0 * s_h)
        e = e - np.linalg.solve(newton, (e @ J + rng.standard_normal((n, p)) * sd)[..., None])[..., 0]
        path.append(e)
    path = np.stack(path, axis=1)  # (n, R + 1, p): the root is 0
    steps = np.diff(path, axis=1)
    corr = np.sum(steps[:, 1:] * steps[:, :-1], axis=(1, 2)) / np.sum(steps * steps, axis=(1, 2))
    back_and_forth = np.flatnonzero(corr < -OSCILLATION_CORRELATION)
    assert back_and_forth.size > 0.1 * n
    cov = np.cov(path[:, -1].T)
    s_score, s_inf = 0.3, 0.05
    hessians = _floored(J + _sym_noise(rng, n, p, s_inf), s_inf)
    scores = path[:, -1] @ J + rng.standard_normal((n, p)) * s_score
    stat = np.array([along_last_update(Score(scores[i], s_score), hessians[i], np.eye(p), cov, list(path[i]))
                     for i in back_and_forth])
    assert np.sum(stat > critical_value(sides=1)) / n <= DIAGNOSTIC_ALPHA


def test_a_two_cycle_is_seen_along_its_last_update():
    """A path in a 2-cycle about the root (a step that overshoots by 2: the estimate at one end, half a period from
    the root) puts the released score along its last update at half the period in noise sds."""
    p = 3
    u = np.array([1.0, -0.5, 0.2])
    estimate = u / 2  # the root is 0, the previous iterate -u / 2
    H, var = np.diag([2.0, 1.0, 3.0]), 1e-4
    stat = along_last_update(Score(H @ estimate, 0.01), H, np.eye(p), np.eye(p) * var, [estimate - u, estimate])
    v = u / np.linalg.norm(u)
    sd = math.sqrt(float(v @ (np.linalg.inv(H) @ np.linalg.inv(H) * 0.01**2 + np.eye(p) * var) @ v))
    assert stat > critical_value(sides=1) and math.isclose(stat, float(v @ estimate) / sd, rel_tol=1e-9)


def test_a_converged_fit_whose_last_updates_point_back_and_forth_keeps_its_intervals():
    """A Poisson design like doctorvisits (N = 5190 over 6 sites, a skewed count covariate, mu = 2), the fit whose
    last updates point back and forth beyond their gradient noise: its coefficients sit 1.2 privacy sds from the
    MLE at most, and before it reported "diverged" and withheld every interval."""
    rng = np.random.default_rng(3)
    n = 5190
    X = np.column_stack([np.ones(n), (rng.random(n) < 0.52), rng.uniform(0.19, 0.72, n), rng.gamma(2.0, 0.3, n),
                         rng.poisson(1.4, n), np.where(rng.random(n) < 0.8, 0, rng.integers(1, 15, n)),
                         rng.poisson(1.2, n)]).astype(float)
    y = rng.poisson(np.exp(X @ [-2.2, 0.16, 0.5, -0.2, 0.18, 0.13, 0.03])).astype(float)
    mle = sm.GLM(y, X, family=sm.families.Poisson()).fit().params
    names = [f"x{j}" for j in range(1, 7)]
    df = pd.DataFrame(X[:, 1:], columns=names).assign(y=y, site=np.arange(n) % 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fit = glm("y ~ " + " + ".join(names), df, client="site", family="poisson", mu=2.0, random_state=1)
    assert fit.converged_
    ci = np.asarray(fit.inference_.conf_int())
    assert np.all((ci[:, 0] <= mle) & (mle <= ci[:, 1]))
