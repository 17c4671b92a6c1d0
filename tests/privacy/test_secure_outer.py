"""The Hessian-type secure releases as the rows' integer outer products of roots rounded into a ball
(privfedstat.privacy.secure_outer): the PSD sensitivity attained exactly, the bracket within 1e-6, the rows' terms
averaging to the site statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privfedstat import FederatedData
from privfedstat._linalg import sym_to_vec
from privfedstat.families import get_family
from privfedstat.federation import secure as secure_mod
from privfedstat.federation.oracle import make_oracle
from privfedstat.privacy.calibration import hessian_sensitivity
from privfedstat.privacy.gdp import epsilon_from_mu
from privfedstat.privacy.secure_pld import achievable_epsilon
from privfedstat.privacy.secure_rounding import WORD_BITS

DELTA = 1e-5


def _data(seed=0, n=80, m=3, family="logistic"):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(m * n), rng.normal(size=(m * n, 2)) * [1.0, 3.0]])
    if family == "multinomial":
        y = rng.integers(0, 3, m * n).astype(float)
    elif family == "poisson":
        y = rng.poisson(1.5, m * n).astype(float)
    elif family in ("gaussian", "huber"):
        y = rng.normal(size=m * n) * 2.0
    else:
        y = (rng.uniform(size=m * n) < 0.5).astype(float)
    return FederatedData(X, y, np.arange(0, m * n + 1, n))


def _family(name):
    return get_family("multinomial", n_classes=3) if name == "multinomial" else get_family(name)


def _site_means(rows, offsets):
    return np.array([np.einsum("ja,jb->ab", rows[offsets[i]:offsets[i + 1]], rows[offsets[i]:offsets[i + 1]])
                     / (offsets[i + 1] - offsets[i]) for i in range(len(offsets) - 1)])


@pytest.mark.parametrize("family", ["logistic", "poisson", "gaussian", "huber", "multinomial"])
def test_the_rows_outer_products_average_to_the_site_statistics(family):
    data = _data(family=family)
    o = make_oracle(data, _family(family))
    theta = np.linspace(-0.4, 0.6, o.n_params)
    off = data.offsets
    for t in (theta, np.vstack([theta, 2 * theta, -theta])):
        np.testing.assert_allclose(_site_means(o.row_gradients(t, 0.7), off), o.score_outer(t, 0.7), rtol=1e-12,
                                   atol=1e-15)
        if family != "multinomial":  # its per-row Hessians have rank K - 1: rounded as a whole
            for gradient_clip in (None, 0.5):
                np.testing.assert_allclose(_site_means(o.row_hessian_roots(t, 0.3, gradient_clip), off),
                                           o.hessians(t, 0.3, gradient_clip), rtol=1e-12, atol=1e-15)
    for row_clip in (1.5, math.inf):
        np.testing.assert_allclose(_site_means(o.row_design_roots(row_clip), off), o.design_moments(row_clip),
                                   rtol=1e-12, atol=1e-15)


def _spec(p=3, mu=0.5, m=4, n=200, clip=0.6):
    sizes = np.full(m, n)
    w = sizes / sizes.sum()
    sens = w * hessian_sensitivity(clip, sizes)
    spec = secure_mod.verb_spec("secure_hessians", float(sens.max()), float(w.max()) * clip, p * (p + 1) // 2, mu, m,
                                m, int(sizes.sum()))
    return spec, sens


@pytest.mark.parametrize("p, mu, n", [(3, 0.5, 10000), pytest.param(2, 0.3, 10000, marks=pytest.mark.slow),
                                      pytest.param(5, 1.0, 5000, marks=pytest.mark.slow),
                                      pytest.param(8, 1.5, 5000, marks=pytest.mark.slow),
                                      pytest.param(1, 1.0, 1000, marks=pytest.mark.slow)])
def test_a_hessian_type_release_brackets_its_exact_epsilon_within_1e_6(p, mu, n):
    """The ledger's GDP epsilon of one Hessian-type release against the exact epsilon of a pattern that data within its
    stated sensitivity produce with certainty: within 1e-6 (site-level rounding: 1e-3 to 1e-1, its slack)."""
    spec, _ = _spec(p, mu, n=n)
    assert spec.outer and spec.bits <= WORD_BITS  # Flower's SecAgg+ word
    noise = spec.noise(4)
    upper = epsilon_from_mu(noise.gdp_mu, DELTA)
    assert noise.gdp_mu == pytest.approx(mu, rel=1e-9)
    lower = achievable_epsilon([noise], DELTA)
    assert -1e-7 < upper - lower < 1e-6


def _fold_to_matrix(message, p):
    """The integer symmetric matrix S of a folded message (S_kk, 2 S_kl)."""
    rows, cols = np.triu_indices(p)
    S = np.zeros((p, p), dtype=np.int64)
    half = np.where(rows == cols, message, message // 2)
    assert np.all(message[rows != cols] % 2 == 0)
    S[rows, cols], S[cols, rows] = half, half
    return S


def _root_strategy(p):
    finite = st.floats(-1e6, 1e6, allow_nan=False)
    return st.one_of(st.lists(finite, min_size=p, max_size=p), st.lists(st.floats(-2, 2), min_size=p, max_size=p))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), p=st.integers(1, 5), mu=st.sampled_from([0.3, 1.0, 2.0]), seed=st.integers(0, 2**32 - 1))
def test_neighbouring_rows_integer_outer_products_never_exceed_the_stated_sensitivity(data, p, mu, seed):
    """One root replaced by any other (clipped to the bound, as the oracle clips): with the same stream, the site's
    integer matrices differ by a a^T - b b^T of Frobenius norm at most sqrt(2) K (K for p = 1), the record's sensitivity
    in message units."""
    from privfedstat.privacy.mechanisms import ClientNoise
    from privfedstat.privacy.secure_outer import quantize_outer
    m, n, clip = 2, 12, 0.6
    spec, sens = _spec(p, mu, m=m, n=n, clip=clip)
    assert spec.outer > 0 and not spec.rounding
    scale = math.sqrt(1.0 / (m * n))  # sqrt(w_i / n_i)
    base = np.array([data.draw(_root_strategy(p)) for _ in range(n)]).reshape(n, p)
    other = np.array(data.draw(_root_strategy(p)))
    j = data.draw(st.integers(0, n - 1))

    def clipped(rows):  # roots of norm at most sqrt(C): terms of Frobenius norm at most C
        norms = np.linalg.norm(rows, axis=1)
        return rows * np.minimum(1.0, math.sqrt(clip) / np.maximum(norms, 1e-300))[:, None]

    neighbour = base.copy()
    neighbour[j] = other

    def messages(rows):
        rngs = secure_mod.site_generators(ClientNoise(np.random.SeedSequence(seed), m))
        return quantize_outer([scale * clipped(rows), scale * clipped(base)], spec, sens, rngs)

    a, b = messages(base), messages(neighbour)
    np.testing.assert_array_equal(a[1], b[1])  # the other site: untouched
    diff = _fold_to_matrix(a[0], p) - _fold_to_matrix(b[0], p)
    K = int(spec.outer)
    bound = 2 * K * K if p > 1 else K * K
    assert int(np.sum(diff * diff)) <= bound  # in integers: exact
    record = secure_mod.share_release(spec, sens, p * (p + 1) // 2, "h")
    assert record.sensitivity[0] == pytest.approx(spec.quantum * math.sqrt(bound), rel=1e-12)


def test_the_stated_sensitivity_is_attained_by_lattice_roots():
    """Roots on the lattice round to themselves: j (1, 1, 1, 1, 0) against j (1, -1, 1, -1, 0) move the integer matrix
    by exactly sqrt(2) K, the ledger's Delta_2 (outer_pattern)."""
    from privfedstat.privacy.mechanisms import ClientNoise
    from privfedstat.privacy.secure_outer import outer_pattern, quantize_outer
    p, m, n = 5, 2, 10
    spec, sens = _spec(p, 1.0, m=m, n=n)
    q, K = 4, int(spec.outer)
    jj = math.isqrt(K // q)
    assert jj * jj * q == K
    h1, h2 = np.r_[np.ones(q), np.zeros(p - q)], np.r_[1.0, -1.0, 1.0, -1.0, 0.0]
    unit = math.sqrt(spec.quantum)  # a root x quanta long is x sqrt(gamma) in message units
    rows = np.zeros((n, p))
    rngs = lambda: secure_mod.site_generators(ClientNoise(np.random.SeedSequence(3), m))  # noqa: E731
    rows[0] = jj * h1 * unit
    a = quantize_outer([rows, rows], spec, sens, rngs())
    rows[0] = jj * h2 * unit
    b = quantize_outer([rows, rows], spec, sens, rngs())
    diff = _fold_to_matrix(a[0], p) - _fold_to_matrix(b[0], p)
    assert int(np.sum(diff * diff)) == 2 * K * K
    (lam, shifts), = outer_pattern(spec.noise(m))
    folded = (a[0] - b[0])[a[0] != b[0]]
    assert sorted(np.abs(folded).tolist()) == sorted(shifts) and lam == 2 * spec.noise(m).lam


def test_the_outer_products_average_to_the_site_statistic_up_to_the_rounding_bias():
    """Over many streams the site's integer matrix S gamma averages to its statistic plus the stochastic rounding's
    diagonal bias diag(sum_j f(1 - f)) gamma, at most n / 4 quanta per diagonal entry and none off it."""
    from privfedstat.privacy.mechanisms import ClientNoise
    p, m, n = 3, 2, 50
    spec, sens = _spec(p, 0.3, m=m, n=n)
    rng = np.random.default_rng(0)
    roots = rng.normal(size=(n, p)) * 0.2
    roots *= np.minimum(1.0, math.sqrt(0.6) / np.linalg.norm(roots, axis=1))[:, None]
    values = math.sqrt(1.0 / (m * n)) * roots
    exact = sym_to_vec(values.T @ values) / spec.quantum  # in quanta
    x = values / math.sqrt(spec.quantum)
    frac = x - np.floor(x)
    bias = sym_to_vec(np.diag(np.sum(frac * (1 - frac), axis=0)))
    draws = np.array([secure_mod.privatize_integer([values, values], ClientNoise(np.random.SeedSequence(s), m), spec,
                                                   sens, "h")[1][0] for s in range(400)]) / spec.quantum
    mean, se = draws.mean(axis=0), draws.std(axis=0) / math.sqrt(len(draws))
    assert np.all(np.abs(mean - exact - bias) < 5 * se + 1e-9)
    assert np.all(bias <= n / 4) and np.all(bias[np.triu_indices(p)[0] != np.triu_indices(p)[1]] == 0)


def test_a_multinomial_hessian_is_rounded_as_a_whole_and_the_other_psd_verbs_per_row():
    args = (1e-3, 0.1, 21, 1.0, 4, 4, 800)
    assert secure_mod.verb_spec("secure_hessians", *args, outputs=2).outer == 0
    assert secure_mod.verb_spec("secure_score_outer", *args, outputs=2).outer > 0
    assert secure_mod.verb_spec("secure_hessians", *args).outer > 0
    # so many rows that Flower's word cannot hold the bracket's radius, and 2 blocks that would carry the rows' rounding
    # variance 5 times the noise's: the site message rounded as a whole
    n = 50000  # per site: N K_gap about 2^29.1, a modulus of 31 bits
    many = secure_mod.verb_spec("secure_hessians", 0.25 * math.sqrt(2) * 0.6 / n, 0.25 * 0.6, 21, 1.0, 4, 4, 4 * n)
    assert many.outer == 0 and many.rounding and many.bits <= 28
    # 10 sites of 30 000 rows at mu 0.3: the word holds K = 1734, whose rounding variance would exceed the noise's
    n, m = 30_000, 10
    args = (0.1 * math.sqrt(2) / n, 0.1, 28, 0.3, m, m, m * n)
    assert secure_mod.verb_spec("secure_hessians", *args).outer == 0
    assert secure_mod.verb_spec("secure_hessians", *args[:-1], n).outer > 0  # a tenth of the rows (as sizes)
