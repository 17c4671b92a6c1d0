"""A pooled elastic-net GLM solver independent of the package, the reference of the FedNMap tests.

Minimises ``mean_j ell(y_j, x_j^T b) + alpha (l1_ratio ||b_P||_1 + (1 - l1_ratio) ||b_P||^2 / 2)`` over the
penalised coordinates P (glmnet's and scikit-learn's scaling) by accelerated proximal gradient (FISTA with
backtracking and adaptive restart), written here from the formulas: its own losses, gradients and soft
thresholding. It stops when the natural map ``(b - prox(b - t grad, t)) / t`` has norm below ``tol``: a
certificate of optimality independent of how the point was found.
"""

from __future__ import annotations

import numpy as np


def _loss_grad(family: str, X: np.ndarray, y: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
    eta = X @ b
    if family == "logistic":
        loss = np.mean(np.logaddexp(0.0, eta) - y * eta)
        resid = 1.0 / (1.0 + np.exp(-eta)) - y
    elif family == "poisson":
        mu = np.exp(eta)
        loss = np.mean(mu - y * eta)
        resid = mu - y
    elif family == "gaussian":
        loss = 0.5 * np.mean((y - eta) ** 2)
        resid = eta - y
    else:
        raise ValueError(family)
    return float(loss), X.T @ resid / y.size


def _prox(v: np.ndarray, t: float, l1: np.ndarray, l2: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.maximum(np.abs(v) - t * l1, 0.0) / (1.0 + t * l2)


def enet_glm(X, y, family: str, alpha: float, l1_ratio: float, unpenalized=(0,), tol: float = 1e-12,
             max_iter: int = 200_000) -> np.ndarray:
    """The pooled elastic-net GLM estimate (see the module docstring); raises if it is not certified within max_iter."""
    X, y = np.asarray(X, float), np.asarray(y, float)
    p = X.shape[1]
    pen = np.ones(p)
    pen[list(unpenalized)] = 0.0
    l1, l2 = alpha * l1_ratio * pen, alpha * (1 - l1_ratio) * pen  # penalty l1 |b| + l2 b^2 / 2

    def psi(b):
        return _loss_grad(family, X, y, b)[0] + float(np.sum(l1 * np.abs(b)) + 0.5 * np.sum(l2 * b * b))

    b = np.zeros(p)
    v, t_mom, step = b.copy(), 1.0, 1.0
    for _ in range(max_iter):
        fv, gv = _loss_grad(family, X, y, v)
        while True:  # backtracking on the smooth part
            new = _prox(v - step * gv, step, l1, l2)
            d = new - v
            if _loss_grad(family, X, y, new)[0] <= fv + gv @ d + (d @ d) / (2 * step) + 1e-15 * abs(fv):
                break
            step /= 2
        if t_mom > 1.0 and psi(new) > psi(b):  # adaptive restart: drop the momentum, step from b
            v, t_mom = b.copy(), 1.0
            continue
        t_next = (1 + np.sqrt(1 + 4 * t_mom * t_mom)) / 2
        v = new + (t_mom - 1) / t_next * (new - b)
        b, t_mom = new, t_next
        g = _loss_grad(family, X, y, b)[1]
        if np.linalg.norm((b - _prox(b - step * g, step, l1, l2)) / step) < tol:
            return b
        step *= 1.1
    raise RuntimeError("the reference solver did not reach its tolerance")
