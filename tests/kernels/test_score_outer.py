"""Oracle verbs for private inference (issue 10): clipped score outer products, clipped design moments, row norms.

``score_outer(theta, clip)`` is the per-client mean of ``g_j g_j^T`` with ``g_j`` the clipped
per-sample gradient of ``clipped_gradients``; ``design_moments(row_clip)`` the per-client mean of
``u_j u_j^T`` with the rows scaled to norm ``row_clip``. Checked here:

* numba kernels (through the oracles) == numpy twins (mantissa/exponent products) on random data
  with offsets, per-client theta, clip = inf and tiny clips, for every family, and == a naive
  numpy loop without clipping (an independent reference);
* for adversarial rows (tiny, subnormal, huge up to the largest double, mixed scales, huge
  offsets): every per-sample term has Frobenius norm ``<= C`` (``C = clip^2`` or ``row_clip^2``),
  exactly (Python fractions), and kernel == twin where the computation is well-conditioned;
* the stated sensitivity: replacing one row moves ``sym_to_vec`` of a client's mean by at most
  ``sqrt(2) C / n_i`` (``hessian_sensitivity`` with ``C``), exactly, and the bound is attained;
* the non-finite rules of the gradient kernels (NaN residual -> 0, infinite residual clipped);
* the oracle's checks of the bounds and ``sample_norms("row")``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_clipping_bounds import (
    DMAX,
    assert_within,
    neighbour_cases,
    per_row_cases,
    sq_norm,
    well_conditioned,
)
from test_clipping_bounds import SETTINGS as ADVERSARIAL_SETTINGS
from test_kernels import SETTINGS, assert_close, cases

from privfedstat import FederatedData
from privfedstat._linalg import row_norm_bounds
from privfedstat.families import get_family
from privfedstat.federation.oracle import make_oracle
from privfedstat.kernels import reference as ref
from privfedstat.kernels.glm_nb import CLIP_SAFETY, MIN_BOUND
from privfedstat.privacy.calibration import hessian_sensitivity

MULTINOMIAL = get_family("multinomial", n_classes=3)


# --------------------------------------------------------------------------- running oracle and twins
def oracle(fam, X, y, offsets, off=None):
    return make_oracle(FederatedData(X, y, offsets, None if fam.n_outputs > 1 else off), fam)


def score_outer(fam, X, y, offsets, theta, clip, off=None) -> dict[str, np.ndarray]:
    """The oracle's (numba) score outer products and the twin's, shape (m, p, p)."""
    theta = np.atleast_2d(theta)
    if fam.n_outputs > 1:
        twin = ref.multinomial_client_score_outer(X, y, offsets, theta, clip, fam)
    else:
        twin = ref.client_score_outer(X, y, offsets, theta, clip, fam, off)
    return {"kernel": oracle(fam, X, y, offsets, off).score_outer(theta[0] if theta.shape[0] == 1 else theta, clip),
            "twin": twin}


def design_moments(X, offsets, row_clip) -> dict[str, np.ndarray]:
    fam = get_family("gaussian")
    return {"kernel": oracle(fam, X, np.zeros(X.shape[0]), offsets).design_moments(row_clip),
            "twin": ref.client_design_moments(X, offsets, row_clip)}


def per_sample_gradients(fam, X, y, theta, off=None) -> np.ndarray:
    """Unclipped per-sample gradients (N, p) from the family's formulas, flattened as theta (j q + k)."""
    if fam.n_outputs > 1:
        R = fam.residual(y, X @ theta.reshape(X.shape[1], -1))
        return np.einsum("ij,ik->ijk", X, R).reshape(X.shape[0], -1)
    z = X @ theta + (0.0 if off is None else off)
    return fam.deriv(y, z)[:, None] * X


def naive_mean_outer(G, offsets, clip=np.inf) -> np.ndarray:
    """Per-client mean of g g^T, each g scaled to norm clip (a plain loop over clients)."""
    n = np.linalg.norm(G, axis=1)
    G = G * np.minimum(1.0, clip / np.where(n > 0, n, 1.0))[:, None]
    return np.array([G[a:b].T @ G[a:b] / (b - a) for a, b in zip(offsets[:-1], offsets[1:])])


def outer_scale(fam, X, y, offsets, theta, clip, off=None) -> np.ndarray:
    """Mean over each client of |g_j| |g_j|^T (clipped g_j): bounds every entry of the result."""
    rows = np.repeat(theta, np.diff(offsets), axis=0) if theta.shape[0] > 1 else np.broadcast_to(theta, X.shape)
    r = fam.deriv(y, np.einsum("ij,ij->i", X, rows) + (0.0 if off is None else off))
    return naive_mean_outer(np.abs(r[:, None] * X), offsets, clip)


def multinomial_case(seed: int, sizes=(7, 12, 3), d: int = 3) -> tuple:
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    X = np.column_stack([np.ones(offsets[-1]), rng.normal(size=(offsets[-1], d - 1))])
    y = rng.integers(0, 3, offsets[-1]).astype(float)
    return X, y, offsets, rng.normal(size=2 * d) * 0.5


# --------------------------------------------------------------------------- kernel == twin == naive
@SETTINGS
@given(cases(), st.one_of(st.none(), st.sampled_from([0.1, 1.0, 3.0])), st.integers(0, 2**32 - 1))
def test_score_outer_matches_twin(case, o_scale, seed):
    fam, X, y, offsets, theta, clip = case
    off = None if o_scale is None else np.random.default_rng(seed).normal(0.0, o_scale, size=y.size)
    out = score_outer(fam, X, y, offsets, theta, clip, off)
    assert_close(out["kernel"], out["twin"], outer_scale(fam, X, y, offsets, theta, clip, off), clip**2)
    np.testing.assert_array_equal(out["kernel"], np.swapaxes(out["kernel"], 1, 2))  # exactly symmetric


@pytest.mark.slow
@pytest.mark.parametrize("name", ["logistic", "poisson", "gaussian", "huber", "multinomial"])
@pytest.mark.parametrize("clip", [1e-6, 0.7, np.inf])
def test_score_outer_equals_a_naive_loop(name, clip):
    # independent reference: the per-sample gradients from the family's formulas, clipped and multiplied out
    fam = MULTINOMIAL if name == "multinomial" else get_family(name)
    X, y, offsets, theta = multinomial_case(4)
    if fam.n_outputs == 1:
        theta = theta[:3]
        y = (y > 0).astype(float) if name == "logistic" else y * 1.5
    off = None if fam.n_outputs > 1 else np.linspace(-0.5, 0.5, y.size)
    got = score_outer(fam, X, y, offsets, theta, clip, off)
    want = naive_mean_outer(per_sample_gradients(fam, X, y, theta, off), offsets, clip * CLIP_SAFETY)
    for layout, value in got.items():
        np.testing.assert_allclose(value, want, rtol=1e-10, atol=1e-14 * min(1.0, clip**2), err_msg=layout)


@pytest.mark.parametrize("seed", range(3))
def test_multinomial_score_outer_matches_twin_per_client_theta(seed):
    X, y, offsets, theta = multinomial_case(seed)
    thetas = theta + np.random.default_rng(seed).normal(size=(3, theta.size))
    for clip in (1e-6, 0.3, 2.0, np.inf):
        out = score_outer(MULTINOMIAL, X, y, offsets, thetas, clip)
        np.testing.assert_allclose(out["kernel"], out["twin"], rtol=1e-10, atol=1e-14 * min(1.0, clip**2))
        np.testing.assert_array_equal(out["kernel"], np.swapaxes(out["kernel"], 1, 2))
    # per-client theta is used per client: client 1's block equals the one with theta_1 shared by all
    per_client = score_outer(MULTINOMIAL, X, y, offsets, thetas, 0.3)["kernel"]
    np.testing.assert_array_equal(per_client[1], score_outer(MULTINOMIAL, X, y, offsets, thetas[1], 0.3)["kernel"][1])
    assert not np.allclose(per_client[1], score_outer(MULTINOMIAL, X, y, offsets, thetas[0], 0.3)["kernel"][1])


@pytest.mark.parametrize("row_clip", [1e-140, 1e-3, 1.5, np.inf])
def test_design_moments_match_twin_and_naive(row_clip):
    rng = np.random.default_rng(1)
    X = np.column_stack([np.ones(40), rng.normal(size=(40, 3)) * [0.1, 1.0, 3.0]])
    X[5] = 0.0
    offsets = np.array([0, 1, 25, 40], dtype=np.int64)
    out = design_moments(X, offsets, row_clip)
    want = naive_mean_outer(X, offsets, row_clip * CLIP_SAFETY)
    for layout, value in out.items():
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-15 * min(1.0, row_clip**2), err_msg=layout)
    np.testing.assert_array_equal(out["kernel"], np.swapaxes(out["kernel"], 1, 2))
    # the multinomial oracle has the same design (d x d, not d q x d q)
    mult = oracle(MULTINOMIAL, X, np.zeros(40), offsets).design_moments(row_clip)
    np.testing.assert_array_equal(mult, out["kernel"])


# --------------------------------------------------------------------------- adversarial rows: the bound, exactly
def _outer_clip(clip: float) -> float:
    """The gradient bound B whose square is ``clip`` (the bounds of test_clipping_bounds as C = B^2)."""
    return math.sqrt(clip)


@pytest.mark.slow
@ADVERSARIAL_SETTINGS
@given(per_row_cases())
def test_each_term_is_within_C(case):
    # every row is its own client: the outputs are the per-sample terms g g^T and u u^T themselves
    fam, X, y, offsets, theta, C, off = case
    B = _outer_clip(C)
    for layout, out in score_outer(fam, X, y, offsets, theta, B, off).items():
        for i, t in enumerate(out):
            assert_within(t, C, f"{fam.name} score outer {layout}, row {X[i]}, y {y[i]}")
    for layout, out in design_moments(X, offsets, B).items():
        for i, t in enumerate(out):
            assert_within(t, C, f"design moments {layout}, row {X[i]}")


@pytest.mark.slow
@ADVERSARIAL_SETTINGS
@given(per_row_cases())
def test_kernels_equal_twins_on_extreme_rows_where_well_conditioned(case):
    fam, X, y, offsets, theta, C, off = case
    B = _outer_clip(C)
    o = np.zeros(X.shape[0]) if off is None else off
    ok = [well_conditioned(fam, X[i], theta[min(i, theta.shape[0] - 1)], y[i], B, o[i]) for i in range(X.shape[0])]
    _rows_agree(score_outer(fam, X, y, offsets, theta, B, off), ok, f"{fam.name} score outer")
    norms = row_norm_bounds(X)
    with np.errstate(over="ignore"):
        _rows_agree(design_moments(X, offsets, B), np.isfinite(norms) & (B / norms >= 1e-300), "design moments")


def _rows_agree(out, ok, what):
    for i in np.flatnonzero(ok):
        k, t = out["kernel"][i].ravel(), out["twin"][i].ravel()
        scale = max(np.max(np.abs(k)), np.max(np.abs(t)))
        assert np.all(np.abs(k - t) <= 1e-6 * scale + 1e-300), f"{what}, row {i}: {k} vs {t}"


@pytest.mark.slow
@ADVERSARIAL_SETTINGS
@given(neighbour_cases())
def test_replacing_one_row_moves_a_release_by_at_most_sqrt2_C_over_n(case):
    # n <= 30: the rounding of the client's sum stays inside the margin 1 - CLIP_SAFETY^2 (as for the gradients)
    fam, X, y, X2, y2, offsets, theta, C, off, off2 = case
    B = _outer_clip(C)
    bound = Fraction(float(hessian_sensitivity(C, np.array([X.shape[0]]))[0]))
    pairs = {"score outer": (oracle(fam, X, y, offsets, off).score_outer(theta, B),
                             oracle(fam, X2, y2, offsets, off2).score_outer(theta, B)),
             "design moments": (design_moments(X, offsets, B)["kernel"], design_moments(X2, offsets, B)["kernel"])}
    for what, (a, b) in pairs.items():
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)), what
        diff = sum(((Fraction(float(u)) - Fraction(float(v))) ** 2 for u, v in zip(a.ravel(), b.ravel())), Fraction(0))
        assert diff <= bound**2, f"{fam.name} {what}: moved by {math.sqrt(float(diff))} > sqrt(2) C / n = {float(bound)}"


@pytest.mark.parametrize("what", ["score outer", "design moments"])
def test_the_sensitivity_is_attained(what):
    # D: row 0 is clipped along e_1, D': along e_2 (orthogonal rank-one terms of norm C): the release
    # moves by sqrt(2) C / n up to the safety margin, so no smaller sensitivity would be valid
    fam, n, B = get_family("gaussian"), 5, 0.5
    X = np.column_stack([np.ones(n), np.zeros(n)]) * 0.1
    y = np.zeros(n)
    offsets = np.array([0, n], dtype=np.int64)
    X2, y2 = X.copy(), y.copy()
    X[0], y[0], X2[0], y2[0] = [100.0, 0.0], -1e6, [0.0, 100.0], 1e6
    if what == "score outer":
        theta = np.zeros(2)
        a, b = (oracle(fam, *D, offsets).score_outer(theta, B) for D in ((X, y), (X2, y2)))
    else:
        a, b = design_moments(X, offsets, B)["kernel"], design_moments(X2, offsets, B)["kernel"]
    moved = np.linalg.norm(a - b)
    stated = hessian_sensitivity(B**2, np.array([n]))[0]
    assert stated * (1 - 1e-11) <= moved <= stated


# --------------------------------------------------------------------------- non-finite rules
@pytest.mark.parametrize("fam", [get_family("gaussian"), get_family("logistic"), MULTINOMIAL], ids=lambda f: f.name)
def test_nan_predictor_contributes_zero_and_propagates_without_clipping(fam):
    X = np.array([[1.0, 2.0], [0.5, -1.0]])
    y = np.array([1.0, 0.0])
    offsets = np.array([0, 2], dtype=np.int64)
    theta = np.full(2 * fam.n_outputs, np.nan)
    np.testing.assert_array_equal(oracle(fam, X, y, offsets).score_outer(theta, 1.0), 0.0)
    assert np.all(np.isnan(oracle(fam, X, y, offsets).score_outer(theta, np.inf)))
    np.testing.assert_array_equal(ref.multinomial_client_score_outer(X, y, offsets, theta, 1.0, fam) if fam.n_outputs > 1
                                  else ref.client_score_outer(X, y, offsets, theta, 1.0, fam), 0.0)


def test_infinite_residual_is_clipped():
    # z = +-inf (x^T theta overflows): the term is (B kappa)^2 x x^T / ||x||^2, the limit of large residuals
    fam = get_family("gaussian")
    X = np.array([[1e300, 1e300]])
    offsets = np.array([0, 1], dtype=np.int64)
    for t in (1e10, -1e10):
        out = score_outer(fam, X, np.zeros(1), offsets, np.array([t, t]), 2.0)
        for layout, value in out.items():
            np.testing.assert_allclose(value[0], np.full((2, 2), (2.0 * CLIP_SAFETY) ** 2 / 2), rtol=1e-14, err_msg=layout)


def test_huge_and_tiny_rows_are_clipped_not_dropped():
    # ||x||^2 overflows (1e200) or underflows (1e-200): the kernels never form it
    fam = get_family("poisson")
    X = np.array([[1e200, -1e200], [1e-200, 1e-200]])
    y = np.array([1e300, 1e300])  # residual -1e300: the tiny row's gradient 1e100 is clipped too
    offsets = np.array([0, 1, 2], dtype=np.int64)
    want = (1.5 * CLIP_SAFETY) ** 2 / 2 * np.array([[[1.0, -1.0], [-1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]])
    for layout, value in score_outer(fam, X, y, offsets, np.zeros(2), 1.5).items():
        np.testing.assert_allclose(value, want, rtol=1e-14, err_msg=layout)
    dm = design_moments(X, offsets, 1.5)
    np.testing.assert_allclose(dm["kernel"][0], want[0], rtol=1e-14)
    np.testing.assert_array_equal(dm["kernel"][1], 0.0)  # 1e-400 underflows: unclipped, tiny, exact to 0


def test_row_beyond_the_largest_double_contributes_zero():
    X = np.array([[DMAX, DMAX], [1.0, 0.0]])
    offsets = np.array([0, 2], dtype=np.int64)
    np.testing.assert_array_equal(design_moments(X, offsets, 2.0)["kernel"][0], [[0.5, 0.0], [0.0, 0.0]])


# --------------------------------------------------------------------------- the oracle's checks, row norms
@pytest.mark.parametrize("bad, match", [(0.0, "at least"), (-1.0, "at least"), (float("nan"), "at least"),
                                        (1e-141, "at least"), (1e154, "too large"), (2e153, "too large")])
def test_bounds_are_checked(bad, match):
    X, y, offsets, theta = multinomial_case(0, sizes=(3, 4))  # n_max = 4: C n_max <= 1e307 needs clip <= 1.58e153
    for fam, t in ((get_family("logistic"), theta[:3]), (MULTINOMIAL, theta)):
        o = oracle(fam, X, (y > 0).astype(float) if fam.n_outputs == 1 else y, offsets)
        with pytest.raises(ValueError, match=f"clip .*{match}"):
            o.score_outer(t, bad)
        with pytest.raises(ValueError, match=f"row_clip .*{match}"):
            o.design_moments(bad)
        for ok in (math.sqrt(MIN_BOUND), 1.5e153, np.inf):
            assert o.score_outer(t, ok).shape == (2, t.size, t.size)
            assert o.design_moments(ok).shape == (2, 3, 3)
        assert np.all(np.isfinite(o.score_outer(t, 1.5e153))) and np.all(np.isfinite(o.design_moments(1.5e153)))


@pytest.mark.parametrize("fam", [get_family("poisson"), MULTINOMIAL], ids=lambda f: f.name)
def test_sample_norms_row(fam):
    X = np.array([[1e-300, 1e-300], [3.0, 4.0], [DMAX / 2, DMAX / 2], [0.0, 0.0]])
    o = oracle(fam, X, np.ones(4), np.array([0, 4], dtype=np.int64))
    norms = o.sample_norms("row", None)  # theta is ignored
    np.testing.assert_array_equal(norms, o.data.row_norms)
    for x, b in zip(X, norms):
        assert Fraction(float(b)) ** 2 >= sq_norm(x)  # upper bounds, exactly
    np.testing.assert_allclose(norms[:2], [math.sqrt(2) * 1e-300, 5.0], rtol=1e-14)
    with pytest.raises(ValueError, match="'row'"):
        o.sample_norms("rows", np.zeros(o.n_params))

