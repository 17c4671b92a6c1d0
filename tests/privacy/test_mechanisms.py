"""Tests for privfedstat.privacy.mechanisms.ClientNoise (per-client reproducible noise streams)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privfedstat.privacy.mechanisms import ClientNoise


def _children(seed: int, m: int):
    return np.random.SeedSequence(seed).spawn(m)


def _noise(children, chunk):
    return ClientNoise([np.random.Generator(np.random.PCG64(c)) for c in children], chunk=chunk)


def _expected(children, total):
    return np.stack([np.random.Generator(np.random.PCG64(c)).standard_normal(total) for c in children])


SHAPES = [(), (1,), (3,), (2, 2), (5,), (1, 7), (4, 3), (0,), (10,), (2, 3, 2)]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 16, 4096])
def test_streams_match_generators_for_any_chunk(chunk):
    m = 4
    children = _children(123, m)
    noise = _noise(children, chunk)
    draws = []
    for shape in SHAPES * 3:
        out = noise.standard_normal(shape)
        assert out.shape == (m, *shape)
        assert out.dtype == np.float64
        draws.append(out.reshape(m, -1))
    got = np.concatenate(draws, axis=1)
    np.testing.assert_array_equal(got, _expected(children, got.shape[1]))


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 5),
    chunk=st.integers(1, 50),
    shapes=st.lists(st.lists(st.integers(0, 6), min_size=0, max_size=3).map(tuple), min_size=1, max_size=12),
    seed=st.integers(0, 2**32 - 1),
)
def test_streams_match_generators_hypothesis(m, chunk, shapes, seed):
    children = _children(seed, m)
    noise = _noise(children, chunk)
    blocks = [noise.standard_normal(s).reshape(m, -1) for s in shapes]
    got = np.concatenate(blocks, axis=1)
    np.testing.assert_array_equal(got, _expected(children, got.shape[1]))


def test_chunk_size_does_not_change_values():
    children = _children(7, 3)
    a = _noise(children, 1)
    b = _noise(children, 1000)
    for shape in [(3,), (5, 2), (), (40,), (1,)]:
        np.testing.assert_array_equal(a.standard_normal(shape), b.standard_normal(shape))


def test_returned_arrays_are_independent_copies():
    noise = _noise(_children(1, 2), 64)
    first = noise.standard_normal((4,))
    keep = first.copy()
    first[:] = 0.0
    second = noise.standard_normal((4,))
    assert not np.array_equal(second, np.zeros_like(second))
    # mutating a returned block does not leak into later draws (they come from the stream)
    expected = _expected(_children(1, 2), 8)
    np.testing.assert_array_equal(keep, expected[:, :4])
    np.testing.assert_array_equal(second, expected[:, 4:])


def test_clients_differ():
    noise = _noise(_children(99, 6), 128)
    out = noise.standard_normal((500,))
    for i in range(6):
        for j in range(i + 1, 6):
            assert not np.any(out[i] == out[j])
            # independent streams: sample correlation ~ N(0, 1/500)
            r = np.corrcoef(out[i], out[j])[0, 1]
            assert abs(r) < 0.2


def test_n_clients():
    assert _noise(_children(0, 5), 8).n_clients == 5


def test_moments():
    noise = _noise(_children(2024, 3), 1000)
    out = noise.standard_normal((20_000,))
    for row in out:
        assert abs(row.mean()) < 0.035  # 5 standard errors (1/sqrt(20000) ~ 0.007)
        assert row.std() == pytest.approx(1.0, abs=0.025)


def test_same_seed_reproducible_different_seed_differs():
    a = _noise(_children(5, 2), 10).standard_normal((30,))
    b = _noise(_children(5, 2), 10).standard_normal((30,))
    c = _noise(_children(6, 2), 10).standard_normal((30,))
    np.testing.assert_array_equal(a, b)
    assert not np.any(a == c)
