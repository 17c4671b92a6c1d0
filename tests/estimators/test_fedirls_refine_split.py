"""The refine rounds' Hessian share derived from the noise model after the locate rounds (issue 42, item 5):
its minimisation against a brute-force grid, and the planned variance of the combined estimate it lowers against
the curvature class's table (docs/algorithms/fedirls.md, "Schedule: the refine Hessian's share")."""

from dataclasses import replace

import numpy as np
import pytest

from privfedstat import FedIRLS
from privfedstat.algorithms.fedirls.refine_split import combined_variance, derived_refine_split
from privfedstat.algorithms.fedirls.schedule import CURVATURE_RULES
from privfedstat.families import get_family
from privfedstat.federation.protocol import Setup


@pytest.mark.parametrize("rules", ["bounded", "unbounded"])
@pytest.mark.parametrize("gamma,rho,located", [(1e-3, 1e-4, 2e-2), (1e-2, 3e-2, 1e-1), (5e-4, 2e-5, 5e-4)])
def test_the_derived_share_is_the_minimum_of_a_brute_force_grid(rules, gamma, rho, located):
    table = CURVATURE_RULES[rules].refine_split * 0.7  # the shares of the estimation mu^2 the refine phase gets
    derived = derived_refine_split(table, gamma, rho, located)
    f = int(np.flatnonzero(table[:, 1] > 0)[-1])
    assert derived.sum() == pytest.approx(table.sum(), rel=1e-12)
    np.testing.assert_array_equal(derived[:f], table[:f])  # the first round's shares are the table's
    np.testing.assert_allclose(derived[f:, 0] / derived[f:, 0].sum(), table[f:, 0] / table[f:, 0].sum(), rtol=1e-12)
    # the grid: every Hessian share h of what the first round leaves, the gradients in the table's proportions
    L = table.sum() - table[:f].sum()
    grid = np.geomspace(1e-6, 1.0 - 1e-6, 20_001) * L
    unit = table / table.sum()

    def variance(h):
        split = table.copy()
        split[f:, 0], split[f, 1] = (L - h) * table[f:, 0] / table[f:, 0].sum(), h
        return combined_variance(split / table.sum(), gamma / table.sum(), rho / table.sum(), located)

    values = np.array([variance(h) for h in grid])
    best = int(np.argmin(values))
    assert derived[f, 1] == pytest.approx(grid[best], rel=2e-3)
    assert variance(derived[f, 1]) <= values[best] * (1 + 1e-9)
    assert variance(derived[f, 1]) <= combined_variance(unit, gamma / table.sum(), rho / table.sum(), located)


def test_the_variance_is_the_recursions_where_the_hessian_is_exact():
    """With rho = 0 the combined estimate carries the combined gradients' noise alone: gamma over their total share
    (precision weights), whatever the first round and the located point."""
    table = CURVATURE_RULES["bounded"].refine_split
    assert combined_variance(table, 2.0, 0.0, 50.0) == pytest.approx(2.0 / (0.15 + 0.45), rel=1e-12)


@pytest.mark.parametrize("family,p", [("logistic", 4), ("poisson", 3)])
def test_the_derived_split_lowers_the_planned_privacy_variance_of_the_estimate(family, p):
    """The schedule's own full noise model (:meth:`IRLSSchedule.planned_noise`, the recursion with floors and the
    combination, averaged over the last Hessian's noise), as a trace in the sampling metric: the derived split plans a
    smaller privacy variance of the estimate than the table (on main: no ``located_at``, the table only)."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((p, p))
    H = 0.2 * (A @ A.T / p + np.eye(p))
    sizes = np.full(20, 400.0)
    schedule = FedIRLS(family=family).plan_schedule(get_family(family), sizes, Setup(1.0, 1.0, 2.0), p)
    located = schedule.located_at(H, H)
    assert located.located is not None
    table, derived = replace(located, located=None), located
    assert not np.allclose(derived.phase(1).shares, table.phase(1).shares)
    assert derived.phase(1).shares.sum() == pytest.approx(table.phase(1).shares.sum(), rel=1e-12)
    traces = [float(np.trace(H @ s.planned_noise(H).expected_covariance(H))) for s in (table, derived)]
    assert traces[1] < 0.97 * traces[0]


def test_the_table_stays_where_its_floor_is_above_the_located_curvature_and_the_derived_floor_stays_below_it():
    """The derivation expands the noise around the Newton matrix: where the eigenvalue floor of the table's refine
    Hessian is not below the smallest eigenvalue of the located release, the floor sets the steps and the table stays;
    elsewhere the derived share is at least the one whose floor reaches that eigenvalue."""
    p = 3
    H = np.diag([1.0, 0.5, 0.02])
    sizes = np.full(10, 300.0)
    schedule = FedIRLS(family="logistic").plan_schedule(get_family("logistic"), sizes, Setup(1.0, 1.0, 2.0), p)
    table = replace(schedule, located=None).phase(1)
    f = int(np.flatnonzero(table.shares[:, 1] > 0)[-1])
    below = schedule.located_at(H, np.diag([1.0, 0.5, 0.5 * table.floors[f]]))
    np.testing.assert_array_equal(below.phase(1).shares, table.shares)
    # just above the table's floor: the free minimum (a small Hessian share) is raised to the floor's share
    edge = 1.5 * table.floors[f]
    free = schedule.located_at(H, np.eye(p)).phase(1)
    assert free.floors[f] > edge  # the unconstrained share's floor would cross it
    held = schedule.located_at(H, np.diag([1.0, 0.5, edge])).phase(1)
    assert held.floors[f] == pytest.approx(edge, rel=1e-9)
    assert free.shares[f, 1] < held.shares[f, 1] < table.shares[f, 1]
