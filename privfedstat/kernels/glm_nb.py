"""numba kernels for linear-predictor losses, sweeping all clients in one parallel pass.

Data layout: the clients' rows are stored concatenated in ``X`` (N, d) and ``y`` (N,), client
``c`` owning rows ``offsets[c]:offsets[c + 1]``. ``theta`` is either one row (1, d), shared by all
clients, or one row per client (n_clients, d). Outputs are preallocated by the caller.
``eta_off`` is the per-row offset ``o_j`` of the linear predictor, ``z_j = x_j^T theta + o_j``
(a covariate with coefficient fixed at 1, e.g. ``log(exposure)``), shape (N,), or an empty
array for no offset: the kernels then skip the addition (one loop-invariant test), so the
no-offset path does no extra work.

The family is selected by an integer code (see ``privfedstat.families``) and one float parameter;
the per-sample branch on the code is outside the feature loops, which stay vectorisable. Clipping
uses ``||ell'(y, z) x|| = |ell'(y, z)| ||x||`` with precomputed row norms, so no per-sample
gradient is ever formed: the clipped scalar is ``copysign(min(|ell'|, L), ell')`` with the limit
``L = B kappa / ||x||`` (:func:`_limit`), branch-free.

Sensitivity for every finite input (``X``, ``y``, ``theta`` finite; ``MIN_BOUND <= B`` and
``n_i B <= 1e307``, so that a client's sum cannot overflow -- the oracle checks both): each row's
clipped contribution has norm at most ``B`` (gradients, L2) or ``hclip`` (Hessians, Frobenius),
also after rounding, because

* ``row_norm[j] >= ||x_j||`` exactly (the precondition; :func:`privfedstat._linalg.row_norm_bounds`
  computes such bounds without underflow or overflow);
* the kernels clip to ``B * kappa`` with ``kappa = CLIP_SAFETY = 1 - 2^-40``: the relative
  roundings of the limit, the square roots and the products (each at most ``u = 2^-53``, a few
  dozen in all, even where fastmath approximates a division or a square root to a few ulps)
  stay far below ``2^-40``. Per-entry absolute roundings of subnormal results (at most
  ``2^-1075`` each) stay below ``(1 - kappa) B`` for ``B >= MIN_BOUND``;
* the limit is lowered by the smallest subnormal, which rounds it down where it is subnormal
  (there a rounded quotient may exceed the exact one by a large relative amount) and changes a
  normal one by at most an ulp, and it is capped at the largest double (a zero row, or a
  tiny row with a large ``B``, would give ``inf * 0 = NaN``); only the limit ever multiplies a
  row, never a rounded subnormal product. A subnormal limit (``||x|| > 4.5e307 B``) carries
  fewer significant bits, so such a row's contribution is less accurate, never larger;
* the offset enters only the residual ``ell'(y, z)`` (and ``ell''``), never the row ``x``, so the
  bounds above hold for every finite offset; ``x^T theta + o`` overflowing is an infinite residual;
* an infinite residual (``x^T theta``, ``x^T theta + o`` or ``z - y`` overflowing) is clipped like a large one: it
  contributes ``L x`` with its sign, the limit of large residuals;
* a NaN residual (``x^T theta = inf - inf`` where products overflow; with FMA contraction and
  reassociation the same row may instead give +-inf, equally bounded) contributes 0. NaN must
  never reach a message: NaN against a finite value is a perfect distinguisher. With
  ``B = inf`` (no clipping, non-private fits only) NaN and inf propagate, so that divergence
  is detected;
* a row whose norm exceeds the largest double has ``row_norm = inf``, hence ``L = 0``: it
  contributes 0.

The outer-product kernels (:func:`glm_client_hessian`, :func:`glm_client_score_outer`,
:func:`glm_client_design_moments`) accumulate ``v v^T`` with ``v = s x`` clipped as above:
``||v|| <= B kappa`` for the clipped gradient (``B = clip``) or the clipped row
(``B = row_clip``), ``||v|| <= sqrt(hclip kappa)`` for Hessians. A term's Frobenius norm
``||v||^2`` thus stays below ``C = B^2`` or ``C = hclip`` by the same argument, every entry
``|v_a v_b| <= C`` is finite, and ``MIN_BOUND <= C``, ``n_i C <= 1e307`` (checked by the oracle)
keep subnormal roundings inside the margin and the client's sum finite.

What is not bounded by this argument: the sum over a client's rows is computed in floating point
(absolute error up to ``(n_i - 1) u`` times the sum of the terms' magnitudes), so neighbouring
datasets can differ by ``2 B / n_i`` plus that rounding. The margin ``1 - kappa`` absorbs it while
``n_i (n_i - 1) sqrt(d) u <= 2^-40`` (e.g. ``n_i <= 30`` at ``d <= 6``, as the tests check exactly);
beyond, neighbouring sums may differ by slightly more than the stated sensitivity (an audit
measured a relative excess of 6.7e-12 at ``n_i = 10^6``). That floating-point side channel is
not closed anywhere, secure mode included: secure mode changes only the noise sampler
(:class:`~privfedstat.privacy.mechanisms.SecureClientNoise`), not how the clients sum.

Every kernel has a plain numpy twin in :mod:`privfedstat.kernels.reference`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..families.glm import POISSON_MAX_ETA

__all__ = ["glm_clipped_mean_grad", "glm_clipped_mean_grad_cols", "glm_client_loss", "glm_client_hessian",
           "glm_row_hessian_roots", "glm_client_score_outer", "glm_client_design_moments", "FASTMATH",
           "COLUMN_KERNEL_MAX_D", "CLIP_SAFETY", "MIN_BOUND"]

# numba's cache does not notice changes to these helpers in the kernels of multinomial_nb that
# inline them: after editing one, touch multinomial_nb.py (or clear __pycache__).

#: fastmath flags used by every kernel: never ``nnan``/``ninf`` (NaN and inf must propagate so
#: that divergence is detected, the NaN guards of the clipping must not be optimised away, and
#: ``clip = inf`` means "no clipping").
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}
#: kernels clip to ``bound * CLIP_SAFETY`` (kappa), so that rounding never lifts a contribution above ``bound``
CLIP_SAFETY = 1.0 - 2.0**-40
#: smallest clipping bound for which subnormal roundings stay inside the safety margin
MIN_BOUND = 1e-280
_DENORM_MIN = 5e-324  # smallest positive double
_DOUBLE_MAX = 1.7976931348623157e308
#: rows per block in the gradient kernel: per-row scalars of a block are computed in vectorisable
#: loops, then the block is accumulated four rows at a time (faster than row by row; measurements
#: in benchmarks/RESULTS.md)
_BLOCK = 32
#: rows per block in the column-major gradient kernel
_CBLOCK = 256
#: rows of consecutive small clients whose clipped scalars the column-major kernel computes together
_RUN = 4 * _CBLOCK
#: ranges of clients of about equal rows that the column-major kernel's threads share out
_CHUNKS = 64
#: up to this many features the column-major kernel is faster (the two break even near d = 50;
#: measurements in benchmarks/RESULTS.md); above it the row-major blocked kernel is used
COLUMN_KERNEL_MAX_D = 32


@njit(inline="always", fastmath=FASTMATH)
def _exp(x):
    """exp(x) without a libm call, so loops over it vectorise (numba has no SVML here).

    ``x`` is clamped to [-745, POISSON_MAX_ETA]; ``exp(x) = p(x / 2^11)^(2^11)`` with p the
    degree-12 Taylor polynomial (|x / 2^11| <= 0.37, truncation < 4e-16). Relative error below
    1e-12 over the whole range (largest observed 7.3e-13), far below anything statistical.
    """
    u = min(max(x, -745.0), POISSON_MAX_ETA) * 0.00048828125
    p = 1.0 + u * (1.0 + u * (0.5 + u * (0.16666666666666666 + u * (0.041666666666666664 + u * (
        0.008333333333333333 + u * (0.001388888888888889 + u * (0.0001984126984126984 + u * (
            2.48015873015873e-05 + u * (2.7557319223985893e-06 + u * (2.755731922398589e-07 + u * (
                2.505210838544172e-08 + u * 2.08767569878681e-09)))))))))))
    for _ in range(11):
        p = p * p
    return p


@njit(inline="always", fastmath=FASTMATH)
def _deriv(code, param, y, z):
    if code == 0:  # logistic: sigmoid(z) - y, stable for both signs
        e = _exp(-abs(z))
        q = 1.0 / (1.0 + e)
        return (q if z >= 0 else e * q) - y
    if code == 1:  # poisson
        return _exp(z) - y
    if code == 2:  # gaussian
        return z - y
    return min(max(z - y, -param), param)  # huber


@njit(inline="always", fastmath=FASTMATH)
def _deriv2(code, param, y, z):
    if code == 0:
        e = _exp(-abs(z))
        return e / ((1.0 + e) * (1.0 + e))
    if code == 1:
        return _exp(z)
    if code == 2:
        return 1.0
    return 1.0 if abs(y - z) <= param else 0.0


@njit(inline="always", fastmath=FASTMATH)
def _loss(code, param, y, z):
    if code == 0:  # log(1 + e^z) - y z = (1 - y) softplus(z) + y softplus(-z)
        sp = math.log1p(_exp(-abs(z)))
        return (1.0 - y) * (max(z, 0.0) + sp) + y * (max(-z, 0.0) + sp)
    if code == 1:  # exp continued linearly above the cap
        zc = min(z, POISSON_MAX_ETA)
        return _exp(zc) * (1.0 + (z - zc)) - y * z
    if code == 2:
        return 0.5 * (y - z) * (y - z)
    r = abs(y - z)
    return 0.5 * r * r if r <= param else param * r - 0.5 * param * param


@njit(inline="always", fastmath=FASTMATH)
def _limit(bound, norm, cap):
    """Largest multiplier ``L`` of a row with ``L ||x|| <= bound`` (up to one rounding), given ``norm >= ||x||``.

    ``bound / norm`` lowered by the smallest subnormal: that makes a subnormal quotient (whose
    rounding can add a large relative error; subnormal subtraction is exact) a lower bound, and
    leaves a normal one unchanged or one ulp lower. At most ``cap`` (the largest double when
    clipping, so that ``L * 0 = 0`` for zero rows; ``inf`` without clipping). ``norm = inf`` gives 0.
    """
    lim = bound / max(norm, _DENORM_MIN)
    return min(max(lim - _DENORM_MIN, 0.0), cap)


@njit(inline="always", fastmath=FASTMATH)
def _clip_scalar(r, lim, nan_fill):
    """``copysign(min(|r|, lim), r)``; ``nan_fill`` (0 when clipping, NaN without) for a NaN ``r``.

    Written as two selects (``lim < |r|`` is false for NaN, ``NaN >= 0`` too), which vectorise.
    """
    a = abs(r)
    c = lim if lim < a else a
    return math.copysign(c if c >= 0.0 else nan_fill, r)


@njit(inline="always")
def _clip_constants(clip):
    """``(bound, cap, nan_fill)`` for :func:`_limit` and :func:`_clip_scalar`: no clipping when ``clip = inf``."""
    if math.isinf(clip):
        return math.inf, math.inf, math.nan
    return clip * CLIP_SAFETY, _DOUBLE_MAX, 0.0


@njit(inline="always")
def _outer_setup(theta, c, out):
    """Client ``c``'s ``theta`` row (one shared row, or one per client), its zeroed output ``out[c]``, a scratch row."""
    h = out[c]
    h[:, :] = 0.0
    return (theta[0] if theta.shape[0] == 1 else theta[c]), h, np.empty(h.shape[1])


@njit(inline="always", fastmath=FASTMATH)
def _scale_into(v, g, x):
    """``v = g x`` (``v`` is scratch of the row's length)."""
    for a in range(x.shape[0]):
        v[a] = g * x[a]


@njit(inline="always", fastmath=FASTMATH)
def _add_outer(h, v):
    """``h += v v^T`` on the upper triangle (``a <= b``) only; :func:`_mirror_mean` completes it."""
    p = v.shape[0]
    for a in range(p):
        va = v[a]
        for b in range(a, p):
            h[a, b] += va * v[b]


@njit(inline="always", fastmath=FASTMATH)
def _mirror_mean(h, n):
    """Divide the upper triangle of ``h`` by ``n`` and mirror it: the mean, exactly symmetric."""
    p = h.shape[0]
    inv = 1.0 / n
    for a in range(p):
        for b in range(a, p):
            h[a, b] *= inv
            h[b, a] = h[a, b]


@njit(inline="always", fastmath=FASTMATH)
def _dot(x, t):
    s = 0.0
    for k in range(x.shape[0]):
        s += x[k] * t[k]
    return s


@njit(inline="always", fastmath=FASTMATH)
def _predictor(x, t, eta_off, j):
    """``z_j = x^T t + o_j`` (``o_j = 0`` where ``eta_off`` is empty)."""
    z = _dot(x, t)
    if eta_off.shape[0] > 0:
        z += eta_off[j]
    return z


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def glm_clipped_mean_grad(X, y, eta_off, row_norm, offsets, theta, clip, code, param, out):
    """Per-client mean of per-sample gradients, each clipped to L2 norm ``clip``.

    ``out[c] = (1/n_c) sum_{j in c} ell'(y_j, z_j) x_j * min(1, clip / (|ell'(y_j, z_j)| ||x_j||))``
    with ``z_j = x_j^T theta_c + o_j`` (``o = eta_off``, or 0 where it is empty),
    with ``clip`` applied as ``clip * CLIP_SAFETY`` and the treatment of non-finite residuals of
    the module docstring, so every term has norm ``<= clip`` for every finite input.
    ``row_norm[j] >= ||x_j||`` is required. Rows are processed in blocks of ``_BLOCK``: linear
    predictors, then clipped scalars (a vectorisable loop), then the accumulation four rows at a
    time.
    """
    m = offsets.shape[0] - 1
    d = X.shape[1]
    shared = theta.shape[0] == 1
    has_off = eta_off.shape[0] > 0
    bound, cap, nan_fill = _clip_constants(clip)
    for c in prange(m):
        t = theta[0] if shared else theta[c]
        acc = out[c]
        acc[:] = 0.0
        zb = np.empty(_BLOCK)
        lo, hi = offsets[c], offsets[c + 1]
        for b0 in range(lo, hi, _BLOCK):
            nb = min(_BLOCK, hi - b0)
            for j in range(nb):
                zb[j] = _dot(X[b0 + j], t)
            if has_off:
                for j in range(nb):
                    zb[j] += eta_off[b0 + j]
            for j in range(nb):
                r = _deriv(code, param, y[b0 + j], zb[j])
                zb[j] = _clip_scalar(r, _limit(bound, row_norm[b0 + j], cap), nan_fill)
            j = 0
            while j + 4 <= nb:
                x0, x1, x2, x3 = X[b0 + j], X[b0 + j + 1], X[b0 + j + 2], X[b0 + j + 3]
                s0, s1, s2, s3 = zb[j], zb[j + 1], zb[j + 2], zb[j + 3]
                for k in range(d):
                    acc[k] += s0 * x0[k] + s1 * x1[k] + s2 * x2[k] + s3 * x3[k]
                j += 4
            for jj in range(j, nb):
                xj = X[b0 + jj]
                s = zb[jj]
                for k in range(d):
                    acc[k] += s * xj[k]
        inv = 1.0 / (hi - lo)
        for k in range(d):
            acc[k] *= inv


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def glm_clipped_mean_grad_cols(Xt, y, eta_off, row_norm, offsets, theta, clip, code, param, out):
    """Column-major twin of :func:`glm_clipped_mean_grad` for small d (``Xt`` is X transposed, (d, N)).

    Every loop runs along rows of a block, contiguous in memory, so the linear predictors, the
    clipped scalars (with the vectorisable ``_exp``) and the accumulation are all SIMD.

    Many small clients (the cross-device regime) would make those loops a few rows long, so with a
    shared ``theta`` consecutive clients are taken together: their linear predictors and clipped
    scalars are computed over runs of up to ``_RUN`` rows (:func:`_cols_residuals`, row by row, so
    each value is the same whatever the run) and only the accumulation is per client
    (:func:`_cols_accumulate`); a larger client is processed alone in blocks of ``_CBLOCK`` rows.
    A client's mean therefore does not depend on the other clients, and the threads take
    contiguous ranges of clients of about equal numbers of rows.
    """
    m = offsets.shape[0] - 1
    d = Xt.shape[0]
    shared = theta.shape[0] == 1
    bound, cap, nan_fill = _clip_constants(clip)
    n_chunks = min(m, _CHUNKS)
    rows = offsets[m] - offsets[0]
    for ch in prange(n_chunks):
        c = np.searchsorted(offsets, offsets[0] + ch * rows // n_chunks) if ch else 0
        c_end = np.searchsorted(offsets, offsets[0] + (ch + 1) * rows // n_chunks) if ch + 1 < n_chunks else m
        zb = np.empty(_RUN)
        while c < c_end:
            t = theta[0] if shared else theta[c]
            lo = offsets[c]
            stop = c + 1  # the run: clients c .. stop - 1, all of them within _RUN rows, or client c alone
            while shared and stop < c_end and offsets[stop + 1] - lo <= _RUN:
                stop += 1
            block = _CBLOCK if stop == c + 1 else _RUN  # a lone client: its own blocks, cache-resident
            for b0 in range(lo, offsets[stop], block):
                nb = min(block, offsets[stop] - b0)
                _cols_residuals(Xt, y, eta_off, row_norm, t, b0, nb, zb, bound, cap, nan_fill, code, param)
                for cc in range(c, stop):  # every client of the run lies in this block; a lone client may span several
                    acc = out[cc]
                    c_lo, c_hi = offsets[cc], offsets[cc + 1]
                    if c_lo >= b0:
                        acc[:] = 0.0
                    _cols_accumulate(Xt, zb, b0, max(c_lo, b0), min(c_hi, b0 + nb), acc)
                    if c_hi <= b0 + nb:
                        inv = 1.0 / (c_hi - c_lo)
                        for k in range(d):
                            acc[k] *= inv
            c = stop


@njit(inline="always", fastmath=FASTMATH)
def _cols_residuals(Xt, y, eta_off, row_norm, t, b0, nb, zb, bound, cap, nan_fill, code, param):
    """``zb[:nb]`` = the clipped scalars of rows ``b0 .. b0 + nb - 1`` (linear predictor, derivative, clip), row by row."""
    z = zb[:nb]
    z[:] = 0.0
    for k in range(Xt.shape[0]):
        xk = Xt[k, b0:b0 + nb]
        tk = t[k]
        for j in range(nb):
            z[j] += xk[j] * tk
    if eta_off.shape[0] > 0:
        ob = eta_off[b0:b0 + nb]
        for j in range(nb):
            z[j] += ob[j]
    yb = y[b0:b0 + nb]
    rn = row_norm[b0:b0 + nb]
    for j in range(nb):
        r = _deriv(code, param, yb[j], z[j])
        z[j] = _clip_scalar(r, _limit(bound, rn[j], cap), nan_fill)


@njit(inline="always", fastmath=FASTMATH)
def _cols_accumulate(Xt, zb, b0, lo, hi, acc):
    """``acc += sum_j zb[j - b0] x_j`` over rows ``lo .. hi - 1``, in blocks of ``_CBLOCK`` rows (the summation order)."""
    for bb in range(lo, hi, _CBLOCK):
        nb = min(_CBLOCK, hi - bb)
        z = zb[bb - b0:bb - b0 + nb]
        for k in range(Xt.shape[0]):
            xk = Xt[k, bb:bb + nb]
            s = 0.0
            for j in range(nb):
                s += z[j] * xk[j]
            acc[k] += s


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def glm_client_loss(X, y, eta_off, offsets, theta, code, param, out):
    """Per-client mean loss ``out[c] = (1/n_c) sum_{j in c} ell(y_j, x_j^T theta_c + o_j)`` (``o_j = 0`` without ``eta_off``)."""
    m = offsets.shape[0] - 1
    shared = theta.shape[0] == 1
    has_off = eta_off.shape[0] > 0
    for c in prange(m):
        t = theta[0] if shared else theta[c]
        s = 0.0
        for j in range(offsets[c], offsets[c + 1]):
            z = _dot(X[j], t)
            if has_off:
                z += eta_off[j]
            s += _loss(code, param, y[j], z)
        out[c] = s / (offsets[c + 1] - offsets[c])


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def glm_client_hessian(X, y, eta_off, row_norm, offsets, theta, hclip, code, param, out, gclip=math.inf):
    """Per-client mean Hessian with per-sample contributions clipped in norm.

    ``out[c] = (1/n_c) sum_j w_j x_j x_j^T`` with ``w_j = ell''(y_j, z_j) min(1, hclip / (ell'' ||x_j||^2))``,
    ``z_j = x_j^T theta_c + o_j``, so each contribution has spectral (= Frobenius, rank one) norm at most ``hclip``. It is
    accumulated as ``v_j v_j^T`` with ``v_j = g_j x_j`` and ``g_j = min(sqrt(ell''), L_j)``,
    ``L_j = sqrt(hclip kappa) / ||x_j||`` (:func:`_limit`): ``||x||^2`` is never formed, so rows
    with ``||x|| > 1e154`` are clipped correctly, and ``|v_a v_b| <= hclip`` cannot overflow. A
    NaN ``ell''`` contributes 0 (see the module docstring); ``row_norm[j] >= ||x_j||`` is required.
    Exactly symmetric.

    ``gclip`` (B, default ``inf``: every row) gives the Jacobian of the mean *clipped* score of
    :func:`glm_clipped_mean_grad` instead: a row whose gradient that kernel clips (``|ell'| > L``
    with ``L = B kappa / ||x_j||``, :func:`_limit`, exactly its test) or zeroes (NaN residual)
    contributes 0, since its clipped gradient ``L x_j sign(ell')`` does not move with theta; every
    other row as above. A zero term keeps the per-term bound ``hclip``.
    """
    bound, cap, nan_fill = _clip_constants(hclip)
    sqrt_bound = math.sqrt(bound)
    gbound, gcap, _ = _clip_constants(gclip)
    select = not math.isinf(gclip)
    for c in prange(offsets.shape[0] - 1):
        t, h, v = _outer_setup(theta, c, out)
        for j in range(offsets[c], offsets[c + 1]):
            z = _predictor(X[j], t, eta_off, j)
            if select and not abs(_deriv(code, param, y[j], z)) <= _limit(gbound, row_norm[j], gcap):
                continue
            g = math.sqrt(_deriv2(code, param, y[j], z))
            _scale_into(v, _clip_scalar(g, _limit(sqrt_bound, row_norm[j], cap), nan_fill), X[j])
            _add_outer(h, v)
        _mirror_mean(h, offsets[c + 1] - offsets[c])


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def glm_row_hessian_roots(X, y, eta_off, row_norm, theta, hclip, code, param, out, gclip=math.inf):
    """Every row's root ``v_j`` of its term ``v_j v_j^T`` of :func:`glm_client_hessian` (the same clipping, selection
    and non-finite rules, one row per output row): ``out[j] = g_j x_j``, ``g_j = min(sqrt(ell''), L_j)``, or 0 for a
    row that ``gclip`` leaves out. ``theta`` has one row (shared) or one per row of ``X``."""
    bound, cap, nan_fill = _clip_constants(hclip)
    sqrt_bound = math.sqrt(bound)
    gbound, gcap, _ = _clip_constants(gclip)
    select = not math.isinf(gclip)
    shared = theta.shape[0] == 1
    for j in prange(X.shape[0]):
        z = _predictor(X[j], theta[0] if shared else theta[j], eta_off, j)
        v = out[j]
        if select and not abs(_deriv(code, param, y[j], z)) <= _limit(gbound, row_norm[j], gcap):
            v[:] = 0.0
            continue
        g = math.sqrt(_deriv2(code, param, y[j], z))
        _scale_into(v, _clip_scalar(g, _limit(sqrt_bound, row_norm[j], cap), nan_fill), X[j])


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def glm_client_score_outer(X, y, eta_off, row_norm, offsets, theta, clip, code, param, out):
    """Per-client mean outer product of the clipped per-sample gradients (the score covariance ``Sigma``).

    ``out[c] = (1/n_c) sum_{j in c} g_j g_j^T`` with ``g_j`` the per-sample gradient of
    :func:`glm_clipped_mean_grad` exactly: ``g_j = s_j x_j``, ``s_j = copysign(min(|ell'(y_j, z_j)|, L_j), ell')``,
    ``L_j = clip kappa / ||x_j||`` (:func:`_limit`), ``z_j = x_j^T theta_c + o_j``, and the same
    non-finite rules (a NaN residual contributes 0; an infinite one is clipped). Each term has
    Frobenius norm ``||g_j||^2 <= clip^2``; ``||x_j||^2`` is never formed, and ``|g_a g_b| <= clip^2``
    cannot overflow. ``clip = inf``: no clipping (NaN and inf propagate). ``row_norm[j] >= ||x_j||``
    is required. Exactly symmetric.
    """
    bound, cap, nan_fill = _clip_constants(clip)
    for c in prange(offsets.shape[0] - 1):
        t, h, v = _outer_setup(theta, c, out)
        for j in range(offsets[c], offsets[c + 1]):
            r = _deriv(code, param, y[j], _predictor(X[j], t, eta_off, j))
            _scale_into(v, _clip_scalar(r, _limit(bound, row_norm[j], cap), nan_fill), X[j])
            _add_outer(h, v)
        _mirror_mean(h, offsets[c + 1] - offsets[c])


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def glm_client_design_moments(X, row_norm, offsets, row_clip, out):
    """Per-client mean of ``u_j u_j^T`` with the rows scaled to norm ``row_clip``: ``u_j = min(1, L_j) x_j``.

    ``L_j = row_clip kappa / ||x_j||`` (:func:`_limit`), so each term has Frobenius norm
    ``||u_j||^2 <= row_clip^2`` for every finite row (``||x_j||^2`` is never formed; a row whose
    norm exceeds the largest double contributes 0, a zero row 0). ``row_clip = inf``: the plain
    ``(1/n_c) X_c^T X_c``. ``row_norm[j] >= ||x_j||`` is required. Exactly symmetric.
    """
    m = offsets.shape[0] - 1
    d = X.shape[1]
    bound, cap, _ = _clip_constants(row_clip)
    for c in prange(m):
        h = out[c]
        h[:, :] = 0.0
        v = np.empty(d)
        for j in range(offsets[c], offsets[c + 1]):
            _scale_into(v, min(1.0, _limit(bound, row_norm[j], cap)), X[j])
            _add_outer(h, v)
        _mirror_mean(h, offsets[c + 1] - offsets[c])
