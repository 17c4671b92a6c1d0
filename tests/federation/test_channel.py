import numpy as np
import pytest

from privfedstat.federation import Channel
from privfedstat.privacy import ClientNoise, PrivacyLedger


def make(m=3):
    led = PrivacyLedger(m)
    return Channel(np.arange(1, m + 1) * 10, ClientNoise([np.random.default_rng(i) for i in range(m)]), led), led


def test_release_records_and_counts():
    ch, led = make()
    ch.release(np.zeros((3, 4)), sensitivity=1.0, mu=2.0, stage="s", weights=np.ones(3) / 3)
    assert ch.communication.rounds == 1 and ch.communication.floats_per_client == 4
    assert ch.communication.total_floats == 12
    rel = led.releases[0]
    np.testing.assert_allclose(rel.sigma, 0.5)
    assert rel.kind == "aggregated" and rel.round == 0


def test_perturb_then_send():
    ch, led = make()
    with pytest.raises(RuntimeError, match="nothing was privatized"):
        ch.send(np.zeros((3, 2)))
    for _ in range(3):
        ch.perturb(np.zeros((3, 2)), sensitivity=np.array([1.0, 2.0, 3.0]), mu=1.0, stage="local")
    assert ch.communication.rounds == 0
    ch.send(np.zeros((3, 2)))
    assert ch.communication.rounds == 1 and ch.communication.floats_per_client == 2
    assert [r.kind for r in led.releases] == ["local"] * 3
    np.testing.assert_allclose(led.client_mu, np.sqrt(3))  # each release is mu=1 by calibration
    np.testing.assert_allclose(led.releases[0].sigma, [1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError):
        ch.send(np.zeros((3, 2)))  # a second upload needs new privatized values


def test_infinite_sensitivity_needs_infinite_mu():
    ch, _ = make()
    with pytest.raises(ValueError, match="infinite sensitivity"):
        ch.release(np.zeros((3, 1)), sensitivity=np.inf, mu=1.0, stage="s", weights=np.ones(3))
    out = ch.release(np.ones((3, 1)), sensitivity=np.inf, mu=np.inf, stage="s", weights=np.ones(3))
    np.testing.assert_array_equal(out, 1.0)  # no noise


def test_wrong_number_of_messages():
    ch, _ = make()
    with pytest.raises(ValueError, match="one message per client"):
        ch.release(np.zeros((2, 1)), sensitivity=1.0, mu=1.0, stage="s", weights=np.ones(3))
