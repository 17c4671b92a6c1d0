"""A misbehaving ClientApp for the deployment tests: it answers like privfedstat's, but its noisy counts are oversized."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, Context, Message
from flwr.clientapp import ClientApp

from privfedstat.flower.app import client_app as honest

client_app = ClientApp()


@client_app.query()
def _query(msg: Message, context: Context) -> Message:
    reply = honest(msg, context)
    if msg.metadata.group_id == "count_at_most" and "values" in reply.content["arrays"]:
        reply.content["arrays"]["values"] = Array(np.zeros(100_000))
    return reply
