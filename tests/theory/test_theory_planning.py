"""Recommended iterations, optimal weights (eq. (2)) and the communication table (Table 1)."""

import math

import numpy as np
import pytest

from privfedstat import FedAvg, FederatedData, FedHybrid, FedNewton, FedSGD
from privfedstat.families import get_family
from privfedstat.federation.oracle import GLMOracle
from privfedstat.federation.session import Session
from privfedstat.fitting.stages import resolve_weights
from privfedstat.fitting.steps import gradient_noise_sd
from privfedstat.theory import communication_table, optimal_weights, recommended_iterations


def test_recommended_iterations_hand_values():
    # tau1 = 0.5, tau2 = 1: log rho = log 1.2; d = 2, sizes (100, 200): N = 300, m = 2
    it = recommended_iterations(tau1=0.5, tau2=1.0, d=2, sizes=[100, 200])
    assert float(it.fedsgd) == math.ceil(2 * math.log(600) / math.log(1.2)) == 71
    assert float(it.fedavg_local) == 71  # C = 2 by default
    assert float(it.fedhybrid_server) == math.ceil(2 * math.log(2) / math.log(1.2)) == 8
    assert list(it.fedhybrid_local) == [math.ceil(4 * math.log(n) / math.log(1.2)) for n in (100, 200)]
    assert float(it.contraction) == pytest.approx(1 - 0.5 / 3)
    it3 = recommended_iterations(tau1=0.5, tau2=1.0, d=2, n_samples=300, C=3.0)
    assert float(it3.fedavg_local) == math.ceil(3 * math.log(600) / math.log(1.2))
    assert it3.fedhybrid_server is None and it3.fedhybrid_local is None
    # vectorised over tau1
    v = recommended_iterations(tau1=np.array([0.1, 0.5, 1.0]), tau2=1.0, d=2, n_samples=300)
    assert v.fedsgd.shape == (3,) and np.all(np.diff(v.fedsgd) < 0)
    with pytest.raises(ValueError, match="tau1"):
        recommended_iterations(tau1=2.0, tau2=1.0, d=2, n_samples=300)


def test_optimal_weights_eq2_hand_value():
    # trace = d = 2, C_B = 1, K = 10, mu = 1: 1/(2/n + 2 log(300) 10 / n^2)
    DL = math.log(300)
    inv = np.array([1 / (2 / 100 + 2 * DL * 10 / 100**2), 1 / (2 / 200 + 2 * DL * 10 / 200**2)])
    w = optimal_weights(sizes=[100, 200], mu=1.0, d=2, n_iter=10)
    assert w == pytest.approx(inv / inv.sum(), rel=1e-12)
    assert w.sum() == pytest.approx(1.0)
    # non-private: proportional to n_i
    assert optimal_weights(sizes=[100, 300], mu=math.inf, d=2, n_iter=10) == pytest.approx([0.25, 0.75])
    # exact message variance with B: trace/n + d (2 B sqrt(K)/(mu n))^2
    inv = np.array([1 / (4 / n + 2 * (2 * 3 * math.sqrt(10) / (2 * n)) ** 2) for n in (100, 200)])
    got = optimal_weights(sizes=[100, 200], mu=2.0, d=2, n_iter=10, clip=3.0, trace_sigma=4.0)
    assert got == pytest.approx(inv / inv.sum(), rel=1e-12)
    # FedNewton (Theorem 3.9): trace/n + C_B^2 d^2 K/(mu^2 n^2)
    inv = np.array([1 / (2 / n + 4 * 10 / n**2) for n in (100, 200)])
    got = optimal_weights(sizes=[100, 200], mu=1.0, d=2, n_iter=10, form="fednewton")
    assert got == pytest.approx(inv / inv.sum(), rel=1e-12)


def test_optimal_weights_match_the_estimators_optimal_option():
    """FedSGD(weights="optimal") uses trace(Sigma) -> B^2 and the exact noise variance (this reads the
    estimator's private weight resolution: if that is refactored, update the test, not the theory)."""
    sizes = np.array([30, 60, 200])
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(sizes.sum()), rng.standard_normal((sizes.sum(), 2))])
    data = FederatedData.from_pooled(X, (rng.random(sizes.sum()) < 0.5).astype(float), sizes=sizes)
    est = FedSGD(mu=2.0, n_iter=10, clip=1.5, weights="optimal")
    session = Session(GLMOracle(data, get_family("logistic")), None, None)
    w_est = resolve_weights(est, session, 1.5, noise_var=gradient_noise_sd(1.5, session.sizes, 10, 2.0) ** 2)
    w_thy = optimal_weights(sizes=sizes, mu=2.0, d=3, n_iter=10, clip=1.5, trace_sigma=1.5**2)
    assert w_thy == pytest.approx(w_est, rel=1e-12)


def test_communication_table_matches_the_estimators():
    rng = np.random.default_rng(1)
    sizes = [40] * 6
    X = np.column_stack([np.ones(240), rng.standard_normal((240, 2))])
    data = FederatedData.from_pooled(X, (rng.random(240) < 0.5).astype(float), sizes=sizes)
    ests = {  # the protocols' own communication (Table 1): no inference releases
        "FedSGD": FedSGD(mu=2.0, n_iter=7, clip=2.0, random_state=0, inference=None),
        "FedHybrid": FedHybrid(mu=2.0, n_local_steps=4, n_server_iter=5, clip=2.0, random_state=0, inference=None),
        "FedAvg": FedAvg(mu=2.0, n_rounds=3, n_local_steps=4, clip=2.0, random_state=0, inference=None),
        "FedNewton": FedNewton(mu=2.0, n_rounds=1, n_local_steps=4, clip=2.0, hessian_clip=3.0, random_state=0,
                               inference=None),
    }
    tab = communication_table(n_clients=6, d=3, n_iter=7, n_server_iter=5, n_rounds=3, newton_rounds=1).set_index("method")
    for name, est in ests.items():
        comm = est.fit(data).communication_
        assert tab.loc[name, "rounds"] == comm.rounds, name
        assert tab.loc[name, "floats_per_client"] == comm.floats_per_client, name
        assert tab.loc[name, "total_floats"] == comm.total_floats, name


def test_communication_table_rates_and_broadcasting():
    tab = communication_table(n_clients=[10, 100], d=3, n_samples=10_000, mu=2.0, n_iter=50, n_rounds=2,
                              n_local_steps=50)
    assert len(tab) == 8 and set(tab["method"]) == {"FedSGD", "FedHybrid", "FedAvg", "FedNewton"}
    row = tab[(tab["method"] == "FedAvg") & (tab["n_clients"] == 100)].iloc[0]
    N, m, d = 10_000, 100, 3
    assert row["error_rate"] == pytest.approx(d / N + m**2 * d**2 / N**2 + m * d**2 * 2 * 50 / (4 * N**2))
    row = tab[(tab["method"] == "FedSGD") & (tab["n_clients"] == 10)].iloc[0]
    assert row["error_rate"] == pytest.approx(d / N + 10 * d**2 * math.log(N) / (4 * N**2))
    assert row["total_floats"] == 10 * 50 * 3 and row["paper_communication"] == "O(m K d)"
    assert "error_rate" not in communication_table(n_clients=5, d=2).columns
    with pytest.raises(ValueError, match="integers"):
        communication_table(n_clients=5, d=2, n_iter=2.5)
