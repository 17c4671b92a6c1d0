"""``PrivacyLedger``: every noisy release a client makes, and the guarantees they add up to.

A release is one Gaussian mechanism run by every client at once: client ``i`` adds
``N(0, sigma_i^2 I)`` to a statistic of L2 sensitivity ``Delta_i``. The ledger stores
``(stage, round, kind, Delta_i, sigma_i, server weights)`` for each release and derives:

* **per-client mu** (Definition 2.2 of the core paper, the guarantee towards the server, which
  sees every release): ``mu_i = sqrt(sum_releases (Delta_i / sigma_i)^2)`` by GDP composition.
* **third-party mu** (Definition 2.1, an observer who sees only what the server publishes). For a release the server
  aggregates linearly, ``sum_j w_j (s_j + sigma_j Z_j)``, a datum of client i moves the aggregate by at most ``w_i
  Delta_i`` while its noise has standard deviation ``sqrt(sum_j w_j^2 sigma_j^2)``; this is an exact Gaussian mechanism,
  so ``mu_i = w_i Delta_i / sqrt(sum_j w_j^2 sigma_j^2)`` holds for any sizes and weights (for equal sizes and weights
  it reduces to the paper's ``mu / sqrt(m)``). Noise added inside a client's local iterations ("local" releases, as in
  FedAvg) reaches the published model only after further non-linear local steps, where the propagated noise is no longer
  Gaussian; there the ledger uses the post-processing bound ``Delta_i / sigma_i`` (no amplification by aggregation). The
  paper's ``mu / sqrt(m)`` for FedAvg (Lemma 3.6) needs a contraction argument that treats the propagated noise as
  Gaussian, which is not exact, so it is not used.

  The reported third-party mu is the maximum over clients of the composed per-client values.
* ``(epsilon, delta)`` through the exact GDP duality (:func:`~privfedstat.privacy.gdp.epsilon_from_mu`).
* **privacy units**: a release protects one *record* of a client (``unit="record"``, the core
  paper: one row replaced) or a *client*'s whole dataset (``unit="client"``: DP-FedAvg of McMahan
  et al., Fed-alpha-NormEC; its sensitivity is that of replacing every row of the client). Both are
  replace-one units, and every guarantee the ledger states is under that relation.

**This ledger is the server's view.** The server received every message, so the ledger holds,
per release and client, who sent (a client that sat a Poisson round out has ``Delta_i = 0``
there): :meth:`PrivacyLedger.to_frame`, :attr:`PrivacyLedger.client_mu` and
:meth:`PrivacyLedger.epsilon` are the guarantees towards the server, which sampling does not
amplify. What may be published is :meth:`PrivacyLedger.public_view`
(:class:`~privfedstat.privacy.public.PublicLedger`): mechanisms, noise, rates and rounds without
membership, with the epsilon a third party faces (for client-level Poisson rounds, amplified by
the sampling and accounted with dp-accounting's PLD under replace-one adjacency).

**Storage.** A fit of M clients over R rounds has R M (sensitivity, sigma, weight) triples. The
ledger keeps each release's per-client vectors compactly (:class:`_Column`): a vector equal bit for
bit to one of the last few it stored is kept once and shared (the same sensitivities and noise
every round), and a vector that is zero for all but a few clients (a Poisson round: clients that
sat out have ``Delta_i = sigma_i = w_i = 0``) keeps only its non-zero entries. The guarantees are
composed as releases arrive (running sums of ``mu_i^2``); :attr:`PrivacyLedger.releases` and
:meth:`PrivacyLedger.to_frame` rebuild the full per-client vectors and table on demand.

Data-dependent choices that were not privatized (e.g. ``clip="paper"``) are recorded as *leaks*; a ledger with a leak,
or with a non-private release, reports ``is_private == False``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._linalg import safe_norm
from ._columns import _Column, _column, _Entry
from .gdp import delta_from_mu, epsilon_from_mu
from .public import SUBSAMPLED, Block, PublicLedger
from .secure_noise import IntegerNoise
from .secure_pld import EXACT_PLD_MAX_MU, achievable_epsilon, secure_pld
from .secure_rdp import RDP_ORDERS, gaussian_rdp, rdp_epsilon, skellam_rdp

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["Release", "PrivacyLedger", "UNITS"]

#: distinct vectors the ledger compares a new one with before storing it (and compositions of them it keeps)
_RECENT = 8

#: privacy units a release can protect: one row of a client, or a client's whole dataset
UNITS = ("record", "client")


@dataclass(frozen=True)
class Release:
    """One Gaussian mechanism run by all clients.

    Attributes
    ----------
    stage : str
        Which part of the algorithm released it (e.g. ``"gradient"``, ``"local-step"``).
    round : int
        Communication round during which the mechanism ran (0-based).
    kind : {"aggregated", "local"}
        ``"aggregated"``: the noisy values are sent and the server publishes only
        ``sum_i weights[i] * value_i``; ``"local"``: noise added inside local computation whose
        result is sent later.
    sensitivity : ndarray of shape (n_clients,)
        L2 sensitivity Delta_i of client i's statistic (one datum replaced).
    sigma : ndarray of shape (n_clients,)
        Noise standard deviation used by client i (0 = no noise).
    weights : ndarray of shape (n_clients,) or None
        Server aggregation weights (``"aggregated"`` releases).
    unit : {"record", "client"}
        What one datum is: a row of a client (the default) or a client's whole dataset.
    sampling_rate : float
        Poisson participation rate q of the round (1: the server asked every client).
    noise_multiplier : float or None
        For a client-level round of Poisson-sampled participants in which the server put noise of the
        calibrated sd in the place of every client that did not send (so the aggregate's noise does
        not depend on who took part): the noise multiplier ``z = 2 sigma_i / Delta_i`` of the round
        (noise sd per half the replacement sensitivity, the same for every client). None otherwise
        (then no amplification is claimed for the round).
    integer : IntegerNoise or None
        A release under secure aggregation (:mod:`~privfedstat.privacy.secure_noise`): the server saw only the sum of
        the sites' quantized messages with their Skellam noise shares. ``sensitivity`` and ``sigma`` are then the
        worst site's sensitivity (rounding slack included) and the sum's noise sd (of each block's sum for a blocked
        release, :attr:`~privfedstat.privacy.secure_noise.IntegerNoise.blocks`), in message units, the same for the
        server and a third party; ``client_mu`` is their ratio times the Skellam's factor ``gdp_factor`` (1 + about
        ``1 / (12 Lambda)``), the release's GDP parameter.
    """

    stage: str
    round: int
    kind: str
    sensitivity: np.ndarray
    sigma: np.ndarray
    weights: np.ndarray | None = None
    unit: str = "record"
    sampling_rate: float = 1.0
    noise_multiplier: float | None = None
    integer: IntegerNoise | None = None

    def client_mu(self) -> np.ndarray:
        """Per-client GDP parameter Delta_i / sigma_i of this release (inf where sigma_i = 0 < Delta_i)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = np.where(self.sensitivity == 0, 0.0, self.sensitivity / self.sigma)
        if self.integer is not None:
            mu = mu * self.integer.gdp_factor
        return np.where(np.isnan(mu), np.inf, mu)

    def third_party_mu(self) -> np.ndarray:
        """Per-client GDP parameter towards an observer of the published aggregate."""
        if self.kind != "aggregated" or self.integer is not None:  # a secure sum: everyone sees the same sum
            return self.client_mu()
        return _aggregate_mu(self.sensitivity, self.sigma, self.weights)


def _aggregate_mu(sensitivity: np.ndarray, sigma: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``w_i Delta_i / sqrt(sum_j w_j^2 sigma_j^2)``: each client's mu towards an observer of the weighted sum."""
    noise_sd = safe_norm(weights * sigma)
    shift = np.abs(weights) * sensitivity
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.where(shift == 0, 0.0, shift / noise_sd)
    return np.where(np.isnan(mu), np.inf, mu)


class PrivacyLedger:
    """Record of all releases of one fit as the server saw them, with the per-client and third-party guarantees.

    Server-side: it tells who took part in each round. :meth:`public_view` is what may be published.

    Parameters
    ----------
    n_clients : int
        Number of clients (m).
    secure_mode : bool, default False
        Whether the fit drew its noise in secure mode
        (:class:`~privfedstat.privacy.mechanisms.SecureClientNoise`); shown in the repr.
    """

    def __init__(self, n_clients: int, *, secure_mode: bool = False) -> None:
        self.n_clients = int(n_clients)
        self.secure_mode = bool(secure_mode)
        self._entries: list[_Entry] = []
        self._recent: dict[tuple, tuple] = {}  # (shape, bytes) of the last distinct vectors stored -> (column, >= 0)
        self._composition: dict[tuple, tuple] = {}  # (recent columns' ids, kind, ...) -> their (mu^2, tp^2, max mu)
        self._pld: tuple | None = None  # (releases composed, the PLD of epsilon()) as last computed
        self.leaks: list[str] = []
        # running sums of squared per-release mu (GDP composition), kept up to date by record()
        self._mu2 = np.zeros(self.n_clients)
        self._tp2 = np.zeros(self.n_clients)

    def __getstate__(self) -> dict:
        """The ledger without its caches (the recent vectors' bytes, the composed mu per stored vectors): a copy or
        a pickle holds each stored vector once; it shares no vector of its own later releases with earlier ones."""
        return {**self.__dict__, "_recent": {}, "_composition": {}, "_pld": None}

    # ------------------------------------------------------------------ recording
    def record(self, release: Release) -> None:
        """Append a release (arrays are validated against ``n_clients``)."""
        self._record(release, release.round, release.weights, release.sampling_rate, release.noise_multiplier)

    def record_reply(self, releases: Sequence[Release], *, round: int, weights: np.ndarray | None,
                     sampling_rate: float = 1.0, noise_multiplier: float | None = None) -> None:
        """Append the releases of one reply as the server received them: in ``round``, the "aggregated" ones to be
        aggregated with ``weights`` (the "local" ones without), at Poisson rate ``sampling_rate`` and with the
        top-up's ``noise_multiplier``; the same as :meth:`record` of each release with these fields replaced."""
        for rel in releases:
            self._record(rel, round, weights if rel.kind == "aggregated" else None, sampling_rate, noise_multiplier)

    def _record(self, release: Release, round: int, weights: np.ndarray | None, sampling_rate: float,
                noise_multiplier: float | None) -> None:
        """:meth:`record` of ``release`` with its round, weights, sampling rate and noise multiplier replaced."""
        sens, sigma = self._checked(release.sensitivity, "sensitivity"), self._checked(release.sigma, "sigma")
        kind = release.kind
        if kind not in ("aggregated", "local"):
            raise ValueError(f"unknown release kind {kind!r}.")
        if release.unit not in UNITS:
            raise ValueError(f"unknown privacy unit {release.unit!r}; one of {UNITS}.")
        if not 0 < sampling_rate <= 1:
            raise ValueError(f"a release's sampling rate must lie in (0, 1], got {sampling_rate!r}.")
        if kind == "aggregated" and (weights is None or weights.shape != (self.n_clients,)):
            raise ValueError("an aggregated release needs one server weight per client.")
        w = None if weights is None else self._store(weights)[0]
        mu2, tp2, mu_max = self._composed(release, weights, sens, sigma, w)
        self._entries.append(_Entry(self._labels(release, round, sampling_rate, noise_multiplier), sens, sigma, w,
                                    mu_max))
        self._mu2 += mu2
        self._tp2 += tp2

    def _checked(self, values: np.ndarray, name: str) -> _Column:
        """The stored column of a release's per-client vector ``name``: ``n_clients`` non-negative numbers, else a
        ValueError."""
        if values.shape != (self.n_clients,):
            raise ValueError(f"release {name} must be {self.n_clients} non-negative numbers.")
        column, non_negative = self._store(values)
        if not non_negative:  # also NaN
            raise ValueError(f"release {name} must be {self.n_clients} non-negative numbers.")
        return column

    def _labels(self, release: Release, round: int, sampling_rate: float, noise_multiplier: float | None) -> Release:
        """The release's labels (a :class:`Release` without vectors): the last ones stored when they are equal (the
        releases of one reply share them)."""
        last = self._entries[-1].labels if self._entries else None
        if (last is not None and last.round == round and last.stage == release.stage and last.kind == release.kind
                and last.unit == release.unit and last.sampling_rate == sampling_rate
                and last.noise_multiplier == noise_multiplier and last.integer is release.integer):
            return last
        return Release(release.stage, round, release.kind, None, None, None, release.unit, sampling_rate,
                       noise_multiplier, release.integer)

    def _composed(self, release: Release, weights: np.ndarray | None, sens: _Column, sigma: _Column,
                  w: _Column | None) -> tuple[np.ndarray, np.ndarray, float]:
        """``(mu_i^2, third-party mu_i^2, max_i mu_i)`` of a release, computed once per distinct stored vectors.

        Vectors equal to a recent one are stored as the same :class:`_Column` (:meth:`_store`), so the columns'
        identities (unique: the ledger's entries keep them alive) name the vectors."""
        kind = release.kind
        key = (id(sens), id(sigma), id(w), kind) if release.integer is None else None  # secure releases: each its own
        value = self._composition.pop(key, None)
        if value is None:
            cm = release.client_mu()
            tp = cm if kind == "local" or release.integer is not None else _aggregate_mu(
                release.sensitivity, release.sigma, weights)
            value = (cm * cm, tp * tp, float(np.max(cm, initial=0.0)))
            if key is None:
                return value
            if len(self._composition) >= _RECENT:
                del self._composition[next(iter(self._composition))]  # the least recently used
        self._composition[key] = value  # newest last
        return value

    def _store(self, values: np.ndarray) -> tuple[_Column, bool]:
        """``values`` as stored (sparse when mostly zero, else a read-only copy), the same :class:`_Column` as an equal
        vector stored recently; and whether its entries are non-negative."""
        values = np.asarray(values, dtype=np.float64)
        key = (values.shape, values.tobytes())  # equal bit for bit (0.0 and -0.0 differ)
        stored = self._recent.pop(key, None)
        if stored is None:
            stored = (_column(values), bool((values >= 0).all()))
            if len(self._recent) >= _RECENT:
                del self._recent[next(iter(self._recent))]  # the least recently stored or matched
        self._recent[key] = stored  # newest last
        return stored

    @property
    def releases(self) -> Sequence[Release]:
        """Every release in the order recorded, with its per-client vectors rebuilt on access (read-only)."""
        return _Releases(self._entries)

    def noise_pairs(self, exclude: tuple[str, ...] = ()) -> list[tuple[np.ndarray, np.ndarray]]:
        """The distinct ``(sensitivity, sigma)`` vectors of the releases whose stage starts with none of ``exclude``
        (releases that share their stored vectors appear once), read-only, in order of first appearance."""
        pairs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for e in self._entries:
            if e.labels.stage.startswith(exclude):
                continue
            key = (id(e.sensitivity), id(e.sigma))
            if key not in pairs:
                pairs[key] = (e.sensitivity.dense(), e.sigma.dense())
        return list(pairs.values())

    def add_leak(self, description: str) -> None:
        """Note a data-dependent quantity used without privacy accounting."""
        self.leaks.append(description)

    # ------------------------------------------------------------------ guarantees
    @property
    def client_mu(self) -> np.ndarray:
        """Composed GDP parameter of each client towards the server (Definition 2.2), shape (n_clients,).

        Server-side: it composes only the releases a client sent, so it reveals how often it took part."""
        return np.sqrt(self._mu2)

    @property
    def third_party_mu(self) -> float:
        """GDP parameter of the published model towards a third party (Definition 2.1), worst client.

        Computed given who took part in each round (the weights and noise of the clients that sent);
        :meth:`public_view` publishes it for record-level units only."""
        return float(np.sqrt(self._tp2.max())) if self.n_clients else 0.0

    @property
    def mu(self) -> float:
        """The worst client's mu (the fit is ``mu``-fed-GDP)."""
        return float(np.max(self.client_mu))

    @property
    def is_private(self) -> bool:
        """True when every client's mu is finite and nothing data-dependent leaked."""
        return bool(np.all(np.isfinite(self.client_mu))) and not self.leaks

    def epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon of the worst client towards the server at the given delta: the exact GDP-to-DP conversion of :attr:`mu`
        (secure releases too: their integer noise is GDP, :func:`~privfedstat.privacy.secure_noise.skellam_gdp_step`);
        with one-coordinate secure releases, the smaller of that and their exact PLDs composed with the GDP of the rest
        (:meth:`_exact_pld`; both upper bounds: the PLD is below by about ``1 / Lambda`` relative, less dp-accounting's
        composition error, about ``4e-9`` per release), and :attr:`mu` is then an upper bound."""
        gdp = epsilon_from_mu(self.mu, delta) if self.mu > 0 else 0.0
        pld = self._exact_pld()
        return gdp if pld is None else min(gdp, float(pld.get_epsilon_for_delta(delta)))

    def epsilon_bracket(self, delta: float = 1e-5) -> tuple[float, float]:
        """``(lower, upper)`` around the exact epsilon of the worst client at ``delta``: ``upper`` is :meth:`epsilon`;
        ``lower`` the secure releases alone at shift patterns that data within their stated sensitivity produce with
        certainty (:func:`~privfedstat.privacy.secure_pld.achievable_epsilon`; the other releases only add to it).
        docs/guide/secure-aggregation.md, "Exact accounting", measures the bracket on real fits."""
        return achievable_epsilon([e.labels.integer for e in self._entries if e.labels.integer is not None],
                                  delta), self.epsilon(delta)

    def _exact_pld(self):
        """The PLD of the one-coordinate secure releases (:attr:`~privfedstat.privacy.secure_noise.IntegerNoise.
        exact_shift`; their exact PLDs, the same for every client) composed with a Gaussian of the worst client's GDP of
        the rest (their ``mu^2`` taken off each client's); None without such releases, with an infinite mu or one above
        :data:`~privfedstat.privacy.secure_pld.EXACT_PLD_MAX_MU`."""
        if self._pld is not None and self._pld[0] == len(self._entries):
            return self._pld[1]
        exact = [e for e in self._entries if e.labels.integer is not None and e.labels.integer.exact_shift is not None]
        pld = None
        if exact and np.all(np.isfinite(self._mu2)):
            rest = self._mu2.copy()
            for e in exact:
                rest -= e.release().client_mu() ** 2
            if (mu_rest := math.sqrt(max(float(rest.max()), 0.0))) <= EXACT_PLD_MAX_MU:
                pld = secure_pld([e.labels.integer for e in exact], mu_rest)
        self._pld = (len(self._entries), pld)
        return pld

    @property
    def has_integer_noise(self) -> bool:
        """Whether some release went through secure aggregation (its noise is the sites' summed integer shares)."""
        return any(e.labels.integer is not None for e in self._entries)

    def collusion_mu(self, t: int) -> float:
        """The worst client's GDP parameter when ``t`` sites give the server their noise shares.

        A secure release's sum then carries only the other ``shares - t`` shares (inf when none is left); a release
        with per-site noise is unchanged (each site's own noise protects it). Composed per release at its worst
        client, so ``collusion_mu(0) >= mu``, equal when one client is the worst in every release.
        """
        t = _colluders(t)
        total = 0.0
        for e in self._entries:
            noise = e.labels.integer
            mu = e.mu_max if noise is None else noise.colluding(t).gdp_mu
            total += mu * mu
        return math.sqrt(total)

    def collusion_epsilon(self, t: int, delta: float = 1e-5) -> float:
        """Epsilon at ``delta`` towards a server with which ``t`` sites collude (0: the server alone): the GDP conversion
        of :meth:`collusion_mu`; inf when a secure sum is left without noise."""
        mu = self.collusion_mu(t)
        return epsilon_from_mu(mu, delta) if mu > 0 else 0.0

    def renyi_epsilon(self, delta: float = 1e-5, t: int = 0) -> float:
        """The analytical bound of :meth:`collusion_epsilon`: every release's Renyi DP (the Skellam bound of
        :func:`~privfedstat.privacy.secure_rdp.skellam_rdp`, the Gaussian's exact curve at its worst client),
        composed and converted by dp-accounting; it needs no numerical constant and is about 9% larger."""
        total = np.zeros(len(RDP_ORDERS))
        for e in self._entries:
            noise = e.labels.integer
            total += gaussian_rdp(RDP_ORDERS, e.mu_max) if noise is None else \
                skellam_rdp(RDP_ORDERS, noise.colluding(_colluders(t)))
        if not total.any():
            return 0.0
        return rdp_epsilon(total, delta) if np.isfinite(total).any() else math.inf

    def delta(self, epsilon: float) -> float:
        """Delta of the worst client at the given epsilon (the smaller of GDP's and the PLD's, as :meth:`epsilon`)."""
        gdp = delta_from_mu(self.mu, epsilon) if self.mu > 0 else 0.0
        pld = self._exact_pld()
        return gdp if pld is None else min(gdp, float(pld.get_delta_for_epsilon(epsilon)))

    @property
    def units(self) -> tuple[str, ...]:
        """The privacy units of the releases (``"record"``, ``"client"``), in order of first appearance."""
        return tuple(dict.fromkeys(e.labels.unit for e in self._entries))

    def third_party_epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon towards a third party at the given delta (the GDP conversion of :attr:`third_party_mu`)."""
        return epsilon_from_mu(self.third_party_mu, delta) if self.third_party_mu > 0 else 0.0

    # ------------------------------------------------------------------ reporting
    def public_view(self) -> PublicLedger:
        """What may be published: the releases grouped into blocks of one stage, mechanism and noise, without who
        took part, with the third party's epsilon (see :mod:`privfedstat.privacy.public`).

        A client-level release of a Poisson round that the server topped up (``noise_multiplier``
        recorded) becomes a Poisson-subsampled Gaussian block with that multiplier; every other
        release a Gaussian block at its worst client's ``Delta_i / sigma_i``.
        """
        groups: dict[tuple, int] = {}
        for e in self._entries:
            r, mu = e.labels, e.mu_max
            if r.unit == "client" and r.sampling_rate < 1.0 and r.noise_multiplier is not None:
                z = float(r.noise_multiplier)
                key = (r.stage, r.unit, r.kind, SUBSAMPLED, r.sampling_rate, 2.0 / z if z > 0 else math.inf, z)
            else:
                key = (r.stage, r.unit, r.kind, "Gaussian", r.sampling_rate, mu, 2.0 / mu if mu > 0 else math.inf)
            groups[key] = groups.get(key, 0) + 1
        return PublicLedger(
            n_clients=self.n_clients,
            blocks=tuple(Block(*key, rounds) for key, rounds in groups.items()),
            # Definition 2.1 depends on who took part: published for record-level units only, whose guarantees
            # do not rest on hiding it
            record_third_party_mu=self.third_party_mu if "client" not in self.units else 0.0,
            leaks=tuple(self.leaks),
            secure_mode=self.secure_mode,
        )

    def to_frame(self) -> pd.DataFrame:
        """One row per release and client: stage, round, kind, client, sensitivity, sigma, mu, weight.

        Server-side: a client with sensitivity 0 in a round did not send in it."""
        import pandas as pd
        m, releases = self.n_clients, list(self.releases)
        rows = {
            "stage": np.repeat([r.stage for r in releases], m),
            "round": np.repeat([r.round for r in releases], m),
            "kind": np.repeat([r.kind for r in releases], m),
            "client": np.tile(np.arange(m), len(releases)),
            "sensitivity": np.concatenate([r.sensitivity for r in releases]) if releases else [],
            "sigma": np.concatenate([r.sigma for r in releases]) if releases else [],
            "mu": np.concatenate([r.client_mu() for r in releases]) if releases else [],
            "weight": np.concatenate(
                [r.weights if r.weights is not None else np.full(m, np.nan) for r in releases]
            )
            if releases
            else [],
        }
        return pd.DataFrame(rows)

    def by_stage(self) -> pd.DataFrame:
        """Per stage: number of releases and the worst client's composed mu."""
        import pandas as pd
        df = self.to_frame()
        df["mu2"] = df["mu"] ** 2
        g = df.groupby(["stage", "client"], sort=False)["mu2"].sum().groupby("stage", sort=False)
        n = df.groupby("stage", sort=False)["round"].count() // max(self.n_clients, 1)
        return pd.DataFrame({"releases": n, "mu (worst client)": np.sqrt(g.max())})

    def __repr__(self) -> str:
        cm = self.client_mu
        if not self.is_private and np.all(np.isinf(cm)):
            return f"PrivacyLedger(non-private: no noise, {len(self._entries)} releases, {self.n_clients} clients)"
        eps = self.epsilon(1e-5)
        text = (
            f"PrivacyLedger(server view, {self.n_clients} clients, {len(self._entries)} releases: "
            f"client mu max {cm.max():.4g} (min {cm.min():.4g}), third-party mu {self.third_party_mu:.4g}, "
            f"(eps, delta) = ({eps:.4g}, 1e-05), unit={'+'.join(self.units) or 'record'}, private={self.is_private}"
            f"{', secure_mode=True' if self.secure_mode else ''})"
        )
        if self.leaks:
            text += "\n  NOT fully private: " + "; ".join(self.leaks)
        return text


def _colluders(t) -> int:
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
        raise ValueError(f"t (colluding sites) must be a non-negative integer, got {t!r}.")
    return int(t)


class _Releases(Sequence):
    """The ledger's releases as :class:`Release` objects, their vectors rebuilt from the stored columns on access."""

    def __init__(self, entries: list[_Entry]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [e.release() for e in self._entries[i]]
        return self._entries[i].release()
