"""The client side of the seam: what a client computes on its own data and how it privatizes it.

A *clients* object owns every client's data and noise stream and answers a small set of requests,
the **verbs** below. A reply leaves the clients only privatized: each verb computes its statistic,
adds Gaussian noise calibrated to the sensitivity and budget the request states (the formulas are
in :mod:`privfedstat.privacy.calibration`), and attaches one release record per mechanism run
(stage, kind, sensitivity, sigma). The server (:class:`~privfedstat.federation.channel.Channel`)
builds the ledger from those records; it never holds a handle on the data.

Verbs (all clients answer each in one pass; ``active`` restricts a request to some clients):

=====================  ========================================================================
``gradients``          mean of per-sample gradients clipped to B (Algorithm 1's message)
``local_descent``      K noisy local GD steps from theta, the final iterate sent (Algorithms 2-4)
``scaffold_round``     K noisy local steps with control variates, model and control deltas sent
``composite_round``    Q noisy local proximal / normal-map steps with a correction c_i kept, one vector sent (FedNMap)
``clipped_update``     K local steps, the model update clipped to S (client-level DP-FedAvg)
``normec_round``       local steps, ``Norm_alpha(u_i - v_i)`` sent, error memory v_i kept (Fed-alpha-NormEC)
``hifedprox_round``    S_i Armijo minibatch steps on ``f_i + phi_p(u - w)``, ``Delta_i`` clipped to S sent (HiFedProx)
``hessians``           ``sym_to_vec`` of the mean of per-sample Hessians clipped to C_H
``newton_steps``       FedNewton's local Newton step (Hessian on the first half, gradient on the second)
``head_newton_steps``  a network's head-only empirical-Fisher Newton step (torch clients, ``deep.newton``)
``score_outer``        ``sym_to_vec`` of the mean of ``g g^T`` (clipped scores), for the sandwich
``design_moments``     ``sym_to_vec`` of the mean of ``x x^T`` (rows clipped), for the bootstrap
``count_at_most``      number of rows whose gradient / Hessian / row norm is <= a threshold
``count_clipped``      number of rows whose gradient is clipped at B
``pearson_sum``        sum of the squared Pearson residuals, each capped (a count model's dispersion)
``column_count``       number of rows with ``x_j <= t`` (or ``|x_j - c| <= t``), for private scaling
``losses``             mean loss (mu = inf only: sent without noise, recorded as non-private)
``norm_quantiles``     the non-private clip rule of the paper (``clip="paper"``): a recorded leak
``exact``              exact gradient and Hessian for diagnostics of non-private fits (mu = inf)
=====================  ========================================================================

plus three that send nothing: ``split_halves`` (each client splits its rows at random into two
halves and answers later requests on either), ``rescale`` (each client rescales its columns
with public, already released centres and scales) and ``change_basis`` (each client maps its rows
by a public matrix and, for a multinomial model, may take another class as reference: a
reparametrisation of the coefficients; or back to the columns and labels it had).

:class:`InProcessClients` is the in-process backend: all clients' rows concatenated, every
statistic computed by one numba kernel call (:mod:`privfedstat.federation.oracle`). A torch or
Flower backend answers the same verbs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import numpy as np

from .._linalg import clip_rows, floor_eigenvalues, row_norm_bounds, sym_to_vec
from .._validation import iterate_error
from ..data.federated import FederatedData
from ..exceptions import DivergenceError
from ..families.base import Family
from ..kernels.glm_nb import CLIP_SAFETY
from ..privacy.ledger import Release
from .oracle import ClientOracle, make_oracle

__all__ = ["InProcessClients", "Reply", "privatize", "newton_step", "smoothed_normalize", "FailingData", "VERBS",
           "PUBLIC", "RESPONSE"]

#: the requests a clients backend answers (everything the server may ask of the clients)
VERBS = ("gradients", "local_descent", "scaffold_round", "composite_round", "clipped_update", "normec_round",
         "hifedprox_round", "hessians", "newton_steps", "head_newton_steps", "score_outer",
         "design_moments", "count_at_most", "count_clipped", "pearson_sum", "column_count", "losses", "norm_quantiles",
         "exact", "split_halves", "rescale", "change_basis")
#: what the server may know of the clients besides their replies (public metadata)
PUBLIC = ("n_clients", "sizes", "n_features", "n_params", "family", "has_offset", "initial_parameters")
#: the key of the response in ``column_count`` (the columns are keyed by their index)
RESPONSE = "y"
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
        if not np.isfinite(sens).all():
            raise ValueError("a release with infinite sensitivity cannot be private: set a finite clipping bound "
                             "(clip=...) or use mu=float('inf').")
        sigma = sens / mu
    else:
        sigma = np.zeros(m)
    if np.any(sigma > 0):
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
    :func:`smoothed_normalize`), a diverging local iterate is reported as a
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
        self._control: np.ndarray | None = None  # SCAFFOLD's control variates c_i
        self._correction: tuple[np.ndarray, np.ndarray] | None = None  # FedNMap's (c_i, last upload y_i)
        self._memory: np.ndarray | None = None  # Fed-alpha-NormEC's error-compensation vectors v_i
        self._row_oracles: tuple[ClientOracle, list] | None = None  # incremental gradient: oracles on the j-th rows
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

    # ------------------------------------------------------------------ plumbing
    def _begin(self, active: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Who is asked (``active`` minus failed clients) and who fails on this request."""
        st = self._status
        asked = ~st.failed if active is None else (np.asarray(active, dtype=bool) & ~st.failed)
        failing = np.zeros(self.n_clients, dtype=bool)
        for i, at in st.failures.items():
            if at == st.requests and asked[i]:
                failing[i] = True
        st.requests += 1
        st.failed |= failing
        return asked & ~failing, failing

    def _reply(self, values: np.ndarray, releases: list[Release], answered: np.ndarray, failing: np.ndarray,
               leak: str | None = None, error: Exception | None = None) -> Reply:
        values = np.asarray(values, dtype=np.float64)
        if not answered.all():
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
    def scaffold_round(self, x, c, *, clip: float, step_size: float, n_steps: int, sensitivity, mu: float,
                       stage: str) -> Reply:
        """One SCAFFOLD round: K noisy-gradient local steps with correction ``c - c_i``; send ``(y - x, dc_i)``.

        Each client keeps its control variate ``c_i`` (0 at the start) and updates it to
        ``c_i - c + (x - y) / (K eta)`` (option II of Karimireddy et al.); the upload is
        post-processing of the noisy gradients.
        """
        answered, failing = self._begin(None)
        o = self._oracle
        m, p = o.n_clients, o.n_params
        if self._control is None:
            self._control = np.zeros((m, p))
        c_local = self._control
        y = np.tile(x, (m, 1))
        correction = c - c_local
        records = []
        for _ in range(n_steps):
            g, rec = privatize(o.clipped_gradients(y, clip), self._noise, sensitivity, mu, stage, "local")
            records.append(rec)
            y = y - step_size * (g + correction)
            if (error := _divergence(y, "SCAFFOLD local steps", step_size, answered)) is not None:
                return self._reply(y, records, answered, failing, error=error)
        c_new = c_local - c + (x - y) / (n_steps * step_size)
        upload = np.hstack([y - x, c_new - c_local])
        self._control = np.where(answered[:, None], c_new, c_local)
        return self._reply(upload, records, answered, failing)

    @_contained
    def composite_round(self, z, *, shift, prox_steps, penalty, ybar, clip: float, step_size: float, sensitivity,
                        mu: float, stage: str) -> Reply:
        """One round of FedNMap (Huang, Pu & Johansson, Algorithm 1) or of Zhang et al. (2024a): send ``y_i``.

        Each client first updates its correction ``c_i <- c_i - y_i + ybar`` from its last upload
        ``y_i`` and the server's aggregate ``ybar`` of that round (``ybar`` None: the first round,
        ``c_i = 0``), then takes Q = ``len(prox_steps)`` local steps from ``z^0 = z``:
        ``x^l = prox_{tau_l phi}(z^l)``, ``z^{l+1} = z^l - eta_a (g~_i(x^l) + shift + c_i)``, with
        ``g~_i`` the mean of its per-sample gradients clipped to B plus Gaussian noise (a local
        release of sensitivity ``sensitivity``), ``phi`` the public ``penalty``
        (:class:`~privfedstat.penalty.ElasticNet`) and ``tau_l = prox_steps[l]``. It sends
        ``y_i = (z - z^Q) / (eta_a Q) = mean_l g~_i(x^l) + shift + c_i`` (computed as that mean) and
        keeps ``c_i`` and ``y_i``: both are post-processing of its noisy gradients and the broadcasts.
        """
        answered, failing = self._begin(None)
        o = self._oracle
        m, p = o.n_clients, o.n_params
        c, y_last = self._correction or (np.zeros((m, p)), np.zeros((m, p)))
        if ybar is not None:
            c = np.where(answered[:, None], c - y_last + ybar, c)
        local = np.tile(z, (m, 1))
        direction = shift + c
        total = np.zeros((m, p))
        records = []
        for tau in prox_steps:
            g, rec = privatize(o.clipped_gradients(penalty.prox(local, tau), clip), self._noise, sensitivity, mu, stage,
                               "local")
            records.append(rec)
            total += g
            local = local - step_size * (g + direction)
            if (error := _divergence(local, "FedNMap local steps", step_size, answered)) is not None:
                return self._reply(local, records, answered, failing, error=error)
        upload = total / len(prox_steps) + direction
        self._correction = (c, np.where(answered[:, None], upload, y_last))
        return self._reply(upload, records, answered, failing)

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
    def newton_steps(self, theta, *, clip: float, hessian_clip: float, hessian_floor: float, grad_clip: np.ndarray,
                     sensitivity, mu: float, stage: str) -> Reply:
        """FedNewton's message ``theta - H_i^-1 gbar_i`` plus noise (after :meth:`split_halves`).

        ``H_i``: the first half's mean per-sample Hessian clipped to C_H, eigenvalues floored at
        lambda; ``gbar_i``: the second half's mean gradient clipped to B, projected onto the ball
        of radius ``grad_clip[i]`` (G_i); the sensitivity is the server's
        :func:`~privfedstat.privacy.calibration.newton_sensitivity`.
        """
        if self._halves is None:
            raise RuntimeError("newton_steps needs split_halves first.")
        halves = tuple(h._oracle for h in self._halves)
        return self._release(lambda _, t: t - newton_step(*halves, t, clip=clip, hessian_clip=hessian_clip,
                                                          hessian_floor=hessian_floor, grad_clip=grad_clip),
                             sensitivity, mu, stage, theta=theta)

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
    def normec_round(self, x, *, alpha: float, beta: float, step_size: float, n_steps: int, incremental: bool,
                     sensitivity, mu: float, stage: str, active=None) -> Reply:
        """One round of Fed-alpha-NormEC (Shulgin et al. 2025, Algorithm 1) on every live client; ``active`` ones send.

        Every live client runs its local operator from the broadcast ``x`` (``T_i``: ``n_steps`` (T)
        full-batch gradient steps of size ``gamma / T``, or with ``incremental`` one pass of
        per-sample steps of size ``gamma / n_i`` over its rows in their fixed order), forms
        ``u_i = (x - T_i(x)) / gamma`` (computed as the mean of the local gradients, which it equals,
        without the cancellation of the difference), ``Delta_i = Norm_alpha(u_i - v_i)``
        (:func:`smoothed_normalize`) and updates its error memory ``v_i <- v_i + beta Delta_i``
        (v_i = 0 at the start; it never leaves the client). Only the ``active`` clients (the
        server's participants; None: all) send ``Delta_i`` plus noise, a client-level release: the
        message has norm below 1 for any data and any v_i (a non-finite ``u_i - v_i``, from
        diverging local steps, gives ``Delta_i = 0``), so replacing the client's whole dataset
        moves it by less than 2, the server's ``sensitivity``.
        """
        computing, failing = self._begin(None)
        o = self._oracle
        if self._memory is None:
            self._memory = np.zeros((o.n_clients, o.n_params))
        diff = self._local_gradient_mean(x, step_size, n_steps, incremental) - self._memory
        diff[~np.all(np.isfinite(diff), axis=1)] = 0.0  # diverging local steps: their clients send 0
        delta = smoothed_normalize(diff, alpha)
        self._memory = np.where(computing[:, None], self._memory + beta * delta, self._memory)
        noisy, rec = privatize(delta, self._noise, sensitivity, mu, stage, "aggregated", unit="client")
        sent = computing if active is None else computing & np.asarray(active, dtype=bool)
        return self._reply(noisy, [rec], sent, failing)

    @_contained
    def hifedprox_round(self, w, *, prox, armijo, n_steps, step_size, batch_size: int | None, batch_seed,
                        update_clip: float, sensitivity, mu: float, stage: str, active=None) -> Reply:
        """One round of HiFedProx (Kabgani & Ahookhosh): each asked client's ``Delta_i = u_i - w``, clipped to S, plus noise.

        Client i takes ``n_steps[i]`` (S_i) local steps from the broadcast w on
        ``f_B(u) + phi(u - w)`` (``prox``: :class:`~privfedstat.federation.power_prox.PowerProx`), each on
        a fresh minibatch of ``min(batch_size, n_i)`` rows drawn from its stream for the round
        (:func:`~privfedstat.federation.power_prox.client_batch_rng` of the public ``batch_seed``) with
        Armijo backtracking from ``step_size[i]`` (alpha0;
        :func:`~privfedstat.federation.power_prox.power_prox_descent`). ``Delta_i`` is clipped to L2
        norm S (``update_clip``; a non-finite one is sent as 0), so replacing the client's whole
        dataset moves it by at most 2S (``sensitivity``): a client-level release. With mu = inf (no
        privacy) each row also carries two diagnostics after ``Delta_i``: the client's Armijo trial
        points and its failed line searches.
        """
        from .power_prox import client_batch_rng, minibatch_rows, power_prox_descent

        answered, failing = self._begin(active)
        clients = np.flatnonzero(answered)
        data, family, sizes = self._oracle.data, self.family, self.sizes
        rngs = [client_batch_rng(batch_seed, self.first_client + i) for i in clients]

        def batch_objective(step: int, who: np.ndarray):
            rows = [minibatch_rows(rngs[k], int(sizes[clients[k]]), batch_size) for k in who]
            o = make_oracle(data.take(np.concatenate([data.offsets[clients[k]] + r for k, r in zip(who, rows)]),
                                      np.array([r.size for r in rows])), family)
            return o.losses, lambda U: (o.losses(U), o.clipped_gradients(U, math.inf))

        u, trials, failures = power_prox_descent(np.asarray(w, dtype=np.float64), np.asarray(n_steps)[clients],
                                                 np.asarray(step_size, dtype=np.float64)[clients], prox, armijo,
                                                 batch_objective)
        delta = np.zeros((self.n_clients, self.n_params))
        delta[clients] = clip_rows(u - w, update_clip * CLIP_SAFETY)
        noisy, rec = privatize(delta, self._noise, sensitivity, mu, stage, "aggregated", unit="client")
        if math.isinf(mu):
            diagnostics = np.zeros((self.n_clients, 2))
            diagnostics[clients] = np.column_stack([trials, failures])
            noisy = np.hstack([noisy, diagnostics])
        return self._reply(noisy, [rec], answered, failing)

    def _local_gradient_mean(self, x, step_size: float, n_steps: int, incremental: bool) -> np.ndarray:
        """``(x - T_i(x)) / gamma`` for every client, the mean of the (unclipped) gradients along its local path."""
        o = self._oracle
        local = np.array(np.broadcast_to(x, (o.n_clients, o.n_params)), dtype=np.float64)
        total = np.zeros_like(local)
        if not incremental:
            for _ in range(n_steps):
                g = o.clipped_gradients(local, math.inf)
                total += g
                local = local - (step_size / n_steps) * g
            return total / n_steps
        if self._row_oracles is None or self._row_oracles[0] is not o:  # built once per fit (and after rescale)
            d, sizes = o.data, o.sizes
            layers = []
            for j in range(int(sizes.max())):
                who = np.flatnonzero(sizes > j)
                layers.append((who, make_oracle(d.take(d.offsets[who] + j, np.ones(who.size, dtype=np.int64)), o.family)))
            self._row_oracles = (o, layers)
        steps = (step_size / o.sizes)[:, None]
        for who, rows in self._row_oracles[1]:  # step j: every client with more than j rows, on its j-th row
            g = rows.clipped_gradients(local[who], math.inf)
            total[who] += g
            local[who] -= steps[who] * g
        return total / o.sizes[:, None]

    @_contained
    def count_at_most(self, which: str, theta, threshold: float, *, mu: float, stage: str, active=None) -> Reply:
        """Each client's number of rows whose ``which`` norm (gradient / hessian / row) is <= ``threshold``, plus noise.

        Sensitivity 1 (one row replaced changes a count by at most 1).
        """
        def counts(o: ClientOracle, t) -> np.ndarray:
            norms = self._norms(which, t) if o is self._oracle else o.sample_norms(which, t)
            return o.count_at_most(norms, threshold)[:, None]

        return self._release(counts, 1.0, mu, stage, active, theta)

    @_contained
    def count_clipped(self, theta, *, clip: float, mu: float, stage: str) -> Reply:
        """Each client's number of rows whose gradient norm exceeds ``clip`` (B), plus noise (sensitivity 1)."""
        return self._release(lambda o, t: np.asarray(o.sizes - o.count_at_most(o.sample_norms("gradient", t), clip),
                                                     dtype=np.float64)[:, None], 1.0, mu, stage, theta=theta)

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
        def counts(o: ClientOracle, _) -> np.ndarray:
            x = o.data.y if column == RESPONSE else o.data.X[:, column]
            if center is not None:
                x = np.abs(x - center)  # inf near the largest double: above every grid point
            return np.add.reduceat((x <= threshold).astype(np.float64), o.data.offsets[:-1])[:, None]

        return self._release(counts, 1.0, mu, stage)

    @_contained
    def losses(self, theta, *, stage: str) -> Reply:
        """Each client's mean loss, sent without noise (a non-private release: only for mu = inf fits)."""
        return self._release(lambda o, t: o.losses(t)[:, None], math.inf, math.inf, stage, theta=theta)

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
        streams and failure state); the first half's handle also answers :meth:`newton_steps`.
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
                if not (self.family.n_outputs > 1 and 0 < int(reference) <= self.family.n_outputs):
                    raise ValueError(f"reference {reference!r} must be a class of the multinomial model (1.."
                                     f"{self.family.n_outputs}); other families have none.")
                y = np.where(d.y == 0, float(reference), np.where(d.y == reference, 0.0, d.y))
            self._oracle = make_oracle(FederatedData(np.clip(mapped, -_MAX_MAPPED, _MAX_MAPPED), y, d.offsets,
                                                     d.offset), self.family)
        self._norm_cache = None


def newton_step(half1: ClientOracle, half2: ClientOracle, theta, *, clip: float, hessian_clip: float,
                hessian_floor: float, grad_clip: np.ndarray) -> np.ndarray:
    """Every client's Newton step ``H_i^{-1} gbar_i`` at ``theta``, shape (n_clients, d) (FedNewton, Algorithm 4).

    ``H_i``: mean over the first half of per-sample Hessians clipped to norm ``hessian_clip``
    (C_H), eigenvalues floored at ``hessian_floor`` (lambda). ``gbar_i``: mean over the second
    half of per-sample gradients clipped to ``clip`` (B), projected onto the ball of radius
    ``grad_clip[i]`` (G_i) with :func:`~privfedstat._linalg.clip_rows` (its norm neither underflows
    for tiny gradients nor overflows for huge ones, so ``||gbar_i|| <= G_i`` for every finite input).
    Its L2 sensitivity (one datum replaced, in either half) is
    :func:`~privfedstat.privacy.calibration.newton_sensitivity`.
    """
    H = floor_eigenvalues(half1.hessians(theta, hessian_clip), hessian_floor)
    g = half2.clipped_gradients(theta, clip)
    g = clip_rows(g, grad_clip)
    return np.linalg.solve(H, g[..., None])[..., 0]


def smoothed_normalize(u: np.ndarray, alpha: float) -> np.ndarray:
    """Smoothed normalisation ``Norm_alpha(u) = u / (alpha + ||u||)`` of each row, with norm below 1 for every finite row.

    The norm is :func:`~privfedstat._linalg.row_norm_bounds`' upper bound ``b >= ||u||``
    (no overflow or underflow, relative excess at least ``12 u`` over the exact norm,
    ``u = 2^-53``). Numerator and denominator are divided by ``max(alpha, b)`` first, so that
    ``alpha + b`` cannot overflow; the five roundings involved stay below the excess, and the
    computed rows have exact Euclidean norm at most ``(1 + 5u) ||u|| / b < 1``; a row whose norm
    exceeds the largest double gives 0.

    Parameters
    ----------
    u : ndarray of shape (n_rows, n)
        Finite rows.
    alpha : float
        alpha > 0, the smoothing (``||Norm_alpha(u)|| = ||u|| / (alpha + ||u||)``).

    Returns
    -------
    ndarray of shape (n_rows, n)

    References
    ----------
    Bu, Z. et al. (2023). Automatic clipping: differentially private deep learning made easier and
    stronger (smoothed normalisation); Shulgin, Malinovsky, Khirirat & Richtarik (2025), Fed-alpha-NormEC.
    """
    u = np.asarray(u, dtype=np.float64)
    b = row_norm_bounds(u)[:, None]
    finite = np.isfinite(b)
    b, u = np.where(finite, b, 0.0), np.where(finite, u, 0.0)  # rows of infinite norm give 0
    scale = np.maximum(alpha, b)
    return (u / scale) / (alpha / scale + b / scale)


def _only(release: Release, answered: np.ndarray) -> Release:
    """The record of a release in which only the ``answered`` clients' messages reached the server."""
    return replace(release, sensitivity=np.where(answered, release.sensitivity, 0.0),
                   sigma=np.where(answered, release.sigma, 0.0))


def _divergence(theta: np.ndarray, where: str, step_size: float, answered: np.ndarray) -> DivergenceError | None:
    """The error of the answering clients' diverging local iterates, or None (noisy values: post-processing)."""
    return iterate_error(theta if answered.all() else theta[answered], where, step_size)
