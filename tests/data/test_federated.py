"""Tests for privfedstat.data.federated.FederatedData."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privfedstat._linalg import row_norm_bounds
from privfedstat.data.federated import FederatedData


def _clients(sizes, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(n, d)), rng.normal(size=n)) for n in sizes]


# --------------------------------------------------------------------------- from_arrays
class TestFromArrays:
    def test_layout(self):
        parts = _clients([3, 1, 5])
        fd = FederatedData.from_arrays(parts)
        np.testing.assert_array_equal(fd.offsets, [0, 3, 4, 9])
        np.testing.assert_array_equal(fd.sizes, [3, 1, 5])
        assert fd.n_clients == 3
        assert fd.n_features == 3
        assert fd.n_samples == 9
        assert fd.offsets.dtype == np.int64
        assert fd.X.dtype == np.float64 and fd.y.dtype == np.float64
        for i, (Xi, yi) in enumerate(parts):
            Xc, yc = fd.client(i)
            np.testing.assert_array_equal(Xc, Xi)
            np.testing.assert_array_equal(yc, yi)
        np.testing.assert_array_equal(fd.X, np.concatenate([p[0] for p in parts]))
        np.testing.assert_array_equal(fd.client(-1)[1], parts[-1][1])

    def test_lists_and_ints_accepted(self):
        fd = FederatedData.from_arrays([([[1, 2], [3, 4]], [0, 1]), ([[5, 6]], [1])])
        np.testing.assert_array_equal(fd.X, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        np.testing.assert_array_equal(fd.y, [0.0, 1.0, 1.0])
        assert fd.X.dtype == np.float64

    def test_row_norms(self):
        fd = FederatedData.from_arrays([(np.array([[3.0, 4.0], [1.0, 0.0]]), np.zeros(2))])
        np.testing.assert_allclose(fd.row_norms, [5.0, 1.0], rtol=1e-14)
        assert np.all(fd.row_norms >= [5.0, 1.0])  # upper bounds
        assert not fd.row_norms.flags.writeable

    def test_does_not_alias_input(self):
        X = np.ones((2, 2))
        y = np.zeros(2)
        fd = FederatedData.from_arrays([(X, y)])
        X[0, 0] = 99.0
        assert fd.X[0, 0] == 1.0

    def test_differing_feature_counts(self):
        with pytest.raises(ValueError, match="features"):
            FederatedData.from_arrays([(np.ones((2, 3)), np.ones(2)), (np.ones((2, 4)), np.ones(2))])

    def test_empty_client(self):
        with pytest.raises(ValueError, match="no rows"):
            FederatedData.from_arrays([(np.ones((2, 3)), np.ones(2)), (np.ones((0, 3)), np.ones(0))])

    def test_mismatched_lengths(self):
        with pytest.raises(ValueError, match="rows"):
            FederatedData.from_arrays([(np.ones((3, 2)), np.ones(2))])

    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_nonfinite_X(self, bad):
        X = np.ones((3, 2))
        X[1, 1] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            FederatedData.from_arrays([(X, np.ones(3))])

    @pytest.mark.parametrize("bad", [np.nan, np.inf])
    def test_nonfinite_y(self, bad):
        y = np.ones(3)
        y[2] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            FederatedData.from_arrays([(np.ones((3, 2)), y)])

    def test_one_dimensional_X(self):
        with pytest.raises(ValueError, match="2-D"):
            FederatedData.from_arrays([(np.ones(3), np.ones(3))])

    def test_two_dimensional_y(self):
        with pytest.raises(ValueError, match="dimension"):
            FederatedData.from_arrays([(np.ones((3, 2)), np.ones((3, 1)))])

    @pytest.mark.parametrize("bad", [[], np.ones((2, 2)), "abc"])
    def test_not_a_list_of_pairs(self, bad):
        with pytest.raises(ValueError, match="non-empty list"):
            FederatedData.from_arrays(bad)

    def test_not_a_pair(self):
        with pytest.raises(TypeError, match="pair"):
            FederatedData.from_arrays([(np.ones((2, 2)), np.ones(2), np.ones(2), np.ones(2))])  # a triple has an offset
        with pytest.raises(TypeError, match="pair"):
            FederatedData.from_arrays([np.ones((2, 2))])

    def test_non_numeric(self):
        with pytest.raises(TypeError, match="numeric"):
            FederatedData.from_arrays([(np.array([["a", "b"]], dtype=object), np.ones(1))])

    def test_no_columns(self):
        with pytest.raises(ValueError, match="no columns"):
            FederatedData.from_arrays([(np.ones((2, 0)), np.ones(2))])


# --------------------------------------------------------------------------- from_pooled
class TestFromPooledLabels:
    def test_grouping_and_order(self):
        rng = np.random.default_rng(1)
        n = 40
        X = rng.normal(size=(n, 2))
        y = np.arange(n, dtype=float)  # y records the original row index
        labels = rng.integers(0, 5, size=n)
        fd = FederatedData.from_pooled(X, y, clients=labels)
        uniq = np.unique(labels)
        assert fd.n_clients == uniq.size
        np.testing.assert_array_equal(fd.sizes, [np.sum(labels == u) for u in uniq])
        assert fd.offsets[0] == 0 and fd.offsets[-1] == n
        for i, u in enumerate(uniq):  # clients in sorted-label order, rows in original order
            Xc, yc = fd.client(i)
            rows = np.flatnonzero(labels == u)
            np.testing.assert_array_equal(yc, rows.astype(float))
            np.testing.assert_array_equal(Xc, X[rows])

    def test_string_labels(self):
        X = np.arange(12, dtype=float).reshape(6, 2)
        y = np.arange(6, dtype=float)
        labels = np.array(["paris", "berlin", "paris", "amsterdam", "berlin", "paris"])
        fd = FederatedData.from_pooled(X, y, clients=labels)
        # sorted: amsterdam, berlin, paris
        np.testing.assert_array_equal(fd.sizes, [1, 2, 3])
        np.testing.assert_array_equal(fd.offsets, [0, 1, 3, 6])
        np.testing.assert_array_equal(fd.y, [3.0, 1.0, 4.0, 0.0, 2.0, 5.0])
        np.testing.assert_array_equal(fd.X, X[[3, 1, 4, 0, 2, 5]])

    def test_list_labels(self):
        fd = FederatedData.from_pooled(np.ones((4, 1)), np.arange(4.0), clients=["b", "a", "b", "a"])
        np.testing.assert_array_equal(fd.y, [1.0, 3.0, 0.0, 2.0])

    def test_single_client(self):
        fd = FederatedData.from_pooled(np.ones((4, 2)), np.zeros(4), clients=[7, 7, 7, 7])
        assert fd.n_clients == 1
        np.testing.assert_array_equal(fd.offsets, [0, 4])

    def test_wrong_label_length(self):
        with pytest.raises(ValueError, match="one label per row"):
            FederatedData.from_pooled(np.ones((4, 2)), np.zeros(4), clients=[0, 1, 0])

    def test_unsortable_labels(self):
        with pytest.raises(TypeError, match="sortable"):
            FederatedData.from_pooled(np.ones((3, 1)), np.zeros(3), clients=np.array([1, "a", 2.5], dtype=object))


class TestFromPooledSizes:
    def test_blocks(self):
        X = np.arange(20, dtype=float).reshape(10, 2)
        y = np.arange(10, dtype=float)
        fd = FederatedData.from_pooled(X, y, sizes=[2, 5, 3])
        np.testing.assert_array_equal(fd.offsets, [0, 2, 7, 10])
        np.testing.assert_array_equal(fd.sizes, [2, 5, 3])
        assert (fd.n_clients, fd.n_features, fd.n_samples) == (3, 2, 10)
        np.testing.assert_array_equal(fd.X, X)
        np.testing.assert_array_equal(fd.y, y)
        np.testing.assert_array_equal(fd.client(1)[1], [2.0, 3.0, 4.0, 5.0, 6.0])

    def test_numpy_sizes(self):
        fd = FederatedData.from_pooled(np.ones((6, 1)), np.zeros(6), sizes=np.array([3, 3], dtype=np.int32))
        np.testing.assert_array_equal(fd.offsets, [0, 3, 6])

    @pytest.mark.parametrize("sizes", [[2, 2], [5, 5], [10]])
    def test_sizes_not_summing_to_n(self, sizes):
        with pytest.raises(ValueError, match="sum"):
            FederatedData.from_pooled(np.ones((5, 1)), np.zeros(5), sizes=sizes)

    @pytest.mark.parametrize("sizes", [[5, 0], [6, -1]])
    def test_empty_client(self, sizes):
        with pytest.raises(ValueError, match=">= 1"):
            FederatedData.from_pooled(np.ones((5, 1)), np.zeros(5), sizes=sizes)

    @pytest.mark.parametrize("sizes", [[2.0, 3.0], [], [[2, 3]]])
    def test_bad_sizes_type(self, sizes):
        with pytest.raises(TypeError, match="integers"):
            FederatedData.from_pooled(np.ones((5, 1)), np.zeros(5), sizes=sizes)


class TestFromPooledErrors:
    def test_both(self):
        with pytest.raises(ValueError, match="exactly one"):
            FederatedData.from_pooled(np.ones((4, 1)), np.zeros(4), clients=[0, 0, 1, 1], sizes=[2, 2])

    def test_neither(self):
        with pytest.raises(ValueError, match="exactly one"):
            FederatedData.from_pooled(np.ones((4, 1)), np.zeros(4))

    @pytest.mark.parametrize("bad", [np.nan, np.inf])
    def test_nonfinite_X(self, bad):
        X = np.ones((4, 2))
        X[0, 1] = bad
        with pytest.raises(ValueError, match="X contains 1 NaN or infinite"):
            FederatedData.from_pooled(X, np.zeros(4), sizes=[4])

    @pytest.mark.parametrize("bad", [np.nan, -np.inf])
    def test_nonfinite_y(self, bad):
        y = np.zeros(4)
        y[3] = bad
        with pytest.raises(ValueError, match="y contains 1 NaN or infinite"):
            FederatedData.from_pooled(np.ones((4, 2)), y, clients=[0, 1, 0, 1])

    def test_one_dimensional_X(self):
        with pytest.raises(ValueError, match="reshape"):
            FederatedData.from_pooled(np.ones(4), np.zeros(4), sizes=[4])

    def test_mismatched_lengths(self):
        with pytest.raises(ValueError, match="5 rows but y has 4"):
            FederatedData.from_pooled(np.ones((5, 2)), np.zeros(4), sizes=[5])


# --------------------------------------------------------------------------- immutability
def test_arrays_read_only():
    fd = FederatedData.from_pooled(np.ones((4, 2)), np.zeros(4), sizes=[2, 2])
    for a in (fd.X, fd.y, fd.offsets):
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 1
    Xc, yc = fd.client(0)
    with pytest.raises(ValueError):
        Xc[0, 0] = 5.0
    with pytest.raises(ValueError):
        yc[0] = 5.0


def test_client_index_out_of_range():
    fd = FederatedData.from_pooled(np.ones((4, 2)), np.zeros(4), sizes=[2, 2])
    with pytest.raises(IndexError):
        fd.client(2)
    with pytest.raises(IndexError):
        fd.client(-3)


def test_direct_constructor_validates_offsets():
    X, y = np.ones((4, 1)), np.zeros(4)
    with pytest.raises(ValueError, match="offsets"):
        FederatedData(X, y, [0, 2, 3])
    with pytest.raises(ValueError, match="offsets"):
        FederatedData(X, y, [1, 4])
    with pytest.raises(ValueError, match="no rows"):
        FederatedData(X, y, [0, 2, 2, 4])


def test_repr():
    fd = FederatedData.from_pooled(np.ones((6, 2)), np.zeros(6), sizes=[1, 2, 3])
    r = repr(fd)
    assert "n_clients=3" in r and "n_samples=6" in r and "n_features=2" in r


# --------------------------------------------------------------------------- split_halves
def _split_data(sizes=(2, 3, 7, 10, 51), d=2):
    n = sum(sizes)
    X = np.column_stack([np.arange(n, dtype=float), np.random.default_rng(0).normal(size=(n, d - 1))])
    y = np.arange(n, dtype=float)  # y = global row index
    return FederatedData.from_pooled(X, y, sizes=list(sizes))


class TestSplitHalves:
    def test_disjoint_union_and_sizes(self):
        fd = _split_data()
        a, b = fd.split_halves(0)
        assert a.n_clients == b.n_clients == fd.n_clients
        np.testing.assert_array_equal(a.sizes, fd.sizes // 2)
        np.testing.assert_array_equal(b.sizes, fd.sizes - fd.sizes // 2)
        assert a.n_features == b.n_features == fd.n_features
        for i in range(fd.n_clients):
            ya, yb = a.client(i)[1], b.client(i)[1]
            assert set(ya).isdisjoint(yb)
            assert sorted(np.concatenate([ya, yb]).tolist()) == fd.client(i)[1].tolist()
            # rows stay intact (X row matches its y)
            np.testing.assert_array_equal(a.client(i)[0][:, 0], ya)
            np.testing.assert_array_equal(b.client(i)[0][:, 0], yb)

    def test_reproducible(self):
        fd = _split_data()
        a1, b1 = fd.split_halves(42)
        a2, b2 = fd.split_halves(42)
        np.testing.assert_array_equal(a1.y, a2.y)
        np.testing.assert_array_equal(b1.y, b2.y)
        np.testing.assert_array_equal(a1.X, a2.X)

    def test_reproducible_with_seed_sequence(self):
        fd = _split_data()
        ss = np.random.SeedSequence(3)
        np.testing.assert_array_equal(fd.split_halves(ss)[0].y, fd.split_halves(ss)[0].y)

    def test_different_seeds_differ(self):
        fd = _split_data()
        a1, _ = fd.split_halves(1)
        a2, _ = fd.split_halves(2)
        # the 51-row client alone has C(51, 25) possible halves
        assert not np.array_equal(a1.client(4)[1], a2.client(4)[1])

    def test_actually_random(self):
        fd = _split_data((40,))
        a, _ = fd.split_halves(7)
        assert not np.array_equal(np.sort(a.y), np.arange(20.0))  # not just the first half

    def test_one_row_client(self):
        fd = FederatedData.from_pooled(np.ones((5, 1)), np.zeros(5), sizes=[4, 1])
        with pytest.raises(ValueError, match="at least 2 rows"):
            fd.split_halves(0)

    def test_halves_read_only(self):
        a, b = _split_data().split_halves(0)
        for part in (a, b):
            assert not part.X.flags.writeable and not part.y.flags.writeable


# --------------------------------------------------------------------------- row norms for every finite row
U = 2.0**-53
DENORM = 5e-324


def exact_sq_norm(x) -> Fraction:
    return sum((Fraction(float(v)) ** 2 for v in x), Fraction(0))


def assert_tight_upper_bound(X, b):
    """b_j >= ||x_j|| exactly (Fractions), and b_j <= ||x_j|| (1 + (2.5 d + 21) u) + 5 * 2^-1074."""
    d = X.shape[1]
    rel = Fraction(1) + Fraction(5 * d + 42, 2) * Fraction(U)
    for x, bj in zip(X, b):
        sq = exact_sq_norm(x)
        if np.isinf(bj):  # only when the norm exceeds the largest double
            assert sq > Fraction(np.finfo(float).max) ** 2 / rel**2
            continue
        assert Fraction(float(bj)) ** 2 >= sq, (x, bj)
        excess = Fraction(float(bj)) - 5 * Fraction(DENORM)  # b - 5 * 2^-1074 <= ||x|| rel, compared squared
        assert excess <= 0 or excess**2 <= sq * rel**2, (x, bj)


EXTREMES = [0.0, DENORM, -DENORM, 1e-310, 2.2250738585072014e-308, 1e-300, -1e-200, 1e-163, 1e-150, 1.0, -3.5, 1e150,
            1e155, -1e200, 1e300, 1.7976931348623157e308, -1.7976931348623157e308]
entries = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(EXTREMES),
                    st.floats(-10, 10))


@settings(max_examples=300)
@given(st.integers(1, 7).flatmap(lambda d: st.lists(st.lists(entries, min_size=d, max_size=d), min_size=1, max_size=8)),
       st.sampled_from([1e-300, 1e-160, 1.0, 1e160, 1e300]))
def test_row_norm_bounds_hold_for_every_finite_row(rows, scale):
    X = np.array(rows, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        Xs = X * scale  # also a whole row at an extreme scale
    Xs[~np.isfinite(Xs)] = 1.0
    for A in (X, Xs):
        assert_tight_upper_bound(A, row_norm_bounds(A))


@pytest.mark.parametrize(
    "row, expected",
    [
        ([1e-300, 1e-300], np.sqrt(2) * 1e-300),  # sum of squares underflows to 0
        ([3e-200, 4e-200], 5e-200),
        ([3e200, 4e200], 5e200),  # sum of squares overflows to inf
        ([1e300, 1e-300], 1e300),  # mixed scales
        ([1.7976931348623157e308], 1.7976931348623157e308),
        ([DENORM, 0.0], DENORM),
    ],
)
def test_row_norm_bounds_extreme_rows(row, expected):
    b = row_norm_bounds(np.array([row]))[0]
    assert expected <= b <= expected * (1 + 1e-14) + 5 * DENORM


def test_row_norm_bounds_zero_and_overflowing_rows():
    b = row_norm_bounds(np.array([[0.0, 0.0], [1.5e308, 1.5e308]]))
    assert 0 < b[0] <= 5 * DENORM  # a positive bound: the kernels' limit B / b stays finite-capped
    assert np.isinf(b[1])  # the norm exceeds the largest double: the kernels give this row 0


def test_row_norm_bounds_many_rows_rescaled_in_chunks():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(10_000, 3)) * 10.0 ** rng.choice([-300, -170, 0, 170, 300], size=(10_000, 1))
    b = row_norm_bounds(X)
    with np.errstate(over="ignore", under="ignore"):
        m = np.max(np.abs(X), axis=1, keepdims=True)
        exact = m[:, 0] * np.linalg.norm(X / m, axis=1)
    assert np.all(b >= exact * (1 - 4 * U))
    np.testing.assert_allclose(b, exact, rtol=1e-14)
