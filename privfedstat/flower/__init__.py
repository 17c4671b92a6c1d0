"""privfedstat's protocols on Flower (flwr 1.42, Message API): a ServerApp over the Grid, a ClientApp per client.

Install with the extra ``flower`` (``pip install "privfedstat[flower]"``). The pieces:

- :mod:`~privfedstat.flower.proxy`: :class:`FlowerClients`, the clients seen from the ServerApp
  (each verb one Message per client), and :func:`fit_on_grid`, an estimator's unchanged ``fit``
  on them;
- :mod:`~privfedstat.flower.client`: :class:`ClientNode`, one client's rows and verbs on its node,
  privatizing there;
- :mod:`~privfedstat.flower.wire`: the Message encoding and the server's checks of a reply;
- :mod:`~privfedstat.flower.app`: the ``server_app`` and ``client_app`` components;
- :mod:`~privfedstat.flower.node`: a SuperNode answering its messages with the ClientApp in its
  own, persistent process (``python -m privfedstat.flower.node``);
- :mod:`~privfedstat.flower.launch`: :class:`LocalFederation`, SuperLink and nodes on loopback
  (``privfedstat flower-demo``).
"""

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("privfedstat.flower needs Flower: pip install 'privfedstat[flower]' (flwr==1.42.0).") from exc

from .client import ClientNode
from .proxy import FlowerClients, fit_on_grid

__all__ = ["FlowerClients", "fit_on_grid", "ClientNode"]
