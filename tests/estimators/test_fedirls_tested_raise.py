"""FedIRLS's tested raise of the whitened refine bound (algorithms/fedirls/insurance.py): where a released clipped excess
at the located point shows that clipping moves the root by more than its noise, the refine rounds clip at the wider
bound; its budget leaves the refine rounds only where its narrowest window resolves the tolerated bias."""

import math
import warnings

import numpy as np
import pytest
from _high_leverage import SIZES, stand_in

from privfedstat import FedIRLS
from privfedstat.algorithms.fedirls import IRLSSchedule
from privfedstat.algorithms.fedirls.insurance import INSURE_STAGE, resolution, runs_test
from privfedstat.families import get_family
from privfedstat.federation.protocol import Setup
from privfedstat.inference.config import critical_value, tolerated_bias


def test_the_tested_raise_takes_its_budget_from_the_refine_rounds_only_where_it_runs():
    """The one policy object: ``mu_insurance = mu sqrt(insurance_share)``; where the test runs its mu^2 leaves the
    refine phase's shares (proportions kept) and the whole split still sums to the estimation mu^2; where it does not,
    the shares are the ones without a test and ``mu_insurance`` is 0."""
    est = FedIRLS(family="binomial", mu=8.0)
    sizes = np.full(10, 500.0)
    setup = Setup(5.0, 5.0, 7.5)
    plan = est.plan_schedule(get_family("binomial"), sizes, setup, 3)
    assert plan.mu_insurance == pytest.approx(setup.mu * math.sqrt(IRLSSchedule.insurance_share), rel=1e-12)
    skipped, tested = plan.tested(False), plan.tested(True)
    assert skipped.mu_insurance == 0.0 and all(np.array_equal(a, b) for a, b in zip(skipped.shares, plan.shares))
    np.testing.assert_allclose(tested.shares[-1], plan.shares[-1] * (1 - IRLSSchedule.insurance_share
                                                                     / plan.shares[-1].sum()), rtol=1e-12)

    def total(s: IRLSSchedule) -> float:
        return float(sum(np.sum(x) for x in s.shares)) + (s.mu_research**2 + s.mu_dispersion**2 + s.mu_insurance**2) / 7.5**2

    assert total(plan) - IRLSSchedule.insurance_share == pytest.approx(1.0, abs=1e-12)
    assert total(skipped) == pytest.approx(1.0, abs=1e-12) and total(tested) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("mu, runs", [(8.0, False), (15.0, False), (30.0, True), (1e6, True)])
def test_the_test_runs_where_its_narrowest_window_resolves_the_tolerated_bias(mu, runs):
    """Equal sites, size weights, N = I (whitened): the test's displacement over a window of width B has per-site
    noise sd ``2 B sqrt(m) / (N mu_t)`` per coordinate, ``2 B sqrt(m) / (sqrt(N) mu_t)`` sampling sds (score sd 1),
    mu_t = mu sqrt(insurance_share); it runs where z_(p) times that is at most tolerated_bias(0.05) = 0.4155."""
    m, n, p, B = 20, 400, 3, 5.0
    sizes = np.full(m, float(n))
    plan = FedIRLS(family="binomial", mu=mu).plan_schedule(get_family("binomial"), sizes, Setup(B, 5.0, mu), p)
    mu_t = mu * math.sqrt(IRLSSchedule.insurance_share)
    expected = 2 * B * math.sqrt(m) / (math.sqrt(m * n) * mu_t)
    assert resolution(plan, B, np.eye(p)) == pytest.approx(expected, rel=1e-12)
    assert (critical_value(p) * expected <= tolerated_bias(0.05)) == runs
    assert runs_test(plan, {"gradient": B, "hessian": 5.0}, np.eye(p)) == runs
    assert not runs_test(plan, {"hessian": 5.0}, np.eye(p))


def _spied_fit(monkeypatch, mu: float) -> tuple[FedIRLS, list, object]:
    """The stand-in's fit at ``mu`` and the schedules' decisions of the test (``(runs, mu_insurance)``)."""
    data, mle = stand_in()
    seen, tested = [], IRLSSchedule.tested

    def spy(self, runs):
        seen.append((runs, self.mu_insurance))
        return tested(self, runs)

    monkeypatch.setattr(IRLSSchedule, "tested", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FedIRLS(family="binomial", mu=mu, scaling="private", random_state=0).fit(data), seen, mle


def test_a_noise_free_fit_releases_the_test_and_clips_at_its_window(monkeypatch):
    """At mu = 1e6 the stand-in's fit releases one clipped excess at the located point (ledger stage ``irls-insure``,
    its mu the schedule's, sensitivity ``2 (B' - B) / n_i``), finds the displacement, clips its refine rounds at B'
    (above every row's norm) and lands within 0.1 SE of statsmodels' MLE (0.51 before); the ledger composes to mu."""
    fit, seen, mle = _spied_fit(monkeypatch, 1e6)
    spent = [r for r in fit.privacy_.releases if r.stage == INSURE_STAGE]
    (runs, mu_t), = seen
    assert runs and len(spent) == 1
    np.testing.assert_allclose(spent[0].client_mu(), mu_t, rtol=1e-12)
    rounds = 1 - IRLSSchedule.research_share - IRLSSchedule.insurance_share  # the locate and refine rounds' shares
    assert fit.budget_split_.sum() == pytest.approx(rounds, rel=1e-12)
    sizes = np.array(SIZES, dtype=float)
    window = spent[0].sensitivity * sizes / 2.0  # B' - B, the same for every site
    np.testing.assert_allclose(window, window[0], rtol=1e-12)
    assert fit.clip_ > window[0] > 1000.0
    assert float(np.max(np.abs((fit.coef_ - mle.params) / mle.bse))) < 0.1
    assert fit.privacy_.mu == pytest.approx(1e6, rel=1e-9)


def test_where_the_test_cannot_resolve_the_tolerated_bias_the_fit_spends_nothing_on_it(monkeypatch):
    """At mu = 8 the stand-in's test could not resolve the tolerated bias over its narrowest window: no release at
    stage ``irls-insure``, and the refine rounds keep the whole of their share (the ledger composes to mu)."""
    fit, seen, _ = _spied_fit(monkeypatch, 8.0)
    (runs, mu_t), = seen
    assert not runs and mu_t > 0
    assert fit.budget_split_.sum() == pytest.approx(1 - IRLSSchedule.research_share, rel=1e-12)
    assert not [r for r in fit.privacy_.releases if r.stage == INSURE_STAGE]
    assert fit.privacy_.mu == pytest.approx(8.0, rel=1e-12)
