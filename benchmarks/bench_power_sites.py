"""plan_study on sites of unequal size: the planned SE next to the SEs of default private fits (FedIRLS's site weights).

Logistic (or ``--family poisson``), covariates (1, N(0, 1), Bernoulli(0.4)), ``coef = (-0.5, 0.3, 0.4)``; the plan
reads a public sample of 20000 rows of that law, and ``reps`` default fits (``weights="optimal"`` unless asked
otherwise) run on fresh data drawn from it. Per coefficient: the planned SE, the median SE the fits report and the RMS
of their error about ``coef``; the plan's refine bound B and the fits' median. Prints only (benchmarks/RESULTS.md,
"plan_study under the site weights").

    python benchmarks/bench_power_sites.py --reps 20 [--family poisson] [--weights size] [--designs "1x5000+100x10"]
        [--mus 8 2 1]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import privfedstat as pfs
from privfedstat import FederatedData, FedIRLS, PrivateStandardize

NAMES = ["Intercept", "x1", "x2"]
COEF = (-0.5, 0.3, 0.4)
DESIGNS = {"2x3000+30x50": np.array([3000] * 2 + [50] * 30),
           "10 sites 200-3000": np.round(np.geomspace(200, 3000, 10)).astype(int),
           "1x5000+100x10": np.array([5000] + [10] * 100), "2x1000+40x25": np.array([1000] * 2 + [25] * 40)}


def rows(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.column_stack([np.ones(n), rng.standard_normal(n), (rng.random(n) < 0.4).astype(float)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--family", default="logistic", choices=["logistic", "poisson"])
    parser.add_argument("--weights", default="optimal")
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    parser.add_argument("--mus", nargs="+", type=float, default=[8.0, 2.0, 1.0])
    args = parser.parse_args()
    design = rows(20_000, np.random.default_rng(0))
    for name in args.designs:
        sizes = DESIGNS[name]
        for mu in args.mus:
            start = time.time()
            plan = pfs.plan_study(design, COEF, family=args.family, sizes=sizes, mu=mu, names=NAMES, weights=args.weights)
            rng, coefs, ses, clips = np.random.default_rng(7), [], [], []
            est = FedIRLS(family=args.family, mu=mu, scaling=PrivateStandardize(intercept=0), weights=args.weights)
            for r in range(args.reps):
                X = rows(int(sizes.sum()), rng)
                y = pfs.get_family(args.family).simulate(X @ np.asarray(COEF), rng, 1.0)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.set_params(random_state=r).fit(FederatedData.from_pooled(
                        X, y, clients=np.repeat(np.arange(sizes.size), sizes)))
                coefs.append(est.coef_)
                ses.append(np.ravel(est.bse_))
                clips.append(est.clip_)
            se, median = plan.frame["se"].to_numpy(), np.nanmedian(ses, axis=0)
            rms = np.sqrt(np.mean((np.array(coefs) - np.asarray(COEF)) ** 2, axis=0))
            print(f"{name:18s} mu={mu:g} ({time.time() - start:.0f} s) B plan {plan.settings['B']}, fits' median "
                  f"{np.median(clips):.3g}; privacy share {np.round(plan.frame['privacy_share'].to_numpy(), 2)}")
            print(f"   planned SE {np.round(se, 4)}  fits' median SE {np.round(median, 4)}  plan/median "
                  f"{np.round(se / median, 3)}  plan/RMS {np.round(se / rms, 3)}", flush=True)


if __name__ == "__main__":
    main()
