import json
import subprocess
import sys

import pandas as pd
import pytest

from privfedstat.cli import STUDY_MODULES, TORCH_STUDIES, _studies, main, study_parser

pytestmark = pytest.mark.slow


def test_studies_lists_all(capsys):
    assert main(["studies"]) == 0
    out = capsys.readouterr().out
    for name in ("fig1", "fig3", "fig4", "fig5", "fig16", "coverage", "mnist-logistic", "fednmap"):
        assert name in out
    assert "issue" not in out.lower()


def test_the_torch_studies_listed_without_torch_are_the_modules_own():
    """``privfedstat studies`` prints the torch modules' studies from ``TORCH_STUDIES`` (it does not import torch): the
    same names and help, in order, as the modules hold."""
    pytest.importorskip("torch")
    assert set(TORCH_STUDIES) <= set(STUDY_MODULES)
    for module in STUDY_MODULES:
        if module in TORCH_STUDIES or ".deep." in module:
            assert TORCH_STUDIES[module] == tuple((s.name, s.help) for s in _studies(module)), module


def test_listing_the_studies_imports_neither_torch_nor_scipy_stats():
    """``privfedstat studies`` starts fast (benchmarks/RESULTS.md, "Section 4 end to end": its start-up)."""
    code = ("from privfedstat.cli import main; main(['studies']); import sys; "
            "print([m for m in ('torch', 'scipy.stats', 'statsmodels') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120).stdout
    assert "hifedprox" in out and out.strip().splitlines()[-1] == "[]"


def test_every_reproduce_flag_has_help_text(capsys):
    pytest.importorskip("torch")
    studies = [study for module in STUDY_MODULES for study in _studies(module)]
    assert len({s.name for s in studies}) == len(studies) == 23
    for study in studies:
        actions = [a for a in study_parser(study)._actions if a.dest != "help"]
        assert len(actions) > 2 and all(a.help and a.option_strings[0].startswith("--") for a in actions)
    with pytest.raises(SystemExit):
        main(["reproduce", "fednmap", "--help"])
    assert "--local-steps" in capsys.readouterr().out


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


def test_demo_after_an_update_computes_again(tmp_path, capsys):
    """`make demo` after a pull: the folder holds an earlier version's replicates, which a resume refuses to mix
    in; the demo computes them again instead of raising."""
    (tmp_path / "fig5-logistic.csv").write_text("scenario,method,rep\nold,FedAvg,0\n")
    (tmp_path / "fig5-logistic.csv.run.json").write_text(json.dumps({"source": "an earlier version",
                                                                      "random_state": 0, "measure": "mse"}))
    assert main(["demo", "--reps", "1", "--out", str(tmp_path), "--no-progress"]) == 0
    assert "earlier version's replicates: computed again" in capsys.readouterr().out
    assert "old" not in set(pd.read_csv(tmp_path / "fig5-logistic.csv")["scenario"])


def test_reproduce_coverage_writes_csv_summary_png_and_resumes(tmp_path, capsys):
    args = ["reproduce", "coverage", "--family", "logistic", "--mu", "1", "--reps", "2", "--out", str(tmp_path),
            "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "cover" in out and "FedNewton" in out and "PooledMLE" in out and "verdict" in out and "sd_se" in out
    df = pd.read_csv(tmp_path / "coverage.csv")
    # 4 cells (N in {2000, 20000} x m in {10, 50}) x 2 replicates x 5 methods x 5 coefficients
    assert len(df) == 4 * 2 * 5 * 5 and set(df["family"]) == {"logistic"} and set(df["mu"]) == {1.0}
    summary = pd.read_csv(tmp_path / "coverage-summary.csv")
    assert len(summary) == 4 * 5 and (summary["reps"] == 2).all()
    assert (tmp_path / "coverage.png").stat().st_size > 10_000
    assert main(args) == 0  # resumes: nothing new
    assert len(pd.read_csv(tmp_path / "coverage.csv")) == len(df)


def test_reproduce_coverage_refuses_a_clip():
    with pytest.raises(SystemExit):
        main(["reproduce", "coverage", "--clip", "2", "--reps", "1"])


def test_version(capsys):
    import privfedstat

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"privfedstat {privfedstat.__version__}"
