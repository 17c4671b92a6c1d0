"""Evaluation metrics of composite (penalised) fits: stationarity, sparsity and support recovery.

FedNMap's paper reports the natural-map stationarity ``||F_nat^gamma(x_t)||^2`` (computed with the full
gradient) and Hoyer's sparsity; for GLMs with a sparse truth the support recovery (precision and
recall) says how well the penalty selects. The loss-based metrics read the raw data
(an experimenter's evaluation of a fit, not part of any protocol) on the scale of ``data``: evaluate a fit
made with ``scaling`` on the rescaled columns (``estimator.scaler_.transform(data)``) with its fitting-scale
penalty ``penalty_`` and coefficients, or fit without scaling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..data.federated import FederatedData
from ..families import Family, get_family
from ..federation.oracle import make_oracle
from ..penalty import ElasticNet

__all__ = ["pooled_loss_gradient", "stationarity", "hoyer_sparsity", "support_recovery", "SupportRecovery"]


def pooled_loss_gradient(theta, data: FederatedData, family: str | Family) -> tuple[float, np.ndarray]:
    """f(theta) and grad f(theta) for ``f = sum_i (n_i / N) f_i``, the mean loss over every client's rows.

    Parameters
    ----------
    theta : array-like of shape (n_params,) or ``coef_``'s shape
    data : FederatedData
    family : str or Family

    Returns
    -------
    loss : float
    gradient : ndarray of shape (n_params,)
    """
    oracle = make_oracle(data, get_family(family))
    theta = np.asarray(theta, dtype=np.float64).ravel()
    w = data.sizes / data.sizes.sum()
    return float(w @ oracle.losses(theta)), w @ oracle.clipped_gradients(theta, math.inf)


def stationarity(theta, data: FederatedData, family: str | Family, penalty: ElasticNet, gamma: float) -> float:
    """``||F_nat^gamma(theta)||^2``, ``F_nat^gamma(x) = (x - prox_{gamma phi}(x - gamma grad f(x))) / gamma``, full gradient.

    FedNMap's stationarity measure (Figs. 2-5 of the paper): 0 exactly at the stationary points of
    ``f + phi`` (**[I]**: the standard definition; the paper's figures do not restate it).
    """
    _, grad = pooled_loss_gradient(theta, data, family)
    return float(np.sum(penalty.natural_map(np.asarray(theta, dtype=np.float64).ravel(), grad, gamma) ** 2))


def hoyer_sparsity(x) -> float:
    """Hoyer's sparsity ``(sqrt(p) - ||x||_1 / ||x||_2) / (sqrt(p) - 1)`` of a vector of p > 1 entries.

    1 for a vector with one non-zero entry, 0 for a constant-magnitude one (**[I]**: the paper's
    formula lost its square roots in extraction; these are Hoyer's (2004)). 0 for x = 0 by convention.

    References
    ----------
    Hoyer (2004), Non-negative matrix factorization with sparseness constraints, JMLR 5.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size < 2:
        raise ValueError(f"Hoyer's sparsity needs at least 2 entries, got {x.size}.")
    scale = float(np.max(np.abs(x)))
    if scale == 0:
        return 0.0
    x = x / scale  # no overflow or underflow in the norms
    root = math.sqrt(x.size)
    return float((root - np.sum(np.abs(x)) / np.linalg.norm(x)) / (root - 1.0))


@dataclass(frozen=True)
class SupportRecovery:
    """How a fit's support ``{j : coef_j != 0}`` matches the true one.

    Attributes
    ----------
    precision : float
        Share of the selected coefficients that are truly non-zero (1 when nothing is selected).
    recall : float
        Share of the truly non-zero coefficients that are selected (1 when the truth is empty).
    selected, true : int
        Sizes of the two supports.
    """

    precision: float
    recall: float
    selected: int
    true: int


def support_recovery(coef, truth, *, ignore=(), tol: float = 0.0) -> SupportRecovery:
    """Precision and recall of the support of ``coef`` (entries with ``|coef| > tol``) against ``truth``'s non-zeros.

    Parameters
    ----------
    coef, truth : array-like of the same shape
    ignore : tuple of int, default ()
        Flat indices left out (the unpenalised intercept).
    tol : float, default 0.0
        Entries of ``coef`` at most ``tol`` in size count as 0.
    """
    coef = np.asarray(coef, dtype=np.float64).ravel()
    truth = np.asarray(truth, dtype=np.float64).ravel()
    if coef.shape != truth.shape:
        raise ValueError(f"coef and truth must have the same shape, got {coef.shape} and {truth.shape}.")
    keep = np.ones(coef.size, dtype=bool)
    keep[list(ignore)] = False
    selected, true = np.abs(coef[keep]) > tol, truth[keep] != 0
    hits = int(np.sum(selected & true))
    n_sel, n_true = int(selected.sum()), int(true.sum())
    return SupportRecovery(hits / n_sel if n_sel else 1.0, hits / n_true if n_true else 1.0, n_sel, n_true)
