"""aggregation="secure" on a real Flower deployment: SuperLink and SuperNode processes, the sums through SecAgg+.

Four seeded nodes (``simulation-seed=5``): a secure FedSGD fit equals the in-process fit (the integer
messages pass exactly through SecAgg+); in a second fit node 2's process dies (SIGKILL) as the third
secure round asks for its masked vector, and with ``min_surviving=3`` the fit completes on the three
survivors, equal to the in-process fit in which site 2 fails at that request, with their accounting.
tests/flower/test_secagg.py checks without processes that the server receives masked vectors only.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privfedstat.algorithms.fedsgd import FedSGD
from privfedstat.federation import FailingData
from privfedstat.flower.client import demo_dataset
from privfedstat.flower.launch import LocalFederation

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

SECURE = {"mu": 1.0, "clip": 1.0, "n_iter": 4, "step_size": 0.5, "aggregation": "secure", "random_state": 5,
          "inference": None, "scaling": None}


def test_secure_fits_through_secaggplus_equal_the_in_process_fits_and_survive_a_killed_node(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    mortal = dict(SECURE, clip=0.75, n_iter=5, on_client_failure="skip", min_surviving=3)
    with LocalFederation(4, simulation_seed=5, client_apps={2: "_secagg_apps:die_in_round_3"}) as fed:
        whole, dropped = fed.run([{"estimator": "fedsgd", "params": SECURE},
                                  {"estimator": "fedsgd", "params": mortal}], timeout=400, reply_timeout=5.0)
    data = demo_dataset("synthetic-logistic", 4)
    assert "error" not in whole, whole.get("trace")
    ref = FedSGD(**SECURE).fit(data)
    np.testing.assert_allclose(whole["coef"], ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(whole["privacy"].epsilon(1e-5), ref.privacy_.epsilon(1e-5), rtol=1e-12)
    assert "error" not in dropped, dropped.get("trace")
    shares = [r.integer.shares for r in dropped["privacy"].releases if r.stage == "gradient"]
    assert shares == [4, 4, 3, 3, 3] and dropped["communication"].senders == (4, 4, 3, 3, 3)
    ref = FedSGD(**mortal).fit(FailingData(data, {2: 2}))  # in process: site 2 fails at its third request
    np.testing.assert_allclose(dropped["coef"], ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dropped["privacy"].epsilon(1e-5), ref.privacy_.epsilon(1e-5), rtol=1e-12)
