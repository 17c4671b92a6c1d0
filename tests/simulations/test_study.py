"""The study protocol: settings from a config, flags with help text, the runner's files, markdown tables."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from privfedstat.simulations.study import Study, Table, add_flags, markdown_table, param, run_study


@dataclass(frozen=True)
class ToyConfig:
    n: int = param("rows per scale", 3)
    scales: tuple[float, ...] = param("scales", (1.0, 2.0))
    label: str = "toy"  # not a setting: no flag, not settable through run_study


def _run(config: ToyConfig, stem, progress: bool) -> dict[str, pd.DataFrame]:
    return {"": pd.DataFrame([{"scale": s, "i": i, "y": s * i} for s in config.scales for i in range(config.n)])}


def _figures(frames, tables, config):
    from matplotlib.figure import Figure

    fig = Figure()
    fig.subplots().plot(frames[""]["i"], frames[""]["y"])
    return {"": fig, "twin": fig}


TOY = Study("toy", "a toy study", ToyConfig(), _run,
            lambda frames, config: {"sums": Table(frames[""].groupby("scale")["y"].sum().to_frame(), "sums by scale")},
            _figures, stem=lambda config: f"toy-{config.n}")


def test_run_study_writes_every_frame_table_figure_and_a_summary(tmp_path):
    result = run_study(TOY, tmp_path / "out", progress=False, n=2)
    assert result.config == ToyConfig(n=2)
    names = [f.name for f in result.files]
    assert names == ["toy-2.csv", "toy-2-sums.csv", "toy-2.png", "toy-2-twin.png", "toy-2.md"]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "toy-2.csv"), result.frames[""])
    sums = pd.read_csv(tmp_path / "out" / "toy-2-sums.csv", index_col="scale")  # a named index is written
    assert sums["y"].tolist() == [1.0, 2.0]
    md = (tmp_path / "out" / "toy-2.md").read_text()
    assert md.startswith("# toy\n\na toy study\n\nSettings: n = 2, scales = (1.0, 2.0).") and "## sums by scale" in md
    assert "sums by scale:" in result.text()
    with pytest.raises(ValueError, match="no setting"):
        run_study(TOY, tmp_path, label="other")


def test_flags_come_from_the_settings_with_their_help():
    parser = argparse.ArgumentParser()
    add_flags(parser, ToyConfig())
    assert vars(parser.parse_args(["--scales", "1,3"])) == {"scales": (1.0, 3.0)}  # flags not given are absent
    assert vars(parser.parse_args(["--n", "5"])) == {"n": 5}
    helps = {a.dest: a.help for a in parser._actions if a.dest != "help"}
    assert helps == {"n": "rows per scale (default 3)", "scales": "scales (default 1.0,2.0)"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--label", "x"])


def test_markdown_table():
    df = pd.DataFrame({"a": [1.23456, np.nan], "b": ["x", "y"]}, index=pd.Index([2, 3], name="p"))
    assert markdown_table(df, ".2f") == "| p | a | b |\n|---|---|---|\n| 2 | 1.23 | x |\n| 3 |  | y |"
