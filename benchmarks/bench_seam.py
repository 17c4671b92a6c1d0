"""Before/after timing of the client/server refactor (issue 11's guard), baseline and current in the same run.

The guard: Section 4 and the DP-FedSGD benchmark within 5% of the baseline commit, timed in the same run.
The script checks the baseline out into a ``git worktree`` (in the temporary folder, reused when a kept
one is there; removed at the end unless ``--keep``) and times, alternately, the baseline and the current
working tree (uncommitted changes included):

* ``fedsgd``: the setting of ``bench_fedsgd.py`` (m = 50 x n = 400, d = 10, logistic, K = 50, eta = 0.5,
  mu = 2, B = 1.5), ``--fedsgd-reps`` fits in one process; each tree's own ``bench_fedsgd.py`` supplies the
  data and the fit loop;
* ``section4``: every figure of ``privfedstat.simulations.GRIDS`` at ``--reps`` replicates with one
  worker, driven as ``bench_section4.py`` drives ``MonteCarlo`` (CSV per study in a temporary folder).

Each timing is a fresh child process (this script with ``--child``) whose working directory and
``PYTHONPATH`` are the tree under test, so that it imports that tree's ``privfedstat``; numba and BLAS
run on one thread. Before the timed rounds each (benchmark, tree) pair runs once untimed at one replicate
(numba cache compile). Rounds alternate the order (baseline first, then current first, ...); the median
over ``--rounds`` is reported with the ratio current / baseline. The child times the work only (not
imports) and returns a checksum of its results (sum of coefficients, sum of the MSE column): with fixed
seeds and unchanged fingerprints, both trees must give the same checksum.

Run by hand: ``python benchmarks/bench_seam.py [--baseline REV] [--reps 10] [--rounds 3]
[--fedsgd-reps 100] [--results] [--keep]``. Full scale takes about 15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HEADING = "## Client/server seam: before vs after (benchmarks/bench_seam.py)"
BASELINE = "7fd6daef47eac8a9445339d14910f6b8fbd2631e"  # main before issue 11's refactor
BENCHES = ("fedsgd", "section4")
CHILD_ENV = {"NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
             "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# --------------------------------------------------------------------------- child (runs inside the tree under test)
def child_fedsgd(tree: Path, reps: int) -> tuple[float, float]:
    sys.path.insert(0, str(tree / "benchmarks"))
    from bench_fedsgd import N_I, M, make_data, ours

    from privfedstat import FederatedData

    X, y = make_data()
    data = FederatedData.from_pooled(X, y, sizes=[N_I] * M)
    t0 = time.perf_counter()
    coefs = ours(data, range(reps))
    return time.perf_counter() - t0, float(sum(c.sum() for c in coefs))


def child_section4(reps: int) -> tuple[float, float]:
    from privfedstat import simulations
    from privfedstat.simulations import MonteCarlo

    grids = getattr(simulations, "GRIDS", None) or simulations.STUDIES  # a baseline tree may name them STUDIES

    checksum = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for name, study in grids.items():
            df = MonteCarlo(study.scenarios(), study.methods, n_reps=reps, n_jobs=1, progress=False,
                            out=Path(tmp) / f"{name}.csv").run()
            checksum += float(df["mse"].sum())
        return time.perf_counter() - t0, checksum


def child(bench: str, reps: int) -> None:
    tree = Path.cwd().resolve()
    seconds, checksum = child_fedsgd(tree, reps) if bench == "fedsgd" else child_section4(reps)
    import privfedstat

    print(json.dumps({"seconds": seconds, "checksum": checksum, "package": str(Path(privfedstat.__file__).resolve())}))


# --------------------------------------------------------------------------- parent
def git(*args: str, cwd: Path = REPO) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def baseline_worktree(rev: str) -> Path:
    """A detached worktree of ``rev`` in the temporary folder (an existing one at that commit is reused)."""
    full = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    path = Path(tempfile.gettempdir()) / f"privfedstat-seam-{full[:12]}"
    if path.exists():
        if git("rev-parse", "HEAD", cwd=path) != full:
            raise RuntimeError(f"{path} exists but is not a worktree at {full}; remove it")
        return path
    git("worktree", "prune")  # forget worktrees whose folder the system deleted
    git("worktree", "add", "--detach", str(path), full)
    return path


def time_child(tree: Path, bench: str, reps: int) -> dict:
    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", bench, "--reps", str(reps)]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{bench} child in {tree} failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(out["package"]).is_relative_to(tree.resolve()):
        raise RuntimeError(f"the child for {tree} imported privfedstat from {out['package']}")
    return out


def describe_current() -> str:
    head = git("rev-parse", "--short=8", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "privfedstat")
    return f"{head}{' + uncommitted changes' if dirty else ''}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--baseline", default=BASELINE, help="baseline commit (default %(default)s)")
    ap.add_argument("--reps", type=int, default=10, help="Section 4 replicates per cell (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="timed runs of each tree (default %(default)s)")
    ap.add_argument("--fedsgd-reps", type=int, default=100, help="FedSGD fits per run (default %(default)s)")
    ap.add_argument("--results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the baseline worktree for the next run")
    ap.add_argument("--child", choices=BENCHES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for name in ("reps", "rounds", "fedsgd_reps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be a positive integer")
    if args.child:
        child(args.child, args.reps)
        return

    sys.path.insert(0, str(HERE))
    from bench_kernels import machine_info, update_results

    mi = machine_info()
    base = baseline_worktree(args.baseline)
    trees = {"baseline": base, "current": REPO}
    reps = {"fedsgd": args.fedsgd_reps, "section4": args.reps}
    try:
        for bench in BENCHES:
            for label, tree in trees.items():
                print(f"warm-up {bench} {label}", flush=True)
                time_child(tree, bench, 1)
        runs = {(b, k): [] for b in BENCHES for k in trees}
        checks = {}
        for r in range(args.rounds):
            order = ("baseline", "current") if r % 2 == 0 else ("current", "baseline")
            for bench in BENCHES:
                for label in order:
                    out = time_child(trees[label], bench, reps[bench])
                    runs[bench, label].append(out["seconds"])
                    checks[bench, label] = out["checksum"]
                    print(f"round {r + 1} {bench:8s} {label:8s} {out['seconds']:8.2f} s", flush=True)
    finally:
        if not args.keep:
            git("worktree", "remove", "--force", str(base))
    settings = {"fedsgd": f"DP-FedSGD, {args.fedsgd_reps} fits (m=50 x n=400, d=10, logistic, K=50)",
                "section4": f"Section 4, all studies, {args.reps} replicates, 1 worker"}
    revs = {"baseline": git("rev-parse", "--short=8", args.baseline), "current": describe_current()}
    lines = [HEADING, "", f"- Date: {mi['date']}",
             f"- Machine: {mi['model']}, {mi['cpus']} CPU(s); Python {mi['python']}, numpy {mi['numpy']}, "
             f"numba {mi['numba']}; load average at start {mi['load']}",
             f"- Baseline {revs['baseline']} (git worktree), current {revs['current']}; each run a fresh process "
             f"(numba and BLAS 1 thread) after one untimed warm-up; median of {args.rounds} alternating runs", "",
             "| benchmark | implementation | median s | runs s | current / baseline |", "|---|---|---:|---|---:|"]
    for bench in BENCHES:
        med = {k: statistics.median(runs[bench, k]) for k in trees}
        for k in trees:
            ratio = f"{med['current'] / med['baseline']:.3f}" if k == "current" else ""
            lines.append(f"| {settings[bench]} | {k} ({revs[k]}) | {med[k]:.3f} | "
                         f"{', '.join(f'{t:.2f}' for t in runs[bench, k])} | {ratio} |")
    lines.append("")
    for bench in BENCHES:
        a, b = checks[bench, "baseline"], checks[bench, "current"]
        rel = abs(a - b) / max(abs(a), 1e-300)
        lines.append(f"- {bench} checksum (sum of {'coefficients' if bench == 'fedsgd' else 'MSE'}): "
                     f"baseline {a:.12g}, current {b:.12g}, relative difference {rel:.1e}")
    section = "\n".join(lines) + "\n"
    print(section)
    if args.results:
        update_results(section, HEADING)


if __name__ == "__main__":
    main()
