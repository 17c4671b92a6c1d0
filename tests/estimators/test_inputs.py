"""Bad input gets a clear error, never a silent wrong answer."""

import contextlib
import warnings

import numpy as np
import pytest
from conftest import simulate

from privfedstat import (
    AutoClip,
    DivergenceError,
    FedAvg,
    FederatedData,
    FedHybrid,
    FedNewton,
    FedNMap,
    FedSGD,
    NotFittedError,
    Scaffold,
    UnsupportedModelError,
)
from privfedstat.algorithms.registry import methods

ESTIMATORS = [FedSGD, FedHybrid, FedAvg, FedNewton]


@pytest.mark.parametrize("Est", ESTIMATORS)
@pytest.mark.parametrize(
    "params, exc, match",
    [
        ({"mu": 0.0}, ValueError, "mu must be > 0"),
        ({"mu": -1.0}, ValueError, "mu must be > 0"),
        ({"mu": float("nan")}, ValueError, "mu must be > 0"),
        ({"mu": "2"}, TypeError, "mu must be a positive number"),
        ({"clip": 0.0}, ValueError, "clip must be > 0"),
        ({"clip": -1.0}, ValueError, "clip must be > 0"),
        ({"clip": "median"}, ValueError, "clip must be"),
        ({"clip": float("inf")}, ValueError, "only allowed with"),
        ({"step_size": 0.0}, ValueError, "step_size must be > 0"),
        ({"step_size": float("inf")}, ValueError, "step_size must be finite"),
        ({"family": "gamma"}, ValueError, "unknown family"),
        ({"weights": "equal"}, ValueError, "weights must be"),
        ({"weights": np.ones(3)}, ValueError, "one per client"),
        ({"random_state": "seed"}, TypeError, "random_state"),
    ],
)
def test_bad_parameters(Est, params, exc, match, logistic_data):
    with pytest.raises(exc, match=match):
        Est(**params).fit(logistic_data)


@pytest.mark.parametrize(
    "Est, params, exc",
    [
        (FedSGD, {"n_iter": 0}, ValueError),
        (FedSGD, {"n_iter": 2.5}, TypeError),
        (FedHybrid, {"n_local_steps": 0}, ValueError),
        (FedHybrid, {"n_server_iter": -3}, ValueError),
        (FedAvg, {"n_rounds": 0}, ValueError),
        (FedAvg, {"n_local_steps": True}, TypeError),
        (FedNewton, {"hessian_floor": 0.0}, ValueError),
        (FedNewton, {"hessian_clip": float("inf"), "clip": 1.0}, ValueError),
        (FedSGD, {"init": [1.0, 2.0]}, ValueError),
    ],
)
def test_bad_method_parameters(Est, params, exc, logistic_data):
    with pytest.raises(exc):
        Est(**params).fit(logistic_data)


def test_weights_must_sum_to_one(logistic_data):
    with pytest.raises(ValueError, match="sum to 1"):
        FedSGD(weights=np.full(20, 0.1)).fit(logistic_data)


def test_fit_needs_a_response():
    with pytest.raises(ValueError, match="requires y"):
        FedSGD().fit(np.zeros((10, 2)))


def test_labels_outside_support():
    data = simulate("poisson", [50] * 4, [0.1, 0.2])
    with pytest.raises(ValueError, match="0, 1"):
        FedSGD(family="logistic").fit(data)
    X = np.ones((20, 1))
    with pytest.raises(ValueError, match="non-negative integer"):
        FedSGD(family="poisson").fit(FederatedData.from_pooled(X, -np.ones(20), sizes=[10, 10]))
    with pytest.raises(ValueError, match="non-negative integer"):
        FedSGD(family="poisson").fit(FederatedData.from_pooled(X, np.full(20, 0.5), sizes=[10, 10]))


@pytest.mark.parametrize("family, value", [("logistic", 7.25), ("poisson", -3.5), ("poisson", 2.75),
                                           ("multinomial", 17.0), ("multinomial", 0.5)])
def test_out_of_support_messages_give_a_count_never_the_value(family, value):
    from privfedstat.families import get_family

    y = np.zeros(20)
    y[[2, 11, 15]] = value
    fam = get_family(family, n_classes=3) if family == "multinomial" else get_family(family)
    with pytest.raises(ValueError, match="found 3 row") as info:
        fam.check_y(y)
    assert str(value) not in str(info.value) and repr(value) not in str(info.value)


def test_non_finite_messages_name_columns_and_counts_not_values():
    X = np.ones((10, 3))
    X[[1, 4], 2] = np.inf
    X[7, 0] = -np.inf
    with pytest.raises(ValueError, match=r"X contains 3 NaN or infinite value\(s\) in column\(s\) \[0, 2\]"):
        FederatedData.from_pooled(X, np.zeros(10), sizes=[5, 5])


def test_nan_and_empty_clients_rejected():
    X = np.ones((10, 2))
    y = np.zeros(10)
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FederatedData.from_pooled(X, y, sizes=[5, 5])
    with pytest.raises(ValueError, match="no rows"):
        FederatedData.from_arrays([(np.ones((3, 2)), np.zeros(3)), (np.ones((0, 2)), np.zeros(0))])


def test_fednewton_needs_two_d_rows_per_client():
    data = simulate("logistic", [10] * 5, [0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.1])
    with pytest.raises(ValueError, match="n_i >= 2 d"):
        FedNewton().fit(data)


def test_divergence_is_reported_with_the_knob_to_turn():
    data = simulate("poisson", [50] * 4, [1.0, 1.0, 1.0], seed=1)
    with pytest.raises(DivergenceError, match="step_size"):
        FedSGD(family="poisson", mu=float("inf"), clip=float("inf"), step_size=5.0, n_iter=200).fit(data)


def _extreme_rows() -> FederatedData:
    """A Gaussian response with one row of 1e150 (its gradient 1e300 at 0) and one tiny row."""
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(60), rng.standard_normal(60)])
    y = rng.standard_normal(60)
    X[3], y[3] = [1.0, 1e150], 1e150
    X[25], y[25] = [1.0, 1e-300], -1e-300
    return FederatedData.from_pooled(X, y, sizes=[20] * 3)


@pytest.mark.parametrize("Est", [FedAvg, FedHybrid, FedNewton, Scaffold, FedNMap])
def test_local_arithmetic_that_overflows_on_a_client_warns_nothing_and_reports_divergence(Est):
    """A huge row and a huge step overflow a client's local steps: no RuntimeWarning leaves the client (pyproject
    turns privfedstat's into errors), the fit reports the divergence."""
    with pytest.raises(DivergenceError, match="step_size"):
        Est(family="gaussian", mu=float("inf"), clip=float("inf"), step_size=1e10).fit(_extreme_rows())


@pytest.mark.parametrize("spec", methods(private=True), ids=lambda s: s.name)
def test_private_fits_on_extreme_rows_emit_no_runtime_warning(spec):
    """60 rows at mu = 1 may also be refused early (FedIRLS: UnsupportedModelError, after the first rounds); either
    way no RuntimeWarning leaves the fit."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        with contextlib.suppress(UnsupportedModelError):
            spec.cls(family="gaussian", mu=1.0, random_state=0).fit(_extreme_rows())


def test_unfitted_estimator():
    with pytest.raises(NotFittedError, match="fit"):
        FedSGD().mse(np.zeros(2))


def test_mse_shape_checked(logistic_data):
    est = FedSGD(random_state=0).fit(logistic_data)
    with pytest.raises(ValueError, match="shape"):
        est.mse(np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        est.predict(np.zeros((3, 2)))


def test_auto_clip_config_validated():
    with pytest.raises(ValueError, match="power of two"):
        AutoClip(n_grid=50)
    with pytest.raises(ValueError, match="budget"):
        AutoClip(budget=1.0)


def test_fednewton_refuses_hessians_beyond_the_memory_limit(monkeypatch, logistic_data):
    import privfedstat.algorithms.fednewton as fn

    monkeypatch.setattr(fn, "MAX_HESSIAN_GB", 1e-9)
    with pytest.raises(ValueError, match="Hessian on every client"):
        FedNewton(random_state=0).fit(logistic_data)


def test_hessian_floor_auto_is_released_privately_and_tiny_otherwise():
    """Issue 41: "auto" is released (None) in the private mode at finite mu; only for invertibility with mu = inf
    or in Algorithm 4 as printed."""
    from privfedstat.families import get_family
    from privfedstat.families.curvature import resolve_hessian_floor

    assert resolve_hessian_floor("auto", get_family("logistic"), 2.0) is None
    assert resolve_hessian_floor("auto", get_family("poisson"), 2.0, "private") is None
    assert resolve_hessian_floor("auto", get_family("multinomial", n_classes=4), 2.0, "paper") == pytest.approx(0.25e-8)
    assert resolve_hessian_floor("auto", get_family("logistic"), float("inf")) == pytest.approx(0.25e-8)
    assert resolve_hessian_floor(0.3, get_family("logistic"), 2.0) == 0.3
    with pytest.raises(ValueError, match="hessian_floor"):
        FedNewton(hessian_floor=-1.0).fit(simulate("logistic", [100] * 3, [0.1, 0.2]))


@pytest.mark.parametrize("method", ["fedsgd", "fednewton"])
def test_a_duplicated_constant_column_warns_that_the_design_is_collinear(method):
    """Two intercept columns: the released Hessian is singular up to its noise, which the fit must say rather than
    report finite standard errors silently."""
    from privfedstat import FederatedData, IllConditionedWarning
    from privfedstat.algorithms.registry import get_method

    rng = np.random.default_rng(0)
    N = 4000
    X = np.column_stack([np.ones(N), np.ones(N), rng.standard_normal((N, 2))])
    y = (rng.random(N) < 1 / (1 + np.exp(-X[:, 1:] @ [0.3, -0.5, 0.2]))).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=[1000] * 4)
    for seed in range(3):
        with pytest.warns(IllConditionedWarning, match="duplicated or constant column"):
            get_method(method).cls(family="logistic", mu=2.0, random_state=seed).fit(data)


def test_a_step_size_far_too_large_is_reported_as_divergence_not_noise():
    """FedSGD(step_size=100) bounces between +-20 (clipping keeps it bounded): the fit raises DivergenceError, which
    says the step is too large (privacy noise, which grows with the step, is not blamed), instead of returning the
    bounce as an estimate."""
    import warnings

    from privfedstat import PrivacyNoiseWarning

    rng = np.random.default_rng(0)
    N = 2000
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ [0.3, -0.5, 0.2]))).astype(float)
    data = FederatedData.from_pooled(X, y, sizes=[500] * 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DivergenceError, match=r"back and forth.*step_size = 100\) is too large"):
            FedSGD(family="logistic", mu=2.0, step_size=100, random_state=0).fit(data)
    assert PrivacyNoiseWarning not in {w.category for w in caught}
    with warnings.catch_warnings(record=True) as caught:  # a sound step: no divergence
        warnings.simplefilter("always")
        assert FedSGD(family="logistic", mu=2.0, random_state=0).fit(data).converged_
    assert not any("diverged" in str(w.message) for w in caught)
