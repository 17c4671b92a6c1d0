"""privfedstat on a real Flower deployment: a SuperLink and SuperNodes as separate processes on 127.0.0.1.

One seeded federation (3 nodes, ``simulation-seed=5``) runs several estimators in one Flower run
and must equal the in-process fits to 1e-12 (coefficients and ledger); in a second run two of its
nodes' processes die mid-fit (SIGKILL, at a set request: tests/flower/_apps.py), under each
failure policy, and the skipped fit equals the in-process fit with that client failing there. A
second federation (one node, no seed: OS entropy) shows that a restarted run draws fresh noise
and that a client sending an oversized reply is refused. tests/flower/test_wire.py covers every
registered estimator without processes.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privfedstat.algorithms.registry import get_method
from privfedstat.federation import FailingData
from privfedstat.flower.app import make_estimator
from privfedstat.flower.client import demo_dataset
from privfedstat.flower.launch import LocalFederation

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

#: one fit per protocol family: record-level gradient (with the job's default private scaling, and the inference
#: releases and their private Hessian bound search), sample-split Newton, control variates, client-level, error
#: feedback; the private scaling (21 rounds per column, the same stage for every record-level estimator) runs once
FITS = [
    {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 4, "clip": 1.0, "random_state": 5}},
    {"estimator": "fednewton", "params": {"mu": 2.0, "n_local_steps": 2, "clip": 2.0, "hessian_clip": 2.0,
                                          "inference": None, "scaling": None, "random_state": 5}},
    {"estimator": "scaffold", "params": {"mu": 2.0, "n_rounds": 2, "n_local_steps": 2, "clip": 2.0, "inference": None,
                                         "scaling": None, "random_state": 5}},
    {"estimator": "dpfedavg", "params": {"mu": 2.0, "n_rounds": 2, "n_local_steps": 2, "random_state": 5}},
    {"estimator": "fednormec", "params": {"mu": 2.0, "n_rounds": 2, "random_state": 5}},
]


@pytest.fixture(scope="module")
def apps_on_path():
    mp = pytest.MonkeyPatch()  # the nodes import tests/flower/_apps.py
    mp.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def seeded(apps_on_path):
    with LocalFederation(3, simulation_seed=5, client_apps={1: "_apps:die_at_11", 2: "_apps:die_at_3"}) as fed:
        yield fed


def test_fits_on_flower_equal_the_in_process_fits(seeded):
    data = demo_dataset("synthetic-logistic", 3)
    results = seeded.run(FITS, timeout=300)
    for fit, res in zip(FITS, results):
        assert "error" not in res, res.get("trace")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ref = make_estimator(fit).fit(data)  # as the job builds it: private scaling by default
        assert res["warnings"] == [(w.category.__name__, str(w.message)) for w in seen]  # the fit says the same
        np.testing.assert_allclose(res["coef"], ref.coef_, rtol=0, atol=1e-12)
        assert res["communication"] == ref.communication_
        mine, theirs = res["privacy"].releases, ref.privacy_.releases
        assert [(r.stage, r.round, r.kind) for r in mine] == [(r.stage, r.round, r.kind) for r in theirs]
        for a, b in zip(mine, theirs):
            np.testing.assert_allclose(a.sigma, b.sigma, rtol=0, atol=1e-12)
            np.testing.assert_allclose(a.sensitivity, b.sensitivity, rtol=0, atol=1e-12)
        np.testing.assert_allclose(res["privacy"].client_mu, ref.privacy_.client_mu, rtol=0, atol=1e-12)
        assert "Privacy" in res["summary"] or "mu" in res["summary"]


def test_a_client_killed_mid_fit_raises_or_is_skipped(seeded):
    # node 2's process dies at its 3rd gradient request of fit 0; fit 1 waits out the dead node 2 at its
    # opening request (it then sits out) and loses node 1 at node 1's 3rd gradient request of fit 1
    mortal = {"mu": 2.0, "n_iter": 8, "clip": 0.75, "inference": None, "random_state": 5, "scaling": None}
    fits = [{"estimator": "fedsgd", "params": dict(mortal, on_client_failure="skip")},
            {"estimator": "fedsgd", "params": dict(mortal, on_client_failure="raise")}]
    skipped, raised = seeded.run(fits, timeout=300, reply_timeout=3.0)
    assert "error" not in skipped, skipped.get("trace")
    mu = skipped["privacy"].client_mu
    assert np.all(np.isfinite(skipped["coef"])) and 0 < mu[2] < 2.0 - 1e-9  # it sent two gradients, then died
    np.testing.assert_allclose(mu[:2], 2.0, rtol=0, atol=1e-12)
    ref = get_method("fedsgd").cls(**dict(mortal, on_client_failure="skip")).fit(
        FailingData(demo_dataset("synthetic-logistic", 3), {2: 2}))  # in-process: client 2 dies at request 2
    np.testing.assert_allclose(skipped["coef"], ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mu, ref.privacy_.client_mu, rtol=0, atol=1e-12)
    assert raised["error"][0] == "ClientFailureError" and "[1]" in raised["error"][1]


@pytest.fixture(scope="module")
def unseeded(apps_on_path):
    with LocalFederation(1, client_apps={0: "_apps:rogue"}) as fed:
        yield fed


def test_a_restarted_run_draws_fresh_noise_and_an_oversized_reply_is_refused(unseeded):
    fixed = {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 2, "clip": 1.0, "inference": None,
                                               "random_state": 5, "scaling": None}}
    first = unseeded.run([fixed], timeout=300)[0]
    again, searched = unseeded.run([fixed, {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 2, "scaling": None,
                                                                             "random_state": 5}}], timeout=300)
    assert "error" not in first and "error" not in again
    assert np.max(np.abs(first["coef"] - again["coef"])) > 1e-6  # same random_state, new noise on the clients
    assert math.isfinite(first["coef"][0])
    assert searched["error"][0] == "MalformedReplyError" and "expected float64 of shape (1,)" in searched["error"][1]


def test_a_federation_whose_every_node_omits_its_release_records_is_refused(unseeded):
    """The one node (so every node) sends its noisy gradients without their release records: the ServerApp refuses
    the fit, where it used to accept it with a ledger of mu 0 against the declared 2."""
    fit = {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 2, "clip": 0.5, "inference": None, "scaling": None}}
    res = unseeded.run([fit], timeout=300)[0]
    assert res["error"][0] == "MalformedReplyError"
    assert "reports 0 release record(s) for 'gradients'; its request runs 1" in res["error"][1]


def test_a_network_job_on_node_processes_equals_the_in_process_fit():
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from privfedstat.flower.app import make_estimator

    fit = {"estimator": "DeepFedAvg", "model": "DigitsCNN", "model_seed": 0,
           "params": {"mu": 2.0, "n_rounds": 2, "n_local_steps": 2, "step_size": 0.3, "clip": {"AutoClip": {}},
                      "participation": 0.7, "batch_size": 32, "random_state": 7}}
    with LocalFederation(3, dataset="digits-images", model="DigitsCNN", simulation_seed=7) as fed:
        res = fed.run([fit], timeout=300)[0]
    assert "error" not in res, res.get("trace")
    ref = make_estimator(fit).fit(demo_dataset("digits-images", 3))
    np.testing.assert_allclose(res["coef"], ref.coef_, rtol=0, atol=1e-12)
    assert res["communication"] == ref.communication_
    mine, theirs = res["privacy"].releases, ref.privacy_.releases
    assert [(r.stage, r.round, r.kind, r.unit) for r in mine] == [(r.stage, r.round, r.kind, r.unit) for r in theirs]
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a.sigma, b.sigma, rtol=0, atol=1e-12)
        np.testing.assert_allclose(a.sensitivity, b.sensitivity, rtol=0, atol=1e-12)
    assert "DigitsCNN" in res["summary"]


def _cancer_sites(tmp_path, response: str, cols: list[str], seed: int):
    """scikit-learn's breast cancer rows dealt at random over 3 sites: one CSV file per site (``response`` and
    ``cols``, ``malignant`` the diagnosis) and the same rows in process (an intercept and ``cols``)."""
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_breast_cancer

    from privfedstat import FederatedData

    df = load_breast_cancer(as_frame=True).frame.rename(columns=lambda c: c.replace(" ", "_"))
    df["malignant"] = (df["target"] == 0).astype(float)
    site = np.random.default_rng(seed).integers(0, 3, len(df))
    paths = [tmp_path / f"site{s}.csv" for s in range(3)]
    for s, path in enumerate(paths):
        df.loc[site == s, [response, *cols]].to_csv(path, index=False)
    data = FederatedData.from_arrays([(np.column_stack([np.ones((site == s).sum()), df.loc[site == s, cols]]),
                                       df.loc[site == s, response].to_numpy()) for s in range(3)])
    return paths, data


def test_nodes_serving_their_own_csv_files(tmp_path):
    """Each node reads its own CSV file (scikit-learn's breast cancer dealt over 3 sites); the job's
    FedIRLS (private scaling by default) equals the in-process fit on the same rows, with the columns
    named; a node whose file lacks a column makes the fit fail (its error's class on the server, its message,
    which may describe the site's data, only in the node's log)."""
    import pandas as pd

    cols = ["mean_radius", "mean_texture"]
    paths, data = _cancer_sites(tmp_path, "malignant", cols, seed=0)
    fit = {"estimator": "fedirls", "params": {"mu": 2.0, "n_rounds": 3, "random_state": 3}}
    with LocalFederation(3, data_files=paths, response="malignant", simulation_seed=3) as fed:
        res = fed.run([fit], timeout=300)[0]
    assert "error" not in res, res.get("trace")
    ref = make_estimator(fit).fit(data)
    np.testing.assert_allclose(res["coef"], ref.coef_, rtol=0, atol=1e-12)
    assert "mean_radius" in res["summary"] and "Intercept" in res["summary"]
    pd.DataFrame({"malignant": [0.0, 1.0], "mean_radius": [10.0, 20.0]}).to_csv(paths[2], index=False)
    with LocalFederation(3, data_files=paths, response="malignant", columns=cols) as fed:
        res = fed.run([fit], timeout=300)[0]
        log = (fed.dir / "node2.log").read_text()
    assert res["error"][0] == "ValueError" and "stays on the node" in res["error"][1]
    assert "no column(s) ['mean_texture']" in log and "mean_texture" not in res["error"][1]  # the details stay there


def test_a_located_huber_response_on_flower_equals_the_in_process_fit(tmp_path):
    """A response far from 0 (breast cancer's mean radius, about 14, 4 residual sds) with the Huber family: the private scaling
    locates it, so the nodes fit ``y / s`` with the threshold ``c / s`` and the server's family follows (the rescale
    verb); the Flower fit equals the in-process fit, ledger included."""
    paths, data = _cancer_sites(tmp_path, "mean_radius", ["mean_texture", "mean_smoothness"], seed=1)
    fit = {"estimator": "fedirls", "params": {"family": "huber", "mu": 4.0, "random_state": 2}}
    with LocalFederation(3, data_files=paths, response="mean_radius", simulation_seed=2) as fed:
        res = fed.run([fit], timeout=300)[0]
    assert "error" not in res, res.get("trace")
    ref = make_estimator(fit).fit(data)
    assert ref.scaler_.response_scale > 2.0 and ref.converged_  # located (the nodes fit c / s), and converged
    np.testing.assert_allclose(res["coef"], ref.coef_, rtol=0, atol=1e-9)
    assert [(r.stage, r.round) for r in res["privacy"].releases] == [(r.stage, r.round) for r in ref.privacy_.releases]
    assert any(r.stage == "scaling-y" for r in ref.privacy_.releases)


def test_a_federation_over_tls_with_authenticated_nodes_equals_the_in_process_fit():
    """Every connection over TLS (a throwaway CA, the SuperLink serving with its certificate, nodes and flwr
    verifying it) and SuperNode authentication (registered public keys), as on several machines: the fit is
    the same; the SuperLink's port speaks TLS; a node whose key was not registered is refused."""
    import socket
    import ssl
    import sys
    import time

    fit = {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 5, "clip": 1.0, "inference": None, "scaling": None,
                                             "random_state": 5}}
    with LocalFederation(2, simulation_seed=5, tls=True, authenticate=True) as fed:
        res = fed.run([fit], timeout=300)[0]
        with socket.create_connection(("127.0.0.1", fed.port), timeout=10) as raw:
            with ssl.create_default_context(cafile=str(fed.ca)).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")  # verified against the federation's CA
        key = fed.register_key("intruder", register=False)
        intruder = fed._spawn("intruder", [sys.executable, "-m", "privfedstat.flower.node", "--root-certificates",
                                           str(fed.ca), "--superlink", fed.address, "--auth-supernode-private-key",
                                           str(key), "--node-config",
                                           'dataset="synthetic-logistic" partition-id=1 num-partitions=2'])
        fed.nodes.append(intruder)  # stopped with the others whatever happens
        deadline = time.monotonic() + 60
        while intruder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert intruder.returncode not in (None, 0) and fed._connected() == 2
        assert "Failed to activate SuperNode" in (fed.dir / "intruder.log").read_text()
    assert "error" not in res, res.get("trace")
    ref = make_estimator(fit).fit(demo_dataset("synthetic-logistic", 2))
    np.testing.assert_allclose(res["coef"], ref.coef_, rtol=0, atol=1e-12)
