"""``PublicLedger``: what a fit may publish about its privacy, and the guarantee each audience gets.

A fit has two audiences (docs/privacy.md, "Who sees what"):

* **The server** received every message, so it knows which clients took part in each round. Its
  view is the full :class:`~privfedstat.privacy.ledger.PrivacyLedger` (one row per release and
  client). Sampling amplifies nothing towards it: each client's guarantee is the GDP composition
  of the releases it sent, under the package's unit (one row, or one client's whole dataset,
  *replaced*).
* **A third party** sees the published model and this public view: per stage, the mechanism, the
  privacy unit, the noise (as the GDP parameter ``mu`` of one release and the noise multiplier
  ``z = 2 / mu``), the Poisson participation rate and the number of rounds, but not who took part
  in which round. For client-level rounds whose aggregate the server topped up with noise in the
  place of every client that did not send, the published aggregate does not reveal who took
  part, and towards this observer each such round is the Poisson-subsampled Gaussian mechanism:
  :meth:`PublicLedger.epsilon` composes them with dp-accounting's PLD under replace-one adjacency
  (:mod:`privfedstat.privacy.accounting`). For record-level fits the third party's guarantee is
  Definition 2.1 of the core paper (the published aggregate averages over every client's noise),
  which the server computes and states here as one number.

What in this view depends on which clients a Poisson round sampled (the server's randomness, not
the data): nothing in a Poisson-subsampled block (its rate, multiplier and rounds are fixed in
advance); but a Gaussian block's ``mu`` is its worst *participant's* ``Delta_i / sigma_i``, and
the record-level ``record_third_party_mu`` (Definition 2.1) is computed from the clients that took
part in each round, so with Poisson participation and unequal clients two fits that differ only in
the participants drawn can publish different values (an audit found third-party mu 0.29 to 0.36
over four seeds of one record-level fit). These numbers therefore say something about who took
part. Record-level guarantees do not rest on hiding that (no amplification by sampling is
claimed for them), and the client-level epsilon amplifies only the subsampled blocks, whose
numbers are fixed before any draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._linalg import safe_norm
from .gdp import epsilon_from_mu

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["Block", "PublicLedger", "NEIGHBOURING"]

#: the neighbouring relation of every guarantee the package states: one unit (a row, or a client's whole dataset)
#: replaced by another
NEIGHBOURING = "replace-one"

#: the mechanism of a block whose amplification by Poisson participation the third party's epsilon accounts
SUBSAMPLED = "Poisson-subsampled Gaussian"


@dataclass(frozen=True)
class Block:
    """Releases of one stage that share their mechanism and noise, without who took part in them.

    Attributes
    ----------
    stage : str
        Which part of the algorithm released them.
    unit : {"record", "client"}
        The privacy unit.
    kind : {"aggregated", "local"}
        As :class:`~privfedstat.privacy.ledger.Release`.
    mechanism : {"Gaussian", "Poisson-subsampled Gaussian"}
        ``"Poisson-subsampled Gaussian"``: client-level rounds of Poisson participants topped up
        by the server, amplified towards a third party; ``"Gaussian"``: counted unamplified.
    sampling_rate : float
        Poisson participation rate q of the rounds (1: every client was asked, or a cohort).
    mu : float
        GDP parameter of one release towards the server, ``Delta / sigma`` (the worst client's),
        replace-one.
    noise_multiplier : float
        ``z = 2 / mu``: the noise sd per half the replacement sensitivity (the radius of the ball a
        unit's contribution lies in), the multiplier of dp-accounting and Opacus.
    rounds : int
        Number of such releases.
    """

    stage: str
    unit: str
    kind: str
    mechanism: str
    sampling_rate: float
    mu: float
    noise_multiplier: float
    rounds: int


@dataclass(frozen=True)
class PublicLedger:
    """The public view of a fit's ledger: mechanisms, noise, rates and rounds, without membership.

    Built by :meth:`~privfedstat.privacy.ledger.PrivacyLedger.public_view` (see the module docstring
    for the threat model).

    Attributes
    ----------
    n_clients : int
        Number of clients (m).
    blocks : tuple of Block
        The releases, grouped by stage, mechanism and noise, in order of first appearance.
    record_third_party_mu : float
        Definition 2.1's third-party mu of the record-level releases (worst client; 0 without them).
    leaks : tuple of str
        Data-dependent choices made without privacy accounting.
    secure_mode : bool
        Whether the noise came from the secure generator.
    """

    n_clients: int
    blocks: tuple[Block, ...]
    record_third_party_mu: float
    leaks: tuple[str, ...]
    secure_mode: bool

    @property
    def units(self) -> tuple[str, ...]:
        """The privacy units of the releases, in order of first appearance."""
        return tuple(dict.fromkeys(b.unit for b in self.blocks))

    @property
    def mu(self) -> float:
        """Each client's GDP parameter towards the server, as if it had sent in every round (a bound on the ledger's
        per-client values that does not depend on who took part; equal to them with full participation)."""
        return safe_norm([math.sqrt(b.rounds) * b.mu for b in self.blocks])

    @property
    def is_private(self) -> bool:
        """True when every release had noise and nothing data-dependent leaked."""
        return math.isfinite(self.mu) and not self.leaks

    def server_epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon towards the server at the given delta (exact GDP-to-DP conversion of :attr:`mu`)."""
        return epsilon_from_mu(self.mu, delta) if self.mu > 0 else 0.0

    def epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon towards a third party at the given delta, replace-one.

        Client-level units: every client-level block composed in one PLD (dp-accounting,
        ``NeighboringRelation.REPLACE_ONE``): a Poisson-subsampled block as ``rounds`` rounds of the
        Poisson-subsampled Gaussian with its rate and noise multiplier, any other as ``rounds``
        unsubsampled Gaussian rounds, counted for every client (who took part is not public).
        Record-level units: Definition 2.1's ``record_third_party_mu`` in GDP. ``inf`` when a
        release had no noise.
        """
        if not math.isfinite(self.mu):
            return math.inf
        if "client" in self.units:
            if "record" in self.units:
                raise ValueError("the releases mix record- and client-level units, which have no common third-party "
                                 "epsilon; account each unit separately.")
            from .accounting import heterogeneous_epsilon  # dp-accounting is imported only when asked

            events = [(b.noise_multiplier, b.sampling_rate if b.mechanism == SUBSAMPLED else 1.0, b.rounds)
                      for b in self.blocks if b.mu > 0]
            return heterogeneous_epsilon(events, delta) if events else 0.0
        mu = self.record_third_party_mu
        return epsilon_from_mu(mu, delta) if mu > 0 else 0.0

    def to_frame(self) -> pd.DataFrame:
        """One row per block: stage, unit, kind, mechanism, sampling_rate, mu, noise_multiplier, rounds."""
        import pandas as pd
        return pd.DataFrame({
            "stage": [b.stage for b in self.blocks],
            "unit": [b.unit for b in self.blocks],
            "kind": [b.kind for b in self.blocks],
            "mechanism": [b.mechanism for b in self.blocks],
            "sampling_rate": [b.sampling_rate for b in self.blocks],
            "mu": [b.mu for b in self.blocks],
            "noise_multiplier": [b.noise_multiplier for b in self.blocks],
            "rounds": [b.rounds for b in self.blocks],
        })

    def __repr__(self) -> str:
        rounds = sum(b.rounds for b in self.blocks)
        head = f"PublicLedger({self.n_clients} clients, {len(self.blocks)} blocks, {rounds} releases, " \
               f"unit={'+'.join(self.units) or 'record'} ({NEIGHBOURING})"
        if not math.isfinite(self.mu):
            return head + ": non-private, a release had no noise)"
        text = (f"{head}: towards the server mu {self.mu:.4g} (eps {self.server_epsilon(1e-5):.4g}), towards third "
                f"parties eps {self.epsilon(1e-5):.4g}, at delta = 1e-05, private={self.is_private}"
                f"{', secure_mode=True' if self.secure_mode else ''})")
        if self.leaks:
            text += "\n  NOT fully private: " + "; ".join(self.leaks)
        return text
