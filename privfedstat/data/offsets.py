"""Offsets of the linear predictor, ``z = x^T theta + o``, given as ``offset=`` and/or ``exposure=``.

``exposure`` ``E > 0`` enters as ``o = log(E)`` (a Poisson rate model: ``E[y] = E exp(x^T theta)``),
as in statsmodels' ``GLM(..., offset=, exposure=)``; both together add. As there, exposure is
for the log link (the Poisson family) only; ``offset`` is for every scalar-response family. The fit sees the offset
through :class:`~privfedstat.data.federated.FederatedData` (the kernels add it to each row's
linear predictor); :func:`prediction_offset` finds the new rows' offset for ``predict`` and ``score``.
"""

from __future__ import annotations

import numpy as np

from ..data.federated import FederatedData
from ..families import Family

__all__ = ["combine_offset", "prediction_offset"]


def combine_offset(offset, exposure, n: int, family: Family | type[Family]) -> np.ndarray | None:
    """``offset + log(exposure)`` for ``n`` rows, validated; None when neither is given.

    Parameters
    ----------
    offset : array-like of shape (n,) or None
        Finite offsets ``o_j``.
    exposure : array-like of shape (n,) or None
        Finite exposures ``E_j > 0``.
    n : int
        Number of rows.
    family : Family or Family subclass
        ``exposure`` needs a family with the log link (``link == "log"``: Poisson).

    Returns
    -------
    ndarray of shape (n,) or None

    Raises
    ------
    ValueError
        On a wrong length, a missing or non-finite value, or a non-positive exposure (the message
        counts such rows and never shows a value).
    """
    if offset is None and exposure is None:
        return None
    if exposure is not None and family.link != "log":
        raise ValueError(f"exposure is for the log link (family='poisson'), not {family.name!r}: use offset= "
                         "(e.g. offset=np.log(exposure) if that is what you mean).")
    total = np.zeros(n)
    for name, values in (("offset", offset), ("exposure", exposure)):
        if values is None:
            continue
        try:
            a = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be numbers, one per row.") from None
        if a.shape != (n,):
            raise ValueError(f"{name} must have one value per row ({n}), got shape {a.shape}.")
        bad = int(np.count_nonzero(~np.isfinite(a)))
        if bad:
            raise ValueError(f"{name}: {bad} row(s) have a missing or non-finite value; remove or impute them.")
        if name == "exposure":
            bad = int(np.count_nonzero(a <= 0))
            if bad:
                raise ValueError(f"exposure must be > 0 (it enters as log(exposure)); {bad} row(s) are not.")
            a = np.log(a)
        total += a
    return total


def prediction_offset(est, X, n: int, offset, exposure) -> np.ndarray | None:
    """The offset of ``n`` new rows ``X`` for ``predict`` / ``score`` of the fitted estimator ``est``.

    In order: ``offset=`` / ``exposure=`` as given; a FederatedData's own offset; for a ``glm()``
    fit whose offset and exposure were columns (``offset_columns_``), the same columns of a
    DataFrame ``X``. A model fitted with an offset (``has_offset_``) refuses rows without one:
    predicting at ``o = 0`` would be silently wrong (a rate instead of a count).
    """
    import pandas as pd
    o = combine_offset(offset, exposure, n, est.family_)
    if o is None and isinstance(X, FederatedData):
        o = X.offset
    columns = getattr(est, "offset_columns_", None)
    if o is None and isinstance(X, pd.DataFrame) and columns:
        missing = [c for c in columns.values() if c not in X.columns]
        if missing:
            raise ValueError(f"the model's offset column(s) {missing} are not in the data; add them or pass "
                             "offset= / exposure= for the new rows.")
        o = combine_offset(*(None if columns.get(k) is None else X[columns[k]].to_numpy()
                             for k in ("offset", "exposure")), n, est.family_)
    if o is not None and est.family_.response_levels:
        raise ValueError("the multinomial family takes no offset; predict without offset= / exposure=.")
    if o is None and getattr(est, "has_offset_", False):
        raise ValueError("this model was fitted with an offset (offset= or exposure=): give the new rows' offset= "
                         "or exposure= (zeros for offset, ones for exposure if that is what you mean).")
    return o
