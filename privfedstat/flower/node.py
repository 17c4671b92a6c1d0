"""``python -m privfedstat.flower.node``: a Flower SuperNode whose ClientApp runs in one persistent process.

Flower's SuperNode in ``--isolation process`` mode leaves the running of ClientApps to an executor
outside it, which takes each task from the SuperNode's Runtime API. This module is that executor
and the SuperNode in one process: it starts Flower's own ``flower-supernode`` (every flag passes
through: ``--superlink``, ``--insecure`` or ``--root-certificates``, ``--node-config``, ...) and,
in a thread, takes the node's tasks one after the other and answers them with the ClientApp
(default ``privfedstat.flower.app:client_app``) in this process, with Flower's own Runtime API
client (pull the task input, push the reply and the task output). The client's state (its rows,
noise stream and protocol state) lives between messages; killing this process kills the client.

Runtime dependency installation is never done (the ClientApp is the installed privfedstat), and
the FAB a run brings is not installed either: the node runs the ClientApp named here.

Flower's first retry of a message's objects that have not arrived yet comes after 1 s; here after
a few milliseconds. ``--poll S`` (default 0.1 s) caps the SuperNode's idle wait between two pulls from the SuperLink
(a fixed 3 s in flwr 1.42) and this executor's wait for a task, both backing off from 1 ms after
a message: a protocol round then takes milliseconds on loopback instead of seconds. It only
changes how often Flower polls, not what it sends.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import socket
import sys
import threading
import time as _time
from types import SimpleNamespace

__all__ = ["main", "free_port"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fast_clock(poll: float) -> SimpleNamespace:
    """A ``time`` module for Flower's SuperNode loop whose idle waits back off from 1 ms to ``poll`` seconds.

    Flower's loop sleeps 3 s when the SuperLink has no message for the node and 0.5 s while the
    ClientApp's reply is not ready; here the first idle wait after a message lasts 1 ms and each
    further one doubles, up to ``poll`` (fast replies during a protocol, little polling when idle).
    """
    state = {"wait": 0.001}

    def sleep(seconds: float) -> None:
        if seconds >= 1.0:  # idle: nothing to pull from the SuperLink
            _time.sleep(state["wait"])
            state["wait"] = min(2 * state["wait"], poll)
        else:  # a message came and its reply is being made: poll fast again afterwards
            state["wait"] = 0.001
            _time.sleep(min(float(seconds), 0.002))

    names = {k: getattr(_time, k) for k in dir(_time) if not k.startswith("_")}
    return SimpleNamespace(**{**names, "sleep": sleep})


def _load(ref: str):
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _fast_pulls(pull_objects, poll: float):
    """Flower's ``pull_objects`` retrying a missing object after ``poll / 4`` seconds, not 1 s.

    A message is listed before its objects have all arrived (from the ServerApp at the SuperLink,
    from the SuperLink at the node); flwr 1.42's first retry after a second would add a second
    to the round.
    """
    return functools.partial(pull_objects, initial_backoff=poll / 4, backoff_cap=poll)


def _pull_task_input(client, poll: float):
    """Flower's ``pull_task_input`` (run_clientapp) with a short retry for the message's objects.

    A task can be acquired while its message's objects are still on their way from the SuperLink;
    it is pulled with :func:`_fast_pulls`' retries.
    """
    from flwr.common.serde import context_from_proto
    from flwr.proto.node_pb2 import Node
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullTaskInputRequest
    from flwr.app import Message
    from flwr.supercore.inflatable.inflatable_protobuf_utils import (make_confirm_message_received_fn_protobuf,
                                                                     make_pull_object_fn_protobuf)
    from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
    from flwr.supercore.task_identity import TaskIdentity

    res = client.PullTaskInput(PullTaskInputRequest())
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = res.task_id, res.run.run_id, res.context.node_id
    context = context_from_proto(res.context)
    pulled = client.PullMessages(PullAppMessagesRequest())
    if not pulled.messages_list:
        raise RuntimeError("no message came with the task.")
    node, tree = Node(node_id=context.node_id), pulled.message_object_trees[0]
    message = pull_and_inflate_object_from_tree(
        tree, make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(client.ConfirmMessageReceived, node, context.run_id),
        return_type=Message, initial_backoff=poll / 4, backoff_cap=poll)  # as _fast_pulls
    message.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's: the id is not in the deflated message
    return message, context


def _execute(runtime: str, app_ref: str, poll: float) -> None:
    """Take this node's ClientApp tasks from its Runtime API and answer them in this process, forever."""
    from flwr.common.constant import SubStatus
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

    app = _load(app_ref)

    def connect(*interceptors):
        return RuntimeHttpClient.from_server_address(server_address=runtime, insecure=True, root_certificates=None,
                                                     interceptors=list(interceptors),
                                                     retry_invoker=make_simple_http_retry_invoker())

    class TaskToken(RuntimeTokenHttpInterceptor):
        """Flower's task-token header, set anew for each task (one connection for all tasks)."""

        def __init__(self) -> None:
            self._token = ""

    control = connect(RuntimeVersionHttpInterceptor(component_name="SuperExec"))
    token = TaskToken()
    task = connect(RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"), token)
    pause = poll
    while True:
        try:
            res = control.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]))
        except Exception:  # the Runtime API is not up yet, or restarting
            _time.sleep(0.2)
            continue
        if not (res.HasField("task") and res.token):
            _time.sleep(pause)
            pause = min(2 * pause, poll)
            continue
        pause = 0.001
        token._token = res.token
        context = None
        try:
            message, context = _pull_task_input(task, poll)
            reply = app(message=message, context=context)
            push_message(task, reply, context)
            push_task_output(task, context, SubStatus.COMPLETED, "")
        except Exception as err:  # this task fails (the server times it out); the node keeps serving
            print(f"privfedstat.flower.node: task failed: {err!r}", file=sys.stderr, flush=True)
            push_task_output(task, context, SubStatus.FAILED, repr(err))


def main(argv: list[str] | None = None) -> None:
    """Run the SuperNode and its persistent ClientApp executor (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--client-app", default="privfedstat.flower.app:client_app")
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--port", type=int, default=None)
    ours, flower_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if "--isolation" in flower_args:
        raise SystemExit("privfedstat.flower.node runs the ClientApp itself (--isolation process); do not pass --isolation.")
    port = ours.port or free_port()
    from flwr.supernode.cli.flower_supernode import flower_supernode

    loop = importlib.import_module("flwr.supernode.start_client_internal")
    loop.time = _fast_clock(ours.poll)
    loop.pull_objects = _fast_pulls(loop.pull_objects, ours.poll)
    threading.Thread(target=_execute, args=(f"127.0.0.1:{port}", ours.client_app, ours.poll), daemon=True,
                     name="privfedstat-clientapp").start()
    sys.argv = ["flower-supernode", *flower_args, "--isolation", "process", "--host", "127.0.0.1", "--port", str(port)]
    flower_supernode()


if __name__ == "__main__":
    main()
