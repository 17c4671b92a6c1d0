"""Per-row quantization of secure messages: every row's integer vector in its ball, the sum unbiased inside it, the
per-row statistics consistent with the site means, seeded reproducibility."""

import math

import numpy as np
import pytest

from privfedstat import FederatedData
from privfedstat.families import get_family
from privfedstat.federation import secure as secure_mod
from privfedstat.federation.oracle import make_oracle
from privfedstat.privacy.mechanisms import ClientNoise
from privfedstat.privacy.secure_rounding import quantize_rows, radius_squares, row_spec


def _spec(d=4, mu=1.0):
    return row_spec(1.0, 100.0, d, mu, 3, 3, 300)


def _one_row_per_site(x, spec, seed=0):
    """Each row of x (message units) as its own site: the integer vectors of the rows themselves."""
    sens = np.full(len(x), 1.0)  # the worst site's sensitivity: radius k sqrt(d)
    rngs = [np.random.default_rng([seed, i]) for i in range(len(x))]
    return quantize_rows([r[None, :] for r in x], spec, sens, rngs)


def test_every_rows_integer_vector_lies_in_its_ball_for_random_and_adversarial_rows():
    spec = _spec()
    d, k = 4, spec.row_reach
    radius = k * math.sqrt(d) * spec.quantum  # in message units
    rng = np.random.default_rng(1)
    on_sphere = rng.normal(size=(400, d))
    on_sphere *= radius / np.linalg.norm(on_sphere, axis=1, keepdims=True)
    lattice = np.full((1, d), k * spec.quantum)  # (k, ..., k): on the sphere and on the lattice
    above = on_sphere[:50] * (1 + 1e-9)  # the float error of a clipping
    huge = np.array([[1e300, -1e300, 1e300, 0.0], [1e200, 0.0, 0.0, 0.0]])  # scaled onto the ball first
    inside = rng.uniform(-1, 1, size=(200, d)) * radius / 2
    rows = np.vstack([on_sphere, lattice, above, huge, inside])
    a = _one_row_per_site(rows, spec)
    assert np.all(np.einsum("ij,ij->i", a, a) <= k * k * d)
    assert np.array_equal(a[400], [k] * d)  # a lattice point is its own rounding
    # rows well inside the ball are plain stochastic roundings: each coordinate within 1 of the value
    assert np.all(np.abs(a[-200:] - rows[-200:] / spec.quantum) < 1)


def test_the_radius_follows_the_sites_sensitivity_and_is_capped_by_the_spec():
    spec = _spec()
    k = spec.row_reach
    t = radius_squares(spec, np.array([1.0, 0.5, 2.0]))
    assert t[0] == k * k * 4 and t[2] == k * k * 4  # the worst site's radius k sqrt(d) exactly; never above
    assert t[1] == math.floor((k * 2.0 / 2) ** 2 * (1 + 1e-12))  # half the sensitivity: half the radius (k sqrt(d) / 2)
    assert spec.l2 == pytest.approx(2 * k * 2.0) and spec.l1 == 2 * k * 4


def test_the_site_sum_is_unbiased_inside_the_ball_and_its_bias_at_the_sphere_is_a_fraction_of_a_quantum():
    spec = _spec(d=3)
    k = spec.row_reach
    rng = np.random.default_rng(2)
    inner = rng.uniform(-0.3, 0.3, size=(50, 3)) * k * spec.quantum  # norms below R - sqrt(d): never conditioned
    draws = np.array([quantize_rows([inner], spec, [1.0], [np.random.default_rng(s)])[0] for s in range(400)])
    # the mean of 400 sums (sd of each coordinate's sum <= sqrt(50) / 2) is the rows' sum within 5 sd of the mean
    assert np.all(np.abs(draws.mean(0) - inner.sum(0) / spec.quantum) < 5 * math.sqrt(50) / 2 / math.sqrt(400))
    # rows on the sphere: the conditioning pulls each one inward by a fraction of a quantum (measured: 0.33-0.38
    # quanta along the row's direction, against a radius of k sqrt(d) > 10^3 quanta)
    u = rng.normal(size=(2000, 3))
    sphere = u / np.linalg.norm(u, axis=1, keepdims=True) * k * math.sqrt(3) * spec.quantum
    a = _one_row_per_site(sphere, spec, seed=3)
    radial = np.einsum("ij,ij->i", a - sphere / spec.quantum, u / np.linalg.norm(u, axis=1, keepdims=True))
    assert -0.5 < radial.mean() < -0.05
    assert k * math.sqrt(3) > 1000


def _data(seed=0, n=60, m=3):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(m * n), rng.normal(size=(m * n, 2)) * [1.0, 3.0]])
    y = (rng.uniform(size=m * n) < 0.5).astype(float)
    return FederatedData(X, y, np.arange(0, m * n + 1, n))


@pytest.mark.parametrize("family", ["logistic", "poisson", "multinomial"])
def test_the_per_row_statistics_average_to_the_site_statistics(family):
    data = _data()
    if family == "multinomial":
        data = FederatedData(data.X, np.random.default_rng(1).integers(0, 3, data.X.shape[0]).astype(float),
                             data.offsets)
        fam = get_family("multinomial", n_classes=3)
    else:
        fam = get_family(family)
    o = make_oracle(data, fam)
    theta = np.linspace(-0.4, 0.6, o.n_params)
    per_site = np.vstack([theta, 2 * theta, -theta])  # one theta per site too
    off = data.offsets
    for t in (theta, per_site):
        rows = o.row_gradients(t, 0.7)
        means = np.array([rows[off[i]:off[i + 1]].mean(0) for i in range(3)])
        np.testing.assert_allclose(means, o.clipped_gradients(t, 0.7), rtol=1e-12, atol=1e-15)
        excess = o.row_clipped_excess(t, 0.5, 0.9)
        means = np.array([excess[off[i]:off[i + 1]].mean(0) for i in range(3)])
        np.testing.assert_allclose(means, o.clipped_excess(t, 0.5, 0.9), rtol=1e-12, atol=1e-15)
    if family != "multinomial":
        terms = o.row_pearson_terms(theta, 2.0)
        np.testing.assert_allclose(np.add.reduceat(terms, off[:-1]), o.pearson_sums(theta, 2.0), rtol=1e-15)


def test_secure_gradient_residues_are_reproducible_per_seed_and_neighbours_move_within_2r():
    from privfedstat.federation.clients import InProcessClients

    data = _data(seed=4)
    fam = get_family("logistic")
    weights = data.sizes / data.sizes.sum()
    wsens = weights * 2.0 / data.sizes
    spec = secure_mod.verb_spec("secure_gradients", float(wsens.max()), float(weights.max()), 3, 0.5, 3, 3,
                                int(data.sizes.sum()))
    assert spec.row_reach > 0 and not spec.rounding
    theta = np.array([0.1, -0.3, 0.2])

    def residues(d, seed):
        c = InProcessClients(d, fam, ClientNoise(np.random.SeedSequence(seed), 3))
        return c.secure_gradients(theta, clip=1.0, weights=weights, sensitivity=wsens, spec=spec,
                                  stage="g").values.astype(np.int64)

    a = residues(data, 11)
    np.testing.assert_array_equal(a, residues(data, 11))
    assert not np.array_equal(a, residues(data, 12))
    X, y = data.X.copy(), data.y.copy()
    X[7], y[7] = [1.0, 1e6, -1e6], 1.0 - y[7]  # an adversarial row, clipped to the sphere
    b = residues(FederatedData(X, y, data.offsets), 11)
    modulus = 1 << spec.bits
    diff = np.mod(a - b, modulus)
    diff = np.where(diff >= modulus // 2, diff - modulus, diff).astype(np.float64)
    assert np.all(diff[1:] == 0)  # only the changed site moves (its other rows round as before)
    assert np.linalg.norm(diff[0]) <= spec.l2 and np.abs(diff[0]).sum() <= spec.l1
    rec = secure_mod.share_release(spec, wsens, 3, "g")
    assert rec.sensitivity.max() == pytest.approx(spec.l2 * spec.quantum, rel=1e-12)


def test_a_steeper_step_than_the_central_one_takes_a_smaller_row_radius_within_the_checked_lambda(monkeypatch):
    """Were a non-central step 1% steeper, the largest radius would need Lambda above the checked 1e8: the calibration
    takes a smaller k instead, and its budget still holds with that step."""
    import privfedstat.privacy.secure_noise as secure_noise

    central_steps = secure_noise.skellam_steps

    def steep_steps(lam):
        out = np.array(central_steps(lam))
        out[3] = 1.01 * out[0]
        return out

    plain = row_spec(1.0, 1.0, 4, 3.0, 3, 3, 300)  # a budget whose bracket needs Lambda at the checked maximum
    assert plain.lam * 3 == pytest.approx(secure_noise.MAX_CHECKED_LAM, rel=0.05)
    secure_noise.skellam_gdp_step.cache_clear()
    monkeypatch.setattr(secure_noise, "skellam_steps", steep_steps)
    try:
        steep = row_spec(1.0, 1.0, 4, 3.0, 3, 3, 300)
        assert steep.row_reach < plain.row_reach and steep.lam * 3 <= secure_noise.MAX_CHECKED_LAM
        step = secure_noise.skellam_gdp_step(steep.lam * 3)
        assert step == pytest.approx(1.01 * secure_noise.skellam_gdp_mu(steep.lam * 3), rel=1e-12)
        assert 3.0 * (1.0 - 1e-11) <= steep.l2 * step <= 3.0
    finally:
        secure_noise.skellam_gdp_step.cache_clear()


@pytest.mark.parametrize("bound", [4.0, 8.0, 16.0])
def test_where_the_word_caps_the_radius_k_is_the_largest_whose_modulus_fits_it(bound):
    """Messages whose reach fills Flower's SecAgg+ word below the bracket's k: the calibration takes the largest k whose
    modulus fits the word (30 bits, whatever the number of sites: 10 here), not a power-of-two fraction of the first
    try."""
    from privfedstat.privacy import secure_rounding as sr

    spec = row_spec(1e-3, bound, 7, 1.8, 10, 10, 20000)
    k, word = spec.row_reach, sr.WORD_BITS
    assert sr.MIN_REACH < k < math.ceil(1.8 * math.sqrt(sr.gap_lambda(1.8, 7) / 14))  # the word binds
    assert spec.bits <= word < sr._spec_at(k + 1, 1e-3, bound, 7, 1.8, 10, 10, 20000).bits
