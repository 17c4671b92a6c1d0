"""Data-generating processes of Section 4.1 of the core paper.

A pooled data set of N rows is drawn from a GLM with canonical link, X = [1, C] with
C_ij ~ N(0, sigma_c^2), and split across clients in the order of ``sizes``. The paper's covariates
are independent; ``rho`` (not in the paper) correlates them: the rows of C are
N(0, sigma_c^2 R) with R equicorrelated (``R_jk = rho``) or AR(1) (``R_jk = rho^|j-k|``).

The paper does not state p, beta_true or sigma_c. Defaults (all overridable):

* ``p = 5`` (intercept + 4 covariates), ``sigma_c = 1``;
* logistic: ``beta = (0.5, -0.5, 0.5, -0.5, 0.5)``: the linear predictor has mean 0.5 and sd 1,
  so success probabilities spread over about (0.2, 0.9) -- neither separable nor degenerate;
* poisson: ``beta = (0.5, 0.25, -0.25, 0.25, -0.25)``: the linear predictor has sd 0.5, so the
  means stay moderate (median e^0.5 ~ 1.6, 99th percentile ~ 5.9) and the per-sample gradient
  norms at theta = 0 are not dominated by rare huge counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..data.federated import FederatedData
from ..families import Family, get_family

__all__ = ["GLMDesign", "DEFAULT_BETA", "simulate_glm"]

DEFAULT_BETA = {
    "logistic": (0.5, -0.5, 0.5, -0.5, 0.5),
    "poisson": (0.5, 0.25, -0.25, 0.25, -0.25),
    "gaussian": (0.5, -0.5, 0.5, -0.5, 0.5),
}


@dataclass(frozen=True)
class GLMDesign:
    """A GLM data-generating process with Gaussian covariates and an intercept.

    Parameters
    ----------
    family : {"logistic", "poisson", "gaussian"}
    beta : tuple of float or None
        True parameter (beta_true), first entry the intercept; None for :data:`DEFAULT_BETA`.
    sigma_c : float
        Standard deviation of the covariates C_ij.
    noise_sd : float
        Residual standard deviation (gaussian family only).
    rho : float, default 0.0
        Correlation among the non-intercept covariates; 0 gives the paper's independent
        covariates (the same draws as without this parameter).
    correlation : {"equi", "ar1"}, default "equi"
        Structure R of that correlation: ``R_jk = rho`` (equicorrelation; needs
        ``-1/(d-2) < rho < 1`` for d - 1 covariates) or ``R_jk = rho^|j-k|`` (AR(1); ``|rho| < 1``).
    """

    family: str = "logistic"
    beta: tuple[float, ...] | None = None
    sigma_c: float = 1.0
    noise_sd: float = 1.0
    rho: float = 0.0
    correlation: str = "equi"

    def __post_init__(self) -> None:
        if self.family not in DEFAULT_BETA:
            raise ValueError(f"family must be one of {sorted(DEFAULT_BETA)}, got {self.family!r}.")
        if not self.sigma_c > 0:
            raise ValueError(f"sigma_c must be > 0, got {self.sigma_c}.")
        if self.correlation not in ("equi", "ar1"):
            raise ValueError(f"correlation must be 'equi' or 'ar1', got {self.correlation!r}.")
        if not (isinstance(self.rho, (int, float)) and -1 < self.rho < 1):
            raise ValueError(f"rho must be a correlation in (-1, 1), got {self.rho!r}.")
        k = self.beta_true.size - 1
        if self.correlation == "equi" and k > 1 and not self.rho > -1 / (k - 1):
            raise ValueError(f"an equicorrelation of {k} covariates must exceed -1/{k - 1} to be a correlation "
                             f"matrix, got rho = {self.rho}; raise rho or use correlation='ar1'.")

    @cached_property
    def resolved_family(self) -> Family:
        """The :class:`~privfedstat.families.Family` that ``family`` names (``get_family``, resolved once)."""
        return get_family(self.family)

    @property
    def beta_true(self) -> np.ndarray:
        return np.asarray(self.beta if self.beta is not None else DEFAULT_BETA[self.family], dtype=np.float64)

    @property
    def covariate_correlation(self) -> np.ndarray:
        """The correlation matrix R of the non-intercept covariates, shape (d - 1, d - 1)."""
        k = self.beta_true.size - 1
        lag = np.abs(np.subtract.outer(np.arange(k), np.arange(k)))
        if self.correlation == "ar1":
            return float(self.rho) ** lag
        return np.where(lag == 0, 1.0, float(self.rho))

    @property
    def label(self) -> str:
        """Text naming the design's parameters, for scenario keys (the paper's designs keep their old text)."""
        beta = "default" if self.beta is None else ",".join(f"{b:g}" for b in self.beta)
        text = f"{self.family}|beta={beta}|sc={self.sigma_c:g}"
        return text if self.rho == 0 else f"{text}|rho={self.rho:g}({self.correlation})"

    def sample(self, sizes, rng: np.random.Generator) -> FederatedData:
        """Draw a pooled data set of ``sum(sizes)`` rows and split it into clients of ``sizes``."""
        return simulate_glm(self, sizes, rng)


def simulate_glm(design: GLMDesign, sizes, rng: np.random.Generator) -> FederatedData:
    """Simulate the pooled GLM data of Section 4.1 and split it into clients of the given sizes.

    The responses are the family's draws at ``eta = X beta`` (:meth:`Family.simulate`: Bernoulli,
    Poisson, or ``eta + noise_sd * e``), made after the covariates from the same ``rng``.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    beta = design.beta_true
    N = int(sizes.sum())
    X = np.empty((N, beta.size))
    X[:, 0] = 1.0
    X[:, 1:] = design.sigma_c * rng.standard_normal((N, beta.size - 1))
    if design.rho != 0:
        X[:, 1:] = X[:, 1:] @ np.linalg.cholesky(design.covariate_correlation).T
    y = design.resolved_family.simulate(X @ beta, rng, scale=design.noise_sd)
    return FederatedData.from_pooled(X, y, sizes=sizes)
