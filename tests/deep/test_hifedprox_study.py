"""The HiFedProx exponent study and ``privfedstat reproduce hifedprox`` at a tiny offline scale."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from privfedstat.cli import main  # noqa: E402
from privfedstat.deep import TensorFederatedData  # noqa: E402
from privfedstat.deep.hifedprox_study import RECORD_COLUMNS, ROUND_COLUMNS, HiFedProxConfig, stressed_data  # noqa: E402

torch.set_num_threads(1)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def test_stressed_clients_have_their_training_labels_shifted():
    data = TensorFederatedData(torch.zeros(7, 2), torch.tensor([0, 1, 9, 3, 9, 5, 6]), [0, 3, 5, 7])
    out = stressed_data(data, np.array([0, 2]), 10)
    assert out.targets.tolist() == [1, 2, 0, 3, 9, 6, 7] and data.targets.tolist()[0] == 0


def test_settings_are_checked():
    with pytest.raises(ValueError, match="conditions"):
        HiFedProxConfig(conditions=("calm",))
    with pytest.raises(ValueError, match="n_stressed"):
        HiFedProxConfig(n_writers=10, n_stressed=12)


def test_reproduce_hifedprox_writes_tables_and_figures(tmp_path, capsys):
    code = main(["reproduce", "hifedprox", "--rounds", "2", "--powers", "2,8", "--seeds", "3001,3002", "--clients",
                 "20", "--threads", "1", "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Table II" in printed and "Table III" in printed and "digits-standin" in printed
    records = pd.read_csv(tmp_path / "hifedprox-records.csv")
    rounds = pd.read_csv(tmp_path / "hifedprox-rounds.csv")
    assert set(RECORD_COLUMNS) <= set(records.columns) and set(ROUND_COLUMNS) <= set(rounds.columns)
    assert len(records) == 2 * 3 * 2 and len(rounds) == 2 * len(records)
    assert records["line_search_failures"].eq(0).all() and records["armijo_trials"].gt(0).all()
    assert records.loc[records.condition == "clean", "stress_ratio"].isna().all()
    assert records.loc[records.condition != "clean", "stress_ratio"].gt(0).all()
    # paired: within a seed the stressed runs take more local steps, hence more trials, than the clean ones
    trials = records.pivot_table(index=["seed", "p"], columns="condition", values="armijo_trials")
    assert (trials["severe"] > trials["clean"]).all()
    table2 = pd.read_csv(tmp_path / "hifedprox-table2.csv", index_col="p")
    assert list(table2.index) == [2.0, 8.0] and "severe_loss" in table2
    for suffix in ("-table3.csv", "-comparisons.csv", "-diagnostics.csv", ".md", ".png"):
        assert (tmp_path / f"hifedprox{suffix}").stat().st_size > 0
