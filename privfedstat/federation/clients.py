"""The client side of the seam: what a client computes on its own data and how it privatizes it.

A *clients* object owns every client's data and noise stream and answers a small set of requests,
the **verbs**. A reply leaves the clients only privatized: each verb computes its statistic,
adds Gaussian noise calibrated to the sensitivity and budget the request states (the formulas are
in :mod:`privfedstat.privacy.calibration`), and attaches one release record per mechanism run
(stage, kind, sensitivity, sigma). The server (:class:`~privfedstat.federation.channel.Channel`)
builds the ledger from those records; it never holds a handle on the data.

The verbs and what travels with each are described in :mod:`privfedstat.federation.verbs` (the verb
table). The shared ones are methods here; a verb that one algorithm alone sends is implemented next
to that algorithm's server loop and registered in the table, and :class:`InProcessClients` answers
it with the registered implementation (which keeps its client state, e.g. SCAFFOLD's control
variates, in the clients' ``_state``). ``active`` restricts a request to some clients.

:class:`InProcessClients` is the in-process backend: all clients' rows concatenated, every
statistic computed by one numba kernel call (:mod:`privfedstat.federation.oracle`). A torch or
Flower backend answers the same verbs.
"""

from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass, field, replace

import numpy as np

from .._linalg import clip_rows, sym_to_vec
from .._validation import every, iterate_error, some
from ..data.federated import FederatedData
from ..exceptions import DivergenceError
from ..families.base import Family
from ..kernels.glm_nb import CLIP_SAFETY
from ..privacy.ledger import Release
from .oracle import RESPONSE, ClientOracle, make_oracle
from .verbs import implementation

__all__ = ["InProcessClients", "Reply", "privatize", "FailingData", "PUBLIC", "RESPONSE"]

#: what the server may know of the clients besides their replies (public metadata)
PUBLIC = ("n_clients", "sizes", "n_features", "n_params", "family", "has_offset", "initial_parameters")
#: rows mapped by ``change_basis`` are clamped to [-_MAX_MAPPED, _MAX_MAPPED] (a fixed map of each row, as the
#: scaler's clamp): x P overflows for huge finite x
_MAX_MAPPED = 1e300
#: a request that at most this fraction of the clients answers is computed on their rows alone (Poisson rounds)
_SUBSET_FRACTION = 0.25


@dataclass(frozen=True)
class Reply:
    """What the clients send for one request.

    Attributes
    ----------
    values : ndarray of shape (n_clients, ...)
        Row i is client i's privatized message; rows of clients that did not answer are NaN.
    releases : tuple of Release
        The Gaussian mechanisms run for this message, in order (``round`` and ``weights`` are
        filled in by the server when it records them).
    answered : ndarray of bool, shape (n_clients,)
        Which clients sent a message.
    failed : ndarray of bool, shape (n_clients,)
        Which of the requested clients failed while answering (they are gone for the rest of the fit).
    leak : str or None
        A description when the values are not privatized (the paper's clip rule).
    error : Exception or None
        The error the clients' computation stopped with after some of its mechanisms ran (a
        diverging local iterate, :class:`~privfedstat.DivergenceError`): ``releases`` are those
        that ran, and the server records them before it raises ``error``, which reaches it as a
        message (post-processing of the noisy values).
    """

    values: np.ndarray
    releases: tuple[Release, ...]
    answered: np.ndarray
    failed: np.ndarray
    leak: str | None = None
    error: Exception | None = None


def privatize(values: np.ndarray, noise, sensitivity, mu, stage: str, kind: str, unit: str = "record"
              ) -> tuple[np.ndarray, Release]:
    """Add Gaussian noise ``N(0, (sensitivity_i / mu)^2 I)`` to each client's row; return it and its release record.

    Parameters
    ----------
    values : ndarray of shape (n_clients, ...)
    noise : ClientNoise or SecureClientNoise
        The clients' streams (all clients draw in lockstep, so a client's draws depend only on its
        own stream and the sequence of requests).
    sensitivity : float or ndarray of shape (n_clients,)
        L2 sensitivity of each client's statistic.
    mu : float
        GDP budget of this mechanism (inf: no noise).
    stage, kind : str
        Ledger labels (``kind`` "aggregated": sent to the server; "local": stays on the client).
    unit : {"record", "client"}
        What the sensitivity protects: one row of the client, or its whole dataset.
    """
    m = noise.n_clients
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] != m:
        raise ValueError(f"expected one message per client ({m}), got {values.shape[0]}.")
    sens = np.array(sensitivity, dtype=np.float64)
    if sens.ndim == 0:
        sens = np.full(m, float(sens))
    if not mu > 0:
        raise ValueError("every release needs mu > 0.")
    if math.isfinite(mu):
        if not every(np.isfinite(sens)):
            raise ValueError("a release with infinite sensitivity cannot be private: set a finite clipping bound "
                             "(clip=...) or use mu=float('inf').")
        sigma = sens / mu
    else:
        sigma = np.zeros(m)
    if some(sigma > 0):
        noisy = noise.standard_normal(values.shape[1:])  # a fresh array: scaled and shifted in place, no temporaries
        noisy *= sigma.reshape((-1,) + (1,) * (values.ndim - 1))
        noisy += values  # values + sigma_i z_i, the same sum (floating-point addition commutes)
        values = noisy
    else:
        values = values.copy()
    return values, Release(stage, -1, kind, sens, sigma, unit=unit)


class FailingData(FederatedData):
    """Fault injection for the in-process backend: :class:`FederatedData` whose clients fail on cue.

    Parameters
    ----------
    data : FederatedData
    failures : dict of int to int
        Client ``i`` fails while answering its ``failures[i]``-th request (0-based, counting every
        verb call of the fit: clip search, scaling, protocol rounds, inference) and answers nothing
        afterwards. A fit on these data behaves as if those clients' processes died; its
        ``on_client_failure`` policy decides what happens.
    """

    def __init__(self, data: FederatedData, failures: dict[int, int]) -> None:
        super().__init__(data.X, data.y, data.offsets, data.offset)
        bad = [i for i in failures if not 0 <= int(i) < data.n_clients]
        if bad:
            raise ValueError(f"failures name clients {bad} outside 0..{data.n_clients - 1}.")
        self.failures = {int(i): int(at) for i, at in failures.items()}


def _contained(verb):
    """Run a clients' ``verb`` under ``np.errstate(all="ignore")``: no floating-point warning leaves a client.

    Overflow and invalid operations on a client's data (a huge row, a diverging local iterate) are
    data-dependent, so a warning about them would tell the server (or whoever reads the logs)
    something about the data that no release accounts for. Every verb handles their results
    itself: a non-finite update is sent as 0 (:func:`~privfedstat._linalg.clip_rows`,
    :func:`~privfedstat._linalg.smoothed_normalize`), a diverging local iterate is reported as a
    :class:`~privfedstat.DivergenceError` in the reply, counts compare with inf as with any number.
    """

    @functools.wraps(verb)
    def contained(*args, **kwargs):
        with np.errstate(all="ignore"):
            return verb(*args, **kwargs)

    return contained


@dataclass
class _Status:
    """Failure bookkeeping shared by a clients object and its halves (fault injection for tests)."""

    failures: dict[int, int] = field(default_factory=dict)  # client -> request number at which it fails
    requests: int = 0
    failed: np.ndarray | None = None


class InProcessClients:
    """All clients in this process: their data, noise streams and the verbs they answer.

    Parameters
    ----------
    data : FederatedData
        The clients' rows (fitting scale); checked against the family's support here, on the client.
    family : Family
    noise : ClientNoise or SecureClientNoise
        One stream per client.
    failures : dict of int to int, optional
        Fault injection: client ``i`` fails while answering its ``failures[i]``-th request (0-based,
        counting every verb call) and answers nothing afterwards.
    first_client : int, default 0
        Federation index of the first client held here: client ``first_client + k``'s random
        public streams (FedNewton's split, HiFedProx's minibatches) are the children
        ``first_client + k`` of the public seeds, as when all clients are held in one process (a
        Flower node holds one client, its partition id; its noise streams come with ``noise``).

    Attributes (public: what the server may know)
    ----------------------------------------------
    n_clients, sizes, n_features, n_params, family, has_offset
    """

    def __init__(self, data: FederatedData, family: Family, noise, *, failures: dict[int, int] | None = None,
                 first_client: int = 0, _status: _Status | None = None) -> None:
        if _status is None:
            family.check_y(data.y)
        self._oracle: ClientOracle = make_oracle(data, family)
        self._noise = noise
        self.first_client = int(first_client)
        if failures is None:
            failures = getattr(data, "failures", None)
        self._status = _status or _Status(dict(failures or {}), 0, np.zeros(data.n_clients, dtype=bool))
        self._halves: tuple[InProcessClients, InProcessClients] | None = None
        self._state: dict[str, object] = {}  # the registered verbs' client state, by verb (kept, never sent)
        self._norm_cache: tuple[tuple, np.ndarray] | None = None
        self._before_basis: ClientOracle | None = None  # the oracle on the columns before change_basis
        self.n_clients = data.n_clients
        self.sizes = data.sizes.copy()
        self.n_features = data.n_features
        self.n_params = self._oracle.n_params
        self.family = family
        self.has_offset = data.offset is not None

    def initial_parameters(self) -> np.ndarray:
        """The model's initial parameters theta^(0), flat (public): zeros for a GLM (the paper's start); a
        network backend returns its initialised weights."""
        return np.zeros(self.n_params)

    def __getattr__(self, name: str):
        """A registered verb (:mod:`~privfedstat.federation.verbs`) answered by its in-process implementation."""
        answer = None if name.startswith("_") else implementation(name, "in_process")
        if answer is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r} and no verb {name!r} is registered "
                                 "for it (an algorithm registers its verb when its module is imported).")
        return types.MethodType(_contained(answer), self)

    # ------------------------------------------------------------------ plumbing (also the registered verbs')
    def _begin(self, active: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Who is asked (``active`` minus failed clients) and who fails on this request."""
        st = self._status
        asked = ~st.failed if active is None else (np.asarray(active, dtype=bool) & ~st.failed)
        failing = np.zeros(self.n_clients, dtype=bool)
        st.requests += 1
        if not st.failures:  # no fault injection (every fit but the tests'): nobody fails, ``asked`` is a fresh array
            return asked, failing
        for i, at in st.failures.items():
            if at == st.requests - 1 and asked[i]:
                failing[i] = True
        st.failed |= failing
        return asked & ~failing, failing

    def _reply(self, values: np.ndarray, releases: list[Release], answered: np.ndarray, failing: np.ndarray,
               leak: str | None = None, error: Exception | None = None) -> Reply:
        values = np.asarray(values, dtype=np.float64)
        if not every(answered):
            values = values.copy()
            values[~answered] = np.nan
            releases = [_only(r, answered) for r in releases]
        return Reply(values, tuple(releases), answered, failing, leak, error)

    def _release(self, statistic, sensitivity, mu, stage, active=None, theta=None) -> Reply:
        """Privatize ``statistic(oracle, theta)`` (see :meth:`_answering`) and reply with it (an "aggregated" release)."""
        answered, failing = self._begin(active)
        noisy, rec = privatize(self._answering(answered, statistic, theta), self._noise, sensitivity, mu, stage,
                               "aggregated")
        return self._reply(noisy, [rec], answered, failing)

    def _answering(self, answered: np.ndarray, statistic, theta=None) -> np.ndarray:
        """``statistic(oracle, theta)``, one row per client, read from the ``answered`` clients' rows alone when they are
        few (a Poisson round: the absent clients' data is not touched, their rows are 0 and are never sent).

        ``theta``: shared (n_params,) or one row per client (restricted to the answered clients with them). Each
        client's statistic depends on its own rows only, so it is the same either way.
        """
        m = self.n_clients
        k = int(np.count_nonzero(answered))
        if k == 0 or k > _SUBSET_FRACTION * m:
            return statistic(self._oracle, theta)
        who = np.flatnonzero(answered)
        if theta is not None and np.ndim(theta) == 2:
            theta = np.asarray(theta)[who]
        part = statistic(self._subset(who), theta)
        out = np.zeros((m,) + part.shape[1:])
        out[who] = part
        return out

    def _subset(self, who: np.ndarray) -> ClientOracle:
        """The oracle on clients ``who`` (sorted indices) alone: their rows gathered, nobody else's read."""
        o = self._oracle
        sizes = o.sizes[who]
        ends = np.cumsum(sizes)
        rows = np.arange(ends[-1]) + np.repeat(o.data.offsets[who] - (ends - sizes), sizes)
        return make_oracle(o.data.take(rows, sizes), self.family)

    def _norms(self, which: str, theta: np.ndarray) -> np.ndarray:
        """Per-sample norms, cached for the repeated thresholds of one private quantile search."""
        key = (which, np.asarray(theta, dtype=np.float64).tobytes())
        if self._norm_cache is None or self._norm_cache[0] != key:
            self._norm_cache = (key, self._oracle.sample_norms(which, theta))
        return self._norm_cache[1]

    # ------------------------------------------------------------------ verbs that release
    @_contained
    def gradients(self, theta, *, clip: float, sensitivity, mu: float, stage: str, active=None) -> Reply:
        """Each client's mean of per-sample gradients clipped to ``clip`` (B), plus noise."""
        return self._release(lambda o, t: o.clipped_gradients(t, clip), sensitivity, mu, stage, active, theta)

    @_contained
    def local_descent(self, theta0, *, clip: float, step_size: float, n_steps: int, sensitivity, mu: float,
                      stage: str, active=None) -> Reply:
        """``n_steps`` local steps ``theta <- theta - eta g(theta) + s Z`` (noise of sensitivity/mu per step); send theta.

        ``sensitivity`` and ``mu`` are those of one step's statistic ``eta g`` (each step is one
        "local" release; the final iterate is post-processing and is sent).
        """
        answered, failing = self._begin(active)
        o = self._oracle
        theta = np.array(np.broadcast_to(theta0, (o.n_clients, o.n_params)), dtype=np.float64)
        records = []
        for _ in range(n_steps):
            g = o.clipped_gradients(theta, clip)
            theta, rec = privatize(theta - step_size * g, self._noise, sensitivity, mu, stage, "local")
            records.append(rec)
            if (error := _divergence(theta, stage, step_size, answered)) is not None:
                return self._reply(theta, records, answered, failing, error=error)
        return self._reply(theta, records, answered, failing)

    @_contained
    def hessians(self, theta, *, hessian_clip: float, gradient_clip: float | None = None, sensitivity, mu: float,
                 stage: str, active=None) -> Reply:
        """``sym_to_vec`` of each client's mean of per-sample Hessians clipped to C_H (see ``GLMOracle.hessians``), plus noise."""
        return self._release(lambda o, t: sym_to_vec(o.hessians(t, hessian_clip, gradient_clip)), sensitivity, mu,
                             stage, active, theta)

    @_contained
    def score_outer(self, theta, *, clip: float, sensitivity, mu: float, stage: str, active=None) -> Reply:
        """``sym_to_vec`` of each client's mean of ``g g^T`` (gradients clipped to ``clip``), plus noise."""
        return self._release(lambda o, t: sym_to_vec(o.score_outer(t, clip)), sensitivity, mu, stage, active, theta)

    @_contained
    def design_moments(self, *, row_clip: float, sensitivity, mu: float, stage: str, active=None) -> Reply:
        """``sym_to_vec`` of each client's mean of ``x x^T`` (rows clipped to ``row_clip``), plus noise."""
        return self._release(lambda o, _: sym_to_vec(o.design_moments(row_clip)), sensitivity, mu, stage, active)

    @_contained
    def clipped_update(self, theta, *, step_size: float, n_steps: int, update_clip: float, sensitivity, mu: float,
                       stage: str, active=None) -> Reply:
        """Client-level DP-FedAvg: K local full-batch GD steps from theta (no noise), the model update clipped
        to L2 norm S (``update_clip``), plus noise; a client-level release (unit ``"client"``).

        Whatever a client's data, its clipped update lies in the ball of radius S (clipped to
        ``S kappa``, the kernels' CLIP_SAFETY, by :func:`~privfedstat._linalg.clip_rows`, whose norm
        neither underflows nor overflows; a non-finite update, from diverging local steps, is sent
        as 0), so replacing the whole dataset moves it by at most 2S: the server's ``sensitivity``.
        """
        answered, failing = self._begin(active)

        def update(o: ClientOracle, theta: np.ndarray) -> np.ndarray:
            local = np.array(np.broadcast_to(theta, (o.n_clients, o.n_params)), dtype=np.float64)
            for _ in range(n_steps):
                local = local - step_size * o.clipped_gradients(local, math.inf)
            return clip_rows(local - theta, update_clip * CLIP_SAFETY)  # a diverging client's update is sent as 0

        delta = self._answering(answered, update, np.asarray(theta, dtype=np.float64))
        noisy, rec = privatize(delta, self._noise, sensitivity, mu, stage, "aggregated", unit="client")
        return self._reply(noisy, [rec], answered, failing)

    @_contained
    def count_at_most(self, which: str, theta, threshold: float, *, mu: float, stage: str, active=None) -> Reply:
        """Each client's number of rows whose ``which`` norm (gradient / hessian / row) is <= ``threshold``, plus noise.

        Sensitivity 1 (one row replaced changes a count by at most 1).
        """
        return self._release(self._counts_at_most(which, threshold), 1.0, mu, stage, active, theta)

    @_contained
    def count_clipped(self, theta, *, clip: float, mu: float, stage: str) -> Reply:
        """Each client's number of rows whose gradient norm exceeds ``clip`` (B), plus noise (sensitivity 1)."""
        return self._release(lambda o, t: o.clipped_counts(t, clip)[:, None], 1.0, mu, stage, theta=theta)

    @_contained
    def clipped_excess(self, theta, *, clip: float, outer: float, sensitivity, mu: float, stage: str,
                       active=None) -> Reply:
        """Each client's mean of ``clip_{B'}(g_j) - clip_B(g_j)`` (``clip`` = B < ``outer`` = B'), plus noise.

        Each term is ``g_j`` times ``(min(||g_j||, B') - min(||g_j||, B)) / ||g_j||``: norm at most B' - B, so one
        row replaced moves the mean by at most ``2 (B' - B) / n_i`` (the server's ``sensitivity``).
        """
        return self._release(lambda o, t: o.clipped_excess(t, clip, outer), sensitivity, mu, stage, active, theta)

    @_contained
    def pearson_sum(self, theta, *, bound: float, mu: float, stage: str) -> Reply:
        """Each client's sum of its squared Pearson residuals, each capped at ``bound``, plus noise (sensitivity
        ``bound``: one row replaced moves the sum by at most that; :meth:`GLMOracle.pearson_sums`)."""
        return self._release(lambda o, t: o.pearson_sums(t, bound)[:, None], bound, mu, stage, theta=theta)

    @_contained
    def column_count(self, column: int | str, threshold: float, *, center: float | None = None, mu: float,
                     stage: str) -> Reply:
        """Each client's number of rows with ``x_j <= t`` (``center`` None) or ``|x_j - center| <= t``, plus noise;
        ``column`` :data:`RESPONSE` counts the response ``y`` instead of a column ``x_j``."""
        return self._release(lambda o, _: o.column_counts(column, threshold, center)[:, None], 1.0, mu, stage)

    @_contained
    def losses(self, theta, *, stage: str) -> Reply:
        """Each client's mean loss, sent without noise (a non-private release: only for mu = inf fits)."""
        return self._release(lambda o, t: o.losses(t)[:, None], math.inf, math.inf, stage, theta=theta)

    # ------------------------------------------------------------------ a statistic shared with the secure verbs
    def _counts_at_most(self, which: str, threshold: float):
        """The statistic of ``count_at_most``: per client, the rows whose ``which`` norm is <= ``threshold``."""
        def counts(o: ClientOracle, t) -> np.ndarray:
            norms = self._norms(which, t) if o is self._oracle else o.sample_norms(which, t)
            return o.count_at_most(norms, threshold)[:, None]

        return counts

    # ------------------------------------------------------------------ non-private verbs (labelled)
    @_contained
    def norm_quantiles(self, which: str, theta, q: float) -> Reply:
        """Each client's raw ``q``-quantile of its ``which`` norms (``clip="paper"``): not privatized, a leak."""
        answered, failing = self._begin(None)
        values = self._oracle.client_quantiles(self._oracle.sample_norms(which, theta), q)[:, None]
        return self._reply(values, [], answered, failing,
                           leak=f"{which} clipping bound chosen from raw data (clip='paper': each client's {q:g}-quantile "
                                "of its norms sent without noise)")

    @_contained
    def exact(self, theta, *, clip: float) -> tuple[np.ndarray, np.ndarray]:
        """Exact clipped gradients and unclipped Hessians (n_clients, p), (n_clients, p, p): diagnostics of mu = inf fits only."""
        return self._oracle.clipped_gradients(theta, clip), self._oracle.hessians(theta, math.inf)

    # ------------------------------------------------------------------ verbs that send nothing
    @_contained
    def split_halves(self, seed) -> tuple[InProcessClients, InProcessClients]:
        """Each client splits its rows at random (``seed``: public randomness) into halves of floor(n_i/2) and the rest.

        Returns handles answering the verbs on the first and on the second halves (same noise
        streams and failure state); the first half's handle also answers FedNewton's ``newton_steps``.
        """
        first, second = self._oracle.data.split_halves(seed, first_client=self.first_client)
        halves = tuple(InProcessClients(d, self.family, self._noise, first_client=self.first_client, _status=self._status)
                       for d in (first, second))
        halves[0]._halves = halves
        return halves

    @_contained
    def rescale(self, scaler) -> None:
        """Rescale the clients' columns (and a location family's response) with the public ``scaler`` (its centres
        and scales were released); the family becomes the one of the fitting scale (Huber's threshold)."""
        self.family = scaler.fitting_family(self.family)
        self._oracle = make_oracle(scaler.transform(self._oracle.data), self.family)
        self._norm_cache = None

    @_contained
    def change_basis(self, basis, reference: int = 0) -> None:
        """Map every row x to ``basis^T x`` (a public (d, d) matrix: the coefficients become theta = basis phi, since
        ``x^T theta = (basis^T x)^T phi``), or, with None, return to the columns and labels held before the first
        change.

        ``reference`` (multinomial models only): swap the labels of class 0 and class ``reference``, so that it
        becomes the reference class (a public relabelling; the coefficients map by
        :func:`~privfedstat.federation.protocol.reference_map`). Computed from the columns and labels held
        before the first change, so a second change replaces the first.
        """
        if self._before_basis is None:
            self._before_basis = self._oracle
        base = self._before_basis
        if basis is None:
            self._oracle, self._before_basis = base, None
        else:
            d = base.data
            P = np.asarray(basis, dtype=np.float64)
            if P.shape != (d.n_features, d.n_features) or not np.all(np.isfinite(P)):
                raise ValueError(f"basis must be a finite ({d.n_features}, {d.n_features}) matrix, got shape {P.shape}.")
            mapped = np.nan_to_num(d.X @ P, nan=0.0, posinf=_MAX_MAPPED, neginf=-_MAX_MAPPED)  # huge finite rows
            y = d.y
            if reference:
                if not (self.family.response_levels and 0 < int(reference) <= self.family.n_outputs):
                    raise ValueError(f"reference {reference!r} must be a class of the multinomial model (1.."
                                     f"{self.family.n_outputs}); other families have none.")
                y = np.where(d.y == 0, float(reference), np.where(d.y == reference, 0.0, d.y))
            self._oracle = make_oracle(FederatedData(np.clip(mapped, -_MAX_MAPPED, _MAX_MAPPED), y, d.offsets,
                                                     d.offset), self.family)
        self._norm_cache = None


def _only(release: Release, answered: np.ndarray) -> Release:
    """The record of a release in which only the ``answered`` clients' messages reached the server."""
    return replace(release, sensitivity=np.where(answered, release.sensitivity, 0.0),
                   sigma=np.where(answered, release.sigma, 0.0))


def _divergence(theta: np.ndarray, where: str, step_size: float, answered: np.ndarray) -> DivergenceError | None:
    """The error of the answering clients' diverging local iterates, or None (noisy values: post-processing)."""
    return iterate_error(theta if every(answered) else theta[answered], where, step_size)
