"""Tests for privfedstat.privacy.accounting (PLD accounting of Poisson-subsampled Gaussians).

The reference is dp-accounting's pessimistic PLD accountant built directly here, and, for q = 1,
the exact GDP conversion of ``mu = 2 sqrt(T) / z`` under replacement (``sqrt(T) / z`` under
add/remove; Dong, Roth & Su 2022, Corollary 2.13). tests/privacy/test_threat_model.py checks the
replace-one PLD against a direct computation of the hockey-stick divergence.
"""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant

from privfedstat.privacy.accounting import (
    RELATIONS,
    heterogeneous_epsilon,
    noise_multiplier_for_epsilon,
    subsampled_gaussian_delta,
    subsampled_gaussian_epsilon,
)
from privfedstat.privacy.gdp import epsilon_from_mu

COARSE = 1e-3  # value_discretization_interval where both sides of a comparison use the same one


def reference_accountant(blocks, vdi, relation=dp_accounting.NeighboringRelation.REPLACE_ONE):
    accountant = PLDAccountant(neighboring_relation=relation, value_discretization_interval=vdi)
    for z, q, t in blocks:
        accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), t)
    return accountant


@pytest.mark.slow
@pytest.mark.parametrize("relation", ["replace", "add_remove"])
@pytest.mark.parametrize("z, q, t", [(1.0, 0.1, 100), (0.8, 0.01, 1000), (2.0, 0.5, 20)])
def test_equals_dp_accounting_pld(z, q, t, relation):
    ref = reference_accountant([(z, q, t)], COARSE, RELATIONS[relation])
    eps = subsampled_gaussian_epsilon(z, q, t, 1e-5, relation=relation, value_discretization_interval=COARSE)
    assert eps == pytest.approx(ref.get_epsilon(1e-5), rel=1e-6)
    delta = subsampled_gaussian_delta(z, q, t, 2.0, relation=relation, value_discretization_interval=COARSE)
    assert delta == pytest.approx(ref.get_delta(2.0), rel=1e-6)
    assert subsampled_gaussian_delta(z, q, t, eps, relation=relation,
                                     value_discretization_interval=COARSE) <= 1e-5 * (1 + 1e-6)


@pytest.mark.slow
def test_replacing_costs_more_than_adding_or_removing():
    """The same mechanism: replace-one (the package's unit) about 1.5-2.2x the add/remove epsilon."""
    for z, q, t in [(1.0, 0.1, 100), (2.0, 0.5, 20), (2 * math.sqrt(8), 0.3, 8)]:
        ratio = subsampled_gaussian_epsilon(z, q, t, 1e-5) / subsampled_gaussian_epsilon(z, q, t, 1e-5,
                                                                                          relation="add_remove")
        assert 1.4 < ratio < 2.3


@pytest.mark.parametrize("relation, scale", [("replace", 2.0), ("add_remove", 1.0)])
@pytest.mark.parametrize("z, t", [(1.3, 7), (0.3, 50), (0.005, 50)])
def test_without_subsampling_or_at_tiny_noise_the_exact_gdp_composition_is_used(z, t, relation, scale):
    """q = 1 is c sqrt(t) / z-GDP exactly (c = 2 replace, 1 add/remove): epsilon and delta from the GDP curve, at
    most the pessimistic PLD, and instantaneous where the PLD takes minutes (z = 0.005); below PLD_MIN_NOISE a
    subsampled block is accounted unamplified (an upper bound)."""
    from privfedstat.privacy.accounting import PLD_MIN_NOISE
    from privfedstat.privacy.gdp import delta_from_mu

    mu = scale * math.sqrt(t) / z
    eps = subsampled_gaussian_epsilon(z, 1.0, t, 1e-5, relation=relation)
    assert eps == pytest.approx(epsilon_from_mu(mu, 1e-5), rel=1e-12)
    assert subsampled_gaussian_delta(z, 1.0, t, 2.0, relation=relation) == pytest.approx(delta_from_mu(mu, 2.0),
                                                                                         rel=1e-12)
    if z >= 1.0:
        assert reference_accountant([(z, 1.0, t)], COARSE, RELATIONS[relation]).get_epsilon(1e-5) >= eps * (1 - 1e-9)
    if z < PLD_MIN_NOISE:
        assert subsampled_gaussian_epsilon(z, 0.5, t, 1e-5, relation=relation) == eps
    assert noise_multiplier_for_epsilon(eps, 1e-5, 1.0, t, relation=relation) == pytest.approx(z, rel=1e-8)


def test_heterogeneous_equals_dp_accounting_pld():
    blocks = [(1.0, 0.1, 50), (2.0, 0.2, 30), (0.9, 1.0, 2)]
    ref = reference_accountant(blocks, COARSE).get_epsilon(1e-6)
    assert heterogeneous_epsilon(blocks, 1e-6, value_discretization_interval=COARSE) == pytest.approx(ref, rel=1e-6)
    # one block is the single-mechanism function
    single = subsampled_gaussian_epsilon(1.0, 0.1, 50, 1e-6, value_discretization_interval=COARSE)
    assert heterogeneous_epsilon([blocks[0]], 1e-6, value_discretization_interval=COARSE) == single
    # composing more never lowers epsilon, and one PLD is tighter than adding epsilons
    parts = [heterogeneous_epsilon([b], 1e-6, value_discretization_interval=COARSE) for b in blocks]
    assert max(parts) < ref < sum(parts)


def test_issue_number_and_why_no_clt():
    """q=0.1, z=1, T=100, delta=1e-5, add/remove (the CLT's relation): the PLD gives ~7.05; the CLT/GDP
    approximation ~6.01 under-reports."""
    q, z, t, delta = 0.1, 1.0, 100, 1e-5
    eps = subsampled_gaussian_epsilon(z, q, t, delta, relation="add_remove")  # default (fine) discretization
    assert 6.9 < eps < 7.2
    mu_clt = q * math.sqrt(t * (math.exp(1 / z**2) - 1))  # Bu, Dong, Long & Su (2020)
    eps_clt = epsilon_from_mu(mu_clt, delta)
    assert 5.9 < eps_clt < 6.1
    assert eps - eps_clt > 0.9


@pytest.mark.parametrize("relation, sensitivity", [("replace", 2.0), ("add_remove", 1.0)])
@pytest.mark.parametrize("z, t", [(1.0, 1), (2.0, 50), (5.0, 200)])
def test_no_subsampling_is_exact_gdp(z, t, relation, sensitivity):
    eps = subsampled_gaussian_epsilon(z, 1.0, t, 1e-5, relation=relation, value_discretization_interval=COARSE)
    exact = epsilon_from_mu(sensitivity * math.sqrt(t) / z, 1e-5)
    assert eps == pytest.approx(exact, rel=1e-3)
    assert eps >= exact * (1 - 1e-9)  # pessimistic: never below the truth


def test_monotone_in_sigma_and_q():
    by_sigma = [subsampled_gaussian_epsilon(z, 0.1, 100, 1e-5, value_discretization_interval=COARSE)
                for z in (0.7, 1.0, 1.5, 3.0)]
    assert all(a > b for a, b in zip(by_sigma, by_sigma[1:]))
    by_q = [subsampled_gaussian_epsilon(1.0, q, 100, 1e-5, value_discretization_interval=COARSE) for q in (1.0, 0.3, 0.1, 0.01)]
    assert all(a > b for a, b in zip(by_q, by_q[1:]))


@pytest.mark.parametrize("target, q, t", [(2.0, 0.05, 200), (8.0, 1.0, 10)])
def test_noise_multiplier_round_trip(target, q, t):
    z = noise_multiplier_for_epsilon(target, 1e-5, q, t, tol=1e-2)
    eps = subsampled_gaussian_epsilon(z, q, t, 1e-5)
    assert target - 1e-2 <= eps <= target
    assert subsampled_gaussian_epsilon(z * 0.97, q, t, 1e-5) > target  # near the smallest such z


def test_bad_input():
    with pytest.raises(ValueError, match="sampling_rate"):
        subsampled_gaussian_epsilon(1.0, 0.0, 10, 1e-5)
    with pytest.raises(ValueError, match="sampling_rate"):
        subsampled_gaussian_epsilon(1.0, 1.5, 10, 1e-5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        subsampled_gaussian_epsilon(0.0, 0.1, 10, 1e-5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        subsampled_gaussian_epsilon(-1.0, 0.1, 10, 1e-5)
    with pytest.raises(ValueError, match="steps"):
        subsampled_gaussian_epsilon(1.0, 0.1, 0, 1e-5)
    with pytest.raises(ValueError, match="steps"):
        subsampled_gaussian_epsilon(1.0, 0.1, 2.5, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        subsampled_gaussian_epsilon(1.0, 0.1, 10, 0.0)
    with pytest.raises(ValueError, match="delta"):
        subsampled_gaussian_epsilon(1.0, 0.1, 10, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        subsampled_gaussian_delta(1.0, 0.1, 10, 0.0)
    with pytest.raises(ValueError, match="target_epsilon"):
        noise_multiplier_for_epsilon(-1.0, 1e-5, 0.1, 10)
    with pytest.raises(ValueError, match="steps"):
        noise_multiplier_for_epsilon(1.0, 1e-5, 0.1, 0)
    with pytest.raises(ValueError, match="at least one"):
        heterogeneous_epsilon([], 1e-5)
    with pytest.raises(ValueError, match="each event"):
        heterogeneous_epsilon([(1.0, 0.1)], 1e-5)
    with pytest.raises(ValueError, match="relation"):
        subsampled_gaussian_epsilon(1.0, 0.1, 10, 1e-5, relation="substitute")
