"""Secure rounds that the integer noise cannot serve (a new user's gss_wages fit, Poisson over 30 survey years,
``aggregation="secure"``, ``mu=2``, ``n_rounds=12``: "the secure round's budget mu = 0.00078 is too small for 66
coordinates" after the scaling and the clip search had spent budget). The derived split's first Hessians get
``BACKWARD_RATIO^(R - 1)`` of the last one's share; under secure aggregation the ones below what a secure sum can
serve are pooled into one release (the rounds after it reuse it), and a schedule that no bound can make servable is
refused before any release."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from privfedstat import PrivacyBudget, glm
from privfedstat.federation.secure import least_round_mu, verb_spec
from privfedstat.privacy.calibration import auto_budget_split, largest_split_shares, pooled_hessians


def _poisson(n=3000, m=30, p=12, seed=0) -> tuple[pd.DataFrame, str]:
    """Many coefficients (p = 12: 78 Hessian coordinates) over many sites."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p - 1))
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(p - 1)])
    df["y"], df["site"] = rng.poisson(np.exp(0.2 + X @ np.full(p - 1, 0.1))), rng.integers(0, m, n)
    return df, "y ~ " + " + ".join(df.columns[: p - 1])


def _fit(df, formula, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return glm(formula, df, client="site", family="poisson", aggregation="secure", random_state=0, **kw)


def test_pooled_shares_keep_the_budget_and_serve_every_release():
    """Against a naive reading: every fresh Hessian share is at least ``least`` (where their total is), the sum and the
    gradients are unchanged, a pooled release comes first in its run, and least = 0 changes nothing."""
    for R, beta, least in [(12, 1e-6, 1e-5), (14, 1e-3, 2e-4), (5, 1.0, 0.3), (8, 1e-9, 1.0)]:
        shares = auto_budget_split(R, beta)
        pooled = pooled_hessians(shares, least)
        fresh = pooled[pooled[:, 1] > 0, 1]
        assert math.isclose(pooled.sum(), 1.0) and np.array_equal(pooled[:, 0], shares[:, 0])
        assert np.all(fresh >= least) or fresh.size == 1
        assert pooled[0, 1] > 0  # the first round releases a Hessian
        untouched = shares[:, 1] >= least
        assert np.all(pooled[untouched & (pooled[:, 1] > 0), 1] == shares[untouched & (pooled[:, 1] > 0), 1])
        assert np.array_equal(pooled_hessians(shares, 0.0), shares)


def test_the_largest_shares_bound_the_split_for_every_beta():
    for R in (1, 2, 5, 12):
        gradients, hessians = largest_split_shares(R)
        for beta in np.geomspace(1e-12, 1e12, 25):
            shares = auto_budget_split(R, beta)
            assert np.all(shares[:, 0] <= gradients * (1 + 1e-9)) and shares[:, 1].sum() <= hessians * (1 + 1e-9)
        np.testing.assert_allclose(auto_budget_split(R, 1e12)[:-1, 0], gradients[:-1], rtol=1e-3)


def test_least_round_mu_is_where_the_secure_round_is_served():
    """Just above it every verb is served (whatever sensitivity); below it the message's rounding is refused."""
    for verb, d in (("secure_hessians", 78), ("secure_gradients", 12), ("secure_hessians", 3)):
        verb_spec(verb, 0.01, 1.0, d, 1.001 * least_round_mu(verb, d), 30, 30, 3000)
    with pytest.raises(ValueError, match="too small"):
        verb_spec("secure_gradients", 0.01, 1.0, 12, 0.99 * least_round_mu("secure_gradients", 12), 30, 30, 3000)


def test_many_rounds_under_secure_aggregation_run_on_pooled_hessians():
    """p = 12, 30 sites, n_rounds = 14, mu = 2: round 1's Hessian got mu = 0.00083 (too small for 78 coordinates;
    the fit raised on main after its searches); now the first rounds' Hessians are one release, every release served,
    the ledger at mu."""
    df, formula = _poisson()
    est = _fit(df, formula, mu=2.0, n_rounds=14)
    shares = est.budget_split_
    assert math.isclose(shares.sum(), 1.0) and np.count_nonzero(shares[:, 1]) < 14
    fresh = shares[shares[:, 1] > 0, 1]
    assert np.all(np.isfinite(est.coef_)) and math.isclose(est.privacy_.mu, 2.0, rel_tol=1e-9)
    assert fresh.min() / shares[:, 1].max() > 0.35**13  # the smallest fresh share is no longer BACKWARD_RATIO^(R - 1)


@pytest.mark.parametrize("mu, n_rounds", [(0.3, 14), (2.0, 20)])
def test_a_schedule_no_bound_can_serve_is_refused_before_any_release(mu, n_rounds):
    """Round 1's gradient gets at most BACKWARD_RATIO^(R - 2) / W of the estimation mu^2 whatever the bounds: below the
    secure sum's least budget the fit is refused before the scaling and the search spend anything (on main it raised
    mid-fit, the budget charged)."""
    df, formula = _poisson()
    budget = PrivacyBudget(100.0, n_clients=30)
    with pytest.raises(ValueError, match=r"before any release.*n_rounds=.*aggregation='local'"):
        _fit(df, formula, mu=mu, n_rounds=n_rounds, budget=budget)
    assert budget.remaining_mu == 100.0
