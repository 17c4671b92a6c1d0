"""Scores of fitted models on held-out data: AUC, accuracy and per-observation deviance."""

from __future__ import annotations

import numpy as np

from ..families.base import Family

__all__ = ["auc", "score"]


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney statistic with mid-ranks for ties)."""
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        raise ValueError("AUC needs both classes in the evaluation data.")
    from scipy.stats import rankdata  # here, not at module level: scipy.stats is slow to import

    ranks = rankdata(score)
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def score(family: Family, Z: np.ndarray, y: np.ndarray, metric: str | None = None) -> float:
    """Score linear predictors ``Z`` against responses ``y``.

    ``metric``: ``"auc"`` (binary classifiers: logistic), ``"accuracy"`` (classifiers:
    :meth:`Family.predict_class`, logistic at 0.5, multinomial by argmax), ``"deviance"`` per
    observation (the mean of :meth:`Family.deviance`, ``2 (loglik_saturated - loglik)``; the mean
    squared residual for gaussian, twice the mean loss for huber and the classifiers) or
    ``"neg_deviance"`` (its negative). Default: AUC for binary classifiers, accuracy for other
    classifiers, ``"neg_deviance"`` otherwise, so that the default score is greater-is-better as
    scikit-learn's model selection assumes (the sign convention of its ``neg_mean_poisson_deviance``
    scorer).
    """
    labels = family.class_labels
    if metric is None:
        metric = "neg_deviance" if labels is None else "auc" if labels.size == 2 else "accuracy"
    if metric == "neg_deviance":
        return -score(family, Z, y, "deviance")
    if metric == "auc":
        if labels is None or labels.size != 2:
            raise ValueError("AUC needs a binary classifier (logistic).")
        return auc(y, family.mean(Z))
    if metric == "accuracy":
        if labels is None:
            raise ValueError("accuracy needs a classifier (logistic or multinomial).")
        return float(np.mean(family.predict_class(Z) == y))
    if metric == "deviance":
        return float(np.mean(family.deviance(y, Z)))
    raise ValueError(f"unknown metric {metric!r}; use 'auc', 'accuracy', 'deviance' or 'neg_deviance'.")
