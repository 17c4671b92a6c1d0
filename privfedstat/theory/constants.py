"""Problem constants tau1, tau2 and trace(Sigma) of a GLM data-generating process.

The bounds of Section 3 take the constants of Assumptions 2-4 as arguments; this module computes
them for a concrete design (Gaussian covariates with an intercept, a canonical GLM), so that the
theory can be evaluated on the designs the simulations draw from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._population import Population, hermite_nodes, make_spec

__all__ = ["ProblemConstants", "problem_constants", "hessian_norm_quantile"]


@dataclass(frozen=True)
class ProblemConstants:
    """Constants of Assumptions 2-4 for one data-generating process, at theta_0 = beta.

    Attributes
    ----------
    theta0 : ndarray of shape (d,)
        The population minimiser (beta; the model is correctly specified).
    hessian : ndarray of shape (d, d)
        H = E[grad^2 rho(x, theta_0)], the population Hessian.
    gradient_cov : ndarray of shape (d, d)
        Sigma = Var(grad rho(x, theta_0)) = E[ell'(y, x^T beta)^2 x x^T].
    tau1, tau2 : float
        Smallest and largest eigenvalue of H (see :func:`problem_constants` for why).
    trace_sigma : float
        trace(Sigma).
    sandwich_trace : float
        trace(H^-1 Sigma H^-1): N times the asymptotic MSE of the non-private M-estimator.
    hessian_norm_q99 : float
        99th percentile of the per-sample Hessian norm ell'' ||x||^2 (Monte Carlo): a finite stand-in
        for Assumption 4's sup-norm bound, which is infinite for Gaussian covariates.
    clip_fraction : float or None
        P(||grad rho(x, theta_0)|| > clip) for the given clip.
    method : str
        "quadrature" or "mc".
    """

    theta0: np.ndarray
    hessian: np.ndarray
    gradient_cov: np.ndarray
    tau1: float
    tau2: float
    trace_sigma: float
    sandwich_trace: float
    hessian_norm_q99: float
    clip_fraction: float | None
    method: str

    @property
    def d(self) -> int:
        return self.theta0.size


def _gaussian_design_matrix(spec, weight, n_nodes: int) -> np.ndarray:
    """E[w(x^T beta) x x^T] for x = (1, sigma_c z), z ~ N(0, I), by 1-D Gauss-Hermite quadrature.

    With b = beta[1:], s = ||b||, e = b/s and u = e^T z ~ N(0, 1), the linear predictor is
    beta_0 + sigma_c s u, and E[w z] = E[w u] e, E[w z z^T] = E[w u^2] e e^T + E[w] (I - e e^T).
    """
    beta = spec.beta_array
    d = beta.size
    t, om = hermite_nodes(n_nodes)
    b = beta[1:]
    s = float(np.linalg.norm(b))
    w = weight(beta[0] + spec.sigma_c * s * t)
    e0, e1, e2 = np.sum(om * w), np.sum(om * w * t), np.sum(om * w * t * t)
    M = np.empty((d, d))
    M[0, 0] = e0
    if d > 1:
        e = b / s if s > 0 else np.eye(d - 1)[0]
        M[0, 1:] = M[1:, 0] = spec.sigma_c * e1 * e
        M[1:, 1:] = spec.sigma_c**2 * (e2 * np.outer(e, e) + e0 * (np.eye(d - 1) - np.outer(e, e)))
    return M


def problem_constants(*, design=None, family=None, beta=None, clip=None, method: str = "quadrature",
                      n_mc: int = 2**15, n_nodes: int = 96, random_state=0) -> ProblemConstants:
    """tau1, tau2 and trace(Sigma) of a GLM design with Gaussian covariates and an intercept.

    Parameters
    ----------
    design : object, optional
        The covariate design, e.g. :class:`privfedstat.simulations.GLMDesign`: x = (1, sigma_c z),
        z ~ N(0, I_{d-1}) (attributes ``sigma_c``, and ``noise_sd`` for the Gaussian family; its
        ``family`` and ``beta_true`` are used unless given here). Default: sigma_c = 1.
    family : {"logistic", "poisson", "gaussian"} or Family, optional
        A scalar-response likelihood family (``Family.likelihood``: a GLM with canonical link, the
        loss is the negative log-likelihood).
    beta : array of shape (d,), optional
        The true parameter theta_0 (intercept first).
    clip : float, optional
        A clipping bound B; reports the fraction of per-sample gradients it clips at theta_0.
    method : {"quadrature", "mc"}, default "quadrature"
        ``"quadrature"``: exact up to Gauss-Hermite error (the linear predictor is one-dimensional
        Gaussian, so every expectation reduces to a 1-D integral; ``n_nodes`` nodes).
        ``"mc"``: Monte Carlo over ``n_mc`` antithetic covariate draws with y integrated out exactly.
    n_mc : int, default 32768
        Monte-Carlo draws (``"mc"``, and the ``hessian_norm_q99`` / ``clip_fraction`` diagnostics).
    n_nodes : int, default 96
        Gauss-Hermite nodes.
    random_state : int or SeedSequence, default 0
        Seed of the Monte-Carlo sample.

    Returns
    -------
    ProblemConstants

    Notes
    -----
    **Definitions used.** H = E[grad^2 rho(x, theta_0)] and Sigma = Var(grad rho(x, theta_0)) (the
    paper's Sigma, Theorem 3.2). tau1 = lambda_min(H): Assumption 2 asks for
    ``E grad^2 rho(x, theta) >= tau1 I`` for all theta, which no GLM with unbounded covariates
    satisfies uniformly; the value at theta_0 is the one that governs the local rate and the
    asymptotic variance. tau2 = lambda_max(H): Assumption 4 literally bounds every *per-sample*
    Hessian, sup_x ||grad^2 rho(x, theta)|| <= tau2, which is infinite for Gaussian covariates
    (||x||^2 is unbounded). What the proofs use tau2 for -- the step-size range
    1/(2 tau2) <= eta <= 9/(10 tau2) and the contraction 1 - tau1/(3 tau2) of gradient descent on
    the (client-averaged) loss -- is the curvature of the averaged loss, whose largest eigenvalue
    converges to lambda_max(H). ``hessian_norm_q99`` reports a per-sample bound for reference.

    For a canonical GLM, Sigma = E[Var(y | x) x x^T] equals H for the logistic and Poisson families
    and noise_sd^2 E[x x^T] for the Gaussian. Logistic with beta = 0 and sigma_c = 1: H = I/4.

    References
    ----------
    Core paper, Assumptions 2-4, Theorem 3.2 (Sigma), Section 4.1 (the design).
    """
    spec = make_spec(design, family, beta)
    pop = Population(spec, n_mc, random_state)
    beta_ = spec.beta_array
    if method == "quadrature":
        def curvature(eta):
            return pop.family.deriv2(np.zeros_like(eta), eta)

        H = _gaussian_design_matrix(spec, curvature, n_nodes)
        # canonical link: Var(y | x) = E[ell'(y, x^T beta)^2 | x] = dispersion * ell''(x^T beta)
        S = _gaussian_design_matrix(spec, lambda eta: spec.dispersion * curvature(eta), n_nodes)
    elif method == "mc":
        mom = pop.moments(beta_)
        H, S = mom["J"], mom["S"]
    else:
        raise ValueError(f"method must be 'quadrature' or 'mc', got {method!r}.")
    H, S = (H + H.T) / 2, (S + S.T) / 2
    ev = np.linalg.eigvalsh(H)
    Hinv = np.linalg.inv(H)
    frac = None if clip is None else pop.clip_fraction(beta_, float(clip))
    return ProblemConstants(
        theta0=beta_, hessian=H, gradient_cov=S, tau1=float(ev[0]), tau2=float(ev[-1]),
        trace_sigma=float(np.trace(S)), sandwich_trace=float(np.trace(Hinv @ S @ Hinv)),
        hessian_norm_q99=float(np.quantile(pop.hessian_norms(beta_), 0.99)), clip_fraction=frac, method=method,
    )


def hessian_norm_quantile(design, q: float, *, n_mc: int = 2**13, random_state=0) -> float:
    """The population ``q``-quantile of the per-sample Hessian norm ``ell''(0) ||x||^2`` at theta = 0.

    This is the limit, for many samples, of the private rule that chooses FedNewton's per-sample
    Hessian bound C_H from the data (``hessian_clip="auto"``: the :class:`~privfedstat.AutoClip`
    quantile of the norms at the initial model theta = 0).

    Parameters
    ----------
    design : object
        The covariate design, as for :func:`problem_constants` (family, ``beta_true``, ``sigma_c``).
    q : float
        The quantile, in [0, 1].
    n_mc : int, default 8192
        Monte-Carlo covariate draws.
    random_state : int or SeedSequence, default 0

    Returns
    -------
    float
    """
    spec = make_spec(design)
    pop = Population(spec, n_mc, random_state)
    return float(np.quantile(pop.hessian_norms(np.zeros(spec.d)), q))
