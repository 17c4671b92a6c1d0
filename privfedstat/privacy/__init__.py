"""Privacy: GDP math (``gdp``), client noise (``mechanisms``), accounting (``ledger``, ``budget``), clipping bounds."""

from .budget import PrivacyBudget
from .clipping import AutoClip, private_grid_quantile
from .gdp import calibrate_sigma, compose, delta_from_mu, epsilon_from_mu, gaussian_mu, mu_from_epsilon_delta
from .ledger import PrivacyLedger, Release
from .mechanisms import ClientNoise, SecureClientNoise

__all__ = [
    "gaussian_mu",
    "calibrate_sigma",
    "compose",
    "delta_from_mu",
    "epsilon_from_mu",
    "mu_from_epsilon_delta",
    "PrivacyLedger",
    "Release",
    "ClientNoise",
    "SecureClientNoise",
    "PrivacyBudget",
    "AutoClip",
    "private_grid_quantile",
]
