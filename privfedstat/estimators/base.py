"""Shared machinery of the federated estimators: parameters, fit set-up, clipping, the inference stage.

A subclass implements ``_run(ctx)``, the protocol of its algorithm, in terms of the oracle (client
computations), the channel (every client message) and the server steps in :mod:`._steps`. What a
fitted estimator reports (predictions, scores, standard errors, intervals, tests, the summary) is
the mixin :class:`~privfedstat.estimators._results.FittedResults`.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from dataclasses import dataclass, replace

import numpy as np

from .._rng import as_seed_sequence, check_secure_mode, spawn_generators
from .._validation import check_mu, check_positive_float
from ..data.federated import FederatedData
from ..exceptions import PrivacyLeakWarning, PrivacyNoiseWarning
from ..families import Family, get_family
from ..federation.channel import FAILURE_POLICIES, Channel
from ..federation.clients import InProcessClients
from ..federation.oracle import check_offset_family
from ..federation.server import Participation, aggregate, effective_weights, resolve_participation
from ..privacy.budget import PrivacyBudget, reserve
from ..inference.config import Inference, resolve_inference
from ..inference.covariance import original_scale_map
from ..privacy.clipping import PILOT_AUTOCLIP, AutoClip, private_grid_quantile
from ..privacy.ledger import PrivacyLedger
from ..privacy.mechanisms import ClientNoise, SecureClientNoise
from ._sklearn import as_federated_data
from ._steps import resolve_step_size, server_gradient_descent
from .scaling import FeatureBounds, PrivateStandardize, Scaler
from .diagnostics import diagnose, optimisation_gap, warn_clipping, warn_optimisation_gap
from ._results import FittedResults

__all__ = ["FederatedEstimator", "FitContext", "clone"]


@dataclass
class FitContext:
    """Everything a protocol needs during one fit.

    Attributes
    ----------
    clients : InProcessClients
        The clients' side of the seam: the verbs they answer (the server holds nothing else of theirs).
    channel : Channel
        The only path from clients to server (records the releases, applies the failure policy).
    clip : float
        Per-sample gradient clipping bound (B).
    hessian_clip : float
        Per-sample Hessian norm bound (only set by estimators that need one, else ``nan``).
    mu : float
        Per-client GDP budget left for estimation after choosing the bounds.
    seed : numpy.random.SeedSequence
        Seed for the protocol's own randomness (e.g. sample splitting).
    noise_sd : float or ndarray of shape (n_params,)
        Set by the protocol: a lower bound on the standard deviation, per coordinate of the
        returned theta (fitting scale), of its privacy noise, known from the calibrated sigmas
        (typically the noise of the last release, which nothing after it removes); 0 with mu = inf.
    update_noise_sd : float or None
        Set by the protocol: the noise standard deviation per coordinate that the last server
        update (``path[-1] - path[-2]``) carries, used to judge convergence; None if unknown
        (then ``converged_`` is only judged with mu = inf).
    hessian : ndarray of shape (n_params, n_params) or None
        Set by protocols that release a Hessian: the server's aggregated released Hessian of the
        last round (before any eigenvalue floor), checked for ill-conditioning.
    shortened : tuple of (float, float) or None
        Set by a protocol whose last server update was cut short by a trust region (FedIRLS's
        ``max_step``): the norm of the update it computed and the radius it was cut to (fitting
        scale). Far above its noise, the path was still travelling when the rounds ran out.
    noise_model : object or None
        Set by the protocol: its privacy-noise recursion (noise scales, weights, step sizes,
        stages), from which :func:`privfedstat.theory.protocol_noise_covariance` gives the
        covariance of the privacy noise in the returned theta, linearised at a Hessian.
    weights : ndarray of shape (n_clients,) or None
        The server's aggregation weights w_i of the estimate, recorded by
        :meth:`FederatedEstimator._resolve_weights`; None: size weights (inference uses them).
    participation : Participation or None
        Which clients each round asks (None: all); drawn from ``participation_rng``, the server's own stream.
    """

    clients: InProcessClients
    channel: Channel
    clip: float
    hessian_clip: float
    mu: float
    seed: np.random.SeedSequence
    noise_sd: float | np.ndarray = 0.0
    update_noise_sd: float | None = None
    hessian: np.ndarray | None = None
    shortened: tuple[float, float] | None = None
    noise_model: object | None = None
    weights: np.ndarray | None = None
    participation: Participation | None = None
    participation_rng: np.random.Generator | None = None
    topup_rng: np.random.Generator | None = None
    unit: str = "record"

    @property
    def sizes(self) -> np.ndarray:
        return self.clients.sizes

    def participants(self) -> np.ndarray | None:
        """The clients asked in the next round: a sample of the live ones (server's stream) when participation
        is partial, else None (every live client; the clients leave out failed ones themselves)."""
        if self.participation is None:
            return None
        return self.participation.sample(self.channel.live, self.participation_rng, allow_empty=self.unit == "client")

    @property
    def sampling_rate(self) -> float:
        """The Poisson participation rate q of the rounds (1 without Poisson participation)."""
        p = self.participation
        return 1.0 if p is None or p.rate is None else float(p.rate)

    def ask(self, verb: str, *, weights: np.ndarray | None = None, clients=None, **request) -> tuple[np.ndarray, np.ndarray,
                                                                                       np.ndarray]:
        """Send ``request`` to the clients' ``verb`` and take the reply through the channel.

        ``weights``: the weights with which the server will average the replies (None: it sums
        them, as for counts); ``clients``: another handle than ``self.clients`` (FedNewton's halves). Returns the values (rows of clients that did not answer are NaN),
        the weights as recorded in the ledger (renormalised over the clients that answered; for a
        sum, 1 for each of them) and the mask of those clients.
        """
        reply = getattr(self.clients if clients is None else clients, verb)(**request)
        q = self.sampling_rate if request.get("active") is not None else 1.0  # a Poisson sample was asked
        if q < 1.0 and any(r.unit == "client" for r in reply.releases):
            return self._topped_up(reply, weights, q, request)
        if weights is None:
            w = reply.answered.astype(np.float64)
        else:
            w = effective_weights(weights, reply.answered)
        return self.channel.receive(reply, weights=w, sampling_rate=q), w, reply.answered

    def _topped_up(self, reply, weights, q: float, request: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A client-level reply of a Poisson-sampled round, with the server's noise in the rows of the clients that
        did not send: every row then carries noise of its client's calibrated sd ``sensitivity_i / mu``.

        This makes the noise of the published aggregate independent of who took part, which the
        amplified accounting (:meth:`~privfedstat.privacy.ledger.PrivacyLedger.amplified_epsilon`: the
        Poisson-subsampled Gaussian, fixed noise) needs; without it the aggregate's noise variance would
        grow with the number of participants and reveal it. The weights stay fixed (no
        renormalisation over who took part): the caller divides by q for an unbiased aggregate
        (fixed-denominator estimator). Returns the values, the weights and an all-true mask.
        """
        m = reply.values.shape[0]
        w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
        mu = float(request["mu"])
        z = 2.0 / mu  # every client's sigma_i = Delta_i / mu: add/remove multiplier 2 sigma_i / Delta_i
        values = self.channel.receive(reply, weights=w, sampling_rate=q, noise_multiplier=z).copy()
        silent = ~reply.answered
        if silent.any() and math.isfinite(mu):
            sigma = np.broadcast_to(np.asarray(request["sensitivity"], dtype=np.float64), (m,)) / mu
            values[silent] = sigma[silent].reshape((-1,) + (1,) * (values.ndim - 1)) * \
                self.topup_rng.standard_normal((int(silent.sum()),) + values.shape[1:])
        else:
            values[silent] = 0.0
        return values, w, np.ones(m, dtype=bool)

    def mean(self, verb: str, *, weights: np.ndarray, **request) -> np.ndarray:
        """The weighted aggregate (:func:`~privfedstat.federation.server.aggregate`) of the clients' replies to ``verb``."""
        values, _, answered = self.ask(verb, weights=weights, **request)
        return aggregate(weights, values, answered)

    @property
    def size_weights(self) -> np.ndarray:
        """w_i = n_i / N."""
        return self.sizes / self.sizes.sum()


class FederatedEstimator(FittedResults):
    """Base class (scikit-learn contract): ``__init__`` only stores keyword-only parameters.

    Subclasses set ``method`` (display name) and implement ``_run(ctx) -> (theta, path, n_iter)``.

    Every private estimator takes ``secure_mode`` (documented here once):

    secure_mode : bool, default False
        Draw every client's noise from the operating system's CSPRNG as a sum of four normal
        draws (:class:`~privfedstat.privacy.mechanisms.SecureClientNoise`), the mitigation of
        floating-point attacks on the Gaussian mechanism that Opacus' ``secure_mode`` uses
        (Holohan & Braghin 2021; Jin et al. 2022). ``random_state`` must then be None (a seed is
        refused), the fit is not reproducible, noise generation is about 30 times slower, and
        ``privacy_.secure_mode`` is True. The default draws from seeded numpy streams:
        reproducible and fast, private against an observer of the released values, but not
        hardened against floating-point or PRNG-state attacks. Timing side channels are not
        covered in either mode (README, "Privacy model").

    Every private estimator takes ``on_client_failure`` (documented here once):

    on_client_failure : {"raise", "skip"}, default "raise"
        A client that fails while answering a request (its process dies, in the in-process
        backend :class:`~privfedstat.federation.clients.FailingData` injects this) makes the fit
        raise :class:`~privfedstat.ClientFailureError` (``"raise"``), or is left out from then on
        (``"skip"``): every later aggregate renormalises the weights over the clients that
        answered, count queries sum the live clients and target their public N, and the ledger
        holds exactly the releases that reached the server (the failed client's unsent message
        is not recorded). Nothing waits: a failed client simply has no reply.

    Every estimator sets these attributes, with the same meaning everywhere (documented here once):

    coef_ : ndarray of shape (n_features,), or (n_features, K - 1) for the multinomial family
        The server's final model, on the original scale of the columns.
    history_ : ndarray of shape (n_updates + 1, *coef_.shape)
        The server's model theta^(0), theta^(1), ... after each protocol round that changed it
        (``history_[0]`` the initial model, ``history_[-1]`` equal to ``coef_``): FedSGD one entry
        per gradient step, FedAvg / SCAFFOLD / DP-FedAvg per round, FedHybrid the averaged local
        model then each server step, FedNewton the FedAvg rounds then the Newton step, FedIRLS
        per Newton round. Clip searches, scaling and inference releases do not move the model
        and add no entry.
    n_iter_ : int
        Gradient evaluations per client in the protocol (the paper's compute measure: K for
        FedSGD, R K for FedAvg / SCAFFOLD / DP-FedAvg, K1 + K2 for FedHybrid, R K + 1 for
        FedNewton, the number of Newton rounds for FedIRLS); communication is in
        ``communication_``.
    privacy_ : PrivacyLedger
        Every release, built by the server from the clients' release records.
    communication_ : Communication
        Upload rounds and floats, clip search and inference releases included.

    Every estimator sets ``converged_`` (documented here once), judged from released values
    only (post-processing, no privacy cost):

    converged_ : bool or None
        Whether the last server update was negligible: ``max|theta^(K) - theta^(K-1)| <= tol
        (1 + max|theta^(K)|) + 4 s``, with ``s`` the public noise standard deviation that update
        carries (:func:`~privfedstat.estimators._steps.settled`). FedSGD / FedHybrid: the last
        gradient step; FedAvg / SCAFFOLD: the last round's change of the averaged model;
        FedNewton: the Newton correction (one step from FedAvg's output: False means the
        FedAvg stage ended far from the optimum). With mu = inf and ``"auto"`` iteration counts
        the loop stops as soon as this holds. None where an estimator gives no noise level at
        finite mu. With finite mu and inference on, also False when the released inference
        Hessian shows that the noise-free path stopped more than 1 standard error short of the
        optimum (:func:`~privfedstat.estimators.diagnostics.optimisation_gap`: the fixed-K
        gradient methods and SCAFFOLD). When False a
        :class:`~privfedstat.ConvergenceWarning` says what to change.

    Every estimator takes ``inference`` (documented here once) and reports its uncertainty:

    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals, p-values and Wald tests that count both the sampling variance
        and the privacy noise of the protocol (:class:`~privfedstat.Inference`,
        :mod:`privfedstat.inference.core`). With finite mu they spend ``Inference().budget``
        (25%) of each client's mu, reserved before the protocol runs (the estimation keeps
        ``sqrt(mu_left^2 - (0.25 mu)^2)``, so the ledger total is still exactly mu); None
        spends nothing on them and leaves these results undefined.

    inference_ : InferenceResult or None
        Covariance (total, sampling and privacy parts), how it was computed and what it spent.
    bse_, zvalues_, pvalues_ : ndarray of the shape of ``coef_``
        Standard errors, ``coef_ / bse_`` and two-sided normal p-values; with
        :meth:`cov_params`, :meth:`conf_int` and :meth:`wald_test` (names and order of
        ``coef_.ravel(order="F")``, as statsmodels).

    Also from released values only: a :class:`~privfedstat.DivergenceError` when iterates
    become non-finite or explode; a :class:`~privfedstat.PrivacyNoiseWarning` when the privacy noise of a coefficient
    (a lower bound from the calibrated sigmas) exceeds a public sampling-SE proxy
    ``1 / sqrt(ell''(0) N)`` (standardised columns; the coefficients below it in size are
    named as indistinguishable from noise), or when a site is so small that its
    messages are noise-dominated (the minimum size is given); and an
    :class:`~privfedstat.IllConditionedWarning` when a released Hessian is ill-conditioned.
    """

    method: str = ""
    #: what one datum is: a row of a client ("record", the core paper) or a client's whole dataset ("client")
    privacy_unit: str = "record"
    #: whether the estimator reports standard errors (``inference``); client-level estimators do not
    supports_inference: bool = True
    #: per-sample norms whose clipping bound ``fit`` must choose
    _norms: tuple[str, ...] = ("gradient",)

    # ------------------------------------------------------------------ sklearn-style parameters
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY]

    def get_params(self, deep: bool = True) -> dict:
        """Parameters of this estimator (``deep`` is accepted for scikit-learn compatibility)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params) -> FederatedEstimator:
        """Set parameters; unknown names raise ``ValueError``."""
        valid = self._param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"invalid parameter {key!r} for {type(self).__name__}; valid: {valid}.")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__)
        changed = [
            f"{k}={v!r}" for k, v in self.get_params().items()
            if not _same(v, sig.parameters[k].default)
        ]
        return f"{type(self).__name__}({', '.join(changed)})"

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None, *, clients=None, offset=None, budget: PrivacyBudget | None = None) -> FederatedEstimator:
        """Run the federated protocol on the clients' data and store the results.

        Parameters
        ----------
        X : FederatedData or array-like of shape (n_samples, n_features)
            The clients' data, or the pooled design matrix (then give ``y`` and ``clients``).
            Columns are used as given (add a column of ones for an intercept).
        y : array-like of shape (n_samples,), optional
            Responses, with an array ``X``.
        clients : array-like of shape (n_samples,), optional
            Client label of each row, with an array ``X`` (scikit-learn style); clients are
            ordered by sorted label (the order of ``privacy_.client_mu``). In scikit-learn's
            cross-validation keep clients whole with a group-aware splitter
            (``GroupKFold``, ``groups=clients``) and pass ``params={"clients": clients}``; see
            :mod:`privfedstat.estimators._sklearn` for what such tools spend.
        offset : array-like of shape (n_samples,), optional
            Offset ``o_j`` of each row's linear predictor, ``x_j^T theta + o_j``, with an array
            ``X`` (e.g. ``np.log(exposure)`` for Poisson rates); a FederatedData carries its own.
            It changes residuals only, so clipping and sensitivities are unchanged. ``predict``
            and ``score`` then need the new rows' offset.
        budget : PrivacyBudget, optional
            A budget across fits: this fit's ``mu`` is charged to it before any noise is drawn,
            and the fit is refused (:class:`~privfedstat.BudgetExceededError`) if it would exceed
            the total; see :class:`~privfedstat.PrivacyBudget`.

        Returns
        -------
        self
        """
        from ..inference import core  # imports the estimators' matrix helpers, which import this module

        data, family = self._check_data(X, y, clients, offset)
        mu = self._declared_mu(data.n_clients)
        self._validate_params(mu)
        config = resolve_inference(self.inference)
        cov_type = None if config is None else core.resolve_cov_type(config, family)
        if cov_type is not None:
            core.check_feasible(cov_type, data.n_clients, data.n_features * family.n_outputs)
        secure = check_secure_mode(self.secure_mode, self.random_state)
        ledger = PrivacyLedger(data.n_clients, secure_mode=secure)
        charge = reserve(budget, ledger, mu=mu, method=self.method)  # refuses before any randomness is used

        seed = as_seed_sequence(self.random_state)
        noise_seed, protocol_seed, inference_seed = seed.spawn(3)
        clients = self._make_clients(data, family, noise_seed, secure)
        n_features, n_clients, n_samples, has_offset = data.n_features, data.n_clients, data.n_samples, clients.has_offset
        del data  # from here on the server talks to the clients only through their verbs
        ctx = FitContext(clients, Channel(clients.sizes, ledger, getattr(self, "on_client_failure", "raise")), math.nan,
                         math.nan, mu, protocol_seed, unit=self.privacy_unit)
        participation = resolve_participation(getattr(self, "participation", None), clients.n_clients)
        if participation is not None and config is not None:
            raise ValueError("inference needs every client in every round (its noise model assumes full participation); "
                             "fit with inference=None when participation is partial.")
        if participation is not None:
            ctx.participation = participation
            sampling_seed, topup_seed = protocol_seed.spawn(2)  # the server's own streams
            ctx.participation_rng, ctx.topup_rng = np.random.default_rng(sampling_seed), np.random.default_rng(topup_seed)
        scaler, mu_left = self._fit_scaler(ctx, mu)
        if scaler is not None:
            clients.rescale(scaler)  # each client rescales its own columns with the public centres and scales
        bounds, mu_est = self._choose_bounds(ctx, mu, mu_left)
        ctx.clip, ctx.hessian_clip = bounds.get("gradient", math.inf), bounds.get("hessian", math.nan)
        ctx.mu, mu_inf = _reserve_inference(config, mu, mu_est)

        theta, path, n_iter = self._run(ctx)
        converged = diagnose(self, ctx, path, n_samples)
        shape = self._coef_shape(n_features, family)
        to_original = None if config is None else original_scale_map(
            None if scaler is None else scaler.coef_to_original, n_features, family.n_outputs)
        released: dict = {}  # the Hessian the inference released at theta (fitting scale)

        def privacy_covariance(H, notes):
            released["H"] = H
            return _privacy_covariance(ctx, H, notes)

        inference = None if config is None else core.private_inference(
            ctx, theta, config, mu_inf, cov_type=cov_type, to_original=to_original,
            search_bound=lambda at, mu_search: self._search_hessian_bound(ctx, at, mu_search),
            bootstrap=lambda mu_boot: _bootstrap(self, ctx, theta, config, mu_boot, inference_seed),
            privacy_covariance=privacy_covariance,
        )
        charge.settle()  # the ledger must show exactly mu per client, inference releases included

        path = [t.reshape(shape) for t in path]
        if scaler is not None:
            path = [scaler.coef_to_original(t) for t in path]
        self.family_ = family
        self.scaler_ = scaler
        self.coef_ = path[-1]
        self.history_ = np.asarray(path)
        self.n_iter_ = n_iter
        self.converged_ = converged
        self.clip_ = ctx.clip
        self.privacy_ = ledger
        self.communication_ = ctx.channel.communication
        self.n_features_in_ = n_features
        self.n_clients_ = n_clients
        self.n_samples_ = n_samples
        self.has_offset_ = has_offset
        self.mu_ = mu
        self.inference_ = inference
        if "H" in released and math.isfinite(mu) and inference.cov_sampling is not None:
            self._check_optimisation(ctx, released["H"], theta, to_original, inference)
        if inference is not None and inference.clipped_fraction is not None:
            warn_clipping(self, *inference.clipped_fraction)
        return self

    def _check_optimisation(self, ctx: FitContext, H: np.ndarray, theta: np.ndarray, to_original: np.ndarray,
                            inference) -> None:
        """Warn, and set ``converged_`` False, when the protocol stopped short of the optimum of its
        (clipped) objective by more than ``OPTIMISATION_SE`` standard errors (:func:`optimisation_gap`)."""
        init = getattr(self, "init", None)
        theta0 = np.zeros_like(theta) if init is None else np.asarray(init, dtype=np.float64).ravel()
        gap = optimisation_gap(ctx.noise_model, H, theta, theta0)
        if gap is not None and warn_optimisation_gap(self, to_original @ gap, np.sqrt(np.diag(inference.cov)),
                                                     list(self._coef_names()[0])):
            self.converged_ = False  # the noise-free path had not reached the optimum

    def _make_clients(self, data: FederatedData, family: Family, seed: np.random.SeedSequence, secure: bool):
        """The clients' side of the seam for ``data``, with noise streams spawned from ``seed`` (the OS CSPRNG
        when ``secure``): :class:`~privfedstat.federation.clients.InProcessClients`. A backend for other
        models overrides it (:mod:`privfedstat.deep` builds torch clients)."""
        noise = SecureClientNoise(data.n_clients) if secure else ClientNoise(spawn_generators(seed, data.n_clients))
        return InProcessClients(data, family, noise)

    def _coef_shape(self, n_features: int, family: Family) -> tuple[int, ...]:
        """Shape of ``coef_``: (n_features,), or (n_features, K - 1) for the multinomial family."""
        return (n_features, family.n_outputs) if family.n_outputs > 1 else (n_features,)

    def _check_data(self, X, y=None, clients=None, offset=None) -> tuple[FederatedData, Family]:
        """The FederatedData given to ``fit`` (see :func:`as_federated_data`) and the family (the responses are
        checked against its support by the clients, :class:`~privfedstat.federation.clients.InProcessClients`)."""
        data = as_federated_data(X, y, clients, offset)
        family = get_family(self.family)
        check_offset_family(data, family)
        return data, family

    def _run(self, ctx: FitContext) -> tuple[np.ndarray, list[np.ndarray], int]:
        raise NotImplementedError

    def _declared_mu(self, n_clients: int) -> float:
        """The per-client GDP budget towards the server that the fit declares (``mu_``, charged to a budget):
        ``mu``; an estimator calibrated to another target (an amplified epsilon) derives it."""
        return check_mu(self.mu)

    def _advice(self) -> str:
        """What to change when the fit did not converge (the ConvergenceWarning's last sentence)."""
        return "Increase the number of iterations or rounds, or lower step_size."

    def _validate_params(self, mu: float) -> None:
        """Check the parameters common to all estimators (subclasses extend)."""
        policy = getattr(self, "on_client_failure", "raise")
        if policy not in FAILURE_POLICIES:
            raise ValueError(f"on_client_failure must be one of {FAILURE_POLICIES}, got {policy!r}.")
        if self.step_size != "auto":
            check_positive_float(self.step_size, "step_size")
        if not self._norms:  # no per-sample clipping bound (client-level estimators)
            return
        clip = self.clip
        if isinstance(clip, str):
            if clip not in ("auto", "paper"):
                raise ValueError(f"clip must be a positive number, 'auto', 'paper' or an AutoClip, got {clip!r}.")
        elif not isinstance(clip, AutoClip):
            clip = check_positive_float(clip, "clip", allow_inf=True)
            if math.isinf(clip) and math.isfinite(mu):
                raise ValueError(
                    "clip=inf (no clipping) gives infinite sensitivity, so it is only allowed with "
                    "mu=float('inf'); set a finite clip or clip='auto'."
                )

    # ------------------------------------------------------------------ clipping bounds
    def _fixed_bound(self, which: str) -> float | None:
        """The user's fixed bound for ``which`` norm, or None if it must be chosen from data.

        ``hessian_clip=None`` follows ``clip``: chosen the same way when ``clip`` is ``"auto"``,
        ``"paper"`` or an :class:`AutoClip`; infinite when ``clip`` is infinite; chosen as by
        ``"auto"`` when ``clip`` is a finite number (so that one number, e.g. a grid search's, is a
        complete setting).
        """
        value = self.clip if which == "gradient" else self.hessian_clip  # type: ignore[attr-defined]
        if value is None:
            if isinstance(self.clip, (str, AutoClip)) or math.isfinite(float(self.clip)):
                return None
            return math.inf
        if isinstance(value, (str, AutoClip)):
            return None
        return check_positive_float(value, f"{which} clip", allow_inf=True)

    def _fit_scaler(self, ctx: FitContext, mu: float) -> tuple[Scaler | None, float]:
        """Fit the feature rescaling requested by ``scaling``; return it and the mu left."""
        scaling = getattr(self, "scaling", None)
        if scaling is None:
            return None, mu
        if scaling == "private":
            scaling = PrivateStandardize()
        if not isinstance(scaling, (FeatureBounds, PrivateStandardize)):
            raise ValueError(f"scaling must be None, 'private', a PrivateStandardize or a FeatureBounds, got {scaling!r}.")
        clients = ctx.clients
        d, m, n_samples = clients.n_features, clients.n_clients, int(np.sum(clients.sizes))
        j = scaling.intercept
        if j is not None and not 0 <= j < d:
            raise ValueError(
                f"scaling's intercept index {j} is not a column of X (it has {d}); pass "
                "intercept=None (no intercept: columns are scaled, not centred) or the intercept's index."
            )
        if isinstance(scaling, FeatureBounds):
            return Scaler.from_bounds(scaling, d), mu
        if not scaling.columns_to_scale(d):  # nothing to rescale: no budget spent
            return (None if j is None else Scaler(np.zeros(d), np.ones(d), j)), mu
        mu_scale = scaling.budget * mu if math.isfinite(mu) else math.inf
        if not scaling.locatable(n_samples, m, d, mu_scale):  # public: decided before any release
            sd = scaling.count_noise_sd(m, d, mu_scale)
            warnings.warn(
                f"private scaling cannot locate the columns at this budget: the noise of each pooled count "
                f"(sd {sd:.3g}) is comparable to N = {n_samples}. The columns are left unscaled and no "
                "budget is spent on them. Give public FeatureBounds (scaling=...), a larger mu, or more data.",
                PrivacyNoiseWarning,
                stacklevel=3,
            )
            return (None if j is None else Scaler(np.zeros(d), np.ones(d), j)), mu

        def noisy_count(column, threshold, center, mu_q, stage) -> float:
            values, _, answered = ctx.ask("column_count", column=column, threshold=threshold, center=center,
                                         mu=mu_q, stage=stage)
            return float(aggregate(None, values, answered)[0])

        scaler = Scaler.private(scaling, noisy_count, n_samples, m, d, mu_scale)
        return scaler, (math.sqrt(mu * mu - mu_scale * mu_scale) if math.isfinite(mu) else math.inf)

    def _choose_bounds(self, ctx: FitContext, mu: float, mu_left: float) -> tuple[dict, float]:
        """Resolve the clipping bound(s); return them and the mu left for estimation.

        ``mu`` is the client's total budget (the clip budget is a share of it), ``mu_left`` what
        remains after feature scaling.
        """
        bounds: dict[str, float] = {}
        todo = []
        for which in self._norms:
            fixed = self._fixed_bound(which)
            if fixed is None:
                todo.append(which)
            else:
                bounds[which] = fixed
        if not todo:
            return bounds, mu_left
        if self.clip != "paper" and not isinstance(self.clip, AutoClip) and math.isinf(mu):  # no privacy: no clipping
            return {**bounds, **{which: math.inf for which in todo}}, mu_left
        theta0 = ctx.clients.initial_parameters()
        if self.clip == "paper":
            warnings.warn(
                "clip='paper' sets B from the raw data (max over clients of the 90th percentile of "
                "per-sample norms at theta=0) without privacy accounting; the fit is not fully private. "
                "Use clip='auto' (default) for a private choice.",
                PrivacyLeakWarning,
                stacklevel=3,
            )
            for which in todo:
                quantiles, _, answered = ctx.ask("norm_quantiles", which=which, theta=theta0, q=0.9)
                bounds[which] = float(np.max(quantiles[answered]))
            return bounds, mu_left
        config = self.clip if isinstance(self.clip, AutoClip) else PILOT_AUTOCLIP
        mu_clip = config.budget * mu if math.isfinite(mu) else math.inf
        mu_stage = mu_clip / math.sqrt(config.n_stages)
        bounds.update(_search_bounds(ctx, todo, theta0, config.quantile, config, mu_stage))
        if config.pilot_rounds:
            pilot_ctx = replace(ctx, clip=bounds["gradient"], hessian_clip=math.nan, mu=mu_stage, participation=None)
            eta = resolve_step_size("auto", ctx.clients.family, ctx.clients.n_features)
            pilot, _ = server_gradient_descent(pilot_ctx, theta0, n_iter=config.pilot_rounds, step_size=eta,
                                               mu=mu_stage, weights=pilot_ctx.size_weights, stage="clip-pilot")
            bounds.update(_search_bounds(ctx, todo, pilot, config.pilot_quantile, config, mu_stage))
        if math.isfinite(mu) and mu_left * mu_left - mu_clip * mu_clip <= 0:
            raise ValueError("the clipping and scaling budgets leave nothing for estimation; lower their shares.")
        mu_est = math.sqrt(mu_left * mu_left - mu_clip * mu_clip) if math.isfinite(mu) else math.inf
        return bounds, mu_est

    def _search_hessian_bound(self, ctx: FitContext, theta: np.ndarray, mu: float) -> float:
        """C_H for the inference releases: the private ``pilot_quantile`` of the per-sample Hessian norms at
        the estimate ``theta`` (the clip configuration's, 99% by default), ``mu``-GDP, stage ``"inference-clip"``."""
        config = self.clip if isinstance(self.clip, AutoClip) else PILOT_AUTOCLIP
        return _search_bounds(ctx, ["hessian"], theta, config.pilot_quantile, config, mu, stage="inference-clip")["hessian"]

    def _resolve_weights(self, ctx: FitContext, noise_var: np.ndarray | None = None) -> np.ndarray:
        """Server aggregation weights from the ``weights`` parameter.

        ``"size"``: n_i / N. ``"optimal"`` (eq. (2) of the core paper, only where ``noise_var`` is
        given): w_i proportional to ``1 / (trace(Sigma)/n_i + d * s_i^2)``, with ``s_i^2`` the
        per-coordinate variance of client i's noise and trace(Sigma) replaced by its bound B^2
        (clipped gradients have norm <= B), as Remark 3.3 suggests replacing it by a constant.
        An array is used as given (non-negative, summing to 1). The result is recorded in
        ``ctx.weights`` (the inference stage aggregates with it).
        """
        ctx.weights = self._weights(ctx, noise_var)
        return ctx.weights

    def _weights(self, ctx: FitContext, noise_var: np.ndarray | None) -> np.ndarray:
        """The weights of :meth:`_resolve_weights`, checked."""
        w = self.weights
        m = ctx.clients.n_clients
        if isinstance(w, str):
            if w == "size":
                return ctx.size_weights
            if w == "optimal":
                if noise_var is None:
                    raise ValueError(f"weights='optimal' (eq. (2)) is defined for FedSGD and FedHybrid, not {self.method}; use 'size' or an array.")
                B2 = ctx.clip**2 if math.isfinite(ctx.clip) else 1.0
                inv = 1.0 / (B2 / ctx.sizes + ctx.clients.n_params * noise_var)
                return inv / inv.sum()
            raise ValueError(f"weights must be 'size', 'optimal' or an array of {m} numbers, got {w!r}.")
        arr = np.asarray(w, dtype=np.float64)
        if arr.shape != (m,) or np.any(~np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"weights must be {m} non-negative finite numbers (one per client), got shape {arr.shape}.")
        if abs(arr.sum() - 1.0) > 1e-8:
            raise ValueError(f"weights must sum to 1, they sum to {arr.sum():.6g}; divide by their sum.")
        return arr



def _search_bounds(ctx: FitContext, todo: list[str], theta: np.ndarray, quantile: float, config: AutoClip, mu: float,
                   stage: str = "clip") -> dict[str, float]:
    """The private ``quantile`` of the per-sample norms ``todo`` at ``theta`` (one search each), ``mu``-GDP in all;
    ledger stages ``f"{stage}-{which}"``. Each query asks every live client for its noisy count
    (verb ``count_at_most``, sensitivity 1) and sums the replies; the target is a share of the
    live clients' public N."""
    mu_query = mu / math.sqrt(len(todo) * config.n_queries)
    live = ctx.channel.live
    n_total = float(np.sum(ctx.sizes[live]))
    m = int(np.count_nonzero(live))
    count_sd = math.sqrt(m) / mu_query if math.isfinite(mu_query) else 0.0  # public: sensitivity 1 per client
    bounds = {}
    for which in todo:

        def noisy_count(threshold: float, which=which) -> float:
            values, _, answered = ctx.ask("count_at_most", which=which, theta=theta, threshold=threshold, mu=mu_query,
                                         stage=f"{stage}-{which}")
            return float(aggregate(None, values, answered)[0])

        bounds[which] = private_grid_quantile(noisy_count, config.grid, quantile * n_total - config.margin * count_sd)
    return bounds


def _reserve_inference(config: Inference | None, mu: float, mu_est: float) -> tuple[float, float]:
    """Reserve ``mu_inf = config.budget * mu`` for the inference releases before the protocol runs.

    Returns the estimation budget ``sqrt(mu_est^2 - mu_inf^2)`` (GDP composition in squares, so the
    ledger total stays exactly mu) and ``mu_inf``; with mu = inf both are inf, without inference
    ``mu_inf`` is 0 and the estimation keeps ``mu_est``.
    """
    if config is None:
        return mu_est, 0.0
    if math.isinf(mu):
        return math.inf, math.inf
    mu_inf = config.budget * mu
    left = mu_est * mu_est - mu_inf * mu_inf
    if left <= 0:
        raise ValueError(
            f"the inference budget ({config.budget:g} of mu = {mu:.4g}) leaves nothing for estimation after the "
            "clipping and scaling budgets; lower Inference(budget=...) or those shares, or fit with inference=None."
        )
    return math.sqrt(left), mu_inf


def _privacy_covariance(ctx: FitContext, H: np.ndarray, notes: list[str]) -> np.ndarray:
    """Covariance of the protocol's privacy noise in theta (fitting scale), linearised at H (no noise: zeros).

    From the protocol's noise model (:func:`privfedstat.theory.protocol_noise_covariance`); a protocol
    that reports none (a user's subclass of this base; every registered estimator reports one) gets
    ``diag(noise_sd^2)``, the lower bound of ``ctx.noise_sd``, and a note.
    """
    if math.isinf(ctx.mu):
        return np.zeros_like(H)
    if ctx.noise_model is None:
        notes.append("the protocol reports no noise model: its privacy-noise variance is the lower bound "
                     "noise_sd^2 of its last release (intervals may be too narrow)")
        sd = np.broadcast_to(np.asarray(ctx.noise_sd, dtype=np.float64), (H.shape[0],))
        return np.diag(sd * sd)
    from ..theory.noise import protocol_noise_covariance  # theory imports the estimators

    return protocol_noise_covariance(ctx.noise_model, H)


def _bootstrap(estimator: FederatedEstimator, ctx: FitContext, theta: np.ndarray, config: Inference, mu: float,
               seed: np.random.SeedSequence) -> tuple[np.ndarray, list[str]]:
    """Parametric-bootstrap draws of the private fit (:func:`privfedstat.inference.bootstrap.run_bootstrap`)."""
    from ..inference.bootstrap import run_bootstrap  # it refits estimators of this module

    return run_bootstrap(estimator, ctx, theta, config, mu, seed)


def _same(a, b) -> bool:
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else False
    except (TypeError, ValueError):
        return False


def clone(estimator: FederatedEstimator) -> FederatedEstimator:
    """A new unfitted estimator with deep copies of the parameters (as ``sklearn.base.clone``)."""
    return type(estimator)(**copy.deepcopy(estimator.get_params()))
