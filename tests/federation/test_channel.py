"""The seam: clients privatize (privatize, InProcessClients' verbs), the server's Channel records and counts."""

import numpy as np
import pytest

from privfedstat import ClientFailureError, DivergenceError, FederatedData
from privfedstat.families import get_family
from privfedstat.federation import Channel, FailingData, InProcessClients, aggregate, privatize
from privfedstat.privacy import ClientNoise, PrivacyLedger


def noise(m=3):
    return ClientNoise(np.random.SeedSequence(0), m)


def clients_and_channel(m=3, failures=None, policy="raise"):
    rng = np.random.default_rng(0)
    sizes = np.arange(1, m + 1) * 10
    X = np.column_stack([np.ones(sizes.sum()), rng.standard_normal(sizes.sum())])
    y = (rng.random(sizes.sum()) < 0.5).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=sizes)
    if failures:
        data = FailingData(data, failures)
    clients = InProcessClients(data, get_family("logistic"), noise(m))
    return clients, Channel(clients.sizes, PrivacyLedger(m), policy)


def test_privatize_calibrates_and_records():
    out, rec = privatize(np.zeros((3, 4)), noise(), 1.0, 2.0, "s", "aggregated")
    np.testing.assert_allclose(rec.sigma, 0.5)
    assert rec.kind == "aggregated" and out.shape == (3, 4) and np.all(out != 0)


def test_receive_records_the_clients_records_and_counts():
    clients, ch = clients_and_channel()
    w = clients.sizes / clients.sizes.sum()
    reply = clients.gradients(np.zeros(2), clip=1.0, sensitivity=2.0 / clients.sizes, mu=2.0, stage="g")
    ch.receive(reply, weights=w)
    assert ch.communication.rounds == 1 and ch.communication.floats_per_client == 2
    assert ch.communication.total_floats == 6
    rel = ch.ledger.releases[0]
    np.testing.assert_allclose(rel.sigma, 1.0 / clients.sizes)
    np.testing.assert_array_equal(rel.weights, w)
    assert rel.kind == "aggregated" and rel.round == 0 and rel.stage == "g"


def test_local_descent_records_every_step_and_sends_once():
    clients, ch = clients_and_channel()
    sens = np.array([1.0, 2.0, 3.0])
    reply = clients.local_descent(np.zeros(2), clip=1.0, step_size=0.1, n_steps=3, sensitivity=sens, mu=1.0,
                                  stage="local")
    ch.receive(reply)
    assert ch.communication.rounds == 1 and ch.communication.floats_per_client == 2
    assert [r.kind for r in ch.ledger.releases] == ["local"] * 3
    np.testing.assert_allclose(ch.ledger.client_mu, np.sqrt(3))  # each step is mu = 1 by calibration
    np.testing.assert_allclose(ch.ledger.releases[0].sigma, sens)


def test_infinite_sensitivity_needs_infinite_mu():
    with pytest.raises(ValueError, match="infinite sensitivity"):
        privatize(np.zeros((3, 1)), noise(), np.inf, 1.0, "s", "aggregated")
    out, _ = privatize(np.ones((3, 1)), noise(), np.inf, np.inf, "s", "aggregated")
    np.testing.assert_array_equal(out, 1.0)  # no noise


def test_wrong_number_of_messages():
    with pytest.raises(ValueError, match="one message per client"):
        privatize(np.zeros((2, 1)), noise(), 1.0, 1.0, "s", "aggregated")


def test_aggregate_is_the_weighted_mean_or_the_sum_over_who_answered():
    v = np.arange(6.0).reshape(3, 2)
    w = np.array([0.2, 0.3, 0.5])
    np.testing.assert_array_equal(aggregate(w, v), w @ v)
    np.testing.assert_array_equal(aggregate(None, v), v.sum(axis=0))
    answered = np.array([True, False, True])
    np.testing.assert_allclose(aggregate(w, v, answered), (0.2 * v[0] + 0.5 * v[2]) / 0.7, rtol=1e-15)
    np.testing.assert_array_equal(aggregate(None, v, answered), v[0] + v[2])


def test_a_failing_client_raises_or_is_skipped_and_leaves_the_ledger_exact():
    clients, ch = clients_and_channel(failures={1: 1})
    req = dict(theta=np.zeros(2), clip=1.0, sensitivity=2.0 / clients.sizes, mu=1.0, stage="g")
    ch.receive(clients.gradients(**req), weights=np.full(3, 1 / 3))  # request 0: all answer
    with pytest.raises(ClientFailureError, match=r"client\(s\) \[1\] failed"):
        ch.receive(clients.gradients(**req), weights=np.full(3, 1 / 3))
    clients, ch = clients_and_channel(failures={1: 1}, policy="skip")
    for _ in range(3):
        reply = clients.gradients(**req)
        values = ch.receive(reply, weights=np.full(3, 1 / 3))
    assert not reply.answered[1] and np.all(np.isnan(values[1]))
    assert list(ch.live) == [True, False, True]
    mu2 = np.array([r.client_mu() ** 2 for r in ch.ledger.releases]).sum(axis=0)
    np.testing.assert_allclose(mu2, [3.0, 1.0, 3.0])  # client 1 released once, before it failed


def test_the_round_a_client_fails_in_is_recorded_for_the_clients_that_answered():
    """Under on_client_failure='raise' the messages of the other clients in that round reached the server: recorded."""
    clients, ch = clients_and_channel(failures={1: 1})
    req = {"theta": np.zeros(2), "clip": 1.0, "sensitivity": 2.0 / clients.sizes, "mu": 1.0, "stage": "g"}
    ch.receive(clients.gradients(**req), weights=np.full(3, 1 / 3))
    with pytest.raises(ClientFailureError):
        ch.receive(clients.gradients(**req), weights=np.full(3, 1 / 3))
    assert len(ch.ledger.releases) == 2
    np.testing.assert_allclose(ch.ledger.client_mu ** 2, [2.0, 1.0, 2.0])


def test_a_diverging_local_step_is_recorded_before_the_error_reaches_the_server():
    """The noisy local steps that ran before the divergence check fired are releases: the channel records them,
    then raises the clients' DivergenceError."""
    clients, ch = clients_and_channel()
    reply = clients.local_descent(np.zeros(2), clip=1.0, step_size=1e12, n_steps=3, sensitivity=2e12 / clients.sizes,
                                  mu=1.0, stage="local-step")
    with pytest.raises(DivergenceError, match="local-step"):
        ch.receive(reply, weights=np.full(3, 1 / 3))
    assert len(ch.ledger.releases) == 1  # the first step diverged: one noisy step ran
    np.testing.assert_allclose(ch.ledger.client_mu, 1.0)


def test_every_client_failing_raises_even_when_skipping():
    clients, ch = clients_and_channel(failures={0: 0, 1: 0, 2: 0}, policy="skip")
    with pytest.raises(ClientFailureError, match="every client"):
        ch.receive(clients.gradients(np.zeros(2), clip=1.0, sensitivity=1.0, mu=1.0, stage="g"), weights=np.ones(3) / 3)


def test_unknown_failure_policy_is_refused():
    with pytest.raises(ValueError, match="on_client_failure"):
        Channel(np.ones(2), PrivacyLedger(2), "retry")


def test_communication_counts_what_partial_participation_sent():
    """FedSGD with participation 0.5 asks about half the clients each round: the server receives (and
    communication_ reports) only their floats, one message per client that sent."""
    from conftest import simulate

    from privfedstat import FedSGD

    data = simulate("logistic", [50] * 20, [0.2, 0.5, -0.5])
    kw = dict(n_iter=30, clip=1.0, inference=None, random_state=0)
    full = FedSGD(**kw).fit(data).communication_
    half = FedSGD(participation=0.5, **kw).fit(data).communication_
    assert full.senders == (20,) * 30 and full.messages == 600 and full.total_floats == 600 * 3
    assert half.rounds == full.rounds and half.floats_per_client == full.floats_per_client == 30 * 3
    assert len(half.senders) == 30 and all(0 <= s <= 20 for s in half.senders)
    assert half.total_floats == 3 * half.messages and 200 < half.messages < 400  # E = 300 (k p M), sd ~ 11
