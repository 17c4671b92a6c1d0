"""The verb table: one declaration per verb, registered by the module that owns it, answered by the clients."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import privfedstat.algorithms  # noqa: F401  (registers the algorithms' verbs)
from privfedstat import get_family
from privfedstat.data.federated import FederatedData
from privfedstat.federation import verbs
from privfedstat.federation.clients import InProcessClients
from privfedstat.privacy import ClientNoise

#: the verbs one algorithm alone sends, and the module that declares each (next to its server loop)
OWN = {"scaffold_round": "scaffold", "composite_round": "fednmap", "normec_round": "fednormec_client",
       "hifedprox_round": "hifedprox", "newton_steps": "fednewton"}


def test_each_algorithms_verb_is_declared_and_implemented_next_to_its_server_loop():
    for name, module in OWN.items():
        answer = verbs.implementation(name, "in_process")
        assert answer is not None and answer.__module__ == f"privfedstat.algorithms.{module}", name
        assert not hasattr(InProcessClients, name), name  # no per-algorithm method on the clients class
    secure = {name for name in verbs.names() if name.startswith("secure_")}  # the secure sums: federation/secure.py
    assert secure == {"secure_gradients", "secure_hessians", "secure_score_outer", "secure_design_moments",
                      "secure_clipped_excess", "secure_count_at_most", "secure_column_count", "secure_count_clipped",
                      "secure_pearson_sum"}
    assert all(verbs.implementation(name, "in_process").__module__ == "privfedstat.federation.secure" for name in secure)
    shared = set(verbs.names()) - set(OWN) - {"head_newton_steps"} - secure
    assert all(hasattr(InProcessClients, name) for name in shared)


def test_the_in_process_clients_answer_a_registered_verb_with_its_implementation(monkeypatch):
    def echo(clients, theta, *, stage):
        return clients._release(lambda o, t: np.tile(t, (o.n_clients, 1)), np.inf, np.inf, stage, theta=theta)

    entry = verbs.Verb("echo", shape=verbs.parameters, sensitivity=None)
    monkeypatch.setitem(verbs._TABLE, entry.name, entry)
    monkeypatch.setitem(verbs._IMPLEMENTATIONS, ("in_process", entry.name), echo)
    data = FederatedData.from_pooled(np.ones((6, 2)), np.zeros(6), sizes=[3, 3])
    clients = InProcessClients(data, get_family("logistic"), ClientNoise(np.random.SeedSequence(0), 2))
    reply = clients.echo(np.array([1.0, 2.0]), stage="echo")
    np.testing.assert_array_equal(reply.values, [[1.0, 2.0], [1.0, 2.0]])
    assert reply.releases[0].stage == "echo"


def test_a_declaration_is_checked_and_a_name_is_taken_once():
    @dataclass
    class Loose:
        a: float

    with pytest.raises(ValueError, match="answer must be one of"):
        verbs.Verb("v", answer="stream")
    with pytest.raises(ValueError, match="release"):
        verbs.Verb("v", release=("aggregated", "row"))
    with pytest.raises(TypeError, match="frozen dataclass"):
        verbs.Verb("v", records=(("loose", Loose),))
    same = verbs.get("gradients")
    assert verbs.register(verbs.Verb("gradients", shape=verbs.parameters, per_client=same.per_client)) == same
    with pytest.raises(ValueError, match="already registered"):
        verbs.register(verbs.Verb("gradients", shape=verbs.one_value))
    with pytest.raises(verbs.UnknownVerbError, match="unknown verb 'no_such_verb'"):
        verbs.implement("no_such_verb", "in_process")
    with pytest.raises(ValueError, match="backend"):
        verbs.implement("gradients", "gpu")
