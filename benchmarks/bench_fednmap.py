"""DP-FedNMap on a sparse logistic design: support recovery and estimation error against mu (issue 14, item 4).

The design: m = 10 clients of n = 500 rows, d = 1 + 20 columns (an intercept and 20 standard normal
covariates, client k's shifted by 0.1 k: heterogeneous sites), logistic responses from
``beta = (0.3, 1, -1, 0.8, -0.8, 0.6, 0, ..., 0)`` (5 of the 20 slopes non-zero). Each method
(FedNMap, Zhang et al. 2024a, FedCanon) is fitted with its defaults (R = 10 rounds of Q = K = 10 local
steps; private clipping bound ``clip="auto"``; no scaling; with mu = inf until settled) at lasso
strengths ``alpha`` and budgets mu per client, ``--seeds`` data sets and noise draws per cell.
Reported per cell, as medians over seeds: the estimation error ``||coef - beta||_2``, the distance
to the non-private pooled lasso at the same alpha (FedNMap with mu = inf run to convergence), and
the support precision and recall of the 20 slopes (the intercept is not penalised and is left out).

Run by hand::

    python benchmarks/bench_fednmap.py               # 10 seeds: writes its section of RESULTS.md (~2 min)
    python benchmarks/bench_fednmap.py --seeds 2 --no-write
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import machine_info, update_results  # noqa: E402

from privfedstat import FedCanon, FederatedData, FedNMap, ZhangComposite  # noqa: E402
from privfedstat.simulations.composite_metrics import support_recovery  # noqa: E402

HEADING = "## DP-FedNMap: support recovery and error against mu (benchmarks/bench_fednmap.py)"
M, N_I, D = 10, 500, 20
BETA = np.r_[0.3, 1.0, -1.0, 0.8, -0.8, 0.6, np.zeros(D - 5)]
MUS = (0.5, 1.0, 2.0, 4.0, 8.0, math.inf)
ALPHAS = (0.02, 0.05)
METHODS = {"FedNMap": FedNMap, "Zhang (2024a)": ZhangComposite, "FedCanon": FedCanon}


def make_data(seed: int) -> FederatedData:
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((M * N_I, D)) + 0.1 * np.repeat(np.arange(M), N_I)[:, None]
    X = np.column_stack([np.ones(M * N_I), C])
    y = (rng.random(M * N_I) < 1 / (1 + np.exp(-X @ BETA))).astype(float)
    return FederatedData.from_pooled(X, y, sizes=[N_I] * M)


def run(seeds: int) -> pd.DataFrame:
    rows = []
    for seed in range(seeds):
        data = make_data(seed)
        for alpha in ALPHAS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pooled = FedNMap(mu=math.inf, alpha=alpha, n_rounds=3000).fit(data).coef_
            for name, cls in METHODS.items():
                for mu in MUS:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        coef = cls(mu=mu, alpha=alpha, random_state=seed).fit(data).coef_
                    rec = support_recovery(coef, BETA, ignore=(0,))
                    rows.append({"method": name, "alpha": alpha, "mu": mu, "seed": seed,
                                 "error": float(np.linalg.norm(coef - BETA)),
                                 "to_pooled": float(np.linalg.norm(coef - pooled)),
                                 "precision": rec.precision, "recall": rec.recall, "selected": rec.selected})
    return pd.DataFrame(rows)


def section(runs: pd.DataFrame, seeds: int, wall: float) -> str:
    mi = machine_info()
    cells = runs.groupby(["method", "alpha", "mu"], sort=False).median(numeric_only=True).reset_index()
    lines = [HEADING, "",
             f"{mi['date']}; {mi['model']} x{mi['cpus']}; {seeds} seeds per cell (medians); wall {wall:.0f} s.",
             f"Sparse logistic design: m = {M} sites x n = {N_I}, d = 1 + {D}, 5 non-zero slopes, sites shifted by "
             "0.1 k; defaults (clip='auto', no scaling; finite mu: 10 rounds for FedNMap / Zhang, SCAFFOLD's R = K = 10 "
             "for FedCanon; mu = inf: until settled). error = ||coef - beta||_2 (mostly the lasso's shrinkage), "
             "to pooled = ||coef - pooled lasso||_2 (same alpha, mu = inf), precision / recall of the 20 slopes' support.",
             "",
             "| method | alpha | mu | error | to pooled | precision | recall | selected |",
             "|---|---|---|---|---|---|---|---|"]
    for r in cells.itertuples():
        lines.append(f"| {r.method} | {r.alpha:g} | {r.mu:g} | {r.error:.3f} | {r.to_pooled:.3f} | {r.precision:.2f} | "
                     f"{r.recall:.2f} | {r.selected:g} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    runs = run(args.seeds)
    text = section(runs, args.seeds, time.perf_counter() - t0)
    print(text)
    if not args.no_write:
        update_results(text.rstrip(), HEADING)


if __name__ == "__main__":
    main()
