"""Audits below the estimator level: the private Newton step's sensitivity at arbitrary parameters
and data, the injected noise's scale, and seeding with a reused SeedSequence.

Release-level neighbouring-dataset checks of every estimator (replayed at the same history) are in
``tests/privacy/test_sensitivity_fuzz.py``; same seed / different seed in the contract suite."""

import numpy as np
import pytest
from conftest import simulate

from privfedstat import FederatedData, FedSGD
from privfedstat._linalg import floor_eigenvalues
from privfedstat.algorithms.fednewton import newton_step
from privfedstat.families import get_family
from privfedstat.federation import GLMOracle, privatize
from privfedstat.privacy import ClientNoise
from privfedstat.privacy.calibration import shared_newton_sensitivity


@pytest.mark.parametrize("half", [0, 1])
@pytest.mark.parametrize("family", ["logistic", "poisson", "huber"])
def test_newton_step_moves_at_most_its_sensitivity_for_any_data(half, family):
    """The private Newton step with a public (released, floored) Hessian holds for arbitrary inputs: a row of the
    second half moves it by at most ``min(2 B / n2_i, 2 G_i) / lambda_min``; a row of the first half not at all."""
    rng = np.random.default_rng(1)
    data = simulate("poisson" if family == "poisson" else "logistic", [24, 30, 36], [0.2, 0.3, -0.1], seed=6)
    fam = get_family(family)
    h1, h2 = GLMOracle(data, fam).split_halves(0)
    B, lam = 1.0, 0.05
    G = np.array([np.inf, 0.01, 0.5])
    worst = 0.0
    for _ in range(30):
        theta = rng.normal(scale=2.0, size=3)
        H = floor_eigenvalues(np.cov(rng.normal(size=(3, 5))) / 10, lam)
        target = h1 if half == 0 else h2
        X, y = target.data.X.copy(), target.data.y.copy()
        row = rng.integers(target.data.n_samples)
        X[row] = rng.normal(scale=10.0 ** rng.integers(-2, 4), size=3)
        y[row] = float(rng.integers(0, 2)) if family != "poisson" else float(rng.integers(0, 50))
        changed = GLMOracle(FederatedData(X, y, target.data.offsets), fam)
        b = (changed, h2) if half == 0 else (h1, changed)
        kw = {"clip": B, "hessian_clip": 2.0, "hessian_floor": lam, "grad_clip": G, "hessian": H}
        step_a, step_b = newton_step(h1, h2, theta, **kw), newton_step(*b, theta, **kw)
        sens = shared_newton_sensitivity(B, float(np.linalg.eigvalsh(H)[0]), G, h2.sizes)
        ratio = np.linalg.norm(step_a - step_b, axis=1) / sens
        worst = max(worst, ratio.max())
    if half == 0:
        assert worst == 0.0
    else:
        assert 0.01 < worst <= 1 + 1e-9  # the audit really moved the step


@pytest.mark.slow
def test_injected_noise_has_the_calibrated_std():
    m, d = 5, 40000
    noise = ClientNoise(np.random.SeedSequence(0), m)
    sens = np.array([0.1, 0.5, 1.0, 2.0, 4.0])
    out, record = privatize(np.zeros((m, d)), noise, sens, 0.7, "test", "aggregated")
    np.testing.assert_allclose(record.sigma, sens / 0.7)
    np.testing.assert_allclose(out.std(axis=1), sens / 0.7, rtol=0.02)
    np.testing.assert_allclose(out.mean(axis=1), 0.0, atol=4 * sens.max() / 0.7 / np.sqrt(d))


def test_same_seed_sequence_object_gives_same_fit(logistic_data):
    ss = np.random.SeedSequence(42)
    a = FedSGD(random_state=ss).fit(logistic_data)
    b = FedSGD(random_state=ss).fit(logistic_data)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(FedSGD(random_state=ss).fit(logistic_data).coef_,
                                  FedSGD(random_state=np.random.SeedSequence(42)).fit(logistic_data).coef_)
