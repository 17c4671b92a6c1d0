"""Privacy: everything that decides how much noise a release gets and what guarantee it gives.

Every privacy formula lives here, so that the protocols, the theory and the reports agree:
``gdp`` (pure mu-GDP math), ``calibration`` (every algorithm's sensitivities, noise scales and
budget splits), ``mechanisms`` (the clients' Gaussian noise, reproducible or secure), ``clipping``
(the private choice of the clipping bound), ``ledger`` (every release as the server saw it and
the guarantees they compose to), ``public`` (what may be published of a ledger, and the epsilon
a third party faces), ``accounting`` (PLD accounting of Poisson-subsampled client-level releases,
replace-one) and ``budget`` (one total budget spent by several fits).
"""

from .budget import PrivacyBudget
from .clipping import AutoClip, private_grid_quantile
from .gdp import calibrate_sigma, compose, delta_from_mu, epsilon_from_mu, gaussian_mu, mu_from_epsilon_delta
from .ledger import PrivacyLedger, Release
from .mechanisms import ClientNoise, SecureClientNoise
from .public import PublicLedger

__all__ = [
    "gaussian_mu",
    "calibrate_sigma",
    "compose",
    "delta_from_mu",
    "epsilon_from_mu",
    "mu_from_epsilon_delta",
    "PrivacyLedger",
    "PublicLedger",
    "Release",
    "ClientNoise",
    "SecureClientNoise",
    "PrivacyBudget",
    "AutoClip",
    "private_grid_quantile",
]
