"""A Poisson round reads the sampled clients' rows only, and its replies are those of a computation over every client."""

import numpy as np
import pytest

from privfedstat import DPFedAvg, FederatedData, FedSGD
from privfedstat.federation import clients as clients_module
from privfedstat.federation.oracle import GLMOracle


def _data(m=200, n=5, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(m * n), rng.standard_normal((m * n, 2))])
    y = (rng.random(m * n) < 0.5).astype(float)
    return FederatedData.from_pooled(X, y, sizes=[n] * m)


@pytest.mark.parametrize("make", [
    lambda: FedSGD(mu=2.0, n_iter=6, step_size=0.5, clip=1.0, participation=0.05, inference=None, random_state=3),
    lambda: DPFedAvg(mu=2.0, n_rounds=6, update_clip=0.3, participation=0.05, random_state=3),
], ids=["FedSGD", "DPFedAvg"])
def test_sampled_rows_only_and_same_numbers(make, monkeypatch):
    data = _data()
    seen = []
    kernel = GLMOracle.clipped_gradients

    def spy(self, theta, clip):
        seen.append(self.n_clients)
        return kernel(self, theta, clip)

    monkeypatch.setattr(GLMOracle, "clipped_gradients", spy)
    fit = make().fit(data)
    assert seen and max(seen) <= 0.25 * data.n_clients  # every round computed on its participants alone
    monkeypatch.setattr(clients_module, "_SUBSET_FRACTION", 0.0)  # every client computes, the absent ones unsent
    ref = make().fit(data)
    np.testing.assert_array_equal(fit.coef_, ref.coef_)
    assert fit.privacy_.to_frame().equals(ref.privacy_.to_frame())
