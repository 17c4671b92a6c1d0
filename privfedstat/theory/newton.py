"""FedNewton: the MSE bounds of Theorem 3.9 and its condition on the number of clients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._clients import Clients
from ._common import as_float, check_positive, check_taus, dvlog, log_rho

__all__ = ["fednewton_bound", "fednewton_max_clients", "ClientCondition"]


def fednewton_bound(*, mu, d, sizes=None, n_samples=None, n_clients=None, form: str = "eq6", trace_sigma=None,
                    tau1=1.0, tau2=1.0, C=1.0, C_B=1.0):
    """Upper bound on the MSE of FedNewton (Theorem 3.9, eqs. (6) and (7)).

    The bound holds only while the number of clients is small enough; check it with
    :func:`fednewton_max_clients`.

    Parameters
    ----------
    mu, d, sizes, n_samples, n_clients, trace_sigma, tau1, tau2, C, C_B
        As in :func:`~privfedstat.theory.fedsgd_bound` (C_B is the constant of
        B^(New) = C_B sqrt(d v log N)).
    form : {"eq6", "eq7"}
        * ``"eq6"`` (w_i = n_i/N): ``C trace(Sigma)/(tau1^2 N) + C C_B^2 m d (d v log N)/(mu^2 N^2)``.
        * ``"eq7"`` (optimal weights; comparable sizes or few enough clients):
          ``C/tau1^2 (sum_i (trace(Sigma)/n_i + 2 C_B^2 d (d v log N)/(mu^2 n_i^2 log rho))^-1)^-1``.

    Returns
    -------
    ndarray

    Notes
    -----
    Inferred: in eq. (6) the extraction leaves the placement of tau1^2 open; the proof's last
    display is ``C trace(Sigma)/(tau1^2 N) + 12 m (B^New)^2 d/(mu^2 N^2)`` with
    B^New = C_B sqrt(d v log N) absorbing 1/tau1, which is what is implemented. Eq. (7) is
    implemented as extracted; unlike eq. (2) it has no log(dN) factor in the privacy term (consistent
    with Remark 3.9: FedNewton removes the dependence on K), which leaves 1/log(rho) unexplained --
    it may be a typo for eq. (2)'s term, in which case eq. (7) equals eq. (2) up to 17 vs C.

    References
    ----------
    Core paper, Algorithm 4, Theorem 3.9, Remarks 3.8-3.10.
    """
    mu = check_positive(mu, "mu", allow_inf=True)
    d = check_positive(d, "d")
    C, C_B = check_positive(C, "C"), check_positive(C_B, "C_B")
    t1, t2 = check_taus(tau1, tau2)
    tr = d if trace_sigma is None else check_positive(trace_sigma, "trace_sigma")
    cl = Clients(sizes, n_samples, n_clients)
    N, m = cl.N, cl.m
    dl = dvlog(d, N)
    if form == "eq6":
        return C * tr / (t1**2 * N) + C * C_B**2 * m * d * dl / (mu**2 * N**2)
    if form == "eq7":
        per = cl.x(tr) / cl.n + cl.x(2.0 * C_B**2 * d * dl / (mu**2 * log_rho(t1, t2))) / cl.n**2
        return C / t1**2 * cl.harmonic(per)
    raise ValueError(f"form must be 'eq6' or 'eq7', got {form!r}.")


@dataclass(frozen=True)
class ClientCondition:
    """Result of :func:`fednewton_max_clients`.

    Attributes
    ----------
    max_clients : ndarray
        Largest m satisfying the condition (real-valued; the admissible integers are <= its floor).
    constraints : ndarray of shape (..., 3)
        The three upper bounds on m whose minimum is ``max_clients``.
    binding : ndarray of int
        Index (0, 1, 2) of the smallest constraint.
    holds : ndarray of bool or None
        ``n_clients <= max_clients`` when ``n_clients`` was given.
    max_clients_eq7 : ndarray or None
        Condition (ii) of eq. (7), ``{(1 ^ N mu^2/d) mu^2 n_min^2 N/(C (d v log N)^3 K_max^2)}^(1/3)``
        (only for ``form="theorem"``; eq. (7) also holds whenever n_max <= C n_min).
    """

    max_clients: np.ndarray
    constraints: np.ndarray
    binding: np.ndarray
    holds: np.ndarray | None
    max_clients_eq7: np.ndarray | None


def fednewton_max_clients(*, n_samples, mu, d, n_local_steps, n_min=None, n_clients=None, form: str = "theorem",
                          C=1.0) -> ClientCondition:
    """Largest number of clients m for which Theorem 3.9's bound (6) holds, and whether m does.

    Parameters
    ----------
    n_samples : float or array
        N.
    mu : float or array
        GDP budget per client (``inf`` removes the privacy constraints).
    d : int or array
        Number of parameters.
    n_local_steps : int or array
        K_max = max_i K_1i, the local iterations of the FedAvg stage.
    n_min : float or array, optional
        Smallest client size (needed for ``form="theorem"``).
    n_clients : int or array, optional
        m, to report ``holds``.
    form : {"theorem", "comparable"}
        * ``"theorem"`` -- Theorem 3.9: ``m <= min{(N/(C d))^(2/3),
          (mu^3 N n_min^2/(C (d v log N)^3 K_max^2))^(2/3), (mu^2 N n_min^2/(C (d v log N)^2 K_max^2))^(1/2)}``.
        * ``"comparable"`` -- Remark 3.8 (n_min = N/m substituted and solved for m):
          ``m <= min{(N/(C (d v log N)))^(2/3), (N mu/(d v log N))^(6/7)/(C K_max^(4/7)),
          (mu/(d v log N))^(1/2) N^(3/4)/(C K_max^(1/2))}``.
    C : float or array, default 1
        The theorem's constant.

    Returns
    -------
    ClientCondition

    Notes
    -----
    The exponents of K_max (squared inside both privacy constraints of the theorem; 4/7 and 1/2
    in Remark 3.8) are read from superscripts the extraction detached; the two forms are consistent
    with each other under n_min = N/m, which confirms the reading.

    References
    ----------
    Core paper, Theorem 3.9, Remark 3.8.
    """
    N = check_positive(n_samples, "n_samples")
    mu = check_positive(mu, "mu", allow_inf=True)
    d = check_positive(d, "d")
    K = check_positive(n_local_steps, "n_local_steps")
    C = check_positive(C, "C")
    dl = dvlog(d, N)
    eq7 = None
    if form == "theorem":
        if n_min is None:
            raise TypeError("form='theorem' needs n_min (the smallest client size); or use form='comparable'.")
        nmin = check_positive(n_min, "n_min")
        cons = [
            (N / (C * d)) ** (2 / 3),
            (mu**3 * N * nmin**2 / (C * dl**3 * K**2)) ** (2 / 3),
            (mu**2 * N * nmin**2 / (C * dl**2 * K**2)) ** 0.5,
        ]
        eq7 = (np.minimum(1.0, N * mu**2 / d) * mu**2 * nmin**2 * N / (C * dl**3 * K**2)) ** (1 / 3)
    elif form == "comparable":
        cons = [
            (N / (C * dl)) ** (2 / 3),
            (N * mu / dl) ** (6 / 7) / (C * K ** (4 / 7)),
            (mu / dl) ** 0.5 * N**0.75 / (C * K**0.5),
        ]
    else:
        raise ValueError(f"form must be 'theorem' or 'comparable', got {form!r}.")
    cons = np.stack(np.broadcast_arrays(*cons), axis=-1)
    best = np.min(cons, axis=-1)
    holds = None if n_clients is None else np.asarray(as_float(n_clients, "n_clients") <= best)
    return ClientCondition(best, cons, np.argmin(cons, axis=-1), holds, eq7)
