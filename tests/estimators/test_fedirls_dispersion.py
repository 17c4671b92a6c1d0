"""FedIRLS's refine-bound insurance in units of one row's score sd: a count model releases its Pearson dispersion at
the located point (stage ``disperse``), and the ceiling on the raised bound's noise is ``0.4 sqrt(phi / N)``."""

import math

import numpy as np
import pytest
import statsmodels.api as sm

from privfedstat import FederatedData, FedIRLS
from privfedstat.algorithms.fedirls import IRLSSchedule
from privfedstat.families import get_family
from privfedstat.federation.protocol import Setup
from privfedstat.inference.config import critical_value
from privfedstat.inference.core import DISPERSION_SHARE

SIZES = np.full(10, 500.0)


def _plan(family: str, mu: float, **kw) -> tuple[IRLSSchedule, np.ndarray, Setup]:
    est = FedIRLS(family=family, mu=mu, **kw)
    grid = est._default_search.grid
    setup = Setup(float(grid[30]), 5.0, 0.9 * mu)
    return est.plan_schedule(get_family(family), SIZES, setup, 3), grid, setup


@pytest.mark.parametrize("aggregation, share", [("local", IRLSSchedule.research_share),
                                                ("secure", IRLSSchedule.research_share / SIZES.size)])
def test_a_count_model_releases_its_dispersion_between_the_new_search_and_the_insurance(aggregation, share):
    plan, _, setup = _plan("poisson", 4.0, aggregation=aggregation)
    assert plan.stages == ("locate", "whiten", "research", "disperse", "insure", "refine")
    assert plan.mu_dispersion == pytest.approx(setup.mu * math.sqrt(DISPERSION_SHARE * share), rel=1e-12)
    shares = np.vstack(plan.shares)  # the dispersion's share of mu^2 comes out of the refine rounds
    assert shares.sum() == pytest.approx(1.0 - share * (1.0 + DISPERSION_SHARE), rel=1e-12)
    binary, _, _ = _plan("logistic", 4.0, aggregation=aggregation)  # a binary response cannot be overdispersed
    assert "disperse" not in binary.stages and binary.mu_dispersion == 0.0
    assert np.vstack(binary.shares).sum() == pytest.approx(1.0 - share, rel=1e-12)


@pytest.mark.parametrize("mu, phi, expected", [(2.0, 1.2, 0), (2.0, 9.0, 3), (4.0, 1.2, 1), (3.0, 4.0, 3),
                                               (1.0, 9.0, 0), (6.0, 1.2, 3)])
def test_the_insurance_ceiling_is_one_rows_score_sd_over_sqrt_n(mu, phi, expected):
    """The raise j is the largest (<= 3) with the estimate's gradient noise sd ``2 B r^j sqrt(sum w_i^2 / n_i^2) /
    mu_comb <= 0.4 sqrt(max(1, phi - 3.09 sd_phi) / N)`` (closed form; Poisson: the estimate combines the rounds from
    the last fresh Hessian on by precision, 5% + 10% + 40% of the refine rounds' share); a dispersion within its noise
    of 1 leaves the unit-dispersion rule (no argument) unchanged."""
    plan, grid, setup = _plan("poisson", mu)
    w, N, B = SIZES / SIZES.sum(), SIZES.sum(), float(grid[30])
    left = 1.0 - IRLSSchedule.locate_share - IRLSSchedule.research_share * (1.0 + DISPERSION_SHARE)
    sd = 2.0 * B * math.sqrt(np.sum(w**2 / SIZES**2)) / (setup.mu * math.sqrt(0.55 * left))
    unit = math.sqrt(max(1.0, phi - critical_value(sides=1) * 0.1))
    r = grid[1] / grid[0]
    assert max(k for k in range(4) if sd * r**k <= 0.4 * unit / math.sqrt(N) or k == 0) == expected
    found = {"gradient": B, "hessian": 5.0}
    assert plan.insured_bounds(found, (phi, 0.1))["gradient"] == pytest.approx(grid[30 + expected])
    if phi < 1.0 + critical_value(sides=1) * 0.1:
        assert plan.insured_bounds(found, (phi, 0.1)) == plan.insured_bounds(found)
    assert plan.insured_bounds(found, (phi, 0.1))["hessian"] == 5.0


@pytest.mark.filterwarnings("ignore::privfedstat.OverdispersionWarning")
def test_an_overdispersed_count_fit_judges_its_insurance_on_the_dispersion_it_released(monkeypatch):
    """A gamma-Poisson response (dispersion about 1 + mean / 2): the fit releases the capped Pearson dispersion at
    the located point (ledger stage ``irls-dispersion``, its mu the schedule's), near statsmodels' Pearson dispersion
    at the MLE, and the insurance receives it; the ledger still composes to the fit's mu."""
    rng = np.random.default_rng(3)
    N = int(SIZES.sum())
    X = np.column_stack([np.ones(N), rng.normal(size=(N, 2))])
    mean = np.exp(X @ [1.0, 0.4, -0.3])
    y = rng.poisson(mean * rng.gamma(2.0, 0.5, size=N)).astype(float)
    pearson = sm.GLM(y, X, family=sm.families.Poisson()).fit().pearson_chi2 / (N - 3)
    seen = []
    insured = IRLSSchedule.insured_bounds

    def spy(self, found, dispersion=None, tau2=None):
        assert tau2 is None  # counts are not re-weighed (site_weights: sigma^2 is not 1)
        seen.append((self, dispersion))
        return insured(self, found, dispersion, tau2)

    monkeypatch.setattr(IRLSSchedule, "insured_bounds", spy)
    data = FederatedData.from_pooled(X, y, sizes=SIZES.astype(int).tolist())
    est = FedIRLS(family="poisson", mu=8.0, random_state=0).fit(data)
    (schedule, (phi, sd)), = seen
    assert pearson > 2.0 and sd <= 0.1 + 1e-12 and abs(phi - pearson) < 0.25 * pearson
    spent = [r for r in est.privacy_.releases if r.stage == "irls-dispersion"]
    assert len(spent) == 1 and float(np.max(spent[0].client_mu())) == pytest.approx(schedule.mu_dispersion, rel=1e-12)
    assert est.privacy_.mu == pytest.approx(8.0, rel=1e-12)
