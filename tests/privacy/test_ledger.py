import math

import numpy as np
import pandas as pd
import pytest

from privfedstat.privacy import PrivacyLedger, Release, compose, epsilon_from_mu


def rel(sens, sigma, kind="aggregated", weights=None, stage="g"):
    sens, sigma = np.asarray(sens, float), np.asarray(sigma, float)
    if kind == "aggregated" and weights is None:
        weights = np.full(sens.size, 1 / sens.size)
    return Release(stage, 0, kind, sens, sigma, None if weights is None else np.asarray(weights, float))


def test_client_mu_composes_per_client():
    led = PrivacyLedger(2)
    led.record(rel([1, 2], [1, 1]))
    led.record(rel([1, 1], [0.5, 2], kind="local"))
    np.testing.assert_allclose(led.client_mu, [compose([1, 2]), compose([2, 0.5])])
    assert led.mu == pytest.approx(math.sqrt(5))
    assert led.epsilon(1e-5) == pytest.approx(epsilon_from_mu(math.sqrt(5), 1e-5))
    assert led.is_private


def test_third_party_aggregated_exact():
    led = PrivacyLedger(3)
    w = np.array([0.5, 0.3, 0.2])
    led.record(rel([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], weights=w))
    sd = math.sqrt(np.sum((w * [1, 2, 3]) ** 2))
    assert led.third_party_mu == pytest.approx(0.5 / sd)


def test_third_party_local_is_client_mu():
    led = PrivacyLedger(2)
    led.record(rel([1.0, 3.0], [1.0, 1.0], kind="local"))
    assert led.third_party_mu == pytest.approx(3.0)


def test_leak_makes_run_not_private():
    led = PrivacyLedger(1)
    led.record(rel([1.0], [1.0]))
    led.add_leak("B from raw data")
    assert not led.is_private
    assert "NOT fully private" in repr(led)


def test_non_private_and_zero_sensitivity():
    led = PrivacyLedger(2)
    led.record(rel([1.0, 0.0], [0.0, 0.0]))
    assert np.isinf(led.client_mu[0]) and led.client_mu[1] == 0
    assert not led.is_private


def test_record_validates():
    led = PrivacyLedger(2)
    with pytest.raises(ValueError):
        led.record(rel([1.0], [1.0]))
    with pytest.raises(ValueError):
        led.record(Release("g", 0, "aggregated", np.ones(2), np.ones(2), None))
    with pytest.raises(ValueError):
        led.record(Release("g", 0, "other", np.ones(2), np.ones(2), None))


def test_frames():
    led = PrivacyLedger(2)
    led.record(rel([1, 1], [1, 1], stage="a"))
    led.record(rel([1, 1], [2, 2], stage="b"))
    df = led.to_frame()
    assert isinstance(df, pd.DataFrame) and len(df) == 4
    assert set(df.columns) >= {"stage", "round", "kind", "client", "sensitivity", "sigma", "mu", "weight"}
    bs = led.by_stage()
    assert bs.loc["a", "mu (worst client)"] == pytest.approx(1.0) and bs.loc["b", "releases"] == 1
