"""Non-private baselines of Section 5.1: NP-Pooled (:class:`PooledMLE`) and NP-LocalFit (:class:`LocalFit`).

Both fit by damped Newton-Raphson (:func:`newton_fit`) on raw data and have the same API as the
private estimators (``fit(data)``, ``coef_``, ``privacy_``, ``communication_``, ``history_``,
``n_iter_``, ``mse``, ``predict``, ``summary``, and exact ``bse_``, ``conf_int``, ...). Their
ledgers say plainly that they are not private (``privacy_.is_private is False``, with the reason recorded as a leak).
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from .._validation import ITERATIONS, Interval
from .._warn import warn
from ..exceptions import ConvergenceWarning
from ..federation.channel import Communication
from ..federation.oracle import make_oracle
from ..fitting.base import FederatedEstimator
from ..inference.config import resolve_inference
from ..inference.core import exact_result, floored, resolve_cov_type
from ..inference.covariance import original_scale_map, sampling_covariance
from ..privacy.budget import PrivacyBudget, reserve
from ..privacy.ledger import PrivacyLedger, Release
from ..results.summary import Summary
from .newton_solver import n_outputs, newton_fit, separated

__all__ = ["PooledMLE", "LocalFit"]


class _NonPrivateBaseline(FederatedEstimator):
    """Shared fitting and reporting of the non-private baselines (no mu, no clipping, no noise)."""

    #: text of the summary's privacy line
    _privacy_line = "none (non-private baseline)"

    _parameter_constraints = {
        "alpha": Interval(Real, 0, None, closed="left", hint="It is the ridge penalty."),
        "tol": Interval(Real, 0, None, closed="neither"),
        "max_iter": ITERATIONS,
    }

    def fit(self, X, y=None, *, clients=None, offset=None, budget: PrivacyBudget | None = None) -> _NonPrivateBaseline:
        """Fit on a :class:`~privfedstat.FederatedData`, or on ``X, y, clients=labels`` (and ``offset=``; see
        :meth:`FederatedEstimator.fit`); returns ``self``. A finite ``budget`` is refused (the
        fit is not private); an infinite one records the fit."""
        data, family = self._check_data(X, y, clients, offset)
        family.check_y(data.y)  # the raw data are at the server anyway (not private)
        self._validate_params(math.inf)
        config = resolve_inference(self.inference)
        cov_type = None if config is None else resolve_cov_type(config, family)
        if cov_type == "bootstrap":
            raise ValueError(f"{self.method} is not private: its exact covariance needs no bootstrap; use "
                             "inference='auto', 'model' or 'sandwich'.")
        ledger = PrivacyLedger(data.n_clients)
        charge = reserve(budget, ledger, mu=math.inf, method=self.method)
        theta, path, n_iter, communication = self._fit(data, family, ledger)
        charge.settle()
        q = n_outputs(family)
        shape = (data.n_features, q) if q > 1 else (data.n_features,)
        if config is None:
            self.inference_ = None
        else:
            G = original_scale_map(None, data.n_features, q)
            cov, notes, scale = self._covariance(make_oracle(data, family), data, theta, cov_type)
            self.inference_ = exact_result(G @ theta, G @ cov @ G.T, cov_type, config, self._inference_what, notes,
                                           scale)
        self.family_ = family
        self.scaler_ = None
        self.coef_ = theta.reshape(shape)
        self.history_ = np.asarray([t.reshape(shape) for t in path])
        self.n_iter_ = n_iter
        self.clip_ = math.inf
        self.privacy_ = ledger
        self.communication_ = communication
        self.n_features_in_ = data.n_features
        self.n_clients_ = data.n_clients
        self.n_samples_ = data.n_samples
        self.has_offset_ = data.offset is not None
        self.mu_ = math.inf
        return self

    def _fit(self, data, family, ledger):
        raise NotImplementedError

    def _covariance(self, oracle, data, theta: np.ndarray, cov_type: str) -> tuple[np.ndarray, list[str], float | None]:
        """Exact sampling covariance of the fitted coefficients (flat, fitting order), notes and the model-based
        covariance's residual variance (Gaussian; else None)."""
        raise NotImplementedError

    def _matrices(self, oracle, theta: np.ndarray, cov_type: str) -> tuple[np.ndarray, np.ndarray]:
        """Every client's exact (unclipped) mean Hessian and, for the sandwich, mean score outer product
        (model: the Hessians again, by the information identity), at ``theta`` (shared or one row per client)."""
        H = oracle.hessians(theta, math.inf)
        return H, (H if cov_type == "model" else oracle.score_outer(theta, math.inf))

    def _scale(self, oracle, theta: np.ndarray, dof: float, client: int | None = None) -> float | None:
        """The residual variance (statsmodels' ``scale``, ``sum r^2 / dof``) at ``theta`` that a model-based covariance
        of a family with a free dispersion (Gaussian) multiplies: over every row, or over ``client``'s; None for the
        other families."""
        if not oracle.family.has_dispersion:
            return None
        sums = oracle.pearson_sums(theta, math.inf)
        return float(np.sum(sums) if client is None else sums[client]) / dof

    def _sandwich(self, H: np.ndarray, S: np.ndarray, c: float, notes: list[str]) -> np.ndarray:
        """``c Hp^-1 S Hp^-1`` with ``Hp = H + alpha I``, the Hessian of the penalised objective (with
        ``alpha = 0`` and S = H this is the model-based ``c H^-1``; a singular Hp is lifted and noted)."""
        Hp = floored(H + float(self.alpha) * np.eye(H.shape[0]), 0.0, "Hessian", notes)
        return sampling_covariance(Hp, c, S)[0]

    def summary(self, alpha: float | None = None, delta: float = 1e-5, *, data=None) -> Summary:
        """Summary of the fit (privacy: none; clipping: none); parameters as :meth:`FederatedEstimator.summary`."""
        s = super().summary(alpha, delta, data=data)
        s.header["Privacy"] = self._privacy_line
        s.header["Clipping bound B"] = "none (no clipping)"
        return s


class PooledMLE(_NonPrivateBaseline):
    """NP-Pooled: the (penalised) M-estimator on all clients' data pooled in one place.

    Damped Newton-Raphson (:func:`newton_fit`) on the pooled rows; with ``alpha = 0`` this is the
    MLE that statsmodels' ``GLM(...).fit()`` returns (canonical links: Newton = IRLS).

    **Not private.** The raw data are sent to the server. The ledger records that transfer as a
    noise-free release of infinite sensitivity (so every client's ``mu`` is ``inf``) and a leak
    ``"raw data pooled at the server"``; ``privacy_.is_private`` is False.

    **Communication convention.** One round in which client i sends its n_i rows of (x, y), i.e.
    ``n_i (d + 1)`` floats. ``communication_.total_floats`` is exact, ``N (d + 1)``;
    ``communication_.floats_per_client`` is the largest client's upload, ``max_i n_i (d + 1)``
    (every client's when sizes are equal).

    Parameters
    ----------
    family : str or Family, default "logistic"
    alpha : float, default 0.0
        Ridge penalty: minimises ``mean loss + alpha/2 ||theta||^2`` (all coefficients penalised,
        an intercept column too). 0 gives the MLE; set a small value if the MLE does not exist
        (separated logistic data).
    tol : float, default 1e-10
        Convergence: the last Newton step satisfies ``max|step| <= tol (1 + max|theta|)``.
    max_iter : int, default 100
        Maximum Newton iterations; a ``ConvergenceWarning`` is raised if they are used up.
    inference : "auto", None, "model", "sandwich" or Inference, default "auto"
        Exact standard errors on the pooled rows ("auto": model-based for logistic, Poisson and
        multinomial, sandwich for Gaussian and Huber; statsmodels' ``GLM`` nonrobust and
        ``cov_type="HC0"``, ``MNLogit``). With ``alpha > 0`` the Hessian of the penalised
        objective, ``Hp = H + alpha I``, replaces H: ``Hp^-1 S Hp^-1 / N`` with S the score
        covariance or, model-based, H itself.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,), or (n_features, K - 1) for the multinomial family
    history_ : ndarray of shape (n_iter + 1, n_features) (or (n_iter + 1, n_features, K - 1)), n_iter = ``n_iter_``
        Newton iterates from theta^(0) = 0 (Huber: the least-squares fit).
    n_iter_ : int
        Newton iterations taken.
    converged_ : bool
    privacy_, communication_ : see above.

    References
    ----------
    Core paper, Section 5.1 (NP-Pooled).
    """

    method = "PooledMLE"
    _privacy_line = "none: NP-Pooled (raw data pooled at the server)"
    _inference_what = "pooled MLE"

    def __init__(self, *, family="logistic", alpha: float = 0.0, tol: float = 1e-10, max_iter: int = 100,
                 inference="auto") -> None:
        self.family = family
        self.alpha = alpha
        self.tol = tol
        self.max_iter = max_iter
        self.inference = inference

    def _covariance(self, oracle, data, theta, cov_type):
        """Pooled: ``Hp^-1 S Hp^-1 / N`` with the pooled means ``sum_i (n_i / N) H_i`` and ``S``."""
        notes: list[str] = []
        w = data.sizes / data.n_samples
        H, S = (np.tensordot(w, a, axes=1) for a in self._matrices(oracle, theta, cov_type))
        scale = self._scale(oracle, theta, data.n_samples - theta.size) if cov_type == "model" else None
        return self._sandwich(H, S if scale is None else scale * S, 1.0 / data.n_samples, notes), notes, scale

    def _fit(self, data, family, ledger):
        m = data.n_clients
        ledger.record(Release("raw-data", 0, "local", np.full(m, math.inf), np.zeros(m)))
        ledger.add_leak("raw data pooled at the server (NP-Pooled baseline)")
        floats = data.sizes * (data.n_features + 1)
        communication = Communication(1, int(floats.max()), int(floats.sum()), (m,))
        alpha = float(self.alpha)
        theta, path, ok = newton_fit(data.X, data.y, family, alpha=alpha, tol=self.tol, max_iter=self.max_iter,
                                     where="PooledMLE", offset=data.offset)
        self.converged_ = ok
        _warn(ok, separated(family, data.X, data.y, theta, n_outputs(family), data.offset) if alpha == 0 else 0,
              "PooledMLE", self.max_iter)
        return theta, path, len(path) - 1, communication


class LocalFit(_NonPrivateBaseline):
    """NP-LocalFit: every client fits the model on its own data alone.

    Client i's fit minimises ``mean over its rows of the loss + alpha/2 ||theta||^2`` by damped
    Newton-Raphson (:func:`newton_fit`). ``predict(X, client=i)`` uses client i's model, as in the
    paper's evaluation of NP-LocalFit; ``coef_`` is the size-weighted average
    ``sum_i (n_i / N) theta_i`` of the local fits (a summary used by ``predict`` without
    ``client`` and by ``mse``; the protocol itself never computes it).

    **Ridge default.** ``alpha = 1e-4`` keeps every local fit defined when a client's data are
    separable (logistic) or rank-deficient (n_i < d, constant columns), where the local MLE does
    not exist or is not unique. For a well-posed client it moves the fit by about
    ``alpha ||H_i^{-1} theta_i||``, far below the local standard errors; ``alpha = 0`` gives the
    local MLEs (statsmodels' ``GLM`` per client).

    **Not private, no communication.** Nothing is sent (``communication_`` is 0 rounds, 0 floats),
    so the server learns nothing during the protocol; but the local models are noise-free
    functions of the clients' raw data, and the estimator publishes them (``local_coefs_``,
    ``coef_``, predictions). The ledger therefore records one noise-free release of the local
    models (stage ``"local-models"``, sensitivity inf, sigma 0: every client's ``mu`` is inf,
    not the 0 an empty ledger would suggest) and a leak; ``privacy_.is_private`` is False.

    Parameters
    ----------
    family : str or Family, default "logistic"
    alpha : float, default 1e-4
        Ridge penalty of every local fit (all coefficients, an intercept column too).
    tol : float, default 1e-10
    max_iter : int, default 100
        Per client; a ``ConvergenceWarning`` names the clients that used them up.
    inference : "auto", None, "model", "sandwich" or Inference, default "auto"
        Standard errors of ``coef_ = sum_i w_i theta_i``: the local fits are independent, so
        ``V = sum_i w_i^2 V_i`` with V_i client i's own exact covariance at its fit (as
        :class:`PooledMLE`'s, on its rows, with its ridge penalty).

    Attributes
    ----------
    local_coefs_ : ndarray of shape (n_clients, n_features) (or (n_clients, n_features, K - 1))
        Client i's fit in row i.
    coef_ : ndarray of shape (n_features,)
        ``sum_i (n_i / N) local_coefs_[i]``.
    history_ : ndarray of shape (n_iter + 1, n_features) (or (n_iter + 1, n_features, K - 1)), n_iter = ``n_iter_``
        Size-weighted average of the clients' Newton iterates (a client that has converged stays
        at its fit).
    n_iter_ : int
        Largest number of Newton iterations over clients.
    converged_ : ndarray of bool, shape (n_clients,)

    References
    ----------
    Core paper, Section 5.1 (NP-LocalFit).
    """

    method = "LocalFit"
    _privacy_line = "none: NP-LocalFit (local models fitted on raw data; nothing sent)"
    _inference_what = "average of local fits, sum_i w_i^2 V_i"

    def __init__(self, *, family="logistic", alpha: float = 1e-4, tol: float = 1e-10, max_iter: int = 100,
                 inference="auto") -> None:
        self.family = family
        self.alpha = alpha
        self.tol = tol
        self.max_iter = max_iter
        self.inference = inference

    def _covariance(self, oracle, data, theta, cov_type):
        """``coef_ = sum_i w_i theta_i`` of independent local fits: ``V = sum_i w_i^2 V_i``, with V_i
        client i's own covariance ``Hp_i^-1 S_i Hp_i^-1 / n_i`` at its fit theta_i (model or sandwich)."""
        notes: list[str] = []
        w = data.sizes / data.n_samples
        local = self.local_coefs_.reshape(data.n_clients, -1)
        H, S = self._matrices(oracle, local, cov_type)
        if cov_type == "model" and oracle.family.has_dispersion:  # client i's residual variance at its own fit
            scale = np.array([self._scale(oracle, local[i], data.sizes[i] - local.shape[1], i) for i in range(len(local))])
            S = scale[:, None, None] * S
        V = sum(w[i] ** 2 * self._sandwich(H[i], S[i], 1.0 / data.sizes[i], notes) for i in range(data.n_clients))
        return V, notes, None

    def _fit(self, data, family, ledger):
        m = data.n_clients
        ledger.record(Release("local-models", 0, "local", np.full(m, math.inf), np.zeros(m)))
        ledger.add_leak("local models fitted on raw data without noise are published (NP-LocalFit baseline; "
                        "nothing is sent to the server)")
        q = n_outputs(family)
        alpha = float(self.alpha)
        fits, paths, ok, flagged = [], [], [], []
        for i in range(data.n_clients):
            Xi, yi, *oi = data.client(i)  # (X_i, y_i) or, with an offset, (X_i, y_i, offset_i)
            oi = oi[0] if oi else None
            theta, path, conv = newton_fit(Xi, yi, family, alpha=alpha, tol=self.tol, max_iter=self.max_iter,
                                           where=f"LocalFit (client {i})", offset=oi)
            fits.append(theta)
            paths.append(path)
            ok.append(conv)
            flagged.append(alpha == 0 and separated(family, Xi, yi, theta, q, oi) > 0)
        self.converged_ = np.array(ok)
        T = max(len(p) for p in paths)
        stacked = np.stack([np.stack(p + [p[-1]] * (T - len(p))) for p in paths])  # (m, T, p)
        w = data.sizes / data.n_samples
        history = np.einsum("i,itp->tp", w, stacked)
        local = np.stack(fits)
        self.local_coefs_ = local.reshape(data.n_clients, data.n_features, q) if q > 1 else local
        bad = np.flatnonzero(~self.converged_).tolist()
        sep = np.flatnonzero(flagged).tolist()
        if bad or sep:
            warn(
                f"LocalFit: client(s) {sorted(set(bad + sep))[:20]} did not reach a local MLE "
                f"(not converged in max_iter={self.max_iter}: {bad[:20]}; fitted probabilities numerically 0 or 1, "
                f"probably separated data: {sep[:20]}). Set alpha > 0 (ridge) for these clients to have a defined fit.",
                ConvergenceWarning,
            )
        return history[-1], list(history), T - 1, Communication(0, 0, 0, ())  # history[-1] = w @ local

    def predict(self, X, client: int | None = None, *, offset=None, exposure=None) -> np.ndarray:
        """Mean response for rows of ``X`` with client ``client``'s model, or ``coef_`` if None
        (``offset`` / ``exposure`` as in :meth:`FederatedEstimator.predict`)."""
        if client is None:
            return super().predict(X, offset=offset, exposure=exposure)
        self._check_fitted()
        if isinstance(client, bool) or not isinstance(client, (int, np.integer)):
            raise TypeError(f"client must be an integer client index, got {client!r}.")
        if not -self.n_clients_ <= client < self.n_clients_:
            raise IndexError(f"client {client} out of range for {self.n_clients_} clients.")
        return self.family_.mean(self._linear_predictor(X, self.local_coefs_[client], offset, exposure))


def _warn(converged: bool, n_separated: int, where: str, max_iter: int) -> None:
    if n_separated:
        warn(
            f"{where}: {n_separated} fitted probabilities are numerically 0 or 1: the data are probably "
            "(quasi-)separated, and then the MLE does not exist (coefficients drift to infinity). "
            "Set alpha > 0 for a ridge fit.",
            ConvergenceWarning,
        )
    elif not converged:
        warn(
            f"{where}: Newton-Raphson did not converge in max_iter={max_iter} iterations; "
            "increase max_iter, standardise the covariates, or set alpha > 0.",
            ConvergenceWarning,
        )
