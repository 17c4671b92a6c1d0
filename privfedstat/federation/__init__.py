"""Federation: the client/server seam.

Clients (:mod:`.clients`) own the data and the noise and answer verbs with privatized replies
(:mod:`.verbs`: the table of what each verb carries and releases); the server receives them through
the :class:`Channel` (which builds the ledger), combines them with :func:`aggregate` and samples
participants (:class:`Participation`). A fit's :class:`Session` (:mod:`.session`) holds its clients,
channel, participation and seeds and is how every stage asks the clients; :mod:`.queries` holds the
private queries several stages share; a protocol is given a :class:`Setup` and returns a
:class:`Run` (:mod:`.protocol`). :mod:`.oracle` holds the in-process clients' numba computations.
"""

from .channel import FAILURE_POLICIES, Channel, Communication
from .clients import FailingData, InProcessClients, Reply, privatize
from .oracle import ClientOracle, GLMOracle, MultinomialOracle, make_oracle
from .protocol import Run, Setup
from .server import Participation, aggregate, effective_weights, resolve_participation
from .session import Session
from .verbs import Verb

__all__ = ["Channel", "Communication", "FAILURE_POLICIES", "InProcessClients", "FailingData", "Reply", "privatize",
           "aggregate", "effective_weights", "Participation", "resolve_participation", "ClientOracle",
           "GLMOracle", "MultinomialOracle", "make_oracle", "Session", "Setup", "Run", "Verb"]
