"""The client's end on a Flower SuperNode: one client's rows, its noise stream, and the verbs it answers.

A node holds ONE client's data inside a single-client
:class:`~privfedstat.federation.clients.InProcessClients` (a network's, with ``model`` in the node
config: :class:`~privfedstat.deep.clients.TorchClients`), so every verb is computed and
privatized here, on the client, by the same code as in-process, before anything is sent. Each fit
is a *session*: the server's first request opens it (the family; the node answers with its public
metadata), and the session keeps the client's state between requests (noise stream, SCAFFOLD's
control variate, FedNMap's correction, Fed-alpha-NormEC's memory, FedNewton's halves, the rescaled
columns).

**Seeding.** By default each session draws its noise from fresh operating-system entropy: a
restarted run never reuses noise, and the server cannot know the noise. ``simulation-seed=S`` in
the node config is an explicit opt-in for simulations and tests: client ``i`` then draws from the
same stream as client ``i`` of an in-process fit with ``random_state=S`` (the child
``SeedSequence(S).spawn(3)[0].spawn(m)[i]``; a network's noise and minibatch streams the children
``(0, 0, i)`` and ``(0, 1, i)``, as :class:`~privfedstat.deep.clients.TorchClients` spawns them), so
the two fits agree to the last bit. Whoever knows
S can subtract the noise: never set it in a deployment.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from flwr.app import RecordDict

from .. import algorithms  # noqa: F401  (every algorithm registers its clients' verb: this node answers them all)
from ..data.federated import FederatedData
from ..families import get_family
from ..federation import verbs
from ..federation.clients import InProcessClients, Reply
from ..privacy.mechanisms import ClientNoise, SecureClientNoise
from .wire import OPEN, decode_request, encode_reply, per_client_args

__all__ = ["ClientNode", "load_node", "load_partition", "load_model", "build_model", "error_reply", "demo_dataset",
           "DATASETS", "MODELS"]

#: embedded datasets a node can serve (``dataset`` in its node config; "digits-images" for networks)
DATASETS = ("synthetic-logistic", "digits-images")
#: networks a node can build (``model`` in its node config; classes of :mod:`privfedstat.deep.models`)
MODELS = ("DigitsCNN", "MnistCNN", "CifarCNN", "FemnistCNN", "ResNet20")


def demo_dataset(name: str, num_partitions: int, n_features: int = 3):
    """All ``num_partitions`` clients of an embedded dataset (what the nodes of a demo hold between them).

    ``"synthetic-logistic"``: an intercept and ``n_features - 1`` standard normal covariates,
    responses from a logistic model with theta = (0.3, -0.6, 0.2, 0, ..., 0), client i holding
    120 + 30 (i mod 3) rows; drawn from a fixed public seed, so every node rebuilds the same rows.
    ``"digits-images"`` (a :class:`~privfedstat.deep.data.TensorFederatedData`; needs scikit-learn):
    the 8 x 8 digit images (1, 8, 8), every row dealt IID by ``split_iid`` with the same public seed;
    ``n_features`` is ignored.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; the nodes serve {DATASETS}.")
    if not int(num_partitions) >= 1 or not int(n_features) >= 1:
        raise ValueError(f"num-partitions and n-features must be positive integers, got {num_partitions!r}, "
                         f"{n_features!r}.")
    if name == "digits-images":
        from ..data import load_digits
        from ..deep.data import TensorFederatedData

        return TensorFederatedData.split_iid(*load_digits(images=True), int(num_partitions), random_state=20240601)
    d = int(n_features)
    sizes = [120 + 30 * (i % 3) for i in range(int(num_partitions))]
    rng = np.random.default_rng(20240601)
    n = sum(sizes)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
    theta = np.zeros(d)
    theta[:3] = np.array([0.3, -0.6, 0.2])[:d]
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ theta))).astype(np.float64)
    return FederatedData.from_pooled(X, y, sizes=sizes)


def error_reply(err: BaseException) -> RecordDict:
    """The reply of a node whose request (or set-up) raised ``err``: its class only (:data:`~privfedstat.flower.wire.WITHHELD`);
    the message, which may describe the node's rows, goes to the node's own log (stderr)."""
    print(f"privfedstat.flower node: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
    return encode_reply("error", error=err)


def _csv(node_config) -> tuple[FederatedData, list[str], str]:
    """A node's own rows from the CSV file of its config (``data-file``, ``response``, ``columns``, ``intercept``)."""
    import pandas as pd

    path = str(node_config["data-file"])
    if "response" not in node_config:
        raise ValueError(f"the node config names data-file={path!r} but no response (the column of y).")
    response = str(node_config["response"])
    df = pd.read_csv(path)
    columns = ([c.strip() for c in str(node_config["columns"]).split(",") if c.strip()] if "columns" in node_config
               else [c for c in df.columns if c != response])
    missing = [c for c in [response, *columns] if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing}; it has {list(df.columns)}.")
    bad = [c for c in [response, *columns] if not pd.api.types.is_numeric_dtype(df[c])]
    if bad:
        raise ValueError(f"{path}: column(s) {bad} are not numeric (code categories as 0/1 columns first).")
    X = df[columns].to_numpy(dtype=np.float64)
    names = list(columns)
    if bool(node_config.get("intercept", True)):
        X, names = np.column_stack([np.ones(len(df)), X]), ["Intercept", *names]
    return FederatedData.from_arrays([(X, df[response].to_numpy(dtype=np.float64))]), names, response


def load_node(node_config) -> ClientNode:
    """The :class:`ClientNode` its config describes: its rows (:func:`load_partition`), with the CSV's column and
    response names (public structure, declared by the config) and the network of ``model`` (:func:`load_model`)."""
    data, index, seed, names = _rows(node_config)
    return ClientNode(data, index, seed, model=load_model(node_config), names=names)


def load_partition(node_config) -> tuple[FederatedData, int, int | None]:
    """A node's one-client data, its partition id and its simulation seed (None: OS entropy), from its config.

    Its own rows: ``data-file`` (a CSV file with a header row), ``response`` (the column of y),
    optionally ``columns`` (comma-separated; default every other column) and ``intercept`` (default
    true: a column of ones first); ``partition-id`` is the node's place in the federation (0, 1, ...).
    Or partition ``partition-id`` of ``num-partitions`` of an embedded ``dataset``
    (:data:`DATASETS`, for demos and tests).
    """
    return _rows(node_config)[:3]


def _rows(node_config) -> tuple[FederatedData, int, int | None, tuple[list[str], str] | None]:
    """:func:`load_partition`'s data, index and seed, and the CSV's (column names, response name) or None."""
    seed = node_config.get("simulation-seed")
    if "partition-id" not in node_config:
        raise ValueError("the node config needs partition-id (the node's place in the federation).")
    i = int(node_config["partition-id"])
    if "data-file" in node_config:
        if i < 0:
            raise ValueError(f"partition-id must be >= 0, got {i}.")
        data, names, response = _csv(node_config)
        return data, i, None if seed is None else int(seed), (names, response)
    try:
        name, m = str(node_config["dataset"]), int(node_config["num-partitions"])
    except KeyError as err:
        raise ValueError(f"the node config needs data-file and response (its own rows), or dataset and "
                         f"num-partitions (an embedded demo dataset; missing {err}).") from None
    if not 0 <= i < m:
        raise ValueError(f"partition-id {i} is outside 0..{m - 1}.")
    full = demo_dataset(name, m, int(node_config.get("n-features", 3)))
    if isinstance(full, FederatedData):
        one = FederatedData.from_arrays([full.client(i)])
    else:
        one = type(full).from_pooled(*full.client(i), sizes=[int(full.sizes[i])])
    return one, i, None if seed is None else int(seed), None


def build_model(name: str, seed: int | None = None):
    """A network of :data:`MODELS` (a class of :mod:`privfedstat.deep.models`), its weights drawn with
    ``torch.manual_seed(seed)`` (None: torch's current stream) without changing torch's global stream."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; the nodes build {MODELS}.")
    import torch

    from ..deep import models

    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(int(seed))
        return getattr(models, name)()


def load_model(node_config):
    """The network a node evaluates (node config ``model``: one of :data:`MODELS`), or None.

    Its weights do not matter: every fit replaces them by the server's theta^(0).
    """
    name = node_config.get("model")
    return None if name is None else build_model(str(name))


class ClientNode:
    """The verbs one node answers, for every session (fit) of one run.

    Parameters
    ----------
    data : FederatedData
        This client's rows (one client).
    index : int
        Its partition id (its place in the server's client order).
    simulation_seed : int or None
        None: every session's noise from fresh OS entropy. An int: the in-process stream of client
        ``index`` under ``random_state=simulation_seed`` (simulations and tests only).
    model : torch.nn.Module, optional
        For a network estimator (``privfedstat.deep``; ``data`` a one-client TensorFederatedData):
        the architecture, whose weights each session replaces by the server's theta^(0).
    names : (list of str, str), optional
        The columns' names and the response's (:func:`load_node`), declared to the server when a
        session opens (public structure: every node must declare the same).
    """

    def __init__(self, data, index: int, simulation_seed: int | None = None, model=None,
                 names: tuple[list[str], str] | None = None) -> None:
        if data.n_clients != 1:
            raise ValueError(f"a node holds one client's data, got {data.n_clients} clients.")
        if names is not None and len(names[0]) != data.n_features:
            raise ValueError(f"{len(names[0])} column names for {data.n_features} columns.")
        self.data, self.index, self.simulation_seed, self.model = data, int(index), simulation_seed, model
        self.names = names
        self._sessions: dict[str, list] = {}

    def _noise(self, secure: bool):
        if secure:
            return SecureClientNoise(1)
        if self.simulation_seed is None:
            return ClientNoise(np.random.SeedSequence(), 1)  # fresh OS entropy for every fit
        # in-process the noise streams are the children of the fit's child (0,) of random_state
        return ClientNoise(np.random.SeedSequence(self.simulation_seed, spawn_key=(0,)), 1, first=self.index)

    def handle(self, content: RecordDict) -> RecordDict:
        """Answer one request (a Message's content); an exception becomes an error reply."""
        try:
            verb, session, target, kwargs = decode_request(content)
            if verb == OPEN:
                return self._open(session, **kwargs)
            handles = self._sessions.get(session)
            if handles is None:
                raise RuntimeError(f"request {verb!r} for session {session!r}, which this node never opened.")
            if verb not in verbs.names() or not 0 <= target < len(handles):
                raise ValueError(f"unknown verb {verb!r} or handle {target}.")
            return self._answer(handles, verb, target, kwargs)
        except Exception as err:  # its class goes to the server, which raises it there; its message stays here
            return error_reply(err)

    def _open(self, session: str, *, family: str | None = None, secure: bool = False, **family_args) -> RecordDict:
        if family is None:
            return self._open_network(session, **family_args)
        fam = get_family(family, **{k.removeprefix("family."): v for k, v in family_args.items()})
        clients = InProcessClients(self.data, fam, self._noise(secure), first_client=self.index)
        self._sessions = {session: [clients]}  # one fit at a time: a new session ends the last
        extra = {"partition_id": self.index, "size": int(clients.sizes[0]), "n_features": int(clients.n_features),
                 "n_params": int(clients.n_params), "has_offset": bool(clients.has_offset),
                 "initial_parameters": np.asarray(clients.initial_parameters(), dtype=np.float64)}
        if self.names is not None:
            extra["names"] = json.dumps({"features": list(self.names[0]), "response": str(self.names[1])})
        return encode_reply("ok", extra=extra)

    def _open_network(self, session: str, *, initial_parameters: np.ndarray, loss: str,
                      batch_size: int | None = None) -> RecordDict:
        """A network session: :class:`~privfedstat.deep.clients.TorchClients` for this client, the model at the
        server's theta^(0), the noise and minibatch streams of in-process client ``index``."""
        from ..deep import TorchClients  # the package: every network algorithm registers its verbs' torch implementation
        from ..deep.estimators import _loss, _with_parameters

        if self.model is None:
            raise TypeError("this node holds no model: it serves the GLM estimators only.")
        model = _with_parameters(self.model, np.asarray(initial_parameters, dtype=np.float64))
        # in-process the clients' seed is the fit's noise child (0,) of random_state: noise (0, 0, i), batches (0, 1, i)
        seed = np.random.SeedSequence() if self.simulation_seed is None else np.random.SeedSequence(
            self.simulation_seed, spawn_key=(0,))
        clients = TorchClients(self.data, model, _loss(loss), seed, batch_size=batch_size, first_client=self.index)
        self._sessions = {session: [clients]}
        extra = {"partition_id": self.index, "size": int(clients.sizes[0]), "n_features": int(clients.n_features),
                 "n_params": int(clients.n_params), "has_offset": False,
                 "input_shape": np.asarray(self.data.input_shape, dtype=np.float64),
                 "initial_parameters": clients.initial_parameters()}
        return encode_reply("ok", extra=extra)

    def _answer(self, handles: list, verb: str, target: int, kwargs: dict) -> RecordDict:
        for name in per_client_args(verb):  # per-client arguments arrive as this client's entry
            if name in kwargs and kwargs[name] is not None:
                kwargs[name] = np.atleast_1d(kwargs[name])
        out = getattr(handles[target], verb)(**kwargs)
        answer = verbs.get(verb).answer
        if answer == "handles":  # the two halves answer as handles 1 and 2
            del handles[1:]
            handles.extend(out)
            return encode_reply("ok", extra={"size1": int(out[0].sizes[0]), "size2": int(out[1].sizes[0])})
        if answer == "nothing":
            return encode_reply("ok")
        if answer == "exact":
            g, H = out
            return encode_reply("ok", g[0], extra={"hessian": np.asarray(H[0], dtype=np.float64)})
        assert isinstance(out, Reply)
        status = "ok" if out.answered[0] else "silent"
        return encode_reply(status, out.values[0] if status == "ok" else None, out.releases, out.leak)

