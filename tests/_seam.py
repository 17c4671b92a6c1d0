"""A view of a clients object that exposes only what the server may touch (shared by the seam tests)."""

from __future__ import annotations

from privfedstat.federation import Reply, verbs
from privfedstat.federation.clients import PUBLIC


class ServerView:
    """What the server may touch of the clients (any backend): verbs and public metadata; every reply is
    appended to ``replies`` as ``(verb, mu, reply)``."""

    def __init__(self, clients, replies: list) -> None:
        object.__setattr__(self, "_clients", clients)
        object.__setattr__(self, "_replies", replies)

    def __getattr__(self, name):
        if name in PUBLIC:
            return getattr(self._clients, name)
        if name not in verbs.names():
            raise AttributeError(f"the server reached for clients.{name}: not a verb or public metadata")
        verb = getattr(self._clients, name)

        def call(*args, **kwargs):
            if "clients" in kwargs:
                raise AssertionError("handles are passed to session.ask, not to the verbs")
            out = verb(*args, **kwargs)
            if isinstance(out, Reply):
                self._replies.append((name, kwargs.get("mu"), out))
            if name == "split_halves":
                return tuple(ServerView(h, self._replies) for h in out)
            return out

        return call
