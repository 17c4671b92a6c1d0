"""Clipping bias on Gaussian responses: which fits miss OLS, which warn, and the residuals' sign score.

The stress designs of ``tests/estimators/test_fedirls_stress.py`` (a skewed response, a contaminated point mass,
one gross value; N = 3000 over 10 sites) and benign ones with symmetric errors (normal, t3, Laplace) and binary or
count responses (logistic, Poisson), default ``glm("y ~ x1 + x2")`` fits at each mu. Per fit: the largest distance
from OLS / the MLE in its standard errors, whether an interval misses it, the ClippingBiasWarnings (the sign score's
"residuals are asymmetric" apart) and the sign score's largest |z| (docs/guide/clipping-bias.md; benchmarks/RESULTS.md,
"Residual sign score").

    python benchmarks/bench_clipping_signs.py --seeds 4 --mus 2 8 [--designs skewed contaminated gross normal]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf

import privfedstat as pfs

DESIGNS = ("skewed", "contaminated", "gross", "normal", "t3", "laplace", "logistic", "poisson")
N, SITES = 3000, 10


def design(kind: str, seed: int) -> tuple[pd.DataFrame, str]:
    """A data set and its family: the stress designs as the tests draw them, the benign ones from seed 100 + seed."""
    rng = np.random.default_rng(seed if kind in ("skewed", "contaminated", "gross") else 100 + seed)
    x1, x2 = rng.normal(size=N), rng.normal(size=N)
    eta, family = 1 + 0.5 * x1 + 0.3 * x2, "gaussian"
    if kind == "skewed":
        y = np.exp(eta + rng.normal(size=N))
    elif kind == "contaminated":
        y = np.where(rng.random(N) < 0.05, rng.normal(10, 1, N), 3.7)
    elif kind == "gross":
        y = eta + rng.normal(size=N)
        y[rng.integers(N)] = 100.0
    elif kind in ("normal", "t3", "laplace"):
        y = eta + {"normal": rng.normal, "t3": lambda size: rng.standard_t(3, size=size), "laplace": rng.laplace}[kind](
            size=N)
    elif kind == "logistic":
        y, family = (rng.random(N) < 1 / (1 + np.exp(-(-0.5 + 0.8 * x1 - 0.5 * x2)))).astype(float), "logistic"
    else:
        y, family = rng.poisson(np.exp(0.3 * eta)).astype(float), "poisson"
    return pd.DataFrame(dict(y=y, x1=x1, x2=x2, site=np.arange(N) % SITES)), family


def fit_one(kind: str, mu: float, seed: int) -> dict:
    df, family = design(kind, seed)
    ref = (smf.ols if family == "gaussian" else smf.logit if family == "logistic" else smf.poisson)("y ~ x1 + x2", df)
    ref = ref.fit() if family == "gaussian" else ref.fit(disp=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = pfs.glm("y ~ x1 + x2", df, client="site", family=family, mu=mu, random_state=seed)
    names = list(est.feature_names_in_)
    lo, hi = np.asarray(est.conf_int()).T
    point = ref.params[names].to_numpy()
    texts = [str(w.message) for w in caught if issubclass(w.category, pfs.ClippingBiasWarning)]
    signs = est.inference_.sign_balance
    return {"design": kind, "mu": mu, "seed": seed,
            "max_z": float(np.max(np.abs(np.ravel(est.coef_) - point) / ref.bse[names].to_numpy())),
            "missed": bool(np.any((point < lo) | (point > hi))),
            "asymmetric": any("residuals are asymmetric" in t for t in texts),
            "other": sum("residuals are asymmetric" not in t for t in texts),
            "sign_z": np.nan if signs is None else float(np.max(np.abs(signs.in_sds)))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--mus", nargs="+", type=float, default=[2.0, 8.0])
    ap.add_argument("--designs", nargs="+", choices=DESIGNS, default=list(DESIGNS))
    args = ap.parse_args(argv)
    runs = pd.DataFrame([fit_one(k, mu, s) for k in args.designs for mu in args.mus for s in range(args.seeds)])
    table = runs.groupby(["design", "mu"], sort=False).agg(
        fits=("seed", "size"), missed=("missed", "sum"), max_z=("max_z", "max"), asymmetric=("asymmetric", "sum"),
        other_warnings=("other", "sum"), missed_silently=("missed", lambda m: int(np.sum(
            m & ~runs.loc[m.index, "asymmetric"] & (runs.loc[m.index, "other"] == 0)))),
        sign_z_max=("sign_z", "max"))
    print("| design | mu | " + " | ".join(table.columns) + " |")
    print("|---|---:|" + "---:|" * len(table.columns))
    for (kind, mu), row in table.iterrows():
        print(f"| {kind} | {mu:g} | " + " | ".join(f"{v:.3g}" for v in row) + " |")


if __name__ == "__main__":
    main()
