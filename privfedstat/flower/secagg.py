"""The secure verbs on Flower: each site's integer message summed by Flower's SecAgg+ protocol.

Under ``aggregation="secure"`` a site's message (``secure_gradients``, ``secure_hessians``) is its
weighted statistic quantized to the quantum (row by row into a ball for the row verbs,
:mod:`~privfedstat.privacy.secure_rounding`), plus its Skellam share, modulo ``2^bits``
(:func:`~privfedstat.federation.secure.privatize_integer`, seeded from the site's own noise
stream: the node runs the same verb on its own rows as the in-process sites do, so both produce the
same integers; a blocked Hessian-type release, :attr:`~privfedstat.privacy.secure_noise.SkellamSpec.blocks`, is one
vector of its ``g`` blocks, whose shape the verb table reads from the request's spec). On Flower that residue vector
never travels in the clear: the server runs one :class:`flwr.server.workflow.SecAggPlusWorkflow` round per secure
request (setup, key sharing, collection of masked vectors, unmasking; Flower's key agreement, Shamir shares and masks), driven by
a strategy shim in a :class:`~flwr.server.compat.LegacyContext`, and each node answers through
:func:`flwr.client.mod.secaggplus_mod` (the ClientApp's ``train`` handler, :func:`secure_train`).
The server learns the modular sum of the survivors' residues and which sites are in it, nothing else;
a node refuses a secure verb asked over the plain ``query`` path (:func:`in_the_clear`).

**Exactness and what the server unmasks.** SecAgg+ weights a vector by ``num_examples / max_weight``, clips it to
``[-c, c]``, maps it affinely to ``[0, T]`` and rounds stochastically before masking modulo ``modulus_range``; the
server unmasks the sum modulo ``modulus_range``, dequantizes it and divides by the total weight. With ``num_examples
= max_weight = 1``, ``T = 2^bits - 1``, ``c = T / 2`` and ``modulus_range = 2^bits``, a node that sends ``r_i - c``
for its residue ``r_i`` in ``[0, 2^bits)`` has it quantized to ``r_i`` itself (the map is exact, and the stochastic
rounding of an integer-valued array is deterministic, so Flower's unseeded ``np.random`` draws nothing that matters),
and SecAgg+'s own modular sum is the ``sum_i r_i mod 2^bits`` that :func:`~privfedstat.privacy.secure_noise.decode`
reads: the server never holds the integer sum of the residues, whose carries would count the sites whose message (with
only their share of the noise) is negative. :func:`flower_ranges` gives the ranges; :func:`residue_sum` undoes
Flower's dequantization (exact in float64 for ``bits <= 30``, Flower's int32 cast).

**Dropouts.** Every site holds a Shamir share of every other site's secrets (``num_shares`` = all
sites asked) and ``reconstruction_threshold = min_surviving``: a site that drops before sending its
masked vector is left out of the sum (its pairwise masks are reconstructed), and with fewer than
``min_surviving`` survivors (or fewer than two: SecAgg+'s own floor) SecAgg+ halts without
unmasking anything; the server then refuses the round
(:class:`~privfedstat.federation.secure.SecureAggregationRefused`), as in process. A site that does
not answer a stage within the fit's reply timeout has failed for the rest of the fit.

**What the ledger sees.** A site's share record (sensitivity and noise sd of its integer message)
follows from the public request (:func:`~privfedstat.federation.secure.share_release`), so the
server builds it; :func:`~privfedstat.federation.secure.secure_mean` then records the sum's release
for the survivors. The Reply handed to ``secure_mean`` holds the modular sum in the first
survivor's row and zeros in the other survivors' rows (residues whose modular sum is the same): the
server never holds a site's own residue.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from ..federation.clients import Reply
from ..federation.secure import share_release
from ..privacy.secure_noise import SkellamSpec
from ..privacy.secure_rounding import WORD_BITS
from .wire import decode_reply, decode_request, encode_request, expected_shape

__all__ = ["SECURE_VERBS", "SecureVerbInTheClear", "flower_ranges", "in_the_clear", "residue_sum", "secure_exchange",
           "secure_train", "request_bytes"]

#: the verbs whose messages travel through SecAgg+ (their sum is all the server learns)
SECURE_VERBS = frozenset({"secure_gradients", "secure_hessians", "secure_score_outer", "secure_design_moments",
                          "secure_clipped_excess", "secure_count_at_most", "secure_column_count",
                          "secure_count_clipped", "secure_pearson_sum"})
#: key of the serialized privfedstat request in the FitIns config of a SecAgg+ round
REQUEST_KEY = "privfedstat.request"
#: SecAgg+ rounds of this process (their messages' group ids)
_ROUNDS = itertools.count(1)


def flower_ranges(spec: SkellamSpec, n_sites: int) -> tuple[float, int, int]:
    """SecAgg+'s ``clipping_range`` ``c = (2^bits - 1) / 2``, ``quantization_range`` ``T = 2^bits - 1`` and
    ``modulus_range`` ``2^bits``, under which ``n_sites`` residues ``r_i - c`` sent by the nodes are summed by SecAgg+
    modulo ``2^bits`` exactly (see the module docstring); ValueError where they cannot."""
    bits = int(spec.bits)
    if bits > WORD_BITS or int(n_sites) >= 2**bits:
        raise ValueError(f"the secure sum needs a modulus of 2^{bits} for {n_sites} sites: SecAgg+ carries residues of at "
                         f"most {WORD_BITS} bits (Flower's int32 cast) and fewer sites than 2^bits; clip the messages "
                         f"more tightly or fit in process.")
    target = 2**bits - 1
    return target / 2.0, target, 2**bits


def residue_sum(mean: np.ndarray, n_sites: int, spec: SkellamSpec) -> np.ndarray:
    """The modular sum ``sum_i r_i mod 2^bits`` of ``n_sites`` residues from what SecAgg+'s workflow returns with
    :func:`flower_ranges`: ``(S - n c) T / q``, ``S`` its unmasked sum modulo ``2^bits`` and ``q = n T mod 2^bits``
    the summed weight factor."""
    clip, target, modulus = flower_ranges(spec, n_sites)
    weight = (n_sites * target) % modulus
    total = np.rint(np.asarray(mean, dtype=np.float64) * (weight / target) + n_sites * clip)
    return np.mod(total.astype(np.int64), modulus)


def request_bytes(verb: str, session: str, target: int, kwargs: dict) -> bytes:
    """A request (:func:`~privfedstat.flower.wire.encode_request`) as bytes, to ride in a SecAgg+ round's FitIns config."""
    from flwr.common.serde import recorddict_to_proto

    return recorddict_to_proto(encode_request(verb, session, target, kwargs)).SerializeToString()


def _request_from_bytes(data: bytes) -> RecordDict:
    from flwr.common.serde import recorddict_from_proto
    from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

    proto = ProtoRecordDict()
    proto.ParseFromString(data)
    return recorddict_from_proto(proto)


class SecureVerbInTheClear(PermissionError):
    """A secure verb asked over the plain Message path: the node would send its residue unmasked, so it refuses."""


def in_the_clear(content: RecordDict) -> bool:
    """Whether a plain request (a ``query`` Message's content) asks for a secure verb, which a node answers only
    inside a SecAgg+ round (:func:`secure_train`): over the plain path its residue, with only its share of the
    noise, would reach the server unmasked."""
    try:
        return str(content["message"]["head/verb"]) in SECURE_VERBS
    except (KeyError, TypeError):
        return False  # not a request: the node's own checks refuse it


def secure_train(node, msg: Message) -> Message:
    """A node's answer to a SecAgg+ round's fit stage (inside ``secaggplus_mod``): its residue vector as the FitRes.

    ``node`` (a :class:`~privfedstat.flower.client.ClientNode`) computes the request in the FitIns config as
    any request; its residues, weight ``num_examples = 1``, go to the mod, which quantizes and masks them. A
    node that cannot answer raises: SecAgg+ then counts it as dropped.
    """
    import flwr.compat.common.recorddict_compat as compat
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    request = _request_from_bytes(bytes(msg.content["fitins.config"][REQUEST_KEY]))
    verb, session, target, kwargs = decode_request(request)
    if verb not in SECURE_VERBS:
        raise ValueError(f"a SecAgg+ round carries the secure verbs {sorted(SECURE_VERBS)}, not {verb!r}.")
    handles = node._sessions.get(session)
    if handles is None:
        raise RuntimeError(f"a secure request for session {session!r}, which this node never opened.")
    shape = expected_shape(verb, handles[0].n_params, handles[0].n_features, kwargs)
    reply = decode_reply(node.handle(request), verb, shape)
    if reply.status != "ok":
        raise RuntimeError(f"the node's secure message ({verb}) was not produced: status {reply.status!r}"
                           f"{'' if reply.error is None else ' (' + reply.error[0] + ')'}.")
    clip = (2.0 ** int(kwargs["spec"].bits) - 1.0) / 2.0  # Flower's quantization maps r - c to r (flower_ranges)
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([reply.values - clip]), 1, {})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


class _PolledGrid:
    """``link.grid`` whose ``send_and_receive`` asks for replies after milliseconds (flwr 1.42's sleeps 3 s between
    asks, four times per SecAgg+ round) and stops waiting for a node that has left the federation."""

    def __init__(self, link) -> None:
        self.link = link

    def __getattr__(self, name):
        return getattr(self.link.grid, name)

    def send_and_receive(self, messages, *, timeout: float | None = None):
        grid = self.link.grid
        messages = list(messages)
        pending = {mid: msg.metadata.dst_node_id for mid, msg in zip(grid.push_messages(messages), messages) if mid}
        replies, pause, start = [], 0.001, time.monotonic()
        last_check = start
        while pending and (timeout is None or time.monotonic() < start + timeout):
            for msg in grid.pull_messages(list(pending)):
                if pending.pop(msg.metadata.reply_to_message_id, None) is not None:
                    replies.append(msg)
            if pending:
                time.sleep(pause)
                pause = min(2 * pause, 0.02)
                if time.monotonic() - last_check > 1.0:  # a node that left will never answer
                    alive, last_check = set(grid.get_node_ids()), time.monotonic()
                    pending = {mid: nid for mid, nid in pending.items() if nid in alive}
        return replies


class _Shim:
    """The Strategy side of one SecAgg+ round: it names the sites and their requests, and keeps what is unmasked."""

    def __init__(self, grid, requests: dict[int, bytes]) -> None:
        from flwr.server.compat.grid_client_proxy import GridClientProxy

        self.proxies = {nid: GridClientProxy(nid, grid, 0) for nid in requests}
        self.requests = requests
        self.survivors: list[int] = []
        self.mean: np.ndarray | None = None

    def configure_fit(self, server_round, parameters, client_manager):
        from flwr.common import FitIns

        return [(self.proxies[nid], FitIns(parameters, {REQUEST_KEY: self.requests[nid]})) for nid in self.requests]

    def aggregate_fit(self, server_round, results, failures):
        from flwr.common import parameters_to_ndarrays

        self.survivors = [proxy.node_id for proxy, _ in results]
        if results:
            self.mean = parameters_to_ndarrays(results[0][1].parameters)[0]
        return None, {}


def secure_exchange(link, verb: str, target: int, per_client: list[dict], spec: SkellamSpec, shape) -> Reply:
    """Run one secure request over SecAgg+ on ``link``'s live sites; the Reply for ``secure_mean`` (module docstring).

    Sites that are not among the survivors of the round have failed (``link.failed``).
    """
    from flwr.server.compat import LegacyContext
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey

    m = len(per_client)
    live = [i for i in range(m) if not link.failed[i]]
    clip, target_range, modulus = flower_ranges(spec, len(live))
    shim = _Shim(link.grid, {link.nodes[i]: request_bytes(verb, link.session, target, per_client[i]) for i in live})
    state = RecordDict({MAIN_CONFIGS_RECORD: ConfigRecord({WorkflowKey.CURRENT_ROUND: next(_ROUNDS)}),
                        MAIN_PARAMS_RECORD: ArrayRecord()})
    context = LegacyContext(Context(0, 0, {}, state, {}), strategy=shim)
    workflow = SecAggPlusWorkflow(1.0, min(1.0, spec.min_surviving / max(len(live), 1)), max_weight=1.0,
                                  clipping_range=clip, quantization_range=target_range, modulus_range=modulus,
                                  timeout=link.timeout)
    if len(live) >= max(2, spec.min_surviving):  # SecAgg+ needs two sites; fewer is refused by secure_mean
        workflow(_PolledGrid(link), context)
    position = {nid: i for i, nid in enumerate(link.nodes)}
    answered = np.zeros(m, dtype=bool)
    if shim.mean is not None:
        answered[[position[nid] for nid in shim.survivors]] = True
    failing = np.zeros(m, dtype=bool)
    failing[live] = ~answered[live]
    link.failed |= failing
    values = np.full((m, *shape), np.nan)
    if answered.any():
        n = int(answered.sum())
        values[answered] = 0.0
        total = residue_sum(shim.mean, n, spec)
        values[int(np.flatnonzero(answered)[0])] = total.reshape(shape)
    d = int(math.prod(shape))
    sens = np.array([float(np.atleast_1d(kw["sensitivity"])[0]) if answered[i] else 0.0
                     for i, kw in enumerate(per_client)])
    records = (share_release(spec, sens, d, str(per_client[0].get("stage", verb)), answered),)
    return Reply(values, records, answered, failing)
