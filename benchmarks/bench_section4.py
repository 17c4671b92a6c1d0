"""Time the whole of Section 4: every named study (both families), 100 replicates, 2 workers.

Run by hand: ``python benchmarks/bench_section4.py [--reps 100] [--jobs 2]``. Results (CSV per
study) go to a temporary folder; the timings go to RESULTS.md. Also times the CLI start-up
(``privfedstat studies``) warm, and checks that numba kernels load from the cache (no compile).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import machine_info, update_results  # noqa: E402

from privfedstat.simulations import GRIDS, MonteCarlo  # noqa: E402

HEADING = "## Section 4 end to end (benchmarks/bench_section4.py)"


def cli_start_seconds(repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "privfedstat", "studies"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    mi = machine_info()
    rows, total, fits = [], 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, study in GRIDS.items():
            scen = study.scenarios()
            t0 = time.perf_counter()
            df = MonteCarlo(scen, study.methods, n_reps=args.reps, n_jobs=args.jobs, progress=False,
                            out=Path(tmp) / f"{name}.csv").run()
            dt = time.perf_counter() - t0
            total += dt
            fits += len(df)
            rows.append((name, study.family, len(scen), len(study.methods), len(df), dt, df["seconds"].sum()))
            print(f"{name:6s} {study.family:9s} {len(df):6d} fits {dt:7.1f} s", flush=True)
    cli = cli_start_seconds()
    lines = [HEADING, "", f"- Date: {mi['date']}",
             f"- Machine: {mi['model']}, {mi['cpus']} CPU(s); Python {mi['python']}, numpy {mi['numpy']}, "
             f"numba {mi['numba']}; load average at start {mi['load']}",
             f"- {args.reps} replicates per cell, {args.jobs} joblib workers (numba 1 thread each), default settings "
             "(mu = 2 where not varied, clip='auto')", "",
             "| study | family | scenarios | methods | fits | wall s | sum of fit s |", "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {n} | {f} | {s} | {m} | {k} | {w:.1f} | {c:.1f} |" for n, f, s, m, k, w, c in rows]
    lines += [f"| **total** | | | | {fits} | **{total:.1f}** | {sum(r[6] for r in rows):.1f} |", "",
              f"CLI start-up (`python -m privfedstat studies`, warm, median of 5): {cli:.2f} s.", ""]
    section = "\n".join(lines)
    print(section)
    update_results(section, HEADING)


if __name__ == "__main__":
    main()
