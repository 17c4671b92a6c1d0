"""The coverage study (issue 10) at tiny scale: rows, seeds, resume, summary, figure, and one coverage check."""

import math
import zlib

import numpy as np
import pandas as pd
import pytest

from privfedstat.simulations import (
    COVERAGE,
    COVERAGE_METHODS,
    Equal,
    GLMDesign,
    MonteCarlo,
    Scenario,
    coverage_scenarios,
    plot_coverage,
    run_replicate,
    summarise_coverage,
)
from privfedstat.simulations.coverage import binomial_halfwidth

pytestmark = pytest.mark.slow

INF = float("inf")
Z = 1.959963984540054
DESIGN = GLMDesign("logistic", rho=0.5)
PUBLIC = Scenario(DESIGN, 4, Equal(150), INF, labels={"study": "coverage"})
PRIVATE = Scenario(GLMDesign("poisson", rho=0.5), 5, Equal(400), 1.0, labels={"study": "coverage"})


def replicate_data(scenario, rep, random_state):
    """The data of replicate ``rep``, drawn by hand from the runner's documented seed scheme."""
    seed = np.random.SeedSequence(random_state, spawn_key=(zlib.crc32(scenario.key.encode()), rep, 0))
    rng = np.random.default_rng(seed)
    return scenario.design.sample(scenario.allocation.sizes(scenario.n_clients, rng), rng)


def test_grid_of_the_issue():
    cells = coverage_scenarios()
    assert len(cells) == 2 * 2 * 2 * 3
    assert {(s.design.family, s.allocation.n * s.n_clients, s.n_clients, s.mu) for s in cells} == {
        (f, N, m, mu) for f in ("logistic", "poisson") for N in (2000, 20000) for m in (10, 50) for mu in (1, 2, INF)}
    assert all(s.design.rho == 0.5 and s.design.beta_true.size == 5 for s in cells)
    assert COVERAGE_METHODS == ("FedIRLS", "FedSGD", "FedAvg", "FedNewton", "PooledMLE")
    with pytest.raises(ValueError, match="multiple"):
        coverage_scenarios(totals=(1000,), clients=(3,))


def test_rows_against_statsmodels():
    import statsmodels.api as sm

    rows = pd.DataFrame(run_replicate(PUBLIC, 3, random_state=7, measure=COVERAGE, methods=["FedIRLS", "PooledMLE"]))
    assert len(rows) == 2 * 5
    assert list(rows["coef"][:5]) == [f"x{j}" for j in range(5)] and (rows["rep"] == 3).all()
    data = replicate_data(PUBLIC, 3, 7)
    ref = sm.GLM(data.y, data.X, family=sm.families.Binomial()).fit()
    for _, g in rows.groupby("method"):
        np.testing.assert_allclose(g["truth"], DESIGN.beta_true)
        np.testing.assert_allclose(g["np_width"], 2 * Z * ref.bse, rtol=1e-6)
        # mu = inf: both fits are the MLE, their intervals statsmodels' Wald intervals
        np.testing.assert_allclose(g["estimate"], ref.params, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(g[["lower", "upper"]], ref.conf_int(0.05), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(g["width"], g["upper"] - g["lower"], rtol=1e-12)
        np.testing.assert_allclose(g["width_ratio"], 1.0, rtol=1e-6)
        np.testing.assert_allclose(g["pred_ratio"], 1.0, rtol=1e-12)
        np.testing.assert_array_equal(g["covered"], ((g["lower"] <= g["truth"]) & (g["truth"] <= g["upper"])).astype(float))
        assert (g["converged"] == 1.0).all() and (g["error"] == "none").all()
    assert (rows["inference_mu"] == INF).all() and (rows["N"] == 600).all() and (rows["rho"] == 0.5).all()


def test_private_rows_count_the_privacy_noise():
    rows = pd.DataFrame(run_replicate(PRIVATE, 0, random_state=1, measure=COVERAGE))
    assert list(dict.fromkeys(rows["method"])) == list(COVERAGE_METHODS)
    priv = rows[rows["method"] != "PooledMLE"]
    assert (priv["error"] == "none").all()
    np.testing.assert_allclose(priv["client_mu"], 1.0, rtol=1e-9)  # every method spends exactly mu, inference included
    assert (priv["inference_mu"] < 1.0).all()
    done = priv[priv["converged"] == 1.0]  # a fit that did not converge withholds its interval: NaN, not covered
    shown = done[np.isfinite(done["width"])]  # and a converged one those its released Hessian does not identify
    assert len(shown) and done.loc[~np.isfinite(done["width"]), "covered"].isna().all()
    assert (shown["pred_ratio"] > 1.0).all() and (shown["width_ratio"] > 1.0).all() and shown["covered"].notna().all()
    assert priv.loc[priv["converged"] == 0.0, "covered"].isna().all()
    assert (rows.loc[rows["method"] == "PooledMLE", "width_ratio"] - 1.0).abs().max() < 1e-9


def test_seeds_parallel_and_resume(tmp_path):
    cells = [PUBLIC, PRIVATE]
    methods = ["FedIRLS", "FedSGD", "PooledMLE"]
    full = MonteCarlo(cells, methods, n_reps=3, random_state=2, progress=False, measure=COVERAGE).run()
    assert len(full) == 2 * 3 * 3 * 5
    cols = ["scenario", "method", "rep", "coef", "lower", "upper", "covered", "np_width"]
    again = MonteCarlo(cells, methods, n_reps=3, random_state=2, n_jobs=2, progress=False, measure=COVERAGE).run()
    pd.testing.assert_frame_equal(full[cols], again[cols])
    other = MonteCarlo(cells, methods, n_reps=3, random_state=3, progress=False, measure=COVERAGE).run()
    assert not np.allclose(full["lower"], other["lower"])
    out = tmp_path / "coverage.csv"
    MonteCarlo(cells[:1], methods, n_reps=2, random_state=2, out=out, progress=False, measure=COVERAGE).run()
    assert len(pd.read_csv(out)) == 2 * 3 * 5
    resumed = MonteCarlo(cells, methods, n_reps=3, random_state=2, out=out, progress=False, measure=COVERAGE).run()
    assert len(pd.read_csv(out)) == len(full)
    pd.testing.assert_frame_equal(resumed[cols], full[cols], check_dtype=False)
    with pytest.raises(ValueError, match="another run .*measure 'coverage' there, 'mse' here"):
        MonteCarlo([Scenario(DESIGN, 3, Equal(50))], ["FedSGD"], n_reps=1, random_state=2, out=out,
                   progress=False).run()


def _table(covered: dict, reps: int, converged: float = 1.0, failed_reps: int = 0) -> pd.DataFrame:
    """A synthetic results table: ``covered[(method, coef)]`` = number of covering replicates.

    Estimates alternate truth + 1 and truth - 1 (+ 0.5 on coefficient x1) with standard error 0.5:
    bias 0 (0.5 on x1), sd ~1, sd / se ~2.
    """
    rows = []
    for (method, coef), k in covered.items():
        for rep in range(reps):
            fail = rep < failed_reps
            estimate = 1.0 + (-1.0) ** rep + (0.5 if coef == "x1" else 0.0)
            rows.append({"family": "logistic", "N": 2000, "m": 10, "mu": 1.0, "method": method, "rep": rep,
                         "coef": coef, "n_mean": 200.0, "truth": 1.0, "estimate": math.nan if fail else estimate,
                         "se": math.nan if fail else 0.5, "covered": math.nan if fail else float(rep >= reps - k),
                         "width_ratio": 2.0 + rep % 2, "pred_ratio": 1.5, "seconds": 0.1,
                         "converged": float(rep < converged * reps)})
    return pd.DataFrame(rows)


def test_summary_numbers_regime_and_verdicts():
    reps = 400
    df = _table({("FedIRLS", "x0"): 380, ("FedIRLS", "x1"): 372, ("PooledMLE", "x0"): 380, ("PooledMLE", "x1"): 370,
                 ("FedSGD", "x0"): 340, ("FedSGD", "x1"): 380}, reps)
    df = pd.concat([df, _table({("FedAvg", "x0"): 380, ("FedAvg", "x1"): 380}, reps, converged=0.5, failed_reps=8)])
    s = summarise_coverage(df).set_index("method")
    h = binomial_halfwidth(reps)
    assert h == pytest.approx(Z * math.sqrt(0.95 * 0.05 / reps))
    fedirls = s.loc["FedIRLS"]
    assert fedirls["coverage"] == pytest.approx((380 + 372) / 800) and fedirls["mle_coverage"] == pytest.approx(0.9375)
    assert fedirls["coverage_min"] == pytest.approx(0.93) and fedirls["coverage_max"] == 0.95
    sd = np.std([2.0, 0.0] * 200, ddof=1)
    assert fedirls["bias_sd"] == pytest.approx(0.5 / sd) and fedirls["sd_se"] == pytest.approx(sd / 0.5)
    assert fedirls["width_ratio"] == 2.5 and fedirls["width_ratio_median"] == 2.5 and fedirls["pred_ratio"] == 1.5
    assert fedirls["verdict"] == "met" and fedirls["regime"] == "yes" and s.loc["PooledMLE", "verdict"] == "met"
    assert s.loc["FedSGD", "verdict"] == "missed"  # mean 0.9 below 0.93
    assert s.loc["FedAvg", "regime"] == "50% converged; 2% failed" and s.loc["FedAvg", "verdict"] == "outside regime"
    # failed fits are left out of the coverage: 380 of the 392 fits that gave an interval covered
    assert s.loc["FedAvg", "failed"] == pytest.approx(8 / reps) and s.loc["FedAvg", "coverage"] == pytest.approx(380 / 392)
    assert (s["reps"] == reps).all() and (s["n_mean"] == 200).all() and fedirls["seconds"] == pytest.approx(0.1)
    # a coefficient below the target by more than its binomial noise fails the cell
    low = _table({("FedIRLS", "x0"): 400, ("FedIRLS", "x1"): round((0.93 - h - 0.01) * reps)}, reps)
    assert summarise_coverage(low)["verdict"].item() == "missed"
    assert np.isnan(summarise_coverage(low)["mle_coverage"].item())  # no PooledMLE reference in that table
    with pytest.raises(ValueError, match="coverage study"):
        summarise_coverage(df.drop(columns="pred_ratio"))


def test_plot_from_a_run():
    df = MonteCarlo([PUBLIC, PRIVATE], ["FedIRLS", "PooledMLE"], n_reps=2, progress=False, measure=COVERAGE).run()
    fig = plot_coverage(summarise_coverage(df))
    assert len(fig.axes) == 4
    assert fig.axes[1].get_xlabel().startswith("predicted width ratio")
    with pytest.raises(ValueError, match="summarise_coverage"):
        plot_coverage(df)


def test_coverage_at_mu_inf_is_nominal():
    """FedIRLS at mu = inf (the MLE) covers 95% of the time over 200 cheap replicates (can fail)."""
    cell = Scenario(GLMDesign("logistic", rho=0.5), 5, Equal(200), INF)
    reps = 200
    df = MonteCarlo([cell], ["FedIRLS", "PooledMLE"], n_reps=reps, random_state=11, progress=False,
                    measure=COVERAGE).run()
    s = summarise_coverage(df).set_index("method")
    h = binomial_halfwidth(reps)  # 0.030: the mean over 5 correlated coefficients varies no more than one
    for method in ("FedIRLS", "PooledMLE"):
        assert abs(s.loc[method, "coverage"] - 0.95) < h, s
        assert 0.95 - 1.5 * h < s.loc[method, "coverage_min"] and s.loc[method, "coverage_max"] < 0.95 + 1.5 * h, s
        assert s.loc[method, "width_ratio"] == pytest.approx(1.0, rel=1e-5)


def _make_or_break(method, scenario, seed):
    """The study's estimators, with FedAvg given a step size its fit refuses."""
    from privfedstat.simulations.coverage import make_default_estimator

    est = make_default_estimator(method, scenario, seed)
    return est.set_params(step_size=-1.0) if method == "FedAvg" else est


def test_a_failing_fit_is_recorded_not_raised():
    from privfedstat.simulations import Measure
    from privfedstat.simulations.coverage import coverage_rows

    measure = Measure("broken", ("FedIRLS", "FedAvg"), _make_or_break, coverage_rows, tolerate=(Exception,))
    df = MonteCarlo([PRIVATE], n_reps=2, progress=False, measure=measure).run()
    bad = df[df["method"] == "FedAvg"]
    assert len(bad) == 2 * 5 and bad["covered"].isna().all() and bad["width"].isna().all()
    assert bad["error"].str.startswith("ValueError: step_size").all() and np.isfinite(bad["np_width"]).all()
    assert (df.loc[df["method"] == "FedIRLS", "error"] == "none").all()
    s = summarise_coverage(df).set_index("method")
    assert s.loc["FedAvg", "failed"] == 1.0 and s.loc["FedAvg", "regime"] == "100% failed"
    assert s.loc["FedIRLS", "failed"] == 0.0
    assert COVERAGE.tolerate == (Exception,)
