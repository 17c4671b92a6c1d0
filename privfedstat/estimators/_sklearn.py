"""scikit-learn interoperability: ``fit(X, y, clients=labels)`` and estimator tags.

scikit-learn is not a dependency of privfedstat: it is imported only inside
:func:`sklearn_tags`, which only scikit-learn itself calls (``__sklearn_tags__``, scikit-learn >= 1.6).

Privacy under scikit-learn's tools: every fit made by ``cross_val_score`` or ``GridSearchCV``
spends its own ``mu`` on the rows it trains on (compose them, e.g. with a privacy budget), the
choice of the best hyperparameters by held-out scores is not accounted for, and preprocessing
steps of a ``Pipeline`` (e.g. ``StandardScaler``) are fitted on the pooled raw rows, outside the
guarantee; use the estimators' ``scaling`` parameter for private rescaling.
"""

from __future__ import annotations

from ..data.federated import FederatedData
from ..families import get_family

__all__ = ["as_federated_data", "sklearn_tags"]


def as_federated_data(X, y=None, clients=None, offset=None) -> FederatedData:
    """The :class:`FederatedData` that ``fit(X, y, clients=...)`` or ``fit(data)`` describes.

    Parameters
    ----------
    X : FederatedData or array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,), optional
        Responses; only with an array ``X``.
    clients : array-like of shape (n_samples,), optional
        Client label of each row; only with an array ``X``. Clients are ordered by sorted label.
    offset : array-like of shape (n_samples,), optional
        Offset of each row's linear predictor; only with an array ``X`` (a FederatedData holds its own).
    """
    if isinstance(X, FederatedData):
        if y is not None or clients is not None or offset is not None:
            raise TypeError("a FederatedData already holds y, the clients and any offset; call fit(data) without "
                            "y, clients or offset (build it with FederatedData.from_pooled(..., offset=...)).")
        return X
    if clients is None:
        raise TypeError(
            f"fit expects a FederatedData, or arrays with a client label per row, fit(X, y, clients=labels); "
            f"got {type(X).__name__} without clients. Build data with FederatedData.from_arrays([(X1, y1), ...]) "
            "or FederatedData.from_pooled(X, y, sizes=...)."
        )
    if y is None:
        raise TypeError("fit(X, y, clients=labels) needs y, the response of every row.")
    return FederatedData.from_pooled(X, y, clients=clients, offset=offset)


def sklearn_tags(estimator):
    """scikit-learn tags of ``estimator``: a classifier for the logistic and multinomial families,
    a regressor otherwise (``predict`` returns the mean response E[y | x] in both cases)."""
    from sklearn.utils import ClassifierTags, RegressorTags, Tags, TargetTags

    classes = get_family(estimator.family).class_labels
    tags = Tags(estimator_type="regressor" if classes is None else "classifier", target_tags=TargetTags(required=True))
    if classes is None:
        tags.regressor_tags = RegressorTags()
    else:
        tags.classifier_tags = ClassifierTags(multi_class=classes.size > 2)
    return tags
