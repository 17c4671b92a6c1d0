"""Fit summaries: a header of facts and a coefficient table, as text, HTML or DataFrame."""

from __future__ import annotations

import html

import pandas as pd

__all__ = ["Summary"]


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
    """

    def __init__(self, title: str, header: dict, coefficients: pd.DataFrame, notes: list[str]) -> None:
        self.title = title
        self.header = dict(header)
        self.coefficients = coefficients
        self.notes = list(notes)

    def to_frame(self) -> pd.DataFrame:
        """The coefficient table."""
        return self.coefficients.copy()

    def as_text(self) -> str:
        """Plain-text summary."""
        width = max(60, max(len(f"{k}: {v}") for k, v in self.header.items()) + 2)
        table = self.coefficients.to_string(float_format=lambda v: f"{v: .6f}")
        width = max(width, max(len(line) for line in table.splitlines()))
        lines = [self.title.center(width), "=" * width]
        keyw = max(len(k) for k in self.header)
        lines += [f"{k:<{keyw}}  {v}" for k, v in self.header.items()]
        lines += ["-" * width, table, "=" * width]
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
                f"{self.coefficients.to_html(float_format=lambda v: f'{v:.6f}')}{notes}")
