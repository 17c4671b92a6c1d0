"""compare_to_theory and plot_theory_comparison on small synthetic result tables."""

import math

import numpy as np
import pandas as pd
import pytest

from privfedstat import FedSGD, predict_mse
from privfedstat.simulations import GLMDesign, compare_to_theory, plot_theory_comparison
from privfedstat.theory import Problem, fedavg_bound, fedsgd_bound, lower_bound

pytestmark = pytest.mark.slow

DESIGN = GLMDesign("logistic", beta=(0.5, -0.5, 0.5))


def _table(methods=("FedSGD", "FedAvg"), ms=(10, 20, 40), n=100, mu=0.5, reps=3):
    rows = []
    for method in methods:
        for m in ms:
            for r in range(reps):
                rows.append({"method": method, "m": m, "N": m * n, "n_mean": float(n), "mu": mu, "K": np.nan,
                             "rep": r, "mse": 0.01 * (1 + 0.1 * r) * (10 / m), "clip": 6.0,
                             "scenario": f"logistic|m={m}|mu={mu:g}|K=None|clip=6.0", "allocation": "equal n=100"})
    return pd.DataFrame(rows)


def test_columns_bounds_and_lower_bound_without_design():
    df = _table()
    out = compare_to_theory(df, d=3, predict=False)
    assert {"bound", "bound_name", "lower_bound", "predicted_mse", "rate_slope", "d"} <= set(out.columns)
    assert len(out) == len(df) and (out["mse"] == df["mse"]).all()
    row = out[(out["method"] == "FedSGD") & (out["m"] == 20)].iloc[0]
    assert row["bound"] == pytest.approx(float(fedsgd_bound(n_samples=2000, n_clients=20, mu=0.5, d=3, n_iter=50)))
    row = out[(out["method"] == "FedAvg") & (out["m"] == 40)].iloc[0]
    assert row["bound"] == pytest.approx(float(fedavg_bound(n_samples=4000, n_clients=40, mu=0.5, d=3,
                                                            n_local_steps=50, n_rounds=2)))
    assert row["lower_bound"] == pytest.approx(float(lower_bound(n_samples=4000, n_clients=40, mu=0.5, d=3)))
    assert out["predicted_mse"].isna().all()
    # mu >= 1: no lower bound
    assert compare_to_theory(_table(mu=2.0), d=3, predict=False)["lower_bound"].isna().all()


def test_rate_slope_is_one_when_mse_follows_the_bound():
    df = _table(methods=("FedSGD",), ms=(5, 10, 20, 40, 80))
    tmp = compare_to_theory(df, d=3, predict=False)
    df["mse"] = 0.37 * tmp["bound"] * (1 + 0.0 * df["rep"])
    out = compare_to_theory(df, d=3, predict=False)
    assert out["rate_slope"].iloc[0] == pytest.approx(1.0, abs=1e-9)
    assert out["rate_slope"].nunique() == 1
    df["mse"] = tmp["bound"] ** 2
    assert compare_to_theory(df, d=3, predict=False)["rate_slope"].iloc[0] == pytest.approx(2.0, abs=1e-9)


def test_predictor_column_with_design():
    df = _table(methods=("FedSGD",), ms=(10,), n=200, mu=2.0, reps=2)
    out = compare_to_theory(df, design=DESIGN, n_mc=2**12)
    expected = predict_mse(FedSGD(mu=2.0, clip=6.0, step_size=0.5, n_iter=50, inference=None),  # as the studies run it
                           Problem(DESIGN, [200] * 10), n_mc=2**12).total
    assert out["predicted_mse"].iloc[0] == pytest.approx(expected, rel=1e-12)
    assert out["d"].iloc[0] == 3


def test_missing_columns_raise():
    with pytest.raises(ValueError, match="columns"):
        compare_to_theory(pd.DataFrame({"method": ["FedSGD"], "mse": [1.0]}), d=2)
    with pytest.raises(TypeError, match="d="):
        compare_to_theory(_table(), predict=False)


def test_plot_returns_a_figure_and_draws_into_an_axes():
    from matplotlib.figure import Figure

    out = compare_to_theory(_table(), d=3, predict=False)
    fig = plot_theory_comparison(out)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    ax = Figure().subplots()
    fig2 = plot_theory_comparison(out, methods=["FedSGD"], ax=ax)
    assert fig2 is ax.figure
    labels = [line.get_label() for line in ax.get_lines()]
    assert any("bound" in lab for lab in labels) and any("lower bound" in lab for lab in labels)
    # raw results are compared on the fly
    assert isinstance(plot_theory_comparison(_table(), d=3, predict=False, x="N"), Figure)
    assert math.isfinite(out["rate_slope"].iloc[0])
