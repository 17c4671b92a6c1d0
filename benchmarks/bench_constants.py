"""The chosen decision constants on one half of the natural-sites data (issue 42, item 5; docs/guide/constants.md).

Two kinds of evidence, both from the fits of ``bench_natural_sites.py`` (``glm()`` defaults, mu in {8, 2}):

* **budget shares** (``SCORE_SHARE``, ``EXCESS_SHARE``): each value is set in the modules that read it and every fit
  run again; per setting the fits with a withheld interval, the share of intervals holding the MLE, the median and
  mean interval width (MLE SEs), the RMS z, and the fits whose coefficients moved;
* **the diagnostic level** (``DIAGNOSTIC_ALPHA``) and ``OSCILLATION_CORRELATION``: the statistics of the fit's own
  tests are recorded as the fit computes them (its score test is evaluated again at each level on the same released
  values, the clipping displacement and the last period are read from what the fit measured; nothing is released
  twice), and each level's decisions counted: score tests rejecting, displacements resolved, last periods called
  back and forth; with the smallest p-values of the fits (the largest level that flags none).

Run by hand (the section ``HEADING`` of RESULTS.md is replaced, one per half; progress on stderr)::

    nice python benchmarks/bench_constants.py --half tuning --seeds 5
    nice python benchmarks/bench_constants.py --half validation --seeds 3 --no-shares
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_accuracy import code_version  # noqa: E402
from bench_kernels import machine_info, update_results  # noqa: E402
from bench_natural_sites import fit_one  # noqa: E402
from natural_sites_data import DATASETS, TUNING, VALIDATION, half  # noqa: E402

from privfedstat.fitting import base, diagnostics, verdict  # noqa: E402
from privfedstat.inference import clipping_bias, config  # noqa: E402

HEADING = "## Decision constants on the {half} half (benchmarks/bench_constants.py)"
SHARES = {"SCORE_SHARE": (0.05, 0.2), "EXCESS_SHARE": (0.1, 0.4)}
LEVELS = (0.01, 0.001, 0.0001)


@contextmanager
def share(name: str, value: float):
    """``name`` set to ``value`` where the fit reads it (SCORE_SHARE: imported by the fit; EXCESS_SHARE: read from
    clipping_bias at each fit)."""
    modules = (base, verdict) if name == "SCORE_SHARE" else (clipping_bias,)
    old = getattr(modules[0], name)
    for m in modules:
        setattr(m, name, value)
    try:
        yield
    finally:
        for m in modules:
            setattr(m, name, old)


@contextmanager
def recorded(stats: dict):
    """The fit's own diagnostics recorded into ``stats`` (the same calls, their results logged)."""
    judge, measure, last_period = verdict.judge, clipping_bias.measure, diagnostics.last_period

    def judge_at_levels(score, H, G, cov, cov_privacy):
        out = judge(score, H, G, cov, cov_privacy)
        stats["score_p"] = out.p_value
        for level in LEVELS:  # the same released values, tested at another level
            verdict.DIAGNOSTIC_ALPHA = level
            stats[f"score_rejects_{level}"] = not judge(score, H, G, cov, cov_privacy).converged
        verdict.DIAGNOSTIC_ALPHA = config.DIAGNOSTIC_ALPHA
        return out

    def measure_logged(*args, **kwargs):
        found = measure(*args, **kwargs)
        z = float(np.max(np.abs(found.delta) / np.sqrt(np.diag(found.noise))))
        stats["clip_z"], stats["clip_p"] = z, found.delta.size
        return found

    def last_period_logged(path, run, update_sd):
        size, sd = last_period(path, run, update_sd)
        k = max(1, min(len(path) - 1, 8))
        stats.update(last_ratio=size / sd if sd > 0 else np.nan, p=np.ravel(path[-1]).size,
                     lag1=diagnostics.oscillation(path, max(k, (len(path) - 1) // 4))[0])
        return size, sd

    verdict.judge, clipping_bias.measure, diagnostics.last_period = judge_at_levels, measure_logged, last_period_logged
    try:
        yield
    finally:
        verdict.judge, clipping_bias.measure, diagnostics.last_period = judge, measure, last_period


def run_half(names: list[str], mus: list[float], seeds: int, record: bool) -> pd.DataFrame:
    rows = []
    for name in names:
        for mu in mus:
            for seed in range(seeds):
                stats: dict = {}
                if record:
                    with recorded(stats):
                        row = fit_one(name, mu, seed)
                else:
                    row = fit_one(name, mu, seed)
                rows.append({**row, **stats})
                print(f"{name} mu={mu:g} seed={seed}", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def share_row(label: str, runs: pd.DataFrame, base_runs: pd.DataFrame) -> str:
    ok = runs[runs["error"] == ""]
    moved = int(np.sum(np.abs(runs["max_se"].to_numpy() - base_runs["max_se"].to_numpy()) > 1e-9))
    return (f"| {label} | {int((ok['withheld'] > 0).sum())} | {ok['hold'].mean():.1%} | {ok['width'].median():.3f} / "
            f"{ok['width'].mean():.3f} | {np.sqrt(ok['sq_z'].mean()):.3f} | {moved} |")


def level_lines(runs: pd.DataFrame) -> list[str]:
    from scipy.stats import norm

    lines = ["| level | score tests rejecting | displacements resolved | last periods called back and forth |",
             "|---|---:|---:|---:|"]
    clip = runs.dropna(subset=["clip_z"]) if "clip_z" in runs else runs.iloc[:0]
    osc = runs.dropna(subset=["last_ratio"]) if "last_ratio" in runs else runs.iloc[:0]
    for level in LEVELS:
        score = int(runs.get(f"score_rejects_{level}", pd.Series(dtype=bool)).fillna(False).astype(bool).sum())
        resolved = int(sum(z > norm.isf(level / (2 * p)) for z, p in zip(clip["clip_z"], clip["clip_p"])))
        back = int(sum(c < -diagnostics.OSCILLATION_CORRELATION and r > diagnostics.oscillation_noise_sds(int(p), level)
                       for c, r, p in zip(osc["lag1"], osc["last_ratio"], osc["p"])))
        lines.append(f"| {level:g} | {score} | {resolved} | {back} |")
    bonferroni = [min(1.0, 2 * p * norm.sf(z)) for z, p in zip(clip["clip_z"], clip["clip_p"])]
    worst = osc.assign(crit=[diagnostics.oscillation_noise_sds(int(p)) for p in osc["p"]])
    worst = worst.assign(over=worst["last_ratio"] / worst["crit"]).sort_values("over").tail(1)
    lines += ["", f"Smallest score-test p-value {runs['score_p'].min():.3g}; smallest Bonferroni p of a clipping "
              f"displacement {min(bonferroni, default=np.nan):.3g}; largest last period "
              + ", ".join(f"{r.last_ratio:.2f} noise sds (critical {r.crit:.2f}, p = {int(r.p)}, lag-1 {r.lag1:.2f}, "
                          f"{r.dataset} mu = {r.mu:g} seed {r.seed})" for r in worst.itertuples())
              + f"; lag-1 correlation below -{diagnostics.OSCILLATION_CORRELATION:g} in "
              f"{int((osc['lag1'] < -diagnostics.OSCILLATION_CORRELATION).sum())} of {len(osc)} fits."]
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--half", choices=[TUNING, VALIDATION], required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--mus", nargs="+", type=float, default=[8.0, 2.0])
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), help="only these (of the half)")
    ap.add_argument("--no-shares", action="store_true", help="only the levels (no refits at other shares)")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    args = ap.parse_args(argv)
    mi, code, t0 = machine_info(), code_version(), time.perf_counter()
    names = [d for d in args.datasets or DATASETS if half(d) == args.half]
    base_runs = run_half(names, args.mus, args.seeds, record=True)
    shares = [share_row(f"as in the code (SCORE_SHARE {verdict.SCORE_SHARE:g}, EXCESS_SHARE "
                        f"{clipping_bias.EXCESS_SHARE:g})", base_runs, base_runs)]
    if not args.no_shares:
        for name, values in SHARES.items():
            for value in values:
                with share(name, value):
                    shares.append(share_row(f"{name} {value:g}", run_half(names, args.mus, args.seeds, False),
                                            base_runs))
    command = " ".join(["python benchmarks/bench_constants.py", *(argv if argv is not None else sys.argv[1:])])
    heading = HEADING.format(half=args.half)
    text = "\n".join([
        heading, "", f"- Date: {mi['date']}; machine: {mi['model']}, {mi['cpus']} CPU(s); load at start {mi['load']}",
        f"- Code: privfedstat at {code}; run: `{command}` ({len(names)} data sets, "
        f"{time.perf_counter() - t0:.0f} s wall)", "",
        "| setting | fits withheld | hold | width (median / mean, MLE SEs) | RMS z | coefficients moved |",
        "|---|---:|---:|---|---:|---:|", *shares, "",
        f"The fits' own tests at other levels ({len(base_runs)} fits at the code's constants):", "",
        *level_lines(base_runs), ""])
    print(text)
    if not args.no_write:
        update_results(text.rstrip(), heading)


if __name__ == "__main__":
    main()
