"""numba twins of numpy's PCG64 generator and its ``standard_normal``, one stream per client, all clients in one pass.

Every client's noise stream is ``numpy.random.Generator(numpy.random.PCG64(child_i))`` with
``child_i`` a child of the fit's ``SeedSequence``; holding a million such objects costs seconds to
create and a Python call per client for every refill. These kernels hold the streams as one
``(n_clients, 4)`` array of 64-bit words instead (each stream's 128-bit state and increment, high
word first) and reproduce numpy bit for bit:

* :func:`pcg64_children`: the children of a ``SeedSequence`` (its hash of their entropy into four
  64-bit words) and PCG64's seeding from those words (``pcg_setseq_128_srandom_r``), all children
  in one loop;
* :func:`pcg64_standard_normal`: numpy's ``Generator.standard_normal`` (the 256-layer ziggurat of
  ``random_standard_normal`` in numpy's ``distributions.c``, with numba's copy of its tables) on
  the PCG64 XSL-RR output ``rotr64(hi ^ lo, hi >> 58)`` of the 128-bit LCG step
  ``s <- a s + inc``.

The high word of a 64 x 64-bit product is LLVM's 128-bit multiply (:func:`_mulhi`); every other
operation is on ``uint64`` (numba would promote a mixed signed / unsigned expression to float64). The tests compare
both with numpy's objects for many seeds and millions of draws, tails and rejections included.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types, uint64
from numba.extending import intrinsic
from numba.np.random._constants import fi_double, ki_double, wi_double, ziggurat_nor_inv_r, ziggurat_nor_r

__all__ = ["pcg64_children", "pcg64_standard_normal"]

#: PCG's default 128-bit LCG multiplier (high and low word)
_MUL_HI = np.uint64(2549297995355413924)
_MUL_LO = np.uint64(4865540595714422341)
_TO_UNIT = 1.0 / 9007199254740992.0  # 2^-53: numpy's next_double from the top 53 bits
# numpy.random.SeedSequence's hash constants (numpy/random/bit_generator.pyx), as uint64 holding 32-bit words
_INIT_A, _MULT_A = np.uint64(0x43B0D7E5), np.uint64(0x931E8875)
_INIT_B, _MULT_B = np.uint64(0x8B51F9DD), np.uint64(0x58F38DED)
_MIX_MULT_L, _MIX_MULT_R = np.uint64(0xCA01F9DD), np.uint64(0x4973F715)
_XSHIFT, _WORD, _32 = np.uint64(16), np.uint64(0xFFFFFFFF), np.uint64(32)
_PARALLEL_DRAWS = 2**16


@intrinsic
def _mulhi(typingctx, a, b):
    """High 64 bits of the 128-bit product ``a * b`` of two uint64 (LLVM's i128 multiply: one instruction on x86-64)."""

    def codegen(context, builder, signature, args):
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        return builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))

    return types.uint64(types.uint64, types.uint64), codegen


@njit(inline="always")
def _step(sh, sl, ih, il):
    """One LCG step ``s * a + inc mod 2^128`` on (high, low) words; returns the new (high, low)."""
    hi = _mulhi(sl, _MUL_LO) + sl * _MUL_HI + sh * _MUL_LO
    lo = sl * _MUL_LO
    new_lo = lo + il
    carry = uint64(1) if new_lo < lo else uint64(0)
    return hi + ih + carry, new_lo


@njit(inline="always")
def _next_uint64(st):
    """PCG64's next output (XSL-RR of the stepped state); advances ``st`` (state high, low, inc high, low)."""
    sh, sl = _step(st[0], st[1], st[2], st[3])
    st[0] = sh
    st[1] = sl
    x = sh ^ sl
    r = sh >> uint64(58)
    return (x >> r) | (x << ((uint64(64) - r) & uint64(63)))


@njit(inline="always")
def _next_double(st):
    return np.float64(_next_uint64(st) >> uint64(11)) * _TO_UNIT


@njit(inline="always")
def _standard_normal(st):
    """numpy's ziggurat ``random_standard_normal`` on stream ``st``."""
    while True:
        r = _next_uint64(st)
        idx = r & uint64(0xFF)
        r >>= uint64(8)
        sign = r & uint64(1)
        rabs = (r >> uint64(1)) & uint64(0x000FFFFFFFFFFFFF)
        x = np.float64(rabs) * wi_double[idx]
        if sign:
            x = -x
        if rabs < ki_double[idx]:
            return x
        if idx == 0:  # the tail beyond the base strip
            while True:
                xx = -ziggurat_nor_inv_r * np.log1p(-_next_double(st))
                yy = -np.log1p(-_next_double(st))
                if yy + yy > xx * xx:
                    if (rabs >> uint64(8)) & uint64(1):
                        return -(ziggurat_nor_r + xx)
                    return ziggurat_nor_r + xx
        elif (fi_double[idx - 1] - fi_double[idx]) * _next_double(st) + fi_double[idx] < np.exp(-0.5 * x * x):
            return x


@njit(inline="always")
def _hashmix(value, hash_const, mult):
    """SeedSequence's ``hashmix`` on 32-bit words held in uint64; returns the value and the next hash constant."""
    value ^= hash_const
    hash_const = (hash_const * mult) & _WORD
    value = (value * hash_const) & _WORD
    return value ^ (value >> _XSHIFT), hash_const


@njit(cache=True)
def pcg64_children(entropy, pool_size, first, n):
    """The PCG64 states of ``Generator(PCG64(child))`` for the children ``first, ..., first + n - 1`` of a
    ``SeedSequence`` whose children's entropy before their index is ``entropy`` (uint32 words,
    :func:`privfedstat._rng.child_entropy`): (n, 4) uint64, state high and low word, increment high and low word.

    Per child: numpy's ``SeedSequence`` mixes the entropy words and the child's index (one word:
    ``first + n <= 2^32``) into a pool of ``pool_size`` words and hashes four 64-bit words out of it
    (``generate_state(4, np.uint64)``); PCG64 takes the state from the first two and the increment
    ``2 s + 1`` from the last two (``pcg_setseq_128_srandom_r``: a step, the state added, a step).
    """
    out = np.empty((n, 4), dtype=np.uint64)
    words = np.empty(entropy.shape[0] + 1, dtype=np.uint64)
    words[:-1] = entropy
    pool = np.empty(pool_size, dtype=np.uint64)
    w32 = np.empty(8, dtype=np.uint64)
    for i in range(n):
        words[-1] = uint64(first + i)
        hc = _INIT_A
        for k in range(pool_size):
            pool[k], hc = _hashmix(words[k] if k < words.shape[0] else uint64(0), hc, _MULT_A)
        for src in range(pool_size):
            for dst in range(pool_size):
                if src != dst:
                    h, hc = _hashmix(pool[src], hc, _MULT_A)
                    pool[dst] = _mix(pool[dst], h)
        for src in range(pool_size, words.shape[0]):
            for dst in range(pool_size):
                h, hc = _hashmix(words[src], hc, _MULT_A)
                pool[dst] = _mix(pool[dst], h)
        hc = _INIT_B
        for k in range(8):
            w32[k], hc = _hashmix(pool[k % pool_size], hc, _MULT_B)
        s_hi, s_lo = w32[0] | (w32[1] << _32), w32[2] | (w32[3] << _32)  # little-endian pairs of 32-bit words
        i_hi, i_lo = w32[4] | (w32[5] << _32), w32[6] | (w32[7] << _32)
        ih = (i_hi << uint64(1)) | (i_lo >> uint64(63))
        il = (i_lo << uint64(1)) | uint64(1)
        sh, sl = _step(uint64(0), uint64(0), ih, il)
        lo = sl + s_lo
        carry = uint64(1) if lo < sl else uint64(0)
        sh, sl = _step(sh + s_hi + carry, lo, ih, il)
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = sh, sl, ih, il
    return out


@njit(inline="always")
def _mix(x, y):
    """SeedSequence's ``mix`` of two 32-bit words held in uint64."""
    result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _WORD
    return result ^ (result >> _XSHIFT)


def pcg64_standard_normal(states: np.ndarray, out: np.ndarray) -> None:
    """Fill row i of ``out`` (n, k) with the next k standard normals of stream ``states[i]``, advancing it in place.

    Threads share the clients when there are at least ``_PARALLEL_DRAWS`` draws: below that, waking
    them costs more than the draws (on a loaded machine, a scheduler time slice per call).
    """
    (_normals_parallel if out.size >= _PARALLEL_DRAWS else _normals)(states, out)


@njit(inline="always")
def _fill(st, row):
    for k in range(row.shape[0]):
        row[k] = _standard_normal(st)


@njit(cache=True)
def _normals(states, out):
    for i in range(states.shape[0]):
        _fill(states[i], out[i])


@njit(parallel=True, cache=True)
def _normals_parallel(states, out):
    for i in prange(states.shape[0]):
        _fill(states[i], out[i])
