"""The server's end on Flower: a clients object whose verbs travel as Messages over the Grid.

:class:`FlowerClients` exposes exactly what the server may touch of any clients backend
(the verbs of :mod:`~privfedstat.federation.verbs` and :data:`~privfedstat.federation.clients.PUBLIC`):
each verb call sends one Message per live client (the verb's name and its public arguments, a
per-client argument such as ``sensitivity`` cut to that client's entry) and assembles the
:class:`~privfedstat.federation.clients.Reply` that :class:`~privfedstat.federation.clients.InProcessClients`
would return: values stacked in client order, the release records the clients sent (a client that
did not send contributes sensitivity and sigma 0, as in-process), and the answered / failed
masks. The server's ledger is built by the estimator's Channel from those records only, after
:mod:`~privfedstat.flower.records` has checked them against the request (their number, kind,
unit, stage, sensitivity and noise), and :func:`fit_on_grid` checks the final ledger against what
the server asked of each client and the declared mu.

Every live client receives every request; with partial participation (``active``) the clients
outside the sample compute as in-process (their noise streams and state advance the same way) and
answer "silent", sending no values. A client that does not reply within ``timeout`` seconds, or
whose node left the federation, has failed: it gets no further request and the estimator's
``on_client_failure`` decides. Replies are matched to the request's message ids, so a late or
duplicated reply is never counted. :func:`fit_on_grid` runs an estimator's ``fit`` on these clients.
"""

from __future__ import annotations

import builtins
import inspect
import json
import time
import uuid

import numpy as np

from .. import exceptions
from ..data.federated import FederatedData
from ..families import Family
from ..federation import verbs
from ..federation.clients import PUBLIC, InProcessClients, Reply
from ..privacy.ledger import Release
from .records import Spending, check_records
from .secagg import SECURE_VERBS, secure_exchange
from .wire import MAX_REPLY_BYTES, ClientReply, MalformedReplyError, decode_reply, encode_request, expected_shape, per_client_args

__all__ = ["FlowerClients", "fit_on_grid"]

#: Flower message type of every request (the ClientApp's one query handler)
MESSAGE_TYPE = "query"


class _Link:
    """The Grid and the nodes of one fit, in client order, with the failure state shared by all handles."""

    def __init__(self, grid, nodes: list[int], timeout: float, max_bytes: int) -> None:
        self.grid, self.nodes, self.timeout, self.max_bytes = grid, nodes, timeout, max_bytes
        self.failed = np.zeros(len(nodes), dtype=bool)
        self.session = uuid.uuid4().hex

    def exchange(self, verb: str, target: int, per_client: list[dict], shape) -> dict[int, ClientReply]:
        """Send ``per_client[i]`` to every live client i; return the decoded replies of those that answered in time."""
        messages, index = [], []
        for i, kwargs in enumerate(per_client):
            if self.failed[i]:
                continue
            content = encode_request(verb, self.session, target, kwargs)
            messages.append(self.grid.create_message(content, MESSAGE_TYPE, self.nodes[i], group_id=verb))
            index.append(i)
        ids = list(self.grid.push_messages(messages))
        pending = {mid: i for mid, i in zip(ids, index) if mid}
        for mid, i in zip(ids, index):
            if not mid:  # the SuperLink refused the message: the node is gone
                self.failed[i] = True
        replies: dict[int, ClientReply] = {}
        deadline, pause, last_check = time.monotonic() + self.timeout, 0.001, time.monotonic()
        while pending and time.monotonic() < deadline:
            for msg in self.grid.pull_messages(list(pending)):
                i = pending.pop(msg.metadata.reply_to_message_id, None)
                if i is None:  # late or duplicated: already counted or never asked
                    continue
                if msg.has_error():
                    continue  # the node could not run the ClientApp: failed (below)
                replies[i] = decode_reply(msg.content, verb, shape, max_bytes=self.max_bytes)
            if pending:
                time.sleep(pause)
                pause = min(2 * pause, 0.02)
                if time.monotonic() - last_check > 1.0:  # a node that left will never answer
                    alive, last_check = set(self.grid.get_node_ids()), time.monotonic()
                    for mid, i in list(pending.items()):
                        if self.nodes[i] not in alive:
                            del pending[mid]
        for i in index:
            if i not in replies:
                self.failed[i] = True
        return replies


class FlowerClients:
    """The clients of a Flower federation, seen from the ServerApp (verbs and public metadata only).

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    family : Family or None
        Sent to the clients when the fit opens its session; None for a network (``network``).
    secure : bool
        Ask the clients for secure-mode noise (OS CSPRNG, :class:`~privfedstat.privacy.mechanisms.SecureClientNoise`).
    nodes : list of int, optional
        Node ids to use (default: every node connected now).
    timeout : float, default 60
        Seconds to wait for a client's reply before it counts as failed.
    max_bytes : int
        Largest reply accepted from a client (:func:`~privfedstat.flower.wire.decode_reply`).
    network : dict, optional
        A network estimator's opening arguments (theta^(0), the loss's name, the batch size) instead of a family.

    Attributes (public metadata, declared by the clients when the session opens)
    ------------------------------------------------------------------------------
    n_clients, sizes, n_features, n_params, family, has_offset
    node_ids, partition_ids : list of int
        The nodes that answered the opening request, in client order (by declared partition id);
        a node that did not answer takes no part in this fit.
    feature_names : list of str or None; response_name : str or None
        The columns and the response the nodes serve, where their data come with names (CSV
        files, :func:`~privfedstat.flower.client.load_node`): the fit's ``feature_names_in_``.
    """

    def __init__(self, grid, family: Family, *, secure: bool = False, nodes=None, timeout: float = 60.0,
                 max_bytes: int = MAX_REPLY_BYTES, _link: _Link | None = None, _target: int = 0,
                 _meta: dict | None = None, network: dict | None = None) -> None:
        self.family = family
        self._target = _target
        if _link is not None:
            self._link = _link
            self.__dict__.update(_meta)
            return
        node_ids = sorted(grid.get_node_ids()) if nodes is None else list(nodes)
        if not node_ids:
            raise RuntimeError("no SuperNode is connected to the SuperLink.")
        link = _Link(grid, node_ids, timeout, max_bytes)
        spec = _family_spec(family) if network is None else dict(network)
        opened = link.exchange("open", 0, [{**spec, "secure": bool(secure)}] * len(node_ids), None)
        _raise_errors(opened, "open")
        if not opened:
            raise exceptions.ClientFailureError(f"none of the nodes {node_ids} answered the opening request.")
        order = sorted(opened, key=lambda i: int(opened[i].extra["partition_id"]))  # a node that did not answer sits out
        ids = [int(opened[i].extra["partition_id"]) for i in order]
        if len(set(ids)) != len(ids):
            raise ValueError(f"the nodes declare partitions {ids}: each partition must be served once.")
        meta = [opened[i].extra for i in order]
        link.nodes, link.failed = [node_ids[i] for i in order], np.zeros(len(order), dtype=bool)
        link.spending = Spending(len(order))  # what the server's requests spend, checked against the ledger at the end
        self._link = link
        firsts = {(int(e["n_features"]), int(e["n_params"]), bool(e["has_offset"])) for e in meta}
        if len(firsts) != 1:
            raise ValueError(f"the clients declare different dimensions {sorted(firsts)}.")
        self.n_features, self.n_params, self.has_offset = firsts.pop()
        self.n_clients = len(meta)
        self.sizes = np.array([int(e["size"]) for e in meta], dtype=np.int64)
        self.node_ids = list(link.nodes)
        self.partition_ids = ids
        self._initial = np.asarray(meta[0]["initial_parameters"], dtype=np.float64)
        self.input_shape = tuple(int(k) for k in meta[0].get("input_shape", ()))
        names = {e.get("names") for e in meta}
        if len(names) != 1:
            raise ValueError(f"the clients declare different columns: {sorted(str(n) for n in names)}; every node must "
                             "serve the same columns in the same order.")
        declared = names.pop()
        self.feature_names, self.response_name = (None, None) if declared is None else (
            json.loads(declared)["features"], json.loads(declared)["response"])

    def initial_parameters(self) -> np.ndarray:
        """theta^(0) as the clients declared it when the session opened (public)."""
        return self._initial.copy()

    def __getattr__(self, name):
        if name in verbs.names():
            return lambda *args, **kwargs: self._call(name, *args, **kwargs)
        raise AttributeError(f"FlowerClients has no attribute {name!r} (verbs: {verbs.names()}; public: {PUBLIC}).")

    def _meta(self) -> dict:
        return {k: getattr(self, k) for k in ("n_clients", "sizes", "n_features", "n_params", "has_offset", "node_ids",
                                              "partition_ids", "_initial", "input_shape", "feature_names",
                                              "response_name")}

    def _call(self, verb: str, *args, **kwargs):
        if args:  # positional arguments, named as in the in-process backend (a method, or the registered function)
            answer = getattr(InProcessClients, verb, None) or verbs.implementation(verb, "in_process")
            kwargs.update(zip(list(inspect.signature(answer).parameters)[1:], args))
        m = self.n_clients
        per_client = []
        for i in range(m):
            own = dict(kwargs)
            for name in per_client_args(verb):
                value = own.get(name)
                if isinstance(value, np.ndarray) and value.ndim == 1 and value.shape[0] == m:
                    own[name] = value[i].item()
            per_client.append(own)
        shape = expected_shape(verb, self.n_params, self.n_features, kwargs)
        if verb in SECURE_VERBS:  # the sites' messages are summed by Flower's SecAgg+: the server holds the sum alone
            reply = secure_exchange(self._link, verb, self._target, per_client, kwargs["spec"], shape)
            self._link.spending.add_secure(reply, kwargs["spec"])
            return reply
        before = self._link.failed.copy()
        replies = self._link.exchange(verb, self._target, per_client, shape)
        _raise_errors(replies, verb)
        check_records(replies, per_client, verb)
        self._link.spending.add(replies, per_client, verb)
        failing = self._link.failed & ~before
        answer = verbs.get(verb).answer
        if answer == "handles":  # each half answers for its own rows: its sizes are what the clients declare
            if failing.any():
                raise exceptions.ClientFailureError(f"client(s) {np.flatnonzero(failing).tolist()} failed in {verb!r}.")
            halves = []
            for t in (1, 2):
                meta = dict(self._meta(), sizes=np.array([int(replies[i].extra[f"size{t}"]) for i in range(m)]))
                halves.append(FlowerClients(None, self.family, _link=self._link, _target=t, _meta=meta))
            return tuple(halves)
        if verb == "rescale":  # the clients now fit on the scaler's scale: so does the family the server sees
            self.family = kwargs["scaler"].fitting_family(self.family)
        if answer == "nothing":
            return None
        if answer == "exact":
            if failing.any():
                raise exceptions.ClientFailureError(f"client(s) {np.flatnonzero(failing).tolist()} failed in {verb!r}.")
            g = np.stack([replies[i].values for i in range(m)])
            return g, np.stack([np.asarray(replies[i].extra["hessian"]).reshape(self.n_params, self.n_params)
                                for i in range(m)])
        return _assemble(replies, m, shape, failing, verb)


def _assemble(replies: dict[int, ClientReply], m: int, shape, failing: np.ndarray, verb: str) -> Reply:
    """The Reply of :class:`InProcessClients` from the clients' replies (NaN rows and zero records for the silent)."""
    values = np.full((m, *shape), np.nan)
    answered = np.zeros(m, dtype=bool)
    for i, r in replies.items():
        if r.status == "ok":
            values[i], answered[i] = r.values, True
    counts = {len(r.releases) for r in replies.values()}
    if len(counts) > 1:
        raise MalformedReplyError(f"the clients ran different numbers of mechanisms for {verb!r}: {sorted(counts)}.")
    releases = []
    if replies:
        first = next(iter(replies.values())).releases
        for j, rec in enumerate(first):
            sens, sigma = np.zeros(m), np.zeros(m)
            for i, r in replies.items():
                other = r.releases[j]
                if (other.stage, other.kind, other.unit) != (rec.stage, rec.kind, rec.unit):
                    raise MalformedReplyError(f"the clients' release {j} for {verb!r} differ: "
                                              f"{(rec.stage, rec.kind, rec.unit)} and {(other.stage, other.kind, other.unit)}.")
                if answered[i]:
                    sens[i], sigma[i] = other.sensitivity[0], other.sigma[0]
            releases.append(Release(rec.stage, -1, rec.kind, sens, sigma, unit=rec.unit))
    leaks = {r.leak for r in replies.values() if r.leak is not None}
    return Reply(values, tuple(releases), answered, failing, leaks.pop() if leaks else None)


def _family_spec(family: Family) -> dict:
    """The family's registry name and constructor arguments (Huber's c, the number of classes), as request fields."""
    spec = {"family": family.name}
    for name, p in inspect.signature(type(family).__init__).parameters.items():
        if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            value = getattr(family, name, getattr(family, "param", None))
            if value is not None:
                spec[f"family.{name}"] = value
    return spec


def _raise_errors(replies: dict[int, ClientReply], verb: str) -> None:
    """Raise on the server the first exception a client raised while answering (same class where known; its
    message stays on the node, :data:`~privfedstat.flower.wire.WITHHELD`)."""
    for i, r in sorted(replies.items()):
        if r.status == "error":
            name, text = r.error
            cls = getattr(exceptions, name, None) or getattr(builtins, name, None)
            if not (isinstance(cls, type) and issubclass(cls, Exception)):
                cls = RuntimeError
            raise cls(f"client {i} ({verb}): {text}")


def fit_on_grid(estimator, grid, *, secure: bool | None = None, timeout: float = 60.0, nodes=None,
                max_bytes: int = MAX_REPLY_BYTES):
    """Fit ``estimator`` (a registered estimator, or a network one of ``privfedstat.deep``) on the Flower nodes of ``grid``.

    The estimator's own ``fit`` runs unchanged on the ServerApp: its clients object is a
    :class:`FlowerClients` (the data the server hands to ``fit`` is a placeholder of zeros of the
    declared public shape, which ``fit`` deletes before the protocol starts; the rows stay on the
    nodes). ``coef_``, ``privacy_``, ``communication_`` and ``summary()`` are then those of an
    in-process fit of the same data; with the nodes' ``simulation-seed`` equal to the estimator's
    ``random_state`` they agree to the last bit. A network estimator sends its model's weights
    theta^(0) (public: the server's initial model), its loss's name and its batch size when the
    session opens; each node evaluates them on its own copy of the architecture
    (:class:`~privfedstat.flower.client.ClientNode`'s ``model``). With ``aggregation="secure"`` the
    secure verbs' messages are summed by Flower's SecAgg+ (:mod:`~privfedstat.flower.secagg`).
    """
    from ..families import get_family

    network = _network_spec(estimator)
    if network is None and getattr(estimator, "family", None) is None:
        raise TypeError(f"the Flower backend carries the GLM estimators and the networks of privfedstat.deep; "
                        f"{type(estimator).__name__} has neither a family nor a model.")
    family = None if network is not None else get_family(estimator.family)
    secure = bool(getattr(estimator, "secure_mode", False)) if secure is None else secure
    clients = FlowerClients(grid, family, secure=secure, nodes=nodes, timeout=timeout, max_bytes=max_bytes,
                            network=network)
    shell = _placeholder(clients) if network is None else _tensor_placeholder(clients)

    def make_clients(data, fam, seed, secure_mode):  # the nodes seed themselves (seed is the server's, unused)
        return clients

    estimator._make_clients = make_clients
    if clients.feature_names is not None:  # the nodes' declared columns name the coefficients (summary, warnings)
        estimator.feature_names_in_, estimator.response_name_ = list(clients.feature_names), clients.response_name
    try:
        estimator.fit(shell)
    finally:
        del estimator._make_clients
    clients._link.spending.check(estimator.privacy_, estimator.mu_)  # the ledger is what the server asked for
    return estimator


def _network_spec(estimator) -> dict | None:
    """A network estimator's opening arguments (None for a GLM estimator): theta^(0), the loss, the batch size."""
    model = getattr(estimator, "model", None)
    if model is None or not hasattr(model, "named_parameters"):
        return None
    if not isinstance(estimator.loss, str):
        raise TypeError(f"a network's loss travels to the nodes by name; got {estimator.loss!r}.")
    theta0 = np.concatenate([p.detach().reshape(-1).double().numpy() for p in model.parameters() if p.requires_grad])
    return {"initial_parameters": theta0, "loss": estimator.loss, "batch_size": getattr(estimator, "batch_size", None)}


def _tensor_placeholder(clients: FlowerClients):
    """Zeros of the clients' declared input shape and sizes: a network's ``fit`` starts from them, no data."""
    import torch

    from ..deep.data import TensorFederatedData

    n = int(clients.sizes.sum())
    return TensorFederatedData(torch.zeros((n, *clients.input_shape), dtype=torch.float64),
                               torch.zeros(n, dtype=torch.int64), np.concatenate([[0], np.cumsum(clients.sizes)]))


def _placeholder(clients: FlowerClients) -> FederatedData:
    """Zeros of the clients' declared public shape (sizes, n_features): what ``fit`` needs to start, no data."""
    n = int(clients.sizes.sum())
    return FederatedData(np.zeros((n, clients.n_features)), np.zeros(n),
                         np.concatenate([[0], np.cumsum(clients.sizes)]),
                         np.zeros(n) if clients.has_offset else None)
