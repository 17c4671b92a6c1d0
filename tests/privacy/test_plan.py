"""BudgetPlan: each stage's share of mu, the estimation remainder in squares, stages that spend nothing."""

import math

import pytest

from privfedstat.privacy.plan import BudgetPlan


def test_stages_compose_in_squares_to_mu():
    plan = BudgetPlan.split(2.0, scaling=0.1, clip=0.1, inference=0.25)
    assert (plan.scaling, plan.clip, plan.inference) == pytest.approx((0.2, 0.2, 0.5))
    total = math.sqrt(plan.scaling**2 + plan.clip**2 + plan.inference**2 + plan.estimation**2)
    assert total == pytest.approx(2.0, rel=1e-15)


def test_a_stage_that_spends_nothing_takes_nothing():
    assert BudgetPlan.split(2.0) == BudgetPlan(2.0, 0.0, 0.0, 0.0, 2.0)
    only_inference = BudgetPlan.split(2.0, inference=0.6)
    assert only_inference.estimation == math.sqrt(2.0 * 2.0 - 1.2 * 1.2)


def test_infinite_mu_gives_every_running_stage_infinity():
    plan = BudgetPlan.split(math.inf, clip=0.1, inference=0.25)
    assert (plan.scaling, plan.clip, plan.inference, plan.estimation) == (0.0, math.inf, math.inf, math.inf)


def test_shares_that_leave_nothing_for_estimation_are_refused_by_stage():
    with pytest.raises(ValueError, match="clipping and scaling budgets leave nothing"):
        BudgetPlan.split(1.0, scaling=0.8, clip=0.7)
    with pytest.raises(ValueError, match="inference budget .* leaves nothing for estimation"):
        BudgetPlan.split(1.0, clip=0.5, inference=0.9)
