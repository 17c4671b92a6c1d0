"""Cross-device scale: the cost of one private GLM fit against the number of clients and of rows.

What is compared: ``FedSGD(mu=2, n_iter=50, step_size=0.5, clip=1.5, inference=None)`` (Algorithm 1,
logistic, d = 10: an intercept and 9 N(0, 1) covariates; every release goes through the Channel
into the ledger) on N rows split equally over m clients, each fit in a fresh process:

* vs clients: N = 10^6 over m = 100 ... 10^6 clients (10^6: one row per client);
* vs rows: N = 10^5 ... 10^7, over 100 clients and over clients of 10 rows;
* Poisson participation: client-level DP-FedAvg (``participation=1e-3``, 1,000 rounds, one local
  step) over 10^6 clients of 10 rows, the issue's cross-device case (about 1,000 clients a round).

Reported: seconds per fit (the best of ``REPEATS`` fits after a warm-up fit), ns per row and
iteration, the ratio to 100 clients, the peak resident memory of the process (``ru_maxrss``: the
data included) and the pickled ledger. ``--baseline PATH`` also times the package at PATH (another
checkout, e.g. the main branch) in the same run, case by case, where it can run the case.

Run by hand: ``python benchmarks/bench_clients.py [--baseline /path/to/other/checkout] [--threads 1]``;
writes its section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import machine_info, update_results  # noqa: E402

HEADING = "## Cross-device scale: cost vs clients and rows (benchmarks/bench_clients.py)"
ROOT = Path(__file__).resolve().parents[1]
D, K, MU, ETA, B = 10, 50, 2.0, 0.5, 1.5
REPEATS = 3
#: (label, N, clients, estimator); the baseline skips the cases with more clients than BASELINE_MAX_CLIENTS
CASES = [("clients", 10**6, m, "fedsgd") for m in (100, 1_000, 10_000, 100_000, 1_000_000)] + [
    ("rows", 10**5, 100, "fedsgd"), ("rows", 10**5, 10**4, "fedsgd"),
    ("rows", 10**7, 100, "fedsgd"), ("rows", 10**7, 10**6, "fedsgd"),
    ("poisson", 10**7, 10**6, "dpfedavg"),
]
#: the per-client generators and noise buffers of the baseline need gigabytes past this many clients
BASELINE_MAX_CLIENTS = 100_000
POISSON_RATE, POISSON_ROUNDS = 1e-3, 1_000


def one(n_rows: int, n_clients: int, estimator: str) -> dict:
    """Time one case in this process (the package on ``sys.path``) and return its measurements."""
    import pickle
    import resource
    import time
    import warnings

    import numpy as np

    from privfedstat import DPFedAvg, FederatedData, FedSGD

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(n_rows), rng.standard_normal((n_rows, D - 1))])
    beta = np.r_[0.5, rng.normal(scale=0.3, size=D - 1)]
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-X @ beta))).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=np.full(n_clients, n_rows // n_clients))
    del X, y
    if estimator == "fedsgd":
        def make(seed):
            return FedSGD(mu=MU, n_iter=K, step_size=ETA, clip=B, inference=None, random_state=seed)
        iterations, repeats = K, REPEATS if n_rows * n_clients <= 10**12 else 1
    else:
        def make(seed):
            return DPFedAvg(mu=MU, n_rounds=POISSON_ROUNDS, n_local_steps=1, update_clip=0.5,
                            participation=POISSON_RATE, inference=None, random_state=seed)
        iterations, repeats = POISSON_ROUNDS, 1
    small = FederatedData.from_pooled(data.X[:200], data.y[:200], sizes=[100, 100])
    make(0).fit(small)  # compile or load the numba kernels
    times, fit = [], None
    for r in range(repeats):
        t0 = time.perf_counter()
        fit = make(r + 1).fit(data)
        times.append(time.perf_counter() - t0)
    ledger = fit.privacy_
    return {"seconds": min(times), "iterations": iterations, "peak_rss_mb": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, "ledger_mb": len(pickle.dumps(ledger)) / 1e6,
        "releases": len(ledger.releases), "mu": float(ledger.mu)}


def _commit(tree: Path) -> str:
    """The checkout's commit (``+`` when its working tree has changes)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_case(tree: Path, n_rows: int, n_clients: int, estimator: str, timeout: float, threads: int | None
             ) -> dict | None:
    """``one`` in a fresh process importing the package from ``tree``; None if it failed or ran out of time."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    if threads is not None:
        env.update({name: str(threads) for name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    cmd = [sys.executable, __file__, "--one", str(n_rows), str(n_clients), estimator]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        print(f"  {tree}: {n_rows} rows / {n_clients} clients failed: {type(err).__name__}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(baseline: Path | None, timeout: float, threads: int | None) -> None:
    mi = machine_info()
    revs = _commit(ROOT), (_commit(baseline) if baseline else "")  # before the runs: a baseline may be a temporary tree
    rows = []
    for label, n_rows, n_clients, estimator in CASES:
        res = run_case(ROOT, n_rows, n_clients, estimator, timeout, threads)
        base = None
        if baseline is not None and n_clients <= BASELINE_MAX_CLIENTS:
            base = run_case(baseline, n_rows, n_clients, estimator, timeout, threads)
        rows.append((label, n_rows, n_clients, estimator, res, base))
        print(label, n_rows, n_clients, estimator, res, base, flush=True)
    ref = {n: r["seconds"] for lab, n, m, _, r, _ in rows if m == 100 and r is not None}
    lines = [
        HEADING, "",
        f"- Date: {mi['date']}",
        f"- Machine: {mi['model']}, {mi['cpus']} CPU(s), shared with other agents' jobs (load average at start "
        f"{mi['load']}, at end {'{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg())}); Python {mi['python']}, "
        f"numpy {mi['numpy']}, numba {mi['numba']}; "
        f"{f'{threads} thread(s) (numba, OpenMP, BLAS)' if threads else 'default threads'}",
        f"- Compared: FedSGD (mu={MU}, K={K}, eta={ETA}, B={B}, inference=None), logistic, d={D}, N rows split "
        "equally over m clients; DP-FedAvg with Poisson participation q = "
        f"{POISSON_RATE:g}, {POISSON_ROUNDS} rounds, one local step. Each case in a fresh process, best of "
        f"{REPEATS} fits after a warm-up (one fit for the largest cases). Peak RSS includes the data "
        "(N = 10^7: 0.8 GB of X and its 0.8 GB column-major copy).",
        f"- This tree: {revs[0]}; baseline: {f'{baseline} at {revs[1]} (same cases, same run)' if baseline else 'none'}.",
        "",
        "| case | N | clients | rows/client | seconds / fit | ns / row / iteration | vs 100 clients, same N | "
        "peak RSS MB | ledger MB (releases) | baseline seconds | baseline peak RSS MB | baseline ledger MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, n_rows, n_clients, estimator, res, base in rows:
        name = label if estimator == "fedsgd" else f"{label} (DP-FedAvg q={POISSON_RATE:g})"
        if res is None:
            lines.append(f"| {name} | {n_rows:.0e} | {n_clients:.0e} | {n_rows // n_clients} | failed | | | | | | | |")
            continue
        ns = 1e9 * res["seconds"] / (n_rows * res["iterations"])
        ratio = f"{res['seconds'] / ref[n_rows]:.2f}" if estimator == "fedsgd" and n_rows in ref else "-"
        if base is not None:
            b = f"{base['seconds']:.2f} | {base['peak_rss_mb']:.0f} | {base['ledger_mb']:.1f}"
        elif baseline is not None:
            b = "not run | | " if n_clients > BASELINE_MAX_CLIENTS else "failed | | "
        else:
            b = "- | - | -"
        lines.append(f"| {name} | {n_rows:.0e} | {n_clients:.0e} | {n_rows // n_clients} | {res['seconds']:.2f} | "
                     f"{ns:.1f} | {ratio} | {res['peak_rss_mb']:.0f} | {res['ledger_mb']:.1f} ({res['releases']}) | {b} |")
    lines.append("")
    section = "\n".join(lines)
    print(section)
    update_results(section, HEADING)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=3, metavar=("N", "CLIENTS", "ESTIMATOR"), help=argparse.SUPPRESS)
    parser.add_argument("--baseline", type=Path, help="another checkout of the package to time in the same run")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per case and tree")
    parser.add_argument("--threads", type=int, help="numba / OpenMP / BLAS threads of the timed processes "
                        "(1: robust to other jobs on a shared machine)")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), int(args.one[1]), args.one[2])))
    else:
        main(args.baseline, args.timeout, args.threads)
