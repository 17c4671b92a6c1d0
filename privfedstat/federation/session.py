"""The server's side of one fit: the clients, the channel, participation and the seeds, and the ways to ask.

A :class:`Session` is what every stage of a fit talks through -- the feature scaling, the clip
search, the protocol's rounds and the inference releases: it sends a verb's request to the
clients (:class:`~privfedstat.federation.clients.InProcessClients` or another backend), takes the
privatized reply through the :class:`~privfedstat.federation.channel.Channel` (which builds the
ledger and applies the failure policy) and aggregates it. It holds no budget, no clipping bound and
no result: those are the stages' own (:class:`~privfedstat.privacy.plan.BudgetPlan`,
:class:`~privfedstat.federation.protocol.Setup`, :class:`~privfedstat.federation.protocol.Run`), so
the session below them stays the same object from the first release to the last.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from ..privacy.ledger import PrivacyLedger
from ..privacy.mechanisms import SecureClientNoise
from ..privacy.secure_noise import count_spec
from .channel import Channel
from .clients import InProcessClients
from .protocol import ChangeOfBasis
from .secure import secure_total
from .server import Participation, aggregate, effective_weights

__all__ = ["Session"]


@dataclass(frozen=True)
class Session:
    """The clients of one fit, the channel to them, who is asked each round and the fit's seeds.

    Attributes
    ----------
    clients : InProcessClients
        The clients' side of the seam: the verbs they answer (the server holds nothing else of theirs);
        the torch (:mod:`privfedstat.deep`) and Flower clients answer the same verbs.
    channel : Channel
        The only path from clients to server (records the releases, applies the failure policy).
    seed : numpy.random.SeedSequence
        Seed of the protocol's own randomness (FedNewton's sample split, HiFedProx's minibatches).
    inference_seed : numpy.random.SeedSequence
        Seed of the inference stage's simulations (the parametric bootstrap).
    unit : {"record", "client"}
        The privacy unit of the estimator (a client-level reply of a Poisson round is topped up).
    participation : Participation or None
        Which clients each round asks (None: all); drawn from ``participation_rng``, the server's own stream.
    secure : int or None
        Under ``aggregation="secure"`` (finite mu): the fit's ``min_surviving``; its pooled counts (the scaling's, the
        bound searches', the inference's) are then secure sums (:meth:`count`), and so are the rounds of
        :func:`~privfedstat.fitting.steps.server_gradient_descent`. None: each client adds its own Gaussian noise.
    participation_rng, topup_rng : numpy.random.Generator or None
        The server's streams for sampling participants and for the top-up noise of :meth:`_topped_up`
        (``topup_rng`` None in secure mode: the top-up noise is then the clients' secure noise,
        :class:`~privfedstat.privacy.mechanisms.SecureClientNoise`, drawn from the OS CSPRNG).
    """

    clients: InProcessClients
    channel: Channel
    seed: np.random.SeedSequence
    inference_seed: np.random.SeedSequence | None = None
    unit: str = "record"
    participation: Participation | None = None
    secure: int | None = None
    participation_rng: np.random.Generator | None = None
    topup_rng: np.random.Generator | None = None

    @classmethod
    def open(cls, clients: InProcessClients, ledger: PrivacyLedger, *, seed: np.random.SeedSequence,
             inference_seed: np.random.SeedSequence | None = None, unit: str = "record",
             participation: Participation | None = None, on_client_failure: str = "raise",
             secure: int | None = None) -> Session:
        """A session over ``clients`` whose channel records into ``ledger``.

        With partial ``participation`` the server's two streams (sampling, top-up) are spawned from ``seed``;
        in secure mode (``ledger.secure_mode``) the top-up noise is secure noise instead (no top-up stream).
        """
        channel = Channel(clients.sizes, ledger, on_client_failure)
        if participation is None:
            return cls(clients, channel, seed, inference_seed, unit, secure=secure)
        sampling_seed, topup_seed = seed.spawn(2)  # the server's own streams
        topup_rng = None if ledger.secure_mode else np.random.default_rng(topup_seed)
        return cls(clients, channel, seed, inference_seed, unit, participation, secure,
                   np.random.default_rng(sampling_seed), topup_rng)

    @contextmanager
    def rows_mapped(self, change: ChangeOfBasis | None) -> Iterator[None]:
        """Within the block the clients' rows are ``change.design^T x`` and, for a multinomial model, class
        ``change.reference`` is their reference class (their ``change_basis`` verb: a public map, nothing is sent);
        after it, whatever happened, the columns and labels they held before. None: nothing changes."""
        if change is None:
            yield
            return
        self.clients.change_basis(change.design, reference=change.reference)
        try:
            yield
        finally:
            self.clients.change_basis(None)

    def everyone(self) -> Session:
        """This session asking every live client each round (the clip search's pilot rounds)."""
        return replace(self, participation=None)

    @property
    def ledger(self) -> PrivacyLedger:
        """The fit's ledger (every release that reached the server)."""
        return self.channel.ledger

    @property
    def sizes(self) -> np.ndarray:
        """The clients' public sizes n_i."""
        return self.clients.sizes

    @property
    def size_weights(self) -> np.ndarray:
        """w_i = n_i / N."""
        return self.sizes / self.sizes.sum()

    @property
    def sampling_rate(self) -> float:
        """The Poisson participation rate q of the rounds (1 without Poisson participation)."""
        p = self.participation
        return 1.0 if p is None or p.rate is None else float(p.rate)

    def participants(self) -> np.ndarray | None:
        """The clients asked in the next round: a sample of the live ones (server's stream) when participation
        is partial, else None (every live client; the clients leave out failed ones themselves)."""
        if self.participation is None:
            return None
        return self.participation.sample(self.channel.live, self.participation_rng, allow_empty=self.unit == "client")

    def ask(self, verb: str, *, weights: np.ndarray | None = None, clients=None, **request) -> tuple[np.ndarray, np.ndarray,
                                                                                       np.ndarray]:
        """Send ``request`` to the clients' ``verb`` and take the reply through the channel.

        ``weights``: the weights with which the server will average the replies (None: it sums them, as
        for counts); ``clients``: another handle than ``self.clients`` (FedNewton's halves). Returns the
        values (rows of clients that did not answer are NaN), the weights as recorded in the ledger
        (renormalised over the clients that answered; for a sum, 1 for each of them) and the mask of
        those clients.
        """
        reply = getattr(self.clients if clients is None else clients, verb)(**request)
        q = self.sampling_rate if request.get("active") is not None else 1.0  # a Poisson sample was asked
        if q < 1.0 and any(r.unit == "client" for r in reply.releases):
            return self._topped_up(reply, weights, q, request)
        if weights is None:
            w = reply.answered.astype(np.float64)
        else:
            w = effective_weights(weights, reply.answered)
        return self.channel.receive(reply, weights=w, sampling_rate=q), w, reply.answered

    def _topped_up(self, reply, weights, q: float, request: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A client-level reply of a Poisson-sampled round, with the server's noise in the rows of the clients that
        did not send: every row then carries noise of its client's calibrated sd ``sensitivity_i / mu``.

        This makes the noise of the published aggregate independent of who took part, which the
        amplified accounting (:meth:`~privfedstat.privacy.public.PublicLedger.epsilon`: the
        Poisson-subsampled Gaussian, fixed noise) needs; without it the aggregate's noise variance would
        grow with the number of participants and reveal it. The weights stay fixed (no
        renormalisation over who took part): the caller divides by q for an unbiased aggregate
        (fixed-denominator estimator). In secure mode the top-up is drawn as the clients draw theirs
        (:class:`~privfedstat.privacy.mechanisms.SecureClientNoise`): the published aggregate's noise
        is then secure in every row. Returns the values, the weights and an all-true mask.
        """
        m = reply.values.shape[0]
        w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
        mu = float(request["mu"])
        z = 2.0 / mu  # every client's sigma_i = Delta_i / mu: add/remove multiplier 2 sigma_i / Delta_i
        values = self.channel.receive(reply, weights=w, sampling_rate=q, noise_multiplier=z).copy()
        silent = ~reply.answered
        if silent.any() and math.isfinite(mu):
            sigma = np.broadcast_to(np.asarray(request["sensitivity"], dtype=np.float64), (m,)) / mu
            k, shape = int(silent.sum()), values.shape[1:]
            z = SecureClientNoise(k).standard_normal(shape) if self.topup_rng is None else \
                self.topup_rng.standard_normal((k,) + shape)
            values[silent] = sigma[silent].reshape((-1,) + (1,) * (values.ndim - 1)) * z
        else:
            values[silent] = 0.0
        return values, w, np.ones(m, dtype=bool)

    def mean(self, verb: str, *, weights: np.ndarray, **request) -> np.ndarray:
        """The weighted aggregate (:func:`~privfedstat.federation.server.aggregate`) of the clients' replies to ``verb``."""
        values, _, answered = self.ask(verb, weights=weights, **request)
        return aggregate(weights, values, answered)

    def count(self, verb: str, *, mu: float, **request) -> float:
        """The pooled count of a count ``verb`` (``count_at_most``, ``column_count``, ``count_clipped``), ``mu``-GDP:
        the clients' noisy
        counts summed (:meth:`total`) or, in a secure fit, their secure sum (:func:`~privfedstat.federation.secure.
        secure_total`, integer counts with Skellam shares: :func:`~privfedstat.privacy.secure_noise.count_spec`)."""
        if self.secure is None or math.isinf(mu):
            return self.total(verb, mu=mu, **request)
        return secure_total(self, f"secure_{verb}", spec=self._count_spec(mu), **request)

    def _count_spec(self, mu: float):
        return count_spec(mu, self.clients.n_clients, self.secure, int(np.max(self.sizes)))

    def count_noises(self, n_live: int) -> int:
        """Independent noises in a pooled count over ``n_live`` clients: theirs, or one (the secure sum's)."""
        return n_live if self.secure is None else 1

    def count_sd(self, mu: float, n_live: int) -> float:
        """sd of the noise of a pooled count at ``mu`` over ``n_live`` clients (:meth:`count`): ``sqrt(n_live) / mu``,
        or the secure sum's ``sqrt(2 n_live lam)`` (0 with mu = inf)."""
        if math.isinf(mu):
            return 0.0
        return math.sqrt(n_live) / mu if self.secure is None else math.sqrt(self._count_spec(mu).variance(n_live))

    def total(self, verb: str, **request) -> float:
        """The pooled sum of the clients' replies to a count ``verb`` (first entry; the live clients that answered)."""
        values, _, answered = self.ask(verb, **request)
        return float(aggregate(None, values, answered)[0])
