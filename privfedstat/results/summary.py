"""Fit summaries: a header of facts and a coefficient table, as text, HTML or DataFrame."""

from __future__ import annotations

import html
import math
import textwrap
from typing import TYPE_CHECKING

import numpy as np

from ..privacy.ledger import PrivacyLedger
from ..privacy.public import NEIGHBOURING, SUBSAMPLED

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

    from ..federation.channel import Communication

__all__ = ["Summary", "privacy_rows", "privacy_share_row", "rounds_row"]

#: what one unit is, as the summary states it
_UNITS = {"record": "one row of one client", "client": "one client's whole dataset"}

#: header lines of the text summary wrap at this width
HEADER_WIDTH = 100
#: significant digits of the coefficient table, as statsmodels' summaries print them (a coefficient of 1e-12
#: prints as 1e-12, not 0.0000)
DIGITS = 4


def _number(v: float) -> str:
    return f"{v: .{DIGITS}g}"


class Summary:
    """Result summary of a fitted estimator (statsmodels style).

    Parameters
    ----------
    title : str
    header : dict
        Ordered facts (family, method, clients, privacy, ...).
    coefficients : pandas.DataFrame
        One row per coefficient.
    notes : list of str
        Warnings printed below the table (e.g. privacy leaks).
    stopped : bool
        The fit did not converge: the text and HTML tables head the column ``coef`` "stopped at" (where the path
        stopped, not an estimate); :meth:`to_frame` keeps the name ``coef``.
    """

    def __init__(self, title: str, header: dict, coefficients: pd.DataFrame, notes: list[str],
                 stopped: bool = False) -> None:
        self.title = title
        self.header = dict(header)
        self.coefficients = coefficients
        self.notes = list(notes)
        self.stopped = stopped

    def _shown(self) -> pd.DataFrame:
        """The table as printed: ``coef`` headed "stopped at" for a fit that did not converge."""
        return self.coefficients.rename(columns={"coef": "stopped at"}) if self.stopped else self.coefficients

    def to_frame(self) -> pd.DataFrame:
        """The coefficient table."""
        return self.coefficients.copy()

    def as_text(self) -> str:
        """Plain-text summary; header values longer than ``HEADER_WIDTH`` wrap onto indented lines."""
        keyw = max(len(k) for k in self.header)
        header = []
        for k, v in self.header.items():
            wrapped = textwrap.wrap(str(v), max(20, HEADER_WIDTH - keyw - 2)) or [""]
            header += [f"{k:<{keyw}}  {wrapped[0]}"] + [" " * (keyw + 2) + line for line in wrapped[1:]]
        table = self._shown().to_string(float_format=_number)
        width = max(60, max(len(line) for line in header + table.splitlines()))
        lines = [self.title.center(width), "=" * width, *header, "-" * width, table, "=" * width]
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        return self.as_text()

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in self.header.items())
        notes = "".join(f"<p><b>Note:</b> {html.escape(n)}</p>" for n in self.notes)
        return (f"<h4>{html.escape(self.title)}</h4><table>{rows}</table>"
                f"{self._shown().to_html(float_format=_number)}{notes}")


def rounds_row(comm: Communication) -> dict[str, str]:
    """The summary's Rounds line: the rounds from the protocol's first on (its estimation, diagnostics and
    inference), then the setup's before it (the private column scaling's search, the clip search), so that a fit
    of 2 iterations does not read as 92 rounds."""
    setup = " and ".join(f"{n} for {stage}" for stage, n in comm.setup)
    setup = f" (+ {setup})" if setup else ""
    return {"Rounds": f"{comm.rounds - comm.setup_rounds}{setup}; {comm.floats_per_client} floats sent per client "
                      "in all"}


def privacy_rows(ledger: PrivacyLedger, delta: float, asked: float | None = None) -> dict[str, str]:
    """The summary's privacy lines, from what may be published (``ledger.public_view()``): the unit and the
    guarantee towards each audience at ``delta`` (``asked``: the fit's mu, which a secure fit's line compares its
    integer noise's GDP with).

    The server sees who took part in each round, so its epsilon is unamplified (the declared
    budget: every client as if it sent each round). A third party sees the published model and
    the public view: Definition 2.1's mu for record-level units, the PLD of the Poisson-subsampled
    rounds for client-level ones. Both under replace-one adjacency.
    """
    public = ledger.public_view()
    if not math.isfinite(public.mu):
        return {"Privacy": "none (mu = inf)"}
    unit = " + ".join(f"{u} ({_UNITS[u]}, {NEIGHBOURING})" for u in public.units) or "record"
    rows = {"Privacy unit": unit,
            "Towards the server": f"mu = {public.mu:.4g} per client, eps = {public.server_epsilon(delta):.4g} at delta = "
                                  f"{delta:g} (it receives every message and knows who sent it)"}
    if ledger.has_integer_noise:
        rows.update(_secure_rows(ledger, delta, asked))
    third = f"eps = {public.epsilon(delta):.4g} at delta = {delta:g}"
    if "client" in public.units:
        rates = sorted({b.sampling_rate for b in public.blocks if b.mechanism == SUBSAMPLED})
        how = f"Poisson participation q = {', '.join(f'{q:g}' for q in rates)}, hidden from them" if rates else \
            "no Poisson participation to amplify"
        rows["Towards third parties"] = f"{third} (published model; {how}; PLD)"
    else:
        rows["Towards third parties"] = f"mu = {public.record_third_party_mu:.4g}, {third} (published model)"
    return rows


def _secure_rows(ledger: PrivacyLedger, delta: float, asked: float | None = None) -> dict[str, str]:
    """The server's guarantee when some releases went through secure aggregation, and when one site colludes with it
    (``ledger.collusion_epsilon(t)`` for another t).

    Each secure release is charged the GDP of the integer noise it carries, ``Delta_2 D(Lambda)``, at most the share of
    mu it was calibrated to: less where more sites answered than ``min_surviving`` (their shares add noise) and where
    the share needs less noise than the least the calibration resolves (``Lambda`` about 3e-17, where ``P(Sk = 0)`` is
    1 in floats: GDP about 17 per unit of integer sensitivity, below the share of a budget of hundreds or more, for
    counts and vectors alike). The fit's mu is then below the one asked, and the line says why.
    """
    below = ""
    if asked is not None and math.isfinite(asked) and ledger.mu < asked * (1.0 - 1e-9):
        below = (f"; below the mu = {asked:.4g} asked: each secure release is charged the GDP of the integer noise it "
                 "carries, and some carry more than their share of mu needs: a sum of more sites than min_surviving, or "
                 "a share so large that its noise would have to be below the least the calibration resolves "
                 "(Lambda about 3e-17, which gives about 17 per unit of the release's integer sensitivity)")
    return {"Towards the server": f"mu = {ledger.mu:.4g} per client, eps = {ledger.epsilon(delta):.4g} at delta = "
                                  f"{delta:g} (the integer noise's GDP bound{below}); under secure aggregation it sees "
                                  "only the sites' sums",
            "If one site colludes with it": f"mu = {ledger.collusion_mu(1):.4g}, eps = "
                                            f"{ledger.collusion_epsilon(1, delta):.4g} (that site's noise share "
                                            "subtracted; privacy_.collusion_epsilon(t) for t sites)"}


def privacy_share_row(realised, planned) -> str:
    """The summary's "Privacy share of variance" line: the fit's share and its plan's, each as the mean and the
    range over the coefficients (``realised`` None: the fit's covariance has no privacy part)."""
    def share(v) -> str:
        v = np.asarray(v, dtype=np.float64)
        return f"{100 * np.mean(v):.0f}% ({100 * np.min(v):.0f}-{100 * np.max(v):.0f}%)"

    fit = "n/a (no privacy part in the fit's covariance)" if realised is None else share(realised)
    return f"fit {fit}, planned {share(planned)}: mean (min-max) over the coefficients"


def clipped_row(share: float, sd: float) -> str:
    """The summary's "Clipped at estimate" line: the private count's share of clipped rows and its noise sd, in percent
    with one decimal, or two significant digits below 0.1% (``+- 0.0%`` read as a count without noise)."""
    def percent(x: float) -> str:
        p = 100.0 * x
        return f"{p:.1f}%" if abs(p) >= 0.1 or p == 0 else f"{p:.2g}%"

    return f"{percent(share)} of per-sample gradients (+- {percent(sd)}, private count)"


def clip_row(clip: float, scaled: bool) -> str:
    """The summary's "Clipping bound B" line: B and what it bounds; with a scaler, on the fitting scale (a Gaussian
    fit of hours per week printed "13.89", read as hours)."""
    if not np.isfinite(clip):
        return f"{clip:.4g}"
    where = ", on the fitting scale: the columns (and a Gaussian response) as scaling= set them, scaler_" if scaled else ""
    return f"{clip:.4g} (each row's gradient norm{where})"
