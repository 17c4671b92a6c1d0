"""The clipping bound holds for every finite input, in every kernel and in the numpy twins.

Adversarial rows (tiny ~1e-300, subnormal, huge ~1e308, mixed scales in one row, zero) with
finite ``y`` (huge included) and finite ``theta`` (huge included) go through every family and
both gradient layouts. Norms of the outputs are checked exactly, with Python fractions, so the
reference itself neither underflows nor overflows:

* each per-sample contribution (one row per client) has norm <= B (gradients, L2) or <= hclip
  (Hessians, Frobenius), in the kernels and in the twins;
* replacing one row of a client by an adversarial row moves the client's message by at most
  ``2 B / n_i`` (the sensitivity the Channel states);
* kernel and twin agree on rows where both are finite and the computation is well-conditioned;
* the same with per-row offsets of the linear predictor (any finite value, up to the largest
  double: the offset only moves the residual, so the bounds must hold unchanged);
* the documented treatment of non-finite intermediates (NaN predictor -> 0, infinite residual ->
  clipped with its sign, norm above the largest double -> 0) and the regressions of issue 8.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_kernels import readonly

from privfedstat._linalg import row_norm_bounds
from privfedstat.families import get_family
from privfedstat.kernels import reference as ref
from privfedstat.kernels.glm_nb import (
    CLIP_SAFETY,
    MIN_BOUND,
    glm_client_hessian,
    glm_clipped_mean_grad,
    glm_clipped_mean_grad_cols,
)
from privfedstat.kernels.multinomial_nb import multinomial_client_hessian, multinomial_clipped_mean_grad

DMAX = float(np.finfo(np.float64).max)
DENORM = 5e-324
FAMILIES = [("logistic", {}), ("poisson", {}), ("gaussian", {}), ("huber", {}), ("multinomial", {"n_classes": 3})]
CLIPS = [MIN_BOUND, 1e-10, 1e-3, 1.0, 7.0, 1e6, 1e300]
EXTREMES = [0.0, DENORM, -DENORM, 1e-310, 2.2250738585072014e-308, 1e-300, -1e-200, 1e-163, 1.0, -3.0, 1e155, -1e200,
            1e300, DMAX, -DMAX]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

finite = st.floats(allow_nan=False, allow_infinity=False)  # the whole range, subnormals included
entries = st.one_of(finite, st.sampled_from(EXTREMES), st.floats(-10, 10))


# --------------------------------------------------------------------------- running kernels and twins
def grads(fam, X, y, offsets, theta, clip, off=None) -> dict[str, np.ndarray]:
    """Clipped mean gradients from every kernel layout (row-major, column-major) and from the twin.

    ``off``: per-row offsets of the linear predictor (scalar-response families), or None."""
    m, p = offsets.size - 1, X.shape[1] * fam.n_outputs
    X_, y_, rn, offsets_ = readonly(X, y, row_norm_bounds(X), offsets)
    out = {}
    if fam.n_outputs > 1:
        out["rows"] = np.full((m, p), np.nan)
        multinomial_clipped_mean_grad(X_, y_, rn, offsets_, theta, clip, fam.n_outputs, out["rows"])
        out["twin"] = ref.multinomial_clipped_mean_grad(X, y, offsets, theta, clip, fam)
    else:
        out["rows"], out["cols"] = np.full((m, p), np.nan), np.full((m, p), np.nan)
        eo, Xt = readonly(np.empty(0) if off is None else off, np.ascontiguousarray(X.T))
        glm_clipped_mean_grad(X_, y_, eo, rn, offsets_, theta, clip, fam.code, fam.param, out["rows"])
        glm_clipped_mean_grad_cols(Xt, y_, eo, rn, offsets_, theta, clip, fam.code, fam.param, out["cols"])
        out["twin"] = ref.clipped_mean_grad(X, y, offsets, theta, clip, fam, off)
    return out


def hessians(fam, X, y, offsets, theta, hclip, off=None) -> dict[str, np.ndarray]:
    m, p = offsets.size - 1, X.shape[1] * fam.n_outputs
    X_, y_, rn, offsets_ = readonly(X, y, row_norm_bounds(X), offsets)
    out = {"kernel": np.full((m, p, p), np.nan)}
    if fam.n_outputs > 1:
        multinomial_client_hessian(X_, y_, rn, offsets_, theta, hclip, fam.n_outputs, out["kernel"])
        out["twin"] = ref.multinomial_client_hessian(X, y, offsets, theta, hclip, fam)
    else:
        glm_client_hessian(X_, y_, *readonly(np.empty(0) if off is None else off), rn, offsets_, theta, hclip, fam.code,
                           fam.param, out["kernel"])
        out["twin"] = ref.client_hessian(X, y, offsets, theta, hclip, fam, off)
    return out


def sq_norm(v) -> Fraction:
    """Exact squared Euclidean (Frobenius) norm of a float array."""
    return sum((Fraction(float(a)) ** 2 for a in np.ravel(v)), Fraction(0))


def assert_within(v, bound: float, what: str) -> None:
    assert np.all(np.isfinite(v)), f"{what}: non-finite output {v}"
    assert sq_norm(v) <= Fraction(bound) ** 2, f"{what}: norm {math.sqrt(float(sq_norm(v)))} > {bound}"


# --------------------------------------------------------------------------- adversarial data
def draw_y(draw, fam) -> float:
    if fam.name == "logistic":
        return draw(st.sampled_from([0.0, 1.0]))
    if fam.name == "poisson":
        return float(draw(st.one_of(st.integers(0, 20), st.floats(0, DMAX).map(math.floor))))
    if fam.name == "multinomial":
        return float(draw(st.integers(0, fam.n_classes - 1)))
    return draw(st.one_of(st.floats(-10, 10), finite))


def draw_row(draw, d: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """An adversarial row x and a theta for it (p = d q entries).

    Half the rows are a moderate pattern at a scale 10^e (e from -323 to 308, the whole row tiny,
    subnormal or huge), often with theta scaled by 10^-e so that x^T theta stays moderate (the
    regime where kernel and twin can be compared); the other half mix arbitrary finite entries.
    """
    if draw(st.booleans()):
        e = draw(st.integers(-323, 308))
        u = np.array(draw(st.lists(st.one_of(st.just(0.0), st.floats(-10, 10)), min_size=d, max_size=d)))
        with np.errstate(over="ignore"):
            x = np.clip(u * 10.0**e, -DMAX, DMAX)
        if e >= -300 and draw(st.booleans()):
            v = np.array(draw(st.lists(st.floats(-3, 3), min_size=p, max_size=p)))
            return x, v * 10.0**-e
    else:
        x = np.array(draw(st.lists(entries, min_size=d, max_size=d)))
    theta = np.array(draw(st.lists(st.one_of(st.floats(-3, 3), entries), min_size=p, max_size=p)))
    return x, theta


def draw_offset(draw, fam, n: int) -> np.ndarray | None:
    """None (no offset; always for the multinomial family, which takes none) or n finite offsets, huge included."""
    if fam.n_outputs > 1 or draw(st.booleans()):
        return None
    return np.array(draw(st.lists(st.one_of(st.floats(-3, 3), entries), min_size=n, max_size=n)))


def draw_family(draw):
    """A family, the number of features d and of parameters p = d q."""
    name, params = draw(st.sampled_from(FAMILIES))
    fam = get_family(name, **params)
    d = draw(st.integers(1, 5))
    return fam, d, d * fam.n_outputs


@st.composite
def per_row_cases(draw):
    """Every row is its own client (with its own theta, or one shared theta): outputs are per-sample contributions."""
    fam, d, p = draw_family(draw)
    n = draw(st.integers(1, 8))
    rows, thetas = zip(*(draw_row(draw, d, p) for _ in range(n)))
    X, theta = np.array(rows), np.array(thetas)
    if draw(st.booleans()):
        theta = theta[:1]
    y = np.array([draw_y(draw, fam) for _ in range(n)])
    return fam, np.ascontiguousarray(X), y, np.arange(n + 1, dtype=np.int64), np.ascontiguousarray(theta), \
        draw(st.sampled_from(CLIPS)), draw_offset(draw, fam, n)


@st.composite
def neighbour_cases(draw):
    """One client with n ordinary rows, and the same client with row j replaced by an adversarial row."""
    fam, d, p = draw_family(draw)
    n = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X = rng.normal(size=(n, d))
    y = np.array([draw_y(draw, fam) if draw(st.booleans()) else 1.0 for _ in range(n)])
    x_adv, theta_adv = draw_row(draw, d, p)
    theta = theta_adv if draw(st.booleans()) else rng.normal(size=p)
    j = draw(st.integers(0, n - 1))
    X2, y2 = X.copy(), y.copy()
    X2[j], y2[j] = x_adv, draw_y(draw, fam)
    off = draw_offset(draw, fam, n)
    off2 = None if off is None else off.copy()
    if off is not None:  # the replaced row brings its own (adversarial) offset
        off2[j] = draw(entries)
    offsets = np.array([0, n], dtype=np.int64)
    return fam, X, y, X2, y2, offsets, np.ascontiguousarray(theta[None]), draw(st.sampled_from(CLIPS)), off, off2


# --------------------------------------------------------------------------- the bound, per sample
@pytest.mark.slow
@pytest.mark.parametrize("which", ["gradient", "Hessian"])
@SETTINGS
@given(case=per_row_cases())
def test_each_clipped_contribution_is_within_the_bound(which, case):
    fam, X, y, offsets, theta, clip, off = case
    run = grads if which == "gradient" else hessians
    for layout, out in run(fam, X, y, offsets, theta, clip, off).items():
        for i, g in enumerate(out):
            assert_within(g, clip, f"{fam.name} {which}, {layout}, row {X[i]}, y {y[i]}")


# --------------------------------------------------------------------------- the bound, neighbouring datasets
@SETTINGS
@given(neighbour_cases())
def test_replacing_one_row_moves_a_message_by_at_most_2B_over_n(case):
    # with n <= 30 rows the rounding of the client's sum (relative (n - 1) u per message) stays
    # inside the kernels' safety margin 1 - CLIP_SAFETY = 2^-40, so the bound holds exactly here
    fam, X, y, X2, y2, offsets, theta, clip, off, off2 = case
    n = X.shape[0]
    bound = Fraction(2) * Fraction(clip) / n
    for which, run in (("gradient", grads), ("Hessian", hessians)):
        a, b = run(fam, X, y, offsets, theta, clip, off), run(fam, X2, y2, offsets, theta, clip, off2)
        for layout in a:
            assert np.all(np.isfinite(a[layout])) and np.all(np.isfinite(b[layout]))
            diff = sum(((Fraction(float(u)) - Fraction(float(v))) ** 2 for u, v in
                        zip(a[layout].ravel(), b[layout].ravel())), Fraction(0))
            assert diff <= bound**2, f"{fam.name} {which} {layout}: moved by {math.sqrt(float(diff))} > 2B/n"


# --------------------------------------------------------------------------- kernel == twin where well-conditioned
def well_conditioned(fam, x, theta, y, clip, o=0.0) -> bool:
    """True where x^T theta and the residual are computed to high relative accuracy by any summation order.

    Also excluded: rows whose norm exceeds the largest double (the kernels give them 0), rows
    whose clipping limit ``B / ||x||`` or ``sqrt(B) / ||x||`` is below 1e-300 (a subnormal limit
    carries fewer significant bits: such rows are clipped correctly but less accurately), and rows
    with a subnormal entry (the fastmath kernels may round products of subnormal operands
    differently: x = 5e-324, residual -4.05e42 gave -2.0e-281 for the exact -2.000002e-281; the
    clipping bound itself is checked for every input by the tests above).
    """
    q = fam.n_outputs
    if np.any((x != 0) & (np.abs(x) < np.finfo(np.float64).tiny)):
        return False
    with np.errstate(all="ignore"):
        terms = np.vstack([x[:, None] * theta.reshape(x.size, q), np.full((1, q), o)])  # the offset is one more term
        z, S = terms.sum(axis=0), np.abs(terms).sum(axis=0)
        if not (np.all(np.isfinite(S)) and np.all(S <= 1e4 * np.abs(z)) and np.all(np.abs(z) <= 10)):
            return False
        norm = row_norm_bounds(x[None])[0]
        if not (np.isfinite(norm) and min(clip, math.sqrt(clip)) / norm >= 1e-300):
            return False
        if fam.name == "multinomial":
            return bool(np.linalg.norm(fam.residual(np.array([y]), z[None])) >= 1e-4)
        z = z[0]
        if fam.name in ("gaussian", "huber"):
            near_kink = fam.name == "huber" and abs(abs(z - y) - fam.param) < 1e-6 * (abs(z) + abs(y) + fam.param)
            return bool(abs(z - y) >= 1e-4 * (abs(z) + abs(y)) and not near_kink)
        return bool(abs(fam.deriv(y, z)) >= 1e-4 * (abs(fam.mean(z)) + abs(y)))


def assert_rows_agree(kernel, twin, ok, what):
    for i in np.flatnonzero(ok):
        k, t = kernel[i].ravel(), twin[i].ravel()
        scale = max(np.max(np.abs(k)), np.max(np.abs(t)))
        assert np.all(np.abs(k - t) <= 1e-6 * scale + 1e-300), f"{what}, row {i}: {k} vs {t}"


@SETTINGS
@given(per_row_cases())
def test_kernels_equal_twins_where_well_conditioned(case):
    fam, X, y, offsets, theta, clip, off = case
    o = np.zeros(X.shape[0]) if off is None else off
    ok = [well_conditioned(fam, X[i], theta[min(i, theta.shape[0] - 1)], y[i], clip, o[i]) for i in range(X.shape[0])]
    g = grads(fam, X, y, offsets, theta, clip, off)
    for layout in g:
        if layout != "twin":
            assert_rows_agree(g[layout], g["twin"], ok, f"{fam.name} gradient {layout}")
    h = hessians(fam, X, y, offsets, theta, clip, off)
    assert_rows_agree(h["kernel"], h["twin"], ok, f"{fam.name} Hessian")


# --------------------------------------------------------------------------- documented treatments, regressions
def one_row(fam, x, y, theta, clip):
    X = np.array([x], dtype=np.float64)
    return X, np.array([y], dtype=np.float64), np.array([0, 1], dtype=np.int64), np.array([theta], dtype=np.float64)


@pytest.mark.parametrize("name", ["gaussian", "poisson"])
def test_issue8_tiny_row_with_huge_y_is_clipped(name):
    # all |x_k| < 1e-162: sqrt(sum(x^2)) underflowed to 0 and this row moved the message by ~1e130
    fam = get_family(name)
    case = one_row(fam, [1e-170, 1e-170], 1e300, [0.0, 0.0], 1.0)
    for layout, g in grads(fam, *case, 1.0).items():
        np.testing.assert_allclose(g[0], -CLIP_SAFETY / np.sqrt(2), rtol=1e-14, err_msg=layout)


def test_issue8_huge_row_hessian_is_clipped_not_dropped():
    # ||x||^2 = 2e400 overflowed, so the clipped weight became hclip / inf = 0
    fam = get_family("logistic")
    h = hessians(fam, *one_row(fam, [1e200, 1e200], 0.0, [0.0, 0.0], 1.0), 3.0)
    for layout, out in h.items():
        np.testing.assert_allclose(out[0], np.full((2, 2), 3.0 * CLIP_SAFETY / 2), rtol=1e-14, err_msg=layout)


@pytest.mark.parametrize("name, n_classes", [("gaussian", None), ("logistic", None), ("multinomial", 3)])
def test_nan_predictor_contributes_zero_and_propagates_without_clipping(name, n_classes):
    # x^T theta = inf - inf is NaN or +-inf depending on the summation order and FMA contraction
    # (both are handled: the property tests above cover them); a NaN coefficient forces NaN
    fam = get_family(name, **({"n_classes": n_classes} if n_classes else {}))
    p = 2 * fam.n_outputs
    case = one_row(fam, [1.0, 2.0], 1.0, np.full(p, np.nan), 1.0)
    runs = ((grads, p), (hessians, p * p)) if name != "gaussian" else ((grads, p),)  # Gaussian ell'' = 1 for any z
    for run, size in runs:
        for layout, out in run(fam, *case, 1.0).items():
            np.testing.assert_array_equal(out.ravel(), np.zeros(size), err_msg=layout)
        for layout, out in run(fam, *case, np.inf).items():
            assert np.all(np.isnan(out)), layout


def test_infinite_residual_is_clipped_with_its_sign():
    fam = get_family("gaussian")
    for t, sign in ((1e10, 1.0), (-1e10, -1.0)):
        case = one_row(fam, [1e300], 0.0, [t], 2.0)  # z = +-inf, residual z - y = +-inf
        for layout, g in grads(fam, *case, 2.0).items():
            np.testing.assert_allclose(g[0], [sign * 2.0 * CLIP_SAFETY], rtol=1e-14, err_msg=layout)


@pytest.mark.parametrize("name", ["gaussian", "poisson", "logistic", "huber"])
def test_huge_offsets_give_finite_clipped_messages(name):
    # o = +-DMAX with x^T theta of either sign: the predictor overflows to +-inf or stays finite;
    # every message is finite, within B (the residual is clipped with its sign), never NaN
    fam = get_family(name)
    X = np.array([[1.0, 2.0], [1.0, -3.0], [1e300, 1.0], [0.5, 0.5]])
    y = np.array([1.0, 0.0, 1.0, 0.0])
    offsets = np.arange(5, dtype=np.int64)
    for o in (DMAX, -DMAX):
        for t in ([1e308, 0.0], [-1e308, 0.0], [0.3, -0.2]):
            off = np.full(4, o)
            theta = np.array([t])
            for run in (grads, hessians):
                for layout, out in run(fam, X, y, offsets, theta, 2.0, off).items():
                    for i, g in enumerate(out):
                        assert_within(g, 2.0, f"{name} {run.__name__} {layout} o={o} theta={t} row {i}")
    # the limit of large residuals: z = +inf (Gaussian residual +inf) contributes B x / ||x|| with its sign
    if name == "gaussian":
        g = grads(fam, X[:1], y[:1], offsets[:2], np.array([[1e308, 0.0]]), 2.0, np.array([DMAX]))
        for layout, out in g.items():
            np.testing.assert_allclose(out[0], 2.0 * CLIP_SAFETY * X[0] / np.linalg.norm(X[0]), rtol=1e-14, err_msg=layout)


def test_multinomial_infinite_predictor_gives_limit_probabilities():
    fam = get_family("multinomial", n_classes=3)
    # z = (inf, 0): p = (0, 1, 0) exactly, y = 1 -> residual 0, and the curvature is 0
    case = one_row(fam, [1e300], 1.0, [1e10, 0.0], 1.0)
    for run in (grads, hessians):
        for layout, out in run(fam, *case, 1.0).items():
            np.testing.assert_array_equal(out.ravel(), 0.0, err_msg=layout)


def test_row_whose_norm_exceeds_the_largest_double_contributes_zero():
    fam = get_family("gaussian")
    case = one_row(fam, [1.5e308, 1.5e308], 5.0, [0.0, 0.0], 1.0)
    for layout, g in grads(fam, *case, 1.0).items():
        if layout != "twin":  # the twin clips it (its norm is exact); the kernels only have inf
            np.testing.assert_array_equal(g[0], [0.0, 0.0], err_msg=layout)


@pytest.mark.parametrize("name, n_classes", [("gaussian", None), ("multinomial", 3)])
def test_subnormal_limits_are_rounded_down(name, n_classes):
    # B / ||x|| ~ 1e-320 is subnormal: rounded to nearest it can exceed the exact quotient by
    # 1e-4 relative, far beyond the safety margin; the kernels round it down instead
    fam = get_family(name, **({"n_classes": n_classes} if n_classes else {}))
    rng = np.random.default_rng(0)
    X = rng.uniform(1.0, 1.7, size=(200, 1)) * 1e300
    y = np.full(200, 2.0)  # gaussian residual -2 at theta = 0; multinomial residual of class 2
    offsets = np.arange(201, dtype=np.int64)
    theta = np.zeros((1, fam.n_outputs))
    for run, bound in ((grads, 1e-20), (hessians, 1e-40)):
        out = run(fam, X, y, offsets, theta, bound)
        for layout in out:
            if layout != "twin":
                for i, g in enumerate(out[layout]):
                    assert_within(g, bound, f"{name} {layout} row {X[i]}")
