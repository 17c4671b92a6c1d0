"""Loss families for linear-predictor M-estimation.

Every family here is a loss of the form ``rho(x, y; theta) = ell(y, x^T theta)`` (the "rho" of the
core paper, Section 2). Its per-sample gradient is ``ell'(y, z) x`` and its per-sample Hessian is
``ell''(y, z) x x^T`` with ``z = x^T theta``, so one scalar derivative per sample is all the
kernels need, and the per-sample gradient norm is ``|ell'(y, z)| * ||x||``. GLMs with canonical
link have ``ell'(y, z) = mean(z) - y``; the Huber loss shows that the same machinery covers
robust M-estimators that are not likelihoods.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Family"]


class Family:
    """Base class. Subclasses define the scalar loss ``ell(y, z)`` and its first two z-derivatives.

    Attributes
    ----------
    name : str
        Registry name (``get_family(name)``).
    code : int
        Integer that selects the family inside the numba kernels (``kernels/glm_nb.py``).
    param : float
        Family parameter passed to the kernels (Huber threshold; 0 for the others).
    """

    name: str = ""
    code: int = -1
    param: float = 0.0
    #: columns of the parameter matrix (1 for scalar-response families)
    n_outputs: int = 1
    #: curvature of the loss at linear predictor 0, ell''(y, 0) (a data-independent scale of the
    #: Hessian for standardised covariates; FedNewton's default eigenvalue floor)
    curvature_at_zero: float = 1.0
    #: sup over y and z of the loss curvature ell''(y, z) (largest eigenvalue of the per-sample
    #: Hessian factor; inf where it is unbounded, e.g. Poisson): the public smoothness constant
    #: behind ``step_size="auto"``
    max_curvature: float = 1.0
    #: whether the loss is a likelihood whose score covariance equals its Hessian at the truth
    #: (dispersion 1: logistic, Poisson, multinomial), so that ``H^-1 / N`` is a valid
    #: (model-based) covariance; False where a scale is unknown (Gaussian) or there is no
    #: likelihood (Huber): their inference uses the sandwich
    unit_dispersion: bool = False

    def loss(self, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Per-sample loss ``ell(y, z)``."""
        raise NotImplementedError

    def deriv(self, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Per-sample ``d ell / d z``; the gradient in theta is ``deriv * x``."""
        raise NotImplementedError

    def deriv2(self, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Per-sample ``d^2 ell / d z^2`` (>= 0); the Hessian in theta is ``deriv2 * x x^T``."""
        raise NotImplementedError

    def mean(self, z: np.ndarray) -> np.ndarray:
        """Mean response E[y | x] at linear predictor ``z`` (used by ``predict``)."""
        raise NotImplementedError

    def check_y(self, y: np.ndarray) -> None:
        """Raise ``ValueError`` if ``y`` lies outside the family's support."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.param == other.param  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.param))
