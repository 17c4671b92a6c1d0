"""Tests for privfedstat.privacy.clipping (AutoClip and the private grid quantile search)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privfedstat.privacy.clipping import AutoClip, grid_quantile_outcomes, private_grid_quantile


# --------------------------------------------------------------------------- AutoClip
class TestAutoClipValidation:
    def test_defaults(self):
        a = AutoClip()
        assert (a.quantile, a.budget, a.lower, a.upper, a.n_grid) == (0.9, 0.1, 1e-2, 1e4, 64)
        assert a.n_queries == 6

    @pytest.mark.parametrize("q", [0.0, 1.0, -0.1, 1.5, math.nan])
    def test_quantile(self, q):
        with pytest.raises(ValueError, match="quantile"):
            AutoClip(quantile=q)

    @pytest.mark.parametrize("b", [0.0, 1.0, -0.5, 2.0, math.nan])
    def test_budget(self, b):
        with pytest.raises(ValueError, match="budget"):
            AutoClip(budget=b)

    @pytest.mark.parametrize(
        "lower,upper",
        [(0.0, 1.0), (-1.0, 1.0), (1.0, 1.0), (2.0, 1.0), (1.0, math.inf), (math.nan, 1.0), (1.0, math.nan)],
    )
    def test_lower_upper(self, lower, upper):
        with pytest.raises(ValueError, match="lower"):
            AutoClip(lower=lower, upper=upper)

    @pytest.mark.parametrize("n", [0, 1, 3, 6, 12, 63, 65, 100, -4])
    def test_n_grid_not_power_of_two(self, n):
        with pytest.raises(ValueError, match="n_grid"):
            AutoClip(n_grid=n)

    @pytest.mark.parametrize("n", [2, 4, 8, 64, 1024])
    def test_n_grid_power_of_two_ok(self, n):
        a = AutoClip(n_grid=n)
        assert a.n_queries == int(round(math.log2(n)))
        assert 2**a.n_queries == n

    def test_frozen(self):
        a = AutoClip()
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.quantile = 0.5  # type: ignore[misc]


class TestAutoClipGrid:
    @pytest.mark.parametrize("lower,upper,n", [(1e-2, 1e4, 64), (0.5, 2.0, 2), (1.0, 1e6, 16), (3e-3, 7.0, 128)])
    def test_geometric(self, lower, upper, n):
        g = AutoClip(lower=lower, upper=upper, n_grid=n).grid
        assert g.shape == (n,)
        assert g[0] == pytest.approx(lower, rel=1e-12)
        assert g[-1] == pytest.approx(upper, rel=1e-12)
        assert np.all(np.diff(g) > 0)
        ratios = g[1:] / g[:-1]
        np.testing.assert_allclose(ratios, (upper / lower) ** (1 / (n - 1)), rtol=1e-10)
        np.testing.assert_allclose(np.log(g), np.linspace(np.log(lower), np.log(upper), n), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- private_grid_quantile
class CountingCounter:
    """Exact (noise-free) count of values <= threshold that records its calls."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=float)
        self.calls: list[float] = []

    def __call__(self, t: float) -> float:
        assert isinstance(t, float)
        self.calls.append(t)
        return float(np.count_nonzero(self.values <= t))


def brute_force(values, grid, target):
    values = np.asarray(values, dtype=float)
    for g in grid:
        if np.count_nonzero(values <= g) >= target:
            return float(g)
    return float(grid[-1])  # nothing reaches the target: the search ends at the largest grid point


def test_simple_example():
    grid = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0])
    values = [0.5, 1.5, 3.0, 3.5, 5.0, 9.0, 20.0, 100.0, 100.0, 100.0]
    counter = CountingCounter(values)
    # counts at grid: 1, 2, 4, 5, 6, 7, 7, 10 ; target 5 -> 8.0
    assert private_grid_quantile(counter, grid, 5) == 8.0
    assert len(counter.calls) == 3
    assert set(counter.calls) <= set(grid.tolist())


def test_quantile_of_uniform_data():
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 10, size=10_000)
    grid = np.linspace(0.0, 10.0, 1024)
    counter = CountingCounter(values)
    b = private_grid_quantile(counter, grid, 0.9 * values.size)
    assert len(counter.calls) == 10
    assert b == brute_force(values, grid, 0.9 * values.size)
    assert b == pytest.approx(np.quantile(values, 0.9), abs=0.03)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 64, 256])
@pytest.mark.parametrize("target", [-1.0, 0.0, 0.5, 3.0, 50.0, 1e9])
def test_number_of_calls_is_log2(n, target):
    grid = np.geomspace(0.01, 100.0, n)
    counter = CountingCounter(np.geomspace(0.001, 1000.0, 100))
    b = private_grid_quantile(counter, grid, target)
    assert len(counter.calls) == int(math.log2(n))
    assert b == brute_force(counter.values, grid, target)


def test_target_unreachable_returns_upper_end():
    grid = np.geomspace(1.0, 8.0, 4)
    counter = CountingCounter([100.0, 200.0])
    assert private_grid_quantile(counter, grid, 1) == grid[-1]


def test_target_reached_everywhere_returns_lower_end():
    grid = np.geomspace(1.0, 8.0, 8)
    counter = CountingCounter([0.1, 0.2])
    assert private_grid_quantile(counter, grid, 2) == grid[0]
    assert len(counter.calls) == 3


def test_works_with_autoclip_grid_and_noisy_counts_stay_in_grid():
    ac = AutoClip(n_grid=32)
    rng = np.random.default_rng(3)
    calls = []

    def noisy(t):
        calls.append(t)
        return rng.normal(0, 1e6)  # pure noise: result must still be a grid point

    b = private_grid_quantile(noisy, ac.grid, 10.0)
    assert len(calls) == ac.n_queries
    assert b in ac.grid.tolist()
    assert ac.lower <= b <= ac.upper


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 1e3, allow_nan=False), min_size=1, max_size=200),
    log2n=st.integers(1, 9),
    q=st.floats(0.0, 1.2, allow_nan=False),
    lower=st.floats(1e-3, 1.0),
    span=st.floats(1.5, 1e6),
)
def test_matches_brute_force(values, log2n, q, lower, span):
    n = 2**log2n
    grid = np.geomspace(lower, lower * span, n)
    target = q * len(values)
    counter = CountingCounter(values)
    got = private_grid_quantile(counter, grid, target)
    assert len(counter.calls) == log2n
    assert got == brute_force(values, grid, target)
    assert got in grid.tolist()


# --------------------------------------------------------------------------- bound at a private pilot (issue 9)
class TestPilot:
    def test_defaults(self):
        from privfedstat.privacy.clipping import PILOT_AUTOCLIP

        assert (AutoClip().pilot_rounds, AutoClip().n_stages) == (0, 1)  # the paper's bound at theta = 0
        assert (PILOT_AUTOCLIP.pilot_rounds, PILOT_AUTOCLIP.pilot_quantile, PILOT_AUTOCLIP.n_stages) == (5, 0.999, 3)
        assert PILOT_AUTOCLIP.budget == AutoClip().budget

    @pytest.mark.parametrize("k", [-1, 1.5, True, "3"])
    def test_pilot_rounds(self, k):
        with pytest.raises(ValueError, match="pilot_rounds"):
            AutoClip(pilot_rounds=k)

    @pytest.mark.parametrize("q", [0.0, 1.0, math.nan])
    def test_pilot_quantile(self, q):
        with pytest.raises(ValueError, match="pilot_quantile"):
            AutoClip(pilot_rounds=2, pilot_quantile=q)

    def test_bound_is_the_quantile_at_the_pilot_estimate(self):
        # independent numpy reference with exact counts (mu = inf): B0 at theta = 0, k clipped FedSGD
        # steps from 0 with B0 and the 'auto' step, then the pilot_quantile of the norms at the pilot
        from privfedstat.algorithms import FedSGD
        from privfedstat.data.federated import FederatedData
        from privfedstat.families import get_family
        from privfedstat.families.curvature import auto_step_size

        rng = np.random.default_rng(5)
        n, d = 1200, 4
        X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1)) * [1.0, 2.0, 0.5]])
        y = (rng.random(n) < 1 / (1 + np.exp(-(X @ [0.5, 2.0, -1.0, 1.5])))).astype(float)
        data = FederatedData.from_pooled(X, y, sizes=[300, 500, 400])
        config = AutoClip(pilot_rounds=4, pilot_quantile=0.97)
        est = FedSGD(family="logistic", mu=math.inf, clip=config, n_iter=1, random_state=0).fit(data)

        def norms(theta):
            return np.abs(1 / (1 + np.exp(-X @ theta)) - y) * np.linalg.norm(X, axis=1)

        def grid_quantile(values, q):
            return config.grid[np.argmax([np.sum(values <= b) >= q * n for b in config.grid])]

        theta = np.zeros(d)
        b0 = grid_quantile(norms(theta), 0.9)
        eta = auto_step_size(get_family("logistic"), d)
        for _ in range(config.pilot_rounds):
            g = (1 / (1 + np.exp(-X @ theta)) - y)[:, None] * X
            g *= np.minimum(1.0, b0 / np.maximum(np.linalg.norm(g, axis=1), 1e-300))[:, None]
            theta = theta - eta * g.mean(axis=0)  # size weights: the pooled mean of clipped gradients
        expected = grid_quantile(norms(theta), 0.97)
        assert expected != b0  # the pilot moved the bound
        assert est.clip_ == expected

    def test_budget_is_exactly_mu(self):
        from privfedstat.algorithms import FedAvg
        from privfedstat.data.federated import FederatedData

        rng = np.random.default_rng(6)
        X = np.column_stack([np.ones(600), rng.standard_normal((600, 2))])
        y = (rng.random(600) < 0.4).astype(float)
        data = FederatedData.from_pooled(X, y, sizes=[200, 200, 200])
        est = FedAvg(family="logistic", mu=1.5, random_state=0).fit(data)  # clip="auto": the pilot bound
        assert "clip-pilot" in {r.stage for r in est.privacy_.releases}
        np.testing.assert_allclose(est.privacy_.client_mu, 1.5, rtol=1e-12)


def test_autoclip_hessian_quantile():
    assert AutoClip().start_quantile("hessian") == AutoClip().start_quantile("gradient") == 0.9
    config = AutoClip(hessian_quantile=0.99)
    assert (config.start_quantile("gradient"), config.start_quantile("hessian")) == (0.9, 0.99)
    with pytest.raises(ValueError, match="hessian_quantile"):
        AutoClip(hessian_quantile=1.0)


def test_grid_quantile_outcomes_is_the_noisy_search_distribution():
    """Exact decisions give private_grid_quantile's result; noisy ones the frequencies of the noisy search."""
    config = AutoClip()
    norms = np.random.default_rng(0).lognormal(0.0, 0.5, 2000)

    def count(t):
        return float(np.sum(norms <= t))

    target = 0.99 * norms.size
    exact = grid_quantile_outcomes(count, config.grid, target, 0.0)
    assert exact == {private_grid_quantile(count, config.grid, target): 1.0}
    sd = 15.0
    outcomes = grid_quantile_outcomes(count, config.grid, target, sd)
    assert sum(outcomes.values()) == pytest.approx(1.0) and len(outcomes) > 2
    rng = np.random.default_rng(1)
    draws = [private_grid_quantile(lambda t: count(t) + sd * rng.standard_normal(), config.grid, target)
             for _ in range(4000)]
    for bound, prob in outcomes.items():
        assert np.mean(np.array(draws) == bound) == pytest.approx(prob, abs=0.03)  # binomial sd <= 0.008
    pruned = grid_quantile_outcomes(count, config.grid, target, sd, least=0.05)
    assert set(pruned) <= set(outcomes) and all(outcomes[b] >= pruned[b] - 1e-12 for b in pruned)


def test_coarse_lean_by_bisection_level_and_the_runaway_it_prevents():
    """A query with k bisection levels below it leans ``margin + coarse_lean min(max(k - 1, 0), 3)`` count sds; a 99.9%
    search whose norms lie just above the grid's middle point (so its coarser queries above them see every row) ends
    10 or more grid points too high with probability ~Phi(-2) per such query without the lean, and almost never with it."""
    config = AutoClip(coarse_lean=0.5)
    grid, sd, n = config.grid, 25.0, 2000.0
    reach = config.target(1.0, n, 4, 2 / sd)  # count_sd(4 clients, mu_query) = sqrt(4) / mu_query = sd
    levels = {31: 5, 15: 4, 47: 4, 7: 3, 23: 3, 3: 2, 1: 1, 0: 0, 2: 0}
    for i, k in levels.items():
        assert n - reach(float(grid[i])) == pytest.approx((2.0 + 0.5 * min(max(k - 1, 0), 3)) * sd)
    assert AutoClip().target(0.5, n, 4, 2 / sd)(float(grid[31])) == pytest.approx(0.5 * n - 2.0 * sd)  # default: none
    norms = np.linspace(9.5, 11.0, int(n))  # just above the middle point grid[31] = 8.96

    def count(t):
        return float(np.sum(norms <= t))

    def far_too_high(cfg):
        outcomes = grid_quantile_outcomes(count, grid, cfg.target(0.999, n, 4, 2 / sd), sd)
        return sum(p for b, p in outcomes.items() if b > 10 * 11.0)

    assert far_too_high(AutoClip()) > 0.01
    assert far_too_high(config) < 1e-3
    with pytest.raises(ValueError, match="coarse_lean"):
        AutoClip(coarse_lean=-1.0)
