"""numba kernels (privfedstat.kernels.glm_nb) against their numpy twins (privfedstat.kernels.reference).

Tolerances: the kernels use fastmath (reassociation, FMA contraction) and a different summation
order from numpy, so every comparison allows ``rtol = 1e-10`` relative to the magnitude of the
summands (the mean of the absolute per-sample contributions, which bounds the result) plus an
absolute ``1e-12`` (scaled down with tiny clipping bounds, where all values are tiny).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privfedstat._linalg import row_norm_bounds as row_norms
from privfedstat.families import get_family
from privfedstat.kernels import reference as ref
from privfedstat.kernels.glm_nb import (
    CLIP_SAFETY,
    glm_client_hessian,
    glm_client_loss,
    glm_clipped_mean_grad,
    glm_clipped_mean_grad_cols,
)

FAMILY_SPECS = [("logistic", {}), ("poisson", {}), ("gaussian", {}), ("huber", {}), ("huber", {"c": 2.0})]
RTOL = 1e-10
ATOL = 1e-12
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- helpers
def readonly(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Read-only views of the kernels' data arguments, as :class:`~privfedstat.FederatedData` hands them over.

    numba compiles one variant per argument type, read-only flag included; calling the kernels as the
    package does tests the variant it runs and spares compiling a second one (seconds per kernel).
    """
    views = tuple(np.asarray(a).view() for a in arrays)
    for v in views:
        v.flags.writeable = False
    return views


def _eo(off):
    """The kernels' offset argument: the offset, or an empty array for none."""
    return np.empty(0) if off is None else off


def k_grad(X, y, offsets, theta, clip, fam, off=None):
    """Row-major kernel; also runs the column-major (small-d) kernel and checks the two agree."""
    out = np.full((offsets.size - 1, X.shape[1]), np.nan)
    data = readonly(y, _eo(off), row_norms(X), offsets)
    glm_clipped_mean_grad(*readonly(X), *data, theta, float(clip), int(fam.code), float(fam.param), out)
    cols = np.full_like(out, np.nan)
    glm_clipped_mean_grad_cols(*readonly(np.ascontiguousarray(X.T)), *data, theta, float(clip), int(fam.code),
                               float(fam.param), cols)
    with np.errstate(all="ignore"):
        scale = grad_scale(X, y, offsets, theta, clip, fam, off)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, np.abs(out))  # the twin's scale overflows for huge y
    assert np.all((cols == out) | (np.abs(cols - out) <= RTOL * scale + ATOL * min(1.0, float(clip)))), (cols, out)
    return out


def k_loss(X, y, offsets, theta, fam, off=None):
    out = np.full(offsets.size - 1, np.nan)
    glm_client_loss(*readonly(X, y, _eo(off), offsets), theta, int(fam.code), float(fam.param), out)
    return out


def k_hess(X, y, offsets, theta, hclip, fam, off=None):
    d = X.shape[1]
    out = np.full((offsets.size - 1, d, d), np.nan)
    glm_client_hessian(*readonly(X, y, _eo(off), row_norms(X), offsets), theta, float(hclip), int(fam.code),
                       float(fam.param), out)
    return out


def _z(X, offsets, theta, off=None):
    rows = np.repeat(theta, np.diff(offsets), axis=0) if theta.shape[0] > 1 else np.broadcast_to(theta, X.shape)
    z = np.einsum("ij,ij->i", X, rows)
    return z if off is None else z + off


def grad_scale(X, y, offsets, theta, clip, fam, off=None):
    """Mean over each client of |clipped per-sample gradient| (elementwise): bounds |result|."""
    G = fam.deriv(y, _z(X, offsets, theta, off))[:, None] * X
    n = np.linalg.norm(G, axis=1)
    f = np.where(n > clip, clip / np.where(n > 0, n, 1.0), 1.0)
    return np.add.reduceat(np.abs(G * f[:, None]), offsets[:-1], axis=0) / np.diff(offsets)[:, None]


def hess_scale(X, y, offsets, theta, hclip, fam, off=None):
    w = fam.deriv2(y, _z(X, offsets, theta, off))
    H = w[:, None, None] * np.einsum("ij,ik->ijk", X, X)
    n = w * np.einsum("ij,ij->i", X, X)
    f = np.where(n > hclip, hclip / np.where(n > 0, n, 1.0), 1.0)
    return np.add.reduceat(np.abs(H * f[:, None, None]), offsets[:-1], axis=0) / np.diff(offsets)[:, None, None]


def assert_close(got, want, scale, clip=np.inf):
    atol = ATOL * min(1.0, clip)
    assert got.shape == want.shape
    assert np.all(np.isfinite(got))
    err = np.abs(got - want)
    tol = RTOL * scale + atol
    bad = err > tol
    assert not np.any(bad), f"max excess {np.max(err - tol)}; got {got[bad][:5]}, want {want[bad][:5]}"


def make_y(name, rng, z):
    n = z.size
    if name == "logistic":
        return rng.integers(0, 2, size=n).astype(np.float64)
    if name == "poisson":
        return rng.poisson(np.exp(np.clip(z, -10, 5))).astype(np.float64)
    return z + rng.normal(0.0, 2.0, size=n)


@st.composite
def cases(draw):
    name, params = draw(st.sampled_from(FAMILY_SPECS))
    fam = get_family(name, **params)
    sizes = draw(st.lists(st.integers(1, 30), min_size=1, max_size=6))
    m = len(sizes)
    d = draw(st.integers(1, 6))
    shared = draw(st.booleans())
    x_scale = draw(st.sampled_from([0.1, 1.0, 3.0]))
    t_scale = draw(st.sampled_from([0.0, 0.3, 1.0]))
    clip = draw(
        st.one_of(
            st.just(1e-10),  # tiny: every sample clipped
            st.just(1e-6),
            st.floats(0.05, 10.0),  # moderate: some clipped
            st.just(np.inf),  # no clipping
        )
    )
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    N = sum(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    X = rng.normal(0.0, x_scale, size=(N, d))
    if draw(st.booleans()):  # a few exactly-zero rows
        X[rng.random(N) < 0.2] = 0.0
    if draw(st.booleans()):  # an intercept column
        X[:, 0] = 1.0
    theta = rng.normal(0.0, 1.0, size=(1 if shared else m, d)) * t_scale / np.sqrt(d)
    y = make_y(name, rng, _z(X, offsets, theta))
    fam.check_y(y)
    return fam, np.ascontiguousarray(X), y, offsets, np.ascontiguousarray(theta), clip


# --------------------------------------------------------------------------- kernel == reference
@SETTINGS
@given(cases())
def test_clipped_mean_grad_matches_reference(case):
    fam, X, y, offsets, theta, clip = case
    got = k_grad(X, y, offsets, theta, clip, fam)
    want = ref.clipped_mean_grad(X, y, offsets, theta, clip, fam)
    assert_close(got, want, grad_scale(X, y, offsets, theta, clip, fam), clip)


@SETTINGS
@given(cases())
def test_client_loss_matches_reference(case):
    fam, X, y, offsets, theta, _ = case
    got = k_loss(X, y, offsets, theta, fam)
    want = ref.client_loss(X, y, offsets, theta, fam)
    scale = np.add.reduceat(np.abs(fam.loss(y, _z(X, offsets, theta))), offsets[:-1]) / np.diff(offsets)
    assert_close(got, want, scale)


@SETTINGS
@given(cases())
def test_client_hessian_matches_reference(case):
    fam, X, y, offsets, theta, hclip = case
    got = k_hess(X, y, offsets, theta, hclip, fam)
    want = ref.client_hessian(X, y, offsets, theta, hclip, fam)
    assert_close(got, want, hess_scale(X, y, offsets, theta, hclip, fam), hclip)
    np.testing.assert_array_equal(got, np.swapaxes(got, 1, 2))  # exactly symmetric


@SETTINGS
@given(cases(), st.sampled_from([0.1, 1.0, 3.0]), st.integers(0, 2**32 - 1))
def test_kernels_with_offset_match_reference(case, o_scale, seed):
    # z_j = x_j^T theta + o_j in all three kernels (both gradient layouts), against the twins
    fam, X, y, offsets, theta, clip = case
    off = np.random.default_rng(seed).normal(0.0, o_scale, size=y.size)
    assert_close(k_grad(X, y, offsets, theta, clip, fam, off), ref.clipped_mean_grad(X, y, offsets, theta, clip, fam, off),
                 grad_scale(X, y, offsets, theta, clip, fam, off), clip)
    scale = np.add.reduceat(np.abs(fam.loss(y, _z(X, offsets, theta, off))), offsets[:-1]) / np.diff(offsets)
    assert_close(k_loss(X, y, offsets, theta, fam, off), ref.client_loss(X, y, offsets, theta, fam, off), scale)
    assert_close(k_hess(X, y, offsets, theta, clip, fam, off), ref.client_hessian(X, y, offsets, theta, clip, fam, off),
                 hess_scale(X, y, offsets, theta, clip, fam, off), clip)


@pytest.mark.parametrize("name", ["logistic", "poisson", "gaussian", "huber"])
def test_constant_offset_is_a_shifted_intercept(name):
    # an offset c on every row = the intercept coefficient moved by c (independent of the twins)
    fam = get_family(name)
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(40), rng.normal(size=(40, 2))])
    y = make_y(name, rng, X @ [0.2, 0.5, -0.3])
    offsets = np.array([0, 15, 40], dtype=np.int64)
    theta = np.array([[0.1, 0.4, -0.2]])
    shifted = theta + [[0.7, 0.0, 0.0]]
    off = np.full(40, 0.7)
    for clip in (0.3, np.inf):
        np.testing.assert_allclose(k_grad(X, y, offsets, theta, clip, fam, off), k_grad(X, y, offsets, shifted, clip, fam),
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(k_hess(X, y, offsets, theta, clip, fam, off), k_hess(X, y, offsets, shifted, clip, fam),
                                   rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k_loss(X, y, offsets, theta, fam, off), k_loss(X, y, offsets, shifted, fam), rtol=1e-12)
    assert not np.allclose(k_loss(X, y, offsets, theta, fam, off), k_loss(X, y, offsets, theta, fam))  # it enters


@SETTINGS
@given(cases())
def test_shared_theta_equals_repeated_theta(case):
    fam, X, y, offsets, theta, clip = case
    m = offsets.size - 1
    if theta.shape[0] != 1 or m == 1:
        theta = theta[:1].copy()
    rep = np.ascontiguousarray(np.repeat(theta, m, axis=0))
    np.testing.assert_allclose(k_grad(X, y, offsets, rep, clip, fam), k_grad(X, y, offsets, theta, clip, fam), rtol=0, atol=0)
    np.testing.assert_allclose(k_loss(X, y, offsets, rep, fam), k_loss(X, y, offsets, theta, fam), rtol=0, atol=0)
    np.testing.assert_allclose(k_hess(X, y, offsets, rep, clip, fam), k_hess(X, y, offsets, theta, clip, fam), rtol=0, atol=0)


def test_per_client_theta_is_used_per_client():
    fam = get_family("gaussian")
    X = np.array([[1.0], [1.0], [1.0]])
    y = np.zeros(3)
    offsets = np.array([0, 1, 3], dtype=np.int64)
    theta = np.array([[2.0], [-5.0]])
    np.testing.assert_array_equal(k_grad(X, y, offsets, theta, np.inf, fam), [[2.0], [-5.0]])
    np.testing.assert_array_equal(k_loss(X, y, offsets, theta, fam), [2.0, 12.5])
    np.testing.assert_allclose(k_grad(X, y, offsets, theta, 1.0, fam), [[CLIP_SAFETY], [-CLIP_SAFETY]], rtol=1e-14)


def test_hand_computed_clipping():
    # one client, gradients (3, 4) (norm 5) and (0.6, 0.8) (norm 1); clip 2 scales the first only
    # (to 2 kappa: the kernels keep a relative safety margin of 2^-40 against rounding)
    fam = get_family("gaussian")
    X = np.array([[3.0, 4.0], [0.6, 0.8]])
    y = np.array([-1.0, -1.0])
    offsets = np.array([0, 2], dtype=np.int64)
    theta = np.zeros((1, 2))
    g = k_grad(X, y, offsets, theta, 2.0, fam)
    k = CLIP_SAFETY
    np.testing.assert_allclose(g, [[(1.2 * k + 0.6) / 2, (1.6 * k + 0.8) / 2]], rtol=1e-14)
    # Hessian: x x^T with norms 25 and 1; hclip 5 scales the first by 1/5
    H = k_hess(X, y, offsets, theta, 5.0, fam)
    expected = (np.outer(X[0], X[0]) * k / 5 + np.outer(X[1], X[1])) / 2
    np.testing.assert_allclose(H[0], expected, rtol=1e-14)


# --------------------------------------------------------------------------- privacy-critical bounds
@st.composite
def adversarial(draw):
    name, params = draw(st.sampled_from(FAMILY_SPECS))
    fam = get_family(name, **params)
    sizes = draw(st.lists(st.integers(1, 30), min_size=1, max_size=6))
    m, N = len(sizes), sum(sizes)
    d = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    log_x = draw(st.floats(-3, 200))  # up to 1e200: row norms then overflow to inf
    log_t = draw(st.floats(-3, 3))
    clip = draw(st.sampled_from([1e-10, 1e-3, 0.5, 1.0, 7.0, 1e6]))
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    X = rng.standard_cauchy(size=(N, d)) * 10.0**log_x
    X = np.clip(X, -1e200, 1e200)
    theta = rng.normal(size=(draw(st.sampled_from([1, m])), d)) * 10.0**log_t
    if name == "logistic":
        y = rng.integers(0, 2, size=N).astype(np.float64)
    elif name == "poisson":
        y = np.floor(np.abs(rng.standard_cauchy(size=N)) * 10.0 ** draw(st.floats(0, 15)))
    else:
        y = rng.standard_cauchy(size=N) * 10.0 ** draw(st.floats(0, 200))
    log_o = draw(st.one_of(st.none(), st.floats(-3, 308)))  # offsets up to 1e308: x^T theta + o may overflow
    with np.errstate(over="ignore"):
        off = None if log_o is None else np.clip(rng.standard_cauchy(size=N) * 10.0**log_o, -1.7e308, 1.7e308)
    return fam, np.ascontiguousarray(X), y, offsets, np.ascontiguousarray(theta), clip, off


@SETTINGS
@given(adversarial())
def test_clipped_gradient_norm_bounded(case):
    fam, X, y, offsets, theta, clip, off = case
    g = k_grad(X, y, offsets, theta, clip, fam, off)
    assert np.all(np.isfinite(g))
    assert np.all(np.linalg.norm(g, axis=1) <= clip * (1 + 1e-12))


@SETTINGS
@given(adversarial())
def test_clipped_hessian_spectral_norm_bounded(case):
    fam, X, y, offsets, theta, hclip, off = case
    H = k_hess(X, y, offsets, theta, hclip, fam, off)
    assert np.all(np.isfinite(H))
    for h in H:
        assert np.linalg.norm(h, 2) <= hclip * (1 + 1e-12)
        assert np.linalg.eigvalsh(h).min() >= -1e-12 * hclip  # PSD (convex losses)


@pytest.mark.parametrize("name", ["logistic", "poisson", "gaussian", "huber"])
def test_each_sample_reaches_clip_when_clipping_active(name):
    # with a tiny bound every nonzero per-sample gradient is scaled to norm exactly clip, so one
    # client holding a single sample has a gradient of norm clip
    fam = get_family(name)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(6, 3))
    y = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0]) if name == "logistic" else np.array([0.0, 1.0, 2.0, 3.0, 0.0, 5.0])
    offsets = np.arange(7, dtype=np.int64)
    theta = rng.normal(size=(1, 3))
    g = k_grad(X, y, offsets, theta, 1e-4, fam)
    np.testing.assert_allclose(np.linalg.norm(g, axis=1), 1e-4 * CLIP_SAFETY, rtol=1e-14)
    # direction is kept: parallel to deriv * x
    r = fam.deriv(y, X @ theta[0])
    np.testing.assert_allclose(g, 1e-4 * (r[:, None] * X) / np.linalg.norm(r[:, None] * X, axis=1, keepdims=True), rtol=1e-10)


def test_outputs_do_not_depend_on_buffer_contents():
    fam = get_family("poisson")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 2))
    y = rng.poisson(1.0, size=10).astype(float)
    offsets = np.array([0, 4, 10], dtype=np.int64)
    theta = np.zeros((1, 2))
    a = np.full((2, 2), 1e300)
    b = np.zeros((2, 2))
    data = readonly(X, y, np.empty(0), row_norms(X), offsets)
    glm_clipped_mean_grad(*data, theta, 1.0, fam.code, fam.param, a)
    glm_clipped_mean_grad(*data, theta, 1.0, fam.code, fam.param, b)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shared", [True, False])
def test_column_kernel_client_mean_does_not_depend_on_the_other_clients(shared):
    """Runs of small clients, a client larger than a run, per-client or shared theta: each client's mean is the one it
    gets alone, bit for bit (the clipped scalars are computed row by row, the sums in the client's own blocks)."""
    from privfedstat.kernels.glm_nb import _RUN, glm_clipped_mean_grad_cols

    rng = np.random.default_rng(4)
    sizes = np.concatenate([rng.integers(1, 12, 700), [_RUN + 300, 3 * _RUN], rng.integers(1, 400, 40), [_RUN]])
    rng.shuffle(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    N, d = int(offsets[-1]), 5
    X = np.column_stack([np.ones(N), rng.standard_normal((N, d - 1))])
    Xt, y, rn = np.ascontiguousarray(X.T), (rng.random(N) < 0.5).astype(float), row_norms(X)
    theta = rng.standard_normal((1 if shared else sizes.size, d)) * 0.5
    together = np.empty((sizes.size, d))
    glm_clipped_mean_grad_cols(*readonly(Xt, y, np.empty(0), rn, offsets), theta, 0.8, 0, 0.0, together)
    for c in range(sizes.size):
        lo, hi = offsets[c], offsets[c + 1]
        alone = np.empty((1, d))
        glm_clipped_mean_grad_cols(*readonly(np.ascontiguousarray(Xt[:, lo:hi]), y[lo:hi], np.empty(0), rn[lo:hi],
                                             np.array([0, hi - lo])), theta[[0 if shared else c]], 0.8, 0, 0.0, alone)
        np.testing.assert_array_equal(together[c].view(np.uint64), alone[0].view(np.uint64))
