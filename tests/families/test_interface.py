"""Every registered family implements the whole Family interface, checked against references.

Deviance and link against statsmodels (GLM families' ``deviance`` and ``link``, ``MNLogit.loglike``,
``HuberT.rho``),
``simulate`` by a Monte-Carlo check of the law's mean and variance, ``response_quadrature`` by its
exact moments, and the classifier methods by their consistency with ``mean``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm

from privfedstat.families import FAMILIES, Family, family_type, get_family

#: parameters needed to build each registered family
PARAMS = {"multinomial": {"n_classes": 4}}
#: the residual standard deviation given to families with a dispersion
SCALE = 1.5


def _make(name: str) -> Family:
    return get_family(name, **PARAMS.get(name, {}))


@pytest.fixture(params=sorted(FAMILIES))
def fam(request) -> Family:
    return _make(request.param)


def _z(fam: Family, n: int, rng: np.random.Generator) -> np.ndarray:
    shape = (n,) if fam.n_outputs == 1 else (n, fam.n_outputs)
    return rng.uniform(-2.0, 2.0, size=shape)


def _y(fam: Family, z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Responses in the family's support (drawn from its law where it has one)."""
    if fam.likelihood:
        return fam.simulate(z, rng, scale=SCALE)
    return z + rng.standard_t(3, size=z.shape[0])


def test_every_family_declares_the_interface(fam):
    attrs = ("name", "code", "param", "link", "n_outputs", "curvature_at_zero", "max_curvature", "likelihood",
             "has_dispersion", "response_levels", "start_at_least_squares", "class_labels")
    for attr in attrs:
        assert hasattr(fam, attr), attr
    assert family_type(fam.name) is type(fam) is family_type(fam)
    assert not fam.has_dispersion or fam.likelihood  # a dispersion belongs to a response law
    assert not fam.response_levels or fam.class_labels is not None


def test_deviance_matches_statsmodels(fam):
    rng = np.random.default_rng(0)
    n = 300
    z = _z(fam, n, rng)
    y = _y(fam, z, rng)
    dev = fam.deviance(y, z)
    assert dev.shape == (n,) and np.all(dev >= -1e-12)
    mu = fam.mean(z)
    if fam.name == "multinomial":  # saturated log-likelihood 0: deviance = -2 loglik
        d = 3
        X = rng.standard_normal((n, d))
        Theta = rng.standard_normal((d, fam.n_outputs))
        y = fam.simulate(X @ Theta, rng)
        ref = -2.0 * sm.MNLogit(y, X).loglike(Theta.ravel(order="F"))
        assert math.isclose(float(np.sum(fam.deviance(y, X @ Theta))), ref, rel_tol=1e-10)
        return
    if fam.name == "huber":  # an M-estimator: twice the loss rho of statsmodels' HuberT
        ref = 2.0 * sm.robust.norms.HuberT(t=fam.param).rho(y - z)
        np.testing.assert_allclose(dev, ref, rtol=1e-12, atol=1e-14)
        return
    sm_family = {"logistic": sm.families.Binomial, "poisson": sm.families.Poisson,
                 "gaussian": sm.families.Gaussian}[fam.name]()
    np.testing.assert_allclose(np.sum(dev), sm_family.deviance(y, mu), rtol=1e-10)
    assert type(sm_family.link).__name__.lower() == fam.link
    np.testing.assert_allclose(sm_family.link.inverse(z), mu, rtol=1e-12)


def test_simulate_draws_the_law(fam):
    rng = np.random.default_rng(1)
    if not fam.likelihood:
        with pytest.raises(ValueError, match="not a likelihood"):
            fam.simulate(np.zeros(3), rng, scale=SCALE)
        return
    n = 200_000
    z0 = _z(fam, 1, rng)
    z = np.repeat(z0, n, axis=0)
    y = fam.simulate(z, rng, scale=SCALE)
    assert y.shape == (n,) and y.dtype == np.float64
    fam.check_y(y)
    if fam.class_labels is not None:  # class frequencies against the probabilities
        p = fam.class_probabilities(z0)[0]
        freq = np.array([np.mean(y == c) for c in fam.class_labels])
        np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(p * (1 - p) / n).max())
        return
    mean = float(fam.mean(z0)[0])
    var = (SCALE**2 if fam.has_dispersion else 1.0) * float(fam.deriv2(np.zeros(1), z0)[0])
    assert abs(y.mean() - mean) < 5 * math.sqrt(var / n)
    assert abs(y.var() / var - 1.0) < 0.02


def test_simulate_is_reproducible_and_needs_its_scale(fam):
    if not fam.likelihood:
        return
    z = _z(fam, 50, np.random.default_rng(2))
    a = fam.simulate(z, np.random.default_rng(3), scale=SCALE)
    b = fam.simulate(z, np.random.default_rng(3), scale=SCALE)
    np.testing.assert_array_equal(a, b)
    if fam.has_dispersion:
        with pytest.raises(ValueError, match="scale"):
            fam.simulate(z, np.random.default_rng(3))


def test_response_quadrature_moments(fam):
    """Weights sum to 1, E[y] is the mean and, canonical link, E[ell'(y, z)^2] = dispersion * ell''."""
    if not fam.likelihood:
        with pytest.raises(ValueError, match="not a likelihood"):
            fam.response_quadrature(np.zeros(3), SCALE)
        return
    z = _z(fam, 40, np.random.default_rng(4))
    Y, W = fam.response_quadrature(z, SCALE)
    assert Y.shape == W.shape and Y.shape[0] == 40 and np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=1e-12)
    if fam.n_outputs > 1:  # the classes with their probabilities
        np.testing.assert_array_equal(Y[0], fam.class_labels)
        np.testing.assert_allclose(W, fam.mean(z), rtol=1e-12)
        return
    np.testing.assert_allclose(np.sum(W * Y, axis=1), fam.mean(z), rtol=1e-10)
    dispersion = SCALE**2 if fam.has_dispersion else 1.0
    score_var = np.sum(W * fam.deriv(Y, z[:, None]) ** 2, axis=1)
    np.testing.assert_allclose(score_var, dispersion * fam.deriv2(np.zeros_like(z), z), rtol=1e-9)


def test_classifier_methods(fam):
    z = _z(fam, 100, np.random.default_rng(5))
    labels = fam.class_labels
    if labels is None:
        for method in (fam.class_probabilities, fam.predict_class):
            with pytest.raises(ValueError, match="classifier"):
                method(z)
        return
    P = fam.class_probabilities(z)
    assert P.shape == (100, labels.size)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(fam.predict_class(z), labels[np.argmax(P, axis=1)])
    # E[y] is the mean: the probability of class 1 (binary) or the class probabilities themselves
    mean = fam.mean(z)
    np.testing.assert_allclose(P[:, 1] if mean.ndim == 1 else P, mean, rtol=1e-12)


def test_logistic_predicts_class_one_at_a_tie():
    assert get_family("logistic").predict_class(np.zeros(1))[0] == 1.0


def test_multinomial_simulate_covers_every_class():
    fam = get_family("multinomial", n_classes=5)
    y = fam.simulate(np.zeros((2000, 4)), np.random.default_rng(6))
    assert set(np.unique(y)) == {0.0, 1.0, 2.0, 3.0, 4.0}
