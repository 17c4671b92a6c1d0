"""Blocked outer-product releases (privfedstat.privacy.secure_outer, ``SkellamSpec.blocks``): where Flower's SecAgg+
word cannot hold the sum of a site's rows at the bracket's lattice, the site sends its rows ``j mod g = b`` as g
blocks, each with the full noise share. Exact accounting (bracket within 1e-6), a neighbour moves one block by at most
``sqrt(2) K``, the blocks' sums decode to the sum, the variance counts g noises; on main such a release falls back to
site-level rounding (bracket 1e-2 and more)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from _replay import check_neighbours, one_numba_thread, tap_channel  # noqa: F401 (fixture)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_secure_outer import _spec
from test_sensitivity_fuzz import SECURE, cases, estimator_factory

from privfedstat.federation import secure as secure_mod
from privfedstat.privacy import secure_outer
from privfedstat.privacy.gdp import epsilon_from_mu
from privfedstat.privacy.mechanisms import ClientNoise
from privfedstat.privacy.secure_noise import _modulus_bits, decode, outer_row_variance
from privfedstat.privacy.secure_pld import achievable_epsilon
from privfedstat.privacy.secure_rounding import WORD_BITS

DELTA = 1e-5
#: SecAgg+ words small enough that 2 sites of 200 rows, and the fuzzer's 3 sites of 20, need blocks
SMALL_WORD, FUZZ_WORD = 20, 16


def test_a_site_with_many_rows_sends_blocks_accounted_exactly():
    """countymurders' shape (10 sites of 3100 rows, p = 7) at a release budget of 3: ``N K`` at the bracket's lattice
    is about 2^29.5, whose modulus (the noise's tail and sign added) is above SecAgg+'s 30-bit word: g blocks, the
    fewest whose sums fit, each block's modulus holding its rows; the release's GDP epsilon within 1e-6 of the exact
    epsilon of a pattern data produce."""
    m, n, p, mu = 10, 3100, 7, 3.0
    spec, _ = _spec(p, mu, m, n, clip=1.0)
    g, K, word = int(spec.blocks), int(spec.outer), WORD_BITS
    assert K > 0 and g > 1 and spec.bits <= word
    d = p * (p + 1) // 2
    # every coordinate of a block's sum: at most K per row of the block (at most m + (N - m) / g rows) plus the tail
    reach = K * (m + (m * n - m) // g)
    assert reach >= K * sum(math.ceil(n / g) for _ in range(m))
    assert _modulus_bits(reach, d, 2.0 * m * spec.lam) <= word
    # the fewest blocks: one fewer does not hold the bracket's lattice (K at least the bracket's, here the same bits)
    assert _modulus_bits(K * (m + (m * n - m) // (g - 1)), d, 2.0 * m * spec.lam) > word
    noise = spec.noise(m)
    assert noise.gdp_mu == pytest.approx(mu, rel=1e-9)
    upper = epsilon_from_mu(noise.gdp_mu, DELTA)
    assert abs(upper - achievable_epsilon([noise], DELTA)) < 1e-6
    # the decoded sum carries g block noises and every row's rounding error once
    rounding = m * n * outer_row_variance(K, d)
    assert noise.variance == pytest.approx(spec.quantum**2 * (2.0 * noise.lam * g + rounding), rel=1e-12)


def _small_word_spec(p, mu, m, n, clip):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(secure_outer, "WORD_BITS", SMALL_WORD)
        return _spec(p, mu, m, n, clip)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), p=st.integers(1, 3), mu=st.sampled_from([0.5, 1.0, 2.0]), seed=st.integers(0, 2**32 - 1))
def test_a_neighbour_moves_one_block_by_at_most_the_stated_sensitivity(data, p, mu, seed):
    """One root replaced by any other (clipped): with the same stream the blocks of the other rows are unchanged and the
    changed row's block moves by ``a a^T - b b^T`` of Frobenius norm at most ``sqrt(2) K`` in integers; the blocks'
    decoded sum is that of all rows (whose sum a
    word of SMALL_WORD bits cannot hold)."""
    m, n, clip = 2, 200, 0.6
    spec, sens = _small_word_spec(p, mu, m, n, clip)
    g, K, d = int(spec.blocks), int(spec.outer), p * (p + 1) // 2
    assert K > 0 and g > 1 and spec.bits <= SMALL_WORD
    scale = math.sqrt(1.0 / (m * n))
    finite = st.floats(-1e6, 1e6, allow_nan=False)
    base = np.array([data.draw(st.lists(finite, min_size=p, max_size=p)) for _ in range(n)]).reshape(n, p)
    j = data.draw(st.integers(0, n - 1))
    neighbour = base.copy()
    neighbour[j] = data.draw(st.lists(finite, min_size=p, max_size=p))

    def clipped(rows):
        norms = np.linalg.norm(rows, axis=1)
        return scale * rows * np.minimum(1.0, math.sqrt(clip) / np.maximum(norms, 1e-300))[:, None]

    def messages(rows, s=spec):
        rngs = secure_mod.site_generators(ClientNoise(np.random.SeedSequence(seed), m))
        return secure_outer.quantize_outer([clipped(rows), clipped(base)], s, sens, rngs)

    a, b = messages(base), messages(neighbour)
    assert a.shape == (m, g * d)
    np.testing.assert_array_equal(a[1], b[1])
    blocks = (a[0] - b[0]).reshape(g, d)
    assert not np.any(np.delete(blocks, j % g, axis=0))  # the other blocks: untouched
    rows, cols = np.triu_indices(p)
    diff = np.zeros((p, p), dtype=np.int64)
    diff[rows, cols] = np.where(rows == cols, blocks[j % g], blocks[j % g] // 2)
    diff[cols, rows] = diff[rows, cols]
    assert int(np.sum(diff * diff)) <= (2 * K * K if p > 1 else K * K)
    record = secure_mod.share_release(spec, sens, d, "h")
    assert record.sensitivity[0] == pytest.approx(spec.quantum * spec.l2, rel=1e-12)
    # the server's decoded sum of the blocks is the unblocked one (the rounding does not depend on the blocks)
    whole = messages(base, dataclasses.replace(spec, blocks=1))
    np.testing.assert_array_equal(a.reshape(m, g, d).sum(axis=1), whole)
    unit = np.where(rows == cols, 1.0, 1.0 / math.sqrt(2.0))  # sym_to_vec of the folded entries
    np.testing.assert_array_equal(decode(np.mod(a, 1 << spec.bits), spec),
                                  whole.sum(axis=0).astype(np.float64) * spec.quantum * unit)


FEDIRLS = [s for s in SECURE if s.name == "fedirls"]


@pytest.mark.parametrize("spec", FEDIRLS, ids=[s.name for s in FEDIRLS])
@settings(max_examples=6, deadline=None)
@given(case=cases().filter(lambda c: c.family != "multinomial"))  # its Hessians are rounded as a whole
def test_every_blocked_secure_release_moves_at_most_its_stated_sensitivity(spec, case):
    """The replay fuzzer on secure FedIRLS fits whose Hessian-type releases are blocked (a 16-bit word): every site's
    blocked message (the same uniforms on D and D') moves by at most its stated sensitivity."""
    data, neighbour = case.datasets()
    base = estimator_factory(spec, case, data.n_features)
    with pytest.MonkeyPatch.context() as mp, tap_channel():
        mp.setattr(secure_outer, "WORD_BITS", FUZZ_WORD)
        transcript = check_neighbours(lambda: base().set_params(aggregation="secure"), data, neighbour)
    if transcript.error is None:
        assert any(r.integer is not None and r.integer.blocks > 1 for r in transcript.estimator.privacy_.releases)
