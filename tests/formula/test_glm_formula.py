import numpy as np
import pandas as pd
import pytest

from privfedstat import FederatedData, FedSGD, PrivacyLeakWarning
from privfedstat.fitting.scaling import FeatureBounds, PrivateStandardize
from privfedstat.formula import glm


@pytest.fixture
def df():
    rng = np.random.default_rng(0)
    n = 4000
    d = pd.DataFrame({
        "age": rng.uniform(20, 80, n),
        "income": rng.lognormal(10, 0.5, n),
        "region": rng.choice(["north", "south", "west"], n),
        "site": rng.integers(0, 10, n),
    })
    eta = -2 + 0.03 * d["age"] + 1e-5 * d["income"] + (d["region"] == "south") * 0.5
    d["y"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    d["count"] = rng.poisson(np.exp(0.2 + 0.01 * d["age"]))
    return d


def test_names_and_equivalence_with_array_api(df):
    est = glm("y ~ age + income + C(region)", data=df, client="site", family="logistic", method="fedsgd",
              mu=2.0, scaling=None, random_state=3, step_size=1e-9, clip=1.0,
              levels={"region": ["north", "south", "west"]})
    assert est.feature_names_in_ == ["Intercept", "age", "income", "C(region)[T.south]", "C(region)[T.west]"]
    X = np.column_stack([np.ones(len(df)), df["age"], df["income"],
                         df["region"] == "south", df["region"] == "west"]).astype(float)
    data = FederatedData.from_pooled(X, df["y"].to_numpy(), clients=df["site"].to_numpy())
    ref = FedSGD(family="logistic", mu=2.0, random_state=3, step_size=1e-9, clip=1.0).fit(data)
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    frame = est.summary().to_frame()
    assert list(frame.index) == est.feature_names_in_
    assert "C(region)[T.south]" in est.summary().as_text()
    assert est.levels_ == {"region": ["north", "south", "west"]}


@pytest.mark.parametrize("method", ["fedsgd", "fedhybrid", "fedavg", "fednewton"])
def test_raw_scale_covariates_give_sensible_private_estimates(df, method):
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    mle = smf.glm("y ~ age + income", data=df, family=sm.families.Binomial()).fit().params.to_numpy()
    est = glm("y ~ age + income", data=df, client="site", family="logistic", method=method, random_state=0)
    assert np.all(np.isfinite(est.coef_))
    # the slope on age (per year) within 50% of the MLE's; intercept within 1
    assert abs(est.coef_[1] - mle[1]) < 0.5 * abs(mle[1])
    assert abs(est.coef_[0] - mle[0]) < 1.0
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-12)
    assert any(r.stage.startswith("scaling") for r in est.privacy_.releases)


def test_intercept_control_and_poisson(df):
    est = glm("count ~ age - 1", data=df, client="site", family="poisson", method="fedsgd", random_state=0)
    assert est.feature_names_in_ == ["age"]
    assert 0.0 < est.coef_[0] < 0.05


def test_public_bounds_cost_no_privacy(df):
    bounds = FeatureBounds(lower=(1, 20, 0), upper=(1, 80, 2e5), intercept=0)
    est = glm("y ~ age + income", data=df, client="site", family="logistic", scaling=bounds, random_state=0)
    assert not any(r.stage.startswith("scaling") for r in est.privacy_.releases)
    assert abs(est.coef_[1] - 0.03) < 0.02


def test_multinomial_formula():
    rng = np.random.default_rng(1)
    n = 3000
    d = pd.DataFrame({"x": rng.normal(size=n), "site": rng.integers(0, 5, n)})
    logits = np.column_stack([np.zeros(n), 1.5 * d["x"], -1.5 * d["x"]])
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    d["label"] = pd.Categorical(np.array(["a", "b", "c"])[(p.cumsum(1) < rng.random(n)[:, None]).sum(1)])
    est = glm("label ~ x", data=d, client="site", family="multinomial", mu=float("inf"), clip=float("inf"),
              method="fedsgd", n_iter=2000, step_size=1.0)
    assert est.coef_.shape == (2, 2)
    assert est.coef_[1, 0] > 1.0 and est.coef_[1, 1] < -1.0
    assert ("label=b", "x") in est.summary().to_frame().index


def test_formula_errors(df):
    with pytest.raises(ValueError, match="nonexistent"):
        glm("y ~ nonexistent", data=df, client="site", family="logistic")
    with pytest.raises(ValueError, match="a response, '~'"):
        glm("~ age", data=df, client="site", family="logistic")
    with pytest.raises(ValueError, match="client column"):
        glm("y ~ age", data=df, client="hospital", family="logistic")
    for labels in (df["site"], df["site"].to_numpy(), list(df["site"])):  # an unhashable TypeError before
        with pytest.raises(TypeError, match=r"client must name the column .* data.assign\(site=labels\)"):
            glm("y ~ age", data=df, client=labels, family="logistic")
    bad = df.copy()
    bad.loc[5, "age"] = np.nan
    with pytest.raises(ValueError, match="missing"):
        glm("y ~ age", data=bad, client="site", family="logistic")
    est = glm("y ~ age", data=bad, client="site", family="logistic", na_action="drop", mu=float("inf"),
              clip=float("inf"))
    assert est.n_samples_ == len(df) - 1
    no_site = df.assign(site=df["site"].astype(float))
    no_site.loc[5, "site"] = np.nan  # na_action='drop' does not drop a row without a client: the message says so
    with pytest.raises(ValueError, match=r"every row needs a client \(na_action='drop' drops rows with missing model"):
        glm("y ~ age", data=no_site, client="site", family="logistic", na_action="drop", mu=float("inf"))
    with pytest.raises(ValueError, match="unknown method"):
        glm("y ~ age", data=df, client="site", family="logistic", method="fedprox")
    with pytest.raises(TypeError, match="DataFrame"):
        glm("y ~ age", data=df.to_numpy(), client="site")
    with pytest.raises(TypeError, match="does not take"):
        glm("y ~ age", data=df, client="site", family="logistic", n_iter=3)  # FedIRLS counts rounds


def test_scaling_validation():
    with pytest.raises(ValueError, match="budget"):
        PrivateStandardize(budget=1.5)
    with pytest.raises(ValueError, match="lower <= upper"):
        FeatureBounds(lower=(0, 1), upper=(1, 0))


@pytest.mark.parametrize("method", ["scaffold", "pooled", "localfit"])
def test_baseline_methods_through_glm(df, method):
    mu = 2.0 if method == "scaffold" else float("inf")
    est = glm("y ~ age + income", data=df, client="site", family="logistic", method=method, mu=mu, random_state=0)
    assert est.feature_names_in_ == ["Intercept", "age", "income"]
    assert np.all(np.isfinite(est.coef_))
    assert est.privacy_.is_private == (method == "scaffold")


def test_declared_intercept_column_is_one_by_the_data_domain():
    """Declaring a column the intercept fixes it to 1: no error is raised on (released about) a data value."""
    from conftest import simulate

    data = simulate("logistic", [100] * 4, [0.2, 0.3])  # column 0 is the intercept
    no_intercept = FederatedData(data.X[:, 1:], data.y, data.offsets)
    ones = no_intercept.X.copy()
    ones[:, 0] = 1.0
    declared = FedSGD(scaling="private", random_state=3).fit(no_intercept)
    projected = FedSGD(scaling="private", random_state=3).fit(FederatedData(ones, data.y, data.offsets))
    np.testing.assert_array_equal(declared.coef_, projected.coef_)
    with pytest.raises(ValueError, match="intercept index 5"):
        FedSGD(scaling=PrivateStandardize(intercept=5)).fit(no_intercept)
    est = FedSGD(scaling=PrivateStandardize(intercept=None), random_state=0).fit(no_intercept)
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-12)
    only_intercept = FederatedData(data.X[:, :1], data.y, data.offsets)
    est = FedSGD(scaling="private", random_state=0).fit(only_intercept)  # nothing to scale: no budget spent
    np.testing.assert_allclose(est.privacy_.client_mu, 2.0, rtol=1e-12)
    assert not est.privacy_.to_frame()["stage"].str.startswith("scaling").any()


def test_budget_is_charged_by_glm(df):
    from privfedstat import BudgetExceededError, PrivacyBudget

    budget = PrivacyBudget(mu=2.5, n_clients=10)
    est = glm("y ~ age", data=df, client="site", family="logistic", mu=2.0, budget=budget, random_state=0,
              n_rounds=3, clip=1.0, hessian_clip=1.0, scaling=None)
    np.testing.assert_allclose(budget.spent, est.privacy_.client_mu, rtol=1e-12)
    with pytest.raises(BudgetExceededError, match="only 1.5 of the budget"):
        glm("y ~ age", data=df, client="site", family="logistic", mu=2.0, budget=budget)
    bad = df.copy()
    bad.loc[5, "age"] = np.nan
    with pytest.warns(PrivacyLeakWarning):
        glm("y ~ age", data=bad, client="site", family="logistic", mu=1.0, budget=budget, na_action="drop",
            random_state=0, n_rounds=3, clip=1.0, hessian_clip=1.0, scaling=None)
    assert len(budget.fits) == 2 and "na_action='drop'" in budget.leaks[0] and not budget.is_private


def test_large_counts_reach_the_mle_without_an_overflow_warning():
    """The first Newton step from 0 overshoots on counts in the hundreds; its rejected candidate's gradient overflows,
    which the safeguard must treat as a rejection, not leak as numpy's RuntimeWarning."""
    import warnings

    import statsmodels.api as sm
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"x": 3 * rng.normal(size=600), "s": np.arange(600) % 6})
    data["y"] = rng.poisson(np.exp(6 + 0.3 * data["x"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fit = glm("y ~ x", data, client="s", family="poisson", mu=float("inf"))
    mle = sm.GLM(data["y"], sm.add_constant(data[["x"]]), family=sm.families.Poisson()).fit().params.to_numpy()
    np.testing.assert_allclose(np.asarray(fit.coef_), mle, rtol=1e-8)
