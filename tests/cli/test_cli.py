import subprocess
import sys

import pandas as pd
import pytest

from privfedstat.cli import main


def test_studies_lists_all(capsys):
    assert main(["studies"]) == 0
    out = capsys.readouterr().out
    for name in ("fig1", "fig3", "fig4", "fig5", "fig16"):
        assert name in out


def test_reproduce_writes_csv_png_and_summary(tmp_path, capsys):
    assert main(["reproduce", "fig5", "--family", "poisson", "--reps", "1", "--jobs", "1", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "FedNewton" in out and "mean_mse" in out and "lognormal" in out
    df = pd.read_csv(tmp_path / "fig5-poisson.csv")
    assert len(df) == 15 * 4 and set(df["family"]) == {"poisson"}
    assert (tmp_path / "fig5-poisson.png").stat().st_size > 10_000
    # rerunning resumes: nothing new is computed, the table is the same
    assert main(["reproduce", "fig5", "--family", "poisson", "--reps", "1", "--out", str(tmp_path), "--no-progress"]) == 0
    assert len(pd.read_csv(tmp_path / "fig5-poisson.csv")) == 60


def test_reproduce_unknown_study():
    with pytest.raises(SystemExit):
        main(["reproduce", "fig99", "--reps", "1"])


def test_demo_via_python_dash_m(tmp_path):
    r = subprocess.run([sys.executable, "-m", "privfedstat", "demo", "--reps", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "FedHybrid" in r.stdout and (tmp_path / "fig5-logistic.png").exists()
