"""Defaults that converge (issue 9, items 1-2): no clipping without privacy, step_size and counts "auto"."""

import math
import warnings

import numpy as np
import pytest
import statsmodels.api as sm
from conftest import simulate

from privfedstat import AutoClip, FedAvg, FedHybrid, FedSGD, Scaffold, get_family
from privfedstat.families.curvature import auto_step_size
from privfedstat.fitting.steps import MAX_ITER_NONPRIVATE, resolve_count

INF = float("inf")


def test_mu_inf_means_no_clipping_unless_asked():
    data = simulate("logistic", [150] * 4, [0.5, -1.0, 2.0], seed=1)
    assert FedSGD(mu=INF, n_iter=5).fit(data).clip_ == INF
    asked = FedSGD(mu=INF, n_iter=5, clip=AutoClip()).fit(data).clip_
    assert math.isfinite(asked)  # an explicit AutoClip still clips (at the exact 90% quantile)


@pytest.mark.parametrize("Est", [FedSGD, FedHybrid, FedAvg, Scaffold])
def test_defaults_with_mu_inf_reach_the_mle_and_say_converged(Est):
    data = simulate("logistic", [200] * 5, [0.3, -0.8, 0.6], seed=2)
    mle = sm.GLM(data.y, data.X, family=sm.families.Binomial()).fit(tol=1e-13).params
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converged: no ConvergenceWarning
        est = Est(mu=INF).fit(data)
    assert est.converged_ is True
    tol = 1e-4 if Est in (FedSGD, FedHybrid, Scaffold) else 5e-2  # FedAvg: its fixed point drifts (50 local steps)
    np.testing.assert_allclose(est.coef_, mle, atol=tol)


@pytest.mark.parametrize("family, kappa", [("logistic", 0.25), ("gaussian", 1.0), ("huber", 1.0), ("poisson", math.e)])
def test_auto_step_is_one_over_public_curvature_bound(family, kappa):
    assert auto_step_size(get_family(family), 4) == pytest.approx(1.0 / (kappa * 4))
    assert auto_step_size(get_family("multinomial", n_classes=5), 4) == pytest.approx(1.0 / (0.5 * 4))


@pytest.mark.parametrize("seed", range(5))
def test_auto_step_bounds_the_hessian_on_unit_scale_columns(seed):
    """eta * lambda_max(H) <= 1 (descent lemma) for logistic and multinomial, at any theta, on
    standardised columns, including nearly collinear ones where the trace bound is tight."""
    rng = np.random.default_rng(seed)
    n, d = 500, 4
    z = rng.standard_normal((n, 1))
    C = z + 0.05 * rng.standard_normal((n, d - 1))  # strongly collinear
    C = (C - C.mean(0)) / C.std(0)
    X = np.column_stack([np.ones(n), C])
    theta = rng.normal(scale=2.0, size=d)
    p = 1 / (1 + np.exp(-X @ theta))
    H = (X * (p * (1 - p))[:, None]).T @ X / n
    assert auto_step_size(get_family("logistic"), d) * np.linalg.eigvalsh(H)[-1] <= 1.0 + 1e-12
    # multinomial, 3 classes: H = mean (diag(p) - p p^T) kron x x^T over the 2 non-reference classes
    T = rng.normal(size=(d, 2))
    Z = np.column_stack([np.zeros(n), X @ T])
    P = np.exp(Z - Z.max(1, keepdims=True))
    P = (P / P.sum(1, keepdims=True))[:, 1:]
    Hm = sum(np.kron(np.diag(P[j]) - np.outer(P[j], P[j]), np.outer(X[j], X[j])) for j in range(n)) / n
    fam = get_family("multinomial", n_classes=3)
    assert auto_step_size(fam, d) * np.linalg.eigvalsh(Hm)[-1] <= 1.0 + 1e-12


def test_auto_counts_are_the_papers_with_finite_mu_and_a_cap_without():
    assert resolve_count("auto", 2.0, 50) == (50, False)
    assert resolve_count("auto", INF, 50) == (MAX_ITER_NONPRIVATE, True)
    assert resolve_count(7, INF, 50) == (7, False)
    data = simulate("logistic", [300] * 4, [0.3, -0.8, 0.6], seed=3)
    assert FedSGD(mu=2.0, random_state=0).fit(data).n_iter_ == 50
    assert FedAvg(mu=2.0, random_state=0).fit(data).n_iter_ == 2 * 50


def test_paper_settings_are_one_argument_away():
    data = simulate("logistic", [300] * 4, [0.3, -0.8, 0.6], seed=4)
    a = FedSGD(mu=2.0, step_size=0.5, n_iter=50, clip=1.0, random_state=0).fit(data)
    assert a.n_iter_ == 50 and len(a.history_) == 51
    with pytest.raises(ValueError, match="step_size must be .auto. or a number > 0"):
        FedSGD(step_size="fast").fit(data)


def test_nonprivate_fixed_point_away_from_the_optimum_warns():
    """FedAvg's local steps settle where the pooled gradient is not zero; with mu = inf the fit says so."""
    import warnings as _w

    import privfedstat as pfs
    from privfedstat import ConvergenceWarning
    from privfedstat.data import load_randhie

    df = load_randhie()
    df["site"] = np.random.default_rng(0).permutation(len(df)) % 20
    formula = "mdvis ~ lncoins + idp + lpi + fmde + physlm + disea + hlthg + hlthf + hlthp"
    # statsmodels' MLE is 1.24 SE away (0.87 before the step counted the private scales' mean squares: a longer
    # local step drifts further towards each site's own optimum)
    with pytest.warns(ConvergenceWarning, match=r"settled about 1\.2"):
        est = pfs.glm(formula, df, client="site", family="poisson", method="fedavg", mu=float("inf"))
    assert est.converged_ is False
    with _w.catch_warnings():
        _w.simplefilter("error", ConvergenceWarning)
        exact = pfs.glm(formula, df, client="site", family="poisson", method="fedirls", mu=float("inf"))
    assert exact.converged_
