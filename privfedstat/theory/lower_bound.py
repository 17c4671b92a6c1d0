"""Minimax lower bound for mu-fed-GDP federated estimation (Theorem 3.10)."""

from __future__ import annotations

import numpy as np

from ._clients import Clients
from ._common import as_float, check_positive

__all__ = ["effective_sample_size", "lower_bound"]


def _check_mu(mu) -> np.ndarray:
    mu = as_float(mu, "mu")
    if np.any(~((mu > 0) & (mu < 1))):
        raise ValueError(
            "the lower bound of Theorem 3.10 is stated for 0 < mu < 1 only (its proof expands "
            f"delta(epsilon) for small mu with epsilon = mu sqrt(2 log(1/mu))); got mu = {mu.ravel()[:3]}."
        )
    return mu


def effective_sample_size(*, n, mu, d, C1=1.0, C2=1.0):
    """Per-client effective sample size under mu-fed-GDP: ``min(C1 n, C2 n^2 mu^2 log(1/mu)/d)``.

    Valid for 0 < mu < 1 only; raises ``ValueError`` otherwise.

    Parameters
    ----------
    n : float or array
        Client sample size(s) n_i.
    mu : float or array
        GDP budget per client, 0 < mu < 1.
    d : int or array
        Number of parameters.
    C1, C2 : float or array, default 1
        The theorem's constants (non-private and private information per sample).

    Returns
    -------
    ndarray
        Broadcast of the inputs.

    Notes
    -----
    As mu -> 1 the factor log(1/mu) -> 0 and the privacy-limited size vanishes: an artefact of the
    proof's small-mu expansion, so the bound is informative only for mu bounded away from 1 (see
    :func:`lower_bound`).

    References
    ----------
    Core paper, Theorem 3.10 (the denominator of the bound) and Remark 3.1.
    """
    mu = _check_mu(mu)
    n = check_positive(n, "n")
    d = check_positive(d, "d")
    C1, C2 = check_positive(C1, "C1"), check_positive(C2, "C2")
    return np.minimum(C1 * n, C2 * n**2 * mu**2 * np.log(1.0 / mu) / d)


def lower_bound(*, mu, d, sizes=None, n_samples=None, n_clients=None, C1=1.0, C2=1.0):
    """Minimax lower bound ``d / sum_i min(C1 n_i, C2 n_i^2 mu^2 log(1/mu)/d)`` (Theorem 3.10).

    Holds for every mu-fed-GDP federated estimator with any number of client-server rounds
    (each round using fresh samples, Remark 3.11), over GLMs satisfying Assumptions 1-4.

    Parameters
    ----------
    mu : float or array
        GDP budget per client; **0 < mu < 1** (``ValueError`` otherwise).
    d : int or array
        Number of parameters.
    sizes : array of shape (..., m), optional
        Client sizes (last axis = clients; ``nan`` pads). Or ``n_samples`` and ``n_clients`` for m
        equal clients of N/m samples.
    C1, C2 : float or array, default 1
        Constants of the theorem.

    Returns
    -------
    ndarray

    Notes
    -----
    Read from the extraction as ``d / sum_i (C1 n_i ^ C2 (n_i^2 mu^2 log(mu^-1)/d))``; the proof
    ends with ``d^2 / sum_i (C n_i^2 mu^2 log(1/mu) ^ C d n_i)``, the same expression.
    With C = C_B = C1 = C2 = 1, tau1 = tau2 = 1 and trace(Sigma) = d, the bound is below
    FedSGD's upper bound (eq. (2)) whenever ``log(1/mu) log(dN) >= 0.012`` -- for all mu <= 0.98
    when dN >= 2 -- but not as mu -> 1, where log(1/mu) -> 0 (an artefact of the small-mu proof).

    References
    ----------
    Core paper, Theorem 3.10.
    """
    mu = _check_mu(mu)
    d = check_positive(d, "d")
    cl = Clients(sizes, n_samples, n_clients)
    eff = effective_sample_size(n=cl.n, mu=cl.x(mu), d=cl.x(d), C1=cl.x(C1), C2=cl.x(C2))
    return d / cl.sum(eff)
