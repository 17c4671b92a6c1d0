"""Server-side helpers every algorithm shares: the one aggregation function and participation sampling.

An algorithm's server loop (in :mod:`privfedstat.algorithms`) sends requests to the clients
(:mod:`~privfedstat.federation.clients`), takes their replies through the
:class:`~privfedstat.federation.channel.Channel` and combines them with :func:`aggregate`; each
round it may ask only a sample of the clients (:class:`Participation`), drawn from the server's own
random stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from .._validation import every
from ..exceptions import ClientFailureError

__all__ = ["aggregate", "effective_weights", "Participation", "resolve_participation"]


def effective_weights(weights: np.ndarray, answered: np.ndarray | None) -> np.ndarray:
    """``weights`` renormalised over the clients that answered (unchanged when all did).

    Raises :class:`~privfedstat.ClientFailureError` when no client with positive weight answered.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if answered is None or every(answered):
        return weights
    w = np.where(answered, weights, 0.0)
    total = float(w.sum())
    if not total > 0:
        raise ClientFailureError("no client with a positive weight answered this request.")
    return w / total


def aggregate(weights: np.ndarray | None, values: np.ndarray, answered: np.ndarray | None = None) -> np.ndarray:
    """The server's one aggregation: the weighted mean ``sum_i w_i message_i``, or the pooled sum, over the clients that answered.

    Parameters
    ----------
    weights : ndarray of shape (n_clients,) or None
        Aggregation weights w_i summing to 1 (renormalised over the clients that answered,
        :func:`effective_weights`); None for the pooled sum ``sum_i message_i`` (counts).
    values : ndarray of shape (n_clients, k)
        One message per client (rows of clients that did not answer are ignored).
    answered : ndarray of bool of shape (n_clients,), optional
        Which clients answered; None: all.

    Returns
    -------
    ndarray of shape (k,)
    """
    everyone = answered is None or every(answered)
    if weights is None:
        return (values if everyone else values[answered]).sum(axis=0)
    if everyone:
        return weights @ values
    return effective_weights(weights, answered)[answered] @ values[answered]


@dataclass(frozen=True)
class Participation:
    """Which clients a round asks: Poisson sampling with rate q, or a uniform cohort of fixed size.

    Parameters
    ----------
    rate : float or None
        q in (0, 1]: every client takes part in a round independently with probability q.
    cohort : int or None
        A cohort of this many clients drawn uniformly without replacement each round.

    Exactly one of them is set. The sampling uses the server's own stream (public randomness):
    towards the server, who knows who took part, it amplifies nothing (each client's record-level
    guarantee composes over the rounds it took part in); towards an observer who does not see the
    participants, Poisson sampling amplifies client-level guarantees
    (:mod:`privfedstat.privacy.accounting`).
    """

    rate: float | None = None
    cohort: int | None = None

    def __post_init__(self) -> None:
        if (self.rate is None) == (self.cohort is None):
            raise ValueError("Participation needs exactly one of rate (Poisson q) and cohort (fixed size).")
        if self.rate is not None and not (isinstance(self.rate, Real) and 0 < self.rate <= 1):
            raise ValueError(f"participation rate q must lie in (0, 1], got {self.rate!r}.")
        if self.cohort is not None and not (isinstance(self.cohort, Integral) and self.cohort >= 1):
            raise ValueError(f"participation cohort must be a positive integer, got {self.cohort!r}.")

    def sample(self, live: np.ndarray, rng: np.random.Generator, allow_empty: bool = False) -> np.ndarray:
        """A participation mask over the clients (only ``live`` ones are eligible).

        ``allow_empty=False`` redraws a round in which nobody was sampled (protocols that average over
        the participants need one). Client-level protocols with amplified accounting pass True: a
        redraw would raise each client's inclusion probability above q (to ``q / (1 - (1 - q)^M)``).
        """
        m = live.size
        while True:
            if self.rate is not None:
                mask = rng.random(m) < self.rate
            else:
                mask = np.zeros(m, dtype=bool)
                pool = np.flatnonzero(live)
                mask[rng.choice(pool, size=min(self.cohort, pool.size), replace=False)] = True
            mask &= live
            if mask.any() or allow_empty:  # else a round with nobody is redrawn (public randomness: no cost)
                return mask

    def expected_rate(self, n_clients: int) -> float:
        """Probability that a given client takes part in a round (q, or cohort / m)."""
        return float(self.rate) if self.rate is not None else min(1.0, self.cohort / n_clients)


def resolve_participation(value, n_clients: int) -> Participation | None:
    """``participation=`` as given to an estimator: None (every client, every round), a rate q in (0, 1)
    (Poisson), an integer cohort size, or a :class:`Participation`; full participation gives None."""
    if value is None or isinstance(value, Participation):
        p = value
    elif isinstance(value, Integral) and not isinstance(value, bool):
        p = Participation(cohort=int(value))
    elif isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) and 0 < value < 1:
        p = Participation(rate=float(value))
    else:
        raise ValueError(f"participation must be None, a rate q in (0, 1), a cohort size (int) or a Participation, "
                         f"got {value!r}.")
    if p is not None and p.cohort is not None and p.cohort > n_clients:
        raise ValueError(f"participation cohort {p.cohort} exceeds the {n_clients} clients.")
    if p is None or p.expected_rate(n_clients) >= 1.0:
        return None
    return p
