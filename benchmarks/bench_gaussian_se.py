"""Gaussian fits: the model-based standard errors (the default, statsmodels' default) against the sandwich (HC0).

A private Gaussian fit's model-based covariance is ``scale * H^-1 / N`` with the residual variance released as a
capped private sum; the sandwich releases a second matrix (the clipped score outer products). This measures, over
replicates of simulated data (N rows over 10 sites, ``x1`` normal, ``x2`` exponential, errors of sd 2 that are
homoscedastic or grow with |x1|), the SD of the estimates, the median reported SE, the replicate-to-replicate
coefficient of variation of the reported SE and the coverage of the truth by 95% intervals, for both cov_types at
the same fits' noise seeds (benchmarks/RESULTS.md, "Gaussian standard errors").

    python benchmarks/bench_gaussian_se.py --reps 60 [--mu 2] [--n 4000]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd

import privfedstat as pfs

BETA = np.array([1.0, 0.5, -0.3])


def replicate(rep: int, n: int, mu: float, heteroscedastic: bool) -> dict[str, np.ndarray]:
    """One data set and a fit per cov_type: (estimate, SE) stacked, per cov_type."""
    rng = np.random.default_rng(rep)
    df = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.exponential(size=n)})
    sd = 2.0 * ((0.3 + np.abs(df["x1"])) if heteroscedastic else 1.0)
    df["y"] = BETA[0] + BETA[1] * df["x1"] + BETA[2] * df["x2"] + rng.normal(size=n) * sd
    df["site"] = rng.integers(0, 10, n)
    out = {}
    for cov in ("model", "sandwich"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = pfs.glm("y ~ x1 + x2", df, client="site", family="gaussian", mu=mu, random_state=rep, inference=cov)
        out[cov] = np.r_[f.coef_, f.bse_]
    return out


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--mu", type=float, default=2.0)
    parser.add_argument("--n", type=int, default=4000)
    args = parser.parse_args(argv)
    rows = []
    for het in (False, True):
        runs = [replicate(r, args.n, args.mu, het) for r in range(args.reps)]
        for cov in ("model", "sandwich"):
            r = np.array([run[cov] for run in runs])
            est, se = r[:, :3], r[:, 3:]
            for j, term in enumerate(["Intercept", "x1", "x2"]):
                rows.append({"errors": "heteroscedastic" if het else "homoscedastic", "cov_type": cov, "term": term,
                             "sd(estimates)": est[:, j].std(ddof=1), "median SE": np.nanmedian(se[:, j]),
                             "CV of SE": np.nanstd(se[:, j]) / np.nanmean(se[:, j]),
                             "coverage": np.mean(np.abs(est[:, j] - BETA[j]) <= 1.96 * se[:, j]),
                             "NaN SEs": int(np.isnan(se[:, j]).sum())})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format="{:.4g}".format))
    return table


if __name__ == "__main__":
    main()
