"""Exception and warning classes of privfedstat.

Every warning the package emits has its own class so that users can filter
them precisely (``warnings.simplefilter("error", PrivacyLeakWarning)``).

:class:`NotFittedError` is built on first access (module ``__getattr__``, PEP 562) so that importing the package
does not import scikit-learn; raisers read it at raise time (``exceptions.NotFittedError``).
"""

from __future__ import annotations

__all__ = [
    "PrivacyLeakWarning", "ConvergenceWarning", "PrivacyNoiseWarning", "IllConditionedWarning", "DivergenceError",
    "NotFittedError",  # noqa: F822 (built on first access, by __getattr__)
    "BudgetExceededError", "ClientFailureError", "SingleClientWarning", "NoInterceptWarning",
    "ClippingBiasWarning", "OverdispersionWarning", "UnsupportedModelError",
]


class PrivacyLeakWarning(UserWarning):
    """A data-dependent quantity is used without being accounted for in the privacy ledger.

    Emitted, for example, by ``clip="paper"``: the clipping bound is the maximum over clients of
    the 90th percentile of per-sample gradient norms, computed from the raw data and not
    privatized (Section 4.1 of the core paper). The run's ledger then reports
    ``is_private == False``.
    """


class ConvergenceWarning(UserWarning):
    """An iterative procedure ended far from a stationary point.

    Judged from released values only (``converged_``; see :class:`~privfedstat.FederatedEstimator`);
    the message names the setting to change.
    """


class PrivacyNoiseWarning(UserWarning):
    """Privacy noise dominates: a coefficient's noise sd exceeds its sampling-SE proxy, or a site is
    too small for the requested mu (the message gives the minimum size). From public noise levels."""


class IllConditionedWarning(UserWarning):
    """A released Hessian is ill-conditioned or not positive definite (collinear columns or noise)."""


class ClippingBiasWarning(UserWarning):
    """Many per-sample gradients are clipped at the estimate (a private count): the fit solved the
    clipped estimating equation, whose root can lie further from the MLE than the intervals allow."""


class OverdispersionWarning(UserWarning):
    """A count model's Pearson dispersion (a private release at the estimate) is well above 1: the counts vary
    more than the model's law allows, so its model-based standard errors and intervals are too narrow."""


class SingleClientWarning(UserWarning):
    """``fit(X, y)`` was given no client labels: every row is taken to be one client's (m = 1)."""


class NoInterceptWarning(UserWarning):
    """The design matrix passed as an array has no constant column, so the model has no intercept.

    Computed from the caller's rows in the caller's process and seen only by the caller's warning handlers (one
    replaced row can flip it; nothing of it is released): see :mod:`privfedstat.data.inputs`.
    """


class DivergenceError(ValueError):
    """Iterates became non-finite or exploded; the message names the setting to change."""


class UnsupportedModelError(ValueError):
    """The data cannot support the model at this mu: after its first released summaries the fit found that the
    rest of its budget could not bring it to an optimum, and stopped (spending little) instead of returning
    withheld intervals. The message gives the numbers and what the data can support; ``privacy_sd_ratio`` (the
    planned privacy sd of each coefficient over its sampling SE, fitting order) and ``mu_factor`` (how many times
    larger mu, or the rows per site, would have to be at least) hold them; ``spent`` is the mu per client the fit
    released before it stopped (what its ledger, and a :class:`~privfedstat.PrivacyBudget`, charge).
    """

    def __init__(self, message: str, *, privacy_sd_ratio=None, mu_factor: float = float("nan"),
                 spent: float = float("nan")) -> None:
        super().__init__(message)
        self.privacy_sd_ratio = privacy_sd_ratio
        self.mu_factor = mu_factor
        self.spent = spent


class BudgetExceededError(ValueError):
    """A fit would spend more than is left of its :class:`~privfedstat.PrivacyBudget`.

    Raised before the fit draws any noise: nothing was released and nothing was charged.
    """


class ClientFailureError(RuntimeError):
    """A client failed while answering a request and the fit's ``on_client_failure`` is ``"raise"``
    (or every client failed)."""


def _not_fitted_error() -> type[Exception]:
    """The class :class:`NotFittedError`, built once with scikit-learn's class as its base where installed."""
    try:  # optional: where scikit-learn is installed its tools (check_is_fitted, estimator checks) catch its class
        from sklearn.exceptions import NotFittedError as _SklearnNotFittedError
    except ImportError:
        bases: tuple[type, ...] = (ValueError, AttributeError)  # the bases of scikit-learn's class
    else:
        bases = (_SklearnNotFittedError,)

    class NotFittedError(*bases):
        """An estimator was used before ``fit`` was called.

        A subclass of ``sklearn.exceptions.NotFittedError`` where scikit-learn is installed, else of
        ``ValueError`` and ``AttributeError``, the bases of scikit-learn's class: ``except`` clauses
        catch it the same way with or without scikit-learn.
        """

        __qualname__ = "NotFittedError"  # a module-level name for pickle and reprs

    return NotFittedError


def __getattr__(name: str) -> type[Exception]:
    if name == "NotFittedError":
        # then a plain module attribute; setdefault keeps one class even when threads race here
        return globals().setdefault(name, _not_fitted_error())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"NotFittedError"})
