"""Before any data are touched: the standard errors, power and sample size of a planned private fit
(:func:`plan_study`) and the predicted MSE of an estimator on a design (:func:`predict_mse`)."""

from .power import StudyPlan, plan_study
from .prediction import predict_mse

__all__ = ["StudyPlan", "plan_study", "predict_mse"]
