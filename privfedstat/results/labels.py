"""The coefficients' names as messages print them: the summary's rows, a multinomial's ``response=class term``."""

from __future__ import annotations

__all__ = ["classes_of", "fitting_labels", "label"]


def classes_of(estimator, n_outputs: int) -> tuple[str, list]:
    """The response's name and its classes: ``levels_[response]`` of a ``glm()`` fit, else ``y`` and
    ``0, ..., K - 1`` (``n_outputs = K - 1`` equations, the first class the reference)."""
    response = getattr(estimator, "response_name_", "y")
    return response, getattr(estimator, "levels_", {}).get(response) or list(range(n_outputs + 1))


def label(name) -> str:
    """A coefficient name as a message prints it: an (equation, term) pair as the summary's row, ``y=b age``."""
    return " ".join(map(str, name)) if isinstance(name, tuple) else str(name)


def fitting_labels(estimator, n_params: int) -> list[str]:
    """The names of the ``n_params`` coefficients in flat fitting order (``coef_.ravel()``, C order: a term's
    equations after one another), as the summary's rows read: the ``glm()`` terms (``feature_names_in_``), a
    multinomial's ``response=class term``; ``x<j>`` for a fit without feature names."""
    features = getattr(estimator, "feature_names_in_", None)
    if features is None or not len(features) or n_params % len(features):
        return [f"x{j}" for j in range(n_params)]
    q = n_params // len(features)
    if q == 1:
        return [str(f) for f in features]
    response, classes = classes_of(estimator, q)
    return [f"{response}={c} {f}" for f in features for c in classes[1:]]
