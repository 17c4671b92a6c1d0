"""The client/server seam end to end: the server holds no data, participation, failures.

The server side of every registered private estimator is run against a *server view* of the
clients that exposes only the verbs and the public metadata (sizes, dimensions, family): if any
server code reached for the data (``.data``, ``._oracle``, ``X``), the fit would fail. Every reply
is checked to be privatized (each answering client's release has noise, or the fit is non-private
by mu = inf), and the fitted estimator is checked to hold no handle on the data.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from _seam import ServerView

from privfedstat import ClientFailureError, FedAvg, FederatedData, FedSGD, get_family
from privfedstat.algorithms.registry import methods
from privfedstat.federation import FailingData, InProcessClients, Participation, verbs
from privfedstat.federation.clients import PUBLIC
from privfedstat.federation.oracle import GLMOracle, MultinomialOracle
from privfedstat.fitting import base
from privfedstat.privacy import ClientNoise

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

def test_every_verb_is_answered_by_a_clients_backend():
    backends = [InProcessClients]
    try:
        import privfedstat.deep  # noqa: F401  (registers the networks' verbs and their torch implementations)
        from privfedstat.deep.clients import TorchClients
    except ImportError:  # torch not installed: the numba backend alone
        pass
    else:
        backends += [TorchClients]
    clients = InProcessClients(_data(), get_family("logistic"), ClientNoise(np.random.SeedSequence(0), 4))
    for name in verbs.names():  # a verb of the table: a method of a backend, or answered by a registered function
        assert (hasattr(clients, name) or any(hasattr(b, name) for b in backends)
                or verbs.implementation(name, "torch") is not None), name
    for name in PUBLIC:
        assert hasattr(clients, name), name


def _data(family="logistic", sizes=(60, 90, 120, 75)):
    rng = np.random.default_rng(3)
    N = sum(sizes)
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    eta = X @ np.array([0.3, -0.6, 0.2])
    y = (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(float)
    return FederatedData.from_pooled(X, y, sizes=list(sizes))


def _viewed(monkeypatch, replies):
    real = base.InProcessClients

    def factory(*args, **kwargs):
        return ServerView(real(*args, **kwargs), replies)

    monkeypatch.setattr(base, "InProcessClients", factory)


def _handles(root, depth=6):
    """Every object reachable from ``root`` through attributes and containers (bounded depth)."""
    seen, frontier, found = {id(root)}, [root], []
    for _ in range(depth):
        nxt = []
        for obj in frontier:
            for ref in gc.get_referents(obj):
                if id(ref) in seen or isinstance(ref, type) or callable(ref) and not hasattr(ref, "__dict__"):
                    continue
                seen.add(id(ref))
                found.append(ref)
                nxt.append(ref)
        frontier = nxt
    return found


@pytest.mark.parametrize("spec", methods(private=True), ids=lambda s: s.name)
@pytest.mark.parametrize("mu, clip", [(2.0, "auto"), (2.0, "fixed"), (math.inf, "fixed")])
def test_the_server_only_uses_verbs_and_every_reply_is_privatized(spec, mu, clip, monkeypatch):
    data = _data()
    params = dict(spec.test_params, mu=mu, random_state=5)
    if clip == "fixed":
        params.update(spec.fixed_clip_params(2.0))
    reference = spec.cls(**params).fit(data)
    replies: list = []
    _viewed(monkeypatch, replies)
    est = spec.cls(**params).fit(data)
    np.testing.assert_array_equal(est.coef_, reference.coef_)  # the view changes nothing
    assert replies
    for name, mu_request, reply in replies:
        assert reply.leak is None
        for rec in reply.releases:
            answered = reply.answered
            if math.isfinite(mu):
                assert mu_request is not None and math.isfinite(mu_request), name
                assert np.all(rec.sigma[answered] > 0), (name, rec.stage)  # noise on every message
    if math.isfinite(mu):
        np.testing.assert_allclose(est.privacy_.client_mu, mu, rtol=0, atol=1e-12)
    for obj in _handles(est):
        assert not isinstance(obj, (FederatedData, InProcessClients, ServerView, GLMOracle, MultinomialOracle)), type(obj)
        if isinstance(obj, np.ndarray) and obj.size >= data.n_samples:
            assert not np.shares_memory(obj, data.X) and not np.shares_memory(obj, data.y)


def test_poisson_participation_asks_a_sample_and_spends_only_on_rounds_taken():
    data = _data(sizes=(60,) * 10)
    K, mu = 40, 2.0
    est = FedSGD(mu=mu, n_iter=K, clip=1.0, participation=0.3, inference=None, random_state=1).fit(data)
    rounds = [r for r in est.privacy_.releases if r.stage == "gradient"]
    assert len(rounds) == K
    took = np.array([r.sensitivity > 0 for r in rounds])  # (K, m): who answered each round
    assert 0.15 < took.mean() < 0.45 and took.any(axis=1).all()
    np.testing.assert_allclose(est.privacy_.client_mu, mu * np.sqrt(took.sum(axis=0) / K), rtol=1e-12)
    for r, row in zip(rounds, took):  # the server renormalised its weights over who answered
        np.testing.assert_allclose(r.weights[row].sum(), 1.0, rtol=1e-12)
        assert np.all(r.weights[~row] == 0)
    again = FedSGD(mu=mu, n_iter=K, clip=1.0, participation=0.3, inference=None, random_state=1).fit(data)
    np.testing.assert_array_equal(again.coef_, est.coef_)


def test_a_cohort_has_exactly_its_size_and_inference_needs_full_participation():
    data = _data(sizes=(60,) * 10)
    est = FedAvg(mu=2.0, n_rounds=6, n_local_steps=3, clip=1.0, participation=4, inference=None,
                 random_state=2).fit(data)
    rounds = [r for r in est.privacy_.releases if r.stage == "local-step"]
    per_round = {}
    for r in rounds:
        per_round.setdefault(r.round, set()).add(tuple(np.flatnonzero(r.sensitivity > 0)))
    assert len(per_round) == 6 and all(len(v) == 1 and len(next(iter(v))) == 4 for v in per_round.values())
    with pytest.raises(ValueError, match="inference=None"):
        FedSGD(mu=2.0, n_iter=3, clip=1.0, participation=0.5).fit(data)
    with pytest.raises(ValueError, match="participation"):
        FedSGD(mu=2.0, n_iter=3, clip=1.0, participation=1.5, inference=None).fit(data)
    with pytest.raises(ValueError, match="cohort"):
        FedSGD(mu=2.0, n_iter=3, clip=1.0, participation=Participation(cohort=11), inference=None).fit(data)


def test_full_participation_is_the_default_and_changes_no_number():
    data = _data()
    a = FedSGD(mu=2.0, n_iter=5, clip=1.0, random_state=0).fit(data)
    b = FedSGD(mu=2.0, n_iter=5, clip=1.0, participation=Participation(rate=1.0), random_state=0).fit(data)
    np.testing.assert_array_equal(a.coef_, b.coef_)


@pytest.mark.parametrize("spec", methods(private=True), ids=lambda s: s.name)
def test_a_client_failing_mid_fit_raises_or_is_skipped(spec):
    data = _data()
    params = dict(spec.test_params, mu=2.0, random_state=5, inference=None, **spec.fixed_clip_params(2.0))
    failing = FailingData(data, {2: 1})  # client 2 dies while answering the second request
    with pytest.raises(ClientFailureError, match=r"client\(s\) \[2\]"):
        spec.cls(**params).fit(failing)
    est = spec.cls(**params, on_client_failure="skip").fit(failing)
    assert np.all(np.isfinite(est.coef_))
    mu = est.privacy_.client_mu
    assert mu[2] < 2.0 - 1e-9  # it released less than the others: its later messages never happened
    np.testing.assert_allclose(np.delete(mu, 2), 2.0, rtol=0, atol=1e-12)
    for r in est.privacy_.releases:
        if r.round >= 2:
            assert r.sensitivity[2] == 0 and r.sigma[2] == 0
            if r.weights is not None and r.kind == "aggregated":
                assert r.weights[2] == 0


def test_unknown_failure_policy_is_refused_before_any_release():
    with pytest.raises(ValueError, match="on_client_failure"):
        FedSGD(on_client_failure="retry").fit(_data())


def test_a_process_holding_client_i_alone_draws_what_client_i_draws_in_the_federation():
    """``first_client=i`` (a Flower node): noise, FedNewton's split and HiFedProx's minibatches are client i's streams."""
    from privfedstat.federation.power_prox import Armijo, PowerProx

    rng = np.random.default_rng(5)
    sizes = [7, 9, 8, 10]
    X = np.column_stack([np.ones(34), rng.standard_normal((34, 2))])
    y = (rng.random(34) < 0.5).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=sizes)
    fam = get_family("logistic")

    def noise(n, first=0):  # the children first.. of SeedSequence(11)
        return ClientNoise(np.random.SeedSequence(11), n, first)

    whole = InProcessClients(data, fam, noise(4))
    theta = np.array([0.1, -0.2, 0.3])
    kw = dict(clip=1.0, sensitivity=np.full(4, 0.5), mu=2.0, stage="t")
    h_whole = whole.split_halves(123)
    g_whole = whole.gradients(theta, **kw).values
    n_whole = h_whole[0].newton_steps(theta, clip=1.0, hessian_clip=5.0, hessian_floor=0.1, grad_clip=np.ones(4),
                                      sensitivity=np.full(4, 0.5), mu=2.0, stage="n").values
    hf = dict(prox=PowerProx(0.5, 1.0, 3.0), armijo=Armijo(1e-4, 0.5, 5), n_steps=np.full(4, 3),
              step_size=np.ones(4), batch_size=3, batch_seed=np.random.SeedSequence(77), update_clip=1.0,
              sensitivity=np.full(4, 2.0), mu=2.0, stage="h")
    u_whole = whole.hifedprox_round(theta, **hf).values
    for i in range(4):
        one_data = FederatedData.from_arrays([data.client(i)])
        one = InProcessClients(one_data, fam, noise(1, i), first_client=i)
        alone = InProcessClients(one_data, fam, noise(1, i))  # index 0: not client i
        h = one.split_halves(123)  # the same calls in the same order as the federation's
        np.testing.assert_array_equal(one.gradients(theta, **dict(kw, sensitivity=np.full(1, 0.5))).values[0], g_whole[i])
        n = h[0].newton_steps(theta, clip=1.0, hessian_clip=5.0, hessian_floor=0.1, grad_clip=np.ones(1),
                              sensitivity=np.full(1, 0.5), mu=2.0, stage="n").values[0]
        np.testing.assert_array_equal(n, n_whole[i])
        hf1 = dict(hf, n_steps=np.full(1, 3), step_size=np.ones(1), sensitivity=np.full(1, 2.0))
        np.testing.assert_array_equal(one.hifedprox_round(theta, **hf1).values[0], u_whole[i])
        if i > 0:  # the split and the minibatches are the client's own streams: index 0's differ
            alone.gradients(theta, **dict(kw, sensitivity=np.full(1, 0.5)))
            assert not np.array_equal(alone.split_halves(123)[0].newton_steps(
                theta, clip=1.0, hessian_clip=5.0, hessian_floor=0.1, grad_clip=np.ones(1), sensitivity=np.full(1, 0.5),
                mu=2.0, stage="n").values[0], n_whole[i])
            assert not np.array_equal(alone.hifedprox_round(theta, **hf1).values[0], u_whole[i])


def test_change_basis_maps_every_row_and_returns_to_the_columns():
    """After ``change_basis(P)`` a client's statistics at phi are those of the rows ``P^T x``: unclipped gradients
    ``P^T g(P phi)`` and Hessians ``P^T H P``; a second change replaces the first (it maps the original columns), and
    None gives back exactly the statistics on the columns held before."""
    data, fam = _data(), get_family("logistic")
    clients = InProcessClients(data, fam, ClientNoise(np.random.SeedSequence(0), 4))
    theta = np.array([0.2, -0.4, 0.1])
    g0, H0 = clients.exact(theta, clip=math.inf)
    P = np.array([[1.0, 0.0, 0.0], [0.3, 2.0, 0.0], [-0.5, 0.1, 0.7]])
    phi = np.linalg.solve(P, theta)
    for basis in (2.0 * P, P):  # the second change is of the original columns, not of the first change's
        clients.change_basis(basis)
    g, H = clients.exact(phi, clip=math.inf)
    np.testing.assert_allclose(g, g0 @ P, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(H, P.T @ H0 @ P, rtol=1e-12, atol=1e-14)
    clients.change_basis(None)
    g1, H1 = clients.exact(theta, clip=math.inf)
    np.testing.assert_array_equal(g1, g0)
    np.testing.assert_array_equal(H1, H0)
    with pytest.raises(ValueError, match="basis must be a finite"):
        clients.change_basis(np.eye(2))


@pytest.mark.parametrize("reference", [1, 2])
def test_change_basis_with_a_reference_class_is_the_relabelled_multinomial_model(reference):
    """With ``change_basis(P, reference=j)`` a multinomial client swaps the labels of classes 0 and j: its loss,
    unclipped gradients and Hessians at phi are those of the original model at ``theta = kron(P, M) phi``
    (``parameter_basis``, M = ``reference_map``): the same loss, ``B^T g`` and ``B^T H B``. A scalar family has no
    reference class."""
    from privfedstat.federation.protocol import parameter_basis, reference_map

    rng = np.random.default_rng(5)
    N = 120
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    y = rng.integers(0, 3, N).astype(float)
    fam = get_family("multinomial", n_classes=3)
    clients = InProcessClients(FederatedData.from_pooled(X, y, sizes=[50, 70]), fam,
                               ClientNoise(np.random.SeedSequence(0), 2))
    theta = rng.standard_normal(6)
    g0, H0 = clients.exact(theta, clip=math.inf)
    loss0 = clients.losses(theta, stage="t").values
    P = np.array([[1.0, 0.0, 0.0], [0.3, 2.0, 0.0], [-0.5, 0.1, 0.7]])
    B = parameter_basis(P, 6, reference)
    np.testing.assert_array_equal(B, np.kron(P, reference_map(2, reference)))
    np.testing.assert_allclose(reference_map(2, reference) @ reference_map(2, reference), np.eye(2))
    phi = np.linalg.solve(B, theta)
    clients.change_basis(P, reference=reference)
    g, H = clients.exact(phi, clip=math.inf)
    np.testing.assert_allclose(clients.losses(phi, stage="t").values, loss0, rtol=1e-12)
    np.testing.assert_allclose(g, g0 @ B, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(H, B.T @ H0 @ B, rtol=1e-10, atol=1e-13)
    clients.change_basis(None)
    np.testing.assert_array_equal(clients.exact(theta, clip=math.inf)[0], g0)
    with pytest.raises(ValueError, match="reference"):
        InProcessClients(_data(), get_family("logistic"), ClientNoise(np.random.SeedSequence(0), 4)).change_basis(
            np.eye(3), reference=1)
    with pytest.raises(ValueError, match="reference"):
        parameter_basis(np.eye(3), 3, 1)
