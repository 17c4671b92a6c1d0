"""The study protocol and its runner: every ``privfedstat reproduce`` study is one :class:`Study`.

A study is a config (a frozen dataclass whose :func:`param` fields are its settings, each with help
text and a command-line flag), ``run`` (config -> tidy DataFrames by name), ``summarise`` (-> titled
tables) and ``figures``. :func:`run_study` runs one and writes every frame and table as CSV, every
figure as PNG and a markdown summary; :func:`add_flags` turns a config into command-line flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

__all__ = ["param", "listof", "Table", "Study", "StudyResult", "run_study", "add_flags", "markdown_table"]

Frames = Mapping[str, pd.DataFrame]


def param(help: str, default: Any = MISSING, *, flag: str | None = None, parse: Callable[[str], Any] | None = None,
          choices: tuple | None = None):
    """A config field that is a study setting, with its help text and command-line flag.

    Parameters
    ----------
    help : str
        What the setting means (shown by ``privfedstat reproduce NAME --help``).
    default : optional
        Its default (none: a preset gives it).
    flag : str, optional
        The flag without dashes (default: the field name with ``-`` for ``_``).
    parse : callable, optional
        Turns the flag's text into the value (default: ``type(default)``; a tuple default takes a
        comma-separated list of its first entry's type, see :func:`listof`); needed when the
        default is None.
    choices : tuple, optional
        The values the flag accepts.
    """
    return field(default=default, metadata={"help": help, "flag": flag, "parse": parse, "choices": choices})


def positive_int(text: str) -> int:
    """A flag's positive integer: argparse names the flag in its error (``--reps 0``; the runner's own check named
    ``n_reps``, a parameter the command line does not have)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def listof(cast: Callable[[str], Any]) -> Callable[[str], tuple]:
    """A parser of comma-separated values, each cast with ``cast``: ``listof(float)("1,3")`` is ``(1.0, 3.0)``."""
    return lambda text: tuple(cast(v) for v in text.split(","))


class Table(NamedTuple):
    """A summary table and its title."""

    frame: pd.DataFrame
    title: str


@dataclass(frozen=True)
class Study:
    """A reproducible study: a default config and what runs, summarises and draws it.

    Attributes
    ----------
    name : str
        The command-line name (``privfedstat reproduce NAME``).
    help : str
        One line for ``privfedstat studies``.
    config : frozen dataclass
        The default settings; its :func:`param` fields are the study's flags.
    run : callable
        ``run(config, stem, progress) -> {name: DataFrame}``: the tidy results; ``stem`` is the
        path prefix of the outputs (a study that appends rows as they finish resumes from
        ``<stem>.csv``).
    summarise : callable
        ``summarise(frames, config) -> {name: Table}``.
    figures : callable
        ``figures(frames, tables, config) -> {name: matplotlib Figure}``.
    stem : callable, optional
        ``stem(config) -> str``: the outputs' file stem (default: ``name``).

    Outputs are named ``<stem>.csv`` / ``.png`` for the name ``""`` and ``<stem>-<name>.csv`` /
    ``.png`` otherwise.
    """

    name: str
    help: str
    config: Any
    run: Callable[[Any, Path, bool], dict[str, pd.DataFrame]]
    summarise: Callable[[Frames, Any], dict[str, Table]]
    figures: Callable[[Frames, Mapping[str, Table], Any], dict[str, Any]]
    stem: Callable[[Any], str] | None = None

    def configure(self, **settings) -> Any:
        """The default config with ``settings`` replaced (names of its :func:`param` fields)."""
        unknown = set(settings) - {f.name for f in _settings(self.config)}
        if unknown:
            raise ValueError(f"study {self.name!r} has no setting(s) {sorted(unknown)}.")
        return replace(self.config, **settings)


@dataclass(frozen=True)
class StudyResult:
    """What :func:`run_study` ran and wrote: the config, the frames, the tables and the files."""

    config: Any
    frames: dict[str, pd.DataFrame]
    tables: dict[str, Table]
    files: list[Path]

    def text(self) -> str:
        """The tables as text (titles and fixed-width columns), as the command line prints them."""
        with pd.option_context("display.float_format", "{:.4g}".format, "display.width", 250,
                               "display.max_rows", 1000, "display.max_columns", 100):
            return "\n\n".join(f"{t.title}:\n{_table_text(t.frame)}" for t in self.tables.values())


def _table_text(frame: pd.DataFrame) -> str:
    """A table as fixed-width text; an empty one (a slope needs two cells: ``--m 25`` selects one) says so in words,
    not as pandas' ``Empty DataFrame`` repr."""
    if frame.empty:
        return "(none: the cells run are too few for this table)"
    return frame.to_string(index=not isinstance(frame.index, pd.RangeIndex))


def _settings(config) -> list:
    return [f for f in fields(config) if "help" in f.metadata]


def _path(stem: Path, name: str, suffix: str) -> Path:
    return stem.with_name(f"{stem.name}-{name}{suffix}" if name else f"{stem.name}{suffix}")


def run_study(study: Study, out: str | Path = "results", *, progress: bool = True, **settings) -> StudyResult:
    """Run ``study`` with ``settings`` replacing its defaults; write its outputs under ``out``.

    Writes one CSV per frame and per table (the index only where it is not the default
    RangeIndex), one PNG per figure and ``<stem>.md``: the study's line, its settings and the
    tables in markdown.
    """
    config = study.configure(**settings)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / (study.stem(config) if study.stem else study.name)
    frames = study.run(config, stem, progress)
    tables = study.summarise(frames, config)
    if set(frames) & set(tables):
        raise ValueError(f"study {study.name!r} names a frame and a table alike: {sorted(set(frames) & set(tables))}.")
    figures = study.figures(frames, tables, config)
    files = []
    for name, frame in [*frames.items(), *((k, t.frame) for k, t in tables.items())]:
        files.append(_path(stem, name, ".csv"))
        frame.to_csv(files[-1], index=not isinstance(frame.index, pd.RangeIndex))
    for name, fig in figures.items():
        files.append(_path(stem, name, ".png"))
        fig.savefig(files[-1], dpi=130)
    values = ", ".join(f"{f.name} = {getattr(config, f.name)!r}" for f in _settings(config))
    parts = [f"# {study.name}", study.help, f"Settings: {values}."]
    parts += [f"## {t.title}\n\n{markdown_table(t.frame)}" for t in tables.values()]
    files.append(_path(stem, "", ".md"))
    files[-1].write_text("\n\n".join(parts) + "\n")
    return StudyResult(config, dict(frames), dict(tables), files)


def add_flags(parser: argparse.ArgumentParser, config) -> None:
    """One flag per setting of ``config``; a flag not given is absent from the parsed namespace."""
    for f in _settings(config):
        meta = f.metadata
        default = getattr(config, f.name)
        if meta["parse"] is None and default is None:
            raise TypeError(f"setting {f.name!r} defaults to None: give param(..., parse=...).")
        parse = meta["parse"] or (listof(type(default[0])) if isinstance(default, tuple) else type(default))
        shown = "" if default is None else f" (default {','.join(map(str, default)) if isinstance(default, tuple) else default})"
        parser.add_argument(f"--{meta['flag'] or f.name.replace('_', '-')}", dest=f.name, type=parse,
                            choices=meta["choices"], default=argparse.SUPPRESS, help=meta["help"] + shown)


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A DataFrame as a GitHub markdown table (index first; floats formatted with ``floatfmt``, NaN blank).

    Written here so that reports need no ``tabulate`` (which ``DataFrame.to_markdown`` requires).
    """
    def cell(v) -> str:
        if v is pd.NA:
            return ""
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else format(v, floatfmt)
        return str(v)

    head = [str(df.index.name or "")] + [str(c) for c in df.columns]
    body = [[cell(i)] + [cell(v) for v in row] for i, row in zip(df.index, df.itertuples(index=False))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
