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


def test_public_view_groups_releases_without_membership():
    led = PrivacyLedger(3)
    led.record(rel([1, 1, 1], [2, 2, 2], stage="a"))
    led.record(rel([1, 0, 1], [2, 2, 2], stage="a"))  # client 1 sat it out: the block does not say so
    led.record(rel([1, 1, 1], [1, 1, 1], kind="local", stage="b"))
    public = led.public_view()
    frame = public.to_frame()
    assert list(frame["rounds"]) == [2, 1] and list(frame["mu"]) == [0.5, 1.0]
    np.testing.assert_allclose(frame["noise_multiplier"], [4.0, 2.0])
    assert public.units == ("record",) and public.mu == pytest.approx(math.sqrt(1.5))  # as if every client sent
    assert public.epsilon(1e-5) == pytest.approx(led.third_party_epsilon(1e-5))  # Definition 2.1, record level
    assert public.server_epsilon(1e-5) == pytest.approx(epsilon_from_mu(math.sqrt(1.5), 1e-5))
    assert "server view" in repr(led) and "replace-one" in repr(public)


def test_public_view_of_a_non_private_or_mixed_ledger():
    led = PrivacyLedger(2)
    led.record(rel([1.0, 1.0], [0.0, 0.0]))
    assert math.isinf(led.public_view().epsilon(1e-5)) and not led.public_view().is_private
    mixed = PrivacyLedger(1)
    mixed.record(rel([1.0], [1.0]))
    mixed.record(Release("c", 0, "aggregated", np.ones(1), np.ones(1), np.ones(1), unit="client"))
    with pytest.raises(ValueError, match="mix record- and client-level"):
        mixed.public_view().epsilon(1e-5)


def _reference_frame(releases, m):
    """The per-release, per-client table built directly from dense releases (what to_frame shows)."""
    return pd.DataFrame({
        "stage": np.repeat([r.stage for r in releases], m), "round": np.repeat([r.round for r in releases], m),
        "kind": np.repeat([r.kind for r in releases], m), "client": np.tile(np.arange(m), len(releases)),
        "sensitivity": np.concatenate([r.sensitivity for r in releases]),
        "sigma": np.concatenate([r.sigma for r in releases]),
        "mu": np.concatenate([r.client_mu() for r in releases]),
        "weight": np.concatenate([r.weights if r.weights is not None else np.full(m, np.nan) for r in releases])})


def test_compact_storage_keeps_every_release_exactly():
    """Repeated vectors are stored once, mostly-zero ones sparsely; releases, to_frame and the guarantees are unchanged."""
    m, rng = 400, np.random.default_rng(0)
    sens, sigma, w = rng.random(m) + 0.1, rng.random(m) + 0.5, rng.dirichlet(np.ones(m))
    w[3] = -0.0
    made = []
    for r in range(30):
        if r % 3 == 2:  # a Poisson round: a few clients sent, the others have zeros
            sent = rng.random(m) < 0.05
            made.append(Release("p", r, "aggregated", np.where(sent, sens, 0.0), np.where(sent, sigma, 0.0),
                                np.where(sent, w, 0.0) / w[sent].sum(), unit="client", sampling_rate=0.05))
        else:
            made.append(Release("g", r, "aggregated" if r % 2 else "local", sens.copy(), sigma * (1 + r % 2),
                                w.copy() if r % 2 else None))
    led, mu2, tp2 = PrivacyLedger(m), np.zeros(m), np.zeros(m)
    for r in made:
        led.record(r)
        mu2 += r.client_mu() ** 2
        tp2 += (r.client_mu() if r.kind == "local" else r.third_party_mu()) ** 2
    assert len(led.releases) == len(made)
    for got, want in zip(led.releases, made):
        assert (got.stage, got.round, got.kind, got.unit, got.sampling_rate) == (want.stage, want.round, want.kind,
                                                                                 want.unit, want.sampling_rate)
        for name in ("sensitivity", "sigma", "weights"):
            a, b = getattr(got, name), getattr(want, name)
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_array_equal(a.view(np.uint64), b.view(np.uint64))  # bit for bit, -0.0 included
    pd.testing.assert_frame_equal(led.to_frame(), _reference_frame(made, m))
    np.testing.assert_array_equal(led.client_mu, np.sqrt(mu2))
    assert led.third_party_mu == float(np.sqrt(tp2.max()))
    dense = {id(getattr(r, n)) for r in led.releases for n in ("sensitivity", "sigma") if getattr(r, n).size}
    assert len(dense) < 10 + 2 * 10  # the 20 full-participation releases share 3 vectors; sparse ones are rebuilt
    assert led.releases[-2:][0].round == 28 and not led.releases[0].sigma.flags.writeable


def test_compact_storage_grows_with_rounds_not_with_clients_times_rounds():
    import pickle

    m = 10_000
    sens, sigma, w = np.full(m, 0.3), np.full(m, 0.6), np.full(m, 1 / m)
    led = PrivacyLedger(m)
    for r in range(200):
        led.record(Release("g", r, "aggregated", sens.copy(), sigma.copy(), w.copy()))
    assert len(pickle.dumps(led)) < 8 * m * 8  # 200 rounds x 3 vectors of 80 kB would be 48 MB
    assert led.to_frame().shape == (200 * m, 8)
