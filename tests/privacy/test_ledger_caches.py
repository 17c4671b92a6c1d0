"""The ledger's caches (vectors shared with a recent equal one, mu composed once per distinct vectors, a reply's labels)
change no number: a ledger fed through them equals the guarantees composed release by release without any cache."""

import pickle
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from privfedstat.fitting.diagnostics import SELECTION_STAGES, undersized_clients
from privfedstat.privacy.ledger import _RECENT, PrivacyLedger, Release


def _replies(m: int, rng) -> list[tuple[list[Release], np.ndarray, float]]:
    """Replies as a fit sends them: runs of local releases with one vector pair, aggregated ones with weights, Poisson
    rounds (sparse vectors), selection counts, and more distinct vectors than the caches hold (evictions)."""
    sens, sigma, w = rng.random(m) + 0.1, rng.random(m) + 0.5, rng.dirichlet(np.ones(m))
    replies = []
    for r in range(3 * _RECENT):
        if r % 4 == 0:  # local steps: the same vectors, new arrays each step
            replies.append(([Release("local-step", -1, "local", sens.copy(), sigma / 2.0) for _ in range(5)], None, 1.0))
        elif r % 4 == 1:  # a Poisson round: few senders, zeros elsewhere
            sent = rng.random(m) < 0.1
            sent[0] = True
            rel = Release("p", -1, "aggregated", np.where(sent, sens, 0.0), np.where(sent, sigma, 0.0), unit="client")
            replies.append(([rel], np.where(sent, w, 0.0) / w[sent].sum(), 0.1))
        elif r % 4 == 2:  # a clip search's count: new noise each time (more distinct vectors than _RECENT)
            replies.append(([Release("clip-gradient", -1, "aggregated", np.ones(m), np.full(m, 1.0 + r))],
                            np.ones(m), 1.0))
        else:
            replies.append(([Release("gradient", -1, "aggregated", sens.copy(), sigma.copy())], w.copy(), 1.0))
    return replies


def _reference(replies, m):
    """Per-client mu^2 and third-party mu^2 summed release by release from the releases' own methods."""
    mu2, tp2 = np.zeros(m), np.zeros(m)
    for rels, weights, q in replies:
        for rel in rels:
            placed = replace(rel, weights=weights if rel.kind == "aggregated" else None, sampling_rate=q)
            cm = placed.client_mu()
            mu2 += cm * cm
            tp = cm if placed.kind == "local" else placed.third_party_mu()
            tp2 += tp * tp
    return mu2, tp2


def test_record_reply_and_its_caches_give_the_guarantees_of_each_release_composed_alone():
    m, rng = 50, np.random.default_rng(3)
    replies = _replies(m, rng)
    fast, slow = PrivacyLedger(m), PrivacyLedger(m)
    for r, (rels, weights, q) in enumerate(replies):
        fast.record_reply(rels, round=r, weights=weights, sampling_rate=q)
        for rel in rels:
            slow.record(replace(rel, round=r, weights=weights if rel.kind == "aggregated" else None, sampling_rate=q))
    mu2, tp2 = _reference(replies, m)
    for led in (fast, slow):
        np.testing.assert_array_equal(led.client_mu, np.sqrt(mu2))  # bit for bit: the same sums in the same order
        assert led.third_party_mu == float(np.sqrt(tp2.max()))
    pd.testing.assert_frame_equal(fast.to_frame(), slow.to_frame())
    assert fast.public_view() == slow.public_view()
    assert [r.round for r in fast.releases] == [r for r, (rels, _, _) in enumerate(replies) for _ in rels]


def test_a_pickled_ledger_goes_on_as_the_original():
    """Pickles and copies leave the caches out; recording on after a round trip gives the same guarantees."""
    m, rng = 30, np.random.default_rng(4)
    replies = _replies(m, rng)
    whole, half = PrivacyLedger(m), PrivacyLedger(m)
    for r, (rels, weights, q) in enumerate(replies):
        whole.record_reply(rels, round=r, weights=weights, sampling_rate=q)
        if r == len(replies) // 2:
            half = pickle.loads(pickle.dumps(half))
            assert half._recent == {} and half._composition == {}
        half.record_reply(rels, round=r, weights=weights, sampling_rate=q)
    np.testing.assert_array_equal(whole.client_mu, half.client_mu)
    assert whole.third_party_mu == half.third_party_mu
    pd.testing.assert_frame_equal(whole.to_frame(), half.to_frame())


def test_a_vector_stored_unchecked_is_still_checked_as_a_sensitivity():
    """The non-negativity of a stored vector is cached with it: weights are not checked, a sensitivity equal to them is."""
    led = PrivacyLedger(2)
    odd = np.array([-1.0, 2.0])
    led.record(Release("g", 0, "aggregated", np.ones(2), np.ones(2), odd.copy()))
    with pytest.raises(ValueError, match="release sensitivity must be 2 non-negative numbers"):
        led.record(Release("g", 1, "aggregated", odd.copy(), np.ones(2), np.full(2, 0.5)))
    with pytest.raises(ValueError, match="release sigma must be 2 non-negative numbers"):
        led.record(Release("g", 1, "local", np.ones(2), np.array([1.0, np.nan])))
    assert len(led.releases) == 1


def test_undersized_clients_over_distinct_vectors_equals_the_loop_over_every_release():
    m, rng = 40, np.random.default_rng(5)
    led = PrivacyLedger(m)
    for r, (rels, weights, q) in enumerate(_replies(m, rng)):
        led.record_reply(rels, round=r, weights=weights, sampling_rate=q)
    sizes = rng.integers(1, 30, size=m).astype(np.float64)
    worst = np.zeros(m)
    for rel in led.releases:  # the definition, release by release
        if rel.stage.startswith(SELECTION_STAGES):
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(rel.sensitivity > 0, 2.0 * rel.sigma / (rel.sensitivity * sizes), 0.0)
        worst = np.maximum(worst, ratio)
    bad, n_min = undersized_clients(led, sizes)
    np.testing.assert_array_equal(bad, np.flatnonzero(worst > 1.0))
    assert bad.size and n_min == int(np.ceil(np.max(worst * sizes)))
    assert len(led.noise_pairs(SELECTION_STAGES)) < len(led.releases) // 2  # each pair once


def test_the_same_vectors_released_locally_and_aggregated_compose_apart():
    """A local release adds its own mu towards a third party, an aggregated one its mu through the aggregate, even when
    both carry the same stored vectors (weights included)."""
    rng = np.random.default_rng(6)
    sens, sigma, w = rng.random(6) + 0.1, rng.random(6) + 0.5, rng.dirichlet(np.ones(6))
    made = [Release("s", r, kind, sens.copy(), sigma.copy(), w.copy()) for r, kind in
            enumerate(["aggregated", "local", "aggregated", "local"])]
    led = PrivacyLedger(6)
    tp2 = np.zeros(6)
    for rel in made:
        led.record(rel)
        tp = rel.client_mu() if rel.kind == "local" else rel.third_party_mu()
        tp2 += tp * tp
    assert led.third_party_mu == float(np.sqrt(tp2.max()))
    assert not np.allclose(made[0].client_mu(), made[0].third_party_mu())  # the two kinds differ here


def test_secure_releases_with_the_same_vectors_compose_with_their_own_noise():
    """A secure release's mu carries its integer noise's factor, so equal vectors do not share a composition."""
    from privfedstat.privacy.secure_noise import IntegerNoise

    sens, sigma = np.array([0.2, 0.3]), np.array([1.0, 1.5])
    made = [Release("s", r, "aggregated", sens.copy(), sigma.copy(), np.full(2, 0.5),
                    integer=IntegerNoise(1.0, lam, 1.0, 2.0, 2)) for r, lam in enumerate([4.0, 4.0, 50.0])]
    assert made[0].integer.gdp_factor != made[2].integer.gdp_factor
    led, mu2 = PrivacyLedger(2), np.zeros(2)
    for rel in made:
        led.record(rel)
        mu2 += rel.client_mu() ** 2
    np.testing.assert_array_equal(led.client_mu, np.sqrt(mu2))
