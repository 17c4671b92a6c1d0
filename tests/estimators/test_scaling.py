"""Private feature scaling for any finite scale (issue 9 item 5): binary and rare columns, constant
columns, covariates on scales from 1e-12 to 1e12, and no catastrophic centre or scale when the
count noise is comparable to N."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from _scaling import private_scaler

from privfedstat import glm
from privfedstat.algorithms import FedIRLS, FedSGD, PooledMLE
from privfedstat.data.federated import FederatedData
from privfedstat.exceptions import PrivacyNoiseWarning
from privfedstat.families import get_family
from privfedstat.fitting.scaling import PrivateStandardize


def _noisy_release(rng):
    """A channel stand-in: every client's count gets N(0, 1 / mu_q^2) noise (sensitivity 1)."""
    return lambda counts, mu, stage: counts + rng.standard_normal(counts.shape) / mu


def _federate(X, y, n_clients):
    n = X.shape[0]
    sizes = [n // n_clients + (i < n % n_clients) for i in range(n_clients)]
    return FederatedData.from_pooled(X, y, sizes=sizes)


def _randhie_like(rng, n=20190, p=0.077):
    """Intercept, a continuous column and a binary column with a rare level (randhie's hlthf)."""
    return np.column_stack([np.ones(n), rng.gamma(2.0, 3.0, n), (rng.random(n) < p).astype(float)])


def test_exact_centre_and_scale_are_the_median_and_quantile_of_non_zero_deviations():
    rng = np.random.default_rng(0)
    X = _randhie_like(rng, n=4000)
    scaler = private_scaler(PrivateStandardize(), _federate(X, np.zeros(len(X)), 10), lambda c, mu, s: c, math.inf)
    ratio = 10 ** (30 / 255)  # spacing of the public grid
    med = np.median(X[:, 1])
    assert med <= scaler.center[1] <= med * ratio**2  # symmetric grid: every other point of the scale grid
    dev = np.abs(X[:, 1] - scaler.center[1])
    q = np.quantile(dev, 0.9)
    assert q <= scaler.scale[1] <= q * ratio
    # binary column: centre 0 (the median), the non-zero deviations are all 1
    assert scaler.center[2] == 0.0 and 1.0 <= scaler.scale[2] <= ratio


def test_rare_binary_column_gets_a_scale_near_one_at_finite_mu():
    # the old search took the 0.9 quantile of |x - 0|, which lies on the atom at 0 (92.3% zeros):
    # the noisy bisection then returned grid points down to 1e-11 (fits 1e10 SE off on randhie)
    rng = np.random.default_rng(1)
    X = _randhie_like(rng)
    data = _federate(X, np.zeros(len(X)), 20)
    config = PrivateStandardize()
    scales = [private_scaler(config, data, _noisy_release(np.random.default_rng(s)), 0.2).scale[2] for s in range(30)]
    assert min(scales) >= 1.0  # never below the values: leaning up, atom cleared
    assert np.median(scales) < 2.0


def test_balanced_binary_column_on_many_small_sites_is_never_blown_up():
    # about half ones: every grid point in (0, 1) has the same count, and with 148 sites of 23 rows (count noise
    # sd 273 at this budget) the median search may stop anywhere there; a centre of 1.7e-15 left the atom at 0
    # outside its resolution and the scale search landed between the zeros and the ones: scales down to 4e-15 in
    # 16 of 300 seeds (a fit on mlmRev's ScotsSec 2e8 SE from the MLE). Centres within ZERO_CENTRE of 0 are 0.
    rng = np.random.default_rng(2)
    n, m = 3404, 148
    X = np.column_stack([np.ones(n), rng.normal(0, 10, n), rng.random(n) < 0.494, rng.gamma(2, 1, n),
                         rng.random(n) < 0.3, rng.random(n) < 0.1]).astype(float)
    data = FederatedData.from_pooled(X, rng.normal(5, 2, n), sizes=[n // m + (i < n % m) for i in range(m)])
    family = get_family("gaussian")
    assert PrivateStandardize().count_noise_sd(m, X.shape[1], 0.5, family) > 250
    scales = [private_scaler(PrivateStandardize(), data, _noisy_release(np.random.default_rng(s)), 0.5, family).scale[2]
              for s in range(150)]
    assert min(scales) > 0.3


def test_indicator_too_rare_to_locate_is_left_unscaled():
    # 3% ones over 3000 rows: the non-zero deviations are within the count noise of N at mu = 0.2
    rng = np.random.default_rng(4)
    X = np.column_stack([np.ones(3000), rng.random(3000) < 0.03])
    data = _federate(X, np.zeros(3000), 10)
    for seed in range(10):
        scaler = private_scaler(PrivateStandardize(), data, _noisy_release(np.random.default_rng(seed)), 0.2)
        assert (scaler.center[1], scaler.scale[1]) == (0.0, 1.0)


def test_pure_noise_is_decided_publicly_and_spends_nothing():
    # tiny data, small budget: the pooled count noise is far above N, so no search can locate
    # anything; this is known from public quantities before any release: the columns stay unscaled
    # and the whole mu goes to estimation
    from privfedstat import FedSGD

    rng = np.random.default_rng(2)
    X = np.column_stack([np.ones(32), 1e3 + rng.standard_normal(32), rng.standard_normal(32)])
    data = _federate(X, (rng.random(32) < 0.5).astype(float), 5)
    assert not PrivateStandardize().locatable(32, 5, 3, 0.2)
    assert PrivateStandardize().locatable(32, 5, 3, 20.0)
    with pytest.warns(PrivacyNoiseWarning, match="cannot locate the columns"):
        est = FedSGD(mu=2.0, scaling="private", random_state=0).fit(data)
    np.testing.assert_array_equal(est.scaler_.center, 0.0)
    np.testing.assert_array_equal(est.scaler_.scale, 1.0)
    assert not est.privacy_.to_frame()["stage"].str.startswith("scaling").any()
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-12)
    with pytest.raises(ValueError, match="locatable"):
        private_scaler(PrivateStandardize(), data, _noisy_release(rng), 0.2)


@pytest.mark.parametrize("factor", [1e-12, 1e12])
def test_constant_column_without_intercept_is_scaled_to_one(factor):
    X = np.column_stack([np.full(200, 3.0 * factor), np.linspace(-1, 1, 200)])
    scaler = private_scaler(PrivateStandardize(intercept=None), _federate(X, np.zeros(200), 4), lambda c, mu, s: c, math.inf)
    assert scaler.center[0] == 0.0
    assert 10 ** (-30 / 255) <= 3.0 * factor / scaler.scale[0] <= 1.0  # the grid point at or just above


def _logistic_data(factors, n=3000, n_clients=10, seed=3):
    rng = np.random.default_rng(seed)
    Z = np.column_stack([rng.standard_normal(n), rng.random(n) < 0.5, rng.gamma(2.0, 1.0, n)])
    eta = -0.5 + Z @ np.array([0.8, 1.0, -0.4])
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    X = np.column_stack([np.ones(n), Z * np.asarray(factors)])
    return _federate(X, y, n_clients)


@pytest.mark.parametrize("method", [FedSGD, FedIRLS])
def test_fit_on_columns_scaled_by_1e12_and_1e_12(method):
    factors = np.array([1e12, 1e-12, 1e12])
    data = _logistic_data(factors)
    base = _logistic_data(np.ones(3))
    mle = PooledMLE(family="logistic").fit(base).coef_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = method(family="logistic", mu=math.inf, scaling="private", random_state=0).fit(data)
        private = [method(family="logistic", mu=2.0, scaling="private", random_state=s).fit(data) for s in range(3)]
    back = lambda est: est.coef_ * np.r_[1.0, factors]  # noqa: E731 -- coefficients on the unscaled columns
    np.testing.assert_allclose(back(exact), mle, rtol=1e-3, atol=1e-3)
    # at mu = 2 (N = 3000 over 10 sites) within a fraction of a unit of the MLE on the unscaled columns
    err = np.median([np.max(np.abs(back(e) - mle)) for e in private])
    assert err < 0.5, err


def test_a_column_whose_spread_is_below_the_centres_first_resolution_is_centred_within_its_spread():
    # calendar years 1990..1996 (issue 42): the coarse symmetric grid brackets the median in (1173, 2018] and its 16
    # evenly spaced refine points step by 53 years, more than the column's range. Every deviation then lay within
    # the centre's resolution (the "atom"), the scale search's result was discarded: the column stayed at
    # year - 2018 with scale 1, nearly collinear with the intercept (a rare-outcome logistic fit 5.5 SE off). The
    # scale search's queries now resolve the centre within that bracket instead: 8 points (6.6 years), whose
    # half-bracket still holds nearly every deviation, then 16 more (0.4 years; the centre at the midpoint).
    rng = np.random.default_rng(5)
    n, m = 26000, 6
    year = np.round(rng.normal(1991 + np.repeat(np.arange(m), n // m), 1.0)).clip(1990, 1996)
    X = np.column_stack([np.ones(n - n % m), year, rng.normal(45, 12, n - n % m)])
    data = _federate(X, np.zeros(len(X)), m)
    median = np.median(year)
    for seed in range(10):
        scaler = private_scaler(PrivateStandardize(), data, _noisy_release(np.random.default_rng(seed)), 2.0)
        assert abs(scaler.center[1] - median) <= 0.5, scaler.center
        assert scaler.scale[1] == 1.0  # a spread below the second resolution too: the queries went to the centre
        assert 40 < scaler.center[2] < 50 and 10 < scaler.scale[2] < 30  # a column whose spread clears its centre
    nearly_exact = private_scaler(PrivateStandardize(), data, lambda c, mu, s: c, 1e6)  # decisions lean by ~1e-4 rows
    assert abs(nearly_exact.center[1] - median) <= 53 / 256


def test_a_model_year_column_gets_its_scale_located_inside_the_centres_step():
    # nassCDS's yearVeh (issue 42): model years 1953-2003, median 1994, 0.9 quantile of |x - median| about 10. Its
    # deviations lie within the centre's 53-year refine step, so the scale was never searched: the column was fitted
    # at its own spread (scale 1), its values up to 40 set the clipping bound of every coefficient (RMS z 1.89 and
    # intervals holding 86% at mu = 2; centred and scaled by the user: privacy sds 40% lower). The step's queries now
    # find that the deviations clear the half-bracket around the centre and search the scale inside the step.
    rng = np.random.default_rng(6)
    n, m = 26000, 6
    year = np.clip(np.round(1996 - rng.gamma(1.5, 3.0, n)), 1953, 2003)
    data = _federate(np.column_stack([np.ones(n), year]), np.zeros(n), m)
    spread = np.quantile(np.abs(year - np.median(year)), 0.9)
    for seed, mu in zip(range(10), [2.0, 0.5] * 5):  # the scaling's share of mu = 8, 2
        scaler = private_scaler(PrivateStandardize(), data, _noisy_release(np.random.default_rng(seed)), mu)
        assert abs(scaler.center[1] - np.median(year)) <= 53 / 16, scaler.center
        assert spread <= scaler.scale[1] <= 2 * spread, (scaler.scale, spread)  # leans up, one 1.26 grid step


@pytest.mark.parametrize("share", [0.97, 0.85])
def test_an_atom_off_zero_inside_the_centres_step_keeps_scale_one(share):
    # an indicator coded 1990 / 1991: its deviations lie inside the centre's step and, at the centre, on the atom;
    # the scale search inside the step must never land on it (a scale of a fraction of a year blows the column up)
    rng = np.random.default_rng(7)
    n = 26000
    x = np.where(rng.random(n) < share, 1990.0, 1991.0)
    data = _federate(np.column_stack([np.ones(n), x]), np.zeros(n), 6)
    for seed, mu in zip(range(10), [2.0, 0.5] * 5):  # the scaling's share of mu = 8, 2
        scaler = private_scaler(PrivateStandardize(), data, _noisy_release(np.random.default_rng(seed)), mu)
        assert abs(scaler.center[1] - 1990.0) <= 0.5 and scaler.scale[1] >= 1.0, (scaler.center, scaler.scale)


def test_an_indicator_whose_zeros_fill_the_centres_step_keeps_scale_one():
    # NMES1988's health == "poor" (about 13% ones) among ten columns, 4406 rows over 4 regions, mu = 2: its centre is 0
    # and its zeros plus the lean exceed the scale's target, so its deviations do not clear the atom. A scale search
    # inside the centre's step (about 1e-16 wide at 0) returned 1e-17 in one fit of three (coefficients 1e14 off): at
    # a centre of 0 the step holds the atom alone, and the column keeps scale 1
    rng = np.random.default_rng(8)
    n = 4406
    X = np.column_stack([np.ones(n), rng.normal(size=(n, 8)), rng.random(n) < 0.13])
    data = _federate(X, np.zeros(n), 4)
    for seed in range(30):  # the scaling's share of mu = 2: 0.5
        scaler = private_scaler(PrivateStandardize(), data, _noisy_release(np.random.default_rng(seed)), 0.5)
        assert scaler.center[9] == 0.0 and scaler.scale[9] >= 1.0, (seed, scaler.center[9], scaler.scale[9])


@pytest.mark.parametrize("n_grid", [4, 8, 256])
def test_every_column_spends_its_planned_queries_inside_or_outside_the_centres_step(n_grid):
    # the scaling's budget per query is fixed from PrivateStandardize.queries_per_column(): a column located inside its
    # centre's step (model year: scale searched there; calendar years: centre bisected further; an indicator at 0)
    # must ask exactly as many counts as one that clears its atom, whichever path its released counts choose
    rng = np.random.default_rng(9)
    n = 6000
    X = np.column_stack([np.ones(n), np.clip(np.round(1996 - rng.gamma(1.5, 3.0, n)), 1953, 2003),
                         rng.integers(1990, 1997, n), rng.random(n) < 0.1, rng.normal(45, 12, n)])
    data = _federate(X, np.zeros(n), 6)
    config = PrivateStandardize(n_grid=n_grid)
    asked: dict[str, int] = {}
    noisy = _noisy_release(np.random.default_rng(0))

    def release(counts, mu, stage):
        asked[stage] = asked.get(stage, 0) + 1
        return noisy(counts, mu, stage)

    scaler = private_scaler(config, data, release, 2.0)
    assert set(asked.values()) == {config.queries_per_column()}, asked
    if n_grid == 256:  # (coarser grids cannot resolve a level of 2000; their query count is what is checked)
        assert 1990 <= scaler.center[1] <= 1996 and 1992 <= scaler.center[2] <= 1994 and scaler.center[3] == 0.0
        assert 3 < scaler.scale[1] < 12 and scaler.scale[2] == 1.0 and 1.0 <= scaler.scale[3] < 1.5, scaler.scale


def _model_year_frame(seed: int, n: int = 20000, m: int = 6) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    year = np.clip(np.round(1996 - rng.gamma(1.5, 3.0, n)), 1953, 2003)
    age, belt = rng.normal(40, 15, n).clip(16, 97), (rng.random(n) < 0.7).astype(float)
    eta = -3.2 + 0.02 * (age - 40) - 0.8 * belt - 0.05 * (year - 1994)
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    return pd.DataFrame(dict(y=y, age=age, belt=belt, year=year, year_scaled=(year - 1994) / 6, site=rng.integers(0, m, n)))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_raw_model_year_costs_the_other_coefficients_no_privacy_noise(seed):
    # the nassCDS stand-in (issue 42): a rare-ish logistic outcome with a model-year column (1953-2003, median about
    # 1994) next to age and a dummy, mu = 2. With the year's scale never located (1 at its own spread, deviations up
    # to 40) its values set the clipping bound of every coefficient: the privacy sds of age and belt were 1.14-1.78
    # times those of the same fit with the year centred and scaled by the user; now within 10%
    df = _model_year_frame(seed)
    sd = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for col in ("year", "year_scaled"):
            est = glm(f"y ~ age + belt + {col}", df, client="site", family="logistic", mu=2.0, random_state=seed)
            sd[col] = np.sqrt(np.diag(est.inference_.cov_privacy))[1:3]  # age, belt: the same coefficients in both
    ratio = sd["year"] / sd["year_scaled"]
    assert np.all(ratio < 1.1), ratio
