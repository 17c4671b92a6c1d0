"""``every`` and ``some`` (the per-round mask checks) agree with numpy's ``all`` and ``any`` on every kind of array."""

import numpy as np
import pytest

from privfedstat._validation import every, some

CASES = [
    np.array([], dtype=bool),
    np.array([True]),
    np.array([False]),
    np.array([True, False, True]),
    np.ones(7, dtype=bool),
    np.zeros(7, dtype=bool),
    np.array([[True, True], [True, False]]),
    np.array([0.0, 1.0]),
    np.array([np.nan, 2.0]),
    np.array([-0.0]),
    np.array([0, 0, 3]),
]


@pytest.mark.parametrize("mask", CASES, ids=lambda a: repr(a.tolist()))
def test_every_and_some_match_numpy(mask):
    assert every(mask) is bool(mask.all())
    assert some(mask) is bool(mask.any())


def test_random_masks_match_numpy():
    rng = np.random.default_rng(0)
    for _ in range(200):
        mask = rng.random(rng.integers(0, 12)) < rng.random()
        assert every(mask) == mask.all() and some(mask) == mask.any()
