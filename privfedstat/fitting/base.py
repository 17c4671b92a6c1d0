"""The federated estimators' base class: parameters (scikit-learn contract) and ``fit`` as a pipeline of stages.

``fit`` reads as its stages, each a named function with one job: check the data and parameters,
plan the budget (:class:`~privfedstat.privacy.plan.BudgetPlan`, before any release), open the
session (:class:`~privfedstat.federation.session.Session`: clients, channel, ledger, seeds), fit the
feature scaling and choose the clipping bounds (:mod:`.stages`), run the protocol (a subclass's
``_run(session, setup) -> Run``), diagnose the run (:mod:`.diagnostics`), infer
(:func:`~privfedstat.inference.core.infer`) and store the results. A protocol talks to the clients
only through the session and reports what later stages need in its
:class:`~privfedstat.federation.protocol.Run`; nothing calls back into the estimator, except the
bootstrap's refits, which the estimator hands over as a function (:meth:`FederatedEstimator._refits`).
What a fitted estimator reports (predictions, scores, standard errors, intervals, tests, the
summary) is the mixin :class:`~privfedstat.results.fitted.FittedResults`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import math
from collections.abc import Iterator
from dataclasses import replace
from numbers import Real

import numpy as np

from .._rng import as_seed_sequence, check_secure_mode
from .._validation import Free, InstanceOf, Interval, Options, check_finite_bounds, check_mu, validate_parameters
from ..data.federated import FederatedData
from ..data.inputs import as_federated_data
from ..families import Family, get_family
from ..federation.channel import FAILURE_POLICIES
from ..federation.clients import InProcessClients
from ..federation.oracle import check_offset_family
from ..federation.protocol import Run, Setup
from ..federation.secure import secure_sites
from ..federation.server import Participation, resolve_participation
from ..federation.session import Session
from ..inference.bootstrap import PROGRESS_DELAY_S, Refits
from ..inference.core import infer, plan_inference
from ..inference.covariance import original_scale_map, original_scale_origin
from ..privacy.budget import FitCharge, PrivacyBudget, reserve
from ..privacy.clipping import AutoClip
from ..privacy.ledger import PrivacyLedger
from ..privacy.mechanisms import ClientNoise, SecureClientNoise
from ..results.fitted import FittedResults
from .diagnostics import OSCILLATION_CORRELATION, diagnose, oscillation, review_inference, withhold_inference
from .scaling import Scaler
from .stability import unjudged
from .stages import bound_search, choose_bounds, fit_scaler, plan_budget
from .verdict import SCORE_SHARE, release_score, released_sd, remedy, review_score, score_spent, scored

__all__ = ["FederatedEstimator", "clone", "CLIENT_LEVEL_INFERENCE"]

#: the ``inference`` rule of the estimators that protect whole clients: only None
CLIENT_LEVEL_INFERENCE = Options((None,), hint="{estimator} protects whole clients; the inference releases are "
                                 "record-level and cannot carry that guarantee. Fit with inference=None (the default).")


class FederatedEstimator(FittedResults):
    """Base class (scikit-learn contract): ``__init__`` only stores keyword-only parameters.

    Subclasses set ``method`` (display name) and implement ``_run(session, setup) -> Run``, the protocol.

    Parameters
    ----------
    secure_mode : bool, default False
        Draw every client's noise from the operating system's CSPRNG as a sum of four normal
        draws (:class:`~privfedstat.privacy.mechanisms.SecureClientNoise`), the mitigation of
        floating-point attacks on the Gaussian mechanism that Opacus' ``secure_mode`` uses
        (Holohan & Braghin 2021; Jin et al. 2022). ``random_state`` must then be None (a seed is
        refused), the fit is not reproducible, noise generation is about 30 times slower, and
        ``privacy_.secure_mode`` is True. The default draws from seeded numpy streams:
        reproducible and fast, private against an observer of the released values, but not
        hardened against floating-point or PRNG-state attacks. Timing side channels are not
        covered in either mode (docs/privacy.md). Every private estimator takes it (documented here once).
    on_client_failure : {"raise", "skip"}, default "raise"
        A client that fails while answering a request (its process dies, in the in-process
        backend :class:`~privfedstat.federation.clients.FailingData` injects this) makes the fit
        raise :class:`~privfedstat.ClientFailureError` (``"raise"``), or is left out from then on
        (``"skip"``): every later aggregate renormalises the weights over the clients that
        answered, count queries sum the live clients and target their public N, and the ledger
        holds exactly the releases that reached the server (the failed client's unsent message
        is not recorded). Nothing waits: a failed client simply has no reply. Every private
        estimator takes it (documented here once).
    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals, p-values and Wald tests that count both the sampling variance
        and the privacy noise of the protocol (:class:`~privfedstat.Inference`,
        :mod:`privfedstat.inference.core`). With finite mu they spend ``Inference().budget``
        (25%) of each client's mu, reserved before the protocol runs (the estimation keeps
        ``sqrt(mu_left^2 - (0.25 mu)^2)``, so the ledger total is still exactly mu); None
        spends nothing on them and leaves these results undefined. Every estimator takes it
        (documented here once).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,), or (n_features, K - 1) for the multinomial family
        The server's final model, on the original scale of the columns.
    history_ : ndarray of shape (n_updates + 1) + ``coef_.shape``
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
        Upload rounds and floats, clip search and inference releases included (the setup's rounds, the
        private column scaling and the clip search, also by stage: ``communication_.setup``).
    converged_ : bool or None
        Whether the estimating equation holds at the estimate up to what its noise explains. With
        mu = inf: the exact pooled gradient and Hessian there put the optimum at most ``TOL_SE``
        (0.42) model-based standard errors away. With finite mu and inference on: the clipped
        mean gradient released at the estimate (10% of the inference budget, in the ledger)
        passes a chi-square test against its own noise and the protocol's privacy noise, or puts
        the root at most ``TOL_SE`` of the intervals' standard errors away; a cut or damped last
        step (FedIRLS) or an optimisation gap of more than 1 SE
        (:func:`~privfedstat.fitting.diagnostics.optimisation_gap`) also counts as not converged.
        Otherwise (inference None, the bootstrap, the networks): whether the mean update over the
        last quarter of the path is negligible next to its noise
        (:func:`~privfedstat.fitting.steps.settled`); None where an estimator gives no noise level
        at finite mu. With mu = inf and ``"auto"`` iteration counts the loop stops once the last
        update is negligible. When False a :class:`~privfedstat.ConvergenceWarning` names the
        cause and a parameter of the estimator to change, and a private fit withholds its
        intervals; a gradient path that runs away or goes back and forth raises
        :class:`~privfedstat.DivergenceError` instead of returning an estimate.
    inference_ : InferenceResult or None
        Covariance (total, sampling and privacy parts), how it was computed and what it spent.
    client_sizes_ : ndarray of shape (n_clients,)
        Rows per site n_i (public in every protocol here: they set the noise scales).
    client_labels_ : ndarray of shape (n_clients,) or None
        The sites' labels in the order of ``client_sizes_`` and ``site_weights_`` (sorted; public, like the
        sizes), when the fit was given one label per row (``clients=``, ``glm()``'s ``client=``); else None.
    site_weights_ : ndarray of shape (n_clients,)
        The server's weights w_i of the sites in the estimate (summing to 1): size weights n_i / N unless the
        estimator's ``weights`` chose others (FedIRLS's ``"optimal"`` re-weighs sites of unequal size).
    bse_, zvalues_, pvalues_ : ndarray of the shape of ``coef_``
        Standard errors, ``coef_ / bse_`` and two-sided normal p-values; with
        :meth:`cov_params`, :meth:`conf_int` and :meth:`wald_test` (names and order of
        ``coef_.ravel(order="F")``, as statsmodels).

    Notes
    -----
    Every estimator sets the attributes above with the same meaning everywhere (documented here
    once). Also from released values only: a :class:`~privfedstat.DivergenceError` when iterates
    become non-finite or explode; a :class:`~privfedstat.PrivacyNoiseWarning` when the privacy noise of a coefficient
    (a lower bound from the calibrated sigmas) exceeds a public sampling-SE proxy
    ``1 / sqrt(ell''(0) N)`` (standardised columns; the coefficients below it in size are
    named as indistinguishable from noise), or when a site is so small that its
    messages are noise-dominated (the minimum size is given); and an
    :class:`~privfedstat.IllConditionedWarning` when a released Hessian is ill-conditioned.

    Every iteration count is at most :data:`~privfedstat._validation.MAX_ITERATIONS`, and a fit that
    runs longer than two seconds shows a progress bar over its rounds on a terminal
    (docs/guide/input-limits.md).
    """

    method: str = ""
    #: what one datum is: a row of a client ("record", the core paper) or a client's whole dataset ("client")
    privacy_unit: str = "record"
    #: whether the estimator reports standard errors (``inference``); client-level estimators do not
    supports_inference: bool = True
    #: per-sample norms whose clipping bound ``fit`` must choose
    _norms: tuple[str, ...] = ("gradient",)
    #: the rules of the parameters that mean the same in every estimator that takes them
    #: (:func:`~privfedstat._validation.validate_parameters`); a subclass declares its own
    #: ``_parameter_constraints``, which :meth:`_parameter_table` merges over these
    _parameter_constraints: dict = {
        "family": Free("get_family: a family name or a Family"),
        "mu": Free("_declared_mu: a number > 0, inf for no privacy"),
        "random_state": Free("as_seed_sequence and check_secure_mode"),
        "secure_mode": Free("check_secure_mode: True or False, with random_state=None"),
        "participation": Free("resolve_participation, against the number of clients"),
        "on_client_failure": list(FAILURE_POLICIES),
        "inference": Free("plan_inference"),
        "weights": Free("resolve_weights, against the clients' sizes"),
        "scaling": Free("fit_scaler"),
        "step_size": [Interval(Real, 0, None, closed="neither"), "auto"],
        "clip": [Interval(Real, 0, None, closed="neither", finite=False), "auto", "paper",
                 InstanceOf(AutoClip, "an AutoClip")],
    }

    # ------------------------------------------------------------------ sklearn-style parameters
    @classmethod
    def _parameter_table(cls) -> dict:
        """The rules of this estimator's parameters: the shared rules of those it takes, updated by the
        ``_parameter_constraints`` declared along its class hierarchy (a subclass's entry replaces its base's)
        and restricted to its parameters (a subclass may take fewer than its base)."""
        names = cls._param_names()
        table = {}
        for klass in reversed(cls.__mro__):
            table.update(vars(klass).get("_parameter_constraints", {}))
        return {name: table[name] for name in names if name in table}

    @classmethod
    def _param_names(cls) -> list[str]:
        return list(_keyword_names(cls.__init__))

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
            :mod:`privfedstat.data.inputs` for what such tools spend.
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
        data, family = self._check_data(X, y, clients, offset)
        mu = self._declared_mu(data.n_clients)
        self._validate_params(mu)
        participation = resolve_participation(getattr(self, "participation", None), data.n_clients)
        task = plan_inference(self.inference, family, data.n_clients, data.n_features, participation,
                              bound_search(self))
        plan = plan_budget(self, mu, task, n_features=data.n_features, n_clients=data.n_clients,
                           n_samples=data.n_samples, family=family)
        self._refuse_before_release(plan.estimation, family, data.n_features)
        session, charge = self._open_session(data, family, mu, participation, budget)
        n_features, n_samples = data.n_features, data.n_samples
        self.client_labels_ = getattr(data, "labels", None)  # the networks' TensorFederatedData has none
        del data  # from here on the server talks to the clients only through their verbs
        scaler = fit_scaler(self, session, plan)
        session.channel.end_setup_stage("the column scaling")
        setup = choose_bounds(self, session, plan, scaler)
        session.channel.end_setup_stage("the clip search")
        with self._progress(session):
            run = self._run(session, setup)
        setup = run.setup if run.setup is not None else setup
        score_task = scored(task, mu, family)
        converged, privacy_open = diagnose(self, session, setup, run, n_samples, score_pending=score_task)
        inference = hessian = to_original = score = None
        if task is not None:
            back = None if scaler is None else scaler.coef_to_original
            to_original = original_scale_map(back, n_features, family.n_outputs)
            # the inference releases in the basis of the protocol's last rounds, where its bounds are norms
            inference_run = run.in_basis()
            if run.basis is not None:
                to_original = to_original @ run.basis.parameters(run.theta.size)
            rows = None if run.basis is None else run.basis.design
            with session.rows_mapped(run.basis):
                if score_task:  # the score at the estimate, SCORE_SHARE of the inference budget (the verdict)
                    mu_inference = plan.inference
                    score = release_score(session, setup, inference_run, math.sqrt(SCORE_SHARE) * mu_inference)
                    plan = replace(plan, inference=math.sqrt(1.0 - SCORE_SHARE) * plan.inference)
                inference, hessian = infer(session, setup, inference_run, plan, task, to_original=to_original,
                                           refits=self._refits(setup, scaler, rows),
                                           origin=original_scale_origin(back, n_features, family.n_outputs))
            if score is not None:  # the score release is an inference release: inference_.mu is their total
                inference = score_spent(inference, mu_inference)
        charge.settle()  # the ledger must show exactly mu per client, inference releases included
        self._store(run, session, setup, scaler, family, mu, converged, inference)
        if score is None and math.isfinite(mu):  # nothing released at the estimate judges a step unstable at the start
            self.converged_ = unjudged(self, run.noise_model, self.converged_)
        if score is not None:
            correlation, _ = oscillation(inference_run.path[run.settle_from:], 8)
            self.converged_ = review_score(self, score, hessian, released_sd(session.ledger, "inference-hessian"),
                                           inference, to_original, inference_run,
                                           correlation if correlation < -OSCILLATION_CORRELATION else None, converged)
        if inference is not None:
            self.converged_ = review_inference(self, inference_run, hessian, to_original, privacy_open)
            if math.isfinite(mu) and not np.all(self.converged_) and inference.cov_type != "bootstrap":
                self.inference_ = withhold_inference(self)
        return self

    @contextlib.contextmanager
    def _progress(self, session: Session) -> Iterator[None]:
        """A tqdm bar on stderr over the protocol's rounds, one tick per reply the server receives: shown on a
        terminal once the fit has run :data:`~privfedstat.inference.bootstrap.PROGRESS_DELAY_S` seconds (short
        fits and non-terminals print nothing), as the bootstrap's. The total is not known in advance (rounds
        stop early at mu = inf). Not drawn inside another bar of this process (a bootstrap's refits, a study's
        fits), nor when the estimator draws its own (the network estimators' ``progress``: they hold its
        update in ``_round_done`` during ``fit``); it disappears when the rounds are done."""
        from tqdm.auto import tqdm  # here, not at module level: slow to import

        if getattr(self, "_round_done", None) is not None or len(getattr(tqdm, "_instances", ())):
            yield
            return
        with tqdm(desc=self.method, unit="round", disable=None, delay=PROGRESS_DELAY_S, leave=False) as bar:
            session.channel.on_receive = bar.update
            try:
                yield
            finally:
                session.channel.on_receive = None

    def _open_session(self, data: FederatedData, family: Family, mu: float, participation: Participation | None,
                      budget: PrivacyBudget | None) -> tuple[Session, FitCharge]:
        """The fit's ledger (charged to ``budget`` before any randomness is used), its seeds (the clients' noise,
        the protocol's, the inference's, spawned in that order from ``random_state``) and its clients."""
        secure = check_secure_mode(self.secure_mode, self.random_state)
        ledger = PrivacyLedger(data.n_clients, secure_mode=secure)
        charge = reserve(budget, ledger, mu=mu, method=self.method)  # refuses before any randomness is used
        noise_seed, protocol_seed, inference_seed = as_seed_sequence(self.random_state).spawn(3)
        clients = self._make_clients(data, family, noise_seed, secure)
        return Session.open(clients, ledger, seed=protocol_seed, inference_seed=inference_seed, unit=self.privacy_unit,
                            participation=participation, on_client_failure=getattr(self, "on_client_failure", "raise"),
                            secure=secure_sites(self, data.n_clients, mu, participation)), charge

    def _store(self, run: Run, session: Session, setup: Setup, scaler: Scaler | None, family: Family | None,
               mu: float, converged: bool | None, inference) -> None:
        """Set the fitted attributes: the path and estimate on the original scale, the ledger, the communication."""
        clients = session.clients
        shape = self._coef_shape(clients.n_features, family)
        path = [t.reshape(shape) for t in run.path]
        if scaler is not None:
            path = [scaler.coef_to_original(t) for t in path]
        self.family_ = family
        self.scaler_ = scaler
        self.coef_ = path[-1]
        self.history_ = np.asarray(path)
        self.n_iter_ = run.n_iter
        self.converged_ = converged
        self.clip_ = setup.clip
        self.privacy_ = session.ledger
        self.communication_ = session.channel.communication
        self.n_features_in_ = clients.n_features
        self.n_clients_ = clients.n_clients
        self.n_samples_ = int(np.sum(clients.sizes))
        self.client_sizes_ = np.asarray(clients.sizes, dtype=np.int64)
        self.site_weights_ = np.asarray(session.size_weights if run.weights is None else run.weights, dtype=np.float64)
        self.has_offset_ = clients.has_offset
        self.mu_ = mu
        self.inference_ = inference

    def _refits(self, setup: Setup, scaler: Scaler | None, rows: np.ndarray | None = None) -> Refits:
        """The bootstrap's refit function: a clone with the fit's public settings (the bounds of ``setup`` fixed, its
        estimation mu, no scaling, no inference, not secure), seeded per refit, returning its flat estimate; the
        intercept column the ``scaler`` declares; and the map of the rows the inference releases under."""
        params = {"clip": setup.clip, "mu": setup.mu, "scaling": None, "inference": None, "secure_mode": False,
                  "random_state": None}
        if "hessian" in self._norms:
            params["hessian_clip"] = setup.hessian_clip
        template = clone(self).set_params(**params)

        def refit(data: FederatedData, seed: np.random.SeedSequence) -> np.ndarray:
            return template.set_params(random_state=seed).fit(data).coef_.ravel()

        return Refits(refit, self.method, getattr(scaler, "intercept", None), rows)

    def _make_clients(self, data: FederatedData, family: Family, seed: np.random.SeedSequence, secure: bool):
        """The clients' side of the seam for ``data``, with noise streams spawned from ``seed`` (the OS CSPRNG
        when ``secure``): :class:`~privfedstat.federation.clients.InProcessClients`. A backend for other
        models overrides it (:mod:`privfedstat.deep` builds torch clients)."""
        noise = SecureClientNoise(data.n_clients) if secure else ClientNoise(seed, data.n_clients)
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

    def _run(self, session: Session, setup: Setup) -> Run:
        """The algorithm's protocol: its rounds through ``session`` with the bounds and budget of ``setup``."""
        raise NotImplementedError

    def _declared_mu(self, n_clients: int) -> float:
        """The per-client GDP budget towards the server that the fit declares (``mu_``, charged to a budget):
        ``mu``; an estimator calibrated to another target (an amplified epsilon) derives it."""
        return check_mu(self.mu)

    def _advice(self) -> str:
        """What to change when the fit did not converge (the ConvergenceWarning's last sentence): its own
        iteration counts and step size, by name (:func:`~privfedstat.fitting.verdict.remedy`)."""
        return remedy(self, "slow")

    def _refuse_before_release(self, mu: float, family, n_features: int) -> None:
        """Refuse a fit that its estimation budget ``mu`` cannot serve, from public values before any release (a
        protocol with such a rule overrides it; none here)."""

    def _validate_params(self, mu: float) -> None:
        """Check every parameter against its rules (:meth:`_parameter_table`), then the rules that tie parameters
        together (subclasses extend): an infinite clip needs mu = inf."""
        table = self._parameter_table()
        validate_parameters(self, table)
        check_finite_bounds(self, ("clip",) if "clip" in table else (), mu, "the per-sample gradients")


@functools.cache
def _keyword_names(init) -> tuple[str, ...]:
    """The keyword-only parameters of an estimator's ``__init__`` (its parameters; read once per class)."""
    return tuple(p.name for p in inspect.signature(init).parameters.values() if p.kind == p.KEYWORD_ONLY)


def _same(a, b) -> bool:
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else False
    except (TypeError, ValueError):
        return False


def clone(estimator: FederatedEstimator) -> FederatedEstimator:
    """A new unfitted estimator with deep copies of the parameters (as ``sklearn.base.clone``)."""
    return type(estimator)(**copy.deepcopy(estimator.get_params()))
