"""An in-memory stand-in for flwr's Grid: Messages go straight to ClientNode objects (no processes)."""

from __future__ import annotations

import io
import itertools
from types import SimpleNamespace

import numpy as np

from privfedstat.flower.client import ClientNode


class FakeGrid:
    """Routes each request to ``nodes[node_id]`` (a ClientNode, or a callable content -> content)."""

    def __init__(self, nodes: dict) -> None:
        self.nodes = nodes
        self._ids = itertools.count()
        self._out: dict[str, SimpleNamespace] = {}

    def get_node_ids(self):
        return list(self.nodes)

    def create_message(self, content, message_type, dst_node_id, group_id=""):
        return SimpleNamespace(content=content, dst=dst_node_id)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            mid = f"m{next(self._ids)}"
            node = self.nodes.get(msg.dst)
            if node is not None:
                answer = node.handle(msg.content) if isinstance(node, ClientNode) else node(msg.content)
                if answer is not None:
                    self._out[mid] = SimpleNamespace(content=answer, metadata=SimpleNamespace(reply_to_message_id=mid),
                                                     has_error=lambda: False)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids):
        return [self._out.pop(mid) for mid in list(message_ids) if mid in self._out]


def npy_bytes(a) -> bytes:
    """``a`` as .npy bytes, as a reply's arrays travel (for rogue clients that replace them)."""
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()
