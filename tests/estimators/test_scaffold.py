"""Scaffold: NP-SCAFFOLD reaches the pooled MLE where FedAvg is biased; DP-SCAFFOLD's accounting."""

import math

import numpy as np
import pytest
import statsmodels.api as sm
from conftest import simulate

from privfedstat import DivergenceError, FedAvg, FederatedData, PooledMLE, Scaffold
from privfedstat.families import FAMILIES, get_family

INF = float("inf")


def heterogeneous(seed=0):
    """Six clients of unequal sizes whose covariate means differ by several standard deviations."""
    rng = np.random.default_rng(seed)
    beta = np.array([0.3, 1.0, -0.8])
    clients = []
    for n, shift in zip((60, 90, 120, 150, 200, 80), (-2, -1, 0, 1, 2, 3)):
        C = shift * np.array([1.0, -0.5]) + 0.7 * rng.standard_normal((n, 2))
        X = np.column_stack([np.ones(n), C])
        y = (rng.random(n) < 1 / (1 + np.exp(-X @ beta))).astype(float)
        clients.append((X, y))
    return FederatedData.from_arrays(clients)


def test_np_scaffold_reaches_the_pooled_mle_where_fedavg_is_biased():
    data = heterogeneous()
    mle = sm.GLM(data.y, data.X, family=sm.families.Binomial()).fit(tol=1e-13).params
    kw = dict(mu=INF, clip=INF, n_rounds=40, n_local_steps=20, step_size=0.5)
    scaffold = Scaffold(**kw).fit(data)
    fedavg = FedAvg(**kw).fit(data)
    err_scaffold = np.linalg.norm(scaffold.coef_ - mle)
    err_fedavg = np.linalg.norm(fedavg.coef_ - mle)
    assert err_scaffold < 1e-6  # measured ~1e-9
    assert err_fedavg > 1e-2  # measured ~0.06: client drift
    np.testing.assert_allclose(scaffold.coef_, PooledMLE().fit(data).coef_, atol=1e-6)
    assert scaffold.history_.shape == (41, 3) and scaffold.n_iter_ == 800
    assert not scaffold.privacy_.is_private and np.all(np.isinf(scaffold.privacy_.client_mu))


def test_one_round_of_scaffold_is_fedavg():
    """Round 1 has c = c_i = 0, so it is a FedAvg round (with clipping, without noise)."""
    data = simulate("logistic", [50, 80, 120], [0.2, 0.3, -0.1], seed=1)
    kw = dict(mu=INF, clip=0.7, n_rounds=1, n_local_steps=7, step_size=0.4)
    np.testing.assert_allclose(Scaffold(**kw).fit(data).coef_, FedAvg(**kw).fit(data).coef_, atol=1e-12)
    # the private noise matches too: eta times gradient noise 2B sqrt(RK)/(mu n_i) = FedAvg's 2B eta sqrt(RK)/(mu n_i)
    kw.update(mu=1.5)
    s = Scaffold(**kw).fit(data).privacy_.releases[0].sigma
    np.testing.assert_allclose(0.4 * s, FedAvg(**kw).fit(data).privacy_.releases[0].sigma, rtol=1e-14)


def _sigmas(ledger, stage):
    return np.array([r.sigma for r in ledger.releases if r.stage == stage])


def test_dp_scaffold_noise_and_ledger():
    data = simulate("logistic", [50, 80, 120, 200], [0.2, 0.3, -0.1])
    B, R, K, mu = 1.3, 3, 7, 0.9
    est = Scaffold(mu=mu, clip=B, n_rounds=R, n_local_steps=K, step_size=0.3, inference=None, random_state=0).fit(data)
    sigma = 2 * B * math.sqrt(R * K) / (mu * data.sizes)  # sensitivity 2B/n_i over budget mu/sqrt(RK)
    sig = _sigmas(est.privacy_, "local-gradient")
    assert sig.shape == (R * K, 4)
    np.testing.assert_allclose(sig, np.tile(sigma, (R * K, 1)), rtol=1e-14)
    np.testing.assert_allclose(est.privacy_.client_mu, mu, rtol=0, atol=1e-12)
    assert est.privacy_.is_private and est.privacy_.leaks == []
    comm = est.communication_
    assert comm.rounds == R and comm.floats_per_client == 2 * 3 * R  # (y_i - x, delta c_i) per round


def test_uploads_and_control_variates_are_post_processing_of_the_noisy_gradients(monkeypatch):
    """Replay the noisy gradients of a fit on data D into a fit on unrelated data D' (same sizes):
    if the protocol touches the data only through the Gaussian mechanism, every upload, the control
    variate and the model are identical (option I control variates, fresh raw gradients, would differ)."""
    from privfedstat.federation import clients
    from privfedstat.federation.channel import Channel

    sizes = [40, 60, 80]
    d1 = simulate("logistic", sizes, [0.2, 0.3, -0.1], seed=1)
    d2 = simulate("logistic", sizes, [-1.0, 2.0, 0.5], seed=2)
    privatize, receive = clients.privatize, Channel.receive
    noisy, uploads = [], []

    def recording_privatize(*args):
        out, record = privatize(*args)
        noisy.append(out.copy())
        return out, record

    def recording_receive(self, reply, **kw):
        if reply.releases and reply.releases[0].kind == "local":  # the round uploads (inference releases aside)
            uploads.append(np.array(reply.values))
        return receive(self, reply, **kw)

    monkeypatch.setattr(clients, "privatize", recording_privatize)
    monkeypatch.setattr(Channel, "receive", recording_receive)
    kw = dict(mu=1.0, clip=1.0, n_rounds=3, n_local_steps=5, random_state=0)
    a = Scaffold(**kw).fit(d1)
    first_uploads = list(uploads)
    uploads.clear()
    replay = iter(list(noisy))

    def replaying_privatize(*args):
        out, record = privatize(*args)
        return next(replay).copy(), record

    monkeypatch.setattr(clients, "privatize", replaying_privatize)
    b = Scaffold(**kw).fit(d2)
    assert len(first_uploads) == len(uploads) == 3
    for u, v in zip(first_uploads, uploads):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.control_, b.control_)


def test_private_scaling_on_raw_scale_covariates_keeps_mu_exact():
    rng = np.random.default_rng(4)
    n = 3000
    age, income = rng.uniform(20, 80, n), rng.lognormal(10, 0.5, n)
    X = np.column_stack([np.ones(n), age, income])
    y = (rng.random(n) < 1 / (1 + np.exp(-(-3 + 0.04 * age + 1e-5 * income)))).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=[300] * 10)
    est = Scaffold(mu=2.0, scaling="private", random_state=0).fit(data)
    assert np.all(np.isfinite(est.coef_)) and abs(est.coef_[1] - 0.04) < 0.03
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=0, atol=1e-12)


def test_same_seed_same_fit():
    data = simulate("logistic", [100] * 5, [0.2, 0.3, -0.1], seed=2)
    a = Scaffold(random_state=11).fit(data).coef_
    b = Scaffold(random_state=11).fit(data).coef_
    c = Scaffold(random_state=12).fit(data).coef_
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_dp_scaffold_is_accurate_with_large_samples():
    beta = np.array([0.5, -0.5, 0.5])
    data = simulate("logistic", [2000] * 20, beta, seed=15)
    assert Scaffold(mu=2.0, random_state=1).fit(data).mse(beta) < 0.02


@pytest.mark.skipif("multinomial" not in FAMILIES, reason="no multinomial family")
def test_np_scaffold_multinomial_reaches_the_pooled_mle():
    rng = np.random.default_rng(3)
    n = 450
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    y = rng.integers(0, 3, size=n).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=[100, 150, 200])
    fam = get_family("multinomial", n_classes=3)
    est = Scaffold(family=fam, mu=INF, clip=INF, n_rounds=30, n_local_steps=20, step_size=0.5).fit(data)
    np.testing.assert_allclose(est.coef_, PooledMLE(family=fam).fit(data).coef_, atol=1e-6)


@pytest.mark.parametrize(
    "params, exc, match",
    [
        ({"n_rounds": 0}, ValueError, "n_rounds must be"),
        ({"n_local_steps": 2.5}, TypeError, "n_local_steps must be"),
        ({"server_step_size": 0.0}, ValueError, "server_step_size must be > 0"),
        ({"server_step_size": INF}, ValueError, "server_step_size must be finite"),
        ({"step_size": -1.0}, ValueError, "step_size must be > 0"),
        ({"clip": INF}, ValueError, "only allowed with"),
        ({"mu": 0.0}, ValueError, "mu must be > 0"),
        ({"weights": "optimal"}, ValueError, "weights='optimal'"),
        ({"weights": np.ones(3)}, ValueError, "one per client"),
    ],
)
def test_bad_parameters(params, exc, match, logistic_data):
    with pytest.raises(exc, match=match):
        Scaffold(**params).fit(logistic_data)


def test_divergence_names_the_step_size():
    data = simulate("poisson", [50] * 4, [1.0, 1.0, 1.0], seed=1)
    with pytest.raises(DivergenceError, match="step_size"):
        Scaffold(family="poisson", mu=INF, clip=INF, step_size=5.0, n_rounds=5).fit(data)
