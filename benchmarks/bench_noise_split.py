"""Is a private fit's miss noise beyond its stated privacy covariance, or the bias of the clipped root?

Each default ``glm()`` fit of ``bench_natural_sites.py`` (same data sets, sites, seeds) solves, privately, the clipped
estimating equation of its last rounds, ``sum_i w_i mean_j clip_B(g_j(phi)) = 0`` with the bound B those rounds used,
in the coordinates phi they ran in (the whitened rows of the refine rounds). Its root -- the point the fit would return
without noise, with the same bounds, scaling and whitening -- is found here after the fit by Newton's method on exact
aggregates of the same session (``mu = inf`` queries of the clients, a diagnostic nothing private could do), and the
deviation from statsmodels' MLE is split in units of the fit's stated privacy sd ``sqrt(diag(cov_protocol))`` (privacy
noise and path remainder):

* ``z`` = (coef - MLE) / sd, the benchmark's RMS z;
* ``z_noise`` = (coef - root) / sd: what the privacy covariance describes (RMS 1 when the noise model is right);
* ``z_bias`` = (root - MLE) / sd: the clipped root's displacement (the bias of the bounds, not noise).

Columns per (data set, mu), over seeds: RMS of each (all coefficients); ``worst bias``: the largest |mean z_bias| of a
coefficient over the seeds (its sign is stable where it is bias); ``miss MLE`` / ``miss root``: fits with an interval
missing the MLE / the root, next to what an exact noise model expects for either (interval j misses a fixed point at
distance 0 with probability ``2 (1 - Phi(1.96 sqrt(cov_jj) / sd_j))``).

``--per-coef`` adds one row per coefficient (statsmodels' names): the RMS of each part and the mean of ``z_bias`` over
the seeds, next to the 95% band of the RMS of ``seeds`` standard normals, ``sqrt(chi2_(seeds, q) / seeds)``, that an
exact noise model puts ``z_noise`` in.

``--bound-factors f ...`` finds the roots with the refine bound B times each f too (the same session, rows and
basis): per coefficient the mean z_bias(f) (in units of the privacy sd at B), and per cell what a fit clipped at f B
would show with its noise scaled by f (``bound_curve``): the bias / noise trade-off of the refine bound, measured.

Run by hand (prints a markdown table; nothing is written)::

    nice python benchmarks/bench_noise_split.py --seeds 8 --datasets arrests nasscds nesarc --mus 2
    nice python benchmarks/bench_noise_split.py --seeds 20 --datasets arrests default --mus 2 --per-coef
    nice python benchmarks/bench_noise_split.py --seeds 8 --datasets countymurders --mus 1 3 --aggregation secure
    nice python benchmarks/bench_noise_split.py --seeds 8 --datasets nesarc rwm5yr --mus 2 --per-coef \
        --bound-factors 0.8 1.245 1.55 1.93
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_natural_sites import _mu, with_sites  # noqa: E402
from natural_sites_data import DATASETS, half, reference  # noqa: E402

import privfedstat  # noqa: E402
from privfedstat._linalg import vec_to_sym  # noqa: E402
from privfedstat.algorithms.fedirls import FedIRLS  # noqa: E402
from privfedstat.inference.covariance import original_scale_map  # noqa: E402

Z975 = NormalDist().inv_cdf(0.975)


def clipped_root(session, run, setup, factor: float = 1.0) -> np.ndarray | None:
    """The root of the last rounds' clipped estimating equation, in the coordinates they ran in, from ``run.theta``
    (theta), with their gradient bound times ``factor``; None where Newton's method does not reach it (a singular
    Jacobian: every row clipped along a direction)."""
    bounds = run.setup or setup
    change = run.basis
    P = np.eye(run.theta.size) if change is None else change.parameters(run.theta.size)
    phi, B, w, p = np.linalg.solve(P, run.theta), factor * bounds.clip, run.weights, session.clients.n_params
    with session.rows_mapped(change):
        for _ in range(50):
            g = session.mean("gradients", weights=w, theta=phi, clip=B, sensitivity=2.0 * B / session.sizes,
                             mu=math.inf, stage="diagnostic")
            J = vec_to_sym(session.mean("hessians", weights=w, theta=phi, hessian_clip=math.inf, gradient_clip=B,
                                        sensitivity=np.zeros(session.sizes.size), mu=math.inf, stage="diagnostic"), p)
            try:
                step = np.linalg.solve(J, g)
            except np.linalg.LinAlgError:
                return None
            phi = phi - step
            if float(np.max(np.abs(step))) < 1e-12 * (1.0 + float(np.max(np.abs(phi)))):
                return P @ phi
    return None


def split_one(name: str, mu: float, seed: int, aggregation: str = "local", factors: tuple[float, ...] = ()
              ) -> dict | None:
    """One fit's z, z_noise and z_bias per coefficient (statsmodels' order) and its interval checks; None without a
    privacy covariance; ``{"root": False}`` where the clipped root was not found. ``factors``: also the z_bias of the
    roots with the refine bound times each factor (``"bias_at"``; NaN where a root was not found)."""
    ds = DATASETS[name]
    names, mle, _, _ = reference(name)
    mle = np.ravel(mle)  # (name, class) order, as ours() below
    seen = []
    original = FedIRLS._run

    def run(self, session, setup):
        out = original(self, session, setup)
        seen.append((session, out, setup))
        return out

    FedIRLS._run = run
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = privfedstat.glm(ds.formula, with_sites(name, seed), client="site", family=ds.family, mu=mu,
                                  random_state=seed, levels={k: list(v) for k, v in ds.levels} or None,
                                  aggregation=aggregation)
    finally:
        FedIRLS._run = original
    inf = est.inference_
    if inf.cov_privacy is None:
        return None
    session, out, setup = seen[-1]
    theta_root = clipped_root(session, out, setup)
    if theta_root is None:
        return {"root": False}
    coef = np.asarray(est.coef_)
    d, q = coef.shape[0], (coef.shape[1] if coef.ndim == 2 else 1)
    scaler = getattr(est, "scaler_", None)
    G = original_scale_map(None if scaler is None else scaler.coef_to_original, d, q)
    root_f = coef.ravel(order="F") + G @ (theta_root - out.theta)  # original scale, F order
    order = [list(est.feature_names_in_).index(n) for n in names]

    def ours(flat_f: np.ndarray) -> np.ndarray:  # F-ordered original-scale values -> statsmodels' (name, class) order
        return flat_f.reshape(q, d).T[order].ravel()

    c, root = ours(coef.ravel(order="F")), ours(root_f)
    sd = ours(np.sqrt(np.diag(inf.cov_protocol)))
    bias_at = {}
    for f in factors:
        moved = clipped_root(session, out, setup, f)
        bias_at[f] = np.full(c.size, np.nan) if moved is None else \
            (ours(coef.ravel(order="F") + G @ (moved - out.theta)) - mle) / sd
    half_width = Z975 * ours(np.sqrt(np.diag(inf.cov)))
    ci = np.asarray(inf.conf_int())
    lo, hi = ours(ci[:, 0]), ours(ci[:, 1])
    shown = np.isfinite(lo) & np.isfinite(hi) & (sd > 0)
    p_j = 2.0 * (1.0 - np.array([NormalDist().cdf(h / s) for h, s in zip(half_width[shown], sd[shown])]))
    return {"root": True, "dataset": name, "mu": mu, "seed": seed, "names": [f"{n}{'' if q == 1 else f'[{k}]'}"
                                                                          for n in names for k in range(q)],
            "z": (c - mle) / sd, "z_noise": (c - root) / sd,
            "z_bias": (root - mle) / sd, "bias_at": bias_at,
            "miss_mle": bool(np.any(shown & ((lo > mle) | (hi < mle)))),
            "miss_root": bool(np.any(shown & ((lo > root) | (hi < root)))),
            "expected": float(1.0 - np.prod(1.0 - p_j)) if p_j.size else 0.0}


def cell(found: list[dict]) -> dict:
    rows = [r for r in found if r["root"]]

    def rms(key: str) -> float:
        return float(np.sqrt(np.mean(np.concatenate([r[key] for r in rows]) ** 2)))

    bias = np.mean([r["z_bias"] for r in rows], axis=0)
    return {"fits": len(rows), "no_root": len(found) - len(rows), "rms_z": rms("z"), "rms_noise": rms("z_noise"),
            "rms_bias": rms("z_bias"),
            "worst_bias": float(np.max(np.abs(bias))), "miss_mle": sum(r["miss_mle"] for r in rows),
            "miss_root": sum(r["miss_root"] for r in rows), "expected": sum(r["expected"] for r in rows)}


def per_coefficient(name: str, mu: float, found: list[dict]) -> list[str]:
    """Markdown rows, one a coefficient: RMS z / z_noise / z_bias and mean z_bias over the seeds, and the 95% band of
    the RMS of as many standard normals."""
    from scipy.stats import chi2

    rows = [r for r in found if r["root"]]
    n = len(rows)
    band = f"{math.sqrt(chi2.ppf(0.025, n) / n):.2f}-{math.sqrt(chi2.ppf(0.975, n) / n):.2f}"
    out = []
    for j, coef in enumerate(rows[0]["names"]):
        rms = {k: float(np.sqrt(np.mean([r[k][j] ** 2 for r in rows]))) for k in ("z", "z_noise", "z_bias")}
        at = "".join(f" {np.nanmean([r['bias_at'][f][j] for r in rows]):+.2f} |" for f in rows[0]["bias_at"])
        out.append(f"| {name} | {_mu(mu)} | {coef} | {n} | {rms['z']:.2f} | {rms['z_noise']:.2f} ({band}) "
                   f"| {rms['z_bias']:.2f} | {np.mean([r['z_bias'][j] for r in rows]):+.2f} |{at}")
    return out


def bound_curve(name: str, mu: float, found: list[dict]) -> list[str]:
    """Markdown rows, one a factor f of the refine bound: what a fit clipped at f B would show, its noise taken as the
    fit's own scaled by f (the gradient noise is proportional to the bound): the RMS over coefficients and seeds of
    ``f z_noise + z_bias(f)`` in units of the privacy sd at B (the error; its minimum is the bound of least mean
    squared error), the same over f (the RMS z it would report), and the largest |mean z_bias(f)| of a coefficient."""
    rows = [r for r in found if r["root"]]
    out = []
    for f in rows[0]["bias_at"]:
        err = np.concatenate([f * r["z_noise"] + r["bias_at"][f] for r in rows])
        err = err[np.isfinite(err)]
        worst = float(np.nanmax(np.abs(np.nanmean([r["bias_at"][f] for r in rows], axis=0))))
        rms = float(np.sqrt(np.mean(err**2)))
        out.append(f"| {name} | {_mu(mu)} | {f:g} | {rms:.2f} | {rms / f:.2f} | {worst:.2f} |")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    ap.add_argument("--mus", nargs="+", type=float, default=[8.0, 2.0])
    ap.add_argument("--per-coef", action="store_true", help="also one row per coefficient, with the RMS's band")
    ap.add_argument("--bound-factors", nargs="+", type=float, default=[],
                    help="also the bias and error of the roots clipped at these multiples of the refine bound")
    ap.add_argument("--aggregation", choices=["local", "secure"], default="local",
                    help="the fits' aggregation (secure: Skellam shares summed securely)")
    args = ap.parse_args(argv)
    cells, coefficients, curves = [], [], []
    for name in args.datasets:
        for mu in args.mus:
            rows = [r for s in range(args.seeds)
                    if (r := split_one(name, mu, s, args.aggregation, tuple(args.bound_factors))) is not None]
            if any(r["root"] for r in rows):
                cells.append({"dataset": name, "half": half(name), "mu": mu, **cell(rows)})
                coefficients += per_coefficient(name, mu, rows)
                curves += bound_curve(name, mu, rows) if args.bound_factors else []
                print(f"{name} mu={_mu(mu)} done", file=sys.stderr, flush=True)
    table = pd.DataFrame(cells)
    print("| data | half | mu | fits (no root) | RMS z | RMS z_noise | RMS z_bias | worst bias | miss MLE | miss root "
          "| expected |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in table.itertuples():
        print(f"| {r.dataset} | {r.half} | {_mu(r.mu)} | {r.fits} ({r.no_root}) | {r.rms_z:.2f} | {r.rms_noise:.2f} "
              f"| {r.rms_bias:.2f} "
              f"| {r.worst_bias:.2f} | {r.miss_mle} | {r.miss_root} | {r.expected:.1f} |")
    for name, part in table.groupby("half"):
        print(f"{name}: miss MLE {part['miss_mle'].sum()}, miss root {part['miss_root'].sum()}, expected "
              f"{part['expected'].sum():.1f} (fits {part['fits'].sum()})")
    if args.per_coef:
        at = "".join(f" mean z_bias at {f:g} B |" for f in args.bound_factors)
        print(f"\n| data | mu | coefficient | fits | RMS z | RMS z_noise (95% band) | RMS z_bias | mean z_bias |{at}")
        print("|---|---:|---|---:|---:|---:|---:|---:|" + "---:|" * len(args.bound_factors))
        print("\n".join(coefficients))
    if curves:
        print("\n| data | mu | bound x | RMS error (sd at B) | RMS z at that bound | worst mean bias (sd at B) |")
        print("|---|---:|---:|---:|---:|---:|")
        print("\n".join(curves))


if __name__ == "__main__":
    main()
