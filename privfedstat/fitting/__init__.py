"""The fit pipeline every estimator shares: the parameters and ``fit`` as a list of stages (:mod:`.base`), the
stages themselves (:mod:`.stages`: budget plan, bounds, weights), the private scaling (:mod:`.scaling`), the
server steps several algorithms take (:mod:`.steps`) and the verdicts read from released values
(:mod:`.diagnostics`)."""

from .base import FederatedEstimator, clone
from .scaling import FeatureBounds, PrivateStandardize

__all__ = ["FederatedEstimator", "clone", "FeatureBounds", "PrivateStandardize"]
