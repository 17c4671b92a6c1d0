"""Who sees what of a fit, the epsilon each audience faces, and the neighbouring relation behind it.

The server received every message, so it knows who took part in each round: ``privacy_`` is its
view and its guarantee is the GDP composition of what each client sent, unamplified. A third party
sees the published model and ``privacy_.public_view()`` (mechanisms, noise, rates, rounds; no
membership): for client-level Poisson rounds its epsilon is amplified by the sampling. Client-level
units are replace-one (one client's whole dataset replaced by another), and both epsilons are
stated under that relation: the PLD of the Poisson-subsampled Gaussian under ``REPLACE_ONE``,
checked here against a direct computation of the hockey-stick divergence.
"""

from __future__ import annotations

import math
import warnings

import dp_accounting
import numpy as np
import pytest
from conftest import simulate
from dp_accounting.pld import PLDAccountant
from scipy import integrate, signal
from scipy.stats import norm

from privfedstat.algorithms.dpfedavg import DPFedAvg
from privfedstat.algorithms.fednormec import FedAlphaNormEC
from privfedstat.privacy.accounting import subsampled_gaussian_delta, subsampled_gaussian_epsilon
from privfedstat.privacy.gdp import epsilon_from_mu


def _data():
    return simulate("logistic", [50] * 20, [0.3, -0.6, 0.2])


def _fit(cls, data, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(**params).fit(data)


# ------------------------------------------------------------------------------ the relation
def _direct_delta(z: float, q: float, rounds: int, eps: float, step: float = 2e-4) -> float:
    """delta(eps) of ``rounds`` Poisson-subsampled Gaussian rounds under replace-one, computed directly.

    One unit's contribution lies in the ball of radius 1; replacing it by the antipodal one is the
    worst pair: ``P = (1-q) N(0, z^2) + q N(1, z^2)`` against ``Q = (1-q) N(0, z^2) + q N(-1, z^2)``.
    One round: the hockey-stick divergence ``int (P - e^eps Q)_+`` by quadrature. Several: the
    privacy loss ``log P/Q`` under P, binned finely and convolved ``rounds`` times, then
    ``E[(1 - e^(eps - L))_+]``.
    """
    def p(x):
        return (1 - q) * norm.pdf(x, 0, z) + q * norm.pdf(x, 1, z)

    def qq(x):
        return (1 - q) * norm.pdf(x, 0, z) + q * norm.pdf(x, -1, z)

    if rounds == 1:
        # P > e^eps Q exactly right of the root of log P/Q = eps (the loss increases in x)
        lo, hi = -40 * z, 40 * z
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if math.log(p(mid) / qq(mid)) < eps else (lo, mid)
        return integrate.quad(lambda x: p(x) - math.exp(eps) * qq(x), hi, np.inf, epsabs=1e-14)[0]
    x = np.linspace(-14 * z - 1, 14 * z + 1, 2_000_001)
    mass = p(x) * (x[1] - x[0])
    loss = np.log(p(x) / qq(x))
    edges = np.arange(loss.min() - step, loss.max() + 2 * step, step)
    pmf = np.bincount(np.digitize(loss, edges), weights=mass, minlength=edges.size + 1)
    grid0 = edges[0] - 0.5 * step  # bin k holds the losses around edges[0] + (k - 1/2) step
    total, start = pmf, grid0
    for _ in range(rounds - 1):
        total, start = np.clip(signal.fftconvolve(total, pmf), 0.0, None), start + grid0
    values = start + step * np.arange(total.size)
    return float(np.sum(total * np.clip(1.0 - np.exp(eps - values), 0.0, None)))


@pytest.mark.slow
@pytest.mark.parametrize("z, q, rounds, eps", [(1.0, 0.3, 1, 0.5), (0.8, 0.1, 1, 1.0), (1.5, 0.3, 4, 0.8)])
def test_the_client_level_accounting_is_replace_one_and_matches_a_direct_computation(z, q, rounds, eps):
    direct = _direct_delta(z, q, rounds, eps)
    pld = subsampled_gaussian_delta(z, q, rounds, eps)
    assert pld == pytest.approx(direct, rel=1e-6 if rounds == 1 else 1e-4)
    ref = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    ref.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds)
    assert subsampled_gaussian_epsilon(z, q, rounds, 1e-5) == pytest.approx(ref.get_epsilon(1e-5), rel=1e-9)


def test_without_sampling_the_replace_one_pld_is_the_servers_gdp():
    """q = 1: T rounds of noise multiplier z are exactly (2 sqrt(T) / z)-GDP for a replaced unit (sensitivity 2)."""
    z, T = 3.0, 12
    assert subsampled_gaussian_epsilon(z, 1.0, T, 1e-5) == pytest.approx(epsilon_from_mu(2 * math.sqrt(T) / z, 1e-5),
                                                                         rel=2e-4)


# ------------------------------------------------------------------------------ the two audiences
def test_dpfedavg_reports_the_servers_and_the_third_partys_epsilon():
    """The audit's example: DP-FedAvg, mu = 1, R = 8, q = 0.3, 20 clients."""
    mu, R, q = 1.0, 8, 0.3
    est = _fit(DPFedAvg, _data(), mu=mu, n_rounds=R, participation=q, random_state=0)
    server = est.privacy_  # the server's view: per client and round, who sent
    assert "client" in server.to_frame().columns
    public = server.public_view()
    frame = public.to_frame()
    assert not {"client", "round"} & set(frame.columns)  # no membership
    assert len(frame) == 1 and frame["rounds"].iloc[0] == R and frame["sampling_rate"].iloc[0] == q
    z = 2 * math.sqrt(R) / mu  # sigma over the radius S of the ball the clipped update lies in
    assert frame["noise_multiplier"].iloc[0] == pytest.approx(z, rel=1e-12)
    third = public.epsilon(1e-5)
    assert third == pytest.approx(subsampled_gaussian_epsilon(z, q, R, 1e-5), rel=1e-9)
    add_remove = subsampled_gaussian_epsilon(z, q, R, 1e-5, relation="add_remove")
    assert 1.9 < third / add_remove < 2.2  # replacing a client costs about twice adding or removing one
    # towards the server: the declared budget (every client as if it sent each round), a bound on the ledger's
    assert public.mu == pytest.approx(mu, rel=1e-12) and server.mu < mu
    assert public.server_epsilon(1e-5) == pytest.approx(epsilon_from_mu(mu, 1e-5), rel=1e-12)
    assert server.epsilon(1e-5) < public.server_epsilon(1e-5)
    assert third < server.epsilon(1e-5)
    text = est.summary().as_text()
    assert f"{public.server_epsilon(1e-5):.4g}" in text and f"{third:.4g}" in text
    assert "server" in text and "third part" in text and "replace" in text


def test_the_public_view_does_not_depend_on_who_took_part():
    a = _fit(DPFedAvg, _data(), mu=1.0, n_rounds=8, participation=0.3, random_state=0).privacy_
    b = _fit(DPFedAvg, _data(), mu=1.0, n_rounds=8, participation=0.3, random_state=5).privacy_
    assert not np.array_equal(a.to_frame()["sensitivity"], b.to_frame()["sensitivity"])  # other participants
    assert a.public_view().to_frame().equals(b.public_view().to_frame())
    assert a.public_view().epsilon(1e-5) == b.public_view().epsilon(1e-5)
    assert repr(a.public_view()) == repr(b.public_view())


def test_without_sampling_both_audiences_face_the_same_client_level_epsilon():
    est = _fit(DPFedAvg, _data(), mu=1.5, n_rounds=6, random_state=1)
    public = est.privacy_.public_view()
    assert public.epsilon(1e-5) == pytest.approx(est.privacy_.epsilon(1e-5), rel=2e-4)
    assert public.epsilon(1e-5) >= est.privacy_.epsilon(1e-5) * (1 - 1e-9)


def test_an_epsilon_target_is_met_under_replace_one():
    """FedAlphaNormEC(epsilon=(10, 1e-5)) without sampling: both audiences face 10 (not 24.4); with p = 0.5 and a
    target of 4 the third party faces 4 (not 8.3) and the server more."""
    data = _data()
    full = _fit(FedAlphaNormEC, data, mu=None, epsilon=(10.0, 1e-5), n_rounds=50, random_state=0)
    assert 10.0 - 1e-3 <= full.epsilon_ <= 10.0
    assert full.privacy_.epsilon(1e-5) == pytest.approx(10.0, abs=2e-3)
    text = full.summary().as_text()
    assert "24.39" not in text and f"{full.epsilon_:.4g}" in text
    sampled = _fit(FedAlphaNormEC, data, mu=None, epsilon=(4.0, 1e-5), participation=0.5, n_rounds=20,
                   random_state=2)
    assert 4.0 - 1e-3 <= sampled.epsilon_ <= 4.0
    ref = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    ref.compose(dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(sampled.sigma_)), 20)
    assert sampled.epsilon_ == pytest.approx(ref.get_epsilon(1e-5), rel=1e-9)
    assert sampled.privacy_.public_view().server_epsilon(1e-5) > 4.0
