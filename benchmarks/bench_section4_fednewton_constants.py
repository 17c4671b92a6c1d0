"""FedNewton's chosen constants on designs not used to choose them (issue 41).

``HESSIAN_SHARE`` (15% of mu^2 for the Hessian release), ``RESEARCH_SHARE`` (5% for the re-search of C_H) and
``MIN_RELEASED_FLOOR`` (1% of ell''(0)) were chosen on the Fig. 5 / Fig. 16 designs. Here each is varied
around its value, one at a time, on held-out designs (other coefficients, covariate scale, dimension, sizes),
every variant fitted on the same data and seeds (paired); printed: mean MSE +- SE and the paired difference to
the package's value. Usage: ``python benchmarks/bench_section4_fednewton_constants.py --reps 10``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from privfedstat import AutoClip, FedNewton
from privfedstat.privacy import calibration, newton_policy
from privfedstat.simulations import GLMDesign

#: held-out designs: (label, design, client sizes)
DESIGNS = [
    ("logistic d=4, beta (1, -1, 0.5, 0.25), sigma_c 0.7, m=100 x 100",
     GLMDesign("logistic", beta=(1.0, -1.0, 0.5, 0.25), sigma_c=0.7), [100] * 100),
    ("logistic d=6, beta 0.3 alternating, m=50 x 300", GLMDesign("logistic", beta=(0.3, -0.3, 0.3, -0.3, 0.3, -0.3)),
     [300] * 50),
    ("poisson d=3, beta (0.2, 0.4, -0.4), m=100 x 100", GLMDesign("poisson", beta=(0.2, 0.4, -0.4)), [100] * 100),
]
#: (module, constant, values tried; the first is the package's)
CONSTANTS = [(calibration, "HESSIAN_SHARE", (0.15, 0.05, 0.30)), (calibration, "RESEARCH_SHARE", (0.05, 0.02, 0.10)),
             (newton_policy, "MIN_RELEASED_FLOOR", (0.01, 0.001, 0.05))]


def run(reps: int) -> None:
    for label, design, sizes in DESIGNS:
        print(f"\n{label}, mu = 2, clip AutoClip(), eta 0.5, K = 50, {reps} paired replicates")
        data = [design.sample(sizes, np.random.default_rng(100 + r)) for r in range(reps)]
        for module, name, values in CONSTANTS:
            keep = getattr(module, name)
            mse = {}
            for v in values:
                setattr(module, name, v)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        mse[v] = np.array([FedNewton(family=design.family, clip=AutoClip(), step_size=0.5,
                                                     inference=None, random_state=r).fit(X).mse(design.beta_true)
                                           for r, X in enumerate(data)])
                finally:
                    setattr(module, name, keep)
            base = mse[values[0]]
            cells = [f"{v:g}: {m.mean():.4g} +- {m.std() / np.sqrt(reps):.2g}"
                     + ("" if v == values[0] else f" (diff {np.mean(m - base):+.2g} +- "
                        f"{np.std(m - base, ddof=1) / np.sqrt(reps):.2g})") for v, m in mse.items()]
            print(f"  {name}: " + "; ".join(cells))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    t0 = time.perf_counter()
    run(args.reps)
    print(f"\n{time.perf_counter() - t0:.0f} s")
