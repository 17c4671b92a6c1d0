"""Planning against Monte Carlo: plan_study's standard errors and power next to simulated glm() fits.

For every cell of the grid -- family (logistic, Poisson, Gaussian) x layout (few large sites,
many small ones, the same N) x mu (0.5, 1, 2, 4, 8, inf) -- the plan
(:func:`privfedstat.planning.power.plan_study`, from a public synthetic covariate sample) is
set next to ``reps`` fits of the default private GLM (FedIRLS with private scaling,
``clip="auto"``, ``inference="auto"``, as ``glm()`` builds it) on fresh data drawn from the same
design. Per coefficient: the predicted SE against the simulated SD of the estimates (and its
robust version, 1.4826 MAD, which the few wild fits do not move), the median SE the fits report,
and the predicted power of the two-sided 5% Wald test of ``coef = 0`` against the share of fits
that reject it with their own SEs. At mu = inf the statsmodels GLM fits the same data: its mean
``bse`` and rejection rate, and statsmodels' ``NormalIndPower`` at the planned SE.

Run by hand::

    python benchmarks/bench_power.py                  # 2000 replicates per cell: writes RESULTS.md and the figures
    python benchmarks/bench_power.py --quick          # 10 replicates, prints only (smoke test)
    python benchmarks/bench_power.py --reps 50 --no-write

The section "## Planning: predicted vs simulated SE and power (benchmarks/bench_power.py)" of
RESULTS.md is replaced on each writing run; the figures go to ``benchmarks/power_ratio.png``
(predicted over simulated, every cell) and ``benchmarks/power_curve.png`` (plan.plot with the
simulated power).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_accuracy import code_version  # noqa: E402
from bench_kernels import machine_info, update_results  # noqa: E402

from privfedstat import FederatedData, FedIRLS, PrivateStandardize  # noqa: E402
from privfedstat.families import get_family  # noqa: E402
from privfedstat.planning.power import plan_study  # noqa: E402

HEADING = "## Planning: predicted vs simulated SE and power (benchmarks/bench_power.py)"
HERE = Path(__file__).resolve().parent
NAMES = ("Intercept", "x1", "x2")
#: coefficients: x1 ~ N(0, 1) and x2 ~ Bernoulli(0.4), both with effects near the non-private detection limit
COEF = {"logistic": (-0.5, 0.06, 0.1), "poisson": (0.3, 0.025, 0.04), "gaussian": (1.0, 0.03, 0.05)}
#: (sites, rows per site): few large and many small, N = 10000 each
LAYOUTS = {"5 x 2000": (5, 2000), "100 x 100": (100, 100)}
MUS = (0.5, 1.0, 2.0, 4.0, 8.0, float("inf"))
DESIGN_ROWS = 50_000  # the public synthetic sample the plans read
ALPHA = 0.05


def covariates(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.column_stack([np.ones(n), rng.standard_normal(n), (rng.random(n) < 0.4).astype(float)])


def simulate(family: str, m: int, n: int, mu: float, reps: int, seed: int) -> pd.DataFrame:
    """``reps`` default fits on fresh data: estimate, reported SE and rejection per coefficient (and statsmodels at mu = inf)."""
    import statsmodels.api as sm

    rng = np.random.default_rng(seed)
    law, beta = get_family(family), np.asarray(COEF[family])
    est = FedIRLS(family=family, mu=mu, scaling=PrivateStandardize(intercept=0))
    sm_family = {"logistic": sm.families.Binomial(), "poisson": sm.families.Poisson(),
                 "gaussian": sm.families.Gaussian()}[family]
    rows = []
    for r in range(reps):
        X = covariates(m * n, rng)
        y = law.simulate(X @ beta, rng, 1.0)
        data = FederatedData.from_pooled(X, y, clients=np.repeat(np.arange(m), n))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.set_params(random_state=seed * 100_000 + r).fit(data)
        row = {"rep": r, "coef": est.coef_.copy(), "se": np.ravel(est.bse_).copy()}
        if np.isinf(mu):
            res = sm.GLM(y, X, family=sm_family).fit()
            row["sm_coef"], row["sm_se"] = res.params, res.bse
        rows.append(row)
    return pd.DataFrame(rows)


def cell(family: str, layout: str, mu: float, reps: int, seed: int) -> list[dict]:
    m, n = LAYOUTS[layout]
    design = covariates(DESIGN_ROWS, np.random.default_rng(12345))
    plan = plan_study(design, COEF[family], family=family, sizes=[n] * m, mu=mu, names=NAMES, alpha=ALPHA)
    t = time.perf_counter()
    sims = simulate(family, m, n, mu, reps, seed)
    seconds = (time.perf_counter() - t) / reps
    coef, se = np.stack(sims["coef"]), np.stack(sims["se"])
    z = 1.959963984540054
    out = []
    for j, term in enumerate(NAMES):
        row = plan.frame.loc[term]
        est = coef[:, j]
        sd = float(np.std(est, ddof=1))
        mad = 1.4826 * float(np.median(np.abs(est - np.median(est))))
        rec = {"family": family, "layout": layout, "mu": mu, "term": term, "reps": reps, "se_plan": row["se"],
               "privacy_share": row["privacy_share"], "sd_sim": sd, "sd_robust": mad,
               "se_fit_median": float(np.nanmedian(se[:, j])), "withheld": float(np.mean(np.isnan(se[:, j]))),
               "power_plan": row["power"], "power_sim": float(np.mean(np.abs(est) / se[:, j] > z)),
               "wild": float(np.mean(np.abs(est - row["effect"]) > 6 * row["se"])), "s_per_fit": seconds}
        if np.isinf(mu):
            from statsmodels.stats.power import NormalIndPower

            sm_se = np.stack(sims["sm_se"])[:, j]
            sm_coef = np.stack(sims["sm_coef"])[:, j]
            rec["se_statsmodels"] = float(np.mean(sm_se))
            rec["power_statsmodels_sim"] = float(np.mean(np.abs(sm_coef) / sm_se > z))
            rec["power_statsmodels"] = float(NormalIndPower().power(effect_size=abs(row["effect"]) / row["se"],
                                                                     nobs1=1, alpha=ALPHA, ratio=0))
        out.append(rec)
    return out


def run(reps: int) -> pd.DataFrame:
    records = []
    seed = 1
    for family in COEF:
        for layout in LAYOUTS:
            for mu in MUS:
                t = time.perf_counter()
                records += cell(family, layout, mu, reps, seed)
                seed += 1
                print(f"{family:9s} {layout:10s} mu={mu:<4g} {time.perf_counter() - t:6.1f} s", flush=True)
    table = pd.DataFrame(records)
    table["ratio"] = table["se_plan"] / table["sd_sim"]
    table["ratio_robust"] = table["se_plan"] / table["sd_robust"]
    table["ratio_fit"] = table["se_plan"] / table["se_fit_median"]
    table["power_diff"] = table["power_plan"] - table["power_sim"]
    return table


def _f(x, digits=2) -> str:
    return "-" if pd.isna(x) else f"{x:.{digits}f}"


def section(table: pd.DataFrame, reps: int, seconds: float, mi: dict) -> str:
    slopes = table[table["term"] != "Intercept"]
    summary = []
    for name, col in (("SE plan / SD of estimates", "ratio"), ("SE plan / robust SD (1.4826 MAD)", "ratio_robust"),
                      ("SE plan / median SE the fits report", "ratio_fit")):
        for label, part in (("all cells", table), ("slopes (x1, x2)", slopes)):
            r = part[col]
            summary.append(f"| {name} | {label} | {r.median():.3f} | {r.quantile(0.1):.3f} - {r.quantile(0.9):.3f} | "
                           f"{100 * np.mean(np.abs(r - 1) <= 0.15):.0f}% |")
    pd_ = table["power_diff"]
    regimes = []
    for label, part in (("privacy share < 0.5", table[table["privacy_share"] < 0.5]),
                        ("privacy share >= 0.5", table[table["privacy_share"] >= 0.5])):
        regimes.append(f"| {label} | {len(part)} | {100 * np.mean(np.abs(part['ratio_robust'] - 1) <= 0.15):.0f}% | "
                       f"{100 * np.mean(np.abs(part['ratio_fit'] - 1) <= 0.15):.0f}% | "
                       f"{100 * np.mean(np.abs(part['ratio'] - 1) <= 0.15):.0f}% | "
                       f"{100 * np.mean(part['power_diff'].abs() <= 0.1):.0f}% | {part['power_diff'].abs().max():.3f} | "
                       f"{100 * part['wild'].mean():.2f}% | {100 * part['withheld'].mean():.2f}% |")
    lines = [
        HEADING, "",
        f"- Date: {mi['date']}; machine: {mi['model']}, {mi['cpus']} CPU(s), shared; Python {mi['python']}, "
        f"numpy {mi['numpy']}, numba {mi['numba']}; load average at start {mi['load']}", "",
        f"Code: privfedstat at {code_version()}. {reps} replicates per cell, {seconds / 60:.1f} min in all; the plan "
        "reads a public "
        f"synthetic sample of {DESIGN_ROWS} design rows (intercept, x1 ~ N(0, 1), x2 ~ Bernoulli(0.4)); coefficients "
        f"{COEF}; N = 10000 rows in each layout. Each cell's fits draw fresh data from the design and run the default "
        "private GLM (FedIRLS, private scaling, clip='auto', inference='auto'). Power: two-sided 5% Wald test of "
        "coef = 0 with the fit's own SE (a fit whose intervals are withheld, not converged, does not reject; the median "
        "fit SE is over the fits that report one). 'wild': share of fits more than 6 planned SEs from the planned "
        "effect; 'withheld': share of fits with withheld intervals.", "",
        "### Summary over the grid (3 families x 2 layouts x 6 mu x 3 coefficients)", "",
        "| ratio | cells | median | 10% - 90% | within 15% |", "|---|---|---:|---:|---:|", *summary, "",
        f"Power, plan minus simulated: median {pd_.median():+.3f}, 10%-90% {pd_.quantile(0.1):+.3f} to "
        f"{pd_.quantile(0.9):+.3f}, largest |difference| {pd_.abs().max():.3f} (binomial sd of a simulated power at "
        f"0.5: {0.5 / np.sqrt(reps):.3f}).", "",
        "By the planned privacy share of the variance (share of cells within 15% / power within 0.1):", "",
        "| cells | n | plan/robust SD | plan/fit SE | plan/SD | power | largest power diff | wild fits | withheld |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *regimes, "",
    ]
    inf = table[np.isinf(table["mu"])]
    lines += ["### mu = inf against statsmodels", "",
              "| family | layout | term | SE plan | mean statsmodels bse | SD of estimates | power plan | "
              "NormalIndPower | statsmodels rejection rate |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for _, r in inf.iterrows():
        lines.append(f"| {r.family} | {r.layout} | {r.term} | {r.se_plan:.4g} | {r.se_statsmodels:.4g} | {r.sd_sim:.4g} | "
                     f"{r.power_plan:.3f} | {r.power_statsmodels:.3f} | {r.power_statsmodels_sim:.3f} |")
    lines += ["", "### Every cell", "",
              "| family | layout | mu | term | privacy share | SE plan | SD sim | robust SD | median fit SE | "
              "plan/SD | plan/robust | power plan | power sim | wild % |",
              "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for _, r in table.iterrows():
        lines.append(f"| {r.family} | {r.layout} | {r.mu:g} | {r.term} | {_f(r.privacy_share)} | {r.se_plan:.4g} | "
                     f"{r.sd_sim:.4g} | {r.sd_robust:.4g} | {r.se_fit_median:.4g} | {_f(r.ratio)} | "
                     f"{_f(r.ratio_robust)} | {_f(r.power_plan, 3)} | {_f(r.power_sim, 3)} | {100 * r.wild:.1f} |")
    lines += ["", "![predicted over simulated SE](power_ratio.png)", "",
              "![power against mu, planned and simulated](power_curve.png)", ""]
    return "\n".join(lines)


def figures(table: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for k, (family, part) in enumerate(table.groupby("family")):
        finite = part[np.isfinite(part["mu"])]
        axes[0].scatter(finite["mu"], finite["ratio"].clip(lower=0.01), color=f"C{k}", marker="o", label=f"{family}: SD")
        axes[0].scatter(finite["mu"], finite["ratio_robust"], color=f"C{k}", marker="x", label=f"{family}: robust SD")
        axes[1].scatter(part["power_sim"], part["power_plan"], color=f"C{k}", label=family)
    axes[0].set_xscale("log")
    axes[0].set_xticks([mu for mu in MUS if np.isfinite(mu)], [f"{mu:g}" for mu in MUS if np.isfinite(mu)])
    axes[0].minorticks_off()
    axes[0].set_ylim(0.0, 1.3)  # a ratio below 0 is impossible; the few SDs blown up by wild fits sit at the bottom
    axes[0].axhspan(0.85, 1.15, color="grey", alpha=0.2)
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[0].set_xlabel("mu")
    axes[0].set_ylabel("planned SE / simulated")
    axes[0].legend(fontsize=7)
    axes[1].plot([0, 1], [0, 1], color="grey", lw=0.8)
    axes[1].set_xlabel("simulated power")
    axes[1].set_ylabel("planned power")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "power_ratio.png", dpi=110)
    plt.close(fig)

    family, layout, term = "logistic", "100 x 100", "x1"
    m, n = LAYOUTS[layout]
    design = covariates(DESIGN_ROWS, np.random.default_rng(12345))
    plan = plan_study(design, COEF[family], family=family, sizes=[n] * m, mu=2.0, names=NAMES, alpha=ALPHA)
    ax = plan.plot(term, "power")
    sim = table[(table["family"] == family) & (table["layout"] == layout) & (table["term"] == term)
                & np.isfinite(table["mu"])]
    ax.plot(sim["mu"], sim["power_sim"], "s", color="k", label="simulated fits")
    ax.legend(loc="best", fontsize=8)
    ax.figure.tight_layout()
    ax.figure.savefig(HERE / "power_curve.png", dpi=110)
    plt.close(ax.figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="10 replicates, print only")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    reps = 10 if args.quick else args.reps
    mi = machine_info()
    t = time.perf_counter()
    table = run(reps)
    text = section(table, reps, time.perf_counter() - t, mi)
    print(text)
    if not (args.quick or args.no_write):
        figures(table)
        update_results(text, HEADING)


if __name__ == "__main__":
    main()
