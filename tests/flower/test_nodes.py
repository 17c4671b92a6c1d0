"""Flower nodes without processes: their seeds, their config and CSV files, the demo command's checks, polling, and
errors that stay on the node."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from _fakegrid import FakeGrid

from privfedstat import FedIRLS, FedSGD
from privfedstat.data.federated import FederatedData
from privfedstat.flower.client import ClientNode, demo_dataset, load_node, load_partition
from privfedstat.flower.proxy import fit_on_grid

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

def _nodes(data: FederatedData, seed: int | None = 5, **wrap) -> dict:
    return {1000 + 17 * i: wrap.get(i, ClientNode(FederatedData.from_arrays([data.client(i)]), i, seed))
            for i in range(data.n_clients)}


def test_nodes_seed_themselves_from_fresh_entropy_unless_a_simulation_seed_is_given():
    data = demo_dataset("synthetic-logistic", 3)
    params = dict(mu=2.0, n_iter=3, clip=1.0, inference=None, random_state=5)
    a = fit_on_grid(FedSGD(**params), FakeGrid(_nodes(data, None))).coef_
    b = fit_on_grid(FedSGD(**params), FakeGrid(_nodes(data, None))).coef_
    assert np.max(np.abs(a - b)) > 1e-6
    one, index, seed = load_partition({"dataset": "synthetic-logistic", "partition-id": 2, "num-partitions": 3})
    assert index == 2 and seed is None and one.n_clients == 1
    np.testing.assert_array_equal(one.X, data.client(2)[0])
    with pytest.raises(ValueError, match="partition-id"):
        load_partition({"dataset": "synthetic-logistic", "partition-id": 3, "num-partitions": 3})
    with pytest.raises(ValueError, match="unknown dataset"):
        demo_dataset("nope", 2)


def test_a_network_fit_on_nodes_built_from_their_config_matches_in_process_bitwise(capsys):
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from privfedstat import AutoClip
    from privfedstat.deep import DeepFedAvg
    from privfedstat.deep.models import DigitsCNN

    torch.manual_seed(0)
    params = dict(model=DigitsCNN(), mu=2.0, n_rounds=2, n_local_steps=2, step_size=0.3, clip=AutoClip(),
                  participation=0.7, batch_size=32, random_state=7)
    ref = DeepFedAvg(**params).fit(demo_dataset("digits-images", 3))
    configs = [{"dataset": "digits-images", "partition-id": i, "num-partitions": 3, "simulation-seed": 7,
                "model": "DigitsCNN"} for i in range(3)]  # each node's own DigitsCNN: its weights are replaced
    nodes = {900 + i: load_node(c) for i, c in enumerate(configs)}
    est = fit_on_grid(DeepFedAvg(**params), FakeGrid(nodes))
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    assert est.communication_ == ref.communication_ and est.clip_ == ref.clip_
    assert len(est.privacy_.releases) == len(ref.privacy_.releases)
    for a, b in zip(est.privacy_.releases, ref.privacy_.releases):
        assert (a.stage, a.round, a.kind, a.unit, a.sampling_rate) == (b.stage, b.round, b.kind, b.unit, b.sampling_rate)
        np.testing.assert_array_equal(a.sensitivity, b.sensitivity)
        np.testing.assert_array_equal(a.sigma, b.sigma)
    assert est.privacy_.mu == ref.privacy_.mu
    with pytest.raises(TypeError, match="stays on the node"):  # a node without a model refuses a network
        fit_on_grid(DeepFedAvg(**params), FakeGrid({1: ClientNode(*load_partition(configs[0]))}))
    assert "holds no model" in capsys.readouterr().err  # the message is in the node's log only


def test_the_demo_command_refuses_bad_arguments_before_starting_anything(capsys):
    from privfedstat.cli import main

    with pytest.raises(SystemExit):
        main(["flower-demo", "--set", "n_iter"])
    with pytest.raises(SystemExit):
        main(["flower-demo", "--estimator", "nope"])
    assert "nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["flower-demo", "--set", "n_iters=5"])
    err = capsys.readouterr().err
    assert "FedSGD has no parameter 'n_iters' (did you mean 'n_iter'?)" in err and "'step_size'" in err
    assert "__init__" not in err


def test_a_job_entry_names_a_registered_estimator_or_a_network_estimator_with_its_model():

    from privfedstat.flower.app import NETWORK_ESTIMATORS, make_estimator

    est = make_estimator({"estimator": "FedSGD", "params": {"mu": "inf", "n_iter": 3}})
    assert type(est).__name__ == "FedSGD" and est.mu == math.inf and est.n_iter == 3
    with pytest.raises(ValueError, match="name its model"):
        make_estimator({"estimator": "DeepFedAvg", "params": {"mu": 2.0}})
    with pytest.raises(ValueError, match="unknown network estimator"):
        make_estimator({"estimator": "fedsgd", "model": "DigitsCNN"})
    torch = pytest.importorskip("torch")
    from privfedstat import AutoClip, deep
    from privfedstat.deep.models import DigitsCNN

    listed = {n.lower() for n in deep.__all__ if n.startswith("Deep") and isinstance(getattr(deep, n), type)}
    assert listed == set(NETWORK_ESTIMATORS)  # every network estimator can be named in a job
    est = make_estimator({"estimator": "deepfedsgd", "model": "DigitsCNN", "model_seed": 3,
                          "params": {"mu": 2.0, "clip": {"AutoClip": {"quantile": 0.7}}}})
    assert type(est).__name__ == "DeepFedSGD" and isinstance(est.clip, AutoClip) and est.clip.quantile == 0.7
    torch.manual_seed(3)
    ref = DigitsCNN()
    for a, b in zip(est.model.parameters(), ref.parameters()):  # theta^(0) from model_seed, torch's stream untouched
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="unknown model"):
        make_estimator({"estimator": "DeepFedAvg", "model": "Nope"})


def test_the_demo_refuses_an_unknown_model_before_starting_anything(capsys):
    from privfedstat.cli import main

    with pytest.raises(SystemExit):
        main(["flower-demo", "--estimator", "DeepFedAvg", "--model", "Nope"])
    assert "unknown model" in capsys.readouterr().err


def test_a_node_polls_a_few_times_a_round_and_never_longer_than_its_cap():
    from privfedstat.flower.node import Polls

    def rounds(polls, gaps):
        """Simulated clock: asks per round and the delay of each message behind its arrival."""
        asks, delays, now = [], [], 0.0
        for gap in gaps:
            polls.replied(now)
            due, k = now + gap, 0
            while True:
                pause = polls.wait(now)
                assert 0 <= pause <= polls.cap
                now += pause
                k += 1
                if now >= due:
                    break
            polls.arrived(now)
            asks.append(k)
            delays.append((now - due) / gap)
        return np.array(asks), np.array(delays)

    idle = Polls(cap=0.5)
    assert idle.wait(0.0) == 0.5  # before any reply: every cap
    rng = np.random.default_rng(0)
    asks, delays = rounds(Polls(cap=0.5), np.full(200, 0.2))
    assert asks[20:].mean() <= 1.6 and delays[20:].max() <= 0.25  # a steady protocol: ~1.5 asks, <= 1/4 gap late
    asks, delays = rounds(Polls(cap=0.5), 0.2 * rng.uniform(0.5, 1.3, 400))
    assert asks[20:].mean() < 2.0 and np.median(delays[20:]) < 0.35  # gaps varying +-40%
    p = Polls(cap=5.0)
    rounds(p, np.full(50, 0.1))
    g = p.gap
    rounds(p, [30.0])  # one long idle spell between two fits
    assert p.gap <= 2 * g + 1e-12
    asks, _ = rounds(p, np.full(5, 0.1))
    assert asks.max() <= 3  # back to short rounds at once
    with pytest.raises(ValueError):
        Polls(cap=0)


def _breast_cancer_sites(tmp_path, k=3):
    """scikit-learn's breast cancer data as k CSV files, one per site (rows dealt at random)."""
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_breast_cancer

    df = load_breast_cancer(as_frame=True).frame.rename(columns=lambda c: c.replace(" ", "_"))
    df["malignant"] = (df["target"] == 0).astype(float)
    site = np.random.default_rng(0).integers(0, k, len(df))
    paths = []
    for s in range(k):
        path = tmp_path / f"site{s}.csv"
        df.loc[site == s, ["malignant", "mean_radius", "mean_texture", "worst_area"]].to_csv(path, index=False)
        paths.append(str(path))
    return df, site, paths


def test_nodes_serving_their_own_csv_files_equal_the_in_process_fit_with_the_columns_named(tmp_path):

    df, site, paths = _breast_cancer_sites(tmp_path)
    cols = ["mean_radius", "mean_texture"]
    configs = [{"data-file": p, "response": "malignant", "columns": ",".join(cols), "partition-id": i,
                "simulation-seed": 4} for i, p in enumerate(paths)]
    nodes = {700 + i: load_node(c) for i, c in enumerate(configs)}
    est = fit_on_grid(FedIRLS(mu=5.0, random_state=4), FakeGrid(nodes))
    X = [np.column_stack([np.ones((site == s).sum()), df.loc[site == s, cols].to_numpy()]) for s in range(3)]
    ref = FedIRLS(mu=5.0, random_state=4).fit(FederatedData.from_arrays(
        [(x, df.loc[site == s, "malignant"].to_numpy()) for s, x in enumerate(X)]))
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    text = str(est.summary())
    assert "mean_radius" in text and "Intercept" in text
    assert list(est.feature_names_in_) == ["Intercept", *cols] and est.response_name_ == "malignant"
    with pytest.raises(ValueError, match="no column"):  # a node's file lacks a column: said before anything runs
        load_partition(dict(configs[0], columns="mean_radius,nope"))
    other = dict(configs[2], columns="mean_texture,mean_radius")  # same count, other order: refused at the opening
    nodes[702] = load_node(other)
    with pytest.raises(ValueError, match="different columns"):
        fit_on_grid(FedIRLS(mu=5.0, random_state=4), FakeGrid(nodes))


def test_a_nodes_error_message_stays_on_the_node(capsys):
    """Labels outside the family's support on one node: the server raises the error's class, but the
    message (a count of that node's invalid rows) is only in the node's log."""
    data = demo_dataset("synthetic-logistic", 3)
    y = data.y.copy()
    y[data.offsets[1]:data.offsets[1] + 4] = 2.0  # four invalid labels at client 1
    bad = FederatedData.from_pooled(data.X, y, sizes=data.sizes)
    nodes = {800 + i: ClientNode(FederatedData.from_arrays([bad.client(i)]), i) for i in range(3)}
    with pytest.raises(ValueError) as err:
        fit_on_grid(FedSGD(mu=2.0, n_iter=2, clip=1.0, inference=None, random_state=0), FakeGrid(nodes))
    assert "client 1" in str(err.value) and "stays on the node" in str(err.value) and "4 row" not in str(err.value)
    assert "4 row(s)" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the wire from the verb table
