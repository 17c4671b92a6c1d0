import numpy as np
import pandas as pd
import pytest

from privfedstat.simulations import Equal, GLMDesign, MonteCarlo, Scenario, Uniform, get_grid, plot_grid, run_replicate, summarise
from privfedstat.simulations.mse_study import GRIDS
from privfedstat.simulations.runner import Measure, make_estimator, mse_rows

pytestmark = pytest.mark.slow

SCEN = [Scenario(GLMDesign("logistic"), 8, Equal(60)), Scenario(GLMDesign("poisson"), 6, Uniform(40, 80), mu=4.0)]


def test_tidy_table_and_determinism():
    df = MonteCarlo(SCEN, n_reps=3, random_state=1, progress=False).run()
    assert len(df) == 2 * 3 * 4
    for col in ("scenario", "family", "m", "allocation", "mu", "method", "rep", "mse", "rounds", "floats_per_client",
                "total_floats", "clip", "client_mu", "private", "seconds", "N", "n_mean"):
        assert col in df.columns
    np.testing.assert_allclose(df["client_mu"], np.where(df["family"] == "poisson", 4.0, 2.0), rtol=1e-12)
    again = MonteCarlo(SCEN, n_reps=3, random_state=1, progress=False).run()
    pd.testing.assert_series_equal(df["mse"], again["mse"])
    other = MonteCarlo(SCEN, n_reps=3, random_state=2, progress=False).run()
    assert not np.allclose(df["mse"], other["mse"])


def test_any_row_can_be_rerun_alone():
    df = MonteCarlo(SCEN, n_reps=3, random_state=1, progress=False).run()
    rows = run_replicate(SCEN[1], 2, random_state=1)
    sub = df[(df["scenario"] == SCEN[1].key) & (df["rep"] == 2)]
    np.testing.assert_array_equal(sub["mse"].to_numpy(), [r["mse"] for r in rows])


def test_methods_see_the_same_data():
    rows = run_replicate(SCEN[0], 0, random_state=5)
    assert len({r["N"] for r in rows}) == 1 and len({r["n_mean"] for r in rows}) == 1


def test_parallel_equals_sequential():
    seq = MonteCarlo(SCEN, n_reps=2, random_state=3, progress=False).run()
    par = MonteCarlo(SCEN, n_reps=2, random_state=3, n_jobs=2, progress=False).run()
    np.testing.assert_array_equal(seq["mse"].to_numpy(), par["mse"].to_numpy())


def test_resume_from_csv(tmp_path):
    out = tmp_path / "res.csv"
    first = MonteCarlo(SCEN[:1], n_reps=2, random_state=4, out=out, progress=False).run()
    assert len(pd.read_csv(out)) == 8
    full = MonteCarlo(SCEN, n_reps=3, random_state=4, out=out, progress=False).run()
    assert len(full) == 24 and len(pd.read_csv(out)) == 24
    fresh = MonteCarlo(SCEN, n_reps=3, random_state=4, progress=False).run()
    np.testing.assert_allclose(full["mse"].to_numpy(), fresh["mse"].to_numpy(), rtol=1e-12)
    merged = first.merge(fresh, on=["scenario", "method", "rep"], suffixes=("", "_fresh"))
    assert len(merged) == 8
    np.testing.assert_allclose(merged["mse"], merged["mse_fresh"], rtol=1e-12)


def test_a_resume_reuses_only_rows_of_the_same_code_and_seed(tmp_path, monkeypatch):
    """Rows another random_state or another version of the code computed are never mixed into a resumed study:
    the run raises, naming what differs; a file without the run's record (written before it) raises too."""
    from privfedstat.simulations import runner

    out = tmp_path / "res.csv"
    MonteCarlo(SCEN[:1], ["FedSGD"], n_reps=1, random_state=4, out=out, progress=False).run()
    assert len(runner.source_digest()) == 16
    with pytest.raises(ValueError, match="random_state 4 there, 5 here"):
        MonteCarlo(SCEN[:1], ["FedSGD"], n_reps=2, random_state=5, out=out, progress=False).run()
    monkeypatch.setattr(runner, "source_digest", lambda: "0" * 16)
    with pytest.raises(ValueError, match="source .* there, '0000000000000000' here"):
        MonteCarlo(SCEN[:1], ["FedSGD"], n_reps=2, random_state=4, out=out, progress=False).run()
    monkeypatch.undo()
    (tmp_path / "res.csv.run.json").unlink()
    with pytest.raises(ValueError, match="no record of the run"):
        MonteCarlo(SCEN[:1], ["FedSGD"], n_reps=2, random_state=4, out=out, progress=False).run()
    assert len(pd.read_csv(out)) == 1  # nothing appended by the refused runs


def _record_until_rep_2(scenario, rep, data, fits):
    if rep == 2:
        raise KeyboardInterrupt
    return mse_rows(scenario, rep, data, fits)


def test_an_interrupted_run_keeps_the_replicates_it_finished(tmp_path):
    """Rows are appended in batches (APPEND_SECONDS); those not yet written when the run stops are written then."""
    out = tmp_path / "res.csv"
    stop = Measure("mse", ("FedSGD",), make_estimator, _record_until_rep_2)
    with pytest.raises(KeyboardInterrupt):
        MonteCarlo(SCEN[:1], n_reps=4, random_state=4, out=out, progress=False, measure=stop).run()
    assert sorted(pd.read_csv(out)["rep"]) == [0, 1]
    resumed = MonteCarlo(SCEN[:1], ["FedSGD"], n_reps=4, random_state=4, out=out, progress=False).run()
    fresh = MonteCarlo(SCEN[:1], ["FedSGD"], n_reps=4, random_state=4, progress=False).run()
    np.testing.assert_allclose(resumed["mse"].to_numpy(), fresh["mse"].to_numpy(), rtol=1e-12)


def test_dask_local_cluster_gives_the_same_numbers():
    pytest.importorskip("dask.distributed")
    local = MonteCarlo(SCEN, n_reps=2, random_state=6, progress=False).run()
    dask = MonteCarlo(SCEN, n_reps=2, random_state=6, n_jobs=2, backend="dask", progress=False).run()
    np.testing.assert_array_equal(local["mse"].to_numpy(), dask["mse"].to_numpy())


def test_validation():
    with pytest.raises(ValueError, match="method"):
        MonteCarlo(SCEN, methods=["FedProx"], progress=False).run()
    with pytest.raises(ValueError, match="backend"):
        MonteCarlo(SCEN, backend="spark", progress=False).run()
    with pytest.raises(ValueError, match="distinct"):
        MonteCarlo([SCEN[0], SCEN[0]], progress=False).run()


def test_summarise():
    df = MonteCarlo(SCEN, n_reps=3, random_state=1, progress=False).run()
    s = summarise(df, ["family", "m"])
    assert len(s) == 8 and (s["reps"] == 3).all()
    sub = df[(df["family"] == "logistic") & (df["method"] == "FedAvg")]["mse"]
    row = s[(s["family"] == "logistic") & (s["method"] == "FedAvg")].iloc[0]
    assert row["mean_mse"] == pytest.approx(sub.mean()) and row["se"] == pytest.approx(sub.std() / np.sqrt(3))


def test_every_grid_builds_and_plots():
    assert len(GRIDS) == 12
    for name, study in GRIDS.items():
        scen = study.scenarios()
        assert scen and all(s.labels["study"] == name for s in scen)
    study = get_grid("fig5")
    scen = study.scenarios(family="poisson")[:2]
    df = MonteCarlo(scen, study.methods, n_reps=2, progress=False).run()
    fig = plot_grid(df, study)
    assert len(fig.axes) == 1 and fig.axes[0].get_yscale() == "log"
    with pytest.raises(ValueError, match="unknown figure"):
        get_grid("fig99")


def test_paper_grids():
    assert sorted({s.n_clients for s in get_grid("fig1").scenarios()}) == [20, 30, 40, 50, 60]
    assert {s.allocation.label for s in get_grid("fig11").scenarios()} == {
        "U[10,90]", "U[20,80]", "U[30,70]", "U[60,160]", "U[80,140]", "U[100,120]"}
    fig4 = get_grid("fig4").scenarios()
    assert {s.mu for s in fig4} == {2.0, 6.0, float("inf")}
    assert all(s.allocation.total == 20000 for s in get_grid("fig5").scenarios())


def test_plot_into_given_axes():
    from matplotlib.figure import Figure

    study = get_grid("fig5")
    df = MonteCarlo(study.scenarios()[:1] + study.scenarios()[5:6], study.methods, n_reps=1, progress=False).run()
    fig = Figure()
    axes = fig.subplots(1, 2)
    assert plot_grid(df, study, axes=axes) is fig
    with pytest.raises(ValueError, match="need 2 axes"):
        plot_grid(df, study, axes=axes[:1])


def test_a_diverged_fit_is_a_row_with_its_error_and_the_summary_counts_it():
    """The Section 4 studies keep running when a paper setting diverges (``reproduce fig13`` stopped on FedHybrid's
    DivergenceError): the row has NaN MSE and the error, the summary's mean is over the others and counts it."""
    from privfedstat import DivergenceError
    from privfedstat.simulations.runner import MSE, _fit, mse_rows

    class Diverging:
        def fit(self, data):
            raise DivergenceError("its last updates point back and forth")

    data = SCEN[0].design.sample(SCEN[0].allocation.sizes(SCEN[0].n_clients, np.random.default_rng(0)), np.random.default_rng(1))
    fit = _fit("FedHybrid", Diverging(), data, MSE.tolerate)
    (row,) = mse_rows(SCEN[0], 0, data, [fit])
    assert np.isnan(row["mse"]) and row["error"].startswith("DivergenceError: its last updates")
    df = pd.DataFrame([{"family": "logistic", "method": "FedHybrid", "mse": m} for m in (0.1, 0.3, np.nan)])
    s = summarise(df, ["family"]).iloc[0]
    assert s["reps"] == 2 and s["diverged"] == 1 and s["mean_mse"] == pytest.approx(0.2)
