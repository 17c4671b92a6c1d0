"""FedNMap's Figs. 2-5 studies: the log-log slope helper, the label-sorted data, a reduced run and the CLI."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from privfedstat import cli
from privfedstat.simulations.fednmap_study import (
    FedNMapConfig,
    fednmap_slopes,
    fednmap_study,
    loglog_slope,
    plot_fednmap_study,
    sorted_logistic_clients,
    summarise_fednmap,
)

pytestmark = pytest.mark.slow

TINY = FedNMapConfig(n_samples=240, n_features=6, n_nonzero=2, n_rounds=6, trials=2, clients=(4, 8), local_steps=(2,),
                    clients_sweep=(4, 8), steps_sweep=(2, 4), fixed_local_steps=2, fixed_clients=4)


def test_loglog_slope_recovers_a_known_power_law():
    x = np.array([10.0, 20, 30, 50, 100])
    b, a, se = loglog_slope(x, 3.0 * x ** -1.436)
    assert b == pytest.approx(-1.436, abs=1e-12) and a == pytest.approx(math.log(3.0), abs=1e-12) and se < 1e-10
    rng = np.random.default_rng(0)
    y = 0.2 * x ** -0.5 * np.exp(0.05 * rng.standard_normal(x.size))
    b, _, se = loglog_slope(x, y)
    ref = np.polyfit(np.log(x), np.log(y), 1, cov=True)  # an independent fit and its covariance
    assert b == pytest.approx(ref[0][0], abs=1e-12) and se == pytest.approx(math.sqrt(ref[1][0, 0]), rel=1e-9)
    assert math.isnan(loglog_slope([1, 2], [1, 0.5])[2])
    with pytest.raises(ValueError, match="positive"):
        loglog_slope([1, 2], [1, 0])
    with pytest.raises(ValueError, match="distinct"):
        loglog_slope([2, 2], [1, 3])


def test_data_are_sorted_by_label_and_clients_must_be_equal_blocks():
    X, y, beta = sorted_logistic_clients(TINY)
    assert X.shape == (240, 7) and np.all(np.diff(y) >= 0) and np.count_nonzero(beta[1:]) == 2 and beta[0] == 0
    with pytest.raises(ValueError, match="divisible"):
        FedNMapConfig(n_samples=100, clients=(3,))
    with pytest.raises(ValueError, match="noise_sd"):
        FedNMapConfig(noise_sd=0.0)


def test_reduced_study_runs_every_figure_and_fits_slopes():
    df = fednmap_study(replace(TINY, seed=1))
    assert set(df.figure) == {"2", "3", "4", "5"} and set(df.method) == {"FedNMap", "Zhang", "FedCanon"}
    assert df["round"].max() == TINY.n_rounds and np.all(np.isfinite(df.stationarity)) and np.all(df.stationarity > 0)
    first = df[df["round"] == 0]
    assert np.allclose(first.stationarity, first.stationarity.iloc[0])  # same x_0 = 0 for every run
    fig3 = df[df.figure == "3"]
    assert np.allclose(fig3.eta_hat, 1.0) and set(fig3.n_clients) == {4, 8}
    # a configuration shared by two figures is the same runs
    a = df[(df.figure == "2") & (df.n_clients == 4) & (df.method == "Zhang")].stationarity.to_numpy()
    b = df[(df.figure == "3") & (df.n_clients == 4) & (df.method == "Zhang")].stationarity.to_numpy()
    np.testing.assert_array_equal(a, b)
    summary = summarise_fednmap(df)
    assert len(summary) == df.groupby(["figure", "method", "rule", "n_clients", "n_local_steps"]).ngroups
    slopes = fednmap_slopes(df)
    fed3 = slopes[(slopes.figure == "3") & (slopes.method == "FedNMap")].iloc[0]
    s3 = summary[(summary.figure == "3") & (summary.method == "FedNMap")]
    assert fed3.slope == pytest.approx(math.log(s3["final"].iloc[1] / s3["final"].iloc[0]) / math.log(2), abs=1e-12)
    assert fed3.paper == -1.436 and set(slopes[slopes.figure == "5"].rule) == {"1/Q", "1/sqrt(Q)", "0.05"}
    assert set(plot_fednmap_study(df)) == {"2", "3", "4", "5"}
    assert fednmap_study(replace(TINY, seed=1)).equals(df)  # same seed, same numbers


def test_cli(tmp_path, capsys):
    argv = ["reproduce", "fednmap", "--out", str(tmp_path), "--reps", "1", "--rounds", "3", "--samples", "48",
            "--clients", "2,4", "--local-steps", "1,2", "--no-progress"]
    with pytest.raises(SystemExit):  # Fig. 2's default n (20, 50, 100) do not divide 48 rows
        cli.main(argv)
    assert "divisible" in capsys.readouterr().err
    argv[argv.index("48")] = "600"
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "slope" in out and "-1.436" in out
    for name in ("fednmap.csv", "fednmap-slopes.csv", "fednmap-fig2.png", "fednmap-fig5.png"):
        assert (tmp_path / name).exists()
