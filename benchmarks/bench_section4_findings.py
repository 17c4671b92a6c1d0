"""The qualitative claims of the core paper's Section 4, checked under five configurations.

Run by hand: ``python benchmarks/bench_section4_findings.py [--reps 100] [--jobs 2] [--out DIR]``.
Each claim (with its figure) is tested on the cells that carry it, in every configuration:

* ``paper``: the paper's settings, clip="paper" (the 90% quantile of per-sample gradient norms at
  theta = 0, a non-private rule), mu = 2, the package's FedNewton;
* ``alg4``: the same with FedNewton's ``newton_noise="paper"`` (Algorithm 4 as printed);
* ``private``: the package's private defaults, clip="auto", mu = 2 (FedNewton's own default
  ``newton_noise``, passed as nothing, so that the default stays what the estimator says);
* ``np-clipped``: mu = inf, clip="auto";
* ``np-unclipped``: mu = inf, no clipping (clip = inf).

A claim *holds* when its difference lies in the claimed direction by more than 2 Monte-Carlo
standard errors, *fails* when it lies the other way by as much, else it is *n.s.* Comparisons of
two methods in one cell are paired by replicate (same data); comparisons across cells are
independent (SE of a difference of means). Results: ``benchmarks/section4_findings.md`` and the
"Section 4 findings" section of RESULTS.md. Replicates resume from ``--out`` (CSV per configuration).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import machine_info, update_results  # noqa: E402

from privfedstat.simulations import GLMDesign, MonteCarlo  # noqa: E402
from privfedstat.simulations.allocations import Equal, FixedTotal  # noqa: E402
from privfedstat.simulations.runner import METHODS, MSE, Scenario  # noqa: E402

HEADING = "## Section 4 findings (benchmarks/bench_section4_findings.py)"
TABLE = Path(__file__).resolve().parent / "section4_findings.md"
INF = math.inf

#: configuration -> (mu, clip, FedNewton settings)
CONFIGS = {
    "paper": (2.0, "paper", {}),
    "alg4": (2.0, "paper", {"newton_noise": "paper"}),
    "private": (2.0, "auto", {}),
    "np-clipped": (INF, "auto", {}),
    "np-unclipped": (INF, INF, {}),
}


@dataclass(frozen=True)
class Cell:
    """A scenario of the findings, without its configuration."""

    name: str
    family: str
    m: int
    alloc: object
    K: int | None = None


CELLS = [
    Cell("L m20 n50", "logistic", 20, Equal(50)), Cell("L m60 n50", "logistic", 60, Equal(50)),
    Cell("L m40 n30", "logistic", 40, Equal(30)), Cell("L m40 n110", "logistic", 40, Equal(110)),
    Cell("L m100 n400", "logistic", 100, Equal(400)),
    Cell("L K100", "logistic", 20, Equal(100), 100), Cell("L K300", "logistic", 20, Equal(100), 300),
    Cell("L N20000 m25", "logistic", 25, FixedTotal(20000, "equal")),
    Cell("L N20000 m200", "logistic", 200, FixedTotal(20000, "equal")),
    Cell("L N20000 m400", "logistic", 400, FixedTotal(20000, "equal")),
    Cell("P m100 n400", "poisson", 100, Equal(400)),
    Cell("P N20000 m400", "poisson", 400, FixedTotal(20000, "equal")),
]

#: (claim, kind, arguments): "pair" (cell, better, worse): better < worse in one cell, paired;
#: "cells" (method, low cell, high cell): MSE(low) < MSE(high); "ratio" (method, cell a, cell b, r): MSE(b)/MSE(a) < r;
#: "best"/"worst" (cell, method): lowest / highest of the four, paired against each other method
CLAIMS = [
    ("MSE falls as m grows at fixed n = 50, m 20 -> 60, FedSGD (Fig. 1)", "cells", ("FedSGD", "L m60 n50", "L m20 n50")),
    ("MSE falls as m grows at fixed n = 50, m 20 -> 60, FedHybrid (Fig. 1)", "cells",
     ("FedHybrid", "L m60 n50", "L m20 n50")),
    ("MSE falls as m grows at fixed n = 50, m 20 -> 60, FedAvg (Fig. 2)", "cells", ("FedAvg", "L m60 n50", "L m20 n50")),
    ("MSE falls as m grows at fixed n = 50, m 20 -> 60, FedNewton (Fig. 2)", "cells",
     ("FedNewton", "L m60 n50", "L m20 n50")),
    ("larger n lowers MSE, n 30 -> 110 at m = 40, FedSGD (Fig. 1)", "cells", ("FedSGD", "L m40 n110", "L m40 n30")),
    ("larger n lowers MSE, n 30 -> 110 at m = 40, FedAvg (Fig. 2)", "cells", ("FedAvg", "L m40 n110", "L m40 n30")),
    ("FedHybrid beats FedSGD, m = 100, n = 400 (Fig. 3)", "pair", ("L m100 n400", "FedHybrid", "FedSGD")),
    ("FedNewton beats FedAvg, m = 100, n = 400 (Fig. 3)", "pair", ("L m100 n400", "FedNewton", "FedAvg")),
    ("FedNewton is the best of the four, m = 100, n = 400 (Fig. 3)", "best", ("L m100 n400", "FedNewton")),
    ("FedAvg is the worst of the four, m = 100, n = 400 (Fig. 3)", "worst", ("L m100 n400", "FedAvg")),
    ("MSE rises with K beyond 100 (privacy noise), FedSGD K 100 -> 300 (Fig. 4)", "cells",
     ("FedSGD", "L K100", "L K300")),
    ("FedAvg's MSE rises sharply with m at N = 20000, m 25 -> 400 (Fig. 5)", "cells",
     ("FedAvg", "L N20000 m25", "L N20000 m400")),
    ("FedSGD stays within 2x from m = 25 to 400 at N = 20000 (Fig. 5)", "ratio",
     ("FedSGD", "L N20000 m25", "L N20000 m400", 2.0)),
    ("FedNewton mitigates FedAvg's decline: FedNewton < FedAvg at m = 200, N = 20000 (Fig. 5)", "pair",
     ("L N20000 m200", "FedNewton", "FedAvg")),
    ("FedNewton mitigates FedAvg's decline: FedNewton < FedAvg at m = 400, N = 20000 (Fig. 5)", "pair",
     ("L N20000 m400", "FedNewton", "FedAvg")),
    ("Poisson: FedHybrid beats FedSGD, m = 100, n = 400 (Fig. 6)", "pair", ("P m100 n400", "FedHybrid", "FedSGD")),
    ("Poisson: FedNewton beats FedAvg, m = 100, n = 400 (Fig. 6)", "pair", ("P m100 n400", "FedNewton", "FedAvg")),
    ("Poisson: FedNewton < FedAvg at m = 400, N = 20000 (Fig. 16)", "pair", ("P N20000 m400", "FedNewton", "FedAvg")),
]


def scenarios(config: str) -> dict[str, Scenario]:
    """The cells of ``config`` as scenarios, by cell name."""
    mu, clip, newton = CONFIGS[config]
    return {c.name: Scenario(GLMDesign(c.family), c.m, c.alloc, mu, n_iter=c.K, clip=clip, labels={"cell": c.name},
                             **newton) for c in CELLS}


def _verdict(diff: float, se: float, scale: float = 1.0) -> str:
    """diff > 0 means the claim's direction; "equal" when the estimates agree to 1e-4 of ``scale`` (the same
    optimum reached by two methods, e.g. FedSGD and FedHybrid without privacy)."""
    if not np.isfinite(diff):
        return "n/a"
    if abs(diff) <= 1e-4 * abs(scale):
        return "equal"
    return "holds" if diff > 2 * se else "fails" if diff < -2 * se else "n.s."


def _cell_stats(df: pd.DataFrame, cell: str, method: str) -> tuple[float, float]:
    x = df[(df["cell"] == cell) & (df["method"] == method)]["mse"]
    return float(x.mean()), float(x.std() / np.sqrt(len(x)))


def _paired(df: pd.DataFrame, cell: str, a: str, b: str) -> tuple[float, float]:
    """Mean and SE of MSE(b) - MSE(a) over replicates of ``cell``."""
    w = df[df["cell"] == cell].pivot_table(index="rep", columns="method", values="mse")
    d = (w[b] - w[a]).dropna()
    return float(d.mean()), float(d.std() / np.sqrt(len(d)))


def judge(df: pd.DataFrame, kind: str, args: tuple) -> tuple[str, str]:
    """The verdict of one claim on one configuration's results and the numbers behind it."""
    cells = [a for a in args if isinstance(a, str) and a not in METHODS]
    methods = [a for a in args if a in METHODS] if kind in ("pair", "cells", "ratio") else list(METHODS)
    if not set(cells) <= set(df["cell"]):
        return "n/a", "cell(s) not run"
    sub = df[df["cell"].isin(cells) & df["method"].isin(methods)]
    failed = sub[sub["mse"].isna()]
    if len(failed):
        which = ", ".join(f"{m} {k}/{len(sub[sub['method'] == m])}" for m, k in failed["method"].value_counts().items())
        return "diverged", f"fits diverged: {which}"
    if kind == "pair":
        cell, better, worse = args
        d, se = _paired(df, cell, better, worse)
        mb, mw = _cell_stats(df, cell, better)[0], _cell_stats(df, cell, worse)[0]
        return _verdict(d, se, mw), f"{better} {mb:.3g} vs {worse} {mw:.3g}; diff {-d:+.2g} ± {se:.1g}"
    if kind == "cells":
        method, low, high = args
        (ml, sl), (mh, sh) = _cell_stats(df, low, method), _cell_stats(df, high, method)
        se = math.hypot(sl, sh)
        return _verdict(mh - ml, se, mh), f"{low}: {ml:.3g} vs {high}: {mh:.3g}; diff {ml - mh:+.2g} ± {se:.1g}"
    if kind == "ratio":
        method, a, b, r = args
        (ma, sa), (mb, sb) = _cell_stats(df, a, method), _cell_stats(df, b, method)
        ratio = mb / ma
        se = ratio * math.hypot(sa / ma, sb / mb)
        return _verdict(r - ratio, se), f"ratio {ratio:.2f} ± {se:.2f}"
    cell, method = args
    others = sorted(set(df[df["cell"] == cell]["method"]) - {method})
    verdicts, worst = [], (math.inf, "")
    for o in others:
        d, se = _paired(df, cell, method, o) if kind == "best" else _paired(df, cell, o, method)
        verdicts.append(_verdict(d, se, _cell_stats(df, cell, method)[0]))
        worst = min(worst, (d / se if se > 0 else math.inf, f"vs {o} {d:+.2g} ± {se:.1g}"))
    v = "fails" if "fails" in verdicts else "holds" if set(verdicts) == {"holds"} else "n.s."
    return v, f"{method} {_cell_stats(df, cell, method)[0]:.3g}; closest {worst[1]}"


def run(reps: int, jobs: int, out: Path, configs=None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """The replicates of ``configs`` (default: all; resumed from ``out/<config>.csv``), by configuration."""
    out.mkdir(parents=True, exist_ok=True)
    timings = out / "seconds.json"
    spent = json.loads(timings.read_text()) if timings.exists() else {}
    results = {}
    for config in configs or tuple(CONFIGS):
        t0 = time.perf_counter()
        results[config] = MonteCarlo(list(scenarios(config).values()), n_reps=reps, n_jobs=jobs, progress=progress,
                                     out=out / f"{config}.csv", measure=MSE).run()
        spent[config] = spent.get(config, 0.0) + time.perf_counter() - t0
        print(f"{config}: {time.perf_counter() - t0:.1f} s", flush=True)
    timings.write_text(json.dumps(spent))
    return results


def seconds_spent(out: Path) -> float:
    """Wall seconds spent on the replicates in ``out`` over every (resumed) run."""
    timings = out / "seconds.json"
    return sum(json.loads(timings.read_text()).values()) if timings.exists() else math.nan


def findings(results: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The claims x configurations table: "verdict (numbers)" per cell."""
    rows = []
    for claim, kind, args in CLAIMS:
        row = {"claim": claim}
        for config, df in results.items():
            v, numbers = judge(df, kind, args)
            row[config] = f"**{v}** ({numbers})"
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100, help="replicates per cell (default 100, the paper's)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel workers (default 2)")
    ap.add_argument("--out", default="results/section4_findings", help="folder of the replicates' CSVs (resumed)")
    ap.add_argument("--table", default=str(TABLE), help="markdown table written (default benchmarks/section4_findings.md)")
    ap.add_argument("--no-results", action="store_true", help="do not write RESULTS.md (for tests)")
    args = ap.parse_args(argv)
    mi = machine_info()
    results = run(args.reps, args.jobs, Path(args.out), progress=not args.no_results)
    wall = seconds_spent(Path(args.out))
    table = findings(results)
    header = ["| claim (figure) | " + " | ".join(CONFIGS) + " |", "|---" * (len(CONFIGS) + 1) + "|"]
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    settings = "; ".join(f"`{k}`: mu = {mu:g}, clip = {'none' if clip == INF else clip}"
                         + (f", {', '.join(f'{a}={b}' for a, b in nw.items())}" if nw else "")
                         for k, (mu, clip, nw) in CONFIGS.items())
    text = "\n".join([
        f"- Date: {mi['date']}; machine: {mi['model']}, {mi['cpus']} CPU(s), load average at start {mi['load']}",
        f"- **{args.reps} replicates per cell** ({len(CELLS)} cells x 4 methods x {len(CONFIGS)} configurations), "
        f"{args.jobs} workers: {wall:.0f} s wall (summed over resumed runs)",
        f"- Configurations: {settings}",
        "- Verdicts: holds / fails beyond 2 Monte-Carlo SEs, else n.s. (\"equal\": the same estimate to 1e-4); "
        "numbers: the two means and their difference, first minus second (negative: the claim's direction), ± 1 SE",
        f"- The paper's 100 replicates: `python benchmarks/bench_section4_findings.py --reps 100` (about "
        f"{wall / args.reps * 100 / 60:.0f} min at this load: the run time is linear in the replicates)", "",
        *header, *body])
    Path(args.table).write_text("# Section 4 findings\n\n" + text + "\n")
    print(text)
    if not args.no_results:
        update_results("\n".join([HEADING, "", text, ""]), HEADING)


if __name__ == "__main__":
    main()
