"""privfedstat on a real Flower deployment: a SuperLink and SuperNodes as separate processes on 127.0.0.1.

One seeded federation (3 nodes, ``simulation-seed=5``) runs several estimators in one Flower run
and must equal the in-process fits to 1e-12 (coefficients and ledger); the same federation then
loses a node mid-fit (SIGKILL) under each failure policy. A second federation (no seed: OS
entropy) shows that a restarted run draws fresh noise and that a client sending an oversized
reply is refused. tests/flower/test_wire.py covers every registered estimator without processes.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privfedstat.estimators.registry import get_method
from privfedstat.flower.client import demo_dataset
from privfedstat.flower.launch import LocalFederation

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

#: one fit per protocol family: record-level gradient (with the inference releases and their private Hessian
#: bound search), sample-split Newton, control variates, client-level, error feedback
FITS = [
    {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 4, "clip": 1.0, "random_state": 5}},
    {"estimator": "fednewton", "params": {"mu": 2.0, "n_local_steps": 2, "clip": 2.0, "hessian_clip": 2.0,
                                          "inference": None, "random_state": 5}},
    {"estimator": "scaffold", "params": {"mu": 2.0, "n_rounds": 2, "n_local_steps": 2, "clip": 2.0, "inference": None,
                                         "random_state": 5}},
    {"estimator": "dpfedavg", "params": {"mu": 2.0, "n_rounds": 2, "n_local_steps": 2, "random_state": 5}},
    {"estimator": "fednormec", "params": {"mu": 2.0, "n_rounds": 2, "random_state": 5}},
]


@pytest.fixture(scope="module")
def seeded():
    with LocalFederation(3, simulation_seed=5) as fed:
        yield fed


def test_fits_on_flower_equal_the_in_process_fits(seeded):
    data = demo_dataset("synthetic-logistic", 3)
    results = seeded.run(FITS, timeout=300)
    for fit, res in zip(FITS, results):
        assert "error" not in res, res.get("trace")
        ref = get_method(fit["estimator"]).cls(**fit["params"]).fit(data)
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
    long = {"mu": 2.0, "n_iter": 30, "clip": 1.0, "inference": None, "random_state": 5}
    fits = [{"estimator": "fedsgd", "params": dict(long, on_client_failure="skip")},
            {"estimator": "fedsgd", "params": dict(long, on_client_failure="raise")}]
    # fit 0 loses node 2 after a second; fit 1 first waits out the dead node 2 at its opening request (it
    # then sits out), then loses node 1
    delays = {0: (1.0, 2), 1: (3.0 + 2.0, 1)}

    def kill(k):
        threading.Timer(delays[k][0], seeded.kill_node, args=(delays[k][1],)).start()

    skipped, raised = seeded.run(fits, timeout=300, reply_timeout=3.0, on_started=kill)
    assert "error" not in skipped, skipped.get("trace")
    mu = skipped["privacy"].client_mu
    assert np.all(np.isfinite(skipped["coef"])) and mu[2] < 2.0 - 1e-9  # it stopped sending mid-fit
    np.testing.assert_allclose(mu[:2], 2.0, rtol=0, atol=1e-12)
    assert raised["error"][0] == "ClientFailureError"


@pytest.fixture(scope="module")
def unseeded(monkeypatch_module):
    here = str(Path(__file__).parent)
    monkeypatch_module.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    with LocalFederation(2, client_apps={1: "_rogue:client_app"}) as fed:
        yield fed


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_a_restarted_run_draws_fresh_noise_and_an_oversized_reply_is_refused(unseeded):
    fixed = {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 2, "clip": 1.0, "inference": None,
                                               "random_state": 5}}
    first = unseeded.run([fixed], timeout=300)[0]
    again, searched = unseeded.run([fixed, {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 2,
                                                                             "random_state": 5}}], timeout=300)
    assert "error" not in first and "error" not in again
    assert np.max(np.abs(first["coef"] - again["coef"])) > 1e-6  # same random_state, new noise on the clients
    assert math.isfinite(first["coef"][0])
    assert searched["error"][0] == "MalformedReplyError" and "expected float64 of shape (1,)" in searched["error"][1]
