"""Selecting cells of the coverage grid by rows per site (issue 42's targets: n_i >= 200, mu >= 1)."""

import pytest

from privfedstat.cli import find_study, main, study_parser
from privfedstat.simulations import coverage_scenarios

INF = float("inf")


def _cells(scenarios):
    return {(s.design.family, s.allocation.n * s.n_clients, s.n_clients, s.mu) for s in scenarios}


def test_min_rows_keeps_the_cells_with_enough_rows_per_site_and_their_seeds():
    full = coverage_scenarios()
    kept = coverage_scenarios(min_rows=200, mus=(1.0, 2.0))
    # N / m: 2000 / 10 = 200, 2000 / 50 = 40, 20000 / 10 = 2000, 20000 / 50 = 400
    assert _cells(kept) == {(f, N, m, mu) for f in ("logistic", "poisson") for N, m in ((2000, 10), (20000, 10),
                                                                                       (20000, 50)) for mu in (1.0, 2.0)}
    # the same scenario keys as in the full grid: the runner seeds replicates by key, so the kept cells' replicates
    # are those of the full study
    assert {s.key for s in kept} <= {s.key for s in full}
    assert _cells(coverage_scenarios(min_rows=0)) == _cells(full)
    # a cell that is left out need not split equally
    assert _cells(coverage_scenarios(totals=(2000,), clients=(10, 3000), min_rows=200, mus=(INF,))) == {
        (f, 2000, 10, INF) for f in ("logistic", "poisson")}
    with pytest.raises(ValueError, match="min_rows"):
        coverage_scenarios(min_rows=-1)


def test_the_flag_reaches_the_config_and_an_empty_selection_is_an_error(tmp_path, capsys):
    study = find_study("coverage")
    ns = study_parser(study).parse_args(["--min-rows-per-site", "200", "--mu", "1,2", "--reps", "500"])
    config = study.configure(**{k: v for k, v in vars(ns).items() if k not in ("out", "no_progress")})
    assert (config.min_rows, config.mus, config.reps) == (200, (1.0, 2.0), 500)
    with pytest.raises(SystemExit):
        main(["reproduce", "coverage", "--min-rows-per-site", "5000", "--out", str(tmp_path), "--no-progress"])
    assert "--min-rows-per-site 5000" in capsys.readouterr().err
