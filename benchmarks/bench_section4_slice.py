"""A slice of Section 4 as bench_section4.py runs it, with the CPU it took: for comparing two trees on a busy machine.

Every ``--every``-th scenario of every study (from ``--offset``), ``--reps`` replicates, ``--jobs`` joblib workers,
CSV output as the full run writes it. Prints per study the wall time and the CPU seconds of this process and its
workers (psutil), which a loaded machine distorts much less than wall time. Writes nothing to RESULTS.md; run it
with ``PYTHONPATH`` pointing at each tree in turn, alternating (the "Section 4 profile" section of RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import psutil

from privfedstat.simulations import GRIDS, MonteCarlo


def _cpu(me: psutil.Process) -> float:
    """CPU seconds of this process and its live children (the joblib workers persist across studies)."""
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--offset", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    me, wall, cpu = psutil.Process(), 0.0, 0.0
    print(f"load average at start {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, study in GRIDS.items():
            scenarios = study.scenarios()[args.offset::args.every]
            t0, c0 = time.perf_counter(), _cpu(me)
            df = MonteCarlo(scenarios, study.methods, n_reps=args.reps, n_jobs=args.jobs, progress=False,
                            out=Path(tmp) / f"{name}.csv").run()
            w, c = time.perf_counter() - t0, _cpu(me) - c0
            wall, cpu = wall + w, cpu + c
            print(f"{name:6s} {len(df):5d} fits  wall {w:6.2f} s  cpu {c:6.2f} s", flush=True)
    print(f"total wall {wall:.2f} s, cpu {cpu:.2f} s; load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
