"""Calibration: every algorithm's noise scales, sensitivities and budget splits, as pure functions.

The estimators (which run the protocols) and the theory (which predicts their error) both import
these formulas from here, so that a calibration is written once. Sensitivities are L2 sensitivities
of one client's statistic when one of its rows is replaced (the record-level unit of the core paper);
budgets are GDP parameters mu, composed in squares.
"""

from __future__ import annotations

import math

import numpy as np

from .._linalg import safe_norm

__all__ = [
    "calibrated_sigma", "gradient_calibration", "local_step_calibration", "stage_budget", "aggregate_sd",
    "aggregated_noise_sd", "hessian_sensitivity",
    "paper_newton_sensitivity", "auto_budget_split", "largest_split_shares", "pooled_hessians", "BACKWARD_RATIO",
    "MAX_DERIVED_ROUNDS", "client_update_calibration",
    "head_newton_sensitivity", "normec_noise_multiplier", "noise_floor", "shared_newton_sensitivity",
    "HESSIAN_SHARE", "RESEARCH_SHARE", "FLOOR_TAIL", "newton_budgets",
]

SQRT2 = math.sqrt(2.0)


def calibrated_sigma(sensitivity, mu: float) -> np.ndarray:
    """The Gaussian mechanism's noise sd ``sensitivity / mu`` (0 with mu = inf, as the Channel uses)."""
    sens = np.asarray(sensitivity, dtype=np.float64)
    return np.zeros_like(sens) if math.isinf(mu) else sens / mu


def gradient_calibration(clip: float, sizes: np.ndarray, n_iter: int, mu: float) -> tuple[np.ndarray, float]:
    """Sensitivity and budget of each gradient message of :func:`server_gradient_descent` (Algorithm 1).

    A client's mean of per-sample gradients clipped to norm B moves by at most ``2 B / n_i`` in L2
    norm when one of its rows is replaced (Lemma 3.1); the K messages share ``mu`` equally in
    squares, ``mu / sqrt(K)`` each. The noise sd is ``calibrated_sigma(*gradient_calibration(...))``
    ``= 2 B sqrt(K) / (mu n_i)``.

    Returns
    -------
    sensitivity : ndarray of shape (n_clients,)
    mu_message : float
    """
    return 2.0 * clip / sizes, mu / math.sqrt(n_iter)


def local_step_calibration(clip: float, step_size: float, sizes: np.ndarray, n_steps: int,
                           mu: float) -> tuple[np.ndarray, float]:
    """Sensitivity and budget of each noisy step of :func:`local_gradient_descent` (Algorithms 2-4).

    The statistic ``eta g_i`` has sensitivity ``2 B eta / n_i``; the ``n_steps`` steps share
    ``mu`` equally in squares. Noise sd ``2 B eta sqrt(n_steps) / (mu n_i)`` on the parameter.

    Returns
    -------
    sensitivity : ndarray of shape (n_clients,)
    mu_step : float
    """
    return 2.0 * clip * step_size / sizes, mu / math.sqrt(n_steps)


def stage_budget(mu: float, n_stages: int) -> float:
    """Budget of each of ``n_stages`` stages that share ``mu`` equally: ``mu / sqrt(n_stages)`` (GDP composition)."""
    return mu / math.sqrt(n_stages)


def aggregate_sd(sigma, weights: np.ndarray) -> float:
    """Per-coordinate sd ``sqrt(sum_i w_i^2 sigma_i^2)`` of the weighted average of independent client noises."""
    return safe_norm(np.asarray(weights) * np.asarray(sigma))


def aggregated_noise_sd(sensitivity: np.ndarray, mu: float, weights: np.ndarray) -> float:
    """Per-coordinate noise sd of ``sum_i w_i release_i`` (0 with mu = inf)."""
    return 0.0 if math.isinf(mu) else safe_norm(weights * sensitivity) / mu


def hessian_sensitivity(hessian_clip: float, sizes: np.ndarray) -> np.ndarray:
    """L2 sensitivity of ``sym_to_vec`` of a client's mean clipped Hessian: ``sqrt(2) C_H / n_i``.

    Every per-sample Hessian here is positive semi-definite (``ell''(y, z) x x^T`` with
    ``ell'' >= 0``; ``(diag(p) - p p^T) kron x x^T`` for the multinomial family), and clipping
    multiplies it by a factor in (0, 1], so it stays PSD with Frobenius norm <= C_H. For PSD
    A, B with norms <= C_H, ``tr(AB) = ||A^{1/2} B^{1/2}||_F^2 >= 0``, hence
    ``||A - B||_F^2 = ||A||_F^2 + ||B||_F^2 - 2 tr(AB) <= 2 C_H^2``. Replacing one of client i's
    n_i rows moves the mean by ``(A - B) / n_i``, and :func:`sym_to_vec` is an isometry, so the
    release moves by at most ``sqrt(2) C_H / n_i`` in L2. The bound is attained (A and B of rank
    one with orthogonal ranges), so it is the tightest valid one; the generic ``2 C_H / n_i``
    ignores that Hessians are PSD.

    Parameters
    ----------
    hessian_clip : float
        C_H, the bound on per-sample Hessian Frobenius norms.
    sizes : ndarray of shape (n_clients,)
        n_i.

    Returns
    -------
    ndarray of shape (n_clients,)
    """
    return SQRT2 * hessian_clip / np.asarray(sizes, dtype=np.float64)


def paper_newton_sensitivity(clip: float, tau1: float, sizes: np.ndarray) -> np.ndarray:
    """Algorithm 4's Newton-step sensitivity with strong-convexity constant ``tau1``: ``8 B / (tau_1 n_i)``, so that
    with budget ``mu / sqrt 2`` the noise is ``sigma_i = 2 B_new / (mu n_i)``, ``B_new = 4 sqrt(2) B / tau_1``."""
    return 8.0 * clip / (tau1 * sizes)


#: private FedNewton: the share of the estimation budget (in squares, mu^2) its Hessian release spends
HESSIAN_SHARE = 0.15
#: private FedNewton: the share (in squares) of its search of C_H at the FedAvg point, where C_H was searched
RESEARCH_SHARE = 0.05
#: private FedNewton's floor: how many noise sd's beyond ``E||E||_F`` (Gaussian tail: ~1%)
FLOOR_TAIL = 3.0


def newton_budgets(mu: float, research: bool) -> tuple[float, float, float]:
    """Private FedNewton's budgets ``(mu_search, mu_hessian, mu_stage)`` from the estimation budget ``mu``: the
    search of C_H at the FedAvg point (``RESEARCH_SHARE`` of mu^2 if ``research``, else 0), the Hessian release
    (``HESSIAN_SHARE``), and each of the two stages (FedAvg, Newton step) half of the rest, in squares."""
    search = RESEARCH_SHARE if research else 0.0
    if math.isinf(mu):
        return math.inf, math.inf, math.inf
    return math.sqrt(search) * mu, math.sqrt(HESSIAN_SHARE) * mu, stage_budget(math.sqrt(1.0 - HESSIAN_SHARE - search) * mu, 2)


def noise_floor(sd: float, p: int, lowest: float) -> float:
    """Private FedNewton's eigenvalue floor for an averaged released Hessian whose ``sym_to_vec`` entries carry
    noise of sd ``sd``: ``max((sqrt(q) + FLOOR_TAIL) sd, lowest)``, ``q = p (p + 1) / 2``.

    ``sym_to_vec`` is an isometry, so the noise matrix E has ``||E||_op <= ||E||_F = ||z||``, ``z``
    Gaussian in R^q with ``E||z|| <= sqrt(q) sd`` and ``P(||z|| > (sqrt(q) + t) sd) <= exp(-t^2 / 2)``
    (t = 3: 1.1%). By Weyl's inequality an eigenvalue of the released matrix below that level is
    indistinguishable from noise (possibly negative), so it is raised to it; the eigenvalues above
    it, the curvature the data show, are left alone. ``lowest`` (> 0) keeps the inverse, and so the
    Newton step's noise, finite.
    """
    return max((math.sqrt(p * (p + 1) / 2) + FLOOR_TAIL) * float(sd), float(lowest))


def shared_newton_sensitivity(clip: float, floor: float, grad_clip: np.ndarray, n2: np.ndarray) -> np.ndarray:
    """L2 sensitivity of private FedNewton's step ``Hf^{-1} proj_G(gbar_i)`` with a public Hf (smallest eigenvalue
    ``floor``): ``min(2 B / n2_i, 2 G_i) / floor`` (the projection is 1-Lipschitz onto a ball of radius G_i)."""
    return np.minimum(2.0 * clip / np.asarray(n2, dtype=np.float64), 2.0 * np.asarray(grad_clip)) / floor


#: factor by which the budget of each earlier round shrinks, going back from the last (chosen empirically:
#: the first rounds carry Newton's non-linear phase, which the split's model leaves out; see FedIRLS)
BACKWARD_RATIO = 0.35
#: the most rounds :func:`auto_budget_split` takes: with more, the first round's share (``BACKWARD_RATIO^(R - 1)``
#: of the last round's) is below the float64 machine epsilon, a release the budget cannot resolve (35 rounds)
MAX_DERIVED_ROUNDS = 1 + int(math.log(np.finfo(np.float64).eps) / math.log(BACKWARD_RATIO))


def auto_budget_split(n_rounds: int, beta: float, ratio: float = BACKWARD_RATIO) -> np.ndarray:
    """Shares of mu^2 for the gradient and Hessian releases of each round, derived in :class:`FedIRLS`.

    The last gradient gets ``f``; the Hessian of round r and the gradient of round r - 1 get
    equal shares ``x ratio^(R - r)`` with ``x^3 = beta f^2``; round 1's Hessian gets
    ``x ratio^(R - 1)``; ``f`` is set so that the shares sum to 1.

    Parameters
    ----------
    n_rounds : int
        R.
    beta : float
        Relative Hessian noise per unit share, ``E||H^{-1} Xi u||^2`` for a unit vector u when
        the Hessian gets all of mu (see :class:`FedIRLS`); must be >= 0.
    ratio : float
        Decay of the shares per round going back from the last (q).

    Returns
    -------
    ndarray of shape (n_rounds, 2)
        Column 0: gradient shares, column 1: Hessian shares; all > 0, summing to 1.
    """
    R = n_rounds
    decay = ratio ** np.arange(R - 1)  # pairs (h_{R-k}, g_{R-1-k}), k = 0..R-2
    weight = 2.0 * decay.sum() + ratio ** (R - 1)  # total of all shares but f, in units of x

    def rest(f: float) -> float:
        return (beta * f * f) ** (1.0 / 3.0) * weight

    lo, hi = 0.0, 1.0  # f + rest(f) increases in f from 0 to > 1: bisection
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid + rest(mid) < 1.0 else (lo, mid)
    f = 0.5 * (lo + hi)
    x = (beta * f * f) ** (1.0 / 3.0)
    shares = np.zeros((R, 2))
    shares[R - 1, 0] = f
    for k in range(R - 1):
        shares[R - 1 - k, 1] = shares[R - 2 - k, 0] = x * decay[k]
    shares[0, 1] = x * ratio ** (R - 1)
    return shares / shares.sum()


def largest_split_shares(n_rounds: int, ratio: float = BACKWARD_RATIO) -> tuple[np.ndarray, float]:
    """The largest share of mu^2 each release of :func:`auto_budget_split` gets over every ``beta >= 0`` (public: the
    split's form): the gradients of rounds 1 to R - 1, ``ratio^(R - 1 - r) / W``, as ``beta -> inf`` (the last
    gradient's share ``f -> 0``, the others' ``x -> 1 / W``), the last gradient's 1 (``beta -> 0``), and the Hessians'
    total ``(W - sum_k ratio^k) / W`` (beta -> inf), where ``W = 2 sum_(k < R - 1) ratio^k + ratio^(R - 1)``.

    Returns
    -------
    gradients : ndarray of shape (n_rounds,)
    hessians : float
        All Hessian shares together (what :func:`pooled_hessians` can give one release).
    """
    R = int(n_rounds)
    decay = ratio ** np.arange(R - 1)
    weight = 2.0 * decay.sum() + ratio ** (R - 1)
    gradients = np.append(decay[::-1] / weight, 1.0)
    return gradients, float((weight - decay.sum()) / weight)


def pooled_hessians(shares: np.ndarray, least: float) -> np.ndarray:
    """``shares`` (R, 2) with every run of consecutive fresh Hessian shares below ``least`` pooled into its first round,
    until the pool reaches ``least`` (the rounds after it in the run reuse its Hessian, share 0); a last run short of
    ``least`` joins the release before it. The shares' sum, the gradients' and every Hessian share of at least
    ``least`` are unchanged; ``least = 0`` returns them as they are (public: post-processing of a public split)."""
    out = np.array(shares, dtype=np.float64)
    hessian, start, pool = out[:, 1], None, 0.0
    for r in np.flatnonzero(hessian > 0):
        start, pool = (r, 0.0) if start is None else (start, pool)
        pool, hessian[r] = pool + hessian[r], 0.0
        if pool >= least:
            hessian[start], start = pool, None
    if start is not None:
        before = np.flatnonzero(hessian[:start] > 0)
        hessian[before[-1] if before.size else start] += pool
    return out


def client_update_calibration(update_clip: float, n_clients: int, n_rounds: int, mu: float) -> tuple[np.ndarray, float]:
    """Sensitivity and budget of each message of client-level DP-FedAvg (:class:`~privfedstat.algorithms.dpfedavg.DPFedAvg`).

    A client's model update clipped to L2 norm S lies in the ball of radius S whatever its data,
    so replacing the client's whole dataset moves it by at most ``2 S`` (the unit is the client);
    the R messages share ``mu`` equally in squares, ``mu / sqrt(R)`` each, so the noise sd is
    ``2 S sqrt(R) / mu``. The noise multiplier of the amplified accounting is ``sigma / S``, the
    noise sd per radius of the ball the update lies in (:mod:`privfedstat.privacy.accounting`,
    replace-one like the sensitivity here).

    Returns
    -------
    sensitivity : ndarray of shape (n_clients,)
    mu_message : float
    """
    return np.full(n_clients, 2.0 * update_clip), mu / math.sqrt(n_rounds)


def head_newton_sensitivity(clip: float, damping: float, step: float, sizes) -> np.ndarray:
    """L2 sensitivity of each client's head Newton step ``s = alpha (h + lambda I)^{-1} g`` to one replaced sample.

    The step is FedNewton-NN's (Algorithm 5) on a network's last layer
    (:func:`privfedstat.deep.newton.head_newton_message`). Setting: client i holds n rows; ``v_j``
    is row j's head gradient clipped to norm B (per-sample clipping); ``g = (1/n) sum_j v_j``,
    ``h = (1/n) sum_j v_j v_j^T``, ``A = h + lambda I``. A neighbour replaces one v = w by v = u
    (``||u||, ||w|| <= B``): ``g' - g = (u - w) / n`` and ``A' - A = (u u^T - w w^T) / n``.

    *A bound on every step.* With ``V`` the n x p_h matrix of rows v_j and its SVD,
    ``A^{-1} g = V^T (V V^T + n lambda I)^{-1} 1`` has its singular values
    ``sigma / (sigma^2 + n lambda) <= 1 / (2 sqrt(n lambda))`` on the unit vector 1/sqrt(n); so
    ``||A^{-1} g|| <= 1 / (2 sqrt(lambda))`` for any data, clipped or not. Also
    ``||A^{-1} g|| <= ||g|| / lambda <= B / lambda``. Write ``c = min(B / lambda, 1 / (2 sqrt(lambda)))``.

    *The change.* ``A^{-1} g - A'^{-1} g' = A^{-1} (g - g') + A^{-1} (A' - A) A'^{-1} g'``, with
    ``||A^{-1}|| <= 1 / lambda``, ``||g - g'|| <= 2B / n``, ``||u u^T - w w^T||_2 <= max(||u||^2, ||w||^2)
    <= B^2`` (its eigenvalues lie in ``[-||w||^2, ||u||^2]``) and ``||A'^{-1} g'|| <= c``. Hence

        ``||s - s'|| <= alpha min(2 c, (2 B + B^2 c) / (lambda n))``,

    the first term from the triangle inequality with the bound on every step (it caps the
    sensitivity of small clients), the second decaying as 1/n. With B = inf (no clipping) the
    sensitivity is still finite, ``alpha / sqrt(lambda)``. The mean-gradient clip of Algorithm 5
    (``g min(1, B / ||g||)``) is implied: the mean of vectors of norm <= B has norm <= B.

    Departures from the paper [I]: Algorithm 5 clips only the mean gradient and forms h from raw
    gradients, which leaves h (and the step) with unbounded sensitivity; per-sample clipping bounds
    both. Its ``B_new = 2 sqrt(2) B / tau_1`` (garbled in the source, with tau_1 a strong-convexity
    constant a network does not have) is replaced by this bound, in which the damping lambda plays
    tau_1's role.

    Parameters
    ----------
    clip : float
        B (``inf`` allowed).
    damping : float
        lambda > 0.
    step : float
        alpha > 0.
    sizes : array-like of shape (n_clients,)
        n_i.

    Returns
    -------
    ndarray of shape (n_clients,)
    """
    if not damping > 0 or not math.isfinite(damping):
        raise ValueError(f"damping (lambda) must be a positive finite number, got {damping!r}.")
    if not step > 0 or not math.isfinite(step):
        raise ValueError(f"step (alpha) must be a positive finite number, got {step!r}.")
    if not clip > 0:
        raise ValueError(f"clip (B) must be positive (inf allowed), got {clip!r}.")
    n = np.asarray(sizes, dtype=np.float64)
    c = min(clip / damping, 0.5 / math.sqrt(damping))
    with np.errstate(invalid="ignore"):  # inf / n with B = inf: the first term is the bound
        return step * np.fmin(2.0 * c, (2.0 * clip + clip * clip * c) / (damping * n))


def normec_noise_multiplier(epsilon: float, delta: float, sampling_rate: float, n_rounds: int, *,
                            rule: str = "pld") -> float:
    """Fed-alpha-NormEC's sigma_DP for a target (epsilon, delta): the noise sd on each normalised message.

    A client's message ``Norm_alpha(u) = u / (alpha + ||u||)`` has norm below 1 whatever its data, so
    when one client's whole dataset is replaced (sensitivity 2, the ledger's) each round is a
    Poisson-subsampled Gaussian mechanism of messages in the unit ball with noise multiplier
    sigma_DP, accounted under replace-one adjacency (:mod:`privfedstat.privacy.accounting`).

    Parameters
    ----------
    epsilon : float
        Target epsilon, > 0.
    delta : float
        Target delta, in (0, 1).
    sampling_rate : float
        Poisson participation probability p of each client per round, in (0, 1] (1: every client).
    n_rounds : int
        Number of rounds R = K + 1 (k = 0, ..., K), each one release per participant.
    rule : {"pld", "paper"}, default "pld"
        ``"pld"``: the smallest sigma_DP whose R-fold composition has epsilon at most the target
        under dp-accounting's PLD (bisection,
        :func:`~privfedstat.privacy.accounting.noise_multiplier_for_epsilon`; as Opacus'
        ``make_private_with_epsilon``). ``"paper"``: the formula of Shulgin et al. (2025),
        Sections 5.1-5.2 and 6, ``sigma_DP = c p sqrt(R log(1/delta)) / epsilon`` with ``c = 1``
        (the constant of the experiments; the theory leaves c open, and the square root, lost in the
        extracted text, is restored from Abadi et al.'s accountant). It is not a guarantee: at
        R = 300, delta = 1e-5, epsilon = 8 the PLD gives epsilon 30.5 (p = 1) and 29.6 (p = 0.25)
        for it under replace-one (12.3 and 13.7 under add/remove).

    Returns
    -------
    float
        sigma_DP > 0.
    """
    if rule == "paper":
        return sampling_rate * math.sqrt(n_rounds * math.log(1.0 / delta)) / epsilon
    if rule != "pld":
        raise ValueError(f"rule must be 'pld' or 'paper', got {rule!r}.")
    from .accounting import noise_multiplier_for_epsilon  # dp-accounting is imported only when asked

    return noise_multiplier_for_epsilon(epsilon, delta, sampling_rate, n_rounds)
