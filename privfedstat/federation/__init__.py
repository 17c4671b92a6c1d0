"""Federation: client oracles and the channel through which every client message passes."""

from .channel import Channel, Communication
from .oracle import ClientOracle, GLMOracle, MultinomialOracle, make_oracle

__all__ = ["Channel", "Communication", "ClientOracle", "GLMOracle", "MultinomialOracle", "make_oracle"]
