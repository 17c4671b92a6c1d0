"""scikit-learn interoperability: ``fit(X, y, clients=labels)`` and estimator tags.

scikit-learn is not a dependency of privfedstat: it is imported only inside
:func:`sklearn_tags`, which only scikit-learn itself calls (``__sklearn_tags__``, scikit-learn >= 1.6).

Privacy under scikit-learn's tools: every fit made by ``cross_val_score`` or ``GridSearchCV``
spends its own ``mu`` on the rows it trains on (compose them, e.g. with a privacy budget), the
choice of the best hyperparameters by held-out scores is not accounted for, and preprocessing
steps of a ``Pipeline`` (e.g. ``StandardScaler``) are fitted on the pooled raw rows, outside the
guarantee; use the estimators' ``scaling`` parameter for private rescaling.

Arrays without client labels, ``fit(X, y)``, are one client's rows (m = 1): scikit-learn's
contract (``check_estimator``, tools that pass only ``X, y``) holds, and a
:class:`~privfedstat.SingleClientWarning` says so, at every mu: the protocol then runs with one
client (its mu-GDP guarantee is central DP of the released model; FedAvg-type methods reduce to
local training), which is rarely what a federated user means.

Intercept: the columns are used as given (privfedstat has no ``fit_intercept``: the intercept is a
column of the design, as in statsmodels, so that the privacy model and the scaling can name it).
A :class:`~privfedstat.NoInterceptWarning` is given when an array ``X`` has no constant non-zero
column, e.g. after a ``StandardScaler`` step, which zeros a column of ones: add it after the scaler
(``FunctionTransformer(statsmodels.api.add_constant)``). A :class:`~privfedstat.FederatedData` is
not inspected (its rows are the clients'; a check on them would be a data-dependent, unaccounted
decision), so fits on one, as the paper's studies make, behave as they always do.

Who sees the warning: it is a function of every row of the array ``X`` (is some column the same
non-zero number on all rows?), so replacing one row can add or remove it (a column of ones with
one entry changed), and no mu covers it. It is computed in the caller's process, on the array the
caller holds and passed in full, before the rows are split among the clients, and it goes to the
caller's warning handlers (stderr, or ``logging.captureWarnings``) and nowhere else: nothing of it
is sent to the server or the clients, recorded in the ledger or stored on the estimator, and the
fit's releases are the same with or without it. Whoever reads the caller's warnings (a shared log)
learns that bit about the pooled rows; silence it with
``warnings.simplefilter("ignore", NoInterceptWarning)``, or pass a FederatedData.
"""

from __future__ import annotations

import numpy as np

from .._warn import warn
from ..data.federated import FederatedData
from ..exceptions import NoInterceptWarning, SingleClientWarning
from ..families import get_family

__all__ = ["as_federated_data", "dense_array", "sklearn_tags", "warn_single_client"]


def dense_array(X, name: str = "X") -> np.ndarray:
    """``X`` as a real numpy array: sparse matrices and complex values are refused (scikit-learn's messages)."""
    from scipy import sparse  # here, not at module level: slow to import

    if sparse.issparse(X):
        raise TypeError(f"sparse input is not supported: pass {name} as a dense array ({name}.toarray()).")
    X = np.asarray(X)
    if np.iscomplexobj(X):
        raise ValueError(f"Complex data not supported: {name} has complex values.")
    return X


def as_federated_data(X, y=None, clients=None, offset=None) -> FederatedData:
    """The :class:`FederatedData` that ``fit(X, y, clients=...)`` or ``fit(data)`` describes.

    Parameters
    ----------
    X : FederatedData or array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,), optional
        Responses; only with an array ``X``.
    clients : array-like of shape (n_samples,), optional
        Client label of each row; only with an array ``X``. Clients are ordered by sorted label.
        None with an array ``X``: one client holds every row (with a ``SingleClientWarning``).
    offset : array-like of shape (n_samples,), optional
        Offset of each row's linear predictor; only with an array ``X`` (a FederatedData holds its own).
    """
    if isinstance(X, FederatedData):
        if y is not None or clients is not None or offset is not None:
            raise TypeError("a FederatedData already holds y, the clients and any offset; call fit(data) without "
                            "y, clients or offset (build it with FederatedData.from_pooled(..., offset=...)).")
        return X
    if y is None:
        raise ValueError("fit(X, y) requires y to be passed, but the target y is None: give the response of every row.")
    X, y = dense_array(X), dense_array(y, "y")
    if X.ndim == 2 and X.shape[1] == 0:
        raise ValueError(f"0 feature(s) (shape={X.shape}) while a minimum of 1 is required: X has no columns.")
    if clients is None:
        warn(
            "fit(X, y) without clients= takes every row to be one client's (m = 1): the protocol runs with a single "
            "client. Pass clients=labels (one per row) for a federation.", SingleClientWarning)
        data = FederatedData.from_pooled(X, y, clients=np.zeros(X.shape[0] if X.ndim else 0, dtype=np.int64),
                                         offset=offset)
    else:
        data = FederatedData.from_pooled(X, y, clients=clients, offset=offset)
        warn_single_client(data, "clients=")
    if not np.any(np.all(data.X == data.X[:1], axis=0) & (data.X[0] != 0)):
        warn(
            "X has no constant column, so the model has no intercept (columns are used as given; there is no "
            "fit_intercept). Add a column of ones, after any StandardScaler step: "
            "FunctionTransformer(statsmodels.api.add_constant).", NoInterceptWarning)
    return data


def warn_single_client(data: FederatedData, given: str) -> None:
    """A :class:`~privfedstat.SingleClientWarning` when the client labels ``given`` (public) name one client only."""
    if data.n_clients == 1:
        warn(f"{given} gives every row the same client: the protocol runs with a single client (m = 1), whose "
             "guarantee is central DP of the released model. Check the labels if you meant a federation.",
             SingleClientWarning)


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
