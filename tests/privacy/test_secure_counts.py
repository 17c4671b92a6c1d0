"""A secure fit's pooled counts (the private scaling, the bound searches) are secure sums, not per-site Gaussian releases.

Each site's count is an integer whose sensitivity is 1 per row; it is sent as it is (quantum 1, no rounding slack) with
its Skellam share (:func:`~privfedstat.privacy.secure_noise.count_spec`), and the server learns the sum alone. The
stages of counts spend ``1 / sqrt(m)`` of the per-site stages' budgets, so that the sum's noise sd in rows is the
per-site path's ``sqrt(m) / mu_q`` (:func:`~privfedstat.fitting.stages.count_precision`); the saved ``mu^2`` goes to
the estimation.
"""

import math

import numpy as np
import pytest

from privfedstat import FederatedData
from privfedstat.algorithms.fedirls import FedIRLS, IRLSSchedule
from privfedstat.families import get_family
from privfedstat.federation import secure as secure_mod
from privfedstat.federation.clients import InProcessClients
from privfedstat.privacy.mechanisms import ClientNoise
from privfedstat.privacy.secure_noise import count_spec, decode, quantize, skellam_gdp_step

M, N = 6, 400
#: the stages of counts of a default FedIRLS fit (private scaling, clip="auto", the refine search)
COUNT_STAGES = ("scaling", "clip", "irls-clip")


def _data(seed=0, m=M, n=N):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(m * n), rng.normal(3.0, 2.0, size=(m * n, 2))])
    y = (rng.random(m * n) < 1 / (1 + np.exp(-(X - [0, 3, 3]) @ [0.2, -0.5, 0.4]))).astype(float)
    return FederatedData.from_arrays([(X[i * n:(i + 1) * n], y[i * n:(i + 1) * n]) for i in range(m)])


def _fit(aggregation, mu=2.0, inference=None, **kw):
    return FedIRLS(family="logistic", mu=mu, aggregation=aggregation, random_state=4, inference=inference,
                   scaling="private", **kw).fit(_data())


def _stage(release) -> str:
    return next((s for s in COUNT_STAGES[::-1] if release.stage.startswith(s)), release.stage)


def _spent(ledger, stage) -> float:
    """The worst client's mu of the releases of one stage, composed."""
    return math.sqrt(sum(float(np.max(r.client_mu())) ** 2 for r in ledger.releases if _stage(r) == stage))


@pytest.mark.filterwarnings("ignore")
def test_a_secure_fit_has_no_per_site_gaussian_release_left():
    secure = _fit("secure", inference="auto")
    # the counts, the protocol's rounds and the inference's releases (its count of clipped rows, its Hessian, clipped
    # excess and score test: tests/privacy/test_secure_inference.py) are all secure sums
    assert {_stage(r) for r in secure.privacy_.releases if r.integer is None} == set()
    stages = {r.stage for r in secure.privacy_.releases}
    assert {"inference-clip-count", "inference-hessian", "inference-clip-excess", "inference-score-test"} <= stages
    counted = [r for r in secure.privacy_.releases if _stage(r) in COUNT_STAGES]
    assert len(counted) > 50
    for r in counted:
        # one count: integer sensitivity 1 (no rounding slack), every site's share in the sum
        assert r.integer.quantum == 1.0 and r.integer.l2 == 1.0 == r.integer.l1 and r.integer.shares == M
        np.testing.assert_allclose(r.sensitivity, 1.0, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore")
def test_the_secure_counts_keep_the_per_site_noise_in_rows_and_the_accounting_adds_up_to_mu():
    mu = 2.0
    local, secure = _fit("local", mu), _fit("secure", mu)
    assert secure.privacy_.mu == pytest.approx(mu, rel=1e-12) and secure.privacy_.mu <= mu * (1 + 1e-12)
    assert local.privacy_.mu == pytest.approx(mu, rel=1e-12)
    # each stage of counts spends 1 / sqrt(m) of the per-site fit's, with as many queries
    for stage in COUNT_STAGES:
        n_local = sum(_stage(r) == stage for r in local.privacy_.releases)
        assert n_local > 0 and sum(_stage(r) == stage for r in secure.privacy_.releases) == n_local
    for stage in ("scaling", "clip"):
        assert _spent(secure.privacy_, stage) == pytest.approx(_spent(local.privacy_, stage) / math.sqrt(M), rel=1e-9)
    # the refine search: 1 / m of the research share of the estimation mu^2, the rest to the refine rounds
    mu_est = {name: math.sqrt(mu**2 - _spent(f.privacy_, "scaling") ** 2 - _spent(f.privacy_, "clip") ** 2)
              for name, f in (("local", local), ("secure", secure))}
    assert _spent(secure.privacy_, "irls-clip") == pytest.approx(
        mu_est["secure"] * math.sqrt(IRLSSchedule.research_share / M), rel=1e-9)
    assert _spent(local.privacy_, "irls-clip") == pytest.approx(
        mu_est["local"] * math.sqrt(IRLSSchedule.research_share), rel=1e-9)
    # the secure sum's noise sd in rows equals the per-site sum's sqrt(m) sigma, times the Skellam's GDP factor
    # D(Lambda) sqrt(2 Lambda) (1 + about 1 / (12 Lambda))
    for stage in COUNT_STAGES:
        sd_local = {float(np.sqrt(np.sum(r.sigma**2))) for r in local.privacy_.releases if _stage(r) == stage}
        noise = {r.integer for r in secure.privacy_.releases if _stage(r) == stage}
        assert len(sd_local) == 1 and len(noise) == 1
        noise = noise.pop()
        ratio = math.sqrt(2 * noise.lam) / sd_local.pop()
        if stage == "irls-clip":  # the estimation mu differs by the saved scaling and clip budgets
            ratio *= mu_est["secure"] / mu_est["local"]
        assert ratio == pytest.approx(skellam_gdp_step(noise.lam) * math.sqrt(2 * noise.lam), rel=1e-9)
        assert 1.0 < ratio < 1.0 + 1.01 / (12 * noise.lam)


def test_a_count_spec_is_gdp_at_its_budget_with_unit_sensitivity_and_sends_integers_as_they_are():
    spec = count_spec(0.05, 10, 8, 500)
    assert (spec.quantum, spec.l2, spec.l1, spec.rounding) == (1.0, 1.0, 1.0, False)
    mu = skellam_gdp_step(8 * spec.lam)  # Delta_2 = 1
    assert 0.05 * (1 - 1e-12) <= mu <= 0.05
    # the modulus holds 10 sites of up to 500 rows and the noise: 2^(bits-1) above 10 * 501 + 20 sds of the sum
    assert 2 ** (spec.bits - 1) > 10 * 501 + 20 * math.sqrt(2 * 10 * spec.lam)
    assert spec.variance(10) == pytest.approx(2 * 10 * spec.lam)  # no rounding error
    counts = np.array([[3.0], [0.0], [500.0]])
    np.testing.assert_array_equal(quantize(counts, spec, []), counts.astype(np.int64))
    with pytest.raises(ValueError, match="integer multiples"):
        quantize(counts + 0.5, spec, [])


def test_a_secure_count_decodes_to_the_true_count_plus_the_summed_shares():
    data = _data()
    noise = ClientNoise(np.random.SeedSequence(7), M)
    clients = InProcessClients(data, get_family("logistic"), noise)
    spec = count_spec(0.2, M, M, N)
    ones = np.ones(M)
    reply = clients.secure_column_count(1, 3.5, center=None, weights=ones, sensitivity=ones, spec=spec, stage="c")
    truth = np.array([np.sum(data.client(i)[0][:, 1] <= 3.5) for i in range(M)])
    # the same draws, replayed: each site's Skellam share from its generator (no uniforms: counts are not rounded)
    rngs = secure_mod.site_generators(ClientNoise(np.random.SeedSequence(7), M))
    shares = np.array([rng.poisson(spec.lam) - rng.poisson(spec.lam) for rng in rngs])
    assert decode(reply.values, spec)[0] == float(truth.sum() + shares.sum())
    rec = reply.releases[0]
    np.testing.assert_allclose(rec.sensitivity, 1.0)
    np.testing.assert_allclose(rec.sigma, math.sqrt(2 * spec.lam))


@pytest.mark.filterwarnings("ignore")
def test_a_secure_gaussian_fit_sums_its_dispersion_and_clipped_count_securely_at_the_same_budget():
    """The inference's scalar sums (the Pearson dispersion of a Gaussian fit, the count of clipped rows) are secure
    sums at the budget the per-site fit gives them: the same mu, a noise sd ``1 / sqrt(m)`` of the per-site sum's in
    units of the sensitivity (times the Skellam's factor and the rounding slack)."""
    rng = np.random.default_rng(2)
    X = np.column_stack([np.ones(M * N), rng.normal(size=(M * N, 2))])
    y = X @ [1.0, 0.5, -0.3] + rng.normal(size=M * N)
    data = FederatedData.from_arrays([(X[i * N:(i + 1) * N], y[i * N:(i + 1) * N]) for i in range(M)])
    fits = {agg: FedIRLS(family="gaussian", mu=2.0, aggregation=agg, random_state=1, inference="auto").fit(data)
            for agg in ("local", "secure")}
    for stage in ("inference-scale", "inference-clip-count"):
        local, secure = ([r for r in fits[agg].privacy_.releases if r.stage == stage] for agg in ("local", "secure"))
        assert len(local) == len(secure) == 1 and local[0].integer is None and secure[0].integer.shares == M
        local, secure = local[0], secure[0]
        assert np.max(secure.client_mu()) == pytest.approx(np.max(local.client_mu()), rel=1e-9)
        per_sens = {"local": math.sqrt(np.sum(local.sigma**2)) / np.max(local.sensitivity),
                    "secure": np.max(secure.sigma) / np.max(secure.sensitivity)}
        factor = skellam_gdp_step(secure.integer.lam) * math.sqrt(2 * secure.integer.lam)  # 1 + about 1 / (12 Lambda)
        assert per_sens["secure"] == pytest.approx(factor * per_sens["local"] / math.sqrt(M), rel=1e-9)
    assert fits["secure"].privacy_.mu == pytest.approx(2.0, rel=1e-12)
