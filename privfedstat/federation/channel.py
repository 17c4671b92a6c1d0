"""The Channel: the server's end of the seam, the only path by which client messages reach the server.

Clients privatize their messages themselves (:mod:`privfedstat.federation.clients`) and attach a
release record to each. :meth:`Channel.receive` is where the server takes a reply: it records the
releases in the :class:`~privfedstat.privacy.ledger.PrivacyLedger` (adding the round and the
weights with which the server will aggregate), applies the fit's failure policy, and counts rounds,
messages and floats sent. The server never sees a client's data, only replies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._validation import some
from ..exceptions import ClientFailureError
from ..privacy.ledger import PrivacyLedger
from .clients import Reply

__all__ = ["Channel", "Communication", "FAILURE_POLICIES"]

#: what the server does when a client fails while answering: stop the fit, or go on without it
FAILURE_POLICIES = ("raise", "skip")


@dataclass(frozen=True)
class Communication:
    """Client-to-server communication of one fit: what was actually sent.

    This is the server's view: with Poisson participation ``senders`` and ``total_floats`` reveal
    how many clients took part in each round, which the third-party (amplified) epsilon assumes
    hidden; publish ``rounds`` and ``floats_per_client`` only (as ``summary()`` does), like
    :meth:`~privfedstat.privacy.ledger.PrivacyLedger.public_view` for the ledger.

    Attributes
    ----------
    rounds : int
        Number of upload rounds.
    floats_per_client : int
        Floats a client sends that takes part in every round (the protocol's per-client upload,
        Table 1 of the core paper).
    total_floats : int
        Floats the server received, summed over the clients that sent in each round: with partial
        participation or failed clients less than ``floats_per_client * n_clients``.
    senders : tuple of int
        Number of clients that sent in each upload round (``len(senders) == rounds``).
    setup : tuple of (str, int)
        The rounds of the setup before the protocol, by stage (the private column scaling, the clip
        search), counted in ``rounds``; ``rounds - setup_rounds`` are the protocol's, its diagnostics'
        and its inference's.
    """

    rounds: int
    floats_per_client: int
    total_floats: int
    senders: tuple[int, ...]
    setup: tuple[tuple[str, int], ...] = ()

    @property
    def setup_rounds(self) -> int:
        """Upload rounds of the setup stages (``setup``), before the protocol's first round."""
        return sum(n for _, n in self.setup)

    @property
    def messages(self) -> int:
        """Client messages received in all (``sum(senders)``; k p M over k rounds at participation p of M clients)."""
        return sum(self.senders)


class Channel:
    """Receive, record and count client replies (the server side).

    Parameters
    ----------
    sizes : ndarray of shape (n_clients,)
        Client sample sizes (public, as in the paper).
    ledger : PrivacyLedger
    on_client_failure : {"raise", "skip"}, default "raise"
        A reply in which a requested client failed raises :class:`~privfedstat.ClientFailureError`
        (``"raise"``), or is used without that client, which takes no further part (``"skip"``:
        the aggregation renormalises the weights over the clients that answered).
    """

    def __init__(self, sizes: np.ndarray, ledger: PrivacyLedger, on_client_failure: str = "raise") -> None:
        if on_client_failure not in FAILURE_POLICIES:
            raise ValueError(f"on_client_failure must be one of {FAILURE_POLICIES}, got {on_client_failure!r}.")
        self.sizes = np.asarray(sizes)
        self.ledger = ledger
        self.on_client_failure = on_client_failure
        self.rounds = 0
        self.floats_per_client = 0
        self.total_floats = 0
        self.senders: list[int] = []
        self.setup: dict[str, int] = {}  # the setup stages' rounds, by stage (end_setup_stage)
        self.live = np.ones(self.sizes.size, dtype=bool)  # clients that have not failed
        self.on_receive: Callable[[], object] | None = None  # told of every reply (the fit's progress bar)

    def receive(self, reply: Reply, *, weights: np.ndarray | None = None, sent: bool = True,
                sampling_rate: float = 1.0, noise_multiplier: float | None = None) -> np.ndarray:
        """Record a reply's releases and return its values (rows of clients that did not answer are NaN).

        Every release of the reply reached the server, so it is recorded first, whatever follows: the
        error the clients' computation stopped with (:attr:`Reply.error`, raised then) and the failure
        policy, which raises on a failed client after the messages of the others in that round are
        in the ledger.

        Parameters
        ----------
        reply : Reply
        weights : ndarray of shape (n_clients,), optional
            The weights with which the server aggregates these messages (the published quantity is
            ``sum_i weights[i] * message_i``; third-party accounting uses them). Required when the
            reply holds an "aggregated" release.
        sent : bool, default True
            Whether the reply counts as an upload round (False for diagnostics that a non-private
            fit reads without communication).
        sampling_rate : float, default 1.0
            The Poisson rate q with which the server sampled the clients it asked (recorded for
            the amplified client-level accounting; 1 when it asked every live client or a cohort).
        noise_multiplier : float, optional
            Recorded on the releases of a client-level Poisson round that the server tops up with noise
            for the clients that did not send (see :class:`~privfedstat.privacy.ledger.Release`).
        """
        if self.on_receive is not None:
            self.on_receive()
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.ledger.record_reply(reply.releases, round=self.rounds, weights=w, sampling_rate=sampling_rate,
                                 noise_multiplier=noise_multiplier)
        if reply.leak is not None:
            self.ledger.add_leak(reply.leak)
        if sent:
            floats = math.prod(reply.values.shape[1:])  # Python ints: no numpy reduction per round
            senders = int(np.count_nonzero(reply.answered))
            self.rounds += 1
            self.floats_per_client += floats
            self.total_floats += floats * senders
            self.senders.append(senders)
        if reply.error is not None:
            raise reply.error
        if some(reply.failed):
            self.live &= ~reply.failed
            if self.on_client_failure == "raise":
                raise ClientFailureError(
                    f"client(s) {np.flatnonzero(reply.failed).tolist()} failed while answering "
                    f"{reply.releases[0].stage if reply.releases else 'a request'!r}; pass on_client_failure='skip' "
                    "to continue without them.")
            if not self.live.any():
                raise ClientFailureError("every client has failed; nothing is left to fit.")
        return reply.values

    def end_setup_stage(self, stage: str) -> None:
        """Count the rounds since the previous setup stage ended as ``stage``'s (none: not listed)."""
        n = self.rounds - sum(self.setup.values())
        if n:
            self.setup[stage] = n

    @property
    def communication(self) -> Communication:
        """Rounds, floats and messages sent so far."""
        return Communication(self.rounds, self.floats_per_client, self.total_floats, tuple(self.senders),
                             tuple(self.setup.items()))
