"""A secure fit at a huge mu: its one-coordinate counts carry the least integer noise the calibration resolves
(Lambda about 3e-17, GDP about 17 per unit of sensitivity), below their share of the budget. The ledger charges what
that noise gives (so the fit's mu is below the one asked, and the summary says why), and a colluding site's share taken
off it leaves a finite GDP, not the inf that a central step rounded at P(Sk = 0) = 1 gave."""

import math

import numpy as np

from privfedstat.privacy.ledger import PrivacyLedger, Release
from privfedstat.privacy.secure_noise import IntegerNoise, skellam_gdp_mu, skellam_steps
from privfedstat.results.summary import privacy_rows

SITES, LAM = 6, 3.2297814984820764e-17  # the Lambda of glm(..., mu=1e3, aggregation="secure")'s clip counts


def _ledger() -> PrivacyLedger:
    noise = IntegerNoise(1.0, LAM, 1.0, 1.0, SITES, dim=1, rounding=False)
    ledger = PrivacyLedger(SITES)
    for r in range(3):
        ledger.record(Release("clip-count", r, "aggregated", np.ones(SITES), np.full(SITES, math.sqrt(2.0 * LAM)),
                              np.full(SITES, 1.0 / SITES), integer=noise))
    return ledger


def test_a_colluding_site_leaves_a_finite_gdp_on_the_least_noise():
    ledger = _ledger()
    left = LAM * (SITES - 1) / SITES
    assert math.isinf(skellam_gdp_mu(left))  # P(Sk = 0) is 1 in floats: the central step overflows
    expected = math.sqrt(3.0) * float(np.max(skellam_steps(left)))  # the log-space steps: 16.76 each
    assert ledger.collusion_mu(1) == np.float64(expected)
    assert 16.0 < expected / math.sqrt(3.0) < 18.0
    assert ledger.mu < ledger.collusion_mu(1) < math.inf
    assert math.isfinite(ledger.collusion_epsilon(1)) and math.isinf(ledger.collusion_mu(SITES))


def test_the_summary_says_why_a_secure_fit_is_below_the_mu_asked():
    ledger = _ledger()
    rows = privacy_rows(ledger, 1e-5, asked=1e3)
    assert f"mu = {ledger.mu:.4g} per client" in rows["Towards the server"]
    assert "below the mu = 1000 asked" in rows["Towards the server"] and "17 per unit" in rows["Towards the server"]
    assert "inf" not in rows["If one site colludes with it"]
    assert "below the mu" not in privacy_rows(ledger, 1e-5, asked=ledger.mu)["Towards the server"]
