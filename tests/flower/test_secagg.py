"""aggregation="secure" on Flower: the secure verbs go through Flower's SecAgg+ (workflow and client mod), no processes.

:class:`_secagg_grid.SecAggGrid` routes the ServerApp's messages to per-node ClientApps (the ``train`` handler of
:mod:`privfedstat.flower.app`, wrapped in ``secaggplus_mod``, each with its own context) and keeps
what the server receives. tests/flower/test_secagg_deployment.py runs the same over SuperLink and SuperNode
processes, with a node killed mid-fit.
"""

from __future__ import annotations

import numpy as np
import pytest

flwr = pytest.importorskip("flwr")

from _secagg_grid import SecAggGrid  # noqa: E402

from privfedstat.algorithms.fedsgd import FedSGD  # noqa: E402
from privfedstat.data.federated import FederatedData  # noqa: E402
from privfedstat.federation import FailingData  # noqa: E402
from privfedstat.federation import secure as secure_mod  # noqa: E402
from privfedstat.federation.secure import SecureAggregationRefused  # noqa: E402
from privfedstat.flower import fit_on_grid  # noqa: E402
from privfedstat.flower.client import ClientNode, demo_dataset  # noqa: E402
from privfedstat.flower.secagg import flower_ranges  # noqa: E402
from privfedstat.privacy.secure_noise import skellam_spec  # noqa: E402


@pytest.fixture(autouse=True)
def _server_identity(monkeypatch):
    """A ServerApp's process knows its run and node ids (Flower sets them); here the test process is the server."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value, raising=False)


def _nodes(data: FederatedData, seed: int = 5) -> dict:
    return {1000 + 17 * i: ClientNode(FederatedData.from_arrays([data.client(i)]), i, seed)
            for i in range(data.n_clients)}


PARAMS = dict(mu=1.0, clip=1.0, n_iter=4, step_size=0.5, aggregation="secure", random_state=5, inference=None,
              scaling=None)


def test_a_secure_fedsgd_through_secaggplus_equals_the_in_process_fit_and_the_server_holds_only_masked_vectors(
        monkeypatch):
    data = demo_dataset("synthetic-logistic", 4)
    residues = []  # every site's residue vector, as the nodes compute it (the tap sees each secure release)
    inner = secure_mod.privatize_integer

    def tap(*args, **kwargs):
        out = inner(*args, **kwargs)
        residues.append((out[0][0].copy(), args[2]))  # the residue and the round's SkellamSpec
        return out

    monkeypatch.setattr(secure_mod, "privatize_integer", tap)
    grid = SecAggGrid(_nodes(data))
    est = fit_on_grid(FedSGD(**PARAMS), grid)
    monkeypatch.undo()
    ref = FedSGD(**PARAMS).fit(data)
    # the integer arithmetic is exact through SecAgg+: the same coefficients and ledger as in process
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    assert len(est.privacy_.releases) == len(ref.privacy_.releases)
    for a, b in zip(est.privacy_.releases, ref.privacy_.releases):
        assert (a.stage, a.kind, a.integer) == (b.stage, b.kind, b.integer)
        np.testing.assert_allclose(a.sensitivity, b.sensitivity, rtol=0, atol=1e-15)
        np.testing.assert_allclose(a.sigma, b.sigma, rtol=0, atol=1e-15)
    np.testing.assert_allclose(est.privacy_.epsilon(1e-5), ref.privacy_.epsilon(1e-5), rtol=1e-12)
    assert est.communication_.rounds == ref.communication_.rounds
    # what the server received from each site in each round: a masked vector, never the site's residue
    rounds = PARAMS["n_iter"]
    assert len(grid.masked) == 4 * rounds and len(residues) == 4 * rounds
    for k, (_, vec) in enumerate(grid.masked):
        weight, masked = vec[0], vec[1]
        own, spec = residues[k]
        clip, target, modulus = flower_ranges(spec, 4)
        assert not np.array_equal(masked, own) and not np.array_equal(masked, own - clip)
        assert not np.any(np.isin(masked, [own]).all()) and weight[0] != target  # weight masked too
        # masks are uniform modulo 2^bits, the residues' own modulus: masked, an entry equals the residue with
        # probability 2^-bits
        assert masked.min() >= 0 and masked.max() < modulus and np.mean(masked == own) < 0.5


def test_secaggplus_unmasks_only_the_modular_sum_of_the_residues(monkeypatch):
    """What the server unmasks is ``sum_i r_i mod 2^bits``, not the integer sum of the residues, whose carries would
    count the sites whose message (with only their share of the noise) is negative: SecAgg+'s modulus is 2^bits."""
    from flwr.server.workflow.secure_aggregation import secaggplus_workflow as workflow

    data = demo_dataset("synthetic-logistic", 4)
    residues, unmasked = [], []
    inner_privatize, inner_extract = secure_mod.privatize_integer, workflow.factor_extract

    def tap(*args, **kwargs):
        out = inner_privatize(*args, **kwargs)
        residues.append((out[0].copy(), args[2]))
        return out

    def extract(parameters):
        unmasked.append([np.array(a, copy=True) for a in parameters])
        return inner_extract(parameters)

    monkeypatch.setattr(secure_mod, "privatize_integer", tap)
    monkeypatch.setattr(workflow, "factor_extract", extract)
    fit_on_grid(FedSGD(**dict(PARAMS, n_iter=2)), SecAggGrid(_nodes(data)))
    assert len(unmasked) == 2 and len(residues) == 4 * 2  # a residue vector per site and round
    carried = 0
    for k, (weight, total) in enumerate(unmasked):
        spec = residues[4 * k][1]
        _, target, modulus = flower_ranges(spec, 4)
        plain = sum(own.astype(np.int64).sum(axis=0) for own, _ in residues[4 * k:4 * k + 4])
        carried += int((plain >= modulus).sum())
        np.testing.assert_array_equal(total, plain % modulus)
        assert weight[0] == (4 * target) % modulus
    assert carried > 0  # the sums had carries to hide


def test_a_site_dropping_mid_fit_is_left_out_of_the_secure_sums_and_its_survivors_are_accounted():
    data = demo_dataset("synthetic-logistic", 5)
    params = dict(PARAMS, n_iter=5, on_client_failure="skip", min_surviving=4)
    nodes = _nodes(data)
    dying = list(nodes)[2]
    grid = SecAggGrid(nodes, drop={dying: 3})  # site 2 sends two masked vectors, then vanishes in round 3
    est = fit_on_grid(FedSGD(**params), grid)
    gradient = [r for r in est.privacy_.releases if r.stage == "gradient"]
    assert len(gradient) == 5
    for k, rec in enumerate(gradient):
        survivors = 5 if k < 2 else 4
        assert rec.integer.shares == survivors and np.count_nonzero(rec.sigma) == survivors
        assert (rec.sigma[2] > 0) == (k < 2)
    assert est.communication_.senders == (5, 5, 4, 4, 4)
    ref = FedSGD(**params).fit(FailingData(data, {2: 2}))  # in process: site 2 fails at its third request
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.privacy_.epsilon(1e-5), ref.privacy_.epsilon(1e-5), rtol=1e-12)
    # with 3 survivors of 5 and min_surviving = 4 SecAgg+ unmasks nothing and the fit refuses the round
    grid = SecAggGrid(_nodes(data), drop={list(nodes)[1]: 2, list(nodes)[3]: 2})
    with pytest.raises(SecureAggregationRefused, match="min_surviving"):
        fit_on_grid(FedSGD(**params), grid)


@pytest.mark.filterwarnings("ignore")
def test_a_secure_fedirls_on_secaggplus_equals_the_in_process_fit():
    """FedIRLS, glm()'s estimator: gradients and Hessians summed through SecAgg+."""
    data = demo_dataset("synthetic-logistic", 3)
    from privfedstat.algorithms.fedirls import FedIRLS

    params = dict(mu=2.0, clip=1.0, hessian_clip=1.0, n_rounds=3, aggregation="secure", random_state=0,
                  inference=None, scaling=None)
    est = fit_on_grid(FedIRLS(**params), SecAggGrid(_nodes(data, seed=0)))
    ref = FedIRLS(**params).fit(data)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)


@pytest.mark.filterwarnings("ignore")
def test_a_secure_fit_s_counts_go_through_secaggplus_and_equal_the_in_process_fit():
    """The private scaling's and the bound searches' counts of a secure fit are secure sums through SecAgg+ too: the
    server receives masked vectors only, and the fit (bounds, centres, coefficients, ledger) is the in-process one."""
    from privfedstat.algorithms.fedirls import FedIRLS

    data = demo_dataset("synthetic-logistic", 3)
    params = dict(mu=2.0, aggregation="secure", random_state=0, scaling="private")  # and the inference's count
    grid = SecAggGrid(_nodes(data, seed=0))
    est = fit_on_grid(FedIRLS(**params), grid)
    ref = FedIRLS(**params).fit(data)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    assert (est.clip_, est.scaler_.center.tolist(), est.scaler_.scale.tolist()) == (
        ref.clip_, ref.scaler_.center.tolist(), ref.scaler_.scale.tolist())
    stages = ("scaling", "clip", "irls-clip")  # the scaling's, the first search's and the refine search's counts
    counts = [r for r in est.privacy_.releases if r.stage.startswith(stages)]
    assert len(counts) == len([r for r in ref.privacy_.releases if r.stage.startswith(stages)]) > 40
    assert any(r.stage.startswith("irls-clip") for r in counts)
    np.testing.assert_allclose(est.bse_, ref.bse_, rtol=1e-12)
    assert len(est.privacy_.releases) == len(ref.privacy_.releases)
    for a, b in zip(est.privacy_.releases, ref.privacy_.releases):
        assert (a.stage, a.integer) == (b.stage, b.integer)
        np.testing.assert_allclose(a.sigma, b.sigma, rtol=0, atol=1e-15)
    secure = [r for r in est.privacy_.releases if r.integer is not None]
    assert any(r.stage == "inference-clip-count" for r in secure)
    # every secure request, counts included, reached the server masked: one vector per site per request
    assert len(grid.masked) == 3 * len(secure)


def test_secaggplus_ranges_refuse_a_modulus_it_cannot_carry():
    spec = skellam_spec(1e-3, 0.2, 7, 0.3, 10, 10)
    assert flower_ranges(spec, 10) == ((2.0**spec.bits - 1) / 2, 2**spec.bits - 1, 2**spec.bits)
    with pytest.raises(ValueError, match="30 bits"):
        flower_ranges(skellam_spec(1e-9, 10.0, 7, 0.3, 10, 10), 10)


def test_a_node_refuses_a_secure_verb_asked_over_the_plain_message_path(monkeypatch):
    """A server that asks for a secure verb outside SecAgg+ would get the site's residue unmasked: the node refuses."""
    from flwr.app import Context, Message, RecordDict

    from privfedstat.flower import app
    from privfedstat.flower.wire import decode_reply, encode_request

    data = demo_dataset("synthetic-logistic", 2)
    node = ClientNode(FederatedData.from_arrays([data.client(0)]), 0, 5)
    monkeypatch.setitem(app._NODES, 7, node)
    spec = skellam_spec(1.0, 1.0, 3, 1.0, 2, 2)
    request = encode_request("secure_gradients", "s", 0, {"theta": np.zeros(3), "clip": 1.0, "weights": 0.5,
                                                         "sensitivity": 1.0, "spec": spec, "stage": "gradient"})
    msg = Message(request, dst_node_id=1, message_type="query")
    msg.metadata.__dict__["_message_id"] = "q1"
    reply = app.client_app(message=msg, context=Context(7, 1, {}, RecordDict(), {}))
    answer = decode_reply(reply.content, "secure_gradients", (3,))
    assert answer.status == "error" and answer.error[0] == "SecureVerbInTheClear" and answer.values is None


@pytest.mark.filterwarnings("ignore")
def test_blocked_hessians_on_secaggplus_equal_the_in_process_fit(monkeypatch):
    """A SecAgg+ word (20 bits here) too small for the sum of a site's rows at the bracket's lattice: each site sends its
    Hessian rows in blocks (privfedstat.privacy.secure_outer), SecAgg+ carries the longer vector, the fit and its ledger
    equal the in-process fit's."""
    from privfedstat.algorithms.fedirls import FedIRLS
    from privfedstat.privacy import secure_outer

    monkeypatch.setattr(secure_outer, "WORD_BITS", 20)
    data = demo_dataset("synthetic-logistic", 3)
    params = dict(mu=2.0, clip=1.0, hessian_clip=1.0, n_rounds=3, aggregation="secure", random_state=0,
                  inference=None, scaling=None)
    est = fit_on_grid(FedIRLS(**params), SecAggGrid(_nodes(data, seed=0)))
    ref = FedIRLS(**params).fit(data)
    assert any(r.integer is not None and r.integer.blocks > 1 for r in ref.privacy_.releases)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    assert [r.integer for r in est.privacy_.releases] == [r.integer for r in ref.privacy_.releases]
    np.testing.assert_allclose(est.privacy_.epsilon(1e-5), ref.privacy_.epsilon(1e-5), rtol=1e-12)
