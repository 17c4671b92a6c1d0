"""The FedIRLS estimator: its parameters, their checks, and the fit's protocol handed to its schedule and rounds."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ..._linalg import MAX_HESSIAN_GB
from ..._validation import ITERATIONS, Free, Interval, check_finite_bounds
from ...families import get_family
from ...federation.protocol import Run, Setup
from ...federation.secure import AGGREGATIONS, least_round_mu
from ...federation.session import Session
from ...fitting.base import FederatedEstimator
from ...fitting.stages import weights_for
from ...privacy.calibration import BACKWARD_RATIO, MAX_DERIVED_ROUNDS, largest_split_shares
from ...privacy.clipping import AutoClip
from ...results.labels import fitting_labels
from .rounds import ScheduledRun
from .schedule import IRLSSchedule, default_search

__all__ = ["FedIRLS"]


class FedIRLS(FederatedEstimator):
    """Private federated Newton / IRLS with server-side aggregation of gradients and Hessians.

    Round r at the current theta (theta^(0) = 0): client i releases its mean gradient, per-sample
    gradients clipped to norm B (sensitivity ``2 B / n_i``, budget ``mu_{g,r}``), and the mean of its
    per-sample Hessians over all rows, each clipped to Frobenius norm C_H (sensitivity
    ``sqrt(2) C_H / n_i``, budget ``mu_{H,r}``; symmetric Gaussian noise on the matrix). The server
    averages with weights w_i, floors the eigenvalues of the averaged Hessian at lambda
    (post-processing) and steps ``theta <- theta - eta H^{-1} g``, cut to the trust region
    (``max_step``); a round with a zero Hessian share reuses the last released Hessian. Each client
    is ``mu``-GDP: the releases compose to ``sqrt(sum_r mu_{g,r}^2 + mu_{H,r}^2 + mu_search^2) = mu``
    (after the clip and scaling budgets).

    The policy is one :class:`~privfedstat.algorithms.fedirls.schedule.IRLSSchedule` per fit, which
    :func:`~privfedstat.planning.power.plan_study` reads too. By default (finite mu): *locate* rounds
    from theta = 0 with the bounds chosen there; the bounds searched again at the located point; the
    *refine* rounds with them, run *whitened* (the clients map their rows by ``Hf^{-1/2}`` of the
    located floored Hessian, so the isotropic noise is shaped like the sampling noise in theta) with
    the gradient bound raised where its noise stays small next to the sampling error. An int
    ``n_rounds`` or an explicit ``budget_split`` runs one phase of R rounds. With ``mu = inf`` nothing
    is noised: each step is halved until the aggregated loss does not increase or the gradient gets
    shorter, and the rounds stop when the step is below ``tol``. With finite B the fixed point is the
    root of the clipped estimating equation (a Huberised loss), not the MLE.

    The derivation of the budget split, the eigenvalue floor, the clipped-objective bias and the
    measurements: ``docs/algorithms/fedirls.md``.

    Parameters
    ----------
    family : str or Family, default "logistic"
        Any family: logistic, poisson, gaussian, huber (Newton weights ell'', the IRLS weights),
        multinomial (parameter matrix; Hessians of size (d (K-1))^2 per client, at most
        ``MAX_HESSIAN_GB`` for all clients).
    mu : float, default 2.0
        GDP budget per client (mu); ``inf`` for no privacy.
    n_rounds : int or "auto", default "auto"
        Rounds (R). "auto": with finite mu the schedule (7 rounds; 9 for unbounded curvature); with
        mu = inf until the step is below ``tol`` (at most 100). An int: one phase of R rounds (with
        mu = inf a cap; the rounds also stop at ``tol``); with finite mu and the derived split at most
        :data:`~privfedstat.privacy.calibration.MAX_DERIVED_ROUNDS` (35).
    budget_split : "auto" or array of shape (R, 2), default "auto"
        Shares of mu^2 for the gradient (column 0) and Hessian (column 1) release of each round.
        "auto": the schedule (with an int ``n_rounds``: the derived split). An array: one phase,
        non-negative, summing to 1, every gradient share and the first Hessian share > 0; a zero
        Hessian share reuses the last Hessian.
    step_size : float, default 1.0
        Newton step length (eta); 1 is the full step.
    max_step : float, default 2.0
        With finite mu: trust region, the largest Euclidean norm of one update on the fitting
        (scaled) coordinates (for families of bounded curvature ``max(max_step, ||theta||)``); a
        longer Newton step is shortened to it (post-processing). A last step cut to it while far
        longer than its noise means the path was still travelling when the rounds ran out: the fit
        warns (ConvergenceWarning), ``converged_`` is False and the intervals are withheld.
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B).
    hessian_clip : float or None, default None
        Bound on per-sample Hessian Frobenius norms (C_H). None: chosen like ``clip`` (shares
        the clip budget with it; infinite if clip is); with a finite numeric ``clip``, chosen
        privately as by ``clip="auto"`` (the clip budget goes to it alone; infinite with mu = inf).
    hessian_floor : float or "auto", default "auto"
        Eigenvalue floor lambda for the averaged Hessian (post-processing); "auto": 3 noise sds of
        an eigenvalue.
    weights : "optimal", "size" or array of shape (n_clients,), default "optimal"
        Server aggregation weights (w_i). "size": n_i / N. "optimal": size weights, and from the second refine
        round on (sites of unequal size, local aggregation, whitened rounds, a family without a scale) the
        weights of least mean square error against the size-weighted root under each site's privacy noise and a
        site effect whose variance is estimated from the first refine round's released per-site gradients
        (:mod:`~privfedstat.algorithms.fedirls.site_weights`; the effect's shift is added to the privacy
        covariance); otherwise size weights.
    scaling : None, "private", PrivateStandardize or FeatureBounds, default None
        Fit on rescaled columns, report coefficients on the original scale.
    tol : float, default 1e-10
        With mu = inf: stop when ``max|step| <= tol (1 + max|theta|)``.
    random_state : int, Generator, SeedSequence or None
    secure_mode : bool, default False
        Secure noise: see :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        What the server does when a client fails mid-fit: see :class:`~privfedstat.FederatedEstimator`.
    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals and tests: see :class:`~privfedstat.FederatedEstimator`.
    aggregation : {"local", "secure"}, default "local"
        ``"secure"``: each round's gradient and Hessian are summed under secure aggregation
        (:mod:`privfedstat.federation.secure`; Skellam noise shares on quantized messages), so their
        sums carry one mechanism's noise at the round's budgets instead of one per site.
    min_surviving : int or None, default None
        With ``aggregation="secure"``: the fewest sites whose noise shares keep the declared guarantee; a
        round with fewer survivors is refused. None: every site.

    Attributes
    ----------
    budget_split_ : ndarray of shape (n_rounds, 2), n_rounds = ``n_iter_``
        The shares of the estimation mu^2 used by each round (with the automatic schedule they
        sum to 1 - ``IRLSSchedule.research_share`` when the bounds were searched again; with mu = inf: ones).
    hessian_floor_ : float
        The eigenvalue floor lambda of the last Hessian.

    References
    ----------
    Avella-Medina, Bradshaw & Loh (2023), "Differentially private inference via noisy
    optimization", Annals of Statistics (noisy Newton); core paper, Algorithm 4 (FedNewton,
    which inverts a Hessian on every client instead).
    """

    method = "FedIRLS"
    _norms = ("gradient", "hessian")
    _parameter_constraints = {
        "n_rounds": [ITERATIONS, "auto"],
        "budget_split": Free("_explicit_split: 'auto' or shares of shape (n_rounds, 2)"),
        "step_size": Interval(Real, 0, None, closed="neither"),
        "max_step": Interval(Real, 0, None, closed="neither", finite=False),
        "hessian_clip": [Interval(Real, 0, None, closed="neither", finite=False), None],
        "hessian_floor": [Interval(Real, 0, None, closed="neither"), "auto"],
        "tol": Interval(Real, 0, None, closed="neither"),
        "aggregation": list(AGGREGATIONS),
        "min_surviving": [Interval(Integral, 1), None],
    }

    @property
    def _default_search(self) -> AutoClip:
        """``clip="auto"``: the bounds at theta^(0), searched again at the located point (:func:`default_search`)."""
        return default_search(get_family(self.family))

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_rounds: int | str = "auto",
        budget_split="auto",
        step_size: float = 1.0,
        max_step: float = 2.0,
        clip: float | str | AutoClip = "auto",
        hessian_clip: float | None = None,
        hessian_floor: float | str = "auto",
        weights="optimal",
        scaling=None,
        tol: float = 1e-10,
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference="auto",
        aggregation: str = "local",
        min_surviving: int | None = None,
    ) -> None:
        self.family = family
        self.mu = mu
        self.n_rounds = n_rounds
        self.budget_split = budget_split
        self.step_size = step_size
        self.max_step = max_step
        self.clip = clip
        self.hessian_clip = hessian_clip
        self.hessian_floor = hessian_floor
        self.weights = weights
        self.scaling = scaling
        self.tol = tol
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference
        self.aggregation = aggregation
        self.min_surviving = min_surviving

    # ------------------------------------------------------------------ parameters
    def _validate_params(self, mu: float) -> None:
        """The table's rules, then those that tie parameters together: an infinite Hessian bound needs mu = inf,
        and an explicit ``budget_split`` must be a valid split of mu^2 with one row per round."""
        super()._validate_params(mu)
        check_finite_bounds(self, ("hessian_clip",), mu, "the Hessian release")
        if math.isfinite(mu) and self.n_rounds != "auto" and isinstance(self.budget_split, str) \
                and self.n_rounds > MAX_DERIVED_ROUNDS:
            raise ValueError(f"n_rounds={self.n_rounds} is too many rounds for the derived budget split at finite mu: "
                             f"round r gets BACKWARD_RATIO^(R - r) = {BACKWARD_RATIO}^(R - r) of the last round's share, "
                             f"so beyond {MAX_DERIVED_ROUNDS} rounds the first rounds' shares fall below the float64 "
                             "resolution of the budget (pure-noise releases; their noise overflows from ~675 rounds). "
                             f"Use n_rounds <= {MAX_DERIVED_ROUNDS}, n_rounds='auto' (the phased schedule), an explicit "
                             "budget_split, or mu=float('inf').")
        if not (isinstance(self.budget_split, str) and self.budget_split == "auto"):
            self._explicit_split()

    def _refuse_before_release(self, mu: float, family, n_features: int) -> None:
        """Under secure aggregation, refuse before any release a schedule one of whose estimation releases no integer
        noise can serve (:func:`~privfedstat.federation.secure.least_round_mu`) at the largest share of the estimation
        ``mu``^2 it can get whatever the bounds the search finds: the user's ``budget_split``; the derived split's
        gradients and its Hessians pooled (:func:`~privfedstat.privacy.calibration.largest_split_shares`); the locate
        rounds' equal shares (public: mu, the shares, d, the number of features and the family's outputs)."""
        if self.aggregation == "local" or not math.isfinite(mu):
            return
        n_params = n_features * family.n_outputs
        fewer = f"fewer rounds than n_rounds={self.n_rounds} (or n_rounds='auto'), "
        if not isinstance(self.budget_split, str):
            shares = self._explicit_split()
            gradients, hessian = shares[:, 0], float(np.min(shares[shares[:, 1] > 0, 1]))
            fewer = "a budget_split with fewer rounds or larger shares, "
        elif self.n_rounds != "auto":
            gradients, hessian = largest_split_shares(int(self.n_rounds))
        else:  # the refine shares are set from the located point; the locate rounds' are fixed
            each = IRLSSchedule.locate_share / (2 * IRLSSchedule.locate_rounds)
            gradients, hessian, fewer = np.array([each]), each, ""
        for verb, share, dim, what in (("secure_gradients", float(np.min(gradients)), n_params, "a gradient"),
                                       ("secure_hessians", hessian, n_params * (n_params + 1) // 2, "a Hessian")):
            need, got = least_round_mu(verb, dim), mu * math.sqrt(share)
            if got < need:
                raise ValueError(
                    f"aggregation='secure' cannot serve this schedule: {what} release gets at most mu = {got:.3g} (a "
                    f"share {share:.3g} of the estimation's mu^2, mu = {mu:.3g}), below the {need:.3g} that the integer "
                    f"noise of a secure sum of {dim} coordinates needs whatever the data; refused before any release. "
                    f"A larger mu, {fewer}or aggregation='local'.")

    def _explicit_split(self) -> np.ndarray:
        """The user's ``budget_split``, checked."""
        try:
            shares = np.array(self.budget_split, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"budget_split must be 'auto' or an array of shape (n_rounds, 2), "
                             f"got {self.budget_split!r}.") from None
        if shares.ndim != 2 or shares.shape[1] != 2 or shares.shape[0] < 1:
            raise ValueError(f"budget_split must have shape (n_rounds, 2) (gradient, Hessian share per round), "
                             f"got {shares.shape}.")
        if self.n_rounds != "auto" and shares.shape[0] != self.n_rounds:
            raise ValueError(f"budget_split has {shares.shape[0]} rounds but n_rounds={self.n_rounds}; give one row per round.")
        if not np.all(np.isfinite(shares)) or np.any(shares < 0):
            raise ValueError("budget_split must hold finite non-negative shares of mu^2.")
        if np.any(shares[:, 0] <= 0) or shares[0, 1] <= 0:
            raise ValueError("every round needs a gradient share > 0, and round 1 a Hessian share > 0 "
                             "(later rounds may reuse it).")
        if abs(shares.sum() - 1.0) > 1e-8:
            raise ValueError(f"budget_split shares of mu^2 must sum to 1 (GDP composition), they sum to {shares.sum():.6g}.")
        return shares

    # ------------------------------------------------------------------ protocol
    def _run(self, session: Session, setup: Setup) -> Run:
        p, m = session.clients.n_params, session.clients.n_clients
        need_gb = m * p * p * 8 / 1e9
        if need_gb > MAX_HESSIAN_GB:
            raise ValueError(
                f"FedIRLS forms a {p} x {p} Hessian on every client ({need_gb:.1f} GB for {m} clients, limit "
                f"{MAX_HESSIAN_GB} GB); reduce the number of parameters (features x (classes - 1)) or use FedAvg / Scaffold."
            )
        fit = ScheduledRun(self.plan_schedule(session.clients.family, session.sizes, setup, p), session,
                           fitting_labels(self, p))
        run = fit.walk()
        self.budget_split_, self.hessian_floor_ = fit.budget_split, fit.hessian_floor
        return run

    def plan_schedule(self, family, sizes: np.ndarray, setup: Setup, n_params: int) -> IRLSSchedule:
        """The schedule of a fit with these public settings (client sizes n_i, the first phase's bounds and the
        estimation mu of ``setup``, the family, the number of parameters): the fit's own, and the one
        :func:`~privfedstat.planning.power.plan_study` walks on a design."""
        optimal = isinstance(self.weights, str) and self.weights == "optimal"  # size weights until the refine rounds
        weights = np.asarray(sizes, dtype=np.float64) / np.sum(sizes) if optimal else weights_for(self, sizes, n_params,
                                                                                                   setup.clip)
        return IRLSSchedule.of(self, family, sizes, weights, setup, n_params)
