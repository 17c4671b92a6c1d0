"""A ClientApp for the SecAgg+ deployment test: privfedstat's, until its node's process kills itself (SIGKILL) when
the collect-masked-vectors stage of its 3rd secure round with clip 0.75 of the run arrives (before it sends anything)."""

from __future__ import annotations

import os
import signal

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from privfedstat.flower.app import client_app as honest
from privfedstat.flower.secagg import REQUEST_KEY, _request_from_bytes
from privfedstat.flower.wire import decode_request

die_in_round_3, _seen = ClientApp(), {}


@die_in_round_3.query()
def _query(msg: Message, context: Context) -> Message:
    return honest(msg, context)


@die_in_round_3.train()
def _train(msg: Message, context: Context) -> Message:
    fitins = msg.content.config_records.get("fitins.config")
    if fitins is not None and REQUEST_KEY in fitins:  # the fit stage: the only SecAgg+ message that carries a request
        _, _, _, kwargs = decode_request(_request_from_bytes(bytes(fitins[REQUEST_KEY])))
        if kwargs.get("clip") == 0.75:
            _seen[context.run_id] = _seen.get(context.run_id, 0) + 1
            if _seen[context.run_id] == 3:
                os.kill(os.getpid(), signal.SIGKILL)
    return honest(msg, context)
