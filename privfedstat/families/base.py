"""Loss families for linear-predictor M-estimation.

Every family here is a loss of the form ``rho(x, y; theta) = ell(y, x^T theta)`` (the "rho" of the
core paper, Section 2). Its per-sample gradient is ``ell'(y, z) x`` and its per-sample Hessian is
``ell''(y, z) x x^T`` with ``z = x^T theta``, so one scalar derivative per sample is all the
kernels need, and the per-sample gradient norm is ``|ell'(y, z)| * ||x||``. GLMs with canonical
link have ``ell'(y, z) = mean(z) - y``; the Huber loss shows that the same machinery covers
robust M-estimators that are not likelihoods.

Everything the rest of the package needs to know about a family is an attribute or a method of
:class:`Family` (its response law, dispersion, class labels, deviance, ...): no code outside this
package switches on a family's name, so a new family is added by implementing this interface and
registering it in ``FAMILIES``.
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
    #: link function g with g(E[y | x]) = z, as statsmodels names it ("logit", "log", "identity");
    #: ``exposure=`` (an offset log E) needs the log link
    link: str = "identity"
    #: columns of the parameter matrix (1 for scalar-response families)
    n_outputs: int = 1
    #: curvature of the loss at linear predictor 0, ell''(y, 0) (a data-independent scale of the
    #: Hessian for standardised covariates; FedNewton's default eigenvalue floor)
    curvature_at_zero: float = 1.0
    #: sup over y and z of the loss curvature ell''(y, z) (largest eigenvalue of the per-sample
    #: Hessian factor; inf where it is unbounded, e.g. Poisson): the public smoothness constant
    #: behind ``step_size="auto"``
    max_curvature: float = 1.0
    #: whether the loss is the negative log-likelihood of a GLM with canonical link: a response law
    #: y | x that :meth:`simulate` draws from and :meth:`response_quadrature` integrates, with
    #: ``Var(y | x) = dispersion * ell''(y, z)`` (so the score covariance at the truth is the
    #: dispersion times the Hessian); False for M-estimators that are not likelihoods (Huber)
    likelihood: bool = False
    #: whether that law has a free dispersion (Gaussian: the residual variance), unknown to the
    #: loss; :meth:`simulate` and :meth:`response_quadrature` then take its square root as ``scale``
    has_dispersion: bool = False
    #: whether ``glm()`` reads the response as a categorical column whose declared levels are the
    #: classes (the family is then built with ``n_classes`` = their number)
    response_levels: bool = False
    #: whether Newton-Raphson starts at the least-squares fit rather than at 0: for losses whose
    #: curvature vanishes away from the data (Huber beyond its threshold), where a start at 0 may
    #: see no curvature at all
    start_at_least_squares: bool = False
    #: whether the loss depends on ``y`` and ``z`` only through the residual ``y - z`` and the response may be
    #: shifted and rescaled (Gaussian, Huber): :meth:`for_response_scale` then gives the family of the
    #: rescaled response with the same estimator, so a private scaling can bring a response far from 0
    #: (test scores around 600) to the fitting scale
    location: bool = False
    #: whether the data can vary more than the law allows (counts: a Poisson model of overdispersed counts), so that
    #: the inference releases a Pearson dispersion with the model-based covariance and warns where it is above 1;
    #: a binary response cannot be overdispersed, and a family with a free dispersion estimates it
    overdispersion: bool = False

    def for_response_scale(self, scale: float) -> Family:
        """The family whose fit to ``y / scale`` is the fit of this family to ``y``, divided by ``scale``.

        Defined for :attr:`location` families (a least-squares loss is only multiplied by ``scale^2``;
        Huber's threshold is in units of the response and is divided by it).
        """
        raise ValueError(f"the {self.name} family does not allow a rescaled response (it is not a location family).")

    @property
    def class_labels(self) -> np.ndarray | None:
        """Class labels of a classifier family (``[0, 1]``; multinomial ``0, ..., K-1``), None otherwise.

        The labels come from the family, never from the data: which labels occur in the data is private.
        """
        return None

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

    def deviance(self, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Per-sample unit deviance ``2 (loglik_saturated - loglik)`` at linear predictor ``z``.

        The default, ``2 ell(y, z)``, is the deviance of a likelihood whose saturated fit has
        log-likelihood 0 (logistic, multinomial), and twice the loss for M-estimators (Huber).
        """
        return 2.0 * self.loss(y, z)

    def simulate(self, z: np.ndarray, rng: np.random.Generator, scale: float | None = None) -> np.ndarray:
        """Responses drawn from the family's law at linear predictors ``z`` (float64, one per row).

        Parameters
        ----------
        z : ndarray of shape (n,), or (n, n_outputs) for the multinomial family
        rng : numpy.random.Generator
            Every draw comes from it, in one call per family (reproducible from the seed).
        scale : float, optional
            Square root of the dispersion (residual standard deviation), needed by families with
            ``has_dispersion``; ignored by the others.
        """
        raise ValueError(f"the {self.name} family is not a likelihood: it has no response law to simulate from.")

    def response_quadrature(self, z: np.ndarray, scale: float | None = None,
                            n_nodes: int = 40) -> tuple[np.ndarray, np.ndarray]:
        """Nodes and weights of the law of y given linear predictors ``z`` (shape as in :meth:`simulate`).

        Returns values ``Y`` and weights ``W``, each of shape (n, q), with ``W`` summing to 1 per
        row, so that ``E[f(y) | z] ~ sum_k W[:, k] f(Y[:, k])`` (exact for discrete laws up to a
        truncated tail; Gauss-Hermite with ``n_nodes`` nodes for continuous ones). ``scale`` as in
        :meth:`simulate`. The default serves classifier likelihoods: the class labels with their
        probabilities.
        """
        if not self.likelihood or self.class_labels is None:
            raise ValueError(f"the {self.name} family is not a likelihood: it has no response law to integrate.")
        P = self.class_probabilities(z)
        return np.broadcast_to(self.class_labels, P.shape), P

    def class_probabilities(self, z: np.ndarray) -> np.ndarray:
        """Probabilities of the classes :attr:`class_labels`, shape (n, K) (classifier families only)."""
        raise ValueError(f"class probabilities are for classifier families, and the {self.name} family is not one.")

    def predict_class(self, z: np.ndarray) -> np.ndarray:
        """Most probable class label of each row (classifier families only)."""
        raise ValueError(f"class predictions are for classifier families, and the {self.name} family is not one.")

    def check_y(self, y: np.ndarray) -> None:
        """Raise ``ValueError`` if ``y`` lies outside the family's support."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.param == other.param  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.param))
