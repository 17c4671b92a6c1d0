"""The method registry: lookups, registration rules, and that a method registered at runtime reaches
glm(), the simulations, the theory comparison, the MSE predictor and the CLI without editing them."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from privfedstat import FedSGD, predict_mse
from privfedstat.algorithms.registry import MethodSpec, get_method, method_of, methods, register, unregister
from privfedstat.cli import main
from privfedstat.formula import glm
from privfedstat.simulations import Equal, GLMDesign, MonteCarlo, Scenario, compare_to_theory, make_estimator
from privfedstat.theory import Problem


class ShadowSGD(FedSGD):
    """FedSGD under another name: the trivial method registered at runtime."""

    method = "ShadowSGD"


@pytest.fixture
def shadow():
    spec = register(dataclasses.replace(get_method("fedsgd"), name="shadowsgd", cls=ShadowSGD, display="",
                                        description="test: FedSGD registered at runtime"))
    yield spec
    unregister("shadowsgd")


def test_lookup_by_key_or_display_name_case_insensitive():
    assert get_method("FedSGD") is get_method("fedsgd") is get_method("FEDSGD")
    assert get_method("PooledMLE") is get_method("pooled")
    assert get_method("scaffold").display == "SCAFFOLD"
    with pytest.raises(ValueError, match=r"unknown method 'NP-Pooled'; choose one of .*'fedsgd' \(FedSGD\)"):
        get_method("NP-Pooled")


def test_method_of_finds_the_class_or_its_nearest_registered_base():
    assert method_of(FedSGD()) is get_method("fedsgd")
    assert method_of(ShadowSGD) is get_method("fedsgd")  # not registered: the algorithm it derives from
    with pytest.raises(TypeError, match="registered method"):
        method_of(object())


def test_registration_rules():
    sgd = get_method("fedsgd")
    with pytest.raises(ValueError, match="clashes"):
        register(dataclasses.replace(sgd, name="other"))  # display name FedSGD taken
    with pytest.raises(ValueError, match="clashes"):
        register(dataclasses.replace(sgd, name="fedavg", display="Other"))
    with pytest.raises(ValueError, match="lower-case"):
        register(dataclasses.replace(sgd, name="Other", display="Other"))
    with pytest.raises(TypeError, match="FederatedEstimator"):
        register(MethodSpec("other", dict, True, "not an estimator"))
    assert get_method("fedsgd") is sgd and "other" not in {s.name for s in methods()}


def test_paper_settings_section_4_1():
    settings = {s.display: s.paper_params(None) for s in methods() if s.paper_params is not None}
    assert settings == {
        "FedSGD": {"n_iter": 50},
        "FedHybrid": {"n_local_steps": 30, "n_server_iter": 20},
        "FedAvg": {"n_rounds": 2, "n_local_steps": 50},
        "FedNewton": {"n_rounds": 1, "n_local_steps": 50},
    }
    assert get_method("FedSGD").paper_params(7) == {"n_iter": 7}
    assert get_method("FedHybrid").paper_params(10) == {"n_local_steps": 6, "n_server_iter": 4}
    assert get_method("FedHybrid").paper_params(2) == {"n_local_steps": 1, "n_server_iter": 1}
    assert get_method("FedAvg").paper_params(7) == {"n_rounds": 2, "n_local_steps": 7}
    assert get_method("FedNewton").paper_params(7) == {"n_rounds": 1, "n_local_steps": 7}


@pytest.mark.parametrize("spec", [s for s in methods() if s.predictor is not None], ids=lambda s: s.name)
def test_predictor_knows_every_auto_count(spec):
    """Every iteration count that defaults to "auto" has the value the predictor resolves it to."""
    auto = {k for k, v in spec.cls().get_params().items() if v == "auto" and k.startswith("n_")}
    assert auto == set(spec.auto_counts)


@pytest.mark.parametrize("spec", methods(), ids=lambda s: s.name)
def test_every_setting_and_bound_names_real_parameters(spec):
    params = spec.cls().get_params()
    if spec.paper_params is not None:
        assert set(spec.paper_params(None)) <= set(params) and set(spec.paper_params(12)) <= set(params)
    if spec.bound is not None:
        assert set(spec.bound.params) <= set(params)


def test_a_method_registered_at_runtime_reaches_glm(shadow):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.standard_normal(600), "site": np.repeat(np.arange(6), 100)})
    df["y"] = (rng.random(600) < 1 / (1 + np.exp(-0.5 * df["x"]))).astype(float)
    kw = {"data": df, "client": "site", "family": "logistic", "scaling": None, "clip": 1.0, "n_iter": 5,
          "inference": None, "random_state": 3}
    est = glm("y ~ x", method="ShadowSGD", **kw)
    assert type(est) is ShadowSGD
    np.testing.assert_array_equal(est.coef_, glm("y ~ x", method="fedsgd", **kw).coef_)


def test_a_method_registered_at_runtime_reaches_the_simulations(shadow):
    scenario = Scenario(GLMDesign("logistic"), 4, Equal(50), 2.0, n_iter=10)
    est = make_estimator("shadowsgd", scenario, 7)
    assert type(est) is ShadowSGD and est.n_iter == 10
    data = scenario.design.sample(scenario.allocation.sizes(4, np.random.default_rng(1)), np.random.default_rng(1))
    np.testing.assert_array_equal(est.fit(data).coef_, make_estimator("FedSGD", scenario, 7).fit(data).coef_)
    df = MonteCarlo([scenario], ["FedSGD", "ShadowSGD"], n_reps=2, progress=False).run()
    assert list(dict.fromkeys(df["method"])) == ["FedSGD", "ShadowSGD"] and np.isfinite(df["mse"]).all()
    out = compare_to_theory(df, d=3, predict=False)
    assert out.groupby("method")["bound"].first().nunique() == 1  # FedSGD's bound (Thm 3.2) for both
    assert set(out["bound_name"]) == {"Thm 3.2 eq. (2), K explicit"}


def test_a_method_registered_at_runtime_reaches_the_predictor(shadow):
    problem = Problem(GLMDesign("logistic"), [200] * 5)
    mine = predict_mse(ShadowSGD(mu=2.0, clip=1.0, n_iter=10), problem, n_mc=256)
    ref = predict_mse(FedSGD(mu=2.0, clip=1.0, n_iter=10), problem, n_mc=256)
    assert mine.method == "ShadowSGD" and mine.total == ref.total


def test_a_method_registered_at_runtime_is_listed_by_the_cli(shadow, capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("shadowsgd"))
    assert "ShadowSGD" in line and "record-level" in line and "studies, bound, predictor" in line
    for spec in methods():
        assert spec.display in out


def test_without_settings_a_method_is_refused_clearly():
    scenario = Scenario(GLMDesign("logistic"), 4, Equal(50), 2.0)
    with pytest.raises(ValueError, match="no simulation settings"):
        make_estimator("fedirls", scenario, 0)
    with pytest.raises(ValueError, match="unknown method 'FedProx'"):
        MonteCarlo([scenario], ["FedProx"], progress=False).run()
    table = pd.DataFrame({"method": ["FedIRLS"], "m": [4], "N": [200], "mu": [2.0], "mse": [0.1]})
    with pytest.raises(ValueError, match="no theory bound"):
        compare_to_theory(table, d=3)
    with pytest.raises(TypeError, match="FedSGD, FedHybrid, FedAvg, FedNewton"):
        predict_mse(get_method("fedirls").cls(clip=1.0), Problem(GLMDesign("logistic"), [100]))
    assert math.isfinite(get_method("fedsgd").bound({"n_iter": 5}, mu=1.0, d=3, n_samples=200, n_clients=4,
                                                     tau1=1.0, tau2=1.0))
