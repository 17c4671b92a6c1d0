"""Misbehaving ClientApps for the deployment tests (each answers like privfedstat's until it misbehaves).

- ``rogue``: its noisy counts (``count_at_most``) are oversized, and its noisy gradients with clip 0.5 carry no
  release record;
- ``die_at_3`` / ``die_at_11``: the node's process kills itself (SIGKILL) when it receives its 3rd /
  11th ``gradients`` request with clip 0.75 of the run (the kill test's fits use that clip, the others not).
"""

from __future__ import annotations

import os
import signal

import numpy as np
from _fakegrid import npy_bytes
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from privfedstat.flower.app import client_app as honest
from privfedstat.flower.wire import decode_request

rogue = ClientApp()


@rogue.query()
def _rogue(msg: Message, context: Context) -> Message:
    reply = honest(msg, context)
    if msg.metadata.group_id == "count_at_most" and "arrays/values" in reply.content["message"]:
        reply.content["message"]["arrays/values"] = npy_bytes(np.zeros(100_000))
    if msg.metadata.group_id == "gradients" and decode_request(msg.content)[3].get("clip") == 0.5:
        reply.content["message"]["meta/n_releases"] = 0
    return reply


def _mortal(at: int) -> ClientApp:
    app, seen = ClientApp(), {}

    @app.query()
    def _query(msg: Message, context: Context) -> Message:
        verb, _, _, kwargs = decode_request(msg.content)
        if verb == "gradients" and kwargs.get("clip") == 0.75:
            seen[context.run_id] = seen.get(context.run_id, 0) + 1
            if seen[context.run_id] == at:
                os.kill(os.getpid(), signal.SIGKILL)
        return honest(msg, context)

    return app


die_at_3, die_at_11 = _mortal(3), _mortal(11)
