"""Communication cost of the four methods (Table 1 of the core paper)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._common import check_positive

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["communication_table"]

_PAPER = {
    "FedSGD": ("K = Omega(log(N d))", "O(m K d)"),
    "FedHybrid": ("K2 = Omega(log m)", "O(m K2 d)"),
    "FedAvg": ("R = O(1)", "O(m R d)"),
    "FedNewton": ("O(1)", "O(m d)"),
}


def communication_table(*, n_clients, d, n_samples=None, mu=None, n_iter=50, n_server_iter=20, n_rounds=2,
                        n_local_steps=50, newton_rounds=1) -> pd.DataFrame:
    """Table 1: upload rounds and floats sent per method, with the paper's error rates.

    Every argument broadcasts; the table has one row per method and broadcast setting.

    Parameters
    ----------
    n_clients : int or array
        m.
    d : int or array
        Number of parameters (every message is a d-vector).
    n_samples : float or array, optional
        N, for the ``error_rate`` column (omitted without it, or without ``mu``).
    mu : float or array, optional
        GDP budget per client, for ``error_rate``.
    n_iter : int or array, default 50
        FedSGD's K.
    n_server_iter : int or array, default 20
        FedHybrid's K2 (stage I adds one upload of the local estimates).
    n_rounds : int or array, default 2
        FedAvg's R.
    n_local_steps : int or array, default 50
        Local steps K of FedAvg (enters FedAvg's error rate only).
    newton_rounds : int or array, default 1
        FedAvg rounds before FedNewton's Newton step (the paper's R = 1).

    Returns
    -------
    DataFrame
        Columns: the inputs, ``method``, ``rounds`` (uploads per client, as the estimators count
        them: FedSGD K, FedHybrid K2 + 1, FedAvg R, FedNewton R + 2: its FedAvg rounds, the shared
        Hessian of its private mode and the Newton step), ``floats_per_client`` (``rounds * d``;
        FedNewton's Hessian upload carries ``d (d + 1) / 2`` floats, so its communication is O(m d^2)
        where Table 1's Algorithm 4 sends O(m d)), ``total_floats`` (``m * floats_per_client``), ``paper_rounds`` and
        ``paper_communication`` (Table 1's entries), and ``error_rate`` (Table 1's error bound with
        unit constants: FedSGD ``d/N + m d^2 log N/(mu^2 N^2)``, FedHybrid the same with log m,
        FedAvg ``d/N + m^2 d^2/N^2 + m d^2 R K/(mu^2 N^2)``, FedNewton ``d/N + m d^2/(mu^2 N^2)``).

    References
    ----------
    Core paper, Section 3.6, Table 1.
    """
    import pandas as pd
    m = check_positive(n_clients, "n_clients")
    d = check_positive(d, "d")
    K, K2 = check_positive(n_iter, "n_iter"), check_positive(n_server_iter, "n_server_iter")
    R, KL = check_positive(n_rounds, "n_rounds"), check_positive(n_local_steps, "n_local_steps")
    Rn = check_positive(newton_rounds, "newton_rounds")
    with_rate = n_samples is not None and mu is not None
    N = check_positive(n_samples, "n_samples") if with_rate else np.nan
    mu_ = check_positive(mu, "mu", allow_inf=True) if with_rate else np.nan
    m, d, K, K2, R, KL, Rn, N, mu_ = (a.ravel() for a in np.broadcast_arrays(m, d, K, K2, R, KL, Rn, N, mu_))
    for name, a in (("n_iter", K), ("n_server_iter", K2), ("n_rounds", R), ("newton_rounds", Rn), ("n_clients", m), ("d", d)):
        if np.any(a != np.rint(a)):
            raise ValueError(f"{name} must be integers, got {a}.")
    rounds = {"FedSGD": K, "FedHybrid": K2 + 1, "FedAvg": R, "FedNewton": Rn + 2}
    rounds = {k: v.astype(np.int64) for k, v in rounds.items()}
    hessian = d * (d + 1) // 2
    floats = {"FedSGD": K * d, "FedHybrid": (K2 + 1) * d, "FedAvg": R * d, "FedNewton": (Rn + 1) * d + hessian}
    with np.errstate(divide="ignore", invalid="ignore"):
        base = d / N
        priv = m * d**2 / (mu_**2 * N**2)
        rates = {
            "FedSGD": base + priv * np.log(N),
            "FedHybrid": base + priv * np.log(m),
            "FedAvg": base + m**2 * d**2 / N**2 + priv * R * KL,
            "FedNewton": base + priv,
        }
    m, d = m.astype(np.int64), d.astype(np.int64)
    frames = []
    for method, r in rounds.items():
        cols = {"method": method, "n_clients": m, "d": d}
        if with_rate:
            cols.update(n_samples=N, mu=mu_)
        cols.update(rounds=r, floats_per_client=floats[method].astype(np.int64),
                    total_floats=m * floats[method].astype(np.int64),
                    paper_rounds=_PAPER[method][0], paper_communication=_PAPER[method][1])
        if with_rate:
            cols["error_rate"] = rates[method]
        frames.append(pd.DataFrame(cols))
    return pd.concat(frames, ignore_index=True)
