"""Federation: the client/server seam.

Clients (:mod:`.clients`) own the data and the noise and answer verbs with privatized replies; the
server receives them through the :class:`Channel` (which builds the ledger), combines them with
:func:`aggregate` and samples participants (:class:`Participation`). :mod:`.oracle` holds the
in-process clients' numba computations.
"""

from .channel import FAILURE_POLICIES, Channel, Communication
from .clients import FailingData, InProcessClients, Reply, newton_step, privatize
from .oracle import ClientOracle, GLMOracle, MultinomialOracle, make_oracle
from .server import Participation, aggregate, effective_weights, resolve_participation

__all__ = ["Channel", "Communication", "FAILURE_POLICIES", "InProcessClients", "FailingData", "Reply", "privatize",
           "newton_step", "aggregate", "effective_weights", "Participation", "resolve_participation", "ClientOracle",
           "GLMOracle", "MultinomialOracle", "make_oracle"]
