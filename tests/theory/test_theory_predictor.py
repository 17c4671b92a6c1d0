"""predict_mse and predict_mse_from_params: the linearised formulas against independent computations
(fast; the Monte-Carlo comparison is in test_theory_montecarlo.py)."""

import math

import numpy as np
import pytest

from privfedstat import FedAvg, FedHybrid, FedNewton, FedSGD, predict_mse
from privfedstat.simulations import GLMDesign
from privfedstat.theory import MSEPrediction, Problem, predict_mse_from_params, problem_constants
from privfedstat.theory._method_moments import fedsgd_moments

LOGIT = GLMDesign("logistic", beta=(0.5, -0.5, 0.5))
NMC = 2**13


def _A(H, eta):
    return np.eye(H.shape[0]) - eta * H


def test_fedsgd_target_formula_by_hand():
    """Sampling (I - A^K) V (I - A^K) / N, privacy eta^2 sum_k ||A^k||_F^2 sum_i w_i^2 sigma_i^2
    with sigma_i = 2 B sqrt(K)/(mu n_i) per coordinate, optimisation ||A^K theta0||^2."""
    sizes = [100, 300, 600]
    B, mu, K, eta = 8.0, 3.0, 40, 0.5
    est = FedSGD(mu=mu, n_iter=K, step_size=eta, clip=B, inference=None)  # all of mu on estimation
    p = predict_mse(est, Problem(LOGIT, sizes), linearise="target", n_mc=2**15)
    pc = problem_constants(design=LOGIT)
    H, S = pc.hessian, pc.gradient_cov
    A = _A(H, eta)
    n = np.array(sizes, float)
    w = n / n.sum()
    sig = 2 * B * math.sqrt(K) / (mu * n)
    privacy = eta**2 * sum(np.sum(np.linalg.matrix_power(A, k) ** 2) for k in range(K)) * np.sum(w**2 * sig**2)
    IA = np.eye(3) - np.linalg.matrix_power(A, K)
    Hi = np.linalg.inv(H)
    sampling = np.trace(IA @ Hi @ S @ Hi @ IA) / n.sum()
    opt = np.linalg.matrix_power(A, K) @ (np.zeros(3) - LOGIT.beta_true)
    # clip 8 > max ||x|| on the sample: clipping inactive, no bias for FedSGD
    assert p.bias == pytest.approx(0.0, abs=1e-20)
    assert p.privacy == pytest.approx(privacy, rel=0.01)  # 1%: Monte-Carlo H in the predictor
    assert p.sampling == pytest.approx(sampling, rel=0.01)
    assert p.optimisation == pytest.approx(float(opt @ opt), rel=0.03)
    assert p.total == pytest.approx(p.sampling + p.privacy + p.optimisation + p.bias + p.cross, rel=1e-12)
    assert np.trace(p.second_moment) == pytest.approx(p.total, rel=1e-12)


def test_fedavg_target_privacy_formula_by_hand():
    """sigma_i = 2 B eta sqrt(RK)/(mu n_i) added at each of the R K local steps:
    privacy = sum_{s < RK} ||A^s||_F^2 sum_i w_i^2 sigma_i^2."""
    sizes = [200] * 4
    B, mu, K, R, eta = 8.0, 2.0, 30, 2, 0.5
    p = predict_mse(FedAvg(mu=mu, n_rounds=R, n_local_steps=K, step_size=eta, clip=B, inference=None),
                    Problem(LOGIT, sizes), linearise="target", n_mc=2**15)
    A = _A(problem_constants(design=LOGIT).hessian, eta)
    sig = 2 * B * eta * math.sqrt(R * K) / (mu * 200.0)
    privacy = sum(np.sum(np.linalg.matrix_power(A, s) ** 2) for s in range(R * K)) * 4 * (0.25 * sig) ** 2
    assert p.privacy == pytest.approx(privacy, rel=0.01)


def test_non_private_and_path_target_agreement():
    sizes = [500] * 4
    est = FedSGD(mu=math.inf, n_iter=200, step_size=0.5, clip=math.inf)
    p = predict_mse(est, Problem(LOGIT, sizes), n_mc=NMC)
    assert p.privacy == 0.0 and p.bias == 0.0
    pc = problem_constants(design=LOGIT)
    assert p.sampling == pytest.approx(pc.sandwich_trace / 2000, rel=0.02)  # converged: trace(H^-1 Sigma H^-1)/N
    t = predict_mse(est, Problem(LOGIT, sizes), linearise="target", n_mc=NMC)
    assert t.total == pytest.approx(p.total, rel=1e-3)


def test_auto_clip_uses_the_budget_left_for_estimation():
    prob = Problem(LOGIT, [300] * 5)
    with pytest.raises(ValueError, match="clip=B"):
        predict_mse(FedSGD(mu=2.0, clip="auto"), prob)
    auto = predict_mse(FedSGD(mu=2.0, clip="auto", inference=None), prob, clip=7.0, n_mc=NMC)
    fixed = predict_mse(FedSGD(mu=2.0 * math.sqrt(0.99), clip=7.0, inference=None), prob, n_mc=NMC)
    assert auto.privacy == pytest.approx(fixed.privacy, rel=1e-12)
    # the default inference="auto" also keeps Inference().budget = 0.25 of mu (in squares) off estimation
    with_inference = predict_mse(FedSGD(mu=2.0, clip="auto"), prob, clip=7.0, n_mc=NMC)
    fixed = predict_mse(FedSGD(mu=2.0 * math.sqrt(1 - 0.01 - 0.0625), clip=7.0, inference=None), prob, n_mc=NMC)
    assert with_inference.privacy == pytest.approx(fixed.privacy, rel=1e-12)
    with pytest.raises(ValueError, match="conflicts"):
        predict_mse(FedSGD(mu=2.0, clip=3.0), prob, clip=4.0)


def test_fedavg_local_drift_is_the_m_estimator_bias():
    """Intercept-only logistic: the local MLE logit(ybar) has bias (2p - 1)/(2 n p (1 - p)); FedAvg
    with converged local steps averages m such local estimators (Remark 3.7)."""
    b0, n, m = 1.0, 50, 20
    p = 1 / (1 + math.exp(-b0))
    design = GLMDesign("logistic", beta=(b0,))
    est = FedAvg(mu=math.inf, n_rounds=1, n_local_steps=400, step_size=2.0, clip=math.inf)
    pred = predict_mse(est, Problem(design, [n] * m), n_mc=NMC, linearise="target")
    bias = (2 * p - 1) / (2 * n * p * (1 - p))
    assert pred.mean_error[0] == pytest.approx(bias, rel=1e-3)
    assert pred.bias == pytest.approx(bias**2, rel=2e-3)
    assert pred.sampling == pytest.approx(1 / (p * (1 - p)) / (n * m), rel=1e-3)
    # FedSGD does not have it (the pooled O(1/N) bias is neglected)
    assert predict_mse(FedSGD(mu=math.inf, n_iter=400, step_size=2.0, clip=math.inf),
                       Problem(design, [n] * m), n_mc=NMC, linearise="target").bias == 0.0


def test_fedavg_bias_grows_with_m_at_fixed_N():
    """Remark 3.7 / Table 1: at fixed N, FedSGD's sampling term is constant and its privacy term grows
    like m (Remark 3.4: m K d^2/(mu^2 N^2)), while FedAvg's squared federation bias grows much faster
    (its data drift is ~ m/N and its noise drift ~ sum_i w_i sigma_i^2 ~ m^2/N^2)."""
    def pred(cls, m):
        return predict_mse(cls(mu=4.0, clip=8.0), Problem(LOGIT, [4000 // m] * m), n_mc=NMC)
    avg = [pred(FedAvg, m).bias for m in (5, 20, 80)]
    sgd = [pred(FedSGD, m) for m in (5, 20, 80)]
    assert avg[1] > 16 * avg[0] and avg[2] > 16 * avg[1]
    assert sgd[0].sampling == pytest.approx(sgd[2].sampling, rel=1e-9)
    assert sgd[1].privacy == pytest.approx(4 * sgd[0].privacy, rel=1e-9)
    assert sgd[2].privacy == pytest.approx(4 * sgd[1].privacy, rel=1e-9)


def test_hybrid_and_newton_run_and_report():
    prob = Problem(LOGIT, [400] * 10)
    h = predict_mse(FedHybrid(mu=2.0, clip=8.0), prob, n_mc=NMC)
    assert isinstance(h, MSEPrediction) and h.total > h.sampling > 0
    with pytest.raises(ValueError, match="hessian_clip"):  # the paper's rule chooses C_H from raw data
        predict_mse(FedNewton(mu=2.0, clip="paper"), prob, clip=8.0)
    # a numeric clip: C_H is searched privately, then again at theta^(1) as the fit's policy does
    searched = predict_mse(FedNewton(mu=2.0, clip=8.0), prob, n_mc=NMC)
    assert searched.diagnostics["newton_hessian_clip"] > 0 and searched.total > 0
    nt = predict_mse(FedNewton(mu=2.0, clip=8.0, hessian_clip=10.0), prob, n_mc=NMC)
    npap = predict_mse(FedNewton(mu=2.0, clip=8.0, newton_noise="paper"), prob, n_mc=NMC)
    assert nt.total > 0 and npap.total > 0
    # the frame lists the components
    frame = nt.to_frame()
    assert list(frame["component"]) == ["sampling", "privacy", "optimisation", "bias", "cross", "total"]
    assert frame["value"].iloc[:5].sum() == pytest.approx(nt.total)


def test_clipping_moves_the_target_and_is_reported():
    prob = Problem(LOGIT, [400] * 10)
    p = predict_mse(FedSGD(mu=2.0, clip=0.8), prob, n_mc=NMC)
    assert p.diagnostics["clip_fraction"] > 0.1
    assert p.bias > 0 and any("clipping is active" in c for c in p.caveats)
    assert not np.allclose(p.diagnostics["target"], LOGIT.beta_true)


def test_input_errors():
    with pytest.raises(TypeError, match="FedSGD"):
        predict_mse(object(), Problem(LOGIT, [10]))
    with pytest.raises(TypeError, match="Problem"):
        predict_mse(FedSGD(clip=1.0), {"sizes": [10]})
    with pytest.raises(ValueError, match="family"):
        predict_mse(FedSGD(family="poisson", clip=1.0), Problem(LOGIT, [100]))
    with pytest.raises(ValueError, match="sizes"):
        Problem(LOGIT, [10, 0])
    with pytest.raises(ValueError, match="linearise"):
        predict_mse(FedSGD(clip=1.0), Problem(LOGIT, [100]), linearise="exact")


def test_theory_predicts_from_plain_parameters():
    """The theory layer needs no estimator: a recursion, a dict of parameters and the inference share
    give the prediction that predict_mse reads from an estimator (its registry entry and get_params)."""
    prob = Problem(LOGIT, [300] * 6)
    params = {"family": "logistic", "mu": 2.0, "clip": 5.0, "n_iter": "auto", "step_size": "auto", "init": None}
    plain = predict_mse_from_params(fedsgd_moments, params, prob, method="FedSGD", auto_counts={"n_iter": 50},
                                    inference_budget=0.25, n_mc=NMC)
    est = predict_mse(FedSGD(mu=2.0, clip=5.0), prob, n_mc=NMC)  # n_iter, step_size, inference "auto"
    assert plain.method == est.method == "FedSGD"
    assert plain.total == est.total and plain.diagnostics["mu_est"] == pytest.approx(2.0 * math.sqrt(1 - 0.25**2))
    with pytest.raises(ValueError, match="leave nothing for estimation"):
        predict_mse_from_params(fedsgd_moments, params, prob, method="FedSGD", auto_counts={"n_iter": 50},
                                inference_budget=1.0)
    with pytest.raises(ValueError, match="FedSGD's n_iter='auto'"):
        predict_mse_from_params(fedsgd_moments, {**params, "mu": math.inf, "clip": math.inf}, prob, method="FedSGD",
                                auto_counts={"n_iter": 50})
