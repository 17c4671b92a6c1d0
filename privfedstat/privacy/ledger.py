"""``PrivacyLedger``: every noisy release a client makes, and the guarantees they add up to.

A release is one Gaussian mechanism run by every client at once: client ``i`` adds
``N(0, sigma_i^2 I)`` to a statistic of L2 sensitivity ``Delta_i``. The ledger stores
``(stage, round, kind, Delta_i, sigma_i, server weights)`` for each release and derives:

* **per-client mu** (Definition 2.2 of the core paper, the guarantee towards the server, which
  sees every release): ``mu_i = sqrt(sum_releases (Delta_i / sigma_i)^2)`` by GDP composition.
* **third-party mu** (Definition 2.1, an observer who sees only what the server publishes). For a
  release the server aggregates linearly, ``sum_j w_j (s_j + sigma_j Z_j)``, a datum of client i
  moves the aggregate by at most ``w_i Delta_i`` while its noise has standard deviation
  ``sqrt(sum_j w_j^2 sigma_j^2)``; this is an exact Gaussian mechanism, so
  ``mu_i = w_i Delta_i / sqrt(sum_j w_j^2 sigma_j^2)`` holds for any sizes and weights (for equal
  sizes and weights it reduces to the paper's ``mu / sqrt(m)``). Noise added inside a client's
  local iterations ("local" releases, as in FedAvg) reaches the published model only after
  further non-linear local steps, where the propagated noise is no longer Gaussian; there the
  ledger uses the post-processing bound ``Delta_i / sigma_i`` (no amplification by aggregation).
  The paper's ``mu / sqrt(m)`` for FedAvg (Lemma 3.6) needs a contraction argument that treats the
  propagated noise as Gaussian, which is not exact, so it is not used.

  The reported third-party mu is the maximum over clients of the composed per-client values.
* ``(epsilon, delta)`` through the exact GDP duality (:func:`~privfedstat.privacy.gdp.epsilon_from_mu`).
* **privacy units**: a release protects one *record* of a client (``unit="record"``, the core
  paper: one row replaced) or a *client*'s whole dataset (``unit="client"``: DP-FedAvg of McMahan
  et al., Fed-alpha-NormEC; its sensitivity is that of replacing every row of the client). The
  per-client mu above is the guarantee for the release's unit towards the server, who knows who
  took part in each round, so sampling participants amplifies nothing there. For client-level
  releases made by Poisson-sampled participants (rate q), an observer who does not see who took
  part gets the amplified guarantee :meth:`PrivacyLedger.amplified_epsilon`: the composition of
  Poisson-subsampled Gaussian mechanisms under add/remove-one-client adjacency (sensitivity half
  the replacement sensitivity, so noise multiplier ``2 sigma_i / Delta_i``), accounted exactly with
  dp-accounting's PLD (:mod:`privfedstat.privacy.accounting`), never a CLT approximation.

Data-dependent choices that were not privatized (e.g. ``clip="paper"``) are recorded as *leaks*;
a ledger with a leak, or with a non-private release, reports ``is_private == False``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._linalg import safe_norm
from .gdp import delta_from_mu, epsilon_from_mu

__all__ = ["Release", "PrivacyLedger", "UNITS"]

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
        not depend on who took part): the add/remove noise multiplier ``2 sigma_i / Delta_i`` of the
        round. None otherwise (then no amplification is claimed for the round).
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

    def client_mu(self) -> np.ndarray:
        """Per-client GDP parameter Delta_i / sigma_i of this release (inf where sigma_i = 0 < Delta_i)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = np.where(self.sensitivity == 0, 0.0, self.sensitivity / self.sigma)
        return np.where(np.isnan(mu), np.inf, mu)

    def third_party_mu(self) -> np.ndarray:
        """Per-client GDP parameter towards an observer of the published aggregate."""
        if self.kind != "aggregated":
            return self.client_mu()
        w = self.weights
        noise_sd = safe_norm(w * self.sigma)
        shift = np.abs(w) * self.sensitivity
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = np.where(shift == 0, 0.0, shift / noise_sd)
        return np.where(np.isnan(mu), np.inf, mu)


class PrivacyLedger:
    """Record of all releases of one fit, with the per-client and third-party guarantees.

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
        self.releases: list[Release] = []
        self.leaks: list[str] = []
        # running sums of squared per-release mu (GDP composition), kept up to date by record()
        self._mu2 = np.zeros(self.n_clients)
        self._tp2 = np.zeros(self.n_clients)

    # ------------------------------------------------------------------ recording
    def record(self, release: Release) -> None:
        """Append a release (arrays are validated against ``n_clients``)."""
        for name in ("sensitivity", "sigma"):
            a = getattr(release, name)
            if a.shape != (self.n_clients,) or not (a >= 0).all():  # also rejects NaN
                raise ValueError(f"release {name} must be {self.n_clients} non-negative numbers.")
        if release.kind not in ("aggregated", "local"):
            raise ValueError(f"unknown release kind {release.kind!r}.")
        if release.unit not in UNITS:
            raise ValueError(f"unknown privacy unit {release.unit!r}; one of {UNITS}.")
        if not 0 < release.sampling_rate <= 1:
            raise ValueError(f"a release's sampling rate must lie in (0, 1], got {release.sampling_rate!r}.")
        if release.kind == "aggregated" and (release.weights is None or release.weights.shape != (self.n_clients,)):
            raise ValueError("an aggregated release needs one server weight per client.")
        self.releases.append(release)
        cm = release.client_mu()
        self._mu2 += cm * cm
        tp = cm if release.kind == "local" else release.third_party_mu()
        self._tp2 += tp * tp

    def add_leak(self, description: str) -> None:
        """Note a data-dependent quantity used without privacy accounting."""
        self.leaks.append(description)

    # ------------------------------------------------------------------ guarantees
    @property
    def client_mu(self) -> np.ndarray:
        """Composed GDP parameter of each client towards the server (Definition 2.2), shape (n_clients,)."""
        return np.sqrt(self._mu2)

    @property
    def third_party_mu(self) -> float:
        """GDP parameter of the published model towards a third party (Definition 2.1), worst client."""
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
        """Epsilon of the worst client at the given delta (exact GDP-to-DP conversion)."""
        return epsilon_from_mu(self.mu, delta) if self.mu > 0 else 0.0

    def delta(self, epsilon: float) -> float:
        """Delta of the worst client at the given epsilon."""
        return delta_from_mu(self.mu, epsilon) if self.mu > 0 else 0.0

    @property
    def units(self) -> tuple[str, ...]:
        """The privacy units of the releases (``"record"``, ``"client"``), in order of first appearance."""
        return tuple(dict.fromkeys(r.unit for r in self.releases))

    def amplified_epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon of the worst client's *client-level* releases towards an observer who does not see who took part.

        A client-level round of Poisson-sampled participants (rate q < 1) whose aggregate the server
        topped up with noise for every client that did not send (``noise_multiplier`` recorded:
        :meth:`privfedstat.estimators.base.FitContext.ask` does this) is, for every client -- sampled
        or not, the observer does not know -- the Poisson-subsampled Gaussian mechanism with that
        noise multiplier (add/remove one client: half the replacement sensitivity). Any other
        client-level round counts, unamplified (q = 1), for the clients that sent in it: with
        per-client noise alone the aggregate's noise variance reveals how many took part. The
        composition is accounted with dp-accounting's PLD
        (:func:`~privfedstat.privacy.accounting.heterogeneous_epsilon`). Raises ``ValueError`` when
        the ledger has no client-level release; ``inf`` when one was sent without noise.
        """
        from .accounting import heterogeneous_epsilon  # dp-accounting is imported only when asked

        client_level = [r for r in self.releases if r.unit == "client"]
        if not client_level:
            raise ValueError("no client-level release: amplified_epsilon applies to client-level units "
                             "(e.g. DPFedAvg); use epsilon() for record-level guarantees.")
        sampled: dict[tuple[float, float], int] = {}  # (z, q) -> rounds, the same for every client
        full = [dict() for _ in range(self.n_clients)]
        for r in client_level:
            if r.sampling_rate < 1.0 and r.noise_multiplier is not None:
                if not r.noise_multiplier > 0:
                    return math.inf
                key = (round(float(r.noise_multiplier), 12), float(r.sampling_rate))
                sampled[key] = sampled.get(key, 0) + 1
                continue
            took = r.sensitivity > 0
            if np.any(r.sigma[took] == 0):
                return math.inf
            for i in np.flatnonzero(took):
                key = (round(float(2.0 * r.sigma[i] / r.sensitivity[i]), 12), 1.0)
                full[i][key] = full[i].get(key, 0) + 1
        worst = 0.0
        for blocks in {tuple(sorted(f.items())) for f in full}:
            events = dict(sampled)
            for key, k in blocks:
                events[key] = events.get(key, 0) + k
            if events:
                worst = max(worst, heterogeneous_epsilon([(z, q, k) for (z, q), k in sorted(events.items())], delta))
        return worst

    def statement(self, delta: float = 1e-5, budget: float | None = None) -> str:
        """One line saying what the fit protects and how much: the "Privacy" row of every summary.

        ``mu`` is the worst client's composed GDP parameter towards the server (what the ledger
        guarantees), labelled with its neighbouring relation: one record of a client replaced
        (record-level releases) or the client's whole data replaced (client-level ones). With a
        ``budget`` (the mu the fit was given) above it, the line says so: clients that sat out
        rounds spent less than their budget. Client-level fits add the epsilon towards an
        observer of the aggregates (one client added or removed, amplified by Poisson sampling
        where the server topped up the noise: :meth:`amplified_epsilon`), the guarantee a target
        ``epsilon`` is met for; record-level fits add the third-party mu.
        """
        if not np.isfinite(self.mu):
            return "none (mu = inf)"
        units = self.units
        what = {"record": "one record (row) of a client replaced", "client": "a client's whole data replaced"}
        line = (f"mu = {self.mu:.4g} per client towards the server, {' / '.join(what[u] for u in units)} "
                f"(eps = {self.epsilon(delta):.4g} at delta = {delta:g})")
        if budget is not None and math.isfinite(budget) and self.mu < budget * (1.0 - 1e-9):
            line += f"; the budget was mu = {budget:.4g} (clients that sat out rounds spent less)"
        if "client" in units:
            line += (f"; towards an observer of the aggregates eps = {self.amplified_epsilon(delta):.4g} at delta = "
                     f"{delta:g}, one client added or removed")
        else:
            line += f"; third-party mu = {self.third_party_mu:.4g}"
        return line

    def third_party_epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon towards a third party at the given delta."""
        return epsilon_from_mu(self.third_party_mu, delta) if self.third_party_mu > 0 else 0.0

    # ------------------------------------------------------------------ reporting
    def to_frame(self) -> pd.DataFrame:
        """One row per release and client: stage, round, kind, client, sensitivity, sigma, mu, weight."""
        m = self.n_clients
        rows = {
            "stage": np.repeat([r.stage for r in self.releases], m),
            "round": np.repeat([r.round for r in self.releases], m),
            "kind": np.repeat([r.kind for r in self.releases], m),
            "client": np.tile(np.arange(m), len(self.releases)),
            "sensitivity": np.concatenate([r.sensitivity for r in self.releases]) if self.releases else [],
            "sigma": np.concatenate([r.sigma for r in self.releases]) if self.releases else [],
            "mu": np.concatenate([r.client_mu() for r in self.releases]) if self.releases else [],
            "weight": np.concatenate(
                [r.weights if r.weights is not None else np.full(m, np.nan) for r in self.releases]
            )
            if self.releases
            else [],
        }
        return pd.DataFrame(rows)

    def by_stage(self) -> pd.DataFrame:
        """Per stage: number of releases and the worst client's composed mu."""
        df = self.to_frame()
        df["mu2"] = df["mu"] ** 2
        g = df.groupby(["stage", "client"], sort=False)["mu2"].sum().groupby("stage", sort=False)
        n = df.groupby("stage", sort=False)["round"].count() // max(self.n_clients, 1)
        return pd.DataFrame({"releases": n, "mu (worst client)": np.sqrt(g.max())})

    def __repr__(self) -> str:
        cm = self.client_mu
        if not self.is_private and np.all(np.isinf(cm)):
            return f"PrivacyLedger(non-private: no noise, {len(self.releases)} releases, {self.n_clients} clients)"
        eps = self.epsilon(1e-5)
        text = (
            f"PrivacyLedger({self.n_clients} clients, {len(self.releases)} releases: "
            f"client mu max {cm.max():.4g} (min {cm.min():.4g}), third-party mu {self.third_party_mu:.4g}, "
            f"(eps, delta) = ({eps:.4g}, 1e-05), unit={'+'.join(self.units) or 'record'}, private={self.is_private}"
            f"{', secure_mode=True' if self.secure_mode else ''})"
        )
        if self.leaks:
            text += "\n  NOT fully private: " + "; ".join(self.leaks)
        return text
