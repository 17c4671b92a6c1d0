"""Monte-Carlo simulation studies, the study protocol and its runner, the paper studies on the GLM backend,
and the comparison of simulated fits with the theory."""

from .allocations import Equal, FixedTotal, LogNormal, Uniform
from .coverage import COVERAGE, COVERAGE_METHODS, coverage_scenarios, plot_coverage, summarise_coverage
from .dgp import DEFAULT_BETA, GLMDesign, simulate_glm
from .mse_study import GRIDS, MSEGrid, get_grid, plot_grid, plot_mse
from .runner import METHODS, MSE, Fit, Measure, MonteCarlo, MonteCarloConfig, Scenario, make_estimator, run_replicate, summarise
from .study import Study, StudyResult, Table, param, run_study
from .theory_comparison import compare_to_theory, plot_theory_comparison, theory_slopes

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
    "MonteCarloConfig",
    "run_replicate",
    "make_estimator",
    "summarise",
    "METHODS",
    "MSEGrid",
    "GRIDS",
    "get_grid",
    "plot_mse",
    "plot_grid",
    "Fit",
    "Measure",
    "MSE",
    "COVERAGE",
    "COVERAGE_METHODS",
    "coverage_scenarios",
    "summarise_coverage",
    "plot_coverage",
    "Study",
    "StudyResult",
    "Table",
    "param",
    "run_study",
    "compare_to_theory",
    "theory_slopes",
    "plot_theory_comparison",
]
