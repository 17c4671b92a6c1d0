"""The Channel: the only path from the clients to the server.

Every value derived from client data passes through :meth:`Channel.release` (a Gaussian mechanism
whose output is sent), or through :meth:`Channel.perturb` (a Gaussian mechanism whose output stays
on the client, as in local noisy gradient steps) followed by :meth:`Channel.send` (sending a
post-processing of earlier perturbed outputs). The channel derives the noise scale from the stated
sensitivity and the GDP budget of the release, draws the noise from each client's own stream,
records the release in the :class:`~privfedstat.privacy.ledger.PrivacyLedger`, and counts rounds
and floats sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..privacy.ledger import PrivacyLedger, Release
from ..privacy.mechanisms import ClientNoise

__all__ = ["Channel", "Communication"]


@dataclass(frozen=True)
class Communication:
    """Client-to-server communication of one fit.

    Attributes
    ----------
    rounds : int
        Number of upload rounds (every client sends once per round).
    floats_per_client : int
        Floats each client sent in total.
    total_floats : int
        Floats received by the server (``floats_per_client * n_clients``).
    """

    rounds: int
    floats_per_client: int
    total_floats: int


class Channel:
    """Privatize, record and transmit client messages.

    Parameters
    ----------
    sizes : ndarray of shape (n_clients,)
        Client sample sizes (public, as in the paper).
    noise : ClientNoise
        Per-client Gaussian streams.
    ledger : PrivacyLedger
    """

    def __init__(self, sizes: np.ndarray, noise: ClientNoise, ledger: PrivacyLedger) -> None:
        self.sizes = np.asarray(sizes)
        self.noise = noise
        self.ledger = ledger
        self.rounds = 0
        self.floats_per_client = 0
        self._pending = False  # a perturbed value is waiting to be sent

    def _sigma(self, sensitivity, mu) -> tuple[np.ndarray, np.ndarray]:
        m = self.sizes.size
        sens = np.array(sensitivity, dtype=np.float64)
        mu = np.asarray(mu, dtype=np.float64)
        if sens.ndim == 0:
            sens = np.full(m, float(sens))
        if not (mu > 0).all():
            raise ValueError("every release needs mu > 0.")
        finite_mu = np.isfinite(mu)
        if finite_mu.any() and not np.isfinite(sens[finite_mu] if mu.ndim else sens).all():
            raise ValueError(
                "a release with infinite sensitivity cannot be private: set a finite clipping bound "
                "(clip=...) or use mu=float('inf')."
            )
        if finite_mu.all():
            return sens, sens / mu
        with np.errstate(invalid="ignore"):
            return sens, np.where(finite_mu, sens / mu, 0.0)

    def _noisy(self, values: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        if values.shape[0] != self.sizes.size:
            raise ValueError(f"expected one message per client ({self.sizes.size}), got {values.shape[0]}.")
        if not np.any(sigma > 0):
            return values.copy()
        z = self.noise.standard_normal(values.shape[1:])
        return values + sigma.reshape((-1,) + (1,) * (values.ndim - 1)) * z

    def _transmit(self, values: np.ndarray) -> None:
        self.rounds += 1
        self.floats_per_client += int(np.prod(values.shape[1:], dtype=np.int64))
        self._pending = False

    def release(self, values: np.ndarray, *, sensitivity, mu, stage: str, weights: np.ndarray) -> np.ndarray:
        """Add calibrated noise to one message per client, record it, send it.

        Parameters
        ----------
        values : ndarray of shape (n_clients, ...)
            Row i is client i's statistic.
        sensitivity : float or ndarray of shape (n_clients,)
            L2 sensitivity of each client's statistic (one datum replaced).
        mu : float or ndarray
            GDP budget of this release for each client; noise sd is ``sensitivity / mu``.
        stage : str
            Label for the ledger.
        weights : ndarray of shape (n_clients,)
            Weights with which the server aggregates these messages (the published quantity is
            ``sum_i weights[i] * message_i``); used for third-party accounting.
        """
        sens, sigma = self._sigma(sensitivity, mu)
        noisy = self._noisy(values, sigma)
        self.ledger.record(Release(stage, self.rounds, "aggregated", sens, sigma, np.asarray(weights, dtype=np.float64)))
        self._transmit(noisy)
        return noisy

    def perturb(self, values: np.ndarray, *, sensitivity, mu, stage: str) -> np.ndarray:
        """Add calibrated noise to a value that stays on the client (e.g. a local noisy step); record it."""
        sens, sigma = self._sigma(sensitivity, mu)
        noisy = self._noisy(values, sigma)
        self.ledger.record(Release(stage, self.rounds, "local", sens, sigma))
        self._pending = True
        return noisy

    def send(self, values: np.ndarray) -> np.ndarray:
        """Send values that are post-processing of the clients' perturbed outputs.

        Raises ``RuntimeError`` if nothing was perturbed since the last transmission, which would
        mean raw client data is being sent.
        """
        if not self._pending:
            raise RuntimeError("Channel.send: nothing was privatized since the last upload; use release().")
        values = np.asarray(values, dtype=np.float64)
        self._transmit(values)
        return values.copy()

    @property
    def communication(self) -> Communication:
        """Rounds and floats sent so far."""
        return Communication(self.rounds, self.floats_per_client, self.floats_per_client * self.sizes.size)
