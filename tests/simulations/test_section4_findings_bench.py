"""benchmarks/bench_section4_findings.py on a tiny grid: its verdicts and its markdown table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_section4_findings", BENCH / "bench_section4_findings.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]
    sys.path.remove(str(BENCH))


def test_verdicts_from_paired_and_independent_differences(bench):
    rows = [{"cell": "L N20000 m400", "method": m, "rep": r, "mse": v + 0.001 * r}
            for r in range(5) for m, v in (("FedNewton", 0.1), ("FedAvg", 0.2), ("FedSGD", 0.01), ("FedHybrid", 0.02))]
    df = pd.DataFrame(rows)
    assert bench.judge(df, "pair", ("L N20000 m400", "FedNewton", "FedAvg"))[0] == "holds"
    assert bench.judge(df, "pair", ("L N20000 m400", "FedAvg", "FedNewton"))[0] == "fails"
    assert bench.judge(df, "best", ("L N20000 m400", "FedSGD"))[0] == "holds"
    assert bench.judge(df, "worst", ("L N20000 m400", "FedAvg"))[0] == "holds"
    assert bench.judge(df, "best", ("L N20000 m400", "FedNewton"))[0] == "fails"
    diverged = df.assign(mse=df["mse"].where(df["method"] != "FedAvg"))
    verdict, numbers = bench.judge(diverged, "pair", ("L N20000 m400", "FedNewton", "FedAvg"))
    assert verdict == "diverged" and "FedAvg 5/5" in numbers


@pytest.mark.slow
def test_tiny_run_writes_the_claims_by_configuration_table(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "CONFIGS", {k: bench.CONFIGS[k] for k in ("private", "np-unclipped")})
    monkeypatch.setattr(bench, "CELLS", [c for c in bench.CELLS if c.name in ("L N20000 m25", "L N20000 m400")])
    table = tmp_path / "findings.md"
    bench.main(["--reps", "2", "--jobs", "1", "--out", str(tmp_path / "csv"), "--table", str(table), "--no-results"])
    text = table.read_text()
    assert "| claim (figure) | private | np-unclipped |" in text and "2 replicates per cell" in text
    line = next(r for r in text.splitlines() if r.startswith("| FedNewton mitigates FedAvg's decline") and "m = 400" in r)
    assert all(v in ("holds", "fails", "n.s.", "equal", "diverged") for v in line.split("**")[1::2])
    assert "(Fig. 3)" in text and "**n/a**" in text  # claims whose cells were not run
