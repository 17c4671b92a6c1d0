"""PrivacyBudget: GDP composition across fits, refusal before any noise, what is left."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from conftest import simulate
from scipy.stats import norm

from privfedstat import (
    BudgetExceededError,
    ClientFailureError,
    DivergenceError,
    FedAvg,
    FedNewton,
    FedSGD,
    LocalFit,
    PooledMLE,
    PrivacyBudget,
    PrivacyLeakWarning,
)
from privfedstat.algorithms.registry import methods
from privfedstat.federation import FailingData
from privfedstat.federation.channel import Channel
from privfedstat.privacy import mechanisms

SIZES = [60, 90, 150, 100]


@pytest.fixture(scope="module")
def data():
    return simulate("logistic", SIZES, [0.2, 0.5, -0.4])


def _fedsgd(mu=0.5, **kw):
    return FedSGD(mu=mu, n_iter=3, clip=1.0, **kw)


@pytest.fixture
def draws(monkeypatch):
    """Counts every standard-normal block drawn and every channel release during a test."""
    calls = {"noise": 0, "release": 0}
    normal, receive = mechanisms.ClientNoise.standard_normal, Channel.receive

    def counted_normal(self, shape):
        calls["noise"] += 1
        return normal(self, shape)

    def counted_receive(self, *args, **kwargs):
        calls["release"] += 1
        return receive(self, *args, **kwargs)

    monkeypatch.setattr(mechanisms.ClientNoise, "standard_normal", counted_normal)
    monkeypatch.setattr(Channel, "receive", counted_receive)
    return calls


def _delta_of(mu: float, eps: float) -> float:
    """Dong, Roth & Su (2022), Corollary 2.13, written out independently of privfedstat.privacy.gdp."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def test_twelve_fits_fill_the_budget_and_the_thirteenth_is_refused_before_noise(data, draws):
    budget = PrivacyBudget(mu=math.sqrt(12) * 0.5, n_clients=len(SIZES))
    for k in range(1, 13):
        _fedsgd(random_state=k).fit(data, budget=budget)
        np.testing.assert_allclose(budget.spent, math.sqrt(k) * 0.5, rtol=1e-12)
        assert budget.remaining_mu == pytest.approx(math.sqrt(max(3.0 - 0.25 * k, 0.0)), abs=1e-7)
    assert draws["noise"] > 0 and draws["release"] > 0
    before = dict(draws)
    gen = np.random.default_rng(99)
    state = gen.bit_generator.state
    est = _fedsgd(random_state=gen)
    with pytest.raises(BudgetExceededError, match="nothing was released"):
        est.fit(data, budget=budget)
    assert draws == before  # no noise drawn, nothing released
    assert gen.bit_generator.state == state  # the noise stream was not touched
    assert not hasattr(est, "coef_") and not hasattr(est, "privacy_")
    assert len(budget.fits) == 12 and all(f.status == "done" for f in budget.fits)
    np.testing.assert_allclose(budget.spent, math.sqrt(3.0), rtol=1e-12)


def test_remaining_mu_and_epsilon_follow_the_gdp_formulas(data):
    budget = PrivacyBudget(mu=1.3, clients=["a", "b", "c", "d"])
    _fedsgd(mu=0.3, random_state=0).fit(data, budget=budget)
    _fedsgd(mu=0.4, random_state=1).fit(data, budget=budget)
    # 0.3^2 + 0.4^2 = 0.5^2 spent; 1.3^2 - 0.5^2 = 1.2^2 left
    assert budget.spent_mu == pytest.approx(0.5, rel=1e-12)
    assert budget.remaining_mu == pytest.approx(1.2, rel=1e-12)
    np.testing.assert_allclose(budget.remaining, 1.2, rtol=1e-12)
    for delta in (1e-5, 1e-3):
        eps = budget.epsilon(delta)
        assert _delta_of(0.5, eps) == pytest.approx(delta, rel=1e-6)
        eps_left = budget.remaining_epsilon(delta)
        assert _delta_of(1.2, eps_left) == pytest.approx(delta, rel=1e-6)
    assert budget.can_spend(1.2) and not budget.can_spend(1.2 * (1 + 1e-9))
    _fedsgd(mu=1.2, random_state=2).fit(data, budget=budget)
    assert budget.spent_mu == pytest.approx(1.3, rel=1e-12)
    assert budget.remaining_mu == pytest.approx(0.0, abs=1e-7)
    assert budget.is_private and budget.leaks == []


def test_every_private_estimator_is_charged_its_mu(data):
    specs = methods(private=True)
    budget = PrivacyBudget(mu=math.sqrt(len(specs)) * 0.7, n_clients=len(SIZES))
    for spec in specs:
        spec.cls(**spec.test_params, mu=0.7, random_state=0).fit(data, budget=budget)
    frame = budget.to_frame()
    assert list(frame["method"]) == [s.cls.method for s in specs]
    np.testing.assert_allclose(frame["charged mu"], 0.7, rtol=1e-12)
    assert (frame["status"] == "done").all()
    assert budget.remaining_mu == pytest.approx(0.0, abs=1e-6)


def test_non_private_fits_and_finite_budgets(data):
    budget = PrivacyBudget(mu=5.0, n_clients=len(SIZES))
    for est in (_fedsgd(mu=float("inf")), PooledMLE(), LocalFit()):
        with pytest.raises(ValueError, match="not private"):
            est.fit(data, budget=budget)
        assert not hasattr(est, "coef_")
    assert budget.fits == [] and budget.spent_mu == 0.0
    tracker = PrivacyBudget(mu=float("inf"), n_clients=len(SIZES))
    PooledMLE().fit(data, budget=tracker)
    _fedsgd(mu=1.0, random_state=0).fit(data, budget=tracker)
    assert math.isinf(tracker.spent_mu) and math.isinf(tracker.remaining_mu)
    assert not tracker.is_private and "raw data pooled" in tracker.leaks[0]


def test_wrong_number_of_clients_is_refused(data):
    budget = PrivacyBudget(mu=2.0, n_clients=len(SIZES) + 1)
    with pytest.raises(ValueError, match="same clients in the same order"):
        _fedsgd().fit(data, budget=budget)
    assert budget.fits == []


def test_a_ledger_that_disagrees_with_mu_fails_loudly_and_charges_the_larger(data):
    class Overspending(FedSGD):
        def _run(self, session, setup):
            run = super()._run(session, setup)
            m = session.clients.n_clients
            session.ask("gradients", weights=np.full(m, 1 / m), theta=run.theta, clip=1.0, sensitivity=1.0, mu=0.4,
                        stage="extra")
            return run

    budget = PrivacyBudget(mu=3.0, n_clients=len(SIZES))
    est = Overspending(mu=0.3, n_iter=3, clip=1.0, random_state=0)
    with pytest.raises(RuntimeError, match="accounting mismatch"):
        est.fit(data, budget=budget)
    assert budget.fits[0].status == "mismatch"
    np.testing.assert_allclose(budget.spent, 0.5, rtol=1e-12)  # sqrt(0.3^2 + 0.4^2), not the declared 0.3


def test_a_failed_fit_is_charged_exactly_what_it_released(data):
    class Failing(FedSGD):
        def _run(self, session, setup):
            m = session.clients.n_clients
            session.ask("gradients", weights=np.full(m, 1 / m), theta=np.zeros(session.clients.n_params), clip=1.0,
                        sensitivity=1.0, mu=0.25, stage="probe")
            raise ArithmeticError("boom")

    class FailingEarly(FedSGD):
        def _run(self, session, setup):
            raise ArithmeticError("before any release")

    budget = PrivacyBudget(mu=1.0, n_clients=len(SIZES))
    with pytest.raises(ArithmeticError):
        Failing(mu=0.9, n_iter=3, clip=1.0, random_state=0).fit(data, budget=budget)
    assert budget.fits[0].status == "incomplete"
    np.testing.assert_allclose(budget.spent, 0.25, rtol=1e-12)
    # a fit that fails before releasing anything (fixed clip, no scaling: _run is the first to release) costs nothing
    with pytest.raises(ArithmeticError):
        FailingEarly(mu=0.5, n_iter=3, clip=1.0, random_state=0).fit(data, budget=budget)
    assert budget.fits[1].status == "incomplete"
    np.testing.assert_allclose(budget.spent, 0.25, rtol=1e-12)


def test_a_fit_that_a_client_failure_stops_is_charged_the_round_the_others_sent(data):
    """Client 0 fails in the second of three rounds: the others' messages of that round reached the server."""
    budget = PrivacyBudget(mu=1.0, n_clients=len(SIZES))
    with pytest.raises(ClientFailureError):
        _fedsgd(mu=0.6, random_state=0, inference=None).fit(FailingData(data, {0: 1}), budget=budget)
    np.testing.assert_allclose(budget.spent, 0.6 * np.sqrt([1 / 3, 2 / 3, 2 / 3, 2 / 3]), rtol=1e-12)


def test_a_fit_that_diverges_in_local_steps_is_charged_the_noisy_steps_that_ran(data):
    budget = PrivacyBudget(mu=1.0, n_clients=len(SIZES))
    est = FedAvg(mu=0.8, clip=1.0, step_size=1e12, n_rounds=2, n_local_steps=4, scaling=None, inference=None,
                 random_state=0)
    with pytest.raises(DivergenceError):
        est.fit(data, budget=budget)
    np.testing.assert_allclose(budget.spent, 0.8 / np.sqrt(8), rtol=1e-12)  # one of the 2 x 4 local steps ran


def test_fednewton_checks_the_public_sizes_before_any_release():
    small = simulate("logistic", [10] * 4, [0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.1])
    budget = PrivacyBudget(mu=1.0, n_clients=4)
    with pytest.raises(ValueError, match="n_i >= 2 d"):
        FedNewton(mu=0.5, random_state=0).fit(small, budget=budget)
    np.testing.assert_array_equal(budget.spent, 0.0)


def test_leaky_fits_are_recorded(data):
    budget = PrivacyBudget(mu=2.0, n_clients=len(SIZES))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        FedSGD(mu=1.0, n_iter=3, clip="paper", random_state=0).fit(data, budget=budget)
    assert not budget.is_private
    assert budget.leaks and budget.leaks[0].startswith("fit 0 (FedSGD): gradient clipping bound")
    assert "NOT fully private" in repr(budget)


def test_reports(data):
    budget = PrivacyBudget(mu=2.0, clients=["north", "south", "east", "west"])
    assert budget.clients == ["north", "south", "east", "west"] and budget.n_clients == 4
    _fedsgd(mu=1.2, random_state=0).fit(data, budget=budget)
    FedNewton(mu=1.6, n_local_steps=3, random_state=0).fit(data, budget=budget)
    text = repr(budget)
    assert text.startswith("PrivacyBudget(mu=2 per client, 4 clients: 2 fit(s), spent mu 2,")
    assert "fit 0: FedSGD mu=1.2 (done)" in text and "fit 1: FedNewton mu=1.6 (done)" in text
    frame = budget.to_frame()
    assert list(frame.columns) == ["method", "status", "mu", "charged mu", "third-party mu", "spent mu",
                                   "remaining mu", "leaks"]
    np.testing.assert_allclose(frame["spent mu"], [1.2, 2.0], rtol=1e-12)
    np.testing.assert_allclose(frame["remaining mu"], [1.6, 0.0], atol=1e-7)
    assert (frame["third-party mu"] < frame["charged mu"]).all()
    for _ in range(25):
        budget.fits.append(budget.fits[0])  # only to exercise the long repr
    assert "earlier fits (to_frame() lists all)" in repr(budget)


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"mu": 1.0}, TypeError, "n_clients or clients"),
        ({"mu": 0.0, "n_clients": 3}, ValueError, "mu must be > 0"),
        ({"mu": "1", "n_clients": 3}, TypeError, "mu must be a positive number"),
        ({"mu": 1.0, "n_clients": 0}, ValueError, "n_clients"),
        ({"mu": 1.0, "n_clients": 2.0}, ValueError, "n_clients"),
        ({"mu": 1.0, "clients": "abc"}, TypeError, "sequence of labels"),
        ({"mu": 1.0, "clients": ["a", "a"]}, ValueError, "distinct"),
        ({"mu": 1.0, "clients": ["a", "b"], "n_clients": 3}, ValueError, "2 client labels"),
    ],
)
def test_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        PrivacyBudget(**kwargs)


def test_budget_must_be_a_privacy_budget(data):
    with pytest.raises(TypeError, match="PrivacyBudget or None"):
        _fedsgd().fit(data, budget=3.0)
    with pytest.raises(ValueError, match="delta"):
        PrivacyBudget(mu=1.0, n_clients=2).epsilon(0.0)
