"""Client oracles: everything an in-process client computes on its own data, for all clients in one call.

The in-process clients (:class:`~privfedstat.federation.clients.InProcessClients`) compute every
statistic they release through an oracle, never through the kernels directly, so the verbs and
their privatization do not depend on the model. :class:`ClientOracle` is the protocol;
:class:`GLMOracle` implements it for linear-predictor losses with the numba kernels of
:mod:`privfedstat.kernels.glm_nb`, :class:`MultinomialOracle` for the multinomial family with those
of :mod:`privfedstat.kernels.multinomial_nb`, and :func:`make_oracle` picks one for a family. The
torch clients of :mod:`privfedstat.deep` answer the same verbs with their own computation.
"""

from __future__ import annotations

import functools
import math
from typing import Protocol

import numpy as np

from .._linalg import row_norm_bounds
from ..data.federated import FederatedData
from ..families.base import Family
from ..kernels import glm_nb, multinomial_nb

__all__ = ["RESPONSE", "ClientOracle", "GLMOracle", "MultinomialOracle", "check_offset_family", "make_oracle"]


#: the key of the response in a column count (the columns are keyed by their index)
RESPONSE = "y"


class ClientOracle(Protocol):
    """What the federated algorithms need from the clients' side."""

    n_clients: int
    n_features: int
    n_params: int
    sizes: np.ndarray
    family: Family

    def clipped_gradients(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Per-client mean of per-sample gradients clipped to norm ``clip``, shape (n_clients, n_params)."""

    def losses(self, theta: np.ndarray) -> np.ndarray:
        """Per-client mean loss, shape (n_clients,)."""

    def hessians(self, theta: np.ndarray, hessian_clip: float, gradient_clip: float | None = None) -> np.ndarray:
        """Per-client mean Hessian, per-sample terms clipped in Frobenius norm, (n_clients, n_params, n_params);
        with ``gradient_clip`` (B) the Jacobian of the mean score clipped at B (scalar-response families)."""

    def score_outer(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Per-client mean of ``g_j g_j^T``, ``g_j`` the per-sample gradient clipped as in :meth:`clipped_gradients`,
        shape (n_clients, n_params, n_params); each term has Frobenius norm ``<= clip^2``."""

    def design_moments(self, row_clip: float) -> np.ndarray:
        """Per-client mean of ``x_j x_j^T``, rows scaled to norm ``<= row_clip``, shape (n_clients, n_features, n_features)."""

    def sample_norms(self, which: str, theta: np.ndarray) -> np.ndarray:
        """Per-sample gradient (``"gradient"``), Hessian (``"hessian"``) or row (``"row"``, ``theta`` ignored) norms,
        shape (n_samples,)."""

    def row_gradients(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Every row's gradient clipped as in :meth:`clipped_gradients`, (n_samples, n_params) in the clients' order:
        each client's mean of its rows is its :meth:`clipped_gradients`."""

    def row_clipped_excess(self, theta: np.ndarray, clip: float, outer: float) -> np.ndarray:
        """Every row's term of :meth:`clipped_excess`, (n_samples, n_params)."""

    def row_design_roots(self, row_clip: float) -> np.ndarray:
        """Every row's root ``u_j`` of its term ``u_j u_j^T`` of :meth:`design_moments`, (n_samples, n_features)."""

    def row_hessian_roots(self, theta: np.ndarray, hessian_clip: float, gradient_clip: float | None = None
                          ) -> np.ndarray:
        """Every row's root ``v_j`` of its term ``v_j v_j^T`` of :meth:`hessians` (scalar-response families, whose
        per-sample Hessians have rank one), (n_samples, n_params)."""

    def count_at_most(self, values: np.ndarray, threshold: float) -> np.ndarray:
        """Per-client number of ``values`` (one per sample) that are <= ``threshold``."""

    def column_counts(self, column, threshold: float, center: float | None) -> np.ndarray:
        """Per-client number of rows with ``x_column <= threshold`` (``center`` None) or ``|x_column - center| <=
        threshold``; ``column`` :data:`RESPONSE` counts the response."""

    def clipped_counts(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Per-client number of rows whose gradient norm exceeds ``clip``."""

    def clipped_excess(self, theta: np.ndarray, clip: float, outer: float) -> np.ndarray:
        """Per-client mean of ``clip_{outer}(g_j) - clip_{clip}(g_j)`` (``outer > clip``)."""

    def client_quantiles(self, values: np.ndarray, q: float) -> np.ndarray:
        """Per-client ``q``-quantile of ``values`` (one per sample); non-private."""

    def split_halves(self, random_state) -> tuple[ClientOracle, ClientOracle]:
        """Oracles on a random half of every client's rows and on the other half."""


class _ConcatenatedOracle:
    """Shared parts of the oracles over :class:`FederatedData` (clients concatenated with offsets)."""

    def __init__(self, data: FederatedData, family: Family) -> None:
        self.data = data
        self.family = family
        self.n_clients = data.n_clients
        self.n_features = data.n_features
        self.n_params = data.n_features * family.n_outputs
        self.sizes = data.sizes

    @functools.cached_property
    def _n_max(self) -> int:
        """The largest client size (the overflow check of :func:`_bound`)."""
        return int(np.max(self.sizes))

    def _theta2d(self, theta: np.ndarray) -> np.ndarray:
        if not (type(theta) is np.ndarray and theta.dtype == np.float64 and theta.flags.c_contiguous):
            theta = np.ascontiguousarray(np.asarray(theta, dtype=np.float64))
        if theta.ndim < 2:
            theta = theta.reshape(1, -1)
        if theta.shape[1] != self.n_params or theta.shape[0] not in (1, self.n_clients):
            raise ValueError(
                f"theta must have shape ({self.n_params},) or ({self.n_clients}, {self.n_params}), got {theta.shape}."
            )
        return theta

    @functools.cached_property
    def _row_offsets(self) -> np.ndarray:
        """Offsets with one row per group: the site-mean kernels then give every row's own term."""
        return np.arange(self.data.X.shape[0] + 1, dtype=self.data.offsets.dtype)

    def _row_theta(self, theta: np.ndarray) -> np.ndarray:
        """``theta`` for the per-row kernels: shared, or each client's row repeated for its rows."""
        theta = self._theta2d(theta)
        return theta if theta.shape[0] == 1 else np.repeat(theta, self.sizes, axis=0)

    def row_clipped_excess(self, theta: np.ndarray, clip: float, outer: float) -> np.ndarray:
        """Every row's ``clip_{outer}(g_j) - clip_{clip}(g_j)`` (N, p): the terms of :meth:`clipped_excess`."""
        if not outer > clip:
            raise ValueError(f"clipped_excess needs outer > clip, got outer={outer!r}, clip={clip!r}.")
        return self.row_gradients(theta, outer) - self.row_gradients(theta, clip)

    def row_design_roots(self, row_clip: float) -> np.ndarray:
        """Every row scaled as :meth:`design_moments` scales it, ``u_j = min(1, L_j) x_j`` with the kernel's ``L_j``
        (:func:`~privfedstat.kernels.glm_nb.glm_client_design_moments`), (N, n_features): each client's mean of
        ``u_j u_j^T`` is its design moments."""
        bound = _bound(row_clip, "row_clip", self._n_max, square=True)
        d = self.data
        if math.isinf(bound):
            return np.array(d.X, dtype=np.float64)
        denorm = 5e-324
        limit = np.maximum(bound * glm_nb.CLIP_SAFETY / np.maximum(d.row_norms, denorm) - denorm, 0.0)
        return d.X * np.minimum(limit, 1.0)[:, None]

    def count_at_most(self, values: np.ndarray, threshold: float) -> np.ndarray:
        return np.add.reduceat((values <= threshold).astype(np.float64), self.data.offsets[:-1])

    def column_counts(self, column, threshold: float, center: float | None) -> np.ndarray:
        """Per-client number of rows with ``x_column <= threshold`` (``center`` None) or ``|x_column - center| <=
        threshold``; ``column`` :data:`RESPONSE` counts the response."""
        x = self.data.y if column == RESPONSE else self.data.X[:, column]
        if center is not None:
            x = np.abs(x - center)  # inf near the largest double: above every grid point
        return self.count_at_most(x, threshold)

    def clipped_counts(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Per-client number of rows whose gradient norm exceeds ``clip``."""
        return np.asarray(self.sizes - self.count_at_most(self.sample_norms("gradient", theta), clip), dtype=np.float64)

    def clipped_excess(self, theta: np.ndarray, clip: float, outer: float) -> np.ndarray:
        """Per-client mean of ``clip_{outer}(g_j) - clip_{clip}(g_j)``: norm at most ``outer - clip`` per row."""
        if not outer > clip:
            raise ValueError(f"clipped_excess needs outer > clip, got outer={outer!r}, clip={clip!r}.")
        return self.clipped_gradients(theta, outer) - self.clipped_gradients(theta, clip)

    def client_quantiles(self, values: np.ndarray, q: float) -> np.ndarray:
        o = self.data.offsets
        return np.array([np.quantile(values[o[i]: o[i + 1]], q) for i in range(self.n_clients)])

    def split_halves(self, random_state):
        first, second = self.data.split_halves(random_state)
        return type(self)(first, self.family), type(self)(second, self.family)

    def design_moments(self, row_clip: float) -> np.ndarray:
        """Per-client mean of ``u_j u_j^T``, ``u_j = x_j min(1, row_clip / ||x_j||)`` (the rows scaled to norm ``row_clip``).

        The design's second moments ``X_i^T X_i / n_i`` of each client with every row clipped, for
        the model-based covariance of a Gaussian-type family and for private scaling of the
        features (d = ``n_features`` for every family, also multinomial). Each term has Frobenius
        norm ``||u_j||^2 <= row_clip^2 = C`` for every finite row, so ``sym_to_vec`` of a client's
        mean moves by at most ``sqrt(2) C / n_i`` when one row is replaced
        (:func:`privfedstat.privacy.calibration.hessian_sensitivity` with ``C``: the terms are PSD).

        Parameters
        ----------
        row_clip : float
            Bound on the row norms; ``inf`` for no clipping (non-private use only). Its square must lie
            in ``[MIN_BOUND, 1e307 / max(n_i)]``.

        Returns
        -------
        ndarray of shape (n_clients, n_features, n_features)
            Exactly symmetric.
        """
        out = np.empty((self.n_clients, self.n_features, self.n_features))
        d = self.data
        glm_nb.glm_client_design_moments(d.X, d.row_norms, d.offsets, _bound(row_clip, "row_clip", self._n_max, square=True),
                                         out)
        return out

    def score_outer(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Per-client mean of ``g_j g_j^T`` over the client's rows, ``g_j`` the per-sample gradient clipped to L2 norm ``clip``.

        ``g_j`` is exactly the term of :meth:`clipped_gradients` (same clipping rule and treatment of
        non-finite residuals), so the matrix is the clipped score covariance ``Sigma_i`` of the
        sandwich ``H^-1 Sigma H^-1`` (uncentred: at the estimate the mean score is about 0). Each
        term has Frobenius norm ``||g_j||^2 <= clip^2 = C`` and is PSD, so ``sym_to_vec`` of a
        client's mean moves by at most ``sqrt(2) C / n_i`` when one row is replaced
        (:func:`privfedstat.privacy.calibration.hessian_sensitivity` with ``C``).

        Parameters
        ----------
        theta : ndarray of shape (n_params,) or (n_clients, n_params)
            The estimate (fitting scale, flat), shared or one per client.
        clip : float
            B, the bound on per-sample gradient norms; ``inf`` for no clipping (non-private use only).
            ``clip^2`` must lie in ``[MIN_BOUND, 1e307 / max(n_i)]``.

        Returns
        -------
        ndarray of shape (n_clients, n_params, n_params)
            Exactly symmetric; parameters in the flat order of ``theta``.
        """
        out = np.empty((self.n_clients, self.n_params, self.n_params))
        self._score_outer_kernel(self._theta2d(theta), _bound(clip, "clip", self._n_max, square=True), out)
        return out

    def _score_outer_kernel(self, theta: np.ndarray, clip: float, out: np.ndarray) -> None:
        """Fill ``out`` with the clipped score outer products (``theta`` of shape (1 or n_clients, n_params))."""
        raise NotImplementedError


class GLMOracle(_ConcatenatedOracle):
    """Client oracle for a loss ``ell(y, x^T theta)`` on :class:`FederatedData`.

    Parameters
    ----------
    data : FederatedData
        With an ``offset``, the linear predictor is ``x^T theta + o`` in every method.
    family : Family
        A scalar-response family (logistic, poisson, gaussian, huber).
    """

    def clipped_gradients(self, theta: np.ndarray, clip: float) -> np.ndarray:
        out = np.empty((self.n_clients, self.n_features))
        d = self.data
        if self.n_features <= glm_nb.COLUMN_KERNEL_MAX_D:
            kernel, X = glm_nb.glm_clipped_mean_grad_cols, d.columns
        else:
            kernel, X = glm_nb.glm_clipped_mean_grad, d.X
        kernel(X, d.y, d.eta_offset, d.row_norms, d.offsets, self._theta2d(theta), _bound(clip, "clip", self._n_max),
               self.family.code, self.family.param, out)
        return out

    def row_gradients(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Every row's gradient clipped to ``clip``, (N, d) in the clients' order: the kernel of
        :meth:`clipped_gradients` with one row per group, so that each client's mean of them is its statistic."""
        d = self.data
        out = np.empty((d.X.shape[0], self.n_features))
        glm_nb.glm_clipped_mean_grad(d.X, d.y, d.eta_offset, d.row_norms, self._row_offsets, self._row_theta(theta),
                                     _bound(clip, "clip", self._n_max), self.family.code, self.family.param, out)
        return out

    def losses(self, theta: np.ndarray) -> np.ndarray:
        out = np.empty(self.n_clients)
        d = self.data
        glm_nb.glm_client_loss(d.X, d.y, d.eta_offset, d.offsets, self._theta2d(theta), self.family.code, self.family.param, out)
        return out

    def hessians(self, theta: np.ndarray, hessian_clip: float, gradient_clip: float | None = None) -> np.ndarray:
        """Per-client mean of the per-sample Hessians ``ell''(y_j, z_j) x_j x_j^T``, each clipped to Frobenius norm C_H.

        With ``gradient_clip`` (B), the Jacobian of the estimating equation a fit with gradient
        clipping B solves, ``sum_i w_i mean_j clip_B(g_j(theta)) = 0``: rows whose gradient
        :meth:`clipped_gradients` clips (``|ell'| ||x_j|| > B CLIP_SAFETY``, the kernel's test) or
        zeroes (NaN residual) contribute 0 -- their clipped gradient ``B sign(ell') x_j / ||x_j||``
        is locally constant in theta (the boundary, where ``|ell'| ||x_j||`` equals the bound, has
        measure zero; clipping is continuous, so it adds no mass either) -- and every other row
        its clipped Hessian. A zero term is PSD with norm 0, so each term still has Frobenius
        norm ``<= C_H`` and ``sym_to_vec`` of a client's mean moves by at most
        ``sqrt(2) C_H / n_i`` when one row is replaced
        (:func:`privfedstat.privacy.calibration.hessian_sensitivity`), whether the row is kept or not.

        Parameters
        ----------
        theta : ndarray of shape (n_params,) or (n_clients, n_params)
        hessian_clip : float
            C_H; ``inf`` for no clipping (non-private use only).
        gradient_clip : float or None, default None
            B of the fit's gradients (``inf``: no row is clipped, the same as None). None: every
            row (what the FedIRLS / FedNewton protocols release).

        Returns
        -------
        ndarray of shape (n_clients, n_features, n_features)
            Exactly symmetric.
        """
        out = np.empty((self.n_clients, self.n_features, self.n_features))
        d = self.data
        args = (d.X, d.y, d.eta_offset, d.row_norms, d.offsets, self._theta2d(theta),
                _bound(hessian_clip, "hessian_clip", self._n_max), self.family.code, self.family.param, out)
        # one call signature (inf: every row), so numba compiles the kernel once rather than once per form
        glm_nb.glm_client_hessian(*args, math.inf if gradient_clip is None else _bound(gradient_clip, "gradient_clip",
                                                                                        self._n_max))
        return out

    def row_hessian_roots(self, theta: np.ndarray, hessian_clip: float, gradient_clip: float | None = None
                          ) -> np.ndarray:
        """Every row's root ``v_j = g_j x_j`` of its term of :meth:`hessians` (the kernel of
        :meth:`hessians`' accumulation, one row at a time), (N, n_features): each client's mean of ``v_j v_j^T`` is its
        :meth:`hessians`."""
        d = self.data
        out = np.empty((d.X.shape[0], self.n_features))
        glm_nb.glm_row_hessian_roots(d.X, d.y, d.eta_offset, d.row_norms, self._row_theta(theta),
                                     _bound(hessian_clip, "hessian_clip", self._n_max), self.family.code,
                                     self.family.param, out, math.inf if gradient_clip is None
                                     else _bound(gradient_clip, "gradient_clip", self._n_max))
        return out

    def _score_outer_kernel(self, theta: np.ndarray, clip: float, out: np.ndarray) -> None:
        d = self.data
        glm_nb.glm_client_score_outer(d.X, d.y, d.eta_offset, d.row_norms, d.offsets, theta, clip, self.family.code,
                                      self.family.param, out)

    def _linear_predictor(self, theta: np.ndarray) -> np.ndarray:
        """``x_j^T theta + o_j`` per row (overflow to +-inf or NaN allowed: the callers bound every such row)."""
        d = self.data
        with np.errstate(all="ignore"):  # huge finite rows: x^T theta may overflow
            z = d.X @ np.asarray(theta, dtype=np.float64)
            return z if d.offset is None else z + d.offset

    def sample_norms(self, which: str, theta: np.ndarray) -> np.ndarray:
        d = self.data
        if _check_which(which) == "row":
            return d.row_norms
        z = self._linear_predictor(theta)
        with np.errstate(all="ignore"):  # the residual may overflow
            if which == "gradient":
                return _times_norm(np.abs(self.family.deriv(d.y, z)), d.row_norms)
            return _times_norm(_times_norm(self.family.deriv2(d.y, z), d.row_norms), d.row_norms)

    def pearson_sums(self, theta: np.ndarray, bound: float) -> np.ndarray:
        """Per-client sum of the squared Pearson residuals ``min(ell'(y_j, z_j)^2 / ell''(y_j, z_j), bound kappa)``,
        shape (n_clients,).

        For a canonical GLM ``ell' = mean - y`` and ``ell''`` is the variance function, so the ratio is
        ``(y - mu)^2 / V(mu)``, whose mean is the dispersion (1 under the model). Each term lies in
        ``[0, bound kappa]`` (a zero curvature or a NaN gives 0, an infinite ratio the cap; kappa the kernels'
        ``CLIP_SAFETY``, whose margin covers the rounding of a short sum as theirs does), so one row replaced
        moves a client's sum by at most ``bound``.
        """
        return np.add.reduceat(self.row_pearson_terms(theta, bound), self.data.offsets[:-1])

    def row_pearson_terms(self, theta: np.ndarray, bound: float) -> np.ndarray:
        """Every row's term of :meth:`pearson_sums`, in ``[0, bound kappa]``, shape (N,)."""
        d = self.data
        z = self._linear_predictor(theta)
        with np.errstate(all="ignore"):  # the residual and its square may overflow
            ratio = self.family.deriv(d.y, z) ** 2 / self.family.deriv2(d.y, z)
        cap = _bound(bound, "bound", self._n_max) * glm_nb.CLIP_SAFETY
        return np.where(np.isnan(ratio), 0.0, np.minimum(ratio, cap))


class MultinomialOracle(_ConcatenatedOracle):
    """Client oracle for multinomial logistic regression (parameter Theta (d, K-1), flattened).

    Data with an ``offset`` are refused: one scalar offset per row does not say which of the K - 1
    linear predictors it enters (statsmodels' ``MNLogit`` has no offset either).
    """

    def __init__(self, data: FederatedData, family: Family) -> None:
        check_offset_family(data, family)
        super().__init__(data, family)

    def clipped_gradients(self, theta: np.ndarray, clip: float) -> np.ndarray:
        out = np.empty((self.n_clients, self.n_params))
        d = self.data
        multinomial_nb.multinomial_clipped_mean_grad(d.X, d.y, d.row_norms, d.offsets, self._theta2d(theta),
                                                     _bound(clip, "clip", self._n_max), self.family.n_outputs, out)
        return out

    def row_gradients(self, theta: np.ndarray, clip: float) -> np.ndarray:
        """Every row's gradient clipped to ``clip``, (N, p): the kernel of :meth:`clipped_gradients`, one row per group."""
        d = self.data
        out = np.empty((d.X.shape[0], self.n_params))
        multinomial_nb.multinomial_clipped_mean_grad(d.X, d.y, d.row_norms, self._row_offsets, self._row_theta(theta),
                                                     _bound(clip, "clip", self._n_max), self.family.n_outputs, out)
        return out

    def losses(self, theta: np.ndarray) -> np.ndarray:
        out = np.empty(self.n_clients)
        d = self.data
        multinomial_nb.multinomial_client_loss(d.X, d.y, d.offsets, self._theta2d(theta), self.family.n_outputs, out)
        return out

    def hessians(self, theta: np.ndarray, hessian_clip: float, gradient_clip: float | None = None) -> np.ndarray:
        """Per-client mean of the per-sample Hessians ``(x_j x_j^T) kron A(z_j)``, each clipped to Frobenius norm C_H.

        ``gradient_clip`` is accepted for the oracle protocol and does not change the result: the
        all-rows Hessian is returned (inferred approximation of the clipped score's Jacobian).
        Unlike a scalar GLM's, a clipped multinomial gradient ``B g_j / ||g_j||`` still moves with
        theta (it rotates with the residual vector), with Jacobian
        ``(B / ||g_j||) (I - u_j u_j^T) dg_j/dtheta``, ``u_j = g_j / ||g_j||``, which is not
        symmetric and so cannot be released as a ``sym_to_vec`` Hessian; near the clip quantiles
        of the defaults few rows are clipped and their terms are damped, not removed.
        """
        out = np.empty((self.n_clients, self.n_params, self.n_params))
        d = self.data
        hclip = _bound(hessian_clip, "hessian_clip", self._n_max)
        multinomial_nb.multinomial_client_hessian(d.X, d.y, d.row_norms, d.offsets, self._theta2d(theta), hclip,
                                                  self.family.n_outputs, out)
        return out

    def _score_outer_kernel(self, theta: np.ndarray, clip: float, out: np.ndarray) -> None:
        d = self.data
        multinomial_nb.multinomial_client_score_outer(d.X, d.y, d.row_norms, d.offsets, theta, clip, self.family.n_outputs,
                                                      out)

    def sample_norms(self, which: str, theta: np.ndarray) -> np.ndarray:
        d = self.data
        if _check_which(which) == "row":
            return d.row_norms
        with np.errstate(all="ignore"):  # as the kernels: predictors clamped to +-Z_MAX (huge rows overflow)
            Z = d.X @ np.asarray(theta, dtype=np.float64).reshape(self.n_features, self.family.n_outputs)
            Z = np.clip(Z, -multinomial_nb.Z_MAX, multinomial_nb.Z_MAX)
        if which == "gradient":  # scaled norms: residual entries of order 1e-200 would square to 0
            return _times_norm(row_norm_bounds(self.family.residual(d.y, Z)), d.row_norms)
        curvature_norms = row_norm_bounds(self.family.curvature(Z).reshape(d.n_samples, -1))
        return _times_norm(_times_norm(curvature_norms, d.row_norms), d.row_norms)


def check_offset_family(data: FederatedData, family: Family) -> None:
    """Refuse an offset with the multinomial family (a row's scalar offset would have to be given per class)."""
    if data.offset is not None and family.response_levels:
        raise ValueError("the multinomial family takes no offset (a row's offset would have to be given per class); "
                         "fit without offset= / exposure=, or with a scalar-response family.")


def _check_which(which: str) -> str:
    """``which`` of :meth:`ClientOracle.sample_norms`, checked before any work."""
    if which not in ("gradient", "hessian", "row"):
        raise ValueError(f"which must be 'gradient', 'hessian' or 'row', got {which!r}.")
    return which


def _times_norm(factor: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """``factor * norms`` for per-sample norms (compared with public thresholds by the private clip search):
    a product beyond the largest double is ``inf`` (above every threshold, no warning), and a zero
    factor gives 0 even for an infinite norm (the per-sample term is zero), as does a NaN factor
    (a NaN linear predictor: the kernels give such a row 0)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where((factor == 0) | np.isnan(factor), 0.0, factor * norms)


def _bound(value: float, name: str, n_max: int, square: bool = False) -> float:
    """A clipping bound the kernels' guarantee covers: ``inf``, or ``B`` whose per-term bound ``C`` (``B``, or
    ``B^2`` with ``square`` for outer products ``v v^T`` with ``||v|| <= B``) is at least ``MIN_BOUND``
    and so small that a client's sum of ``n_i`` clipped terms cannot overflow (``n_i C <= 1e307``; ``n_max``: the
    largest n_i)."""
    value = float(value)
    term = value * value if square else value  # a float product: inf past the largest double (no OverflowError)
    if not (value > 0 and term >= glm_nb.MIN_BOUND):
        lowest = math.sqrt(glm_nb.MIN_BOUND) if square else glm_nb.MIN_BOUND
        raise ValueError(f"{name} must be at least {lowest:g} (or inf for no clipping), got {value!r}.")
    if value != np.inf and term * n_max > 1e307:
        largest = math.sqrt(1e307 / n_max) if square else 1e307 / n_max
        what = f"outer products of norm up to {name}^2" if square else "clipped terms"
        raise ValueError(f"{name} = {value:g} is too large: a client's sum of {n_max} {what} could overflow; "
                         f"use at most {largest:.3g} (or inf for no clipping).")
    return value


def make_oracle(data: FederatedData, family: Family) -> ClientOracle:
    """The oracle for ``family``: multinomial (any K >= 2: with K = 2 its one linear predictor is still the
    multinomial's, not a scalar family's) or scalar-response linear predictor."""
    return MultinomialOracle(data, family) if family.response_levels else GLMOracle(data, family)
