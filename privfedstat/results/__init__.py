"""What a fitted estimator reports, all post-processing of released values: the results half of every estimator
(:mod:`.fitted`), its summary, fit statistics, coefficient plots and prediction scores."""

from .fitted import FittedResults
from .summary import Summary

__all__ = ["FittedResults", "Summary"]
