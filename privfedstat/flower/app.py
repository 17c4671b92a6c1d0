"""The Flower components: ``server_app`` (fits estimators over the Grid) and ``client_app`` (one client's verbs).

Referenced from a Flower app's ``pyproject.toml``::

    [tool.flwr.app.components]
    serverapp = "privfedstat.flower.app:server_app"
    clientapp = "privfedstat.flower.app:client_app"

The ServerApp reads a *job* (run config ``job``: a JSON file listing the fits, each a registered
estimator name and its parameters, or a network estimator of :mod:`privfedstat.deep` with its model:
:func:`make_estimator`), fits each in turn with :func:`~privfedstat.flower.proxy.fit_on_grid`
and writes the results (``coef_``, ``privacy_``, ``communication_``, the summary text, the warnings
the fit raised as (category, message) pairs, or the error it raised) to the run config's ``out``
path (a pickle, read by the launcher on the same machine); it appends ``started <k> <unix time>`` /
``done <k> <unix time>`` lines to ``<out>.progress`` as it goes.

The ClientApp keeps one :class:`~privfedstat.flower.client.ClientNode` per run in its process, so
it must run in a persistent process: :mod:`privfedstat.flower.node` is a SuperNode that runs it in
its own (Flower's executors hand each message to a ClientApp process of its own, which would lose
the client's state between rounds).
"""

from __future__ import annotations

import difflib
import importlib
import json
import math
import pickle
import time
import traceback
import warnings
from pathlib import Path

from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from .client import ClientNode, error_reply, load_node
from .proxy import fit_on_grid
from .secagg import SecureVerbInTheClear, in_the_clear, secure_train

__all__ = ["server_app", "client_app", "run_job", "make_estimator", "NETWORK_ESTIMATORS"]

#: the network estimators a job may name (classes of :mod:`privfedstat.deep`, by lower-case name)
NETWORK_ESTIMATORS = ("deepfedavg", "deepfedsgd", "deepfedhybrid", "deepdpfedavg", "deepfednewton",
                      "deepfedalphanormec", "deepclippedfedavg", "deephifedprox", "deepfednmap", "deepzhang",
                      "deepfedcanon")

server_app = ServerApp()
client_app = ClientApp()
_NODES: dict[int, ClientNode] = {}  # run id -> this process's client (the node's process keeps it)


@client_app.query()
def _query(msg: Message, context: Context) -> Message:
    node = _NODES.get(context.run_id)
    if node is None:
        _NODES.clear()  # one run at a time: a new run drops the last one's state
        try:
            node = _NODES[context.run_id] = load_node(context.node_config)
        except Exception as err:  # a wrong config or data file: the server raises its class, the node logs it
            return Message(error_reply(err), reply_to=msg)
    if in_the_clear(msg.content):  # a secure verb travels only inside a SecAgg+ round (masked)
        return Message(error_reply(SecureVerbInTheClear("secure verbs are answered inside SecAgg+ rounds only.")),
                       reply_to=msg)
    return Message(node.handle(msg.content), reply_to=msg)


@client_app.train(mods=[secaggplus_mod])
def _train(msg: Message, context: Context) -> Message:
    """A SecAgg+ round's fit stage: this node's secure message (:func:`~privfedstat.flower.secagg.secure_train`)."""
    node = _NODES.get(context.run_id)
    if node is None:
        raise RuntimeError("a SecAgg+ round reached a node whose fit session is not open.")
    return secure_train(node, msg)


def _fast_object_pulls(poll: float = 0.1) -> None:
    """Retry a reply's objects after milliseconds, not Flower's 1 s (this ServerApp process only).

    A reply is listed by the SuperLink while its objects may still be on their way from the node;
    flwr 1.42's Grid first retries after a second, a second added to every round.
    """
    from flwr.supercore.inflatable.inflatable_utils import pull_objects

    from .node import _fast_pulls

    importlib.import_module("flwr.superlink.grid.http_grid").pull_objects = _fast_pulls(pull_objects, poll)


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    _fast_object_pulls()
    cfg = context.run_config
    run_job(grid, Path(str(cfg["job"])), Path(str(cfg["out"])))


def _value(value):
    """A job parameter: JSON, with ``"inf"`` for infinity and ``{"AutoClip": {...}}`` for an AutoClip."""
    if value == "inf":
        return math.inf
    if isinstance(value, dict) and list(value) == ["AutoClip"]:
        from ..privacy.clipping import AutoClip

        return AutoClip(**value["AutoClip"])
    return value


def make_estimator(fit: dict):
    """The estimator of a job entry ``{"estimator": name, "params": {...}}``, unfitted.

    ``name`` is a registered estimator (``"fedsgd"``, ...), or, with ``"model"`` (one of
    :data:`~privfedstat.flower.client.MODELS`) and optionally ``"model_seed"`` (the weights
    theta^(0), drawn with ``torch.manual_seed(model_seed)``; default 0), a network estimator of
    :data:`NETWORK_ESTIMATORS` (``"DeepFedAvg"``, ...): the nodes must then serve that model
    (node config ``model``). Parameter values are JSON (see :func:`_value`). As in ``glm()``, a GLM
    estimator rescales the nodes' columns privately unless the job says otherwise
    (``"scaling": "private"``, 10% of mu, the intercept in column 0 as the nodes put it; ``null``:
    the columns as they are).
    """
    from ..algorithms.registry import get_method

    params = {key: _value(value) for key, value in fit.get("params", {}).items()}
    name = str(fit["estimator"])
    if fit.get("model") is None:
        if name.lower() in NETWORK_ESTIMATORS:
            raise ValueError(f"{name} fits a network: name its model (\"model\": one of the nodes' models).")
        cls = get_method(name).cls
        _check_param_names(cls, params)
        if "scaling" in cls._param_names() and "scaling" not in params:
            params["scaling"] = "private"  # raw-scale covariates, as glm() does
        return cls(**params)
    if name.lower() not in NETWORK_ESTIMATORS:
        raise ValueError(f"unknown network estimator {name!r}; one of {NETWORK_ESTIMATORS} (a GLM estimator takes no model).")
    from .. import deep
    from .client import build_model

    cls = next(getattr(deep, n) for n in deep.__all__ if n.lower() == name.lower())
    _check_param_names(cls, params, given={"model"})
    return cls(model=build_model(str(fit["model"]), int(fit.get("model_seed", 0))), **params)


def _check_param_names(cls, params: dict, given: set = frozenset()) -> None:
    """ValueError naming an estimator's parameters (and the nearest one) for a job parameter it does not take."""
    valid = [n for n in cls._param_names() if n not in given]
    for name in params:
        if name not in valid:
            near = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"{cls.__name__} has no parameter {name!r}{hint}; its parameters are {sorted(valid)}.")


def run_job(grid, job: Path, out: Path) -> list[dict]:
    """Fit every estimator the job lists on the Grid's nodes; write and return one result dict per fit."""
    spec = json.loads(job.read_text())
    timeout = float(spec.get("timeout", 60.0))
    progress = out.with_name(out.name + ".progress")
    results = []
    for k, fit in enumerate(spec["fits"]):
        result = {"estimator": fit["estimator"], "params": fit.get("params", {}), "model": fit.get("model")}
        est = None
        try:  # built before the fit's clock starts (a network imports torch and draws theta^(0))
            est = make_estimator(fit)
        except Exception as err:  # reported to the launcher; the next fit still runs
            result.update(error=(type(err).__name__, str(err)), trace=traceback.format_exc())
        with progress.open("a") as f:
            f.write(f"started {k} {time.time():.6f}\n")
        if est is not None:
            with warnings.catch_warnings(record=True) as seen:  # the fit's diagnostics travel with its result
                warnings.simplefilter("always")
                try:
                    est = fit_on_grid(est, grid, timeout=timeout)
                    result.update(coef=est.coef_, privacy=est.privacy_, communication=est.communication_,
                                  summary=str(est.summary().as_text()), n_clients=est.n_clients_)
                except Exception as err:
                    result.update(error=(type(err).__name__, str(err)), trace=traceback.format_exc())
            result["warnings"] = [(w.category.__name__, str(w.message)) for w in seen]
        results.append(result)
        with progress.open("a") as f:
            f.write(f"done {k} {time.time():.6f}\n")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(pickle.dumps(results))
    tmp.replace(out)
    return results
