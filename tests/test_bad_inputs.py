"""Bad inputs a new user tries (issue 43): each is refused up front with a message that says what to change, or
warned about; none reaches a cryptic error deep inside a fit, a flood of floating-point warnings, or a silent
wrong answer. The torch ones are in tests/deep/test_bad_inputs_deep.py."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import privfedstat
from privfedstat import (
    FedAvg,
    FederatedData,
    FedIRLS,
    FedSGD,
    HiFedProx,
    NoInterceptWarning,
    SingleClientWarning,
    glm,
    plan_study,
)
from privfedstat._validation import BOUND_PER_MU, LEAST_BOUND_PER_MU, MAX_ITERATIONS, MU_MAX, MU_MIN, Interval, _rules, check_mu
from privfedstat.fitting.base import FederatedEstimator
from privfedstat.privacy.calibration import BACKWARD_RATIO, MAX_DERIVED_ROUNDS

INF = float("inf")
#: every parameter name that counts iterations, rounds or steps
COUNTS = ("n_iter", "n_rounds", "n_local_steps", "n_server_iter", "max_iter", "n_cycles")


def _arrays(n: int = 90, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    y = (rng.random(n) < 0.5).astype(float)
    return X, y, np.repeat(np.arange(3), n // 3)


def _frame(n: int = 90) -> pd.DataFrame:
    X, y, clients = _arrays(n)
    return pd.DataFrame({"y": y, "x": X[:, 1], "site": clients})


# ------------------------------------------------------------------------------------------------ absurd settings
@pytest.mark.parametrize("make", [lambda: FedSGD(mu=1e300), lambda: FedIRLS(mu=1e300)], ids=["FedSGD", "FedIRLS"])
def test_absurd_mu_is_refused_before_any_arithmetic(make):
    """mu = 1e300 used to overflow mu^2 in the budget split (a flood of RuntimeWarnings) and end in "every release
    needs mu > 0"; now it is refused first, pointing to mu = inf."""
    X, y, clients = _arrays()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"mu=float\('inf'\)"):
            make().fit(X, y, clients=clients)
    with pytest.raises(ValueError, match="non-private in all but name"):
        glm("y ~ x", _frame(), client="site", mu=1e300)


def test_mu_bound_is_where_noise_falls_below_rounding():
    """MU_MAX = 2 / eps: a release with sensitivity 2B/n and all of mu has noise sd 2B/(n mu) < eps B above it."""
    eps = np.finfo(np.float64).eps
    assert MU_MAX == pytest.approx(2 / eps) and check_mu(MU_MAX) == MU_MAX and check_mu(INF) == INF
    B = 1.0
    assert 1.0 + 2 * B / np.nextafter(MU_MAX, INF) / 2 == 1.0  # half the noise sd is lost in rounding a value near B
    with pytest.raises(ValueError, match="above"):
        check_mu(np.nextafter(MU_MAX, INF))


def _estimator_classes() -> list[type]:
    pytest.importorskip("torch")
    import privfedstat.deep  # noqa: F401  (registers the network estimators as subclasses)

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    return sorted(set(subclasses(FederatedEstimator)), key=lambda c: c.__name__)


def test_every_iteration_count_is_bounded_by_its_table():
    """Every count parameter of every estimator is bounded by MAX_ITERATIONS through its parameter table (one
    rule, ITERATIONS), except HiFedProx's per-client n_local_steps, checked by its own resolver (tested below)."""
    checked = 0
    for cls in _estimator_classes():
        table = cls._parameter_table()
        for name in cls._param_names():
            if name not in COUNTS or (issubclass(cls, HiFedProx) and name == "n_local_steps"):
                continue
            highs = [r.high for r in _rules(table[name]) if isinstance(r, Interval)]
            assert highs == [MAX_ITERATIONS], f"{cls.__name__}.{name}: {table.get(name)!r}"
            checked += 1
    assert checked >= 40


@pytest.mark.parametrize("make", [
    lambda: FedSGD(n_iter=10**7),
    lambda: FedSGD(n_iter=10**7, mu=INF),
    lambda: FedAvg(n_rounds=2, n_local_steps=MAX_ITERATIONS + 1),
    lambda: FedIRLS(n_rounds=10**6, mu=INF),
    lambda: HiFedProx(n_local_steps=[1, 1, MAX_ITERATIONS + 1]),
], ids=["FedSGD", "FedSGD-inf", "FedAvg", "FedIRLS-inf", "HiFedProx"])
def test_absurd_iteration_counts_are_refused_up_front(make):
    """FedSGD(n_iter=10**7) ran ~7 hours with no bound; now every count above MAX_ITERATIONS is refused before the
    fit starts, with the bound named."""
    X, y, clients = _arrays()
    with pytest.raises(ValueError, match="MAX_ITERATIONS"):
        make().fit(X, y, clients=clients)


def test_iteration_bound_hint_only_above_the_bound():
    with pytest.raises(TypeError) as err:
        FedSGD(n_iter=2.5).fit(*_arrays()[:2], clients=_arrays()[2])
    assert "MAX_ITERATIONS" not in str(err.value) and "an integer in [1, 100000]" in str(err.value)


def test_fedirls_derived_split_round_bound():
    """FedIRLS(n_rounds=10**6) with finite mu: the derived split's first shares underflow (0.35^(R-1)), their noise
    overflows (a flood of RuntimeWarnings), then "every release needs mu > 0". Now refused beyond the 35 rounds at
    which the first round's share falls below float64 resolution."""
    eps = np.finfo(np.float64).eps
    assert BACKWARD_RATIO ** (MAX_DERIVED_ROUNDS - 1) >= eps > BACKWARD_RATIO**MAX_DERIVED_ROUNDS
    X, y, clients = _arrays()
    for rounds in (MAX_DERIVED_ROUNDS + 1, 10**4):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match="too many rounds for the derived budget split"):
                FedIRLS(n_rounds=rounds, random_state=0).fit(X, y, clients=clients)


def test_a_fit_ticks_a_progress_bar_once_per_round(monkeypatch):
    """Every fit draws a tqdm bar over its protocol's rounds (shown on terminals after 2 s): one tick per reply."""
    import tqdm.auto

    made = []

    class Bar:
        def __init__(self, **kwargs):
            self.kwargs, self.n = kwargs, 0
            made.append(self)

        def update(self, n=1):
            self.n += n

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    X, y, clients = _arrays()
    est = FedSGD(n_iter=7, mu=INF, clip=1.0, step_size=1.0, inference=None).fit(X, y, clients=clients)
    assert [bar.n for bar in made] == [7] and est.communication_.rounds == 7
    assert made[0].kwargs["desc"] == "FedSGD" and made[0].kwargs["delay"] > 0
    Bar._instances = {object()}  # inside another bar (a bootstrap's refits): none of its own
    FedSGD(n_iter=2, mu=INF, clip=1.0, step_size=1.0, inference=None).fit(X, y, clients=clients)
    assert len(made) == 1


# ------------------------------------------------------------------------------------------------ data
def test_empty_data_says_there_are_no_rows():
    """Empty arrays or an empty DataFrame used to end in "offsets must start at 0 ..."."""
    X, y, clients = _arrays()
    with pytest.raises(ValueError, match="no rows"):
        FedSGD().fit(X[:0], y[:0], clients=clients[:0])
    with pytest.raises(ValueError, match="no rows"):
        glm("y ~ x", _frame().iloc[:0], client="site")


def test_duplicated_column_names_are_named():
    """A duplicated column name used to raise AttributeError: 'DataFrame' object has no attribute 'dtype'."""
    df = _frame()
    df.insert(2, "x2", df["x"])
    df.columns = ["y", "x", "x", "site"]
    with pytest.raises(ValueError, match=r"duplicated column name\(s\) \['x'\]"):
        glm("y ~ x", df, client="site")


def test_missing_client_labels_are_refused():
    """NaN labels were gathered silently into one client "nan"."""
    X, y, clients = _arrays()
    labels = np.where(clients == 0, np.nan, clients)
    with pytest.raises(ValueError, match="30 missing label"):
        FedSGD().fit(X, y, clients=labels)
    with pytest.raises(ValueError, match="missing label"):
        FederatedData.from_pooled(X, y, clients=np.array([None] * X.shape[0], dtype=object))


def test_a_single_client_label_warns():
    """clients= (or glm's client column) naming one client ran a one-client "federation" silently."""
    X, y, _ = _arrays()
    with pytest.warns(SingleClientWarning, match="clients= gives every row the same client"):
        FedIRLS(mu=INF).fit(X, y, clients=np.zeros(X.shape[0]))
    with pytest.warns(SingleClientWarning, match="client='site'"):
        glm("y ~ x", _frame().assign(site=0), client="site", family="logistic", mu=INF)


def test_infinite_design_values_name_the_formula_column():
    """log(0) in a formula used to be reported as "X contains ... in column(s) [1]" (a position, not a name)."""
    df = _frame().assign(z=lambda d: np.abs(d.x) + 1.0)
    df.loc[0, "z"] = 0.0
    named = r"1 row\(s\) with infinite values in column\(s\) \['np.log\(z\)'\]"
    with np.errstate(divide="ignore"), pytest.raises(ValueError, match=named):
        glm("y ~ np.log(z)", df, client="site", family="logistic", mu=INF)


def test_no_intercept_warning_is_the_callers_alone():
    """T4-4: the warning is a function of the caller's rows (one replaced row flips it, as documented in
    privfedstat.data.inputs); it is emitted before the rows reach any client and leaves no trace in the fit: the
    ledger and every release's noise are those of the same fit without it."""
    X, y, clients = _arrays()
    X2 = X.copy()
    X2[0, 0] = 2.0  # D': one row's constant column changed
    fits = {}
    for name, design in (("D", X), ("D'", X2)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fits[name] = FedSGD(n_iter=3, mu=1.0, clip=1.0, inference=None, random_state=0).fit(design, y,
                                                                                               clients=clients)
        fits[name + " warned"] = any(issubclass(w.category, NoInterceptWarning) for w in caught)
    assert not fits["D warned"] and fits["D' warned"]
    led, led2 = fits["D"].privacy_, fits["D'"].privacy_
    assert len(led.releases) == len(led2.releases) == 3
    for r, r2 in zip(led.releases, led2.releases):
        assert (r.stage, r.round, r.kind) == (r2.stage, r2.round, r2.kind)
        np.testing.assert_array_equal(r.sensitivity, r2.sensitivity)
        np.testing.assert_array_equal(r.sigma, r2.sigma)
    np.testing.assert_array_equal(led.client_mu, led2.client_mu)
    assert vars(fits["D"]).keys() == vars(fits["D'"]).keys()
    doc = privfedstat.data.inputs.__doc__
    assert "replacing one row can add or remove it" in doc and "nowhere else" in doc


# ------------------------------------------------------------------------------------------------ planning
def test_plan_study_refuses_a_poisson_coefficient_it_cannot_integrate():
    """A Poisson coefficient of 50 used to end in "cannot convert float NaN to integer"."""
    X = np.column_stack([np.ones(200), np.random.default_rng(0).normal(size=200)])
    with pytest.raises(ValueError, match="log scale"):
        plan_study(X, [0.0, 50.0], sizes=[100] * 5, family="poisson")


@pytest.mark.parametrize("kwargs, error, match", [
    ({"alpha": 2}, ValueError, "alpha"),
    ({"names": "ab"}, TypeError, "names must be a sequence"),
    ({"noise_sd": -1.0}, ValueError, "noise_sd must be > 0"),
    ({"noise_sd": math.nan}, ValueError, "noise_sd must be > 0"),
], ids=["alpha", "names", "noise_sd", "noise_sd-nan"])
def test_plan_study_checks_its_own_arguments(kwargs, error, match):
    """alpha=2 and names="ab" were accepted silently; a negative noise_sd was reported as -1e-15."""
    X = np.column_stack([np.ones(200), np.random.default_rng(0).normal(size=200)])
    with pytest.raises(error, match=match):
        plan_study(X, [0.0, 1.0], sizes=[100] * 3, **kwargs)


# ------------------------------------------------------------------------------------------------ inference
def test_wald_test_restrictions_are_checked():
    """wald_test([]) used to raise a matrix shape error, "got (1, 0)"."""
    X, y, clients = _arrays()
    fit = FedIRLS(mu=INF).fit(X, y, clients=clients)
    with pytest.raises(ValueError, match="R is empty"):
        fit.wald_test([])
    with pytest.raises(ValueError, match="NaN or infinite"):
        fit.wald_test([[np.nan, 1.0]])
    with pytest.raises(TypeError, match="coefficient names"):
        fit.wald_test("x1")
    assert fit.wald_test(["x1"]).df == 1


def test_plan_required_checks_its_target():
    """power=2 used to be reported as "out of reach at any mu ... the sampling variance alone is too large"."""
    X = np.column_stack([np.ones(200), np.random.default_rng(0).normal(size=200)])
    plan = plan_study(X, [0.0, 0.3], sizes=[100] * 3, family="logistic")
    with pytest.raises(ValueError, match=r"power must lie in \(0, 1\)"):
        plan.required("x1", power=2)
    with pytest.raises(ValueError, match="half_width must be > 0"):
        plan.required("x1", half_width=-0.1)


def test_tiny_mu_and_huge_bounds_are_refused_up_front():
    """mu = 1e-300 used to be blamed on "the clipping and scaling budgets" (mu^2 underflows); hessian_clip = 1e300
    ended in OverflowError (34, 'Numerical result out of range') inside the inference, and clip = 1e300 in a flood
    of overflows and a DivergenceError advising "a finite clip"."""
    X, y, clients = _arrays()
    assert MU_MIN == 2.0**-104 and check_mu(MU_MIN) == MU_MIN
    assert np.isfinite((2 * BOUND_PER_MU / np.sqrt(np.finfo(np.float64).eps)) ** 2)
    with pytest.raises(ValueError, match="below"):
        FedSGD(mu=1e-300).fit(X, y, clients=clients)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="hessian_clip=1e\\+300 with mu=2 .* variance overflows"):
            FedIRLS(hessian_clip=1e300, clip=1.0).fit(X, y, clients=clients)
        with pytest.raises(ValueError, match="clip=1e\\+300 with mu=2 .* use at most 2e\\+146"):
            FedSGD(clip=1e300).fit(X, y, clients=clients)


def test_a_bound_whose_noise_variance_underflows_is_refused():
    """FedSGD(family="gaussian", clip=1e-200, mu=2) raised ZeroDivisionError in the score test (the noise sd squared
    was 0), then, with that fixed, reported ``converged_ = True`` at coefficients of 7e-200: the standard errors and
    the privacy covariance had underflowed."""
    X, y, clients = _arrays()
    assert (2 * LEAST_BOUND_PER_MU / 2.0**53) ** 2 >= np.finfo(np.float64).tiny
    with pytest.raises(ValueError, match="clip=1e-200 with mu=2 .* underflows .* use at least 1.3"):
        FedSGD(clip=1e-200).fit(X, y, clients=clients)
    with pytest.raises(ValueError, match="hessian_clip=1e-150 with mu=2 .* underflows"):
        FedIRLS(hessian_clip=1e-150, clip=1.0).fit(X, y, clients=clients)


def test_formula_without_terms_and_column_vector_response():
    """"y ~ " fitted an intercept-only model silently; a column-vector y got no hint."""
    with pytest.raises(ValueError, match="no terms after '~'"):
        glm("y ~ ", _frame(), client="site", mu=INF)
    X, y, clients = _arrays()
    with pytest.raises(ValueError, match=r"y.ravel\(\)"):
        FedSGD().fit(X, y[:, None], clients=clients)
