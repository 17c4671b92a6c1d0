"""An in-memory Grid that also carries Flower Messages: SecAgg+ rounds between a server and ClientNodes, no processes.

Used by tests/flower/test_secagg.py and benchmarks/bench_secagg_flower.py (``--bytes``).
"""

from __future__ import annotations

import copy

from _fakegrid import FakeGrid
from flwr.app import Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

from privfedstat.flower.secagg import secure_train


def _size(content: RecordDict) -> int:
    """Bytes of a Message's content as Flower serializes it."""
    from flwr.common.serde import recorddict_to_proto

    return recorddict_to_proto(content).ByteSize()


def server_identity() -> None:
    """Set the run and node ids a ServerApp's process has (Flower sets them; here the calling process is the server)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = 1, 0, 1


class SecAggGrid(FakeGrid):
    """FakeGrid that also carries Flower Messages to each node's ClientApp (the SecAgg+ rounds).

    ``masked`` keeps every vector the server received in a collect-masked-vectors stage, by node id;
    ``drop = {node_id: k}`` makes a node stop answering (every message) from its k-th SecAgg+ fit stage on;
    ``sent`` and ``received`` count the bytes of every request and reply (their serialized RecordDicts).
    """

    def __init__(self, nodes: dict, drop: dict | None = None) -> None:
        super().__init__(nodes)
        self.apps, self.contexts, self.masked, self.drop = {}, {}, [], dict(drop or {})
        self.fits = dict.fromkeys(nodes, 0)
        self.sent = self.received = 0
        for nid, node in nodes.items():
            app = ClientApp()
            app.train(mods=[secaggplus_mod])(lambda msg, ctx, node=node: secure_train(node, msg))
            self.apps[nid], self.contexts[nid] = app, Context(1, nid, {}, RecordDict(), {})

    def push_messages(self, messages):
        messages = list(messages)
        if not messages or not isinstance(messages[0], Message):  # privfedstat's plain requests
            self.sent += sum(_size(m.content) for m in messages)
            ids = super().push_messages(messages)
            self.received += sum(_size(self._out[mid].content) for mid in ids if mid in self._out)
            return ids
        ids = []
        for msg in messages:
            msg = copy.deepcopy(msg)  # on the wire each node gets its own copy (the mod pops the stage from it)
            self.sent += _size(msg.content)
            nid, mid = msg.metadata.dst_node_id, f"s{next(self._ids)}"
            ids.append(mid)
            stage = msg.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]
            if stage == "collect_masked_vectors":
                self.fits[nid] += 1
            if nid in self.drop and self.fits[nid] >= self.drop[nid]:
                self.nodes.pop(nid, None)  # gone: no more replies to any request
                continue
            msg.metadata.__dict__["_message_id"] = mid
            reply = self.apps[nid](message=msg, context=self.contexts[nid])
            reply.metadata.__dict__["_src_node_id"] = nid
            reply.metadata.__dict__["_reply_to_message_id"] = mid
            if stage == "collect_masked_vectors":
                vec = reply.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]
                self.masked.append((nid, [bytes_to_ndarray(b) for b in vec]))
            self.received += _size(reply.content)
            self._out[mid] = reply
        return ids
