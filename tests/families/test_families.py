"""Tests for privfedstat.families: derivatives, stability, response checks and the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privfedstat.families import (
    FAMILIES,
    POISSON_MAX_ETA,
    Family,
    Gaussian,
    Huber,
    Logistic,
    Poisson,
    get_family,
)

FAMILY_SPECS = [("logistic", {}), ("poisson", {}), ("gaussian", {}), ("huber", {}), ("huber", {"c": 2.0})]
IDS = ["logistic", "poisson", "gaussian", "huber", "huber-c2"]


def _y_for(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if name == "logistic":
        return rng.integers(0, 2, size=n).astype(float)
    if name == "poisson":
        return rng.poisson(2.0, size=n).astype(float)
    return rng.normal(0.0, 2.0, size=n)


def _away_from_kink(fam: Family, y: np.ndarray, z: np.ndarray, h: float) -> np.ndarray:
    if isinstance(fam, Huber):
        return np.abs(np.abs(y - z) - fam.param) > 10 * h
    return np.ones_like(z, dtype=bool)


@pytest.fixture(params=FAMILY_SPECS, ids=IDS)
def fam(request):
    name, params = request.param
    return get_family(name, **params)


def test_registry_covers_all_families():
    assert set(FAMILIES) == {"logistic", "poisson", "gaussian", "huber", "multinomial"}
    params = {"multinomial": {"n_classes": 3}}
    for name, cls in FAMILIES.items():
        f = get_family(name, **params.get(name, {}))
        assert isinstance(f, cls)
        assert f.name == name
    codes = [get_family(n, **params.get(n, {})).code for n in FAMILIES]
    assert sorted(codes) == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------- scalar derivatives
def test_deriv_matches_finite_differences(fam):
    rng = np.random.default_rng(1)
    n = 400
    y = _y_for(fam.name, rng, n)
    z = rng.uniform(-6.0, 6.0, size=n)
    h = 1e-5
    fd = (fam.loss(y, z + h) - fam.loss(y, z - h)) / (2 * h)
    ok = _away_from_kink(fam, y, z, h)
    assert ok.sum() > n // 2
    scale = 1.0 + np.abs(fam.deriv(y, z))
    np.testing.assert_allclose((fam.deriv(y, z) - fd)[ok] / scale[ok], 0.0, atol=1e-7)


def test_deriv2_matches_finite_differences(fam):
    rng = np.random.default_rng(2)
    n = 400
    y = _y_for(fam.name, rng, n)
    z = rng.uniform(-6.0, 6.0, size=n)
    h = 1e-5
    fd = (fam.deriv(y, z + h) - fam.deriv(y, z - h)) / (2 * h)
    ok = _away_from_kink(fam, y, z, h)
    d2 = fam.deriv2(y, z)
    assert d2.shape == z.shape
    assert np.all(d2 >= 0)
    scale = 1.0 + np.abs(d2)
    np.testing.assert_allclose((d2 - fd)[ok] / scale[ok], 0.0, atol=1e-7)


def test_loss_second_difference_matches_deriv2(fam):
    rng = np.random.default_rng(3)
    n = 200
    y = _y_for(fam.name, rng, n)
    z = rng.uniform(-4.0, 4.0, size=n)
    h = 1e-4
    fd2 = (fam.loss(y, z + h) - 2 * fam.loss(y, z) + fam.loss(y, z - h)) / h**2
    ok = _away_from_kink(fam, y, z, h)
    np.testing.assert_allclose(fam.deriv2(y, z)[ok], fd2[ok], rtol=1e-4, atol=1e-4)


def test_huber_values_and_kink():
    for c in (1.345, 2.0):
        f = get_family("huber", c=c)
        y = np.zeros(5)
        z = np.array([-3 * c, -c, 0.3 * c, c, 5 * c])
        r = np.abs(z)
        expected = np.where(r <= c, 0.5 * r**2, c * r - 0.5 * c**2)
        np.testing.assert_allclose(f.loss(y, z), expected, rtol=1e-15)
        np.testing.assert_allclose(f.deriv(y, z), np.clip(z, -c, c), rtol=1e-15)
        np.testing.assert_array_equal(f.deriv2(y, z), [0.0, 1.0, 1.0, 1.0, 0.0])
        # loss is continuous and C^1 at the kink
        eps = 1e-9
        assert f.loss(np.zeros(1), np.array([c - eps]))[0] == pytest.approx(f.loss(np.zeros(1), np.array([c + eps]))[0], abs=1e-8)
    assert get_family("huber").param == 1.345
    assert get_family("huber", c=2.0).param == 2.0


def test_glm_deriv_is_mean_minus_y():
    z = np.linspace(-5, 5, 21)
    y = np.ones_like(z)
    for name in ("logistic", "poisson", "gaussian"):
        f = get_family(name)
        np.testing.assert_allclose(f.deriv(y, z), f.mean(z) - y, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(get_family("logistic").mean(z), 1 / (1 + np.exp(-z)), rtol=1e-14)
    np.testing.assert_allclose(get_family("poisson").mean(z), np.exp(z), rtol=1e-14)


# --------------------------------------------------------------------------- gradient / Hessian in theta
def _mean_loss(fam, X, y, theta):
    return float(np.mean(fam.loss(y, X @ theta)))


def _grad(fam, X, y, theta):
    return X.T @ fam.deriv(y, X @ theta) / len(y)


def _hess(fam, X, y, theta):
    w = fam.deriv2(y, X @ theta)
    return (X * w[:, None]).T @ X / len(y)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_theta_gradient_and_hessian_finite_differences(fam, seed):
    rng = np.random.default_rng(10 + seed)
    n, d = 25, 4
    X = rng.normal(size=(n, d))
    y = _y_for(fam.name, rng, n)
    theta = rng.normal(scale=0.3, size=d)
    h = 1e-5
    eye = np.eye(d)
    fd_grad = np.array(
        [(_mean_loss(fam, X, y, theta + h * eye[k]) - _mean_loss(fam, X, y, theta - h * eye[k])) / (2 * h) for k in range(d)]
    )
    fd_hess = np.array([(_grad(fam, X, y, theta + h * eye[k]) - _grad(fam, X, y, theta - h * eye[k])) / (2 * h)
                        for k in range(d)])
    # a Huber sample within 2h*||x|| of its kink would spoil the finite difference: check and skip
    if isinstance(fam, Huber):
        r = np.abs(y - X @ theta)
        if np.any(np.abs(r - fam.param) < 10 * h * np.linalg.norm(X, axis=1)):
            pytest.skip("sample too close to the Huber kink for finite differences")
    np.testing.assert_allclose(_grad(fam, X, y, theta), fd_grad, rtol=1e-6, atol=1e-7)
    H = _hess(fam, X, y, theta)
    np.testing.assert_allclose(H, fd_hess, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(H, H.T, rtol=1e-14, atol=1e-15)
    assert np.linalg.eigvalsh(H).min() >= -1e-12  # convex losses


# --------------------------------------------------------------------------- numerical stability
def test_logistic_extreme_z():
    f = get_family("logistic")
    z = np.array([800.0, -800.0, 800.0, -800.0, 40.0, -40.0])
    y = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        loss = f.loss(y, z)
        d1 = f.deriv(y, z)
        d2 = f.deriv2(y, z)
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(d1)) and np.all(np.isfinite(d2))
    # asymptotics: log(1 + e^z) - y z = max(z, 0) - y z + log1p(e^-|z|)
    np.testing.assert_allclose(loss[:4], [800.0, 0.0, 0.0, 800.0], rtol=1e-15, atol=1e-300)
    # y = 1, z = 40: true value log1p(e^-40) ~ 4.2e-18 is lost to cancellation (40 + tiny - 40);
    # an absolute error of that size is harmless, a larger one is not
    assert abs(loss[4] - math.log1p(math.exp(-40.0))) <= 1e-15
    assert loss[5] == pytest.approx(math.log1p(math.exp(-40.0)), rel=1e-12, abs=0)
    np.testing.assert_allclose(d1[:4], [1.0, 0.0, 0.0, -1.0], atol=1e-300)
    np.testing.assert_array_equal(d2[:4], 0.0)
    assert np.all(loss >= 0)


def test_logistic_moderate_z_accurate():
    f = get_family("logistic")
    z = np.array([-30.0, -5.0, -0.1, 0.0, 0.1, 5.0, 30.0])
    y = np.zeros_like(z)
    expected = np.array([math.log1p(math.exp(v)) if v < 0 else v + math.log1p(math.exp(-v)) for v in z])
    np.testing.assert_allclose(f.loss(y, z), expected, rtol=1e-14)


def test_poisson_capped_and_finite():
    f = get_family("poisson")
    assert POISSON_MAX_ETA == 500.0
    z = np.array([1000.0, 1e6, 500.0, -1000.0])
    y = np.array([0.0, 3.0, 1.0, 2.0])
    with np.errstate(over="raise"):
        loss = f.loss(y, z)
        d1 = f.deriv(y, z)
        d2 = f.deriv2(y, z)
        mu = f.mean(z)
    for a in (loss, d1, d2, mu):
        assert np.all(np.isfinite(a))
    cap = math.exp(POISSON_MAX_ETA)
    # above the cap exp is continued linearly: e^cap (1 + z - cap) - y z
    assert loss[0] == pytest.approx(cap * (1 + 500.0), rel=1e-14, abs=0)
    assert loss[1] == pytest.approx(cap * (1 + 1e6 - 500.0) - 3e6, rel=1e-14, abs=0)
    assert d1[0] == pytest.approx(cap, rel=1e-14, abs=0)
    assert d2[0] == pytest.approx(cap, rel=1e-14, abs=0) and d2[1] == pytest.approx(cap, rel=1e-14, abs=0)
    assert mu[0] == pytest.approx(cap, rel=1e-14, abs=0)
    assert loss[3] == pytest.approx(2000.0, rel=1e-14, abs=0)  # e^-1000 = 0, -y z = 2000
    assert d1[3] == pytest.approx(-2.0, rel=1e-14, abs=0)


# --------------------------------------------------------------------------- check_y
@pytest.mark.parametrize("bad", [[0.0, 1.0, 2.0], [0.5, 1.0], [-1.0, 0.0]])
def test_logistic_check_y_rejects(bad):
    with pytest.raises(ValueError, match=r"0, 1|0/1"):
        get_family("logistic").check_y(np.array(bad))


def test_logistic_check_y_accepts():
    get_family("logistic").check_y(np.array([0.0, 1.0, 1.0, 0.0]))
    get_family("logistic").check_y(np.array([0, 1, 1]))


@pytest.mark.parametrize("bad", [[1.0, -1.0], [0.5, 2.0], [3.0, 2.25], [-0.5]])
def test_poisson_check_y_rejects(bad):
    with pytest.raises(ValueError, match="non-negative integer"):
        get_family("poisson").check_y(np.array(bad))


def test_poisson_check_y_accepts():
    get_family("poisson").check_y(np.array([0.0, 1.0, 7.0, 1e6]))


def test_gaussian_huber_accept_any_real_y():
    y = np.array([-1e6, -0.5, 0.0, 3.7])
    get_family("gaussian").check_y(y)
    get_family("huber").check_y(y)


# --------------------------------------------------------------------------- get_family
def test_unknown_family_lists_names():
    with pytest.raises(ValueError) as info:
        get_family("probit")
    msg = str(info.value)
    assert "probit" in msg
    for name in ("logistic", "poisson", "gaussian", "huber"):
        assert name in msg


def test_names_case_insensitive():
    assert isinstance(get_family("Logistic"), Logistic)
    assert isinstance(get_family("POISSON"), Poisson)


def test_instance_returned_unchanged():
    for f in (Logistic(), Poisson(), Gaussian(), Huber(c=3.0)):
        assert get_family(f) is f


def test_instance_with_params_is_type_error():
    with pytest.raises(TypeError):
        get_family(Huber(), c=2.0)


def test_non_string_is_type_error():
    with pytest.raises(TypeError):
        get_family(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("c", [0, 0.0, -1.0, math.inf, math.nan])
def test_huber_bad_c(c):
    with pytest.raises(ValueError, match="c"):
        get_family("huber", c=c)


def test_unexpected_param_for_parameterless_family():
    with pytest.raises(TypeError):
        get_family("logistic", c=1.0)


def test_equality_and_hash():
    assert get_family("huber", c=2.0) == Huber(c=2.0)
    assert get_family("huber", c=2.0) != Huber(c=1.0)
    assert hash(Huber(c=2.0)) == hash(Huber(c=2.0))
    assert Logistic() == Logistic() and Logistic() != Poisson()
    assert repr(Huber(c=2.0)) == "Huber(c=2.0)"
