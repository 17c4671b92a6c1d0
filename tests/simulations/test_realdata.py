"""Section 5.1 pipeline, run offline on scikit-learn's digits (part of the test suite)."""

import numpy as np
import pytest

from privfedstat.simulations.realdata import REALDATA_METHODS, client_split, plot_realdata, realdata_study

pytest.importorskip("sklearn")


def test_client_split():
    rng = np.random.default_rng(0)
    labels = client_split(1797, 8, 200, rng)
    counts = np.bincount(labels)
    assert counts.size == 8 and counts.min() >= 200 and counts.sum() == 1797
    with pytest.raises(ValueError, match="cannot give"):
        client_split(100, 8, 20, rng)


@pytest.mark.slow
def test_digits_binary_study_nine_estimators():
    from privfedstat.data import load_digits

    X, y = load_digits()
    df = realdata_study(X, y, task="binary", n_clients=8, min_size=200, n_splits=1, n_folds=5, step_size=0.5,
                        progress=False)
    assert set(df["method"]) == set(REALDATA_METHODS)
    assert len(df) == 8 * (5 * 2 + 4)  # clients x (5 private methods x 2 mu + 4 non-private)
    med = df.groupby(["method", "mu"])["value"].median()
    pooled = med[("NP-Pooled", float("inf"))]
    assert pooled > 0.95
    for m in ("FedSGD", "FedAvg", "FedHybrid", "DP-SCAFFOLD"):  # degrade gracefully with privacy
        assert med[(m, 6.0)] > pooled - 0.03
        assert med[(m, 2.0)] > pooled - 0.05
    assert med[("NP-FedAvg", float("inf"))] > pooled - 0.02
    fig = plot_realdata(df)
    assert len(fig.axes) == 2


@pytest.mark.slow
def test_digits_multiclass_runs(tmp_path):
    from privfedstat.cli import main

    # one private mu (the binary study above runs two): every estimator still fits the ten classes
    assert main(["reproduce", "mnist-logistic", "--dataset", "digits", "--task", "multiclass", "--splits", "1",
                 "--mus", "6", "--out", str(tmp_path), "--no-progress"]) == 0
    import pandas as pd

    df = pd.read_csv(tmp_path / "mnist-logistic-digits-multiclass.csv")
    assert (df["metric"] == "accuracy").all()
    med = df.groupby("method")["value"].median()
    assert set(med.index) == set(REALDATA_METHODS)
    assert med["NP-Pooled"] > 0.9 and med["NP-FedAvg"] > 0.85
    assert (tmp_path / "mnist-logistic-digits-multiclass.png").exists()


def test_mnist_needs_data_dir(tmp_path):
    from privfedstat.cli import main

    with pytest.raises(SystemExit):
        main(["reproduce", "mnist-logistic", "--data-dir", str(tmp_path), "--no-progress"])
