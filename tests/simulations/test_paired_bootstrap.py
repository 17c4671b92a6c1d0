"""The exhaustive paired bootstrap against an independent itertools loop, and its guards."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from privfedstat.simulations.paired_bootstrap import exhaustive_bootstrap_means, exhaustive_paired_bootstrap


def test_exhaustive_bootstrap_against_itertools_loop():
    rng = np.random.default_rng(1)
    d = rng.normal(0.05, 0.05, size=5)
    naive = np.array([sum(d[list(idx)]) / 5 for idx in itertools.product(range(5), repeat=5)])
    np.testing.assert_allclose(exhaustive_bootstrap_means(d), naive, rtol=0, atol=1e-15)  # same tuples, same order
    boot = exhaustive_paired_bootstrap(d)
    assert boot.n_resamples == 3125 == len(naive) and boot.n_seeds == 5
    assert boot.estimate == pytest.approx(d.mean())
    assert (boot.low, boot.high) == pytest.approx(tuple(np.percentile(naive, [2.5, 97.5])))
    assert boot.favouring == int((d > 0).sum()) and boot.p_value == pytest.approx(np.mean(naive <= 0))
    ninety = exhaustive_paired_bootstrap(d, level=0.9)
    assert (ninety.low, ninety.high) == pytest.approx(tuple(np.percentile(naive, [5, 95])))
    # a hand case: 3^3 = 27 resamples of (-1, 1, 3); means <= 0: (-1,-1,-1), three (-1,-1,1) and ... by count
    small = exhaustive_paired_bootstrap([-1.0, 1.0, 3.0])
    sums = [a + b + c for a, b, c in itertools.product([-1, 1, 3], repeat=3)]
    assert small.n_resamples == 27 and small.p_value == sum(s <= 0 for s in sums) / 27 == 4 / 27
    assert small.favouring == 2 and exhaustive_paired_bootstrap([0.1, 0.2]).p_value == 0.0


def test_exhaustive_bootstrap_guards():
    with pytest.raises(ValueError, match=r"8\^8 resamples.*at most 7"):
        exhaustive_paired_bootstrap(np.ones(8))
    for bad in ([1.0], [1.0, np.inf], [[1.0, 2.0]]):
        with pytest.raises(ValueError, match="at least 2 finite"):
            exhaustive_paired_bootstrap(bad)
    with pytest.raises(ValueError, match="level"):
        exhaustive_paired_bootstrap([1.0, 2.0], level=1.0)
