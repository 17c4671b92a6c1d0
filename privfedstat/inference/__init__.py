"""Private inference: standard errors, intervals, p-values and Wald tests that count the privacy noise.

Every estimator's ``inference`` parameter (an :class:`Inference`, default ``"auto"``) says what a fit
spends on its uncertainty; the fit's :class:`InferenceResult` (``inference_``) backs ``bse_``,
``cov_params()``, ``conf_int()``, ``pvalues_``, ``wald_test()`` and the summary's columns. The
releases and the covariance are described in :mod:`privfedstat.inference.core`.
"""

from .config import Inference
from .results import InferenceResult, NoInferenceError, WaldTestResult

__all__ = ["Inference", "InferenceResult", "WaldTestResult", "NoInferenceError"]
