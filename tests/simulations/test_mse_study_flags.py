"""The MSE studies' flags (--clip none, --newton-noise, --hessian-floor, --sizes, --m), their theory
column (predict_mse), the slopes table of the theory comparison and the demo's two sentences."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from privfedstat.cli import find_study, main, study_parser
from privfedstat.simulations import GLMDesign, compare_to_theory, theory_slopes
from privfedstat.simulations.allocations import Equal
from privfedstat.simulations.mse_study import GRIDS, MSEConfig, demo_sentences
from privfedstat.simulations.runner import Scenario, make_estimator


def test_default_keys_are_unchanged_and_newton_settings_enter_only_when_set():
    config = MSEConfig(grid=GRIDS["fig5"])
    key = config.scenarios()[0].key
    assert key == "logistic|beta=default|sc=1|m=25|FixedTotal(20000, 'equal', 20)|mu=2|K=None|clip=auto"
    set_ = replace(config, newton_noise="paper", hessian_floor=0.05).scenarios()[0]
    assert set_.key == key + "|newton_noise=paper|hessian_floor=0.05"


def test_flags_parse_and_reach_fednewton_only():
    parser = study_parser(find_study("fig5"))
    settings = vars(parser.parse_args(["--clip", "none", "--mu", "inf", "--newton-noise", "paper",
                                       "--hessian-floor", "0.05", "--sizes", "equal", "--m", "25,400"]))
    settings.pop("out"), settings.pop("no_progress")
    config = find_study("fig5").configure(**settings)
    scenarios = config.scenarios()
    assert [s.n_clients for s in scenarios] == [25, 400] and {s.labels["sizes"] for s in scenarios} == {"equal"}
    s = scenarios[0]
    assert s.clip == math.inf and s.mu == math.inf
    newton = make_estimator("FedNewton", s, None).get_params()
    assert newton["newton_noise"] == "paper" and newton["hessian_floor"] == 0.05 and newton["clip"] == math.inf
    assert "newton_noise" not in make_estimator("FedAvg", s, None).get_params()
    assert vars(parser.parse_args(["--hessian-floor", "auto"]))["hessian_floor"] == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["--newton-noise", "robust"])


def test_default_newton_settings_are_the_estimators():
    s = MSEConfig(grid=GRIDS["fig5"]).scenarios()[0]
    default = type(make_estimator("FedNewton", s, None))(family="logistic").get_params()
    params = make_estimator("FedNewton", s, None).get_params()
    assert params["newton_noise"] == default["newton_noise"] and params["hessian_floor"] == default["hessian_floor"]


@pytest.mark.parametrize("clip", ["none", "-1", "abc"])
def test_clip_none_is_refused_at_finite_mu_and_bad_clips_with_a_message(clip):
    with pytest.raises(ValueError, match="mu = inf" if clip == "none" else "positive number"):
        MSEConfig(grid=GRIDS["fig5"], clip=clip).scenarios()
    with pytest.raises(ValueError, match="mu = inf"):  # fig4 varies mu: never unclipped
        MSEConfig(grid=GRIDS["fig4"], clip="none", mu=math.inf).scenarios()


def test_clip_none_refused_by_the_command_line(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "fig5", "--clip", "none", "--reps", "1", "--no-progress"])
    assert "needs mu = inf" in capsys.readouterr().err


def _table(slope_m: float = 1.0, reps: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for m in (20, 40, 80):
        for rep in range(reps):
            rows.append({"method": "FedSGD", "m": m, "N": 50 * m, "mu": 2.0, "K": np.nan, "allocation": "equal",
                         "rep": rep, "mse": 1e-3 * m**slope_m * (1 + 0.01 * rng.standard_normal())})
    return pd.DataFrame(rows)


def test_theory_slopes_reports_mc_bound_and_prediction_side_by_side():
    out = theory_slopes(compare_to_theory(_table(), d=3, predict=False))
    row = out.set_index("variable").loc["m"]
    assert row["slope_mc"] == pytest.approx(1.0, abs=0.02) and row["se_mc"] > 0
    assert np.isfinite(row["slope_bound"]) and row["bound_agrees"] in ("yes", "no")
    assert np.isnan(row["slope_prediction"]) and row["prediction_agrees"] == ""
    assert list(out.columns) == ["method", "variable", "fixed", "cells", "slope_mc", "se_mc", "slope_bound",
                                 "slope_prediction", "bound_agrees", "prediction_agrees"]


def test_compare_to_theory_says_why_a_prediction_is_missing():
    df = _table().assign(method="FedNewton", N=lambda d: 4 * d["m"], scenario="x|clip=1.0", clip=1.0)
    out = compare_to_theory(df, design=GLMDesign("logistic"), n_mc=256)
    assert out["predicted_mse"].isna().all() and (out["prediction_note"] != "").all()


def _fig5_like(newton: float, avg: float, reps: int = 6) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for m in (25, 400):
        for rep in range(reps):
            for method, base in (("FedSGD", 0.01), ("FedHybrid", 0.012), ("FedAvg", avg), ("FedNewton", newton)):
                rows.append({"scenario": f"s{m}", "m": m, "allocation": "equal", "rep": rep, "method": method,
                             "mse": base * (1 + 0.05 * rng.standard_normal())})
    return pd.DataFrame(rows)


def test_demo_sentences_name_the_winner_and_read_the_papers_claim():
    first, second = demo_sentences(_fig5_like(newton=0.3, avg=0.2))
    assert first.startswith("At the largest m = 400, FedSGD has the lowest mean MSE")
    assert "FedNewton mitigates FedAvg's decline" in second and "contradicts the paper" in second
    assert "agrees with the paper" in demo_sentences(_fig5_like(newton=0.1, avg=0.2))[1]
    predicted = pd.DataFrame({"m": [400, 400], "method": ["FedSGD", "FedAvg"], "predicted_mse": [0.01, 0.2]})
    assert "predict_mse ranks FedSGD first" in demo_sentences(_fig5_like(0.3, 0.2), predicted)[0]


def test_predictions_per_cell_beside_the_empirical_mse():
    from privfedstat.simulations.mse_study import _summarise

    config = MSEConfig(grid=GRIDS["fig5"], m=(25,), sizes=("equal",))
    s = config.scenarios()[0]
    rows = [{**s.columns(), "sizes": "equal", "method": method, "rep": rep, "mse": 0.01 + 0.001 * rep,
             "clip": 1.5, "N": 20000, "n_mean": 800.0} for method in ("FedSGD", "FedAvg") for rep in range(3)]
    table = _summarise({"": pd.DataFrame(rows)}, config)["summary"]
    assert ("predicted_mse", "FedSGD") in table.frame.columns and ("se", "FedAvg") in table.frame.columns
    assert np.isfinite(table.frame[("predicted_mse", "FedSGD")]).all()
    assert "predict_mse" in table.title


def test_scenario_passes_newton_settings_only_where_the_estimator_has_them():
    s = Scenario(GLMDesign("logistic"), 4, Equal(50), newton_noise="paper")
    assert make_estimator("FedNewton", s, None).get_params()["newton_noise"] == "paper"
    assert make_estimator("FedSGD", s, None).get_params()["clip"] is not None


@pytest.mark.slow
def test_a_tiny_unclipped_fig5_run_has_the_prediction_column(tmp_path, capsys):
    assert main(["reproduce", "fig5", "--clip", "none", "--mu", "inf", "--sizes", "equal", "--m", "25,400",
                 "--reps", "2", "--jobs", "1", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "predicted_mse" in out and "log-log slopes" in out
    slopes = pd.read_csv(tmp_path / "fig5-logistic-slopes.csv")
    assert set(slopes["variable"]) == {"m"} and len(slopes) == 4 and set(slopes["bound_agrees"]) <= {"yes", "no"}
    summary = pd.read_csv(tmp_path / "fig5-logistic-summary.csv", header=[0, 1], index_col=[0, 1])
    assert np.isfinite(summary[("predicted_mse", "FedSGD")]).all()
    assert set(pd.read_csv(tmp_path / "fig5-logistic.csv")["clip"]) == {math.inf}
