"""Population quantities of a GLM data-generating process with Gaussian covariates.

``x = (1, sigma_c z)``, ``z ~ N(0, I_{d-1})``, ``y | x`` from the family's canonical GLM at
``beta``. Expectations over x use a fixed antithetic Monte-Carlo sample (z and -z), expectations
over y | x are exact sums (logistic: two points; Poisson: the pmf up to a tail of 1e-12) or
Gauss-Hermite quadrature (Gaussian). Integrating y out exactly removes the Monte-Carlo error of the
score at beta: without clipping, the population gradient at beta is exactly zero on the sample.

Clipping (per-sample gradient norm <= B) enters through ``clip(ell'(y, z), -B/||x||, B/||x||)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from ..families import Family, get_family
from ..families.glm import hermite_nodes

__all__ = ["Spec", "make_spec", "Population", "hermite_nodes"]

_H3 = 1e-4  # step of the central difference for ell''' (ell'' is smooth: error ~1e-8, roundoff ~1e-12)


@dataclass(frozen=True)
class Spec:
    """Family name, true parameter, covariate scale and residual sd of a GLM design."""

    family: str
    beta: tuple
    sigma_c: float
    noise_sd: float

    @property
    def d(self) -> int:
        return len(self.beta)

    @cached_property
    def resolved_family(self) -> Family:
        """The :class:`~privfedstat.families.Family` that ``family`` names (``get_family``, resolved once)."""
        return get_family(self.family)

    @property
    def dispersion(self) -> float:
        """Dispersion of y | x: ``noise_sd^2`` for families with one (Gaussian), else 1."""
        return self.noise_sd**2 if self.resolved_family.has_dispersion else 1.0

    @property
    def beta_array(self) -> np.ndarray:
        return np.asarray(self.beta, dtype=np.float64)


def make_spec(design=None, family=None, beta=None) -> Spec:
    """Resolve (design, family, beta) into a :class:`Spec`.

    ``design`` is any object with ``sigma_c`` (and optionally ``noise_sd``, ``family``,
    ``beta_true``), such as :class:`privfedstat.simulations.GLMDesign`; ``family`` and ``beta``
    override the design's. Without a design: standard normal covariates (sigma_c = 1), noise_sd = 1.
    """
    fam = family if family is not None else getattr(design, "family", None)
    if fam is None:
        raise TypeError("give family= (or a design with a family).")
    law = get_family(fam)
    if not (law.likelihood and law.n_outputs == 1):
        raise ValueError(f"the theory module models the response law of scalar-response GLMs with canonical link "
                         f"(likelihood families); got {fam!r}.")
    if beta is None:
        beta = getattr(design, "beta_true", None)
        if beta is None:
            raise TypeError("give beta= (the true parameter, intercept first) or a design with beta_true.")
    b = np.asarray(beta, dtype=np.float64).ravel()
    if b.size < 1 or not np.all(np.isfinite(b)):
        raise ValueError(f"beta must be a non-empty vector of finite numbers, got {beta!r}.")
    sigma_c = float(getattr(design, "sigma_c", 1.0)) if design is not None else 1.0
    noise_sd = float(getattr(design, "noise_sd", 1.0)) if design is not None else 1.0
    if not (sigma_c > 0 and noise_sd > 0):
        raise ValueError("the design needs sigma_c > 0 and noise_sd > 0.")
    return Spec(law.name, tuple(float(v) for v in b), sigma_c, noise_sd)


class Population:
    """Score moments of the design on a fixed Monte-Carlo sample of covariates.

    Parameters
    ----------
    spec : Spec
    n_mc : int
        Number of covariate draws (rounded up to an even number; half are antithetic, and the sample
        is then linearly transformed to have covariance exactly I).
    seed : int or SeedSequence
    """

    def __init__(self, spec: Spec, n_mc: int, seed) -> None:
        half = max(1, (int(n_mc) + 1) // 2)
        rng = np.random.default_rng(seed)
        z = rng.standard_normal((half, spec.d - 1))
        z = np.concatenate([z, -z])
        if spec.d > 1 and z.shape[0] > 4 * spec.d:
            # moment matching: make the sample covariance exactly I (the mean is 0 by antithesis),
            # which removes the Monte-Carlo error of every quantity quadratic in the covariates
            L = np.linalg.cholesky(z.T @ z / z.shape[0])
            z = np.linalg.solve(L, z.T).T
        self._use(spec, np.column_stack([np.ones(z.shape[0]), spec.sigma_c * z]))

    @classmethod
    def of_covariates(cls, spec: Spec, X: np.ndarray) -> Population:
        """The population whose covariates are the rows of ``X`` (equally likely), y | x from ``spec``'s GLM.

        ``X`` is any covariate sample (a public pilot or synthetic design, with its intercept
        column); ``spec.sigma_c`` is not used.
        """
        pop = cls.__new__(cls)
        pop._use(spec, np.asarray(X, dtype=np.float64))
        return pop

    def in_basis(self, basis: np.ndarray) -> Population:
        """The same population in the coordinates ``phi = basis^-1 theta``: covariate rows ``basis^T x`` and the true
        parameter ``basis^-1 beta`` (the linear predictors, so y | x, are unchanged)."""
        P = np.asarray(basis, dtype=np.float64)
        pop = type(self).__new__(type(self))
        pop.__dict__.update(self.__dict__)
        pop.spec = replace(self.spec, beta=tuple(np.linalg.solve(P, self.spec.beta_array)))
        pop.X = self.X @ P
        pop.xnorm = np.linalg.norm(pop.X, axis=1)
        return pop

    def _use(self, spec: Spec, X: np.ndarray) -> None:
        if X.ndim != 2 or X.shape[1] != spec.d or X.shape[0] < 1 or not np.all(np.isfinite(X)):
            raise ValueError(f"the covariates must be a finite (n, {spec.d}) array, one column per coefficient; "
                             f"got shape {X.shape}.")
        self.spec = spec
        self.family = spec.resolved_family
        self.X = X
        self.n = X.shape[0]
        self.xnorm = np.linalg.norm(X, axis=1)
        self.eta0 = X @ spec.beta_array
        self._nodes = None

    @property
    def Y(self) -> np.ndarray:
        """Values of y | x at the nodes, shape (n, q) (computed on first use)."""
        if self._nodes is None:
            self._nodes = self.family.response_quadrature(self.eta0, self.spec.noise_sd)
        return self._nodes[0]

    @property
    def W(self) -> np.ndarray:
        """Probabilities of the nodes, shape (n, q)."""
        if self._nodes is None:
            self._nodes = self.family.response_quadrature(self.eta0, self.spec.noise_sd)
        return self._nodes[1]

    def _pieces(self, theta, clip):
        z = (self.X @ np.asarray(theta, dtype=np.float64))[:, None]
        r = self.family.deriv(self.Y, z)
        c = (np.inf if clip is None else clip) / self.xnorm[:, None]
        active = np.abs(r) < c
        return z, np.clip(r, -c, c), active

    def gradient(self, theta, clip=None) -> np.ndarray:
        """Population mean of the clipped per-sample gradient, E[clip_B(grad rho(x, theta))]."""
        _, rc, _ = self._pieces(theta, clip)
        return self.X.T @ np.sum(self.W * rc, axis=1) / self.n

    def moments(self, theta, clip=None) -> dict:
        """Moments of the clipped score psi = clip(ell') x at ``theta``.

        Returns a dict with ``G`` (mean, (d,)), ``J`` (Jacobian dG/dtheta = E[ell'' 1{unclipped} x x^T]),
        ``S`` (second moment E[psi psi^T]) and the per-sample y-averaged weights ``k2`` (ell'' 1),
        ``k12`` (ell'' 1 clip(ell')), ``k22`` ((ell'' 1)^2) and ``k3`` (ell''' 1) used by the
        second-order (bias) terms. "1" is the indicator that the sample is not clipped; derivatives of
        that indicator (boundary terms) are ignored in ``k3``.
        """
        z, rc, active = self._pieces(theta, clip)
        W = self.W
        f = self.family
        d2 = f.deriv2(self.Y, z) * active
        d3 = (f.deriv2(self.Y, z + _H3) - f.deriv2(self.Y, z - _H3)) / (2 * _H3) * active
        k1 = np.sum(W * rc, axis=1)
        k2 = np.sum(W * d2, axis=1)
        ks = np.sum(W * rc * rc, axis=1)
        X = self.X
        return {
            "G": X.T @ k1 / self.n,
            "J": (X * k2[:, None]).T @ X / self.n,
            "S": (X * ks[:, None]).T @ X / self.n,
            "k2": k2,
            "k12": np.sum(W * d2 * rc, axis=1),
            "k22": np.sum(W * d2 * d2, axis=1),
            "k3": np.sum(W * d3, axis=1),
        }

    def clip_fraction(self, theta, clip) -> float:
        """P(||grad rho(x, theta)|| > clip)."""
        _, _, active = self._pieces(theta, clip)
        return float(np.mean(np.sum(self.W * ~active, axis=1)))

    def share_at_most(self, which: str, theta, threshold: float) -> float:
        """P(per-sample norm <= threshold) at ``theta``: ``"gradient"`` norms ``|ell'(y, x^T theta)| ||x||`` (y | x
        integrated) or ``"hessian"`` norms ``ell''(x^T theta) ||x||^2`` (the norms a clip search counts)."""
        if which == "hessian":
            return float(np.mean(self.hessian_norms(theta) <= threshold))
        if which != "gradient":
            raise ValueError(f"which must be 'gradient' or 'hessian', got {which!r}.")
        z = (self.X @ np.asarray(theta, dtype=np.float64))[:, None]
        norms = np.abs(self.family.deriv(self.Y, z)) * self.xnorm[:, None]
        return float(np.mean(np.sum(self.W * (norms <= threshold), axis=1)))

    def hessian_norms(self, theta) -> np.ndarray:
        """Per-sample Hessian spectral norms ell''(x^T theta) ||x||^2 (ell'' does not depend on y for
        the supported GLM families)."""
        z = self.X @ np.asarray(theta, dtype=np.float64)
        return self.family.deriv2(np.zeros_like(z), z) * self.xnorm**2

    def clipped_hessian(self, theta, hessian_clip, clip=None) -> np.ndarray:
        """E[per-sample Hessian clipped to spectral norm <= hessian_clip] (FedNewton's H_i); with ``clip`` (B) only
        over the rows whose gradient is not clipped at B: the mean of the oracle's ``hessians(theta, C_H, B)``, the
        Jacobian of the clipped score that an inference releases."""
        z, _, active = self._pieces(theta, clip)
        h = self.family.deriv2(self.Y, z) * (self.xnorm**2)[:, None]
        scale = np.minimum(1.0, hessian_clip / np.maximum(h, 1e-300))
        k = np.sum(self.W * self.family.deriv2(self.Y, z) * scale * active, axis=1)
        return (self.X * k[:, None]).T @ self.X / self.n

    def pearson_dispersion(self, theta, bound) -> float:
        """E[min(ell'^2 / ell'', bound)]: the mean of the capped squared Pearson residual (the oracle's
        ``row_pearson_terms``), the dispersion a fit releases at ``theta`` per row."""
        z = (self.X @ np.asarray(theta, dtype=np.float64))[:, None]
        ratio = self.family.deriv(self.Y, z) ** 2 / self.family.deriv2(self.Y, z)
        return float(np.mean(np.sum(self.W * np.minimum(ratio, bound), axis=1)))

    def root(self, clip=None, *, start=None, tol: float = 1e-12, max_iter: int = 100) -> np.ndarray:
        """Root theta* of the clipped population estimating equation (beta when clipping is inactive)."""
        beta = self.spec.beta_array
        if clip is None or np.isinf(clip):
            return beta.copy()
        theta = beta.copy() if start is None else np.asarray(start, dtype=np.float64).copy()
        for _ in range(max_iter):
            mom = self.moments(theta, clip)
            step = np.linalg.solve(mom["J"], mom["G"])
            theta = theta - step
            if np.linalg.norm(step) <= tol * (1.0 + np.linalg.norm(theta)):
                break
        return theta

    def jacobian(self, theta, clip=None) -> np.ndarray:
        """dG/dtheta = E[ell''(y, x^T theta) 1{not clipped} x x^T]."""
        z, _, active = self._pieces(theta, clip)
        k2 = np.sum(self.W * self.family.deriv2(self.Y, z) * active, axis=1)
        return (self.X * k2[:, None]).T @ self.X / self.n
