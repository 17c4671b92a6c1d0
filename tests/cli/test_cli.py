import subprocess
import sys

from privfedstat.cli import demo, main


def test_demo_table():
    table = demo(reps=2, n_clients=20, n_per_client=200, mu=2.0, seed=1)
    assert list(table.index) == ["FedSGD", "FedHybrid", "FedAvg", "FedNewton"]
    assert (table["mse"] > 0).all() and (table["mse"] < 0.5).all()
    assert table.loc["FedSGD", "rounds"] == 56  # 50 gradient rounds + 6 private clip queries


def test_main_prints(capsys):
    assert main(["demo", "--reps", "1", "--clients", "6", "--n", "60"]) == 0
    out = capsys.readouterr().out
    assert "FedNewton" in out and "mse" in out


def test_python_dash_m():
    r = subprocess.run([sys.executable, "-m", "privfedstat", "demo", "--reps", "1", "--clients", "6", "--n", "60"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "FedHybrid" in r.stdout
