"""The server counts the release records of every verb it asks, even when every node agrees to tamper with them.

Each releasing verb of the table is driven by a fit that sends it; every node then rewrites its replies to
that verb: it omits its records, reports one fewer (a multi-step verb: fewer than its steps) or one more, or
noises for half the sensitivity (twice the mu) and reports that truthfully. Before the record count was
checked, an omitted record went unnoticed (FedSGD: 0 of 5 releases recorded, ledger mu 0 against the declared
2; FedAvg 3 of 15, mu 0.894). The end-of-fit check compares the ledger with the server's own requests.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from _fakegrid import FakeGrid
from conftest import simulate

from privfedstat import DPFedAvg, FedAvg, FedIRLS, FedNewton, FedSGD, HiFedProx
from privfedstat.algorithms.registry import get_method
from privfedstat.data.federated import FederatedData
from privfedstat.federation import verbs
from privfedstat.flower.client import ClientNode, demo_dataset
from privfedstat.flower.proxy import fit_on_grid
from privfedstat.flower.records import Spending
from privfedstat.flower.secagg import SECURE_VERBS
from privfedstat.flower.wire import ClientReply, MalformedReplyError, decode_request, encode_request, expected_shape
from privfedstat.privacy.ledger import PrivacyLedger, Release

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def logistic():
    return demo_dataset("synthetic-logistic", 3)


def poisson():
    return simulate("poisson", [150] * 3, [0.5, 0.3, -0.2], seed=1)


def method(name, **params):
    spec = get_method(name)
    return lambda: spec.cls(**{**spec.test_params, **spec.fixed_clip_params(2.0), "mu": 2.0, "random_state": 5, **params})


#: every releasing verb of the table, and a fit (estimator, data) that sends it
FITS = {
    "gradients": (lambda: FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5), logistic),
    "count_at_most": (lambda: FedSGD(mu=2.0, n_iter=3, inference=None, random_state=5), logistic),
    "count_clipped": (lambda: FedSGD(mu=2.0, n_iter=3, clip=1.0, random_state=5), logistic),
    "clipped_excess": (lambda: FedSGD(mu=2.0, n_iter=3, clip=1.0, random_state=5), logistic),
    "hessians": (lambda: FedIRLS(mu=2.0, n_rounds=2, clip=2.0, hessian_clip=2.0, random_state=5), logistic),
    "score_outer": (lambda: FedSGD(mu=2.0, n_iter=3, clip=1.0, inference="sandwich", random_state=5), logistic),
    "design_moments": (lambda: FedSGD(mu=2.0, n_iter=3, clip=1.0, inference="bootstrap", random_state=5), logistic),
    "column_count": (lambda: FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, scaling="private", random_state=5),
                     logistic),
    "pearson_sum": (lambda: FedIRLS(family="poisson", mu=2.0, random_state=5), poisson),
    "local_descent": (lambda: FedAvg(mu=2.0, n_rounds=2, n_local_steps=3, clip=2.0, inference=None, random_state=5),
                      logistic),
    "clipped_update": (lambda: DPFedAvg(mu=2.0, n_rounds=2, n_local_steps=2, random_state=5), logistic),
    "newton_steps": (lambda: FedNewton(mu=2.0, n_local_steps=2, clip=2.0, hessian_clip=2.0, inference=None,
                                       random_state=5), logistic),
    "scaffold_round": (method("scaffold", inference=None), logistic),
    "composite_round": (method("fednmap"), logistic),
    "normec_round": (method("fednormec"), logistic),
    "hifedprox_round": (lambda: HiFedProx(mu=2.0, n_rounds=2, n_local_steps=2, batch_size=16, random_state=5),
                        logistic),
    "losses": (lambda: FedIRLS(mu=math.inf, n_rounds=2, random_state=5), logistic),
}
#: verbs that run several mechanisms per reply (one per noisy local step)
STEPS = {"local_descent", "scaffold_round", "composite_round"}


def tampering(node: ClientNode, verb: str, how: str):
    """``node`` answering ``verb`` with its records omitted, one fewer or one more, or noised for twice the mu."""

    def answer(content):
        name, session, target, kwargs = decode_request(content)
        if name == verb and how == "less noise" and kwargs.get("mu") is not None:
            kwargs["mu"] = 2 * kwargs["mu"]  # half the noise, reported truthfully (sigma = sensitivity / mu)
            content = encode_request(name, session, target, kwargs)
        reply = node.handle(content)
        meta = reply["message"]
        if name != verb or how == "less noise":
            return reply
        n = int(meta["meta/n_releases"])
        if how == "more" and n:
            for field in ("stage", "kind", "unit", "sensitivity", "sigma"):
                meta[f"meta/r{n}.{field}"] = meta[f"meta/r{n - 1}.{field}"]
        meta["meta/n_releases"] = {"omit": 0, "fewer": max(n - 1, 0), "more": n + 1}[how]
        return reply

    return answer


def all_tampering(data: FederatedData, verb: str, how: str) -> FakeGrid:
    return FakeGrid({1000 + i: tampering(ClientNode(FederatedData.from_arrays([data.client(i)]), i, 5), verb, how)
                     for i in range(data.n_clients)})


def test_every_releasing_verb_of_the_table_is_driven_here():
    pytest.importorskip("torch")
    import privfedstat.deep  # noqa: F401  (registers the networks' verbs)

    releasing = {v for v in verbs.names() if verbs.get(v).release is not None}
    # the secure verbs travel through SecAgg+ only (a node refuses them in the clear) and their records are the
    # server's own, built from the public request (tests/flower/test_secagg.py)
    assert releasing - set(FITS) - SECURE_VERBS == {"head_newton_steps"}
    with pytest.raises(ValueError, match="does not carry it"):  # no reply shape: the wire refuses it outright
        expected_shape("head_newton_steps", 10, 3, {"mu": 1.0})


@pytest.mark.parametrize("how", ["omit", "fewer", "more", "less noise"])
@pytest.mark.parametrize("verb", sorted(FITS))
def test_every_node_tampering_with_a_verbs_records_is_refused(verb, how):
    make, data = FITS[verb]
    if how == "less noise" and verb == "losses":
        pytest.skip("losses are released without noise (mu = inf fits only)")
    if how == "fewer" and verb not in STEPS:
        how = "omit"  # one mechanism: one fewer is none
    match = "did not ask for" if how == "less noise" else rf"release record\(s\) for '{verb}'; its request runs"
    with pytest.raises(MalformedReplyError, match=match):
        fit_on_grid(make(), all_tampering(data(), verb, how))


def test_honest_nodes_pass_and_their_ledger_carries_the_declared_mu():
    for verb in ("local_descent", "newton_steps", "pearson_sum"):
        make, data = FITS[verb]
        ref = make().fit(data())
        est = fit_on_grid(make(), all_tampering(data(), "none", "omit"))  # a verb nobody asks: honest
        np.testing.assert_array_equal(est.coef_, ref.coef_)
        np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-12)


def test_a_node_sitting_out_a_request_that_asked_it_is_refused():
    data = logistic()
    nodes = {1000 + i: ClientNode(FederatedData.from_arrays([data.client(i)]), i, 5) for i in range(3)}
    honest = nodes[1001]

    def silent(content):
        name, session, target, kwargs = decode_request(content)
        if name == "gradients":
            kwargs["active"] = np.array([False])
            content = encode_request(name, session, target, kwargs)
        return honest.handle(content)

    nodes[1001] = silent
    with pytest.raises(MalformedReplyError, match="client 1 sat out a request for 'gradients'"):
        fit_on_grid(FedSGD(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5), FakeGrid(nodes))


def test_the_end_of_fit_check_refuses_a_ledger_below_the_requests_or_the_declared_mu():
    spending = Spending(2)
    ok = ClientReply("ok", np.zeros(1), ())
    request = {"sensitivity": 0.5, "mu": 1.2, "stage": "s", "n_steps": 3}
    spending.add({0: ok, 1: ok}, [request, request], "local_descent")  # 3 mechanisms of mu 1.2 each
    ledger = PrivacyLedger(2)
    for _ in range(3):
        ledger.record(Release("s", 0, "local", np.array([0.5, 0.5]), np.array([0.5, 0.5]) / 1.2))
    spending.check(ledger, 1.2 * math.sqrt(3))
    with pytest.raises(MalformedReplyError, match="not the declared"):
        spending.check(ledger, 2.5)
    short = PrivacyLedger(2)
    short.record(Release("s", 0, "local", np.array([0.5, 0.5]), np.array([0.5, 0.5]) / 1.2))
    with pytest.raises(MalformedReplyError, match="client 0's ledger shows mu = 1.2, but the server's requests"):
        spending.check(short, 1.2 * math.sqrt(3))


def test_nodes_dropping_the_leak_of_a_raw_reply_are_refused():
    """``clip="paper"`` asks each node for a raw quantile of its norms (``norm_quantiles``: no noise); the reply must
    say so, or the ledger would call the fit private. Every node dropping that leak is refused."""
    data = logistic()
    honest = {1000 + i: ClientNode(FederatedData.from_arrays([data.client(i)]), i, 5) for i in range(3)}

    def mute(node):
        def answer(content):
            reply = node.handle(content)
            if decode_request(content)[0] == "norm_quantiles":
                del reply["message"]["meta/leak"]
            return reply
        return answer

    est = fit_on_grid(FedSGD(mu=2.0, n_iter=2, clip="paper", inference=None, random_state=5), FakeGrid(honest))
    assert not est.privacy_.is_private and est.privacy_.leaks
    grid = FakeGrid({k: mute(ClientNode(FederatedData.from_arrays([data.client(i)]), i, 5))
                     for i, k in enumerate(honest)})
    with pytest.raises(MalformedReplyError, match="not privatized, without reporting the leak"):
        fit_on_grid(FedSGD(mu=2.0, n_iter=2, clip="paper", inference=None, random_state=5), grid)
