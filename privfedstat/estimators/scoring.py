"""Scores of fitted models on held-out data: AUC, accuracy and per-observation deviance."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from ..families.base import Family

__all__ = ["auc", "score"]


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney statistic with mid-ranks for ties)."""
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        raise ValueError("AUC needs both classes in the evaluation data.")
    ranks = rankdata(score)
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def score(family: Family, Z: np.ndarray, y: np.ndarray, metric: str | None = None) -> float:
    """Score linear predictors ``Z`` against responses ``y``.

    ``metric``: ``"auc"`` (logistic), ``"accuracy"`` (logistic at 0.5, multinomial by argmax),
    ``"deviance"`` per observation (``2 (loglik_saturated - loglik) / n``; the mean squared
    residual for gaussian, twice the mean loss for huber and the classifiers) or
    ``"neg_deviance"`` (its negative). Default: AUC for logistic, accuracy for multinomial,
    ``"neg_deviance"`` otherwise, so that the default score is greater-is-better as scikit-learn's
    model selection assumes (the sign convention of its ``neg_mean_poisson_deviance`` scorer).
    """
    name = family.name
    metric = metric or {"logistic": "auc", "multinomial": "accuracy"}.get(name, "neg_deviance")
    if metric == "neg_deviance":
        return -score(family, Z, y, "deviance")
    if metric == "auc":
        if name != "logistic":
            raise ValueError("AUC needs a binary (logistic) model.")
        return auc(y, family.mean(Z))
    if metric == "accuracy":
        if name == "logistic":
            return float(np.mean((family.mean(Z) >= 0.5) == (y == 1)))
        if name == "multinomial":
            return float(np.mean(np.argmax(family.mean(Z), axis=1) == y))
        raise ValueError("accuracy needs a classifier (logistic or multinomial).")
    if metric == "deviance":
        if name == "poisson":  # 2 [y log(y / mu) - (y - mu)]
            mu = family.mean(Z)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(y > 0, y * np.log(y / mu), 0.0)
            return float(2 * np.mean(t - (y - mu)))
        if name == "gaussian":
            return float(np.mean((y - Z) ** 2))
        return float(2 * np.mean(family.loss(y, Z)))
    raise ValueError(f"unknown metric {metric!r}; use 'auc', 'accuracy', 'deviance' or 'neg_deviance'.")
