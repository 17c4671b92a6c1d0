"""The Section 5.2 CNN study (offline digits variant) and its CLI."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from deep_fixtures import one_torch_thread  # noqa: E402,F401

from privfedstat.cli import main  # noqa: E402
from privfedstat.deep.cnn_study import (  # noqa: E402
    CNN_METHODS,
    PRESETS,
    cnn_methods,
    cnn_study,
    plot_cnn_study,
    summarise_cnn,
)
from privfedstat.deep.study import load_cnn_data  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

TINY = replace(PRESETS["digits"], n_rounds=2, n_local_steps=2, n_cycles=2, clients_scenario1=3,
               sizes_scenario1=(20, 40), clients_scenario2=(12,))


def test_presets_hold_the_papers_settings():
    mnist, cifar = PRESETS["mnist"], PRESETS["cifar"]
    def settings(p):
        return p.n_rounds, p.n_local_steps, p.step_size, p.server_step_size, p.clip

    assert settings(mnist) == (10, 10, 0.01, 1.0, 1.0) and settings(cifar) == (10, 30, 0.005, 0.75, 0.75)
    for p in (mnist, cifar):
        assert p.participation == 0.1 and p.clients_scenario1 == 100 and p.n_cycles == 2
        assert p.clients_scenario2 == (100, 200, 300, 500, 800, 1000) and p.reps == (5, 4)
    assert max(mnist.sizes_scenario1) == 600 and max(cifar.sizes_scenario1) == 500


def test_methods_are_compute_matched():
    study = PRESETS["mnist"]
    model = torch.nn.Module()
    methods = cnn_methods(study, model, 2.0, 0)
    assert tuple(methods) == CNN_METHODS
    assert methods["DP-FedSGD"].n_iter == 100
    assert methods["DP-FedHybrid"].n_local_steps + methods["DP-FedHybrid"].n_server_iter == 100
    newton = methods["DP-FedNewton-Iter"]
    assert (newton.n_cycles, newton.n_rounds, newton.n_local_steps) == (2, 5, 10)
    with pytest.raises(ValueError, match="split the 10 base rounds"):
        cnn_methods(replace(study, n_cycles=3), model, 2.0, 0)


def test_digits_data():
    (X, y), (Xt, yt) = load_cnn_data("digits")
    assert X.shape == (1437, 1, 8, 8) and Xt.shape == (360, 1, 8, 8) and X.dtype == np.float32
    assert len(y) == 1437 and len(yt) == 360
    with pytest.raises(ValueError, match="--data-dir"):
        load_cnn_data("mnist")


def test_tiny_digits_study_table_and_figure():
    train, test = load_cnn_data("digits")
    df = cnn_study(replace(TINY, mus=(2.0, math.inf), reps=(1, 1), seed=3), train, test, progress=False)
    assert len(df) == (2 + 1) * 2 * 4
    assert set(df["method"]) == set(CNN_METHODS)
    assert df["accuracy"].between(0, 1).all()
    s1 = df[df["scenario"] == 1]
    assert set(s1["n_per_client"]) == {20.0, 40.0} and set(s1["n_clients"]) == {3}
    assert set(df.loc[df["scenario"] == 2, "n_per_client"]) == {1437 / 12}
    rounds = df.groupby("method")["rounds"].max()
    assert rounds["DP-FedSGD"] == 4 and rounds["DP-FedAvg"] == 2 and rounds["DP-FedNewton-Iter"] == 4
    table = summarise_cnn(df)
    assert list(table.columns) == list(CNN_METHODS) and len(table) == 3 * 2
    fig = plot_cnn_study(df, scenario=1, mu=2.0)
    assert len(fig.axes[0].lines) == 4
    with pytest.raises(ValueError, match="scenario 3"):
        plot_cnn_study(df, scenario=3)
    # the same seed gives the same numbers
    again = cnn_study(replace(TINY, mus=(2.0,), scenarios=(1,), reps=(1, 1), seed=3), train, test, progress=False)
    pd.testing.assert_series_equal(again["accuracy"], df.loc[(df["scenario"] == 1) & (df["mu"] == 2.0), "accuracy"]
                                   .reset_index(drop=True))


def test_cli_cnn_digits(tmp_path, capsys):
    assert main(["reproduce", "cnn-digits", "--scenario", "1", "--sizes", "20", "--reps", "1", "--mu", "2",
                 "--rounds", "2", "--local-steps", "2", "--clients-scenario1", "3", "--out", str(tmp_path),
                 "--no-progress", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "DP-FedNewton-Iter" in out and "median test accuracy" in out
    df = pd.read_csv(tmp_path / "cnn-digits.csv")
    assert len(df) == 4 and set(df["mu"]) == {2.0}
    assert (tmp_path / "cnn-digits.png").stat().st_size > 5_000


def test_cli_cnn_mnist_needs_data(tmp_path):
    with pytest.raises(SystemExit):
        main(["reproduce", "cnn-mnist", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["reproduce", "cnn-cifar", "--data-dir", str(tmp_path), "--out", str(tmp_path)])


def _write_mnist(folder, n_train=40, n_test=10):
    """MNIST IDX files (unsigned bytes) with random images."""
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        for kind, arr in (("images-idx3", rng.integers(0, 256, (n, 28, 28))), ("labels-idx1", rng.integers(0, 10, n))):
            head = ((0x08 << 8) | arr.ndim).to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
            (folder / f"{prefix}-{kind}-ubyte").write_bytes(head + arr.astype(np.uint8).tobytes())


def _write_cifar(folder, n_train=8, n_test=10):
    """CIFAR-10 python pickle batches with random images."""
    import pickle

    rng = np.random.default_rng(1)
    folder.mkdir()
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = n_test if name == "test_batch" else n_train
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": rng.integers(0, 10, n).tolist()}
        (folder / name).write_bytes(pickle.dumps(batch))


@pytest.mark.parametrize("dataset", ["mnist", "cifar"])
def test_paper_networks_run_from_files(tmp_path, dataset):
    """cnn-mnist / cnn-cifar read the real file formats from --data-dir and run every method (tiny scale)."""
    (_write_mnist if dataset == "mnist" else _write_cifar)(tmp_path / ("" if dataset == "mnist" else
                                                                       "cifar-10-batches-py"))
    train, test = load_cnn_data(dataset, tmp_path)
    assert train[0].shape[0] == 40 and test[0].shape[0] == 10
    tiny = replace(PRESETS[dataset], n_rounds=2, n_local_steps=1, participation=0.5, clients_scenario1=2,
                   sizes_scenario1=(5,))
    df = cnn_study(replace(tiny, mus=(2.0,), scenarios=(1,), reps=(1, 1)), train, test, progress=False)
    assert len(df) == 4 and df["accuracy"].between(0, 1).all()
