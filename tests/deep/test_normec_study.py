"""The Fed-alpha-NormEC study at a tiny scale: tidy results, summary, figure, CLI."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from privfedstat.deep import normec_study as ns  # noqa: E402
from privfedstat.deep.study import load_cnn_data  # noqa: E402

torch.set_num_threads(1)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def tiny(**kw):
    return replace(ns.NORMEC_PRESETS["digits"], n_clients=4, n_rounds=4, betas=(0.01, 0.1), gammas=(0.3,),
                   participations=(0.5, 1.0), eval_every=2, **kw)


def test_tiny_study_tidy_summary_and_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    train, test = load_cnn_data("digits")
    train = (train[0][:200], train[1][:200])
    df = ns.normec_study(tiny(seed=1), train, (test[0][:100], test[1][:100]))
    assert set(df.method) == set(ns.NORMEC_METHODS) and len(df) == 2 * 2 * 2 * 3
    assert np.allclose(df.communications, df["round"] * df.p * 4)
    assert np.all(df.epsilon <= 8.0 + 1e-6) and np.all(df.sigma > 0) and df.accuracy.between(0, 1).all()
    # the same seed gives the same numbers; sigma_DP shrinks with p (amplification)
    again = ns.normec_study(tiny(seed=1), train, (test[0][:100], test[1][:100]))
    assert df.equals(again)
    sig = df.groupby("p").sigma.first()
    assert sig[0.5] < sig[1.0]
    table = ns.summarise_normec(df)
    assert len(table) == 2 * 2 * 2 and set(table.columns) >= {"final_accuracy", "best_gamma", "comms_to_target"}
    fig = ns.plot_normec_study(df)
    fig.savefig(tmp_path / "f.png")


def test_tiny_study_on_a_network():
    """The torch backend (the cifar preset's path) with the digits CNN: same tidy table, the network's parameters."""
    from privfedstat.deep.models import DigitsCNN

    train, test = load_cnn_data("digits")
    study = tiny(model=DigitsCNN, batch_size=8)
    df = ns.normec_study(replace(study, betas=(0.1,), participations=(1.0,), seed=1), (train[0][:80], train[1][:80]),
                         (test[0][:50], test[1][:50]))
    assert len(df) == 2 * 3 and df.accuracy.between(0, 1).all() and np.all(df.epsilon <= 8.0 + 1e-6)


def test_the_network_preset_runs_hundreds_of_clients():
    """The digits-cnn preset (DigitsCNN, M >= 200) for one round on 400 images: 200 clients of two images."""
    from privfedstat.deep.models import DigitsCNN

    preset = ns.NORMEC_PRESETS["digits-cnn"]
    assert preset.model is DigitsCNN and preset.n_clients >= 200
    train, test = load_cnn_data("digits")
    study = replace(preset, n_clients=200, n_rounds=1, betas=(0.01,), gammas=(0.1,), eval_every=1, seed=2)
    df = ns.normec_study(study, (train[0][:400], train[1][:400]), (test[0][:50], test[1][:50]))
    assert len(df) == 2 * 2 and df.accuracy.between(0, 1).all() and np.all(df.epsilon <= 8.0 + 1e-6)


def test_the_glm_backend_logits_are_the_multinomial_models():
    """The digits preset's GLM: Theta (65 x 9, class 0 the reference) on an intercept and the 64 pixels."""
    study = ns.NORMEC_PRESETS["digits"]
    assert study.model is None and study.n_clients >= 300
    X = np.random.default_rng(0).random((5, 1, 8, 8)).astype(np.float32)
    theta = np.random.default_rng(1).standard_normal(65 * 9)
    z = ns._logits(study, 0, X)(theta).numpy()
    rows = np.column_stack([np.ones(5), X.reshape(5, -1).astype(np.float64)])
    np.testing.assert_allclose(z, np.column_stack([np.zeros(5), rows @ theta.reshape(65, 9)]), rtol=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="methods must be among"):
        ns.normec_study(tiny(), None, None, methods=("SGD",))


def test_cli(tmp_path, monkeypatch, capsys):
    from privfedstat import cli

    (X, y), (Xt, yt) = load_cnn_data("digits")
    monkeypatch.setattr(ns, "load_cnn_data", lambda *a, **k: ((X[:120], y[:120]), (Xt[:60], yt[:60])))
    assert cli.main(["reproduce", "normec-digits", "--out", str(tmp_path), "--clients", "3", "--no-progress",
                     "--rounds", "4", "--eval-every", "2", "--threads", "1", "--betas", "0.01", "--gammas", "1,3",
                     "--participations", "1"]) == 0
    assert (tmp_path / "normec-digits.csv").exists() and (tmp_path / "normec-digits.png").exists()
    assert "final_accuracy" in capsys.readouterr().out
    df = pd.read_csv(tmp_path / "normec-digits.csv")
    assert set(df.beta) == {0.01} and set(df.gamma) == {1.0, 3.0} and set(df.p) == {1.0}
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "normec-digits", "--out", str(tmp_path), "--gammas", "one"])
