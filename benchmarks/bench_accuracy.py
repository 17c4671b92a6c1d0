"""Accuracy on real data with default settings: every registered method against the pooled MLE (issue 9).

What a new user gets: bundled real data sets (statsmodels, scikit-learn; nothing is downloaded),
rows split at random into equal sites, and ``privfedstat.glm(formula, df, client="site",
family=..., method=..., mu=..., random_state=seed)`` with every other setting left at its default.
Every registered method (``privfedstat.algorithms.registry.methods()``; a newly registered one
joins automatically) is fitted at mu in {inf, 2, 1} if it is private and at mu = inf otherwise.

Measured per fit, against statsmodels' pooled MLE ``theta_hat`` and its standard errors on the same
design matrix (formulaic, as ``glm()`` builds it; ``GLM`` for logistic / Poisson, ``MNLogit`` for
multinomial):

* SE distance ``max_j |coef_j - theta_hat_j| / SE_j(theta_hat)`` (over all d (K - 1) entries for
  multinomial), summarised by its median and maximum over seeds; a seed changes both the split
  into sites and the privacy noise;
* whether the fit warned with a warning that says why: a warning class of privfedstat
  (ConvergenceWarning, ...) or a UserWarning raised from privfedstat's code (numpy's
  RuntimeWarnings are listed but do not count); an exception is recorded, not raised;
* silent failures: fits further than 5 SE from the MLE that neither warned nor raised;
* wall time of the ``glm()`` call.

The targets of issue 9 are checked and summarised at the top of the section. Run by hand::

    python benchmarks/bench_accuracy.py                      # 10 seeds, all data sets: writes RESULTS.md
    python benchmarks/bench_accuracy.py --quick              # 2 seeds, prints only (smoke test)
    python benchmarks/bench_accuracy.py --datasets fair randhie --methods fedsgd fedavg --seeds 5 --no-write

The section "## Accuracy on real data (benchmarks/bench_accuracy.py)" of RESULTS.md is replaced on
each writing run; the other sections are kept.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import machine_info, update_results  # noqa: E402

import privfedstat  # noqa: E402
from privfedstat.algorithms.registry import methods  # noqa: E402
from privfedstat.exceptions import ConvergenceWarning  # noqa: E402

HEADING = "## Accuracy on real data (benchmarks/bench_accuracy.py)"
INF = float("inf")
MUS = (INF, 2.0, 1.0)
FAR_SE = 5.0  # "no silent failure": a fit further than this from the MLE must warn
PKG_DIR = str(Path(privfedstat.__file__).resolve().parent)
DEFAULT_METHOD = "fedirls"  # glm()'s method when none is given and no penalty (method=None)


# --------------------------------------------------------------------------- data sets
@dataclass(frozen=True)
class Dataset:
    """A bundled real data set, the model fitted to it and how many sites its rows are split over."""

    name: str
    family: str
    formula: str
    n_sites: int
    source: str
    load: Callable[[], pd.DataFrame]


def _statsmodels(name: str) -> pd.DataFrame:
    import statsmodels.api as sm

    return getattr(sm.datasets, name).load_pandas().data.copy()


def _fair() -> pd.DataFrame:
    df = _statsmodels("fair")
    return df.assign(affair=(df["affairs"] > 0).astype(float))


def _sklearn(name: str) -> pd.DataFrame:
    from sklearn import datasets

    df = getattr(datasets, f"load_{name}")(as_frame=True).frame
    return df.rename(columns=lambda c: c.replace(" ", "_"))


def _breast_cancer() -> pd.DataFrame:
    df = _sklearn("breast_cancer")
    return df.assign(malignant=1.0 - df["target"])  # sklearn codes malignant as 0


_MEAN_FEATURES = ("radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity",
                  "concave_points", "symmetry", "fractal_dimension")
_ANES = "logpopul + selfLR + age + educ + income"

DATASETS = {d.name: d for d in (
    Dataset("fair", "logistic", "affair ~ rate_marriage + age + yrs_married + children + religious + educ"
            " + occupation + occupation_husb", 10, "statsmodels `fair` (affairs > 0)", _fair),
    Dataset("randhie", "poisson", "mdvis ~ lncoins + idp + lpi + fmde + physlm + disea + hlthg + hlthf + hlthp",
            20, "statsmodels `randhie`", lambda: _statsmodels("randhie")),
    Dataset("anes96-tvnews", "poisson", f"TVnews ~ {_ANES}", 10, "statsmodels `anes96` (days of TV news)",
            lambda: _statsmodels("anes96")),
    Dataset("anes96-pid", "multinomial", f"PID ~ {_ANES}", 10, "statsmodels `anes96` (party id, 7 classes)",
            lambda: _statsmodels("anes96")),
    Dataset("breast-cancer", "logistic", "malignant ~ " + " + ".join(f"mean_{f}" for f in _MEAN_FEATURES), 5,
            "scikit-learn `breast_cancer` (10 `mean_*` features; strongly collinear)", _breast_cancer),
    Dataset("wine", "multinomial", "target ~ ash + alcalinity_of_ash + magnesium + total_phenols", 5,
            "scikit-learn `wine` (3 cultivars; 4 features, so that the MLE exists)", lambda: _sklearn("wine")),
    Dataset("spector", "logistic", "GRADE ~ GPA + TUCE + PSI", 5,
            "statsmodels `spector` (tiny sites: only the no-silent-failure target applies)",
            lambda: _statsmodels("spector")),
)}


#: declared classes of the multinomial responses, from the data sets' codebooks
CLASSES = {"anes96-pid": {"PID": list(range(7))}, "wine": {"target": [0, 1, 2]}}


@dataclass(frozen=True)
class Reference:
    """The pooled MLE ``theta_hat`` and its standard errors, of shape (d,) or (d, K - 1)."""

    names: list[str]
    coef: np.ndarray
    se: np.ndarray
    n_rows: int


@cache
def load(name: str) -> pd.DataFrame:
    return DATASETS[name].load()


@cache
def pooled_mle(name: str) -> Reference:
    """statsmodels' pooled MLE on the design matrix that ``glm()`` builds (formulaic); raises if it failed."""
    import statsmodels.api as sm
    from formulaic import model_matrix

    ds = DATASETS[name]
    mm = model_matrix(ds.formula, load(name))
    X, y = np.asarray(mm.rhs, dtype=float), np.asarray(mm.lhs, dtype=float).ravel()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a separation or convergence warning means no usable reference
        if ds.family == "multinomial":
            res = sm.MNLogit(y, X).fit(method="newton", maxiter=100, disp=0)
            ok = res.mle_retvals["converged"]
        else:
            fam = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson()}[ds.family]
            res = sm.GLM(y, X, family=fam).fit()
            ok = res.converged
    if not ok:
        raise RuntimeError(f"{name}: statsmodels' pooled MLE did not converge; no reference.")
    return Reference(list(mm.rhs.columns), np.asarray(res.params), np.asarray(res.bse), len(y))


def site_labels(n_rows: int, n_sites: int, name: str, seed: int) -> np.ndarray:
    """Equal random split: row i goes to site ``perm[i] mod n_sites`` (sizes differ by at most one)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return rng.permutation(n_rows) % n_sites


# --------------------------------------------------------------------------- one fit
def se_distance(est, ref: Reference) -> float:
    """``max_j |coef_j - theta_hat_j| / SE_j``, matching coefficients by column name (inf if any is not finite)."""
    names = list(getattr(est, "feature_names_in_", ref.names))
    if sorted(names) != sorted(ref.names):
        raise ValueError(f"design columns {names} differ from the reference's {ref.names}")
    coef = np.asarray(est.coef_)[[names.index(n) for n in ref.names]]
    if coef.shape != ref.coef.shape:
        raise ValueError(f"coef_ of shape {coef.shape}, reference of shape {ref.coef.shape}")
    dist = float(np.max(np.abs(coef - ref.coef) / ref.se))
    return dist if np.isfinite(dist) else INF  # non-finite coefficients are the farthest of failures


def _shorten(message: str, width: int = 110) -> str:
    """First line of ``message``, cut at a word boundary, safe inside a markdown table."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    if len(line) > width:
        line = line[:width].rsplit(" ", 1)[0] + " ..."
    return line.replace("|", "/")


def _says_why(w: warnings.WarningMessage) -> bool:
    """A warning of privfedstat's own (its classes, or a UserWarning raised in its code)."""
    cat = w.category
    return cat.__module__.startswith("privfedstat") or (
        issubclass(cat, UserWarning) and str(Path(w.filename).resolve()).startswith(PKG_DIR))


_WARM: set[tuple] = set()  # (family, method, private) already run in this process


def fit_one(name: str, method: str, mu: float, seed: int) -> dict:
    """Fit one (data set, method, mu, seed) through ``glm()`` with default settings; never raises."""
    ds, ref = DATASETS[name], pooled_mle(name)
    df = load(name).assign(site=site_labels(ref.n_rows, ds.n_sites, name, seed))

    # the classes of a multinomial response are public (the codebook), declared as glm() requires
    extra = {"levels": CLASSES[name]} if name in CLASSES else {}

    def fit():
        return privfedstat.glm(ds.formula, df, client="site", family=ds.family, method=method, mu=mu,
                               random_state=seed, **extra)

    if (ds.family, method, mu < INF) not in _WARM:  # loading numba's cache is not part of the timing
        _WARM.add((ds.family, method, mu < INF))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                fit()
            except Exception:  # reported by the timed fit below
                pass
    row = {"dataset": name, "method": method, "mu": mu, "seed": seed, "distance": np.nan, "error": ""}
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            est = fit()
            row["seconds"] = time.perf_counter() - t0
            row["distance"] = se_distance(est, ref)
        except Exception as exc:  # a method that errors is a finding, not a crash
            row.setdefault("seconds", time.perf_counter() - t0)
            row["error"] = f"{type(exc).__name__}: {_shorten(str(exc))}"
    row["warned"] = any(_says_why(w) for w in caught)
    row["convergence_warning"] = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    row["warnings"] = ";".join(sorted({w.category.__name__ for w in caught}))
    return row


def _fit_chunk(tasks: list[tuple], bench_dir: str) -> list[dict]:
    """Worker: fits by the importable module (this script may run as ``__main__``), numba on 1 thread."""
    import numba

    sys.path.insert(0, bench_dir)
    from bench_accuracy import fit_one as fit

    numba.set_num_threads(1)
    return [fit(*t) for t in tasks]


def run_fits(tasks: list[tuple], jobs: int) -> pd.DataFrame:
    from tqdm import tqdm

    if jobs == 1:
        return pd.DataFrame([fit_one(*t) for t in tqdm(tasks, desc="fits", unit="fit")])
    from joblib import Parallel, delayed

    size = -(-len(tasks) // (8 * jobs))  # contiguous chunks keep the task order
    chunks = [tasks[i:i + size] for i in range(0, len(tasks), size)]
    here = str(Path(__file__).resolve().parent)
    out = Parallel(n_jobs=jobs, return_as="generator")(delayed(_fit_chunk)(c, here) for c in chunks)
    rows = [r for part in tqdm(out, total=len(chunks), desc="chunks of fits") for r in part]
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- summaries
def _mu(mu: float) -> str:
    return "inf" if mu == INF else f"{mu:g}"


def _num(x: float) -> str:
    if not np.isfinite(x):
        return "-" if np.isnan(x) else "inf"
    return f"{x:.2g}" if abs(x) < 10 else f"{x:.3g}" if abs(x) < 1e4 else f"{x:.1e}"


def cell_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (data set, method, mu): medians and counts over seeds."""
    def agg(g: pd.DataFrame) -> pd.Series:
        d = g["distance"]
        far = d > FAR_SE
        kinds = Counter(k for s in g["warnings"] for k in s.split(";") if k)
        errors = sorted(set(e for e in g["error"] if e))
        return pd.Series({
            "n": len(g), "median_se": d.median(), "max_se": d.max(), "warned": g["warned"].mean(),
            "silent": int((far & ~g["warned"]).sum()), "errors": int((g["error"] != "").sum()),
            "seconds": g["seconds"].median(),
            "notes": "; ".join([f"{k} x{v}" for k, v in sorted(kinds.items())] + errors[:2]),
        })
    return runs.groupby(["dataset", "method", "mu"], sort=False)[list(runs.columns)].apply(agg).reset_index()


def targets(runs: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """The issue-9 targets as a markdown table (one row each, with the numbers behind the verdict)."""
    rows = []
    sizes = {n: DATASETS[n].n_sites for n in cells["dataset"].unique()}
    rows_per_site = {n: pooled_mle(n).n_rows // sizes[n] for n in sizes}
    default = cells[cells["method"] == DEFAULT_METHOD]

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else "**met**" if ok else "**missed**"

    d = default[(default["mu"] == INF) & default["dataset"].map(lambda n: rows_per_site[n] >= 30)]
    rows.append((f"mu = inf: default `{DEFAULT_METHOD}` within 0.1 SE (median over seeds) on every data set "
                 "with >= 30 rows per site",
                 ", ".join(f"{r.dataset} {_num(r.median_se)}" for r in d.itertuples()),
                 verdict(None if d.empty else bool((d["median_se"] <= 0.1).all()))))
    inf = runs[(runs["mu"] == INF)]
    bad = inf[~(inf["distance"] <= 0.5) & ~inf["convergence_warning"] & (inf["error"] == "")]
    by = bad.groupby("method")["dataset"].agg(lambda s: ", ".join(sorted(set(s)))).to_dict() if len(bad) else {}
    rows.append(("mu = inf: every fit within 0.5 SE or a ConvergenceWarning (or an error)",
                 f"{len(bad)} of {len(inf)} fits neither: " + "; ".join(f"{m} ({v})" for m, v in by.items())
                 if len(bad) else f"all {len(inf)} fits", verdict(None if inf.empty else bad.empty)))
    big = [n for n in sizes if pooled_mle(n).n_rows >= 5000 and sizes[n] <= 20]
    d = default[(default["mu"] == 2.0) & default["dataset"].isin(big)]
    rows.append((f"mu = 2: default `{DEFAULT_METHOD}` within 2 SE on data sets with N >= 5000 over <= 20 sites",
                 ", ".join(f"{r.dataset} {_num(r.median_se)}" for r in d.itertuples()),
                 verdict(None if d.empty else bool((d["median_se"] <= 2).all()))))
    silent = runs[(runs["distance"] > FAR_SE) & ~runs["warned"]]
    far = runs[runs["distance"] > FAR_SE]
    rows.append((f"no silent failure: every fit further than {FAR_SE:g} SE warned or raised",
                 f"{len(silent)} of {len(far)} such fits silent (of {len(runs)} fits)", verdict(silent.empty)))
    pooled = runs[(runs["method"] == "pooled") & (runs["mu"] == INF)]
    if len(pooled):
        worst = pooled["distance"].max()
        n_err = int((pooled["error"] != "").sum())
        rows.append(("check of the yardstick: `pooled` (NP-Pooled MLE) vs statsmodels, max SE distance",
                     f"{_num(worst)}" + (f", {n_err} fits raised" if n_err else ""),
                     verdict(bool(worst < 1e-3) and not n_err)))
    return ["| target | measured | verdict |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]


def dataset_section(name: str, cells: pd.DataFrame) -> list[str]:
    ds, ref = DATASETS[name], pooled_mle(name)
    k = "" if ref.coef.ndim == 1 else f" x {ref.coef.shape[1]} (K - 1)"
    lines = [f"### {name}: {ds.family}, N = {ref.n_rows} over {ds.n_sites} sites "
             f"({ref.n_rows // ds.n_sites}-{-(-ref.n_rows // ds.n_sites)} rows each), d = {len(ref.names)}{k}", "",
             f"{ds.source}; `{ds.formula}`. For scale: theta = 0 lies "
             f"{_num(float(np.max(np.abs(ref.coef) / ref.se)))} SE from the MLE.", "",
             "| method | mu | median SE dist | max SE dist | warned | silent > 5 SE | errors | median s | warnings / errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in cells[cells["dataset"] == name].itertuples():
        label = f"**{r.method}** (default)" if r.method == DEFAULT_METHOD else r.method
        lines.append(f"| {label} | {_mu(r.mu)} | {_num(r.median_se)} | {_num(r.max_se)} | {r.warned:.0%} | "
                     f"{r.silent} | {r.errors} | {r.seconds:.3f} | {r.notes} |")
    return lines + [""]


def section(runs: pd.DataFrame, cells: pd.DataFrame, args, mi: dict, wall: float) -> str:
    names = list(dict.fromkeys(cells["dataset"]))
    lines = [HEADING, "", f"- Date: {mi['date']}",
             f"- Machine: {mi['model']}, {mi['cpus']} CPU(s); Python {mi['python']}, numpy {mi['numpy']}, "
             f"numba {mi['numba']}, privfedstat {getattr(privfedstat, '__version__', '?')}; "
             f"load average at start {mi['load']}",
             f"- Code: privfedstat at {code_version()}",
             f"- Run: `python benchmarks/bench_accuracy.py {' '.join(sys.argv[1:])}`".rstrip() +
             f" ({len(runs)} fits, {args.seeds} seeds, {args.jobs} worker(s), {wall:.0f} s wall)",
             "- Every method through `privfedstat.glm(formula, df, client='site', family=..., method=..., mu=..., "
             "random_state=seed)`, all other settings default; rows split at random into equal sites (the split "
             "changes with the seed). SE distance = max_j |coef_j - MLE_j| / SE_j(MLE), MLE and SE from "
             "statsmodels (GLM / MNLogit) on the same design matrix. *warned*: fraction of fits with a "
             "privfedstat warning (ConvergenceWarning, ...; numpy RuntimeWarnings do not count); *silent*: fits "
             f"> {FAR_SE:g} SE that did not warn; times are the median wall time of one `glm()` call.",
             "", "### Targets (issue 9)", ""]
    lines += targets(runs, cells) + [""]
    for name in names:
        lines += dataset_section(name, cells)
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- main
def code_version() -> str:
    """The git commit privfedstat was imported from (``-dirty`` if the package has local edits), or, outside a git
    checkout, the folder (an installed copy): a checkout's path says nothing to a reader of RESULTS.md."""
    import subprocess

    root = Path(PKG_DIR).parent

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()

    rev = git("rev-parse", "--short", "HEAD")
    if not rev:
        return f"`{root}` (not a git checkout)"
    return f"commit {rev}" + ("-dirty" if git("status", "--porcelain", "--", "privfedstat") else "")


def main(argv: list[str] | None = None) -> None:
    names = [s.name for s in methods()]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds per cell (median over them; >= 5 for RESULTS.md)")
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    ap.add_argument("--methods", nargs="+", choices=names, default=names)
    ap.add_argument("--mus", nargs="+", type=float, default=list(MUS), help="budgets for private methods")
    ap.add_argument("--jobs", type=int, default=1, help="joblib workers (numba 1 thread each)")
    ap.add_argument("--quick", action="store_true", help="2 seeds, print only (smoke test)")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    ap.add_argument("--csv", type=Path, help="also write every fit (one row each) to this CSV")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds = 2
    write = not (args.quick or args.no_write)
    if write and args.seeds < 5:
        ap.error("RESULTS.md needs >= 5 seeds (use --no-write for fewer)")
    mi = machine_info()
    private = {s.name: s.private for s in methods()}
    tasks = [(d, m, mu, seed) for d in args.datasets for m in args.methods
             for mu in (args.mus if private[m] else [INF]) for seed in range(args.seeds)]
    for d in args.datasets:
        pooled_mle(d)  # fail fast if a reference is unusable
    t0 = time.perf_counter()
    runs = run_fits(tasks, args.jobs)
    wall = time.perf_counter() - t0
    if args.csv:
        runs.to_csv(args.csv, index=False)
    text = section(runs, cell_table(runs), args, mi, wall)
    print(text)
    if write:
        update_results(text.rstrip(), HEADING)


if __name__ == "__main__":
    main()
