"""Monte-Carlo simulation studies (Section 4 of the core paper)."""

from .allocations import Equal, FixedTotal, LogNormal, Uniform
from .dgp import DEFAULT_BETA, GLMDesign, simulate_glm
from .plots import plot_mse, plot_study
from .runner import METHODS, MonteCarlo, Scenario, make_estimator, run_replicate, summarise
from .studies import STUDIES, Study, get_study

__all__ = [
    "GLMDesign",
    "DEFAULT_BETA",
    "simulate_glm",
    "Equal",
    "Uniform",
    "LogNormal",
    "FixedTotal",
    "Scenario",
    "MonteCarlo",
    "run_replicate",
    "make_estimator",
    "summarise",
    "METHODS",
    "Study",
    "STUDIES",
    "get_study",
    "plot_mse",
    "plot_study",
]
