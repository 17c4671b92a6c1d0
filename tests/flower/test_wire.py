"""The Flower backend without processes: Message encoding, the server's checks, and the proxy on an in-memory Grid.

``FakeGrid`` hands each request straight to a ClientNode, so these tests check the proxy and the
client side (seeding, per-client arguments, silent clients, assembling replies and the ledger)
exactly, in milliseconds; tests/flower/test_deployment.py runs the same over real processes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from _fakegrid import FakeGrid, npy_bytes
from conftest import simulate

from privfedstat import ClientFailureError, FedIRLS, FedSGD
from privfedstat.algorithms.registry import methods
from privfedstat.data.federated import FederatedData
from privfedstat.families import get_family
from privfedstat.federation import verbs
from privfedstat.federation.power_prox import Armijo, PowerProx
from privfedstat.fitting.scaling import Scaler
from privfedstat.flower.client import ClientNode, demo_dataset, load_node
from privfedstat.flower.proxy import fit_on_grid
from privfedstat.flower.wire import (
    MalformedReplyError,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    expected_shape,
    per_client_args,
)
from privfedstat.penalty import ElasticNet
from privfedstat.privacy import ClientNoise
from privfedstat.privacy.ledger import Release

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

def _nodes(data: FederatedData, seed: int | None = 5, **wrap) -> dict:
    return {1000 + 17 * i: wrap.get(i, ClientNode(FederatedData.from_arrays([data.client(i)]), i, seed))
            for i in range(data.n_clients)}


def test_a_request_round_trips_every_argument_type():
    ss = np.random.SeedSequence(2**100 + 7, spawn_key=(1, 2))
    kwargs = {"theta": np.array([1.0, -2.0]), "clip": 1.5, "n_steps": 3, "stage": "gradient", "incremental": True,
              "active": None, "seed": ss, "prox_steps": [0.1, 0.2],
              "scaler": Scaler(np.array([0.0, 1.0]), np.array([1.0, 2.0]), 0, 612.5, 37.25),
              "penalty": ElasticNet(0.1, 0.2, np.array([False, True])), "prox": PowerProx(0.5, 2, 3.5),
              "armijo": Armijo(0.001, 0.25, 7)}
    verb, session, target, back = decode_request(encode_request("gradients", "s1", 2, kwargs))
    assert (verb, session, target) == ("gradients", "s1", 2)
    np.testing.assert_array_equal(back["theta"], kwargs["theta"])
    assert back["clip"] == 1.5 and back["n_steps"] == 3 and back["stage"] == "gradient" and back["incremental"] is True
    assert back["active"] is None and back["prox_steps"] == [0.1, 0.2]
    assert back["seed"].entropy == ss.entropy and tuple(back["seed"].spawn_key) == (1, 2)
    np.testing.assert_array_equal(back["scaler"].scale, [1.0, 2.0])
    assert back["scaler"].intercept == 0 and back["penalty"].l2 == 0.2
    assert (back["scaler"].response_center, back["scaler"].response_scale) == (612.5, 37.25)
    assert back["prox"] == kwargs["prox"] and back["armijo"] == kwargs["armijo"]
    assert type(back["armijo"].max_backtracks) is int and type(back["prox"].radius) is int
    with pytest.raises(TypeError, match="cannot travel"):
        encode_request("gradients", "s", 0, {"prox": object()})


def test_a_reply_round_trips_and_a_malformed_or_oversized_one_is_rejected():
    rec = Release("gradient", -1, "aggregated", np.array([0.5]), np.array([0.25]))
    good = encode_reply("ok", np.arange(3.0), [rec])
    r = decode_reply(good, "gradients", (3,))
    np.testing.assert_array_equal(r.values, np.arange(3.0))
    assert r.releases[0].sigma[0] == 0.25 and r.releases[0].kind == "aggregated"
    with pytest.raises(MalformedReplyError, match="shape"):
        decode_reply(encode_reply("ok", np.arange(4.0), [rec]), "gradients", (3,))
    with pytest.raises(MalformedReplyError, match="float64"):
        bad = encode_reply("ok", None, [rec])
        bad["message"]["arrays/values"] = npy_bytes(np.arange(3, dtype=np.int64))
        decode_reply(bad, "gradients", (3,))
    for data, match in [(b"not an array", "not a valid array"), (npy_bytes(np.array([None, 1.0])), "refused"),
                        (npy_bytes(np.arange(3.0))[:-8], "bytes for")]:
        bad = encode_reply("ok", None, [rec])
        bad["message"]["arrays/values"] = data
        with pytest.raises(MalformedReplyError, match=match):
            decode_reply(bad, "gradients", (3,))
    with pytest.raises(MalformedReplyError, match="non-finite"):
        decode_reply(encode_reply("ok", np.array([0.0, np.nan, 1.0]), [rec]), "gradients", (3,))
    with pytest.raises(MalformedReplyError, match="over the limit"):
        decode_reply(encode_reply("ok", np.zeros(10_000), [rec]), "gradients", (10_000,), max_bytes=50_000)
    negative = Release("gradient", -1, "aggregated", np.array([0.5]), np.array([-1.0]))
    with pytest.raises(MalformedReplyError, match="sigma"):
        decode_reply(encode_reply("ok", np.arange(3.0), [negative]), "gradients", (3,))
    with pytest.raises(MalformedReplyError, match="no values"):
        decode_reply(encode_reply("ok", None, [rec]), "gradients", (3,))
    assert expected_shape("hessians", 3, 3) == (6,) and expected_shape("scaffold_round", 3, 3) == (6,)


@pytest.mark.parametrize("spec", methods(private=True), ids=lambda s: s.name)
@pytest.mark.parametrize("mu, clip", [(2.0, "auto"), (2.0, "fixed"), (math.inf, "fixed")])
def test_the_proxy_reproduces_the_in_process_fit_exactly(spec, mu, clip):
    data = demo_dataset("synthetic-logistic", 4)
    params = dict(spec.test_params, mu=mu, random_state=5)
    if clip == "fixed":
        params.update(spec.fixed_clip_params(2.0))
    ref = spec.cls(**params).fit(data)
    est = fit_on_grid(spec.cls(**params), FakeGrid(_nodes(data)))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    assert est.communication_ == ref.communication_
    assert len(est.privacy_.releases) == len(ref.privacy_.releases)
    for a, b in zip(est.privacy_.releases, ref.privacy_.releases):
        assert (a.stage, a.round, a.kind, a.unit, a.sampling_rate) == (b.stage, b.round, b.kind, b.unit, b.sampling_rate)
        for f in ("sensitivity", "sigma", "weights"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None) == (y is None)
            if x is not None:
                np.testing.assert_allclose(x, y, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.privacy_.client_mu, ref.privacy_.client_mu, rtol=0, atol=1e-12)


def test_poisson_participation_and_a_skipped_failure_match_in_process():
    data = demo_dataset("synthetic-logistic", 6)
    params = dict(mu=2.0, n_iter=8, clip=1.0, participation=0.5, inference=None, random_state=3)
    ref = FedSGD(**params).fit(data)
    est = fit_on_grid(FedSGD(**params), FakeGrid(_nodes(data, 3)))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.privacy_.client_mu, ref.privacy_.client_mu, rtol=0, atol=1e-12)

    class Dies:  # a client whose process is gone from its third request on: it never answers
        def __init__(self, node):
            self.node, self.calls = node, 0

        def __call__(self, content):
            self.calls += 1
            return self.node.handle(content) if self.calls < 3 else None

    params = dict(mu=2.0, n_iter=6, clip=1.0, inference=None, random_state=3)
    nodes = _nodes(data, 3)
    key = sorted(nodes)[2]
    nodes[key] = Dies(nodes[key])
    with pytest.raises(ClientFailureError, match=r"client\(s\) \[2\]"):
        fit_on_grid(FedSGD(**params), FakeGrid(nodes), timeout=0.05)
    nodes[key] = Dies(_nodes(data, 3)[key])
    est = fit_on_grid(FedSGD(**params, on_client_failure="skip"), FakeGrid(nodes), timeout=0.05)
    assert np.all(np.isfinite(est.coef_)) and est.privacy_.client_mu[2] < 2.0 - 1e-9
    np.testing.assert_allclose(np.delete(est.privacy_.client_mu, 2), 2.0, rtol=0, atol=1e-12)


def test_hifedprox_with_per_client_steps_and_participation_matches_in_process():
    from privfedstat import HiFedProx

    data = demo_dataset("synthetic-logistic", 5)
    params = dict(mu=2.0, n_rounds=3, n_local_steps=np.array([1, 2, 3, 1, 2]), participation=0.6, batch_size=8,
                  step_size=np.array([0.5, 0.1, 0.5, 1.0, 0.2]), random_state=4)
    ref = HiFedProx(**params).fit(data)
    est = fit_on_grid(HiFedProx(**params), FakeGrid(_nodes(data, 4)))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.privacy_.client_mu, ref.privacy_.client_mu, rtol=0, atol=1e-12)


def test_a_rogue_client_is_refused_and_a_late_reply_is_not_counted_twice():
    data = demo_dataset("synthetic-logistic", 3)
    nodes = _nodes(data)
    key = sorted(nodes)[1]
    honest = nodes[key]

    def oversized(content):
        reply = honest.handle(content)
        if "arrays/values" in reply["message"]:
            reply["message"]["arrays/values"] = npy_bytes(np.zeros(5000))
        return reply

    nodes[key] = oversized
    with pytest.raises(MalformedReplyError, match="expected float64 of shape"):
        fit_on_grid(FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5), FakeGrid(nodes))

    def greedy(content):  # spends twice the mu it is asked for (half the noise) and reports it truthfully
        verb, session, target, kwargs = decode_request(content)
        if kwargs.get("mu") is not None:
            kwargs["mu"] = 2 * kwargs["mu"]
        return honest.handle(encode_request(verb, session, target, kwargs))

    nodes = _nodes(data)
    honest = nodes[key]
    nodes[key] = greedy
    with pytest.raises(MalformedReplyError, match="client 1 reports a release .* did not ask for"):
        fit_on_grid(FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5), FakeGrid(nodes))
    grid = FakeGrid(_nodes(data))
    est = FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5)
    replay = grid.pull_messages  # every pull also returns a stale reply to an old message id

    def with_stale(ids):
        out = replay(ids)
        if out:
            out.append(type(out[0])(content=out[0].content, metadata=type(out[0].metadata)(reply_to_message_id="m0"),
                                    has_error=lambda: False))
        return out

    grid.pull_messages = with_stale
    fit_on_grid(est, grid)
    ref = FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5).fit(data)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    assert len(est.privacy_.releases) == len(ref.privacy_.releases)


@pytest.mark.parametrize("verb_kw", ["sensitivity", "mu"])
def test_a_node_noising_for_less_than_the_requested_sensitivity_is_refused(verb_kw):
    """A node that noises for half the requested sensitivity (or twice the mu) and reports its own, consistent
    calibration (sigma = reported sensitivity / mu) is caught: the server checks sigma against its request."""
    data = demo_dataset("synthetic-logistic", 3)
    nodes = _nodes(data)
    key = sorted(nodes)[1]
    honest = nodes[key]

    def cheat(content):
        verb, session, target, kwargs = decode_request(content)
        if kwargs.get(verb_kw) is not None and kwargs.get("mu") is not None:
            kwargs[verb_kw] = kwargs[verb_kw] * (0.5 if verb_kw == "sensitivity" else 2.0)
        return honest.handle(encode_request(verb, session, target, kwargs))

    nodes[key] = cheat
    with pytest.raises(MalformedReplyError, match="client 1 reports a release .* did not ask for"):
        fit_on_grid(FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5), FakeGrid(nodes))


def test_a_poisson_fits_dispersion_crosses_the_wire_and_a_node_capping_for_less_is_refused():
    """``pearson_sum`` states its sensitivity as its cap ``bound``: the server checks the noise against it."""
    data = simulate("poisson", [150] * 4, [0.5, 0.3, -0.2], seed=1)
    params = dict(family="poisson", mu=2.0, random_state=5)
    ref = FedIRLS(**params).fit(data)
    est = fit_on_grid(FedIRLS(**params), FakeGrid(_nodes(data)))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.inference_.dispersion, ref.inference_.dispersion, rtol=0, atol=1e-12)
    nodes = _nodes(data)
    key = sorted(nodes)[1]
    honest = nodes[key]

    def cheat(content):
        verb, session, target, kwargs = decode_request(content)
        if verb == "pearson_sum":
            kwargs["bound"] = kwargs["bound"] / 2
        return honest.handle(encode_request(verb, session, target, kwargs))

    nodes[key] = cheat
    with pytest.raises(MalformedReplyError, match="client 1 reports a release for 'pearson_sum'"):
        fit_on_grid(FedIRLS(**params), FakeGrid(nodes))


def _one_release(verb: str) -> list[Release]:
    entry = verbs.get(verb)
    if entry.release is None:
        return []
    kind, unit = entry.release
    return [Release("stage", -1, kind, np.array([1.0]), np.array([0.5]), unit=unit)]


@pytest.mark.parametrize("mu", [1.0, math.inf])
def test_every_registered_verb_travels_with_the_shape_and_per_client_arguments_its_table_entry_declares(mu):
    """The wire knows no verb of its own: each registered verb's reply shape and per-client arguments are its table
    entry's, a reply of that shape round-trips and one of another shape is refused, and every per-client argument
    is an argument of the verb's in-process implementation."""
    import inspect

    from privfedstat.federation.clients import InProcessClients

    p, d = 6, 3
    for verb in verbs.names():
        entry = verbs.get(verb)
        assert per_client_args(verb) == entry.per_client
        answer = getattr(InProcessClients, verb, None) or verbs.implementation(verb, "in_process")
        if answer is not None:
            assert set(entry.per_client) <= set(inspect.signature(answer).parameters), verb
        if entry.shape is None:
            if entry.answer in ("reply", "exact"):  # values whose shape the public dimensions do not give
                with pytest.raises(ValueError, match="does not carry it"):
                    expected_shape(verb, p, d, {"mu": mu})
            else:
                assert expected_shape(verb, p, d, {"mu": mu}) is None
            continue
        shape = expected_shape(verb, p, d, {"mu": mu})
        assert shape == entry.shape(p, d, {"mu": mu})
        values = np.arange(float(np.prod(shape))).reshape(shape)
        back = decode_reply(encode_reply("ok", values, _one_release(verb)), verb, shape)
        np.testing.assert_array_equal(back.values, values)
        with pytest.raises(MalformedReplyError, match="shape"):
            decode_reply(encode_reply("ok", np.zeros(int(np.prod(shape)) + 1), _one_release(verb)), verb, shape)
    assert expected_shape("hifedprox_round", p, d, {"mu": math.inf}) == (p + 2,)
    assert expected_shape("design_moments", p, d) == (d * (d + 1) // 2,)


def test_an_unregistered_verb_is_refused_on_the_server_and_on_the_node():
    from privfedstat.federation.clients import InProcessClients

    for refuse in (lambda: expected_shape("no_such_verb", 3, 3), lambda: per_client_args("no_such_verb"),
                   lambda: encode_request("no_such_verb", "s", 0, {})):
        with pytest.raises(verbs.UnknownVerbError, match="unknown verb 'no_such_verb'.*registered when its module"):
            refuse()
    data = demo_dataset("synthetic-logistic", 2)
    clients = InProcessClients(data, get_family("logistic"), ClientNoise(np.random.SeedSequence(0), 2))
    with pytest.raises(AttributeError, match="no verb 'no_such_verb' is registered"):
        clients.no_such_verb(np.zeros(3))
    node = ClientNode(FederatedData.from_arrays([data.client(0)]), 0, 5)
    node.handle(encode_request("open", "s", 0, {"family": "logistic"}))
    request = encode_request("gradients", "s", 0, {})
    request["message"]["head/verb"] = "no_such_verb"  # a request the server's encoder would not make
    assert decode_reply(node.handle(request), "gradients", (3,)).error[0] == "ValueError"


def test_a_verb_registered_by_its_module_alone_crosses_the_wire(monkeypatch):
    """Adding an algorithm's client verb touches one file: a verb registered here (table entry and in-process
    implementation) is sent by the proxy, answered by the nodes and checked by the server with no other change."""
    from privfedstat.federation import clients as federation_clients
    from privfedstat.flower.proxy import FlowerClients

    def doubled_gradients(clients, theta, *, clip, sensitivity, mu, stage, active=None):
        return clients._release(lambda o, t: 2.0 * o.clipped_gradients(t, clip), sensitivity, mu, stage, active, theta)

    entry = verbs.Verb("doubled_gradients", shape=verbs.parameters, per_client=("sensitivity", "active"))
    monkeypatch.setitem(verbs._TABLE, entry.name, entry)
    monkeypatch.setitem(verbs._IMPLEMENTATIONS, ("in_process", entry.name), doubled_gradients)
    data = demo_dataset("synthetic-logistic", 3)
    family = get_family("logistic")
    local = federation_clients.InProcessClients(data, family, ClientNoise(np.random.SeedSequence(0), 3))
    remote = FlowerClients(FakeGrid(_nodes(data)), family)
    theta, sens = np.array([0.1, -0.2, 0.3]), np.full(3, 0.5)
    a = remote.doubled_gradients(theta, clip=1.0, sensitivity=sens, mu=math.inf, stage="doubled")
    b = local.doubled_gradients(theta, clip=1.0, sensitivity=sens, mu=math.inf, stage="doubled")
    np.testing.assert_array_equal(a.values, b.values)
    assert [r.kind for r in a.releases] == ["aggregated"] and a.releases[0].stage == "doubled"


def test_a_node_recording_its_release_as_another_kind_is_refused():
    """The server checks each record's kind and unit against the verb's table entry (a record-level aggregated
    release reported as "local" would be accounted differently)."""
    data = demo_dataset("synthetic-logistic", 3)
    nodes = _nodes(data)
    key = sorted(nodes)[1]
    honest = nodes[key]

    def relabel(content):
        reply = honest.handle(content)
        if "meta/r0.kind" in reply["message"]:
            reply["message"]["meta/r0.kind"] = "local"
        return reply

    nodes[key] = relabel
    with pytest.raises(MalformedReplyError, match="client 1 reports a release for 'gradients' of kind 'local'"):
        fit_on_grid(FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5), FakeGrid(nodes))


@pytest.mark.parametrize("name", ["DeepFedNMap", "DeepFedCanon"])
def test_a_network_algorithms_registered_verb_is_answered_by_the_nodes(name):
    """The torch implementation of an algorithm's verb is registered for its table entry, so a node's torch clients
    answer it (``composite_round``, ``scaffold_round``) and the fit equals the in-process one to the bit."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from privfedstat import deep
    from privfedstat.deep.models import DigitsCNN

    cls = getattr(deep, name)
    torch.manual_seed(0)
    params = dict(model=DigitsCNN(), mu=2.0, n_rounds=2, n_local_steps=2, step_size=0.3, clip=1.0, batch_size=32,
                  random_state=7)
    ref = cls(**params).fit(demo_dataset("digits-images", 3))
    configs = [{"dataset": "digits-images", "partition-id": i, "num-partitions": 3, "simulation-seed": 7,
                "model": "DigitsCNN"} for i in range(3)]
    est = fit_on_grid(cls(**params), FakeGrid({900 + i: load_node(c) for i, c in enumerate(configs)}))
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    assert est.communication_ == ref.communication_


@pytest.mark.slow
def test_a_network_hifedprox_on_nodes_draws_each_clients_own_minibatches():
    """A node's torch clients draw HiFedProx's minibatches from the stream of their federation index (the node's
    partition id), as in-process: the fits agree to float rounding (the in-process clients step together, vmap)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from privfedstat.deep import DeepHiFedProx
    from privfedstat.deep.models import DigitsCNN

    torch.manual_seed(0)
    params = dict(model=DigitsCNN(), mu=math.inf, n_rounds=1, batch_size=16, random_state=7)
    ref = DeepHiFedProx(**params).fit(demo_dataset("digits-images", 3))
    configs = [{"dataset": "digits-images", "partition-id": i, "num-partitions": 3, "simulation-seed": 7,
                "model": "DigitsCNN"} for i in range(3)]
    est = fit_on_grid(DeepHiFedProx(**params), FakeGrid({900 + i: load_node(c) for i, c in enumerate(configs)}))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-6)
