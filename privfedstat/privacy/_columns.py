"""How :class:`~privfedstat.privacy.ledger.PrivacyLedger` stores a release's per-client vectors (its "Storage").

A vector is kept as a read-only copy, or, when all but a few of its entries are zero (a Poisson round), as those
entries and their positions; the ledger shares one stored column between the releases whose vectors are equal bit
for bit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .ledger import Release

#: a stored vector with at most this fraction of non-zero entries keeps only those
_SPARSE_FRACTION = 0.125


def _column(values: np.ndarray) -> _Column:
    """A vector as stored: its non-zero entries when they are few (-0.0 is kept as it came), else a read-only copy."""
    if np.count_nonzero(values) <= _SPARSE_FRACTION * values.size:
        index = np.flatnonzero((values != 0) | np.signbit(values))
        if index.size <= _SPARSE_FRACTION * values.size:
            kept = values[index]
            index.flags.writeable = kept.flags.writeable = False
            return _Column(values.size, index, kept)
    kept = values.copy()
    kept.flags.writeable = False
    return _Column(values.size, None, kept)


class _Column(NamedTuple):
    """One stored per-client vector of length ``size``: ``values`` at positions ``index`` and 0 elsewhere, or (``index``
    None) ``values`` itself, read-only and possibly shared with other releases."""

    size: int
    index: np.ndarray | None
    values: np.ndarray

    def dense(self) -> np.ndarray:
        if self.index is None:
            return self.values
        out = np.zeros(self.size)
        out[self.index] = self.values
        out.flags.writeable = False
        return out


class _Entry(NamedTuple):
    """A recorded release: its labels (a :class:`Release` without vectors), its stored vectors and its worst client's mu."""

    labels: Release
    sensitivity: _Column
    sigma: _Column
    weights: _Column | None
    mu_max: float

    def release(self) -> Release:
        w = self.weights
        return replace(self.labels, sensitivity=self.sensitivity.dense(), sigma=self.sigma.dense(),
                       weights=None if w is None else w.dense())
