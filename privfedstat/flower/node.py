"""``python -m privfedstat.flower.node``: a Flower SuperNode that answers its messages with the ClientApp in its own process.

Flower's ``flower-supernode`` hands every message to a ClientApp outside it, through its Runtime
API (an HTTP server in the SuperNode; in ``--isolation subprocess`` a fresh ClientApp process per
message). A privfedstat client holds state between messages (its rows, its noise stream, its
protocol state), so it must live in one persistent process; and each hop of the Runtime API costs
about eight local HTTP requests per message. This module is therefore a SuperNode whose loop is
Flower's own (:func:`flwr.supernode.start_client_internal`'s connection, pull, store and push
functions, and Flower's own command-line flags: ``--superlink``, ``--insecure`` or
``--root-certificates``, ``--auth-supernode-private-key``/``--auth-supernode-public-key``,
``--node-config``, ``--trusted-entities``, ``--health-server-address``, ...) but which, between
pulling a message and pushing its reply, runs the ClientApp (default
``privfedstat.flower.app:client_app``) on it in this process. No Runtime API is started: nothing
listens on the node. Killing this process kills the client; SIGTERM or SIGINT ends it within
:data:`EXIT_GRACE` seconds (:func:`exit_within`), whatever it is computing.

Runtime dependency installation is never done and the FAB a run brings is not installed either:
the node runs the ClientApp named here (the installed privfedstat). This depends on the internals
of the pinned flwr 1.42 (module-private functions of ``flwr.supernode.start_client_internal``).

Polling: a SuperNode learns of a message only by asking the SuperLink. Flower's loop asks every
3 s; here each wait after a reply is planned from the last gaps between a reply and the next
message (:class:`Polls`): few requests per round and little delay, whatever a round lasts.
``--poll S`` (default 0.5 s) caps every wait, which bounds the delay of the first message after
an idle spell. It changes how often the node asks, not what is sent.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import signal
import socket
import sys
import threading
import time

__all__ = ["main", "free_port", "Polls", "exit_within", "EXIT_GRACE"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Polls:
    """The waits of a node between asking the SuperLink for its next message.

    After a reply the node asks at ``g * STEPS`` seconds (then growing by half each time), where
    ``g`` estimates the gap between a reply and the next message: the midpoint of the two asks
    that bracket the last gap, or 0.8 of the first ask when that one found the message (the gap
    was shorter), taken at once when below ``g`` and at most ``2 g`` when above (a long idle
    spell between two fits does not make the next rounds slow). ``g`` so settles near a high
    quantile of the gaps. Each ask costs the SuperLink a request (a few milliseconds of its one
    Python process, which is what a round on loopback waits for), each late ask delays the node;
    planned this way a node asks about 3 times a round (measurements in ``benchmarks/RESULTS.md``,
    Flower deployment). Every wait is at most ``cap`` seconds; before the first reply the node asks
    every ``cap``.

    Parameters
    ----------
    cap : float
        Longest wait, seconds.
    gap : float
        Initial estimate of ``g``, seconds.
    """

    STEPS = (1.0, 1.5, 2.2, 3.0)

    def __init__(self, cap: float = 0.5, gap: float = 0.01) -> None:
        if not cap > 0:
            raise ValueError(f"cap must be positive, got {cap!r}.")
        self.cap, self.gap = float(cap), float(gap)
        self._since: float | None = None  # when the last reply went out (None: idle)
        self._asked: list[float] = []  # offsets of the asks since then

    def replied(self, now: float) -> None:
        """A reply has been pushed at ``now``: plan the asks for the next message."""
        self._since, self._asked = now, []

    def arrived(self, now: float) -> None:
        """A message came at ``now`` (the last ask found it): update the gap estimate."""
        if self._since is not None and self._asked:
            hi = self._asked[-1]
            seen = 0.5 * (self._asked[-2] + hi) if len(self._asked) > 1 else 0.8 * hi
            self.gap = max(1e-3, seen if seen < self.gap else min(seen, 2 * self.gap))
        self._since = None

    def wait(self, now: float) -> float:
        """Seconds to wait (from ``now``) before the next ask; the ask is then counted."""
        if self._since is None:
            return self.cap
        elapsed = now - self._since
        k = len(self._asked)
        target = self.gap * self.STEPS[k] if k < len(self.STEPS) else (elapsed + 1e-3) * 1.5
        pause = min(max(target - elapsed, 0.0), self.cap)
        self._asked.append(elapsed + pause)
        return pause


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


def answer(state, store, app, run_id: int) -> None:
    """Run the ClientApp ``app`` on the message of run ``run_id`` just stored; store its reply for the push.

    What Flower's Runtime API does for an external ClientApp, in this process: the node's task
    for the message is claimed, started and finished; the message is inflated from the node's
    object store (and its objects dropped, as when a ClientApp confirms receipt); the run's context
    is the one Flower keeps for the run series. A ClientApp that raises sends Flower's error reply
    (the server counts the client as failed at once instead of waiting for a timeout).
    """
    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode, Status, SubStatus
    from flwr.supercore.inflatable.inflatable_object import iterate_object_tree
    from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
    from flwr.supernode.start_client_internal import _insert_message

    task = next(iter(state.get_tasks(run_ids=[run_id], statuses=[Status.PENDING], order_by="pending_at", limit=1)), None)
    if task is not None and state.claim_task(task.task_id):
        state.activate_task(task_id=task.task_id)
    stored = state.get_messages_legacy(run_ids=[run_id], is_reply=False, limit=1)
    if not stored:
        return
    head = stored[0]
    mid = head.metadata.message_id
    state.record_message_processing_start(message_id=mid)
    tree = store.get_object_tree(mid)
    contents = {t.object_id: store.get(t.object_id) for t in iterate_object_tree(tree)}
    store.delete(mid)
    status, details = SubStatus.COMPLETED, ""
    try:
        message = inflate_object_from_contents(tree.object_id, contents)
        if not isinstance(message, Message):
            raise TypeError(f"the node received a {type(message).__name__}, not a Message.")
        message.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's: the id is not in the deflated message
        context = state.get_run_series_context(state.get_run(run_id).series_id)
        reply = app(message=message, context=context)
    except Exception as err:  # this message fails; the node keeps serving
        print(f"privfedstat.flower.node: the ClientApp failed: {err!r}", file=sys.stderr, flush=True)
        status, details = SubStatus.FAILED, repr(err)
        reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=repr(err)), reply_to=head)
    state.record_message_processing_end(message_id=mid)
    _insert_message(reply, state, store)
    if task is not None:
        state.finish_task(task.task_id, sub_status=status, details=details)


#: seconds a node may take to leave gracefully after SIGTERM or SIGINT before it exits regardless (Flower's own
#: graceful exit took 1.3-1.9 s on loopback, with the SuperLink up or gone)
EXIT_GRACE = 2.0


def exit_within(grace: float) -> None:
    """Make this process exit within ``grace`` seconds of a SIGTERM or SIGINT, whatever its main thread is doing.

    Python runs a signal's handler (Flower's graceful exit) in the main thread between bytecodes,
    so a main thread blocked in a call or busy in a long verb could delay it indefinitely. The C
    level handler writes the signal's number to a wakeup socket at once; a daemon thread reading it
    gives the graceful exit ``grace`` seconds, then ends the process (``os._exit``, code 128 + signal).
    """
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    stops = {signal.SIGTERM, signal.SIGINT}

    def watch(writer: socket.socket) -> None:  # holds the writing end: the wakeup fd stays open
        while True:
            received = set(reader.recv(64)) & stops
            if received:
                time.sleep(grace)
                os._exit(128 + min(received))

    threading.Thread(target=watch, args=(writer,), name="exit-within", daemon=True).start()


def serve(config, app, cap: float) -> None:
    """The SuperNode's loop (Flower's, see the module docstring) with ``app`` answering in this process, forever.

    ``config`` is Flower's parsed SuperNode configuration (its command-line flags).
    """
    from flwr.supercore.exit import register_signal_handlers
    from flwr.supercore.grpc_health import run_health_server_grpc_no_tls
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.telemetry import EventType
    from flwr.supernode.nodestate import NodeStateFactory

    loop = importlib.import_module("flwr.supernode.start_client_internal")
    loop.pull_objects = _fast_pulls(loop.pull_objects, 0.1)
    servers = []
    if config.health_server_address is not None:
        servers.append(run_health_server_grpc_no_tls(config.health_server_address))
    register_signal_handlers(event_type=EventType.RUN_SUPERNODE_LEAVE, exit_message="SuperNode terminated gracefully.",
                             grpc_servers=servers)
    exit_within(EXIT_GRACE)
    factory = NodeStateFactory(objectstore_factory=ObjectStoreFactory())
    state, store = factory.state(), factory.objectstore_factory.store()
    insecure = config.root_certificates is None if config.insecure is None else config.insecure
    polls = Polls(cap)
    with loop._init_connection(server_address=config.server_address, insecure=insecure,
                               root_certificates=config.root_certificates,
                               authentication_keys=config.authentication_keys, max_retries=config.max_retries,
                               max_wait_time=config.max_wait_time) as conn:
        node_id, receive, send, get_run, get_fab, pull_object, push_object, confirm = conn
        state.set_node_id(node_id)
        while True:
            run_id = loop._pull_and_store_message(state=state, object_store=store, node_config=config.node_config,
                                                  receive=receive, get_run=get_run, get_fab=get_fab,
                                                  pull_object=pull_object, confirm_message_received=confirm,
                                                  trusted_entities=config.trusted_entities)
            if run_id is None:
                time.sleep(polls.wait(time.monotonic()))
                continue
            polls.arrived(time.monotonic())
            answer(state, store, app, run_id)
            loop._push_messages(state=state, object_store=store, send=send, push_object=push_object)
            polls.replied(time.monotonic())


def main(argv: list[str] | None = None) -> None:
    """Run the SuperNode with its ClientApp in this process (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m privfedstat.flower.node", description=__doc__.splitlines()[0],
                                     add_help=False)
    parser.add_argument("--client-app", default="privfedstat.flower.app:client_app",
                        help="module:attribute of the ClientApp (default: privfedstat's)")
    parser.add_argument("--poll", type=float, default=0.5, help="longest wait between two asks for a message, s")
    ours, flower_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(flower_args):
        parser.print_help()
        print("\nand Flower's flower-supernode flags (--isolation, --host, --port and --ssl-* configure its Runtime API, "
              "which this node does not start):\n")
    if "--isolation" in flower_args:
        raise SystemExit("privfedstat.flower.node runs the ClientApp itself; do not pass --isolation.")
    if not ours.poll > 0:
        raise SystemExit(f"--poll must be positive, got {ours.poll}.")
    from flwr.supernode.cli.flower_supernode import _parse_supernode_lifespan_config

    sys.argv = ["flower-supernode", *flower_args]
    config = _parse_supernode_lifespan_config()
    serve(config, _load(ours.client_app), ours.poll)


if __name__ == "__main__":
    main()
