"""Neighbouring-dataset audits: one datum replaced by an adversarial point; every release moves
by at most its recorded sensitivity, and the injected noise has the calibrated scale."""

import numpy as np
import pytest

from conftest import simulate
from privfedstat import FederatedData, FedAvg, FedNewton, FedSGD
from privfedstat.estimators.fednewton import newton_step
from privfedstat.families import get_family
from privfedstat.federation import Channel, GLMOracle
from privfedstat.privacy import ClientNoise, PrivacyLedger


def neighbour(data: FederatedData, row: int, x_new, y_new) -> FederatedData:
    X, y = data.X.copy(), data.y.copy()
    X[row], y[row] = x_new, y_new
    return FederatedData(X, y, data.offsets)


ADVERSARIAL = [(np.array([1.0, 1e6, -1e6]), 1.0), (np.array([1.0, 0.0, 0.0]), 0.0), (np.array([1.0, -300.0, 42.0]), 0.0)]


@pytest.mark.parametrize("x_new, y_new", ADVERSARIAL)
def test_fedsgd_replayed_releases_move_at_most_the_sensitivity(x_new, y_new):
    data = simulate("logistic", [40, 60, 80], [0.2, 0.3, -0.1], seed=2)
    row = 70  # a row of client 1
    other = neighbour(data, row, x_new, y_new)
    est = FedSGD(mu=1.0, clip=0.8, n_iter=20, random_state=0).fit(data)
    fam = get_family("logistic")
    o, o2 = GLMOracle(data, fam), GLMOracle(other, fam)
    for k, rel in enumerate(r for r in est.privacy_.releases if r.stage == "gradient"):
        theta = est.history_[k]  # the parameter at which release k was computed
        diff = np.linalg.norm(o.clipped_gradients(theta, est.clip_) - o2.clipped_gradients(theta, est.clip_), axis=1)
        assert np.all(diff <= rel.sensitivity * (1 + 1e-12))
        assert diff[0] == 0 and diff[2] == 0 and diff[1] > 0


def test_coupled_runs_first_release_differs_only_in_the_changed_client():
    """Same seed = identical noise draws; the first release is computed at the same theta^(0)."""
    data = simulate("logistic", [40, 60, 80], [0.2, 0.3, -0.1], seed=2)
    other = neighbour(data, 5, np.array([1.0, 1e3, 1e3]), 0.0)
    captured = []
    original = Channel.release

    def spy(self, values, **kw):
        out = original(self, values, **kw)
        captured.append((out, self.ledger.releases[-1].sensitivity))
        return out

    Channel.release = spy
    try:
        FedSGD(mu=1.0, clip=0.8, n_iter=3, random_state=7).fit(data)
        FedSGD(mu=1.0, clip=0.8, n_iter=3, random_state=7).fit(other)
    finally:
        Channel.release = original
    first_a, sens = captured[0]
    first_b, _ = captured[3]
    moved = np.linalg.norm(first_a - first_b, axis=1)
    assert moved[0] <= sens[0] * (1 + 1e-12) and moved[0] > 0
    np.testing.assert_array_equal(first_a[1:], first_b[1:])


@pytest.mark.parametrize("x_new, y_new", ADVERSARIAL)
def test_local_step_statistic_moves_at_most_the_sensitivity(x_new, y_new):
    data = simulate("logistic", [40, 60, 80], [0.2, 0.3, -0.1], seed=4)
    other = neighbour(data, 150, x_new, y_new)
    fam = get_family("logistic")
    B, eta = 1.3, 0.5
    rng = np.random.default_rng(0)
    for _ in range(20):
        theta = rng.normal(scale=3.0, size=(3, 3))
        d = eta * (GLMOracle(data, fam).clipped_gradients(theta, B) - GLMOracle(other, fam).clipped_gradients(theta, B))
        assert np.all(np.linalg.norm(d, axis=1) <= 2 * B * eta / data.sizes * (1 + 1e-12))


@pytest.mark.parametrize("half", [0, 1])
@pytest.mark.parametrize("family", ["logistic", "poisson", "huber"])
def test_newton_step_moves_at_most_its_sensitivity_for_any_data(half, family):
    """The private Newton step (Hessian floor + clipped per-sample Hessians) holds for arbitrary inputs."""
    rng = np.random.default_rng(1)
    data = simulate("poisson" if family == "poisson" else "logistic", [24, 30, 36], [0.2, 0.3, -0.1], seed=6)
    fam = get_family(family)
    h1, h2 = GLMOracle(data, fam).split_halves(0)
    B, C_H, lam = 1.0, 2.0, 0.05
    G = np.minimum(B, lam * B * h1.sizes / (C_H * h2.sizes))
    worst = 0.0
    for trial in range(30):
        theta = rng.normal(scale=2.0, size=3)
        target = h1 if half == 0 else h2
        X, y = target.data.X.copy(), target.data.y.copy()
        row = rng.integers(target.data.n_samples)
        X[row] = rng.normal(scale=10.0 ** rng.integers(-2, 4), size=3)
        y[row] = float(rng.integers(0, 2)) if family != "poisson" else float(rng.integers(0, 50))
        changed = GLMOracle(FederatedData(X, y, target.data.offsets), fam)
        b = (changed, h2) if half == 0 else (h1, changed)
        step_a, sens = newton_step(h1, h2, theta, clip=B, hessian_clip=C_H, hessian_floor=lam, grad_clip=G)
        step_b, _ = newton_step(*b, theta, clip=B, hessian_clip=C_H, hessian_floor=lam, grad_clip=G)
        ratio = np.linalg.norm(step_a - step_b, axis=1) / sens
        worst = max(worst, ratio.max())
    assert worst <= 1 + 1e-9
    assert worst > 0.01  # the audit really moved the step


def test_injected_noise_has_the_calibrated_std():
    m, d = 5, 40000
    ledger = PrivacyLedger(m)
    ch = Channel(np.full(m, 10), ClientNoise([np.random.default_rng(i) for i in range(m)]), ledger)
    sens = np.array([0.1, 0.5, 1.0, 2.0, 4.0])
    out = ch.release(np.zeros((m, d)), sensitivity=sens, mu=0.7, stage="test", weights=np.full(m, 0.2))
    np.testing.assert_allclose(out.std(axis=1), sens / 0.7, rtol=0.02)
    np.testing.assert_allclose(out.mean(axis=1), 0.0, atol=4 * sens.max() / 0.7 / np.sqrt(d))


def test_different_noise_per_client_and_per_seed(logistic_data):
    a = FedSGD(random_state=1).fit(logistic_data)
    b = FedSGD(random_state=1).fit(logistic_data)
    c = FedSGD(random_state=2).fit(logistic_data)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.allclose(a.coef_, c.coef_)


@pytest.mark.parametrize("Est", [FedSGD, FedAvg, FedNewton])
def test_reproducible_bit_identical(Est, logistic_data):
    a = Est(random_state=123).fit(logistic_data)
    b = Est(random_state=123).fit(logistic_data)
    assert a.coef_.tobytes() == b.coef_.tobytes()
    assert a.history_.tobytes() == b.history_.tobytes()


def test_same_seed_sequence_object_gives_same_fit(logistic_data):
    ss = np.random.SeedSequence(42)
    a = FedSGD(random_state=ss).fit(logistic_data)
    b = FedSGD(random_state=ss).fit(logistic_data)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(FedSGD(random_state=ss).fit(logistic_data).coef_,
                                  FedSGD(random_state=np.random.SeedSequence(42)).fit(logistic_data).coef_)
