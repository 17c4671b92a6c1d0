"""Monte-Carlo simulation studies (Section 4 of the core paper) and the coverage study of private intervals."""

from .allocations import Equal, FixedTotal, LogNormal, Uniform
from .dgp import DEFAULT_BETA, GLMDesign, simulate_glm
from .coverage import COVERAGE, COVERAGE_METHODS, coverage_scenarios, summarise_coverage
from .plots import plot_coverage, plot_mse, plot_study
from .runner import METHODS, MSE, Fit, Measure, MonteCarlo, Scenario, make_estimator, run_replicate, summarise
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
    "Fit",
    "Measure",
    "MSE",
    "COVERAGE",
    "COVERAGE_METHODS",
    "coverage_scenarios",
    "summarise_coverage",
    "plot_coverage",
]
