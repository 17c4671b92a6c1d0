"""Theory of private federated M-estimation (Section 3 of the core paper) and an exact MSE predictor.

* Upper bounds: :func:`fedsgd_bound` (Theorem 3.2, Remarks 3.1/3.2), :func:`fedavg_bound`
  (Theorems 3.3, 3.7), :func:`fedhybrid_bound` (Theorem 3.5, Remark 3.6), :func:`fednewton_bound`
  (Theorem 3.9) and :func:`fednewton_max_clients` (its condition on m).
* Lower bound: :func:`lower_bound` and :func:`effective_sample_size` (Theorem 3.10, 0 < mu < 1).
* Planning: :func:`recommended_iterations`, :func:`optimal_weights` (eq. (2)),
  :func:`communication_table` (Table 1).
* Problem constants: :func:`problem_constants` (tau1, tau2, trace(Sigma) of a GLM design),
  :func:`hessian_norm_quantile` (the population limit of a data-chosen Hessian bound).
* Prediction: :func:`predict_mse_from_params` (an algorithm's linearised recursion at given
  parameters, summed exactly), :class:`Problem`; :func:`privfedstat.predict_mse` applies it to an
  estimator.
* Power: :func:`wald_power` and :func:`wald_half_width` of a Wald test or interval given an SE
  (:func:`privfedstat.plan_study` predicts a private fit's SE).
* Inference: :func:`protocol_noise_covariance`, the covariance of a fit's privacy noise from the
  noise model its protocol records (:mod:`privfedstat.theory.noise`), linearised at a Hessian
  (:mod:`privfedstat.theory.noise_covariance`).

Theory imports no estimator and no simulation: what compares it with simulated fits is a study,
:func:`privfedstat.simulations.compare_to_theory`. All functions are pure, keyword-only and
broadcast over numpy arrays; every unknown constant is an explicit argument. ``INFERENCES`` lists
what was read into formulas the PDF extraction garbled.
"""

from .bounds import fedavg_bound, fedhybrid_bound, fedsgd_bound
from .communication import communication_table
from .constants import ProblemConstants, hessian_norm_quantile, problem_constants
from .lower_bound import effective_sample_size, lower_bound
from .newton import ClientCondition, fednewton_bound, fednewton_max_clients
from .noise_covariance import protocol_noise_covariance
from .planning import Iterations, optimal_weights, recommended_iterations
from .power import wald_half_width, wald_power
from .predictor import MSEPrediction, Problem, predict_mse_from_params

__all__ = [
    "fedsgd_bound",
    "fedavg_bound",
    "fedhybrid_bound",
    "fednewton_bound",
    "fednewton_max_clients",
    "lower_bound",
    "effective_sample_size",
    "recommended_iterations",
    "optimal_weights",
    "communication_table",
    "problem_constants",
    "hessian_norm_quantile",
    "predict_mse_from_params",
    "protocol_noise_covariance",
    "wald_power",
    "wald_half_width",
    "Problem",
    "MSEPrediction",
    "ProblemConstants",
    "ClientCondition",
    "Iterations",
    "INFERENCES",
]

#: What was inferred where the extracted text of Section 3 is garbled (each also in its docstring).
INFERENCES = (
    "Thm 3.2: step-size range 1/(2 tau2) <= eta <= 9/(10 tau2) (the '9' is displaced in the text).",
    "Thm 3.2 eq. (1): privacy term 4 eta^2 C_B^2 K d (d v log N)/mu^2 sum_i w_i^2/n_i^2 (factor 4 and C_B^2 "
    "restored from the proof's noise 2 eta B sqrt(K)/(mu n_i) and B = C_B sqrt(d v log N)); "
    "gamma1 = 1 - eta tau1 + C sqrt((d v log N)/n_min).",
    "Remarks 3.1/3.2/3.6: numerator C d in eq. (3); 1/tau1^2 taken as a common factor in eqs. (4) and (5).",
    "Thm 3.7: C_B^2 restored in both privacy terms (statement shows 'C', proof eq. (15) has B^2).",
    "Thm 3.9 eq. (6): C trace(Sigma)/(tau1^2 N) + C C_B^2 m d (d v log N)/(mu^2 N^2) (tau1 absorbed in B^New "
    "as in the proof's last display); eq. (7) as extracted, without eq. (2)'s log(dN) factor.",
    "Thm 3.9 / Remark 3.8: K_max squared in both privacy constraints on m (checked: the theorem's and the "
    "remark's forms agree under n_min = N/m).",
    "Thm 3.10: d / sum_i min(C1 n_i, C2 n_i^2 mu^2 log(1/mu)/d) (agrees with the proof's last line).",
    "Eq. (2) weights: as printed (no factor 4); optimal_weights(clip=B) uses the exact message variance.",
)
