"""MSE upper bounds of Section 3 of the core paper: FedSGD, FedHybrid and FedAvg.

The bounds hold up to unknown constants; each constant is a keyword argument with a default of 1
(``C``, ``C_B``, ``tau1``, ``tau2``) or the documented choice (``trace_sigma = d``, Remark 3.1's
``trace(Sigma) <= C d`` with C = 1). Use them for rates (log-log slopes), not for absolute values;
:func:`~privfedstat.theory.predict_mse_from_params` gives absolute predictions.

Notation: N = sum_i n_i, m clients, d parameters, ``d v log N = max(d, log N)``, natural logs,
``rho = 3 tau2 / (3 tau2 - tau1)`` and B = C_B sqrt(d v log N) (the clipping bound of the
theorems). Client sizes follow :mod:`privfedstat.theory._common`: the last axis of ``sizes`` indexes
clients (``nan`` pads), every other argument broadcasts against the leading axes.

The extracted text of the theorems is garbled in places; what was inferred is marked in each
docstring and collected in :data:`privfedstat.theory.INFERENCES`.
"""

from __future__ import annotations

import numpy as np

from ._clients import Clients
from ._common import as_float, check_positive, check_taus, dvlog, log_rho

__all__ = ["fedsgd_bound", "fedhybrid_bound", "fedavg_bound"]


def _trace(trace_sigma, d):
    return d if trace_sigma is None else check_positive(trace_sigma, "trace_sigma")


def _weights(weights, cl: Clients, mu, d, K, tr, C_B, dl):
    if isinstance(weights, str):
        if weights == "size":
            return cl.n / cl.x(cl.N)
        if weights == "optimal":
            inv = 1.0 / (cl.x(tr) / cl.n + cl.x(C_B**2 * d * dl * K / mu**2) / cl.n**2)
            return inv / cl.x(cl.sum(inv))
        raise ValueError(f"weights must be 'size', 'optimal' or an array, got {weights!r}.")
    w = cl.client_param(weights, "weights")
    if np.any(w < 0) or not np.allclose(cl.sum(w), 1.0):
        raise ValueError("weights must be non-negative and sum to 1 over the clients (last axis).")
    return w


def fedsgd_bound(*, mu, d, sizes=None, n_samples=None, n_clients=None, form: str = "optimal", n_iter=None,
                 step_size=None, weights="size", init_error=None, trace_sigma=None, tau1=1.0, tau2=1.0,
                 C=1.0, C_B=1.0):
    """Upper bound on E||theta_hat - theta_0||^2 for FedSGD (Theorem 3.2, Remarks 3.1, 3.2, 3.4).

    Parameters
    ----------
    mu : float or array
        GDP budget per client (``inf``: non-private; the privacy terms vanish).
    d : int or array
        Number of parameters.
    sizes : array of shape (..., m), optional
        Client sizes n_i (last axis = clients; ``nan`` pads). Needed by ``"eq1"``, ``"optimal"``
        and ``"rate"``; for ``"comparable"`` either ``sizes`` or (``n_samples``, ``n_clients``).
        Without ``sizes``, the per-client forms use m equal clients of size N/m.
    n_samples, n_clients : array, optional
        N and m, instead of ``sizes``.
    form : {"optimal", "eq1", "rate", "comparable"}
        * ``"eq1"`` -- eq. (1), the finite-K bound:
          ``3 (1 - tau1/(3 tau2))^(2K) E||theta0 - theta^(0)||^2 + 3/(1-gamma1)^2 *
          eta^2 [trace(Sigma) sum_i w_i^2/n_i + 4 C_B^2 K d (d v log N)/mu^2 sum_i w_i^2/n_i^2]``
          with ``gamma1 = 1 - eta tau1 + C sqrt((d v log N)/n_min)``; ``inf`` where gamma1 >= 1
          (the bound is vacuous). Needs ``n_iter`` and ``step_size``; the theorem assumes
          ``1/(2 tau2) <= eta <= 9/(10 tau2)`` (not enforced).
        * ``"optimal"`` (default) -- eq. (2), optimal weights and K = 2 log(dN)/log(rho):
          ``17/tau1^2 (sum_i (trace(Sigma)/n_i + C_B^2 d (d v log N) K/(mu^2 n_i^2))^-1)^-1``.
          With ``n_iter`` given, that K replaces 2 log(dN)/log(rho) (the optimisation term is then
          only negligible if ``n_iter`` is at least the recommended K).
        * ``"rate"`` -- Remark 3.1, eq. (3): ``C d / sum_i min(n_i, n_i^2 mu^2/((d v log N) log N))``.
        * ``"comparable"`` -- Remark 3.2, eq. (4), n_max/n_min bounded and w_i = n_i/N:
          ``C/tau1^2 (trace(Sigma)/N + C_B^2 m d (d v log N) log(dN)/(mu^2 N^2))``; with
          ``n_iter`` given, K replaces log(dN) (Remark 3.4's K-explicit scaling m K d^2/(mu^2 N^2)).
    n_iter : int or array, optional
        K, the number of iterations.
    step_size : float or array, optional
        eta (``"eq1"`` only).
    weights : "size", "optimal" or array of shape (..., m)
        Aggregation weights w_i for ``"eq1"`` (eq. (2)'s weights with this K for ``"optimal"``).
    init_error : float or array, optional
        E||theta^(0) - theta_0||^2 for ``"eq1"``; default d (the theorem's ||theta^(0)|| = O(sqrt d)).
    trace_sigma : float or array, optional
        trace(Sigma), Sigma = Var(grad rho(x, theta_0)); default d (Remark 3.1: trace(Sigma) <= C d).
    tau1, tau2 : float or array, default 1
        Strong convexity (Assumption 2) and smoothness (Assumption 4) constants, 0 < tau1 <= tau2.
    C : float or array, default 1
        The theorem's numerical constant (gamma1 in ``"eq1"``, the leading constant in ``"rate"``
        and ``"comparable"``).
    C_B : float or array, default 1
        Clipping constant, B = C_B sqrt(d v log N).

    Returns
    -------
    ndarray
        The bound, broadcast over the settings.

    Notes
    -----
    Inferred from the garbled extraction: the step-size range ``1/(2 tau2) <= eta <= 9/(10 tau2)``
    (the "9" is displaced in the text); the factor 4 and the square of C_B in eq. (1) (the proof's
    noise ``2 eta B sqrt(K) / (mu n_i)`` squared, with B^2 = C_B^2 (d v log N)); the placement of
    1/tau1^2 as a common factor in eq. (4). E||sum_i w_i Ldot_i(theta_0)||^2 in eq. (1) is replaced
    by its value trace(Sigma) sum_i w_i^2/n_i (from the proof of Theorem 3.2).

    References
    ----------
    Core paper, Theorem 3.2 (eqs. (1), (2)), Remarks 3.1-3.4.
    """
    mu = check_positive(mu, "mu", allow_inf=True)
    d = check_positive(d, "d")
    C, C_B = check_positive(C, "C"), check_positive(C_B, "C_B")
    t1, t2 = check_taus(tau1, tau2)
    tr = _trace(trace_sigma, d)
    if form == "comparable":
        cl = Clients(sizes, n_samples, n_clients)
        N, m = cl.N, cl.m
        K = np.log(d * N) if n_iter is None else check_positive(n_iter, "n_iter")
        return C / t1**2 * (tr / N + C_B**2 * m * d * dvlog(d, N) * K / (mu**2 * N**2))
    cl = Clients(sizes, n_samples, n_clients)
    N, n, x = cl.N, cl.n, cl.x
    dl = dvlog(d, N)
    if form == "rate":
        eff = np.minimum(n, n**2 * x(mu**2 / (dl * np.log(N))))
        return C * d / cl.sum(eff)
    if form == "optimal":
        K = 2.0 * np.log(d * N) / log_rho(t1, t2) if n_iter is None else check_positive(n_iter, "n_iter")
        per = x(tr) / n + x(C_B**2 * d * dl * K / mu**2) / n**2
        return 17.0 / t1**2 * cl.harmonic(per)
    if form == "eq1":
        if n_iter is None or step_size is None:
            raise TypeError("form='eq1' needs n_iter (K) and step_size (eta).")
        K = check_positive(n_iter, "n_iter")
        eta = check_positive(step_size, "step_size")
        e0 = d if init_error is None else as_float(init_error, "init_error")
        w = _weights(weights, cl, mu, d, K, tr, C_B, dl)
        gamma1 = 1.0 - eta * t1 + C * np.sqrt(dl / cl.n_min)
        s1 = cl.sum(w**2 / n)
        s2 = cl.sum(w**2 / n**2)
        stat = eta**2 * (tr * s1 + 4.0 * C_B**2 * K * d * dl / mu**2 * s2)
        with np.errstate(divide="ignore", invalid="ignore"):
            val = 3.0 * (1.0 - t1 / (3.0 * t2)) ** (2 * K) * e0 + 3.0 / (1.0 - gamma1) ** 2 * stat
        return np.where(gamma1 < 1.0, val, np.inf)
    raise ValueError(f"form must be 'optimal', 'eq1', 'rate' or 'comparable', got {form!r}.")


def fedhybrid_bound(*, mu, d, sizes=None, n_samples=None, n_clients=None, form: str = "theorem",
                    n_server_iter=None, trace_sigma=None, tau1=1.0, tau2=1.0, C=1.0, C_B=1.0):
    """Upper bound on the MSE of FedHybrid (Theorem 3.5, Remark 3.6).

    Parameters
    ----------
    mu, d, sizes, n_samples, n_clients, trace_sigma, tau1, tau2, C, C_B
        As in :func:`fedsgd_bound`.
    form : {"theorem", "comparable"}
        * ``"theorem"`` -- Theorem 3.5, with K1i >= 4 log(n_i)/log(rho) and
          K2 = 2 log(m)/log(rho):
          ``17/tau1^2 (sum_i (trace(Sigma)/n_i + 2 C_B^2 d (d v log N) log(m)/(mu^2 n_i^2 log rho))^-1)^-1``.
        * ``"comparable"`` -- Remark 3.6, eq. (5):
          ``C/tau1^2 (trace(Sigma)/N + C_B^2 m d (d v log N) log(m)/(mu^2 N^2))``.
    n_server_iter : int or array, optional
        K2. If given, it replaces 2 log(m)/log(rho) (``"theorem"``) or log(m) (``"comparable"``).

    Returns
    -------
    ndarray

    Notes
    -----
    With one client (m = 1) the paper's K2 = 0 and its privacy term vanishes; the stage-I noise,
    which the theorem absorbs for growing m, is then not represented. Use m >= 2 or pass
    ``n_server_iter``. The 1/tau1^2 placement in eq. (5) is inferred as for eq. (4).

    References
    ----------
    Core paper, Algorithm 2, Theorem 3.5, Remark 3.6.
    """
    mu = check_positive(mu, "mu", allow_inf=True)
    d = check_positive(d, "d")
    C, C_B = check_positive(C, "C"), check_positive(C_B, "C_B")
    t1, t2 = check_taus(tau1, tau2)
    tr = _trace(trace_sigma, d)
    cl = Clients(sizes, n_samples, n_clients)
    N, m = cl.N, cl.m
    dl = dvlog(d, N)
    if form == "comparable":
        K2 = np.log(m) if n_server_iter is None else check_positive(n_server_iter, "n_server_iter")
        return C / t1**2 * (tr / N + C_B**2 * m * d * dl * K2 / (mu**2 * N**2))
    if form == "theorem":
        K2 = 2.0 * np.log(m) / log_rho(t1, t2) if n_server_iter is None else check_positive(n_server_iter, "n_server_iter")
        per = cl.x(tr) / cl.n + cl.x(C_B**2 * d * dl * K2 / mu**2) / cl.n**2
        return 17.0 / t1**2 * cl.harmonic(per)
    raise ValueError(f"form must be 'theorem' or 'comparable', got {form!r}.")


def fedavg_bound(*, mu, d, n_local_steps, sizes=None, n_samples=None, n_clients=None, n_rounds=1,
                 client_local_steps=None, form: str = "theorem", trace_sigma=None, tau1=1.0, C=1.0, C_B=1.0):
    """Upper bound on the MSE of FedAvg after R rounds (Theorem 3.3 for R = 1, Theorem 3.7).

    Parameters
    ----------
    mu, d, sizes, n_samples, n_clients, trace_sigma, tau1, C, C_B
        As in :func:`fedsgd_bound`.
    n_local_steps : int or array
        K, local iterations per round (the theorems need K >= C log(dN)/log(rho), see
        :func:`recommended_iterations`).
    n_rounds : int or array, default 1
        R.
    client_local_steps : array of shape (..., m), optional
        Theorem 3.3's per-client K_1i (last axis = clients; R = 1); overrides ``n_local_steps``
        inside the sum, and K_max = max_i K_1i.
    form : {"theorem", "table1"}
        * ``"theorem"``:
          ``16/tau1^2 (trace(Sigma)/N + 2 m C_B^2 R K_max d (d v log N)/(mu^2 N^2))
          + C/N^2 (m trace(Sigma) + sum_i C_B^2 R K_i d (d v log N)/(mu^2 n_i))^2``.
          The second term is the squared federation bias (Remark 3.7): it grows like m^2/N^2.
        * ``"table1"`` -- Table 1's rate: ``C (d/N + m^2 d^2/N^2 + m d^2 R K/(mu^2 N^2))``.

    Returns
    -------
    ndarray

    Notes
    -----
    Remark 3.5 (fixed d): the federation term is O(m^2/N^2), below the centralised O(1/N) while
    m = O(N^(1/2)); the privacy term is O(K^2 m^4/(mu^4 N^4)), negligible for mu = O(1) while
    m = O(N^(3/4)).

    Inferred: Theorem 3.7's statement shows "2mCRKd(d v log N)" and "RKd(d v log N)/(mu^2 n_i)";
    its proof (eq. (15)) has 2 m B^2 R K d and B^2 R K d/(mu^2 n_i) with B^2 = C_B^2 (d v log N),
    so C_B^2 is restored in both. For R = 1 the formula is Theorem 3.3 verbatim.

    References
    ----------
    Core paper, Algorithm 3, Theorems 3.3 and 3.7, Remarks 3.5 and 3.7, Table 1.
    """
    mu = check_positive(mu, "mu", allow_inf=True)
    d = check_positive(d, "d")
    C, C_B = check_positive(C, "C"), check_positive(C_B, "C_B")
    t1 = check_positive(tau1, "tau1")
    R = check_positive(n_rounds, "n_rounds")
    K = check_positive(n_local_steps, "n_local_steps")
    tr = _trace(trace_sigma, d)
    cl = Clients(sizes, n_samples, n_clients)
    N, m = cl.N, cl.m
    if form == "table1":
        return C * (d / N + m**2 * d**2 / N**2 + m * d**2 * R * K / (mu**2 * N**2))
    if form != "theorem":
        raise ValueError(f"form must be 'theorem' or 'table1', got {form!r}.")
    dl = dvlog(d, N)
    if client_local_steps is None:
        Ki, Kmax = cl.x(K), K
    else:
        Ki = check_positive(cl.client_param(client_local_steps, "client_local_steps"), "client_local_steps")
        Kmax = cl.max(Ki)
    variance = 16.0 / t1**2 * (tr / N + 2.0 * m * C_B**2 * R * Kmax * d * dl / (mu**2 * N**2))
    drift = m * tr + cl.sum(cl.x(C_B**2 * R * d * dl / mu**2) * Ki / cl.n)
    return variance + C / N**2 * drift**2
