"""Client-level DP-FedAvg: a naive reference loop, the client-level ledger, PLD amplification, failures."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit

from privfedstat import ClientFailureError, FederatedData
from privfedstat.algorithms.dpfedavg import DPFedAvg
from privfedstat.federation import FailingData
from privfedstat.federation.session import Session
from privfedstat.privacy.accounting import heterogeneous_epsilon, subsampled_gaussian_epsilon
from privfedstat.privacy.gdp import epsilon_from_mu

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _data(m=20, n=50, seed=0):
    rng = np.random.default_rng(seed)
    N = m * n
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    y = (rng.random(N) < expit(X @ np.array([0.3, -0.6, 0.2]))).astype(float)
    return FederatedData.from_pooled(X, y, sizes=[n] * m)


def _naive(data, R, K, eta, eta_g, S):
    """Textbook DP-FedAvg without noise: per client K full-batch logistic GD steps, update clipped to S, size-weighted mean."""
    theta = np.zeros(data.n_features)
    w = data.sizes / data.sizes.sum()
    o = data.offsets
    for _ in range(R):
        updates = []
        for i in range(data.n_clients):
            X, y = data.X[o[i]:o[i + 1]], data.y[o[i]:o[i + 1]]
            local = theta.copy()
            for _ in range(K):
                local = local - eta * X.T @ (expit(X @ local) - y) / len(y)
            u = local - theta
            updates.append(u * min(1.0, S / np.linalg.norm(u)) if np.isfinite(S) else u)
        theta = theta + eta_g * (w @ np.array(updates))
    return theta


@pytest.mark.parametrize("S", [math.inf, 0.05])
def test_without_noise_it_is_the_textbook_loop(S):
    data = _data()
    est = DPFedAvg(mu=math.inf, n_rounds=6, n_local_steps=4, step_size=0.3, server_step_size=0.8, update_clip=S,
                   random_state=0).fit(data)
    ref = _naive(data, 6, 4, 0.3, 0.8, S * (1 - 2.0**-40))
    np.testing.assert_allclose(est.coef_, ref, rtol=1e-10, atol=1e-12)
    assert est.n_iter_ == 24 and len(est.history_) == 7


def test_it_converges_to_the_mle_with_one_local_step_and_no_noise():
    import statsmodels.api as sm

    data = _data()
    est = DPFedAvg(mu=math.inf, n_rounds=3000, n_local_steps=1, step_size=1.0, update_clip=math.inf).fit(data)
    mle = sm.Logit(data.y, data.X).fit(disp=0).params
    np.testing.assert_allclose(est.coef_, mle, atol=1e-6)


def test_the_ledger_is_client_level_and_spends_exactly_mu():
    data = _data()
    est = DPFedAvg(mu=1.5, n_rounds=8, update_clip=0.2, random_state=1).fit(data)
    led = est.privacy_
    assert led.units == ("client",) and all(r.unit == "client" for r in led.releases)
    np.testing.assert_allclose(led.client_mu, 1.5, rtol=0, atol=1e-12)
    np.testing.assert_allclose(led.releases[0].sensitivity, 0.4)  # 2 S: a whole client replaced
    np.testing.assert_allclose(led.releases[0].sigma, 0.4 * math.sqrt(8) / 1.5)
    assert "unit=client" in repr(led)


def test_poisson_participation_amplifies_towards_outsiders_exactly_as_the_pld():
    data = _data(m=40)
    q, R, mu, S = 0.2, 25, 3.0, 0.2
    est = DPFedAvg(mu=mu, n_rounds=R, update_clip=S, participation=q, random_state=4).fit(data)
    led = est.privacy_
    took = np.array([r.sensitivity > 0 for r in led.releases])
    np.testing.assert_allclose(led.client_mu, mu * np.sqrt(took.sum(axis=0) / R), rtol=1e-12)  # towards the server
    assert all(r.sampling_rate == q for r in led.releases)
    z = 2 * math.sqrt(R) / mu  # sigma / S with sigma = 2 S sqrt(R) / mu: noise sd per radius S of the update's ball
    expected = subsampled_gaussian_epsilon(z, q, R, 1e-5)  # replace-one, as the unit
    public = led.public_view()
    assert public.epsilon(1e-5) == pytest.approx(expected, rel=1e-6)
    assert expected < led.epsilon(1e-5)  # amplification: well below the server's view
    # the same noise without sampling: no amplification; replace-one (sensitivity 2 S) the composition is
    # mu-GDP, the server's guarantee, which the PLD of q = 1 reproduces
    full = DPFedAvg(mu=mu, n_rounds=R, update_clip=S, random_state=4).fit(data).privacy_.public_view()
    assert full.epsilon(1e-5) == pytest.approx(heterogeneous_epsilon([(z, 1.0, R)], 1e-5), rel=1e-6)
    assert full.epsilon(1e-5) == pytest.approx(epsilon_from_mu(mu, 1e-5), rel=2e-3)
    assert expected < full.epsilon(1e-5)


def test_record_level_fits_face_definition_2_1_towards_third_parties_and_inference_is_refused():
    from privfedstat import FedSGD

    data = _data()
    led = FedSGD(mu=1.0, n_iter=3, clip=1.0, inference=None, random_state=0).fit(data).privacy_
    assert led.public_view().epsilon(1e-5) == pytest.approx(led.third_party_epsilon(1e-5), rel=1e-12)
    with pytest.raises(ValueError, match="inference=None"):
        DPFedAvg(inference="auto").fit(data)
    from privfedstat import NoInferenceError

    with pytest.raises(NoInferenceError, match="whole clients"):
        _ = DPFedAvg(mu=1.0, n_rounds=2, random_state=0).fit(data).bse_
    with pytest.raises(ValueError, match="update_clip"):
        DPFedAvg(update_clip=math.inf).fit(data)


def test_a_diverging_client_still_sends_a_bounded_update():
    data = _data()
    X = data.X.copy()
    X[:50] *= 1e200  # client 0's rows are enormous: its local steps overflow
    bad = FederatedData(X, data.y, data.offsets)
    est = DPFedAvg(mu=2.0, n_rounds=3, update_clip=0.1, random_state=0).fit(bad)
    assert np.all(np.isfinite(est.coef_))


def test_failures_are_skipped_or_raised():
    data = FailingData(_data(), {3: 2})
    with pytest.raises(ClientFailureError):
        DPFedAvg(mu=2.0, n_rounds=5, random_state=0).fit(data)
    est = DPFedAvg(mu=2.0, n_rounds=5, random_state=0, on_client_failure="skip").fit(data)
    np.testing.assert_allclose(est.privacy_.client_mu[3], 2.0 * math.sqrt(2 / 5), rtol=1e-12)


def _client_neighbours():
    """Client 0 holds one row; its neighbour dataset replaces that whole client (label flipped, row scaled),
    which turns its clipped update from +S u to about -S u: the 2 S replacement sensitivity is nearly attained."""
    data = _data(m=4, n=30, seed=2)
    X, y, sizes = data.X[29:].copy(), data.y[29:].copy(), [1, 30, 30, 30]
    X[0], y[0] = [1.0, 2.0, -1.0], 1.0
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = [3.0, 6.0, -3.0], 0.0
    return (FederatedData.from_pooled(X, y, sizes=sizes), FederatedData.from_pooled(X2, y2, sizes=sizes))


def test_whole_client_neighbours_move_each_update_by_at_most_its_stated_sensitivity(monkeypatch):
    from _replay import check_neighbours, tap_channel

    from privfedstat.federation import clients

    data, neighbour = _client_neighbours()

    def make():
        return DPFedAvg(mu=1.0, n_rounds=3, n_local_steps=5, step_size=2.0, update_clip=0.1, random_state=0)

    with tap_channel():
        transcript = check_neighbours(make, data, neighbour)
    assert len(transcript.messages) == 3
    privatize = clients.privatize

    def understated(values, noise, sensitivity, mu, stage, kind, **kw):  # states S instead of 2 S
        return privatize(values, noise, np.asarray(sensitivity, dtype=np.float64) / 2, mu, stage, kind, **kw)

    monkeypatch.setattr(clients, "privatize", understated)
    with tap_channel(), pytest.raises(AssertionError, match="stated sensitivity"):
        check_neighbours(make, data, neighbour)


def test_poisson_rounds_are_topped_up_so_the_aggregate_noise_does_not_reveal_who_took_part(monkeypatch):
    """With q < 1 the server puts noise of the calibrated sd in every silent client's row: the aggregate then
    has the noise of all m clients whatever the sample (the amplified accounting's fixed-noise mechanism), and
    a round with nobody sampled is not redrawn (inclusion probability stays q)."""
    data = _data(m=30)
    seen = []
    topped = Session._topped_up

    def spy(self, reply, weights, q, request):
        values, w, mask = topped(self, reply, weights, q, request)
        seen.append((reply.answered.copy(), values.copy(), float(request["mu"]), np.asarray(request["sensitivity"])))
        return values, w, mask

    monkeypatch.setattr(Session, "_topped_up", spy)
    est = DPFedAvg(mu=2.0, n_rounds=40, update_clip=0.2, participation=0.05, random_state=3).fit(data)
    assert len(seen) == 40
    assert any(not answered.any() for answered, *_ in seen)  # empty rounds happen (0.95^30 = 21%) and are kept
    silent = np.concatenate([v[~a] for a, v, *_ in seen])
    sigma = 0.4 * math.sqrt(40) / 2.0
    assert abs(silent.std() / sigma - 1) < 0.05  # top-up noise of the calibrated sd
    z = 2.0 / (2.0 / math.sqrt(40))  # 2 sigma / Delta = 2 / mu_round
    assert all(r.noise_multiplier == pytest.approx(z) for r in est.privacy_.releases)
    expected = subsampled_gaussian_epsilon(z, 0.05, 40, 1e-5)
    assert est.privacy_.public_view().epsilon(1e-5) == pytest.approx(expected, rel=1e-6)
    participated = np.array([r.sensitivity > 0 for r in est.privacy_.releases]).mean()
    assert 0.02 < participated < 0.09


def test_secure_mode_draws_the_top_up_noise_from_the_os(monkeypatch):
    """In secure mode the server's top-up noise, like the clients' noise, comes from SecureClientNoise (the OS CSPRNG,
    four normals summed): one block per round with silent clients, of their number (the clients draw blocks of m)."""
    from privfedstat.privacy import mechanisms

    blocks = []
    secure = mechanisms.SecureClientNoise.standard_normal

    def spy(self, shape):
        blocks.append(self.n_clients)
        return secure(self, shape)

    monkeypatch.setattr(mechanisms.SecureClientNoise, "standard_normal", spy)
    est = DPFedAvg(mu=2.0, n_rounds=5, update_clip=0.2, participation=0.3, secure_mode=True).fit(_data(m=20))
    silent = [int((r.sensitivity == 0).sum()) for r in est.privacy_.releases]
    assert sorted(b for b in blocks if b != 20) == sorted(k for k in silent if 0 < k < 20)
    assert len(blocks) == 5 + sum(0 < k for k in silent)


def test_a_budget_charges_what_clients_that_sat_rounds_out_spent():
    from privfedstat import PrivacyBudget

    data = _data(m=10)
    budget = PrivacyBudget(mu=3.0, n_clients=10)
    est = DPFedAvg(mu=2.0, n_rounds=10, participation=0.5, random_state=0).fit(data, budget=budget)
    mu = est.privacy_.client_mu
    assert np.all(mu <= 2.0 + 1e-12) and mu.min() < 2.0 and budget.fits[0].status == "done"
    np.testing.assert_allclose(budget.spent, mu, rtol=1e-12)  # each client is charged what it spent
