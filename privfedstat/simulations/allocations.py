"""Client-size allocations of Section 4 of the core paper.

An allocation is a frozen dataclass with ``sizes(n_clients, rng) -> ndarray``:

* :class:`Equal` -- every client has n rows;
* :class:`Uniform` -- n_i ~ discrete uniform on [low, high] (Sections 4.1, 4.3);
* :class:`LogNormal` -- n_i = max(minimum, round(exp(N(meanlog, sdlog^2)))) with the paper's
  (5.5, 1) (mean about 400); the minimum (default 20) keeps FedNewton's halves >= 2 d for d <= 10,
  a choice the paper does not discuss;
* :class:`FixedTotal` -- a fixed total N split across m clients under the "equal", "uniform" or
  "lognormal" scheme (Section 4.5): every client gets ``minimum`` rows and the remaining
  N - m * minimum are shared in proportion to draws from the scheme (U[100, 700] or LN(5.5, 1)),
  rounded by largest remainders so that the sizes sum to N exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Equal", "Uniform", "LogNormal", "FixedTotal", "Allocation"]


@dataclass(frozen=True)
class Equal:
    """n_i = n for every client."""

    n: int
    name = "equal"

    def sizes(self, n_clients: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n_clients, self.n, dtype=np.int64)

    @property
    def label(self) -> str:
        return f"equal n={self.n}"


@dataclass(frozen=True)
class Uniform:
    """n_i ~ discrete uniform on [low, high] (both included)."""

    low: int
    high: int
    name = "uniform"

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"Uniform needs 1 <= low <= high, got [{self.low}, {self.high}].")

    def sizes(self, n_clients: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n_clients, endpoint=True).astype(np.int64)

    @property
    def label(self) -> str:
        return f"U[{self.low},{self.high}]"


@dataclass(frozen=True)
class LogNormal:
    """n_i = max(minimum, round(exp(Z))), Z ~ N(meanlog, sdlog^2)."""

    meanlog: float = 5.5
    sdlog: float = 1.0
    minimum: int = 20
    name = "lognormal"

    def sizes(self, n_clients: int, rng: np.random.Generator) -> np.ndarray:
        raw = np.rint(rng.lognormal(self.meanlog, self.sdlog, size=n_clients)).astype(np.int64)
        return np.maximum(raw, self.minimum)

    @property
    def label(self) -> str:
        return f"LN({self.meanlog:g},{self.sdlog:g})"


@dataclass(frozen=True)
class FixedTotal:
    """A fixed total ``total`` split across the clients under ``scheme``."""

    total: int
    scheme: str = "equal"
    minimum: int = 20
    name = "fixed-total"

    def __post_init__(self) -> None:
        if self.scheme not in ("equal", "uniform", "lognormal"):
            raise ValueError(f"scheme must be 'equal', 'uniform' or 'lognormal', got {self.scheme!r}.")

    def sizes(self, n_clients: int, rng: np.random.Generator) -> np.ndarray:
        rest = self.total - n_clients * self.minimum
        if rest < 0:
            raise ValueError(f"cannot give {n_clients} clients at least {self.minimum} rows out of N={self.total}.")
        if self.scheme == "equal":
            share = np.ones(n_clients)
        elif self.scheme == "uniform":
            share = rng.integers(100, 700, size=n_clients, endpoint=True).astype(float)
        else:
            share = rng.lognormal(5.5, 1.0, size=n_clients)
        exact = rest * share / share.sum()
        base = np.floor(exact).astype(np.int64)
        short = rest - int(base.sum())
        base[np.argsort(-(exact - base), kind="stable")[:short]] += 1
        return base + self.minimum

    @property
    def label(self) -> str:
        return self.scheme


Allocation = Equal | Uniform | LogNormal | FixedTotal
