"""DP-FedSGD end to end: privfedstat against the textbook implementation, timed in the same run.

Setting (issue 3): m = 50 clients x n = 400, d = 10 (intercept + 9 N(0, 1) covariates), logistic,
K = 50, eta = 0.5, mu = 2, fixed clip B = 1.5, 100 replicates (fresh noise per replicate).

* textbook: a Python loop over clients per iteration; each client builds its explicit per-sample
  gradient matrix with numpy, clips rows to norm B, averages, adds N(0, sigma_i^2) noise;
* privfedstat, 1 process: ``FedSGD(..., inference=None).fit(data)`` per replicate (numba kernel over
  all clients, noise through the Channel, full ledger);
* privfedstat, replicates over 2 processes (joblib), as the Monte-Carlo runner does.

What is compared: the same computation, K = 50 rounds of noisy clipped mean gradients and nothing
else. ``inference=None``, because FedSGD's default inference makes further releases (the Hessian for
the standard errors) that the textbook loop does not; privfedstat still records every release in its
ledger and checks every iterate, which the textbook loop does not.

Run by hand: ``python benchmarks/bench_fedsgd.py``; writes its section of RESULTS.md.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import machine_info, update_results  # noqa: E402

from privfedstat import FederatedData, FedSGD  # noqa: E402

HEADING = "## DP-FedSGD vs textbook (benchmarks/bench_fedsgd.py)"
M, N_I, D, K, ETA, MU, B, REPS = 50, 400, 10, 50, 0.5, 2.0, 1.5, 100


def make_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    beta = np.r_[0.5, rng.normal(scale=0.3, size=D - 1)]
    X = np.column_stack([np.ones(M * N_I), rng.standard_normal((M * N_I, D - 1))])
    y = (rng.random(M * N_I) < expit(X @ beta)).astype(float)
    return X, y


def textbook_fedsgd(clients, rng):
    theta = np.zeros(D)
    N = sum(len(y) for _, y in clients)
    for _ in range(K):
        agg = np.zeros(D)
        for X, y in clients:
            G = (expit(X @ theta) - y)[:, None] * X  # explicit per-sample gradients
            norms = np.linalg.norm(G, axis=1)
            G *= np.minimum(1.0, B / np.maximum(norms, 1e-300))[:, None]
            n = len(y)
            sigma = 2 * B * np.sqrt(K) / (MU * n)
            agg += n / N * (G.mean(axis=0) + sigma * rng.standard_normal(D))
        theta = theta - ETA * agg
    return theta


def ours(data, seeds):
    return [FedSGD(mu=MU, n_iter=K, step_size=ETA, clip=B, inference=None, random_state=s).fit(data).coef_
            for s in seeds]


def ours_worker(X, y, seeds):
    import numba

    numba.set_num_threads(1)
    return ours(FederatedData.from_pooled(X, y, sizes=[N_I] * M), seeds)


def main() -> None:
    mi = machine_info()
    X, y = make_data()
    clients = [(X[i * N_I:(i + 1) * N_I], y[i * N_I:(i + 1) * N_I]) for i in range(M)]
    data = FederatedData.from_pooled(X, y, sizes=[N_I] * M)
    ours(data, [0])  # load the numba cache
    with Parallel(n_jobs=2) as par:
        par(delayed(ours_worker)(X, y, [0]) for _ in range(2))  # warm the workers
        timings = {"textbook": [], "ours": [], "ours2": []}
        coefs = {}
        for rep_block in range(3):
            t0 = time.perf_counter()
            rng = np.random.default_rng(rep_block)
            coefs["textbook"] = [textbook_fedsgd(clients, rng) for _ in range(REPS)]
            timings["textbook"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            coefs["ours"] = ours(data, range(REPS))
            timings["ours"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            halves = np.array_split(np.arange(REPS), 2)
            coefs["ours2"] = sum(par(delayed(ours_worker)(X, y, h.tolist()) for h in halves), [])
            timings["ours2"].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in timings.items()}
    # same estimator: the mean over replicates agrees (noise differs)
    spread = np.std(coefs["ours"], axis=0).max() / np.sqrt(REPS)
    agree = np.abs(np.mean(coefs["ours"], axis=0) - np.mean(coefs["textbook"], axis=0)).max()
    lines = [
        HEADING,
        "",
        f"- Date: {mi['date']}",
        f"- Machine: {mi['model']}, {mi['cpus']} CPU(s); Python {mi['python']}, numpy {mi['numpy']}, numba {mi['numba']}; "
        f"load average at start {mi['load']}",
        f"- Setting: m={M} x n={N_I}, d={D}, logistic, K={K}, eta={ETA}, mu={MU}, B={B}, {REPS} replicates; "
        "median of 3 runs, all implementations in the same process run",
        "- Compared: the same K noisy clipped-gradient rounds; privfedstat with inference=None (no inference "
        "releases), its ledger recorded",
        "",
        "| implementation | seconds / 100 reps | ms / fit | speedup vs textbook |",
        "|---|---:|---:|---:|",
    ]
    names = {"textbook": "textbook (loop over clients, numpy, per-sample gradient matrix)",
             "ours": "privfedstat FedSGD, 1 process", "ours2": "privfedstat FedSGD, replicates over 2 processes"}
    for k in ("textbook", "ours", "ours2"):
        lines.append(f"| {names[k]} | {med[k]:.3f} | {1000 * med[k] / REPS:.2f} | {med['textbook'] / med[k]:.1f}x |")
    lines += ["", f"Mean coefficient over replicates, privfedstat vs textbook: max abs difference {agree:.2e} "
              f"(Monte-Carlo standard error {spread:.2e}).", ""]
    section = "\n".join(lines)
    print(section)
    update_results(section, HEADING)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
