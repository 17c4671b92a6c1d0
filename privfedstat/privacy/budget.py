"""``PrivacyBudget``: one total GDP budget per client, spent by several fits on the same clients.

Fitting ``k`` models on the same clients composes ``k`` mechanisms. In mu-GDP the composition is
exact (Dong, Roth & Su 2022, Corollary 3.3): a client whose data entered fits with per-client
parameters ``mu_1, ..., mu_k`` is ``sqrt(mu_1^2 + ... + mu_k^2)``-GDP towards the server. A
:class:`PrivacyBudget` holds the total ``mu`` every client agrees to spend, charges each fit
**before it draws any noise** (a fit that would exceed the total is refused), composes the fit's
ledger per client afterwards, and reports what is left.

Clients are identified by their position in :class:`~privfedstat.FederatedData` (client ``i`` is
``offsets[i]:offsets[i + 1]``): charge one budget only with fits on the same clients in the same
order. The budget checks the number of clients; it cannot check that the rows are the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .._validation import check_mu
from ..exceptions import BudgetExceededError
from .gdp import epsilon_from_mu
from .ledger import PrivacyLedger

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["PrivacyBudget", "FitCharge", "reserve"]

#: relative slack on mu^2 when comparing with the total (floating-point rounding only: 12 fits of
#: 0.5 exactly fill a budget of sqrt(12) * 0.5, whose square rounds to 3 +- 1 ulp)
_RTOL = 1e-12


@dataclass(eq=False)
class FitCharge:
    """One fit charged to a :class:`PrivacyBudget`.

    Attributes
    ----------
    index : int
        Position of the fit in the budget (0-based).
    method : str
        The estimator's name.
    mu : float
        The fit's declared per-client budget (what was reserved before the fit).
    ledger : PrivacyLedger
        The fit's ledger (empty when the fit was reserved).
    status : {"incomplete", "done", "mismatch"}
        ``"incomplete"`` until the fit settles (a fit that raised stays so, see
        :attr:`client_mu`); ``"mismatch"`` if its ledger disagreed with ``mu``.
    """

    index: int
    method: str
    mu: float
    ledger: PrivacyLedger
    status: str = "incomplete"
    _settled: np.ndarray | None = field(default=None, repr=False)

    @property
    def client_mu(self) -> np.ndarray:
        """Per-client mu charged, shape (n_clients,).

        After a successful fit: the ledger's mu per client, which is the declared mu up to rounding
        or less for a client that sat rounds out or failed (a fit whose ledger exceeds it raised and
        is charged the larger). While a fit runs, or after it raised, the releases its
        ledger recorded so far (exactly what was sent: a release is recorded once its noise is
        drawn).
        """
        return self._settled if self._settled is not None else self.ledger.client_mu

    def settle(self) -> None:
        """Check the finished fit's ledger against the declared mu and fix the charge.

        Raises
        ------
        RuntimeError
            If some client's ledger mu exceeds the declared ``mu`` (relative 1e-9): the accounting of
            the estimator is wrong; the larger of the two is charged. A client whose ledger shows less
            (it sat rounds out under partial participation, or failed) is charged what it spent.
        """
        actual = self.ledger.client_mu
        declared = np.full(actual.shape, self.mu)
        self._settled = np.maximum(actual, declared)
        with np.errstate(invalid="ignore"):
            same = (actual <= declared) | np.isclose(actual, declared, rtol=1e-9, atol=0.0)
        if np.all(same):  # a client that sat rounds out (partial participation) or failed spent less: charge that
            self._settled = np.minimum(actual, declared)
        if not np.all(same):
            self.status = "mismatch"
            bad = np.flatnonzero(~same)
            raise RuntimeError(
                f"privacy accounting mismatch in {self.method}: the fit declared mu = {self.mu:.6g} per client "
                f"but its ledger shows {actual[bad[0]]:.6g} for client {bad[0]} ({bad.size} client(s) differ). "
                "The larger value was charged to the budget. This is a bug in the estimator; please report it."
            )
        self.status = "done"


class _NoBudget:
    """Stand-in returned by :func:`reserve` for ``budget=None``: settling does nothing."""

    def settle(self) -> None:
        return None


def reserve(budget: PrivacyBudget | None, ledger: PrivacyLedger, *, mu: float, method: str) -> FitCharge | _NoBudget:
    """Charge a fit with per-client budget ``mu`` to ``budget`` before it draws any noise.

    Called by every estimator's ``fit`` right after its parameters are validated; ``settle()`` on
    the returned charge after the fit. ``budget=None`` charges nothing.
    """
    if budget is None:
        return _NoBudget()
    if not isinstance(budget, PrivacyBudget):
        raise TypeError(f"budget must be a PrivacyBudget or None, got {type(budget).__name__}.")
    return budget._reserve(ledger, mu, method)


class PrivacyBudget:
    """A total mu-GDP budget per client, shared by several fits on the same clients.

    Pass it to ``fit`` (``est.fit(data, budget=b)``) or ``glm(..., budget=b)``. Each fit is
    charged its per-client ``mu`` before any noise is drawn; a fit that would take some client's
    composed spend ``sqrt(sum mu_fit^2)`` over the total is refused with
    :class:`~privfedstat.BudgetExceededError` and draws nothing. After the fit its ledger is
    composed in and checked against the declared ``mu``. A non-private fit (``mu=inf``, or the
    baselines ``PooledMLE`` / ``LocalFit``) is refused unless the budget itself is infinite.

    Clients are identified by their position in the FederatedData: use one budget only with fits
    on the same clients in the same order (the number of clients is checked).

    Parameters
    ----------
    mu : float
        Total GDP budget of every client towards the server, > 0 (``inf``: only track spending).
    n_clients : int, optional
        Number of clients (m).
    clients : sequence, optional
        One label per client, in FederatedData order (used in reports). Give ``n_clients``,
        ``clients`` or both (then ``len(clients) == n_clients``).

    Attributes
    ----------
    fits : list of FitCharge
        The fits charged so far, in order.

    Examples
    --------
    >>> budget = PrivacyBudget(mu=1.0, n_clients=50)
    >>> FedSGD(mu=0.6).fit(data, budget=budget)          # doctest: +SKIP
    >>> budget.remaining_mu                               # sqrt(1 - 0.6^2) = 0.8  # doctest: +SKIP

    References
    ----------
    Dong, J., Roth, A. and Su, W. J. (2022). Gaussian differential privacy. JRSS-B 84(1), 3-37,
    Corollary 3.3 (composition) and Corollary 2.13 (conversion to (epsilon, delta)).
    """

    def __init__(self, mu: float, *, n_clients: int | None = None, clients: Sequence | None = None) -> None:
        import pandas as pd
        self.mu = check_mu(mu)
        if clients is not None:
            if isinstance(clients, (str, bytes)) or not isinstance(clients, (Sequence, np.ndarray, pd.Index)):
                raise TypeError(f"clients must be a sequence of labels (one per client), got {type(clients).__name__}.")
            labels = list(clients)
            if len(set(map(str, labels))) != len(labels):
                raise ValueError("clients must be distinct labels, one per client.")
            if n_clients is not None and int(n_clients) != len(labels):
                raise ValueError(f"n_clients = {n_clients} but {len(labels)} client labels were given.")
            n_clients = len(labels)
        if n_clients is None:
            raise TypeError("PrivacyBudget needs n_clients or clients (labels in FederatedData order).")
        if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)) or n_clients < 1:
            raise ValueError(f"n_clients must be an integer >= 1, got {n_clients!r}.")
        self.n_clients = int(n_clients)
        self.clients = labels if clients is not None else list(range(self.n_clients))
        self.fits: list[FitCharge] = []

    # ------------------------------------------------------------------ charging
    def _reserve(self, ledger: PrivacyLedger, mu: float, method: str) -> FitCharge:
        mu = check_mu(mu)
        if ledger.n_clients != self.n_clients:
            raise ValueError(
                f"this budget covers {self.n_clients} clients but the data has {ledger.n_clients}; a budget "
                "identifies clients by position, so use it only with fits on the same clients in the same order."
            )
        if math.isinf(mu) and math.isfinite(self.mu):
            raise ValueError(
                f"{method or 'this fit'} is not private (mu = inf) and cannot be charged to a finite budget "
                f"(mu = {self.mu:.4g}); fit without budget=, or give the fit a finite mu."
            )
        if ledger.releases:
            raise ValueError("a fit must be charged before it releases anything (its ledger is not empty).")
        if not self.can_spend(mu):
            raise BudgetExceededError(
                f"{method or 'this fit'} would spend mu = {mu:.4g} per client, but only {self.remaining_mu:.4g} "
                f"of the budget mu = {self.mu:.4g} is left after {len(self.fits)} fit(s) (GDP composition: "
                f"spent^2 + mu^2 <= total^2); nothing was released. Lower the fit's mu or start a larger budget."
            )
        charge = FitCharge(len(self.fits), method, mu, ledger)
        self.fits.append(charge)
        return charge

    def can_spend(self, mu: float) -> bool:
        """Whether one more fit with per-client budget ``mu`` fits in what is left."""
        mu = check_mu(mu)
        if math.isinf(self.mu):
            return True
        spent2 = self._spent2()
        return bool(np.all(spent2 + mu * mu <= self.mu * self.mu * (1.0 + _RTOL)))

    # ------------------------------------------------------------------ what was spent and what is left
    def _spent2(self) -> np.ndarray:
        total = np.zeros(self.n_clients)
        for f in self.fits:
            total = total + f.client_mu**2
        return total

    @property
    def spent(self) -> np.ndarray:
        """Composed mu spent by each client so far, ``sqrt(sum_fits mu_fit,i^2)``, shape (n_clients,)."""
        return np.sqrt(self._spent2())

    @property
    def spent_mu(self) -> float:
        """The worst client's spent mu (the fits so far are jointly this-mu-GDP)."""
        return float(self.spent.max())

    @property
    def remaining(self) -> np.ndarray:
        """mu left per client, ``sqrt(max(mu^2 - spent_i^2, 0))``, shape (n_clients,)."""
        if math.isinf(self.mu):
            return np.full(self.n_clients, math.inf)
        return np.sqrt(np.maximum(self.mu * self.mu - self._spent2(), 0.0))

    @property
    def remaining_mu(self) -> float:
        """The largest per-client mu one more fit may spend (the worst client's remaining mu)."""
        return float(self.remaining.min())

    def epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon spent so far by the worst client at ``delta`` (exact GDP-to-DP conversion)."""
        return _epsilon(self.spent_mu, delta)

    def remaining_epsilon(self, delta: float = 1e-5) -> float:
        """Epsilon at ``delta`` of one more fit that spends all of :attr:`remaining_mu`.

        Epsilons do not subtract: ``epsilon(mu_total) != epsilon(spent) + remaining_epsilon``.
        """
        return _epsilon(self.remaining_mu, delta)

    @property
    def leaks(self) -> list[str]:
        """Leaks recorded by the fits' ledgers (e.g. ``clip="paper"``), prefixed with the fit."""
        return [f"fit {f.index} ({f.method}): {leak}" for f in self.fits for leak in f.ledger.leaks]

    @property
    def is_private(self) -> bool:
        """True when every client's spend is finite and no fit leaked."""
        return bool(np.all(np.isfinite(self.spent))) and not self.leaks

    # ------------------------------------------------------------------ reporting
    def to_frame(self) -> pd.DataFrame:
        """One row per fit: method, status, declared mu, charged mu (worst client), third-party mu,
        and the worst client's spent and remaining mu after it."""
        import pandas as pd
        rows, spent2 = [], np.zeros(self.n_clients)
        for f in self.fits:
            cm = f.client_mu
            spent2 = spent2 + cm**2
            left = math.inf if math.isinf(self.mu) else math.sqrt(max(self.mu**2 - float(spent2.max()), 0.0))
            rows.append({
                "fit": f.index,
                "method": f.method,
                "status": f.status,
                "mu": f.mu,
                "charged mu": float(cm.max()) if cm.size else 0.0,
                "third-party mu": f.ledger.third_party_mu,
                "spent mu": float(np.sqrt(spent2.max())),
                "remaining mu": left,
                "leaks": "; ".join(f.ledger.leaks),
            })
        columns = ["fit", "method", "status", "mu", "charged mu", "third-party mu", "spent mu", "remaining mu", "leaks"]
        return pd.DataFrame(rows, columns=columns).set_index("fit")

    def __repr__(self) -> str:
        head = (
            f"PrivacyBudget(mu={self.mu:.4g} per client, {self.n_clients} clients: {len(self.fits)} fit(s), "
            f"spent mu {self.spent_mu:.4g}, remaining mu {self.remaining_mu:.4g}; "
            f"(eps, delta) spent = ({self.epsilon(1e-5):.4g}, 1e-05))"
        )
        shown = self.fits if len(self.fits) <= 20 else self.fits[-10:]
        lines = [head] + ([f"  ... {len(self.fits) - 10} earlier fits (to_frame() lists all)"] if shown is not self.fits else [])
        lines += [f"  fit {f.index}: {f.method or '?'} mu={f.mu:.4g} ({f.status})" for f in shown]
        if self.leaks:
            lines.append("  NOT fully private: " + "; ".join(self.leaks))
        return "\n".join(lines)


def _epsilon(mu: float, delta: float) -> float:
    if not 0 < float(delta) < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}.")
    return epsilon_from_mu(mu, delta) if mu > 0 else 0.0
