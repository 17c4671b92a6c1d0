"""``privfedstat reproduce`` refuses a bad flag naming the flag the user typed, and says what the grid has.

``--reps 0`` said "n_reps must be a positive integer" (no such flag) and ``--m 7`` said "no cell of fig5 has sizes in
None and m in (7,)" (without the values there are)."""

import pytest

from privfedstat.cli import main


@pytest.mark.parametrize(("flag", "value"), [("--reps", "0"), ("--reps", "-3"), ("--jobs", "0")])
def test_a_count_below_one_is_refused_naming_its_flag(flag, value, capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["reproduce", "fig5", "--out", str(tmp_path), "--no-progress", flag, value])
    err = capsys.readouterr().err
    assert f"argument {flag}: must be a positive integer, got '{value}'" in err
    assert "n_reps" not in err and "n_jobs" not in err


def test_a_selection_outside_the_grid_lists_the_grid(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["reproduce", "fig5", "--out", str(tmp_path), "--no-progress", "--reps", "1", "--m", "7"])
    err = " ".join(capsys.readouterr().err.split())
    assert "no cell of fig5 matches --m 7: its --sizes are equal,uniform,lognormal, its --m 25,50,100,200,400." in err
    assert "None" not in err


def test_an_empty_table_is_said_in_words():
    """``privfedstat reproduce fig5 --m 25`` runs one cell per method: its slopes table is empty and printed as
    pandas' "Empty DataFrame / Columns: [...] / Index: []"."""
    import pandas as pd

    from privfedstat.simulations.study import Table, _table_text

    assert _table_text(pd.DataFrame(columns=["method", "slope_mc"])) == "(none: the cells run are too few for this table)"
    assert "Empty DataFrame" not in _table_text(Table(pd.DataFrame(columns=["a"]), "t").frame)
