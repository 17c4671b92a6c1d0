"""Coverage of private 95% intervals (issue 10): the full study, written into RESULTS.md.

Runs ``privfedstat reproduce coverage`` (:mod:`privfedstat.simulations.coverage`): logistic and
Poisson GLMs with an intercept and 4 covariates equicorrelated at rho = 0.5, N in {2000, 20000}
rows split equally over m in {10, 50} sites, mu in {1, 2, inf} per site; FedIRLS (glm()'s default
method), FedSGD, FedAvg and FedNewton with their defaults (``inference="auto"``) and the pooled MLE
as the reference. Per cell: coverage of nominal 95% intervals (mean over the coefficients, and
their min / max), mean width relative to the non-private interval next to the width ratio the
fit's covariance predicts, run time, fraction converged, and the verdict against the 93-97%
target inside the regime stated in :func:`privfedstat.simulations.summarise_coverage`.

Run by hand (resumable: rerun the same command after an interruption; the CSV in ``--out`` keeps
every finished replicate)::

    python benchmarks/bench_coverage.py --jobs 16               # 500 replicates per cell: writes RESULTS.md
    python benchmarks/bench_coverage.py --quick                 # 10 replicates, prints only (smoke test)
    python benchmarks/bench_coverage.py --reps 200 --no-write   # fewer replicates, prints only

The section "## Coverage of private intervals (benchmarks/bench_coverage.py)" of RESULTS.md is
replaced on each writing run (the other sections are kept), and the figure is copied to
``benchmarks/coverage.png``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_accuracy import code_version  # noqa: E402
from bench_kernels import machine_info, update_results  # noqa: E402

import privfedstat  # noqa: E402
from privfedstat.simulations.coverage import MAX_FAILED, MIN_CONVERGED, STUDY, TARGET  # noqa: E402
from privfedstat.simulations.study import run_study  # noqa: E402

HEADING = "## Coverage of private intervals (benchmarks/bench_coverage.py)"
FIGURE = Path(__file__).resolve().parent / "coverage.png"
MIN_REPS = 500


def _pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:.1f}"


def _ratio(x: float) -> str:
    return "-" if pd.isna(x) else f"{x:.2f}"


def family_table(table: pd.DataFrame, family: str) -> list[str]:
    lines = [f"### {family}", "",
             "| N | m (n_i) | mu | method | reps | coverage % | min-max % | MLE % | width ratio | predicted | "
             "bias/sd | sd/se | s / fit | converged % | verdict |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in table[table["family"] == family].itertuples():
        verdict = f"**{r.verdict}**" if r.regime == "yes" else f"outside regime ({r.regime})"
        lines.append(f"| {r.N} | {r.m} ({r.n_mean:g}) | {r.mu:g} | {r.method} | {r.reps} | {_pct(r.coverage)} | "
                     f"{_pct(r.coverage_min)}-{_pct(r.coverage_max)} | {_pct(r.mle_coverage)} | "
                     f"{_ratio(r.width_ratio)} ({_ratio(r.width_ratio_median)}) | "
                     f"{_ratio(r.pred_ratio)} ({_ratio(r.pred_ratio_median)}) | {_ratio(r.bias_sd)} | "
                     f"{_ratio(r.sd_se)} | {r.seconds:.3f} | {_pct(r.converged)} | {verdict} |")
    return lines + [""]


def targets(table: pd.DataFrame) -> list[str]:
    """Per method: cells met / missed / outside the regime, and the misses with their numbers."""
    lines = ["| method | cells | met | missed | outside regime | mean coverage % (in regime) | misses |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for method, g in table.groupby("method", sort=False):
        inside = g[g["verdict"] != "outside regime"]
        missed = g[g["verdict"] == "missed"]
        misses = "; ".join(f"{r.family} N={r.N} m={r.m} mu={r.mu:g}: {_pct(r.coverage)} "
                           f"({_pct(r.coverage_min)}-{_pct(r.coverage_max)}; bias/sd {_ratio(r.bias_sd)}, "
                           f"sd/se {_ratio(r.sd_se)})" for r in missed.itertuples()) or "-"
        lines.append(f"| {method} | {len(g)} | {(g['verdict'] == 'met').sum()} | {len(missed)} | "
                     f"{len(g) - len(inside)} | {_pct(inside['coverage'].mean())} | {misses} |")
    return lines


def section(df: pd.DataFrame, table: pd.DataFrame, args, mi: dict, wall: float, figure: str) -> str:
    lo, hi = TARGET
    inside = table[table["verdict"] != "outside regime"]
    met = (inside["verdict"] == "met").sum()
    lines = [HEADING, "", f"- Date: {mi['date']}",
             f"- Machine: {mi['model']}, {mi['cpus']} CPU(s); Python {mi['python']}, numpy {mi['numpy']}, "
             f"numba {mi['numba']}, privfedstat {getattr(privfedstat, '__version__', '?')}; "
             f"load average at start {mi['load']}",
             f"- Code: privfedstat at {code_version()}",
             f"- Run: `python benchmarks/bench_coverage.py {' '.join(sys.argv[1:])}`".rstrip() +
             f" ({len(df)} rows, {int(table['reps'].min())}-{int(table['reps'].max())} replicates per cell, "
             f"{args.jobs} worker(s), {wall:.0f} s wall; results in `{args.out}/coverage.csv`)",
             "- Design: logistic and Poisson GLMs, intercept + 4 covariates N(0, R) with R equicorrelated at "
             "rho = 0.5, default beta of `privfedstat.simulations.GLMDesign`; N rows split equally over m sites; "
             "every method with its defaults (`inference='auto'`: a share of mu for the released Hessian, "
             "the privacy noise of the protocol from its linearised recursion). *coverage*: truth inside "
             "`conf_int(0.05)`, mean over the 5 coefficients (min-max over them); *width ratio*: mean width / "
             "the pooled MLE's non-private width 2 x 1.96 x SE on the same data, mean (median); *predicted*: "
             "sqrt(diag(cov) / diag(cov_sampling)) of the fit's own covariance, mean (median); *MLE*: coverage "
             "of the pooled MLE in the same cell (what the design allows); why a cell misses: *bias/sd* = "
             "max over coefficients of |mean(estimate - truth)| / sd(estimate) (bias, e.g. clipping bias, "
             "0.3 costs about 1 point of coverage, 1.0 about 12) and *sd/se* = mean over coefficients of "
             "sd(estimate) / rms(SE) (above 1: standard errors too small); *s / fit*: mean seconds of one fit "
             "including its inference.",
             f"- Target (issue 10): coverage in {lo:.0%}-{hi:.0%} in every cell inside the regime: the mean over "
             f"coefficients in the target and every coefficient within the target widened by its binomial "
             f"95% noise (+-{_pct(table['band'].max())} points at {int(table['reps'].min())} replicates). "
             f"Regime (stated beforehand, inferred): >= {MIN_CONVERGED:.0%} of the fits converged "
             f"(`converged_`) and <= {MAX_FAILED:.0%} failed.",
             f"- Result: **{met} of {len(inside)} cells inside the regime meet the target**; "
             f"{len(table) - len(inside)} cells are outside it.",
             f"- Figure: [`{figure}`]({figure}) (left: coverage per cell with the binomial band around 95%; "
             "right: width ratio against its prediction).", "", "### Targets per method", ""]
    lines += targets(table) + [""]
    for family in dict.fromkeys(table["family"]):
        lines += family_table(table, family)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=MIN_REPS, help=f"replicates per cell (>= {MIN_REPS} for RESULTS.md)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="joblib workers (numba 1 thread each)")
    ap.add_argument("--out", default="results/coverage", help="folder of the resumable CSV, summary and figure")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="10 replicates, print only (smoke test)")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps = 10
        args.out = str(Path(args.out) / "quick")
    write = not (args.quick or args.no_write)
    if write and args.reps < MIN_REPS:
        ap.error(f"RESULTS.md needs >= {MIN_REPS} replicates per cell (use --no-write for fewer)")
    mi = machine_info()
    t0 = time.perf_counter()
    result = run_study(STUDY, args.out, reps=args.reps, jobs=args.jobs, seed=args.seed)
    wall = time.perf_counter() - t0
    df, table, figure = result.frames[""], result.tables["summary"].frame, Path(args.out) / "coverage.png"
    if write:
        shutil.copyfile(figure, FIGURE)
        figure = FIGURE.name
    text = section(df, table, args, mi, wall, str(figure))
    print(text)
    if write:
        update_results(text.rstrip(), HEADING)


if __name__ == "__main__":
    main()
