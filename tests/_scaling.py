"""Test helper: run :meth:`Scaler.private` on a FederatedData with a stand-in for the clients' noisy counts."""

from __future__ import annotations

import numpy as np

from privfedstat.federation.clients import RESPONSE
from privfedstat.fitting.scaling import Scaler


def private_scaler(config, data, release, mu: float, family=None) -> Scaler:
    """``Scaler.private`` with the clients' ``column_count`` verb played by ``release(counts, mu_q, stage)``
    (per-client counts of shape (n_clients, 1) in, noisy counts out), summed as the server does; the response is
    located too where the ``family`` allows it."""

    def noisy_count(column, threshold, center, mu_q, stage) -> float:
        x = data.y if column == RESPONSE else data.X[:, column]
        if center is not None:
            with np.errstate(over="ignore"):
                x = np.abs(x - center)
        counts = np.add.reduceat((x <= threshold).astype(np.float64), data.offsets[:-1])
        return float(np.asarray(release(counts[:, None], mu_q, stage)).sum(axis=0)[0])

    return Scaler.private(config, noisy_count, data.n_samples, data.n_clients, data.n_features, mu, family)
