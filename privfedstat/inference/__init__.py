"""Private inference: standard errors, intervals, p-values and Wald tests that count the privacy noise."""

from .config import Inference

__all__ = ["Inference"]
