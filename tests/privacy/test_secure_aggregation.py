"""FedSGD with aggregation="secure": the sum's noise, the ledger, dropouts, determinism and the quantized messages."""

import math

import numpy as np
import pytest

from privfedstat import FederatedData
from privfedstat.algorithms.fedsgd import FedSGD
from privfedstat.families import get_family
from privfedstat.federation import clients as clients_mod
from privfedstat.federation.clients import FailingData, InProcessClients
from privfedstat.federation.secure import SecureAggregationRefused, verb_spec
from privfedstat.privacy.gdp import epsilon_from_mu
from privfedstat.privacy.mechanisms import ClientNoise
from privfedstat.privacy.secure_noise import decode

M, N, K = 6, 150, 8


def _data(seed=0, m=M, n=N):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(m * n), rng.normal(size=(m * n, 2))])
    y = (rng.random(m * n) < 1 / (1 + np.exp(-X @ [0.2, -0.5, 0.4]))).astype(float)
    return FederatedData.from_arrays([(X[i * n:(i + 1) * n], y[i * n:(i + 1) * n]) for i in range(m)])


def _fit(data, **kw):
    args = dict(mu=1.0, clip=1.0, n_iter=K, step_size=0.5, aggregation="secure", random_state=3, inference=None)
    return FedSGD(**(args | kw)).fit(data)


@pytest.mark.filterwarnings("ignore")
def test_secure_rounds_record_the_sum_of_every_share_at_the_declared_budget():
    est = _fit(_data())
    grads = [r for r in est.privacy_.releases if r.stage == "gradient"]
    assert len(grads) == K and all(r.integer is not None and r.integer.shares == M for r in grads)
    # each round is GDP at mu / sqrt(K) (the Skellam's factor calibrated in, never above), the worst site's, and the
    # server's and a third party's agree
    for r in grads:
        assert 1.0 / math.sqrt(K) * (1 - 1e-12) <= np.max(r.client_mu()) <= 1.0 / math.sqrt(K)
        np.testing.assert_allclose(r.third_party_mu(), r.client_mu())
    assert est.privacy_.mu == pytest.approx(1.0, rel=1e-12) and est.privacy_.mu <= 1.0
    # epsilon is the exact GDP conversion of mu (4.3772 at mu = 1, delta = 1e-5), below the analytical Renyi bound
    assert est.privacy_.epsilon() == pytest.approx(epsilon_from_mu(1.0, 1e-5), rel=1e-9)
    assert est.privacy_.renyi_epsilon() > 1.08 * est.privacy_.epsilon()
    assert est.privacy_.renyi_epsilon(t=1) > est.privacy_.collusion_epsilon(1)
    t1 = est.privacy_.collusion_mu(1)
    assert t1 == pytest.approx(math.sqrt(M / (M - 1)))
    assert est.privacy_.collusion_epsilon(1) == pytest.approx(epsilon_from_mu(t1, 1e-5), rel=1e-12)
    assert math.isinf(est.privacy_.collusion_epsilon(M))
    # a third party sees the same sums: with every release secure, the same epsilon as the server
    assert est.privacy_.third_party_epsilon() == pytest.approx(est.privacy_.epsilon())
    with pytest.raises(ValueError, match="colluding"):
        est.privacy_.collusion_mu(-1)


@pytest.mark.filterwarnings("ignore")
def test_the_ledger_accounts_each_round_with_the_steepest_step_of_its_own_lambda(monkeypatch):
    """Were a non-central step of the Gaussianised Skellam tail 1% steeper than the central one, the fit would calibrate
    its noise to it and the ledger would account with it."""
    import privfedstat.privacy.secure_noise as secure_noise
    import privfedstat.privacy.secure_rounding as secure_rounding

    # rows rounded into balls take Lambda near its checked maximum 1e8, where each step check costs 0.3-0.9 s: a cap of
    # 1e6 on the row radius' Lambda keeps this test fast (the calibration and the accounting are the same code)
    monkeypatch.setattr(secure_rounding, "MAX_CHECKED_LAM", 1e6)
    plain = _fit(_data())
    central_steps = secure_noise.skellam_steps

    def steep_steps(lam):
        out = np.array(central_steps(lam))
        out[3] = 1.01 * out[0]
        return out

    secure_noise.skellam_gdp_step.cache_clear()
    monkeypatch.setattr(secure_noise, "skellam_steps", steep_steps)
    try:
        steep = _fit(_data())
        pairs = zip(plain.privacy_.releases, steep.privacy_.releases)
        for a, b in ((a, b) for a, b in pairs if a.integer is not None):
            # the calibration may take a smaller row radius k for it (rows rounded into a ball): Lambda per l2^2
            assert (b.integer.lam / b.integer.l2**2) / (a.integer.lam / a.integer.l2**2) == pytest.approx(1.01**2,
                                                                                                       rel=1e-6)
            D = 1.01 * secure_noise.skellam_gdp_mu(b.integer.lam)
            assert np.max(b.client_mu()) == pytest.approx(b.integer.l2 * D, rel=1e-9)
        assert 1.0 * (1 - 1e-11) <= steep.privacy_.mu <= 1.0
    finally:
        secure_noise.skellam_gdp_step.cache_clear()


@pytest.mark.filterwarnings("ignore")
def test_secure_fit_is_reproducible_and_close_to_the_local_fit_with_less_noise():
    data = _data()
    a, b = _fit(data), _fit(data)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    c = _fit(data, random_state=4)
    assert not np.array_equal(a.coef_, c.coef_)
    # the sum's noise sd is about 1 / sqrt(M) of the per-site noise's (the rows' rounding errors cost < 1%)
    spec = verb_spec("secure_gradients", 2.0 / (M * N), 1.0 / M, 3, 1.0 / math.sqrt(K), M, M, M * N)
    local_sd = math.sqrt(M) * 2.0 * math.sqrt(K) / (N * M)  # sqrt(sum w_i^2 sigma_i^2), sigma_i = 2 B sqrt K / (mu n)
    ratio = math.sqrt(spec.variance(M)) / local_sd
    assert 1 / math.sqrt(M) < ratio < 1.01 / math.sqrt(M)
    recorded = [r for r in a.privacy_.releases if r.stage == "gradient"][0]
    assert recorded.sigma.max() == pytest.approx(math.sqrt(2 * M * spec.lam) * spec.quantum)


@pytest.mark.filterwarnings("ignore")
def test_a_round_with_fewer_survivors_than_min_surviving_is_refused():
    data = FailingData(_data(), {2: 3})
    with pytest.raises(SecureAggregationRefused, match="min_surviving"):
        _fit(data, on_client_failure="skip")


@pytest.mark.filterwarnings("ignore")
def test_a_dropout_above_min_surviving_keeps_the_guarantee_with_the_survivors_noise():
    data = FailingData(_data(), {2: 3})
    est = _fit(data, on_client_failure="skip", min_surviving=M - 1)
    grads = [r for r in est.privacy_.releases if r.stage == "gradient"]
    shares = [r.integer.shares for r in grads]
    assert shares[0] == M and shares[-1] == M - 1
    for r in grads:  # every round keeps at least the declared budget; the dropped site sent nothing after it left
        assert np.max(r.client_mu()) <= 1.0 / math.sqrt(K) * (1 + 1e-12)
    assert grads[-1].sensitivity[2] == 0.0
    assert est.privacy_.mu <= 1.0 + 1e-12
    assert np.all(np.isfinite(est.coef_))


@pytest.mark.filterwarnings("ignore")
def test_secure_aggregation_without_noise_is_the_local_fit_and_refuses_partial_participation():
    data = _data()
    np.testing.assert_array_equal(_fit(data, mu=math.inf).coef_, _fit(data, mu=math.inf, aggregation="local").coef_)
    with pytest.raises(ValueError, match="every site"):
        _fit(data, participation=0.5)
    with pytest.raises(ValueError, match="aggregation"):
        _fit(_data(), aggregation="central")


def _residues(data, theta, spec, wsens, weights, seed):
    c = InProcessClients(data, get_family("logistic"), ClientNoise(np.random.SeedSequence(seed), data.n_clients))
    reply = c.secure_gradients(theta, clip=1.0, weights=weights, sensitivity=wsens, spec=spec, stage="gradient")
    return reply.values.astype(np.int64)


@pytest.mark.parametrize("scale", [1.0, 1e3, 1e150])
def test_quantized_messages_of_neighbouring_data_differ_by_at_most_their_integer_sensitivity(scale):
    """Replay of one secure round on a neighbouring data set (one row replaced by an adversarial one): with the same
    streams (the rounding's coupling) every site's integer message moves by at most ``spec.l2`` in L2, ``spec.l1`` in
    L1, and only the site whose row changed moves."""
    data = _data(seed=5)
    X, y = data.X.copy(), data.y.copy()
    X[7] = [1.0, scale, -scale]
    y[7] = 1.0 - y[7]
    other = FederatedData(X, y, data.offsets)
    weights = data.sizes / data.sizes.sum()
    wsens = weights * 2.0 / data.sizes
    spec = verb_spec("secure_gradients", float(wsens.max()), float(weights.max()), 3, 0.5, M, M, int(data.sizes.sum()))
    theta = np.array([0.1, -0.3, 0.2])
    a, b = _residues(data, theta, spec, wsens, weights, 11), _residues(other, theta, spec, wsens, weights, 11)
    modulus = 1 << spec.bits
    diff = np.mod(a - b, modulus)
    diff = np.where(diff >= modulus // 2, diff - modulus, diff).astype(np.float64)
    assert np.all(diff[1:] == 0)
    assert np.linalg.norm(diff[0]) <= spec.l2 and np.abs(diff[0]).sum() <= spec.l1
    # and the decoded sum of one data set is the weighted mean gradient up to noise and rounding
    mean = decode(a, spec)
    assert np.all(np.isfinite(mean))


def test_secure_messages_never_go_through_the_gaussian_privatize(monkeypatch):
    """A secure fit's releases are not Gaussian: nothing of it (the clip search's counts and pilot rounds included, no
    inference here) reaches ``privatize``."""
    stages = []
    real = clients_mod.privatize

    def tap(values, noise, sensitivity, mu, stage, kind, unit="record"):
        stages.append(stage)
        return real(values, noise, sensitivity, mu, stage, kind, unit)

    monkeypatch.setattr(clients_mod, "privatize", tap)
    with pytest.warns(Warning):
        _fit(_data(), clip="auto")
    assert stages == []


@pytest.mark.filterwarnings("ignore")
def test_fedirls_and_glm_sum_gradients_and_hessians_securely():
    import pandas as pd

    from privfedstat import glm
    from privfedstat.algorithms.fedirls import FedIRLS

    data = _data(seed=2, n=400)
    est = FedIRLS(mu=1.0, clip=1.0, hessian_clip=1.0, n_rounds=4, aggregation="secure", random_state=0,
                  inference=None).fit(data)
    secure = {r.stage for r in est.privacy_.releases if r.integer is not None}
    assert secure == {"irls-gradient", "irls-hessian"}
    assert est.privacy_.mu == pytest.approx(1.0)
    assert np.all(np.isfinite(est.coef_))
    frame = pd.DataFrame({"x1": data.X[:, 1], "x2": data.X[:, 2], "y": data.y,
                          "site": np.repeat(np.arange(M), 400)})
    fit = glm("y ~ x1 + x2", frame, client="site", family="logistic", mu=2.0, aggregation="secure", random_state=0)
    assert any(r.integer is not None for r in fit.privacy_.releases)
    assert np.all(np.isfinite(fit.bse_))
    # the Skellam rounds are calibrated in GDP with the Gaussian ones: the fit spends its declared mu, not more
    assert fit.privacy_.mu == pytest.approx(2.0, rel=1e-9) and fit.privacy_.mu <= 2.0 * (1 + 1e-12)
    # its one-coordinate secure releases (the counts) are accounted by their exact PLD: at most the GDP conversion
    assert fit.privacy_.epsilon() <= epsilon_from_mu(2.0, 1e-5) * (1 + 1e-12)
    assert fit.privacy_.epsilon() == pytest.approx(epsilon_from_mu(2.0, 1e-5), rel=1e-4)


@pytest.mark.filterwarnings("ignore")
def test_plan_study_predicts_the_central_privacy_price_under_secure_aggregation():
    from privfedstat.algorithms.fedirls import IRLSSchedule
    from privfedstat.planning.power import plan_study

    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(3000), rng.normal(size=(3000, 2))])
    coef = [0.2, -0.5, 0.4]
    full = {agg: plan_study(X, coef, sizes=[500] * 10, family="logistic", mu=1.0, aggregation=agg)
            for agg in ("local", "secure")}
    plans = {agg: p.frame for agg, p in full.items()}
    one = plan_study(X, coef, sizes=[5000], family="logistic", mu=1.0)
    central = one.frame
    ratio_central = plans["secure"]["se_privacy"] / central["se_privacy"]
    ratio_local = plans["secure"]["se_privacy"] / plans["local"]["se_privacy"]
    # the refine bound's insurance is judged on the per-site noise, so the secure fit plans the per-site fit's bounds
    # B; its searches keep the per-site count noise in rows at 1 / m of its mu^2 (stages' count_precision), and the
    # refine rounds get the rest: its privacy sd is the per-site one's times 1 / sqrt(m) (equal sites) and
    # sqrt(mu_est^2 (1 - locate - research) / (mu_est'^2 (1 - locate - research / m)))
    def bounds(plan):
        return sorted(float(b.split(" (")[0]) for b in plan.settings["B"].split(", "))

    assert bounds(full["secure"]) == bounds(full["local"]) and max(bounds(full["secure"])) < float(one.settings["B"])
    left = 1.0 - IRLSSchedule.locate_share
    expected = math.sqrt(float(full["local"].settings["estimation"]) ** 2 * (left - IRLSSchedule.research_share)
                         / (float(full["secure"].settings["estimation"]) ** 2 * (left - IRLSSchedule.research_share / 10))
                         / 10)
    np.testing.assert_allclose(ratio_local, expected, rtol=0.03)
    assert np.all(ratio_local < 0.45) and np.all(ratio_central < 1.2)


@pytest.mark.filterwarnings("ignore")
def test_summary_states_the_secure_guarantee_and_one_colluding_site():
    est = _fit(_data(), inference="auto")
    text = est.summary().as_text()
    assert "secure aggregation" in text and "colludes" in text
    assert f"{est.privacy_.collusion_epsilon(1):.4g}" in text


@pytest.mark.filterwarnings("ignore")
def test_secure_mode_draws_the_shares_from_os_randomness():
    est = _fit(_data(), random_state=None, secure_mode=True)
    assert est.privacy_.secure_mode and all(r.integer is not None for r in est.privacy_.releases if r.stage == "gradient")
    assert np.all(np.isfinite(est.coef_))
