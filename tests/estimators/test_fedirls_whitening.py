"""FedIRLS's whitening of the refine rounds and its reference class: the floored Hessian made the identity, the
privacy noise shaped like the sampling noise, the clients' columns restored."""
import math

import numpy as np
import pytest
import statsmodels.api as sm

from privfedstat import FederatedData, FedIRLS
from privfedstat.algorithms.fedirls import schedule
from privfedstat.algorithms.fedirls.whitening import reference_class, whitening
from privfedstat.families import get_family
from privfedstat.federation import make_oracle


def test_whitening_makes_the_floored_hessian_the_identity():
    """W^T Hf W = I for W = whitening(Hf) (symmetric); for q outputs, the mean of Hf's q diagonal blocks (C order)."""
    rng = np.random.default_rng(2)
    A = rng.standard_normal((4, 4))
    Hf = A @ A.T + 0.1 * np.eye(4)
    W = whitening(Hf)
    np.testing.assert_allclose(W, W.T, atol=1e-12)
    np.testing.assert_allclose(W.T @ Hf @ W, np.eye(4), atol=1e-10)
    B = rng.standard_normal((6, 6))
    H6 = B @ B.T + 0.1 * np.eye(6)  # d = 3 features, q = 2 outputs: entry (j q + k, j' q + k)
    blocks = 0.5 * (H6[0::2, 0::2] + H6[1::2, 1::2])
    W3 = whitening(H6, n_outputs=2)
    np.testing.assert_allclose(W3.T @ blocks @ W3, np.eye(3), atol=1e-10)


def _three_classes(seed, shares=(0.08, 0.6, 0.32), N=9000):
    """Multinomial, two covariates and an intercept, classes with about the given shares (class 0 the reference)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    logits = np.column_stack([np.zeros(N), X @ [math.log(shares[1] / shares[0]), 0.4, -0.3],
                              X @ [math.log(shares[2] / shares[0]), -0.2, 0.5]])
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (rng.random(N)[:, None] > np.cumsum(P, axis=1)).sum(axis=1).astype(float)
    return X, y


def _multinomial_hessian(X, y, theta):
    fam = get_family("multinomial", n_classes=3)
    return make_oracle(FederatedData.from_pooled(X, y, sizes=[X.shape[0]]), fam).hessians(theta, math.inf)[0]


def test_the_reference_class_is_the_one_whose_row_whitening_whitens_the_classes_best():
    """With a rare reference class its contrasts share its noise and the classes' coupling is strong; a (d, d) map
    of the rows cannot whiten it, and another reference can: ``reference_class`` picks the class under which the
    isotropic noise's covariance ``P (P^T H P)^-2 P^T`` lies closest to ``H^-1`` (H at the MLE), here the most
    common one (class 0 when it is)."""
    from privfedstat.federation.protocol import parameter_basis

    def ratios(H, j):
        P = parameter_basis(whitening(H, 2, j), 6, j)
        inner = np.linalg.inv(P.T @ H @ P)
        return np.diag(P @ inner @ inner @ P.T) / np.diag(np.linalg.inv(H))

    for shares, expected in (((0.08, 0.6, 0.32), 1), ((0.6, 0.25, 0.15), 0), ((0.2, 0.2, 0.6), 2)):
        X, y = _three_classes(0, shares=shares)
        H = _multinomial_hessian(X, y, np.asarray(sm.MNLogit(y, X).fit(disp=0).params).ravel())
        assert reference_class(H, 2) == expected
        if expected:
            assert np.mean(ratios(H, expected)) < 0.8 * np.mean(ratios(H, 0))
    assert reference_class(np.eye(3), 1) == 0


def test_a_rare_reference_class_no_longer_inflates_the_privacy_noise(monkeypatch):
    """A multinomial fit whose first class is rare (8%): the refine rounds take the common class as reference, and the
    privacy noise of the coefficients (the fit's own noise model) is well below the one with class 0 kept, with the
    estimate within 4 total SEs of the MLE and the coefficients reported for the user's reference class."""
    X, y = _three_classes(1)
    mle = np.asarray(sm.MNLogit(y, X).fit(disp=0).params).ravel()
    data = FederatedData.from_pooled(X, y, sizes=[1500] * 6)

    def fit():
        return FedIRLS(family=get_family("multinomial", n_classes=3), mu=2.0, random_state=0).fit(data)

    chosen = fit()
    monkeypatch.setattr(schedule, "reference_class", lambda H, q: 0)
    kept = fit()
    psd = [np.sqrt(np.diag(f.inference_.cov_privacy)) for f in (chosen, kept)]
    assert np.median(psd[0] / psd[1]) < 0.8
    coef = np.asarray(chosen.coef_).ravel()
    assert np.all(np.abs(coef - mle) < 4 * np.sqrt(np.diag(chosen.inference_.cov)))


def _rare_and_correlated(seed):
    """Logistic, 8 sites of 750: a pair of columns correlated at 0.9 and a binary column with 5% ones (their
    curvature on the fitting columns is many times below the others')."""
    rng = np.random.default_rng(seed)
    N = 6000
    x1 = rng.standard_normal(N)
    X = np.column_stack([np.ones(N), x1, 0.9 * x1 + math.sqrt(0.19) * rng.standard_normal(N), rng.random(N) < 0.05])
    y = (rng.random(N) < 1 / (1 + np.exp(-(X @ [-0.5, 0.4, -0.3, 0.8])))).astype(float)
    return X, y


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_whitened_refine_rounds_shape_the_privacy_noise_like_the_sampling_noise(seed):
    """With the refine rounds run in the basis the located point's Hessian whitens, the privacy noise of every
    coefficient is about the same multiple of its sampling SE (within a factor 1.6; isotropic noise on the fitting
    columns gave 3-30), and every coefficient sits within 4 of its total SEs of the MLE."""
    X, y = _rare_and_correlated(100 + seed)
    mle = sm.Logit(y, X).fit(disp=0).params
    fit = FedIRLS(mu=2.0, scaling="private", random_state=seed).fit(FederatedData.from_pooled(X, y, sizes=[750] * 8))
    inf = fit.inference_
    ratio = np.sqrt(np.diag(inf.cov_privacy) / np.diag(inf.cov_sampling))
    assert ratio.max() / ratio.min() < 1.6
    assert np.all(np.abs(fit.coef_ - mle) < 4 * fit.bse_)


def test_the_clients_return_to_their_columns_after_a_whitened_fit(monkeypatch):
    """Every refine round's gradient is asked in the whitened basis, every other request on the fitting columns: the
    clients map their rows before the bound search and return before the diagnostics and the inference."""
    from privfedstat.federation.clients import InProcessClients

    X, y = _rare_and_correlated(1)
    seen = []
    change, gradients = InProcessClients.change_basis, InProcessClients.gradients

    def spy_change(self, basis, reference=0):
        seen.append("basis" if basis is not None else "back")
        return change(self, basis, reference)

    def spy_gradients(self, theta, **kw):
        seen.append(kw["stage"])
        return gradients(self, theta, **kw)

    monkeypatch.setattr(InProcessClients, "change_basis", spy_change)
    monkeypatch.setattr(InProcessClients, "gradients", spy_gradients)
    fit = FedIRLS(mu=2.0, random_state=0).fit(FederatedData.from_pooled(X, y, sizes=[750] * 8))
    assert seen == (["irls-gradient"] * 4 + ["basis"] + ["irls-gradient"] * 3
                    + ["back", "basis", "inference-score-test", "back"])
    assert fit.converged_ and np.all(np.isfinite(fit.bse_))


# ---------------------------------------------------------------------------- the refine bound's insurance
