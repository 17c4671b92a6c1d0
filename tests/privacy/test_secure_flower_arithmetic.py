"""The secure sums' residues pass through Flower SecAgg+'s own arithmetic unchanged, summed modulo 2^bits.

Flower's ``secaggplus_mod`` weights a client's vector by ``num_examples / max_weight``, quantizes it
(``quantize``: clip to [-c, c], shift by c, scale by T / 2c, stochastic rounding) and adds masks modulo
``modulus_range``; the workflow sums modulo ``modulus_range``, extracts the weight factor, dequantizes and divides by
the total weight. With ``num_examples = max_weight`` (weight 1), ``T = 2^bits - 1``, ``c = T / 2`` and
``modulus_range = 2^bits`` (:func:`privfedstat.flower.secagg.flower_ranges`), a residue ``r_i`` in [0, 2^bits) sent
as ``r_i - c`` is quantized to ``r_i`` exactly (the stochastic rounding of an integer-valued array is deterministic),
the server unmasks ``sum_i r_i mod 2^bits`` and nothing more, and :func:`privfedstat.flower.secagg.residue_sum`
undoes the dequantization -- provided ``bits <= 30`` (Flower's int32 cast). The masks are Flower's
(``pseudo_rand_gen``: a private mask per site, pairwise masks that cancel), with fixed seeds in place of the key
agreement and the Shamir shares that carry them in the protocol.
"""

import numpy as np
import pytest

from privfedstat.privacy.secure_noise import count_spec, decode, encode, skellam_spec

flwr = pytest.importorskip("flwr")
from flwr.common.secure_aggregation.ndarrays_arithmetic import (  # noqa: E402
    factor_combine,
    factor_extract,
    parameters_addition,
    parameters_mod,
    parameters_multiply,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen  # noqa: E402

from privfedstat.flower.secagg import flower_ranges, residue_sum  # noqa: E402


def _flower_round(residues: np.ndarray, spec) -> tuple[np.ndarray, np.ndarray]:
    """Flower 1.42's client steps (secaggplus_mod's fit stage) and server steps (the unmask stage) with the ranges of
    :func:`flower_ranges`: what the workflow returns, and the unmasked sum it dequantized."""
    c, T, modulus = flower_ranges(spec, len(residues))
    n = len(residues)
    uploads, private = [], []
    for i, r in enumerate(residues):
        ratio = 1.0  # num_examples = max_weight
        q_ratio = round(ratio * T)
        params = parameters_multiply([r.astype(np.float64) - c], q_ratio / T)
        q = factor_combine(q_ratio, quantize(params, c, T))
        shapes = [a.shape for a in q]
        private.append(pseudo_rand_gen(bytes([i + 1] * 32), modulus, shapes))
        q = parameters_addition(q, private[i])
        for j in range(n):
            if j != i:
                pair = pseudo_rand_gen(bytes([min(i, j) + 1, max(i, j) + 1] * 16), modulus, shapes)
                q = parameters_addition(q, pair) if i < j else parameters_subtraction(q, pair)
        uploads.append(parameters_mod(q, modulus))
    # what the server holds of a site is masked: not its quantized residue
    assert not np.array_equal(uploads[0][1], residues[0])
    total = uploads[0]
    for u in uploads[1:]:
        total = parameters_addition(total, u)
    for b in private:  # the private masks, which the protocol reconstructs from the survivors' Shamir shares
        total = parameters_subtraction(total, b)
    recon = parameters_mod(total, modulus)
    q_total, recon = factor_extract(recon)
    out = dequantize(recon, c, T)[0]
    out += -(len(residues) - 1) * c
    out *= T / q_total
    return out, recon[0]


@pytest.mark.parametrize("n_sites", [3, 10])
def test_flower_secaggplus_arithmetic_returns_the_mean_residue_exactly(n_sites):
    rng = np.random.default_rng(0)
    d = 7
    spec = skellam_spec(1e-3, 0.2, d, 0.3, n_sites, n_sites)
    assert spec.bits <= 30
    u = rng.uniform(-0.2 / n_sites, 0.2 / n_sites, size=(n_sites, d))
    residues = encode(u, spec, [np.random.default_rng(i) for i in range(n_sites)])
    out, unmasked = _flower_round(residues, spec)
    # the server unmasks the modular sum only (no carries: they would count the negative messages)
    plain = residues.astype(np.int64).sum(axis=0)
    assert (plain >= 2**spec.bits).any()
    np.testing.assert_array_equal(unmasked, plain % 2**spec.bits)
    summed = residue_sum(out, n_sites, spec)
    np.testing.assert_array_equal(decode(summed[None, :], spec), decode(residues, spec))


@pytest.mark.parametrize("n_sites", [3, 10])
def test_secure_counts_pass_through_flower_secaggplus_arithmetic_to_the_in_process_sum(n_sites):
    """A secure count's residues (integers sent as they are, :func:`count_spec`) through SecAgg+'s arithmetic decode to
    the in-process modular sum: the true total plus the summed Skellam shares."""
    spec = count_spec(0.05, n_sites, n_sites, 5000)
    assert spec.bits <= 30
    counts = np.random.default_rng(1).integers(0, 5001, size=(n_sites, 1)).astype(np.float64)
    residues = encode(counts, spec, [np.random.default_rng(i) for i in range(n_sites)])
    summed = residue_sum(_flower_round(residues, spec)[0], n_sites, spec)
    in_process = decode(residues, spec)
    np.testing.assert_array_equal(decode(summed[None, :], spec), in_process)
    shares = [(lambda r: r.poisson(spec.lam) - r.poisson(spec.lam))(np.random.default_rng(i)) for i in range(n_sites)]
    assert in_process[0] == counts.sum() + sum(shares)


def test_ten_sites_sum_residues_of_the_full_word_exactly():
    """The calibration's word is 30 bits whatever the number of sites (SecAgg+ sums modulo ``2^bits`` itself): a row
    round of 10 sites whose reach fills it gets a 30-bit modulus (27 when the word was ``n 2^(bits+1) < 2^32``), and
    residues anywhere in [0, 2^30) come back as their modular sum, exactly."""
    from privfedstat.privacy.secure_rounding import WORD_BITS, row_spec

    n_sites = 10
    spec = row_spec(1e-3, 4.0, 7, 1.8, n_sites, n_sites, 20000)
    assert spec.bits == WORD_BITS == 30
    residues = np.random.default_rng(2).integers(0, 2**30, size=(n_sites, 7))
    residues[0, 0], residues[1:, 1] = 2**30 - 1, 0  # the extremes
    out, unmasked = _flower_round(residues, spec)
    plain = residues.sum(axis=0) % 2**30
    np.testing.assert_array_equal(unmasked, plain)
    np.testing.assert_array_equal(residue_sum(out, n_sites, spec), plain)
