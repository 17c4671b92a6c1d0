"""Data-generating processes of Section 4.1 of the core paper.

A pooled data set of N rows is drawn from a GLM with canonical link, X = [1, C] with
C_ij ~ N(0, sigma_c^2), and split across clients in the order of ``sizes``.

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

import numpy as np

from ..data.federated import FederatedData

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
    """

    family: str = "logistic"
    beta: tuple[float, ...] | None = None
    sigma_c: float = 1.0
    noise_sd: float = 1.0

    def __post_init__(self) -> None:
        if self.family not in DEFAULT_BETA:
            raise ValueError(f"family must be one of {sorted(DEFAULT_BETA)}, got {self.family!r}.")
        if not self.sigma_c > 0:
            raise ValueError(f"sigma_c must be > 0, got {self.sigma_c}.")

    @property
    def beta_true(self) -> np.ndarray:
        return np.asarray(self.beta if self.beta is not None else DEFAULT_BETA[self.family], dtype=np.float64)

    def sample(self, sizes, rng: np.random.Generator) -> FederatedData:
        """Draw a pooled data set of ``sum(sizes)`` rows and split it into clients of ``sizes``."""
        return simulate_glm(self, sizes, rng)


def simulate_glm(design: GLMDesign, sizes, rng: np.random.Generator) -> FederatedData:
    """Simulate the pooled GLM data of Section 4.1 and split it into clients of the given sizes."""
    sizes = np.asarray(sizes, dtype=np.int64)
    beta = design.beta_true
    N = int(sizes.sum())
    X = np.empty((N, beta.size))
    X[:, 0] = 1.0
    X[:, 1:] = design.sigma_c * rng.standard_normal((N, beta.size - 1))
    eta = X @ beta
    if design.family == "logistic":
        y = (rng.random(N) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float64)
    elif design.family == "poisson":
        y = rng.poisson(np.exp(eta)).astype(np.float64)
    else:
        y = eta + design.noise_sd * rng.standard_normal(N)
    return FederatedData.from_pooled(X, y, sizes=sizes)
