"""Tests for privfedstat.privacy.mechanisms: reproducible per-client streams (numpy's, bit for bit), secure noise, secure_mode."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privfedstat._rng import child_entropy
from privfedstat.kernels.pcg64_nb import pcg64_children
from privfedstat.privacy import mechanisms
from privfedstat.privacy.mechanisms import ClientNoise, SecureClientNoise


def _noise(seed, m: int, first: int = 0) -> ClientNoise:
    return ClientNoise(np.random.SeedSequence(seed), m, first)


def _expected(seed, m: int, total: int, first: int = 0) -> np.ndarray:
    """The draws of numpy's own generators on the children first, ..., first + m - 1 of SeedSequence(seed)."""
    children = np.random.SeedSequence(seed).spawn(first + m)[first:]
    return np.stack([np.random.Generator(np.random.PCG64(c)).standard_normal(total) for c in children])


SHAPES = [(), (1,), (3,), (2, 2), (5,), (1, 7), (4, 3), (0,), (10,), (2, 3, 2)]
SEEDS = [0, 123, 2**32 - 1, 2**64 + 5, 2**200, [2**62, 7], [0, 0, 0, 0, 0, 9], None]


def _seed_sequences():
    for entropy in SEEDS:
        yield np.random.SeedSequence(entropy)
    yield np.random.SeedSequence(5, spawn_key=(3, 2**40))
    yield np.random.SeedSequence(17, pool_size=8)
    yield np.random.SeedSequence(11).spawn(3)[2]


@pytest.mark.parametrize("seed", list(_seed_sequences()), ids=[f"seed{i}" for i in range(len(SEEDS) + 3)])
@pytest.mark.parametrize("first", [0, 7])
def test_children_states_are_numpys(seed, first):
    """pcg64_children is SeedSequence's hash of each child and PCG64's seeding from it: numpy's states, bit for bit."""
    children = np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key, pool_size=seed.pool_size).spawn(first + 40)
    states = [np.random.PCG64(c).state["state"] for c in children[first:]]
    expected = np.array([[s["state"] >> 64, s["state"] & (2**64 - 1), s["inc"] >> 64, s["inc"] & (2**64 - 1)]
                         for s in states], dtype=np.uint64)
    np.testing.assert_array_equal(pcg64_children(child_entropy(seed), seed.pool_size, first, 40), expected)


def test_long_streams_match_numpy_including_the_tails():
    """A million draws per client: the ziggurat's tail and wedge rejections (a few percent of draws) included."""
    got = _noise(2024, 3, first=5).standard_normal((1_000_000,))
    np.testing.assert_array_equal(got, _expected(2024, 3, 1_000_000, first=5))
    assert np.abs(got).max() > 4.5  # the tail beyond the base strip (|z| > 3.65) was drawn


@pytest.mark.parametrize("seed", [1, 123])
def test_streams_match_generators_for_any_blocks(seed):
    m = 4
    noise = _noise(seed, m)
    draws = []
    for shape in SHAPES * 3:
        out = noise.standard_normal(shape)
        assert out.shape == (m, *shape)
        assert out.dtype == np.float64
        draws.append(out.reshape(m, -1))
    got = np.concatenate(draws, axis=1)
    np.testing.assert_array_equal(got, _expected(seed, m, got.shape[1]))


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 5),
    first=st.integers(0, 50),
    shapes=st.lists(st.lists(st.integers(0, 6), min_size=0, max_size=3).map(tuple), min_size=1, max_size=12),
    seed=st.integers(0, 2**32 - 1),
)
def test_streams_match_generators_hypothesis(m, first, shapes, seed):
    noise = _noise(seed, m, first)
    blocks = [noise.standard_normal(s).reshape(m, -1) for s in shapes]
    got = np.concatenate(blocks, axis=1)
    np.testing.assert_array_equal(got, _expected(seed, m, got.shape[1], first))


def test_returned_arrays_are_independent_copies():
    noise = _noise(1, 2)
    first = noise.standard_normal((4,))
    keep = first.copy()
    first[:] = 0.0
    second = noise.standard_normal((4,))
    assert not np.array_equal(second, np.zeros_like(second))
    # mutating a returned block does not leak into later draws (they come from the stream)
    expected = _expected(1, 2, 8)
    np.testing.assert_array_equal(keep, expected[:, :4])
    np.testing.assert_array_equal(second, expected[:, 4:])


def test_clients_differ():
    noise = _noise(99, 6)
    out = noise.standard_normal((500,))
    for i in range(6):
        for j in range(i + 1, 6):
            assert not np.any(out[i] == out[j])
            # independent streams: sample correlation ~ N(0, 1/500)
            r = np.corrcoef(out[i], out[j])[0, 1]
            assert abs(r) < 0.2


def test_n_clients():
    assert _noise(0, 5).n_clients == 5


def test_moments():
    noise = _noise(2024, 3)
    out = noise.standard_normal((20_000,))
    for row in out:
        assert abs(row.mean()) < 0.035  # 5 standard errors (1/sqrt(20000) ~ 0.007)
        assert row.std() == pytest.approx(1.0, abs=0.025)


def test_same_seed_reproducible_different_seed_differs():
    a = _noise(5, 2).standard_normal((30,))
    b = _noise(5, 2).standard_normal((30,))
    c = _noise(6, 2).standard_normal((30,))
    np.testing.assert_array_equal(a, b)
    assert not np.any(a == c)


# ---------------------------------------------------------------------- secure mode
def _bits(sign: int, k: int) -> bytes:
    """One little-endian 64-bit word: top bit ``sign``, low 52 bits ``k`` (as SecureClientNoise reads it)."""
    return ((sign << 63) | k).to_bytes(8, "little")


def test_secure_noise_is_the_halved_sum_of_four_inverse_cdf_draws(monkeypatch):
    from scipy.stats import norm

    words = [(0, 0), (1, 0), (1, 2**51), (0, 2**52 - 1)]  # u = 2^-54, 2^-54, ~1/4, 1/2 - 2^-54
    requested = []

    def fake_urandom(n):
        requested.append(n)
        return b"".join(_bits(s, k) for s, k in words)

    monkeypatch.setattr(mechanisms.os, "urandom", fake_urandom)
    z = SecureClientNoise(1).standard_normal(())
    assert requested == [32]  # 4 draws x 8 bytes, nothing else
    u = [(2 * k + 1) * 2.0**-54 for _, k in words]
    expected = sum((1 if s else -1) * norm.isf(ui) for (s, _), ui in zip(words, u)) / 2
    assert z.shape == (1,)
    assert z[0] == pytest.approx(expected, rel=1e-12)
    # the extreme draws: |Z_k| = -Phi^{-1}(2^-54) < 8.3, and a sign bit is an exact negation
    assert 8.2 < norm.isf(2.0**-54) < 8.3
    monkeypatch.setattr(mechanisms.os, "urandom", lambda n: _bits(0, 5) * (n // 8))
    low = SecureClientNoise(2).standard_normal((3,))
    monkeypatch.setattr(mechanisms.os, "urandom", lambda n: _bits(1, 5) * (n // 8))
    high = SecureClientNoise(2).standard_normal((3,))
    assert low.shape == (2, 3)
    np.testing.assert_array_equal(high, -low)


def test_secure_noise_is_standard_normal():
    from scipy.stats import kstest

    out = SecureClientNoise(4).standard_normal((50_000,))
    assert out.shape == (4, 50_000) and out.dtype == np.float64
    flat = out.ravel()
    # OS randomness: thresholds at ~6 standard errors (false alarm < 1e-8)
    assert abs(flat.mean()) < 6 / np.sqrt(flat.size)
    assert abs(flat.var() - 1) < 6 * np.sqrt(2 / flat.size)
    assert kstest(flat, "norm").pvalue > 1e-8
    assert np.all(np.abs(flat) < 16.6)


def test_secure_noise_is_not_reproducible_and_clients_differ():
    a = SecureClientNoise(3).standard_normal((20,))
    b = SecureClientNoise(3).standard_normal((20,))
    assert not np.any(a == b)
    assert not np.any(a[0] == a[1])
    assert SecureClientNoise(3).standard_normal((0,)).shape == (3, 0)


# ---------------------------------------------------------------------- secure_mode on the estimators
def _private_specs():
    from privfedstat.algorithms.registry import methods

    return methods(private=True)


@pytest.fixture(scope="module")
def small_data():
    from conftest import simulate

    return simulate("logistic", [60, 90, 150], [0.2, 0.5, -0.4])


@pytest.mark.parametrize("spec", _private_specs(), ids=lambda s: s.name)
def test_secure_mode_fit_draws_secure_noise_and_records_it(spec, small_data, monkeypatch):
    requested = []
    urandom = mechanisms.os.urandom

    def counted(n):
        requested.append(n)
        return urandom(n)

    # the mechanism's os.urandom only: other callers (a library's first import, for one) are not noise draws
    monkeypatch.setattr(mechanisms, "os", types.SimpleNamespace(urandom=counted))
    monkeypatch.setattr(ClientNoise, "standard_normal", lambda self, shape: pytest.fail("seeded stream used"))
    a = spec.cls(**spec.test_params, mu=1.0, secure_mode=True).fit(small_data)
    b = spec.cls(**spec.test_params, mu=1.0, secure_mode=True).fit(small_data)
    assert requested and all(n % 32 == 0 for n in requested)
    assert a.privacy_.secure_mode and "secure_mode=True" in repr(a.privacy_)
    np.testing.assert_allclose(a.privacy_.client_mu, 1.0, rtol=1e-12)
    assert not np.array_equal(a.coef_, b.coef_)
    assert a.get_params()["secure_mode"] is True


@pytest.mark.parametrize("spec", _private_specs(), ids=lambda s: s.name)
@pytest.mark.parametrize("seed", [0, np.random.SeedSequence(1), np.random.default_rng(2)], ids=["int", "seedseq", "gen"])
def test_secure_mode_refuses_a_seed(spec, seed, small_data):
    est = spec.cls(**spec.test_params, secure_mode=True, random_state=seed)
    with pytest.raises(ValueError, match="random_state must be None"):
        est.fit(small_data)
    assert not hasattr(est, "coef_")


def test_secure_mode_must_be_a_bool(small_data):
    from privfedstat import FedSGD

    with pytest.raises(TypeError, match="secure_mode must be True or False"):
        FedSGD(n_iter=2, secure_mode="yes").fit(small_data)


def test_default_mode_draws_from_the_seeded_streams(small_data):
    """secure_mode=False keeps the reproducible path: client i's noise is stream i spawned from the seed."""
    from privfedstat import FedSGD
    from privfedstat._rng import as_seed_sequence, spawn_generators
    from privfedstat.families import get_family
    from privfedstat.federation.oracle import make_oracle

    est = FedSGD(mu=1.0, n_iter=2, clip=1.0, step_size=0.5, random_state=11).fit(small_data)
    assert not est.privacy_.secure_mode
    noise_seed, _ = as_seed_sequence(11).spawn(2)
    z = np.stack([g.standard_normal(3) for g in spawn_generators(noise_seed, small_data.n_clients)])
    grads = make_oracle(small_data, get_family("logistic")).clipped_gradients(np.zeros(3), 1.0)
    sigma = est.privacy_.releases[0].sigma
    w = small_data.sizes / small_data.n_samples
    # Algorithm 1 from theta^(0) = 0: theta^(1) = -eta sum_i w_i (g_i + sigma_i z_i)
    np.testing.assert_allclose(est.history_[1], -0.5 * (w @ (grads + sigma[:, None] * z)), rtol=1e-12, atol=1e-15)
