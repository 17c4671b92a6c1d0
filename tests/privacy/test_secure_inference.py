"""A secure fit's inference releases (the Hessian, the score outer products, the clipped excess, the score test) are
secure sums at the per-site fit's budget, and every consumer reads the noise sd of the secure sum.

Each release keeps its share of ``mu_inf^2``, so its sum carries one mechanism's noise instead of ``m`` (with equal
sites ``1 / sqrt(m)`` of the per-site sum's sd); :func:`~privfedstat.federation.queries.private_mean` returns the
sd of the survivors' summed Skellam noise and rounding errors over their weight, and the ledger records the
publication weight ``1 / sum w_i`` so that :func:`~privfedstat.fitting.verdict.released_sd` reads the same.
"""

import math

import numpy as np
import pytest
from test_secure_counts import M, _data, _fit

from privfedstat import FederatedData
from privfedstat.algorithms.fedirls import FedIRLS
from privfedstat.families import get_family
from privfedstat.federation import secure as secure_mod
from privfedstat.federation.clients import InProcessClients
from privfedstat.federation.queries import planned_noise_sd, private_mean, release_psd_mean
from privfedstat.federation.session import Session
from privfedstat.fitting.verdict import released_sd
from privfedstat.privacy.calibration import hessian_sensitivity
from privfedstat.privacy.ledger import PrivacyLedger
from privfedstat.privacy.mechanisms import ClientNoise
from privfedstat.privacy.secure_noise import add_shares, decode, outer_row_variance, quantize
from privfedstat.privacy.secure_outer import quantize_outer
from privfedstat.privacy.secure_rounding import quantize_rows

#: the inference's vector and matrix releases of a default logistic fit (model-based) and of a sandwich fit
VECTOR_STAGES = ("inference-hessian", "inference-clip-excess", "inference-score-test")
THETA = np.array([0.1, -0.4, 0.3])


def _session(data, seed=7, secure=M, failures=None, policy="raise"):
    clients = InProcessClients(data, get_family("logistic"), ClientNoise(np.random.SeedSequence(seed), data.n_clients),
                               failures=failures)
    return Session.open(clients, PrivacyLedger(data.n_clients), seed=np.random.SeedSequence(0), secure=secure,
                        on_client_failure=policy)


# each case: the plain verb, its request, its per-site sensitivity and message bound (of s_i, before weighting)
def _cases(sizes):
    B, C_H, outer = 0.8, 0.6, 1.7
    return {
        "hessians": (dict(theta=THETA, hessian_clip=C_H, gradient_clip=B), hessian_sensitivity(C_H, sizes), C_H),
        "score_outer": (dict(theta=THETA, clip=B), hessian_sensitivity(B * B, sizes), B * B),
        "clipped_excess": (dict(theta=THETA, clip=B, outer=outer), 2.0 * (outer - B) / sizes, outer - B),
        "gradients": (dict(theta=THETA, clip=B), 2.0 * B / sizes, B),
    }


@pytest.mark.parametrize("verb", ["hessians", "score_outer", "clipped_excess", "gradients"])
def test_a_secure_inference_release_decodes_to_the_in_process_sum_and_states_its_skellam_sd(verb):
    data = _data()
    w = data.sizes / data.sizes.sum()
    request, sens, bound = _cases(data.sizes)[verb]
    session = _session(data)
    value, sd = private_mean(session, verb, weights=w, sensitivity=sens, bound=bound, mu=0.3, stage="s", **request)
    # the sites' exact messages (the plain verb without noise), weighted, replayed through the same integer arithmetic
    exact = getattr(_session(data).clients, verb)(sensitivity=sens, mu=math.inf, stage="x", **request).values
    spec = secure_mod.message_spec(session, f"secure_{verb}", w, sens, bound, 0.3, request)
    rngs = secure_mod.site_generators(ClientNoise(np.random.SeedSequence(7), M))
    if spec.row_reach:  # rows rounded into their balls: each row's term, weighted by w_i / n_i
        o, off = session.clients._oracle, data.offsets
        rows = o.row_gradients(THETA, request["clip"]) if verb == "gradients" else \
            o.row_clipped_excess(THETA, request["clip"], request["outer"])
        values = [w[i] / data.sizes[i] * rows[off[i]:off[i + 1]] for i in range(M)]
        rounded, errors = quantize_rows(values, spec, w * sens, rngs), int(data.sizes.sum())
    elif spec.outer:  # rows' roots rounded into their balls, their integer outer products summed
        o, off = session.clients._oracle, data.offsets
        roots = o.row_hessian_roots(THETA, request["hessian_clip"], request["gradient_clip"]) if verb == "hessians" \
            else o.row_gradients(THETA, request["clip"])
        values = [math.sqrt(w[i] / data.sizes[i]) * roots[off[i]:off[i + 1]] for i in range(M)]
        rounded = quantize_outer(values, spec, w * sens, rngs)
        errors = 4 * int(data.sizes.sum()) * outer_row_variance(spec.outer, spec.dim)
    else:
        rounded, errors = quantize(w[:, None] * exact, spec, rngs), M
    residues = add_shares(rounded, spec, rngs)
    total = decode(np.mod(residues.sum(axis=0), 2**spec.bits)[None, :].astype(np.float64), spec)
    np.testing.assert_array_equal(value, total / w.sum())
    assert np.max(np.abs(value - (w[:, None] * exact).sum(axis=0))) < 20 * math.sqrt(spec.variance(M))
    # the sd the inference reads: the Skellam sum's and the rounding errors', sqrt(gamma^2 (2 m lam + e / 4)), e = m
    # site messages or N rows
    skellam = spec.quantum * math.sqrt(2 * M * spec.lam + errors / 4)
    assert sd == pytest.approx(skellam, rel=1e-9, abs=0)
    assert released_sd(session.ledger, "s") == pytest.approx(skellam, rel=1e-9, abs=0)
    assert planned_noise_sd(session, verb, weights=w, sensitivity=sens, mu=0.3, **request) == pytest.approx(skellam,
                                                                                                             rel=1e-9)
    # one mechanism's noise at the per-site release's mu: 1 / sqrt(m) of the per-site sum's sd, up to the rounding
    # slack (1 + 2^-7), the rounding errors and the Skellam's GDP factor
    local = float(np.sqrt(np.sum((w * sens) ** 2))) / 0.3
    assert 1.0 / math.sqrt(M) < sd / local < 1.02 / math.sqrt(M)
    rec = session.ledger.releases[-1]
    assert rec.integer is not None and rec.integer.shares == M
    assert float(np.max(rec.client_mu())) == pytest.approx(0.3, rel=1e-9)  # its share of mu, to rounding


def test_the_secure_hessian_sd_follows_the_survivors_and_their_weight():
    """A site failing before the release: the sum has m - 1 shares and is divided by the survivors' weight."""
    data = _data()
    w = data.sizes / data.sizes.sum()
    w = w * np.linspace(0.7, 1.3, M) / np.sum(w * np.linspace(0.7, 1.3, M))  # unequal weights, summing to 1
    session = _session(data, secure=M - 1, failures={2: 0}, policy="skip")
    H, s = release_psd_mean(session, "hessians", 0.6, 0.4, w, "inference-hessian", theta=THETA, hessian_clip=0.6)
    spec = secure_mod.message_spec(session, "secure_hessians", w, hessian_sensitivity(0.6, data.sizes), 0.6, 0.4,
                                   dict(theta=THETA, hessian_clip=0.6))
    alive = np.arange(M) != 2
    assert spec.outer  # the rows' integer outer products: N rows' rounding errors (all sites' rows stay in the bound)
    errors = int(data.sizes.sum()) * outer_row_variance(spec.outer, spec.dim)
    expected = spec.quantum * math.sqrt((M - 1) * 2 * spec.lam + errors) / w[alive].sum()
    assert s == pytest.approx(expected, rel=1e-9, abs=0)
    assert released_sd(session.ledger, "inference-hessian") == pytest.approx(expected, rel=1e-9, abs=0)
    assert session.ledger.releases[-1].integer.shares == M - 1 and np.allclose(H, H.T)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cov_type", ["model", "sandwich"])
def test_a_secure_fit_s_inference_releases_are_secure_at_the_per_site_budget_and_add_up_to_mu(cov_type):
    mu = 2.0
    local, secure = _fit("local", mu, inference=cov_type), _fit("secure", mu, inference=cov_type)
    assert secure.privacy_.mu == pytest.approx(mu, rel=1e-12) and secure.privacy_.mu <= mu * (1 + 1e-12)
    stages = VECTOR_STAGES + (("inference-score",) if cov_type == "sandwich" else ())
    for stage in stages:
        loc = [r for r in local.privacy_.releases if r.stage == stage]
        sec = [r for r in secure.privacy_.releases if r.stage == stage]
        assert len(loc) == len(sec) == 1 and sec[0].integer is not None and sec[0].integer.shares == M
        if stage not in ("inference-hessian", "inference-score"):  # the same share of mu_inf as the per-site release
            assert float(np.max(sec[0].client_mu())) == pytest.approx(float(np.max(loc[0].client_mu())), rel=1e-9)
        # per unit of the weighted sensitivity and of 1 / mu (the fits' bounds differ: a secure fit's refine search and
        # the clipped excess's window follow its smaller noise, the sandwich's split their ratio): 1 / sqrt(m) of the
        # per-site sum's sd, times the Skellam's factors
        unit = {name: released_sd(f.privacy_, stage) * float(np.max(r[0].client_mu()))
                / float(np.max(r[0].weights * r[0].sensitivity))
                for name, f, r in (("local", local, loc), ("secure", secure, sec))}
        assert 1.0 / math.sqrt(M) < unit["secure"] / unit["local"] < 1.01 / math.sqrt(M)
    # the Hessian and the score outer products split the same rest of mu_inf (in the ratio of the fit's bounds)
    matrices = {name: math.sqrt(sum(float(np.max(r.client_mu())) ** 2 for r in f.privacy_.releases
                                    if r.stage in ("inference-hessian", "inference-score")))
                for name, f in (("local", local), ("secure", secure))}
    assert matrices["secure"] == pytest.approx(matrices["local"], rel=1e-9)



@pytest.mark.filterwarnings("ignore")
def test_a_secure_gaussian_fit_s_sign_score_and_scale_are_secure_too():
    rng = np.random.default_rng(2)
    X = np.column_stack([np.ones(M * 400), rng.normal(size=(M * 400, 2))])
    y = X @ [1.0, 0.5, -0.3] + rng.normal(size=M * 400)
    data = FederatedData.from_arrays([(X[i * 400:(i + 1) * 400], y[i * 400:(i + 1) * 400]) for i in range(M)])
    fit = FedIRLS(family="gaussian", mu=2.0, aggregation="secure", random_state=1).fit(data)
    stages = {r.stage: r for r in fit.privacy_.releases}
    assert {"inference-signs", "inference-signs-scale", "inference-scale", "inference-hessian"} <= set(stages)
    assert all(r.integer is not None for r in fit.privacy_.releases)
    assert fit.privacy_.mu == pytest.approx(2.0, rel=1e-12) and np.all(np.isfinite(fit.bse_))
