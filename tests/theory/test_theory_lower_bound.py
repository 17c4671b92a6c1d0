"""Minimax lower bound (Theorem 3.10) and per-client effective sample size."""

import math

import numpy as np
import pytest

from privfedstat.theory import effective_sample_size, fedsgd_bound, lower_bound


def test_hand_value():
    # mu = 0.05, d = 2: n^2 mu^2 log(1/mu)/d = n^2 * 0.0025 * 2.995732 / 2 = 0.00374467 n^2
    eff = [min(100, 100**2 * 0.0025 * math.log(20) / 2), min(200, 200**2 * 0.0025 * math.log(20) / 2)]
    assert eff == pytest.approx([37.4467, 149.787], rel=1e-5)
    assert lower_bound(sizes=[100, 200], mu=0.05, d=2) == pytest.approx(2 / sum(eff), rel=1e-12)
    assert effective_sample_size(n=[100, 200], mu=0.05, d=2) == pytest.approx(eff, rel=1e-12)
    # constants: min(C1 n, C2 n^2 mu^2 log(1/mu)/d)
    assert effective_sample_size(n=100, mu=0.5, d=1, C1=0.1, C2=1.0) == pytest.approx(10.0)
    assert effective_sample_size(n=100, mu=0.5, d=1, C1=1.0, C2=0.01) == pytest.approx(0.25 * math.log(2) * 100)


@pytest.mark.parametrize("mu", [0.0, 1.0, 1.5, -0.2, math.inf, math.nan])
def test_only_for_mu_in_open_unit_interval(mu):
    with pytest.raises(ValueError, match="0 < mu < 1"):
        lower_bound(sizes=[10, 20], mu=mu, d=2)
    with pytest.raises(ValueError, match="0 < mu < 1"):
        effective_sample_size(n=10, mu=mu, d=2)
    with pytest.raises(ValueError, match="0 < mu < 1"):
        lower_bound(sizes=[10, 20], mu=[0.5, mu], d=2)


def test_lower_bound_never_exceeds_fedsgd_upper_bound_with_unit_constants():
    """C = C_B = C1 = C2 = 1, tau1 = tau2 = 1, trace(Sigma) = d (the defaults of both functions).

    The comparison holds whenever log(1/mu) log(dN) >= 0.012 (see lower_bound's docstring), which
    covers mu <= 0.98 for every dN >= 2; this grid spans tiny to large clients, d from 1 to 50 and
    equal and very unequal sizes.
    """
    mus = np.array([1e-4, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.98])[:, None, None]
    rng = np.random.default_rng(0)
    sizes_list = [[2, 2], [5] * 3, [1, 1000], [30] * 50, [10_000] * 7, list(rng.integers(1, 5000, size=40)), [2]]
    for d in (1, 2, 5, 50):
        for sizes in sizes_list:
            lb = lower_bound(sizes=sizes, mu=mus, d=d)
            ub = fedsgd_bound(sizes=sizes, mu=mus, d=d)
            assert np.all(lb <= ub), (d, sizes, lb.ravel(), ub.ravel())
    # Remark 3.1's simplified form has no factor 17; it still dominates for mu <= 0.5 once log N >= 1.5
    for d in (1, 5, 50):
        for sizes in ([100] * 10, [5, 500, 50], [1000] * 3):
            mu = np.array([0.01, 0.1, 0.3, 0.5])
            assert np.all(lower_bound(sizes=sizes, mu=mu, d=d) <= fedsgd_bound(form="rate", sizes=sizes, mu=mu, d=d))


def test_degenerates_as_mu_approaches_one():
    # documented artefact of the small-mu proof: log(1/mu) -> 0 makes the bound blow up
    vals = lower_bound(sizes=[100] * 10, mu=np.array([0.9, 0.99, 0.9999]), d=5)
    assert vals[0] < vals[1] < vals[2]
    assert vals[2] > fedsgd_bound(sizes=[100] * 10, mu=0.9999, d=5)


def test_lower_bound_vectorised_and_monotone():
    mus = np.array([0.05, 0.2, 0.6])
    got = lower_bound(sizes=[[50] * 4, [400] * 4], mu=mus[:, None], d=3)
    assert got.shape == (3, 2)
    for i, mu in enumerate(mus):
        for j, n in enumerate((50, 400)):
            assert got[i, j] == pytest.approx(lower_bound(sizes=[n] * 4, mu=mu, d=3), rel=1e-13)
    assert np.all(np.diff(got, axis=1) < 0)  # decreasing in N
    assert lower_bound(n_samples=400, n_clients=4, mu=0.2, d=3) == pytest.approx(lower_bound(sizes=[100] * 4, mu=0.2, d=3))
