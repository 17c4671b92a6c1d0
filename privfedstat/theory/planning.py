"""Planning rules from Section 3: iteration counts (Theorems 3.2, 3.3, 3.5, 3.7) and weights (eq. (2))."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._clients import Clients
from ._common import as_float, check_positive, dvlog, log_rho

__all__ = ["recommended_iterations", "optimal_weights", "Iterations"]


@dataclass(frozen=True)
class Iterations:
    """Iteration counts recommended by the theorems (rounded up to integers, as float arrays).

    Attributes
    ----------
    fedsgd : ndarray
        K = 2 log(dN)/log(rho) (Theorem 3.2).
    fedavg_local : ndarray
        FedAvg's local K >= C log(dN)/log(rho) (Theorems 3.3, 3.7) with the given C.
    fedhybrid_server : ndarray or None
        K2 = 2 log(m)/log(rho) (Theorem 3.5); None without the number of clients.
    fedhybrid_local : ndarray or None
        K1i = 4 log(n_i)/log(rho) per client (Theorem 3.5), shape of ``sizes``; None without sizes.
    contraction : ndarray
        The per-step contraction 1 - tau1/(3 tau2) that the counts are computed from.
    """

    fedsgd: np.ndarray
    fedavg_local: np.ndarray
    fedhybrid_server: np.ndarray | None
    fedhybrid_local: np.ndarray | None
    contraction: np.ndarray


def recommended_iterations(*, tau1, tau2, d, n_samples=None, sizes=None, n_clients=None, C=2.0) -> Iterations:
    """Iteration counts of Theorems 3.2, 3.3/3.7 and 3.5, rounded up.

    Parameters
    ----------
    tau1, tau2 : float or array
        Strong convexity and smoothness constants, 0 < tau1 <= tau2 (e.g. from
        :func:`problem_constants`). The counts make ``(1 - tau1/(3 tau2))^K`` small; the theorems
        assume a step size in [1/(2 tau2), 9/(10 tau2)].
    d : int or array
        Number of parameters.
    n_samples : float or array, optional
        N. Taken from ``sizes`` when those are given.
    sizes : array of shape (..., m), optional
        Client sizes (last axis = clients): gives N, m and the per-client K1i.
    n_clients : int or array, optional
        m (for K2) when ``sizes`` is not given.
    C : float or array, default 2
        The constant of Theorems 3.3/3.7's ``K >= C log(dN)/log(rho)``; 2 matches Theorem 3.2's K.

    Returns
    -------
    Iterations

    References
    ----------
    Core paper, Theorems 3.2, 3.3, 3.5, 3.7 and Table 1.
    """
    lr = log_rho(tau1, tau2)
    d = check_positive(d, "d")
    C = check_positive(C, "C")
    local = None
    if sizes is not None:
        cl = Clients(sizes)
        N, m = cl.N, cl.m
        local = np.where(cl.mask, np.ceil(4.0 * np.log(cl.n) / cl.x(lr)), np.nan)
    else:
        if n_samples is None:
            raise TypeError("give n_samples (N) or sizes.")
        N = check_positive(n_samples, "n_samples")
        m = None if n_clients is None else check_positive(n_clients, "n_clients")
    K = np.ceil(2.0 * np.log(d * N) / lr)
    Kavg = np.ceil(C * np.log(d * N) / lr)
    K2 = None if m is None else np.ceil(2.0 * np.log(m) / lr)
    t1, t2 = as_float(tau1, "tau1"), as_float(tau2, "tau2")
    return Iterations(K, Kavg, K2, local, 1.0 - t1 / (3.0 * t2))


def optimal_weights(*, sizes, mu, d, n_iter, form: str = "fedsgd", trace_sigma=None, C_B=1.0, clip=None):
    """Aggregation weights minimising the FedSGD (eq. (2)) or FedNewton (Theorem 3.9) bound.

    Parameters
    ----------
    sizes : array of shape (..., m)
        Client sizes (last axis = clients; ``nan`` pads and gets weight ``nan``).
    mu : float or array
        GDP budget per client available to the gradient rounds (``inf``: weights n_i/N).
    d : int or array
        Number of parameters.
    n_iter : int or array
        K, the number of noisy rounds (K2 for FedHybrid's stage II).
    form : {"fedsgd", "fednewton"}
        * ``"fedsgd"`` -- eq. (2): ``w_i ~ (trace(Sigma)/n_i + C_B^2 d (d v log N) K/(mu^2 n_i^2))^-1``.
          With ``clip`` (B) given, the exact variance of client i's message is used instead,
          ``trace(Sigma)/n_i + d sigma_i^2`` with ``sigma_i = 2 B sqrt(K)/(mu n_i)``; with
          ``trace_sigma = B^2`` this is the estimators' ``weights="optimal"``.
        * ``"fednewton"`` -- Theorem 3.9: ``w_i ~ (trace(Sigma)/n_i + C_B^2 d^2 K/(mu^2 n_i^2))^-1``.
    trace_sigma : float or array, optional
        trace(Sigma); default d (Remark 3.3: replace it by C d).
    C_B : float or array, default 1
        Clipping constant (B = C_B sqrt(d v log N)); ignored when ``clip`` is given.
    clip : float or array, optional
        A numeric clipping bound B (``"fedsgd"`` only).

    Returns
    -------
    ndarray of the shape of ``sizes``
        Weights summing to 1 over the last axis.

    Notes
    -----
    Eq. (2)'s privacy term lacks the factor 4 of the noise variance (2 B sqrt(K)/(mu n_i))^2 (the
    proof drops it); ``clip=`` uses the exact variance. The weights that minimise the *exact*
    linearised MSE (:func:`predict_mse`) replace trace(Sigma) by trace(H^-1 Sigma H^-1) and d by the
    propagated noise factor; Remark 3.3 notes that the proxy costs at most a constant factor.

    References
    ----------
    Core paper, eq. (2), Remark 3.3, Theorem 3.9.
    """
    cl = Clients(sizes)
    mu = check_positive(mu, "mu", allow_inf=True)
    d = check_positive(d, "d")
    K = check_positive(n_iter, "n_iter")
    tr = d if trace_sigma is None else check_positive(trace_sigma, "trace_sigma")
    if form == "fedsgd":
        if clip is None:
            priv = C_B**2 * d * dvlog(d, cl.N) * K / mu**2
        else:
            priv = 4.0 * check_positive(clip, "clip") ** 2 * K * d / mu**2
    elif form == "fednewton":
        if clip is not None:
            raise TypeError("clip= applies to form='fedsgd' only.")
        priv = C_B**2 * d**2 * K / mu**2
    else:
        raise ValueError(f"form must be 'fedsgd' or 'fednewton', got {form!r}.")
    inv = 1.0 / (cl.x(tr) / cl.n + cl.x(priv) / cl.n**2)
    w = inv / cl.x(cl.sum(inv))
    return np.where(cl.mask, w, np.nan)
