"""FedIRLS: private Newton / IRLS with the gradient and the Hessian aggregated on the server.

Every round each client releases its clipped mean gradient and its clipped mean Hessian (one
Gaussian mechanism each, through the Channel); the server averages them, floors the eigenvalues
of the averaged Hessian (post-processing) and takes a Newton step. This is the noisy Newton
method of Avella-Medina, Bradshaw & Loh (2023) in the federated setting, with the budget split
derived for the error of the final iterate rather than spread evenly over the releases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._linalg import MAX_HESSIAN_GB, floor_eigenvalues, vec_to_sym
from .._validation import DIVERGENCE_NORM, check_iterate, check_positive_float, check_positive_int
from ..families import get_family
from ..federation.protocol import Run, Setup, parameter_basis, reference_map
from ..federation.queries import search_bounds
from ..federation.session import Session
from ..fitting.base import FederatedEstimator
from ..fitting.stages import bound_search, pending_bounds, resolve_weights, weights_for
from ..privacy.calibration import aggregated_noise_sd, auto_budget_split, calibrated_sigma, hessian_sensitivity
from ..privacy.clipping import AutoClip
from ..theory.noise import IRLSNoise

__all__ = ["FedIRLS"]

#: the cap on rounds when ``n_rounds="auto"`` with mu = inf, where rounds continue until the step is below ``tol``
MAX_ROUNDS_NONPRIVATE = 100
#: private rounds of the automatic schedule: locate rounds from theta^(0) with the bounds chosen there, then refine
#: rounds from the located point with bounds searched again at it
LOCATE_ROUNDS = 4
#: shares of the estimation mu^2: all locate rounds together (equal, gradient and Hessian halves) and the new search
LOCATE_SHARE, RESEARCH_SHARE = 0.25, 0.05
#: shares of the rest among the refine rounds (rows: gradient, Hessian): two Hessians, the last one reused by the
#: last gradient, which gets 45% (measured on real designs, where the derivation's ``||H^-1|| ~ 2 / ell''(0)``
#: understates the Hessian's weight and its tiny Hessian shares left the refine steps noisy); the second gradient,
#: where the last step starts, gets more than the first: a Newton step from a noisy point is biased by its
#: curvature's change times that point's noise variance (see ``REFINE_SPLIT_UNBOUNDED``)
REFINE_SPLIT = np.array([[0.1, 0.15], [0.15, 0.15], [0.45, 0.0]])
#: the same for families of unbounded curvature (Poisson): four rounds, their Hessian moves fast along the path, so
#: two fresh Hessians (at the located point and one round on), reused by two gradients; heavy-tailed counts need
#: large Hessian bounds, whose noise, split over four fresh Hessians, raised the eigenvalue floors that damp the steps.
#: The last step starts from the third round's point, and a Newton step on a convex mean function from a noisy point
#: is biased by about half its curvature times that point's noise variance (the intercept of a log-linear model
#: lands low, by Jensen's inequality): the third gradient gets twice the share of the first two
REFINE_SPLIT_UNBOUNDED = np.array([[0.05, 0.2], [0.05, 0.2], [0.1, 0.0], [0.4, 0.0]])
#: the eigenvalue floor is this many standard deviations of a noisy eigenvalue (measured)
FLOOR_NOISE_SDS = 3.0
#: the estimate is not an optimum along a direction whose floored Newton steps over the last phase kept more than
#: this share of its error (the rounds removed less than a fifth of it; measurements in benchmarks/RESULTS.md,
#: "Real data with natural sites")
DAMPED_KEPT = 0.8
#: families of unbounded curvature: the gradients' change along the last step is trusted as curvature when it
#: exceeds this many standard deviations of its noise (see ``_secant_scale``)
SECANT_NOISE_SDS = 3.0
#: the most the secant may raise the Newton matrix by
MAX_SECANT_SCALE = 10.0
#: ``AutoClip.coarse_lean`` of ``clip="auto"``: the refine rounds' whitened norms (about sqrt(p) times a residual)
#: sit near the public grid's middle, so the 99.9% search's coarse queries lie above the data's top, where a wrong
#: upward decision sends the bound 30-1000 times too high; 1 lowered the effective quantile too far where it lies
#: next to the grid's middle point (measured in benchmarks/RESULTS.md, "FedIRLS whitened refine rounds")
COARSE_LEAN = 0.5
#: whitened refine rounds: the searched gradient bound is raised by up to ``INSURANCE_STEPS`` points of the public grid
#: while the planned noise sd of the last gradient, per whitened coordinate, stays at most ``INSURANCE_SD / sqrt(N)``
#: (see ``insured_bounds``)
INSURANCE_SD, INSURANCE_STEPS = 0.4, 3
#: step halvings tried before a non-private round gives up on decreasing the gradient norm
MAX_HALVINGS = 60


class FedIRLS(FederatedEstimator):
    """Private federated Newton / IRLS with server-side aggregation of gradients and Hessians.

    Round r = 1, ..., R at the current theta (theta^(0) = 0):

    1. Client i releases its mean gradient, per-sample gradients clipped to norm B, with
       sensitivity ``2 B / n_i`` and budget ``mu_{g,r}``, and ``sym_to_vec`` of its mean Hessian
       (over all rows, not the Jacobian of the clipped score, which leaves out the rows whose
       gradient is clipped, since a clipped row's gradient ``B sign(ell') x / ||x||`` does not
       move with theta: near the root, with the bound searched there, few rows are clipped and
       the two nearly agree; away from it, where many rows may be clipped, the Jacobian is small
       next to its noise and the steps overshoot -- Poisson, B = 6: a 2-cycle between 0.2 and 0.9
       -- and a reused Hessian keeps the cycle to the last round, whereas the all-rows Hessian is
       never below the Jacobian: the steps only shorten, converging linearly at the clipped
       rows' share of the curvature), per-sample Hessians
       clipped to Frobenius norm C_H, with sensitivity ``sqrt(2) C_H / n_i``
       (:func:`hessian_sensitivity`: PSD Hessians make this the tight bound) and budget
       ``mu_{H,r}``. The Gaussian noise on the vector is symmetric Gaussian noise on the matrix:
       variance ``sigma^2`` on the diagonal and ``sigma^2 / 2`` off it (half the off-diagonal
       variance of noise added to the raw upper triangle, whose sensitivity is the same).
    2. The server averages with weights w_i: ``g = sum_i w_i g_i``, ``H = sum_i w_i H_i``,
       floors the eigenvalues of H at lambda (post-processing) and steps
       ``theta <- theta - eta H^{-1} g``, cut to the trust region (``max_step``).

    **Schedule** (``n_rounds="auto"``, ``budget_split="auto"``, finite mu; inferred and measured,
    not from a paper): *locate* -- ``LOCATE_ROUNDS`` = 4 rounds from theta = 0 with the bounds
    chosen at theta = 0 (``clip="auto"``: the 90% quantiles of the norms there; for families of
    unbounded curvature the Hessian bound at the 99.9% quantile, see ``_default_search``), sharing
    ``LOCATE_SHARE`` = 25% of the estimation mu^2 equally (gradient and Hessian halves); then the
    bounds are searched again at the located point for ``AutoClip.pilot_quantile`` (99.9%) with
    ``RESEARCH_SHARE`` = 5% (stages ``irls-clip-*``; its norms are the ones the last rounds clip,
    and near the optimum residuals are smaller than at 0, so the bias of the clipped equation
    shrinks); *refine* -- the rest in ``REFINE_SPLIT`` (3 rounds: two Hessians, the last
    gradient 45% of it; families of unbounded curvature ``REFINE_SPLIT_UNBOUNDED``, 4 rounds:
    their Hessian moves fast along the path). With both bounds searched again, the search, the
    refine rounds and the inference run *whitened* (:func:`whitening`): the clients map their rows
    by ``Hf^{-1/2}`` of the last locate round's floored Hessian (a multinomial model's clients also take as
    reference the class under which that map whitens best, :func:`reference_class`; the coefficients are reported
    for the model's own reference), so the isotropic noise of the
    releases is shaped like the sampling noise in theta rather than swamping the directions of
    small curvature (inferred; measured in ``benchmarks/RESULTS.md``, "FedIRLS whitened refine
    rounds"); ``clip_`` and the bounds are then norms in that basis, and the gradient bound found is
    raised by up to ``INSURANCE_STEPS`` grid points where its noise stays small next to the sampling error
    (:meth:`insured_bounds`: insurance against a clipping bias the search's counts cannot resolve). For families of bounded
    curvature the trust region grows with the iterate (``max(max_step, ||theta||)``): a loss that grows at most
    quadratically cannot be overshot into overflow, and the reach of a step doubles round by round
    (still short for a Gaussian response tens of residual sds from 0, which the private scaling
    therefore locates: ``PrivateStandardize.response``). Real data with natural sites
    (benchmarks/RESULTS.md, "Real data with natural sites"): the single-phase split derived
    below starved the early rounds (shares 1e-4 of mu^2: noise-driven, floor-damped steps) and
    stopped 5-500 SE from the MLE where the optimum is far from 0. An int ``n_rounds`` or an
    explicit ``budget_split`` runs one phase of R rounds on the derived or given split, with the
    bounds chosen before it.

    A round with a zero Hessian share reuses the last released Hessian (a quasi-Newton step).
    Each client is ``mu``-GDP: the releases compose to ``sqrt(sum_r mu_{g,r}^2 + mu_{H,r}^2 +
    mu_search^2) = mu`` (after the clip and scaling budgets). With ``mu = inf`` nothing is
    noised; each step is then halved until the aggregated loss does not increase or the
    aggregated gradient gets shorter (rejected trials cost a round), and the rounds stop when the
    step is below ``tol``.

    **Budget split of one phase (derivation).** Near the optimum theta-hat (Hessian H), a round with released
    ``g + xi_r`` and ``H + Xi_r`` leaves ``e_r = theta_r - theta-hat ~ H^{-1} Xi_r e_{r-1} -
    H^{-1} xi_r``: Newton forgets the previous error up to the Hessian's relative error and adds
    the new gradient noise. With shares g_r, h_r of mu^2 (``mu_{g,r}^2 = g_r mu^2``),
    ``A = tr(H^{-2}) sum_i w_i^2 (2B/n_i)^2 / mu^2`` and (as ``E||Xi u||^2 = s^2 (p + 1)/2`` for
    symmetric noise of diagonal variance s^2 and a unit u)
    ``beta = ||H^{-1}||^2 (p + 1)/2 sum_i w_i^2 (sqrt(2) C_H/n_i)^2 / mu^2``::

        E||e_R||^2 ~ A/g_R + (beta/h_R)(A/g_{R-1}) + (beta/h_R)(beta/h_{R-1})(A/g_{R-2}) + ...

    a posynomial minimised subject to ``sum_r g_r + h_r = 1``. At the optimum each share is
    proportional to the sum of the terms it appears in: h_r and g_{r-1} (which only appear
    together) get equal shares, and the two leading terms give the last gradient the share f and
    ``h_R = g_{R-1} = x`` with ``x^3 = beta f^2`` (Lagrange). The last gradient's noise is the
    only one not forgotten, so it takes most of the budget (f = 0.7-0.95 for beta = 1e-3-1e-6).
    Going back the model predicts shares shrinking by ``(beta/f)^(2/9)`` (0.1-0.3) per round,
    but the first rounds also carry Newton's non-linear phase from theta = 0 (not in the
    model), so they shrink by the measured ``q = 0.35`` (:func:`auto_budget_split`). In beta,
    ``||H^{-1}||`` is replaced by ``2 / ell''(0)`` (half the family's curvature at 0 is a typical
    smallest eigenvalue for standardised covariates; measured better than 1, 4 or 8 / ell''(0)),
    so the split depends only on public quantities and the clipping bounds released before it:
    given them, the estimation stage is a fixed composition of Gaussian mechanisms with total mu.

    **Eigenvalue floor** ("auto"): 3 standard deviations of a noisy eigenvalue, ``3 s`` with
    ``s^2 = sum_i w_i^2 sigma_{H,i}^2`` (the variance of ``v^T Xi v`` for a unit v), and at least
    1e-8 ell''(0). A floor damps the step along eigenvalues below it, so a high floor leaves a
    bias after R rounds on ill-conditioned designs: on ``fair`` (below, z-scored, B = C_H = 5,
    mu = 2) 1.4 SE with 3 s, 4.0 SE with 2 s sqrt(2p) (the spectral norm of the noise), at
    equal accuracy on the Fig. 5 design; floors of 2 s or less occasionally blew up. It is
    post-processing (unlike FedNewton's, which bounds a sensitivity) and vanishes as N grows.

    **Clipped-objective bias.** With finite B (any mu) the fixed point solves
    ``sum_i w_i mean_j clip_B(grad_j(theta)) = 0``, the minimiser of a Huberised loss, not the
    MLE; with mu = inf, ``clip=inf`` gives the MLE. Fig. 5 design (MLE MSE 0.0013): MSE 0.020
    at mu = 1e6 with ``clip="auto"`` (B = 1.55, the 90% quantile of norms at theta = 0) and 0.004
    with ``AutoClip(quantile=0.99)`` (B = 1.93): at the optimum misclassified rows have larger
    gradients than at 0. C_H does not move the fixed point, but clipped rows keep their Hessian
    while their clipped gradient is locally constant, so the rounds converge only linearly where
    many rows are clipped (Fig. 16 Poisson design, m = 25, B = 7.2: 0.73 per round, MSE 0.0022
    after 5 rounds, 0.0002 at the fixed point).

    Notes
    -----
    Noise error ``E||theta - theta_B||^2`` against the noiseless fit with the same clipping
    (Fig. 5 logistic design, N = 20000, B = 2, C_H = 1.5, 30 replicates):

    ==================  =======  =======  =======  =======  =======  =======
    m, mu               25, 2    25, 0.5  100, 2   100, 0.5 400, 2   400, 0.5
    ==================  =======  =======  =======  =======  =======  =======
    even split (R = 4)  0.00039  0.0062   0.0016   0.026    0.0058   0.099
    auto split (R = 5)  0.00005  0.00086  0.00018  0.0038   0.00094  0.023
    ==================  =======  =======  =======  =======  =======  =======

    (even: Avella-Medina et al.'s mu / sqrt(2R) per release; the auto split was within 2% of
    the best of 48 fixed splits on average). MSE against beta_true on the same design (mu = 2,
    equal sizes, 20 replicates; pooled MLE 0.0017 / 0.0014 / 0.0011):

    ==========================  =======  =======  =======
    m (n_i)                     25 (800) 100(200) 400 (50)
    ==========================  =======  =======  =======
    FedSGD                      0.0106   0.0101   0.0111
    FedAvg                      0.0250   0.0352   0.2205
    FedNewton                   0.0177   0.0293   0.3143
    FedIRLS                     0.0235   0.0227   0.0227
    FedSGD, quantile 0.99       0.0023   0.0022   0.0034
    FedNewton, quantile 0.99    0.0046   0.0134   0.4778
    FedIRLS, quantile 0.99      0.0049   0.0047   0.0056
    ==========================  =======  =======  =======

    FedIRLS does not degrade with many small clients, where FedNewton (a Newton step inverted on
    each client, on half its rows) fails; its error is the clipping bias above (FedSGD's 50
    steps from 0 stop short of the clipped optimum, which offsets the bias on this design). On
    the ``fair`` data (statsmodels; affairs > 0, 8 covariates, N = 6366 over 10 random sites,
    ``glm()`` defaults, median of 5 seeds of max |coef - MLE| / SE): mu = inf 0.000 SE in 0.1 s
    (FedSGD 0.15 in 5.7 s, FedAvg 0.15, Scaffold 1.7, FedNewton 2.1); mu = 2 5.4 SE (Scaffold
    9.2, FedAvg 9.3, FedNewton 11.9, FedSGD 12.2), limited by the clipping bias and by the
    private scaling (smallest Hessian eigenvalue 0.0018 after it, 0.015 with z-scores); with
    z-scores and B = C_H = 5, 1.4 SE.

    Parameters
    ----------
    family : str or Family, default "logistic"
        Any family: logistic, poisson, gaussian, huber (Newton weights ell'', the IRLS weights),
        multinomial (parameter matrix; Hessians of size (d (K-1))^2 per client, at most
        ``MAX_HESSIAN_GB`` for all clients).
    mu : float, default 2.0
        GDP budget per client (mu); ``inf`` for no privacy.
    n_rounds : int or "auto", default "auto"
        Rounds (R). "auto": with finite mu the schedule above (7 rounds; 9 for unbounded
        curvature); with mu = inf until the step is below ``tol`` (at most 100). An int: one
        phase of R rounds (with mu = inf a cap; the rounds also stop at ``tol``).
    budget_split : "auto" or array of shape (R, 2), default "auto"
        Shares of mu^2 for the gradient (column 0) and Hessian (column 1) release of each
        round. "auto": the schedule above (with an int ``n_rounds``: the derived split). An
        array: one phase, non-negative, summing to 1, every gradient share and the first
        Hessian share > 0; a zero Hessian share reuses the last Hessian.
    step_size : float, default 1.0
        Newton step length (eta); 1 is the full step.
    max_step : float, default 2.0
        With finite mu: trust region, the largest Euclidean norm of one update on the fitting
        (scaled) coordinates (for families of bounded curvature ``max(max_step, ||theta||)``);
        a longer Newton step is shortened to it (post-processing). Without
        it, Newton from theta = 0 overshoots where the curvature grows fast along the path (the
        Poisson family) and, with no private loss to backtrack on, does not recover: on
        ``randhie`` (Poisson, 20 sites, mu = 2, 3 seeds) max |coef - MLE| / SE was 115-235 with
        no region, 9-30 with 2 and 8-23 with 1, while on ``fair`` (logistic) 2 changed nothing
        and 1 cost up to 2 SE. With mu = inf the step is backtracked on the loss instead. A last
        step cut to it while far longer than its noise means the path was still travelling when
        the rounds ran out: the fit warns (ConvergenceWarning), ``converged_`` is False and the
        intervals are withheld.
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B).
    hessian_clip : float or None, default None
        Bound on per-sample Hessian Frobenius norms (C_H). None: chosen like ``clip`` (shares
        the clip budget with it; infinite if clip is); with a finite numeric ``clip``, chosen
        privately as by ``clip="auto"`` (the clip budget goes to it alone; infinite with mu = inf).
    hessian_floor : float or "auto", default "auto"
        Eigenvalue floor lambda for the averaged Hessian (post-processing).
    weights : "size" or array of shape (n_clients,), default "size"
        Server aggregation weights (w_i).
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

    Attributes
    ----------
    budget_split_ : ndarray of shape (n_iter_, 2)
        The shares of the estimation mu^2 used by each round (with the automatic schedule they
        sum to 1 - ``RESEARCH_SHARE`` when the bounds were searched again; with mu = inf: ones).
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

    @property
    def _default_search(self) -> AutoClip:
        """``clip="auto"``: the bounds at theta^(0) (no FedSGD pilot: the locate rounds are the pilot, and the
        bounds are searched again at their end for ``pilot_quantile``). For families of unbounded curvature
        the Hessian bound of the locate rounds is the ``pilot_quantile`` of the norms at theta^(0): there
        every Poisson row has weight ``exp(0) = 1``, while along the path the weights follow the fitted means,
        so a 90% bound clips most rows once the intercept moves, the clipped Hessian is several times too
        small, and the steps overshoot into a 2-cycle (noise-free, three overdispersed count data sets:
        15-115 SE from the MLE after the locate rounds; with the 99.9% bound, 4-7x the 90% one, 3-10 SE)."""
        if math.isfinite(get_family(self.family).max_curvature):
            return AutoClip(coarse_lean=COARSE_LEAN)
        return AutoClip(hessian_quantile=AutoClip.pilot_quantile, coarse_lean=COARSE_LEAN)

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
        weights="size",
        scaling=None,
        tol: float = 1e-10,
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference="auto",
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

    # ------------------------------------------------------------------ parameters
    def _validate_params(self, mu: float) -> None:
        super()._validate_params(mu)
        if self.n_rounds != "auto":
            check_positive_int(self.n_rounds, "n_rounds")
        if self.hessian_floor != "auto":
            check_positive_float(self.hessian_floor, "hessian_floor")
        check_positive_float(self.tol, "tol")
        check_positive_float(self.max_step, "max_step", allow_inf=True)
        if math.isfinite(mu) and self.hessian_clip is not None and math.isinf(float(self.hessian_clip)):
            raise ValueError("hessian_clip=inf gives the Hessian release infinite sensitivity; it needs mu=inf.")
        if not (isinstance(self.budget_split, str) and self.budget_split == "auto"):
            self._explicit_split()

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

    def _rounds(self) -> int:
        """R of one phase: ``n_rounds``, the explicit split's length, or the mu = inf cap."""
        if self.n_rounds != "auto":
            return int(self.n_rounds)
        if not (isinstance(self.budget_split, str) and self.budget_split == "auto"):
            return len(self.budget_split)
        return MAX_ROUNDS_NONPRIVATE

    # ------------------------------------------------------------------ protocol
    def _run(self, session: Session, setup: Setup) -> Run:
        p, m = session.clients.n_params, session.clients.n_clients
        need_gb = m * p * p * 8 / 1e9
        if need_gb > MAX_HESSIAN_GB:
            raise ValueError(
                f"FedIRLS forms a {p} x {p} Hessian on every client ({need_gb:.1f} GB for {m} clients, limit "
                f"{MAX_HESSIAN_GB} GB); reduce the number of parameters (features x (classes - 1)) or use FedAvg / Scaffold."
            )
        w = resolve_weights(self, session, setup.clip)
        if math.isinf(setup.mu):
            return self._run_exact(session, setup, w)
        return self._run_private(session, setup, w)

    def _phased(self) -> bool:
        """Whether the private rounds run as locate + refine (the automatic schedule)."""
        return self.n_rounds == "auto" and isinstance(self.budget_split, str)

    def _run_private(self, session: Session, setup: Setup, w: np.ndarray) -> Run:
        """Noisy Newton rounds: one phase on the given schedule, or locate + (new bounds) + refine."""
        family, sizes, p = session.clients.family, session.sizes, session.clients.n_params
        rounds = _Rounds(self, session, w, session.clients.initial_parameters())
        phases = self._phases(family, sizes, w, setup, p)
        rounds.run(phases[0])
        if len(phases) == 1:
            self.budget_split_ = phases[0].shares
            return rounds.result(None)
        todo, mu_search = self.refine_search(setup.mu)
        basis, reference = None, 0
        if self._whitens(todo):
            reference = reference_class(rounds.H_floored, family.n_outputs)
            basis = whitening(rounds.H_floored, family.n_outputs, reference)
            rounds.change_basis(basis, reference)
        with session.rows_mapped(basis, reference):  # after it the later stages (diagnostics, inference) read the fitting columns
            final = None
            if todo:  # the bounds at the located point: its per-sample norms are the ones the refine rounds clip
                config = bound_search(self)
                found = search_bounds(session, todo, rounds.theta, config.pilot_quantile, config, mu_search,
                                      stage="irls-clip")
                if basis is not None:
                    found = self.insured_bounds(found, sizes, w, setup, family, p)
                final = Setup(found.get("gradient", setup.clip), found.get("hessian", setup.hessian_clip), setup.mu)
            refine = self._phases(family, sizes, w, setup, p, final)[1]
            rounds.run(refine)
        self.budget_split_ = np.vstack([phases[0].shares, refine.shares])
        return rounds.result(final)

    def insured_bounds(self, found: dict[str, float], sizes: np.ndarray, w: np.ndarray, setup: Setup, family, p: int
                       ) -> dict[str, float]:
        """The whitened refine rounds' bounds: ``found`` by the search at the located point, the gradient bound raised
        by ``j <= INSURANCE_STEPS`` points of the search's public grid (x1.245 each), the largest ``j`` at which
        the last gradient's planned noise sd stays at most ``INSURANCE_SD / sqrt(N)`` (post-processing of the
        released bound and public sizes and budgets).

        Insurance against the bias of the clipped estimating equation (inferred; measured in
        ``benchmarks/RESULTS.md``). The search leans ``margin`` count-noise sds below its 99.9% target, so with
        many sites it clips many more rows than 0.1% (its count noise is ``sqrt(m) / mu_q`` rows), and where
        the clipped gradients' tail is asymmetric (a skewed residual) the root moves by a distance that the
        counts cannot resolve and that grows like sqrt(N) in standard errors. A larger bound costs noise in
        proportion to it; in whitened coordinates the sampling sd of a coordinate is about ``1 / sqrt(N)`` for
        families of unit dispersion, so the raise is taken only where the privacy noise stays a small part of
        the error: at most ``INSURANCE_SD^2`` = 16% of that variance (intervals at most 8% wider). A Gaussian
        response has its residual variance on the fitting scale (below 1 once the private scaling located it),
        so there the raised noise may reach the sampling error (measured widths in ``benchmarks/RESULTS.md``).
        """
        if "gradient" not in found:
            return found
        grid = bound_search(self).grid
        i = int(np.argmin(np.abs(grid - found["gradient"])))
        sd = float(self._phases(family, sizes, w, setup, p, Setup(found["gradient"], found.get("hessian", setup.hessian_clip),
                                                                  setup.mu))[1].gradient_sd[-1])
        ceiling = INSURANCE_SD / math.sqrt(float(np.sum(sizes)))
        j = 0
        while j < INSURANCE_STEPS and i + j + 1 < grid.size and sd * grid[i + j + 1] / grid[i] <= ceiling:
            j += 1
        return dict(found, gradient=float(grid[i + j]))

    def _whitens(self, todo: list[str]) -> bool:
        """Whether the refine rounds run whitened (:func:`whitening`): the automatic schedule, with both bounds
        searched again at the located point (a bound the user fixed keeps its meaning on the fitting columns)."""
        return set(todo) == set(self._norms)

    def refine_search(self, mu: float) -> tuple[list[str], float]:
        """The norms whose bounds the automatic schedule searches again between its phases, and the
        search's budget, for estimation budget ``mu`` (``RESEARCH_SHARE`` of mu^2).

        Those the fit chose by a private search (:func:`~privfedstat.fitting.stages.pending_bounds`);
        none (and budget 0) when the rounds run as one phase, with fixed bounds, or with mu = inf.
        """
        if not (self._phased() and math.isfinite(mu)):
            return [], 0.0
        _, todo, how = pending_bounds(self, mu)
        return (todo, mu * math.sqrt(RESEARCH_SHARE)) if how == "search" else ([], 0.0)

    def _phases(self, family, sizes: np.ndarray, w: np.ndarray, setup: Setup, p: int, refine: Setup | None = None
                ) -> list[_Phase]:
        """The private phases and their releases, public and fixed before each phase's first round.

        One phase (an int ``n_rounds`` or an explicit ``budget_split``), or locate (the bounds of
        ``setup``) and refine (the bounds of ``refine``, those searched at the located point;
        default ``setup``'s), the latter with what the new search leaves.
        """
        mu = setup.mu
        if not self._phased():
            shares = (self._explicit_split() if not isinstance(self.budget_split, str)
                      else auto_budget_split(self._rounds(), self._beta(family, sizes, w, setup.hessian_clip, mu, p)))
            return [_phase(self, family, sizes, w, shares, setup)]
        locate = np.full((LOCATE_ROUNDS, 2), LOCATE_SHARE / (2 * LOCATE_ROUNDS))
        left = 1.0 - LOCATE_SHARE - (RESEARCH_SHARE if self.refine_search(mu)[0] else 0.0)
        split = REFINE_SPLIT if math.isfinite(family.max_curvature) else REFINE_SPLIT_UNBOUNDED
        return [_phase(self, family, sizes, w, locate, setup),
                _phase(self, family, sizes, w, left * split, setup if refine is None else refine)]

    def planned_basis(self, sizes, setup: Setup, family, newton_matrix: np.ndarray) -> np.ndarray | None:
        """The basis a fit with these public settings runs its refine rounds in (:func:`whitening`), planned.

        The fit whitens with the floored Hessian its last locate round released; here that Hessian
        is ``newton_matrix`` (noise-free, at the located point, fitting scale) floored at that round's
        floor. None when the fit would not whiten (:meth:`_whitens`).
        """
        if not self._whitens(self.refine_search(setup.mu)[0]):
            return None
        n = np.asarray(sizes, dtype=np.float64)
        p = newton_matrix.shape[0]
        locate = self._phases(family, n, weights_for(self, n, p, setup.clip), setup, p)[0]
        return whitening(floor_eigenvalues(np.asarray(newton_matrix, dtype=np.float64), float(locate.floors[-1])),
                         family.n_outputs)

    def planned_noise_model(self, sizes, setup: Setup, family, newton_matrix: np.ndarray,
                            refine: Setup | None = None, basis: np.ndarray | None = None) -> IRLSNoise:
        """The privacy-noise model a fit with these public settings reports, before any data are seen.

        A fit's :class:`~privfedstat.theory.noise.IRLSNoise` is a function of public quantities
        (the client sizes n_i, the bounds and estimation budget of ``setup``, the bounds the
        refine phase searches, the family, the parameters) and of the floored Hessian the last
        round releases; here that Hessian is ``newton_matrix`` floored at the last round's floor
        (the noise-free Newton matrix of a planned design: the mean of per-sample Hessians
        clipped at C_H, as the rounds release it). Used by
        :func:`~privfedstat.planning.power.plan_study`; every round is assumed to run.

        Parameters
        ----------
        sizes : array of shape (n_clients,)
            n_i.
        setup : Setup
            B, C_H of the first phase and the estimation mu.
        family : Family
        newton_matrix : ndarray of shape (p, p)
            Symmetric positive definite, on the fitting scale.
        refine : Setup, optional
            The bounds of the refine phase (:meth:`refine_search`); default ``setup``'s.
        basis : ndarray of shape (d, d), optional
            The map of the rows in the refine rounds (:meth:`planned_basis`); ``newton_matrix`` and
            ``refine``'s bounds are then in its coordinates phi, and so are the model's H and
            covariance (:meth:`IRLSNoise.in_basis`).

        Returns
        -------
        IRLSNoise
        """
        n = np.asarray(sizes, dtype=np.float64)
        p = newton_matrix.shape[0]
        w = weights_for(self, n, p, setup.clip)
        phases = self._phases(family, n, w, setup, p, refine)
        last = floor_eigenvalues(np.asarray(newton_matrix, dtype=np.float64), float(phases[-1].floors[-1]))
        rounds = (np.concatenate([ph.gradient_var for ph in phases]), np.concatenate([ph.hessian_var for ph in phases]),
                  np.concatenate([ph.floors for ph in phases]), float(self.step_size), last)
        if basis is None:
            return IRLSNoise(*rounds)
        return IRLSNoise(*rounds, parameter_basis(basis, p), len(phases[0].shares)).in_basis()

    def _beta(self, family, sizes: np.ndarray, w: np.ndarray, hessian_clip: float, mu: float, p: int) -> float:
        """beta of the budget-split derivation for Hessian bound C_H, budget ``mu`` and p parameters (public)."""
        c0 = float(family.curvature_at_zero)
        sens_h = hessian_sensitivity(hessian_clip, sizes)
        return (p + 1) / 2 * float(np.sum((w * sens_h) ** 2)) * (2.0 / c0) ** 2 / mu**2

    def _run_exact(self, session: Session, setup: Setup, w: np.ndarray) -> Run:
        """mu = inf: Newton rounds on exact aggregates, each step halved until the loss or the gradient norm decreases."""
        p, clip, hessian_clip = session.clients.n_params, setup.clip, setup.hessian_clip
        R = self._rounds()

        def gradient_and_loss(theta):
            loss = float(session.mean("losses", weights=w, theta=theta, stage="irls-loss")[0])
            g = session.mean("gradients", weights=w, theta=theta, clip=clip, sensitivity=2.0 * clip / session.sizes,
                             mu=math.inf, stage="irls-gradient")
            return g, loss

        theta = session.clients.initial_parameters()
        path = [theta]
        g, f = gradient_and_loss(theta)
        H, lam, n_iter = None, math.nan, 0
        sens_h = hessian_sensitivity(hessian_clip, session.sizes)
        fresh = np.ones(R, dtype=bool) if isinstance(self.budget_split, str) else self._explicit_split()[:, 1] > 0
        for r in range(R):
            if fresh[r]:
                H = vec_to_sym(session.mean("hessians", weights=w, theta=theta, hessian_clip=hessian_clip,
                                            sensitivity=sens_h, mu=math.inf, stage="irls-hessian"), p)
                lam = self._floor(session.clients.family, 0.0)
                H_floored = floor_eigenvalues(H, lam)
            step = self.step_size * np.linalg.solve(H_floored, g)
            n_iter += 1
            if _negligible(step, theta, self.tol):
                path.append(theta - step)
                theta = path[-1]
                break
            accepted = _safeguarded_step(theta, step, g, f, gradient_and_loss)
            if accepted is None:  # no decrease along the Newton direction: at the optimum up to rounding
                break
            theta, g, f = accepted
            path.append(theta)
        self.budget_split_ = np.ones((n_iter, 2))
        self.hessian_floor_ = lam
        noise_model = IRLSNoise(np.zeros(n_iter), np.zeros(n_iter), np.full(n_iter, lam), float(self.step_size),
                                H_floored)
        return Run(theta, path, n_iter, hessian=H, noise_model=noise_model, weights=w)

    def _noise(self, H_floored: np.ndarray, gradient_sd: np.ndarray, basis: np.ndarray | None = None
               ) -> tuple[np.ndarray, float]:
        """Noise sd of the estimate and of the last update, per coordinate of theta (for the diagnostics).

        The last step adds ``eta H^{-1} xi_R`` (sd ``s_R sqrt(diag(H^{-2}))`` for gradient noise of
        sd s_R per coordinate; with the rounds in phi, ``theta = basis phi``, the step in theta is
        ``eta basis H^{-1} xi_R``); the last update also removes the noise that round R - 1 left.
        """
        M = np.linalg.inv(H_floored) if basis is None else basis @ np.linalg.inv(H_floored)
        scale = self.step_size * np.sqrt(np.sum(M**2, axis=1))
        return gradient_sd[-1] * scale, float(np.max(np.sqrt(np.sum(gradient_sd[-2:] ** 2)) * scale))

    def _floor(self, family, noise_sd: float) -> float:
        """Eigenvalue floor lambda for a Hessian whose averaged noise has diagonal sd ``noise_sd``."""
        if self.hessian_floor != "auto":
            return float(self.hessian_floor)
        tiny = 1e-8 * float(family.curvature_at_zero)
        return max(tiny, FLOOR_NOISE_SDS * noise_sd)


@dataclass(frozen=True)
class _Phase:
    """The releases of one phase of private rounds, public and fixed before its first round.

    Per round: the shares of the estimation mu^2 (gradient, Hessian), their budgets, and the
    floor, diagonal noise variance of the Hessian the step uses (a round with Hessian share 0
    repeats the last released one's) and the aggregated gradient noise's variance and sd, as
    :class:`~privfedstat.theory.noise.IRLSNoise` takes them; the bounds B and C_H and the clients'
    sensitivities ``2 B / n_i`` and ``sqrt(2) C_H / n_i``.
    """

    shares: np.ndarray
    clip: float
    hessian_clip: float
    gradient_sensitivity: np.ndarray
    hessian_sensitivity: np.ndarray
    mu_gradient: np.ndarray
    mu_hessian: np.ndarray
    floors: np.ndarray
    hessian_var: np.ndarray
    gradient_var: np.ndarray
    gradient_sd: np.ndarray


def _phase(est: FedIRLS, family, sizes: np.ndarray, w: np.ndarray, shares: np.ndarray, setup: Setup) -> _Phase:
    """The :class:`_Phase` of rounds with these shares of ``setup.mu^2`` and ``setup``'s bounds."""
    sens_g, sens_h = 2.0 * setup.clip / sizes, hessian_sensitivity(setup.hessian_clip, sizes)
    mu_g, mu_h = setup.mu * np.sqrt(shares[:, 0]), setup.mu * np.sqrt(shares[:, 1])
    R = len(shares)
    floors, hessian_var = np.empty(R), np.empty(R)
    lam = var = math.nan
    for r in range(R):
        if shares[r, 1] > 0:
            lam = est._floor(family, aggregated_noise_sd(sens_h, mu_h[r], w))
            var = float(np.sum((w * calibrated_sigma(sens_h, mu_h[r])) ** 2))
        floors[r], hessian_var[r] = lam, var
    gradient_var = np.array([float(np.sum((w * calibrated_sigma(sens_g, mu_g[r])) ** 2)) for r in range(R)])
    gradient_sd = np.array([aggregated_noise_sd(sens_g, mu_g[r], w) for r in range(R)])
    return _Phase(shares, setup.clip, setup.hessian_clip, sens_g, sens_h, mu_g, mu_h, floors, hessian_var, gradient_var,
                  gradient_sd)


class _Rounds:
    """The private Newton rounds of one FedIRLS fit: the server's state across phases and the noise it recorded.

    Round r releases the clipped mean gradient at theta and, with a Hessian share > 0, the mean
    of per-sample Hessians clipped at C_H (otherwise the last one is reused), floors its
    eigenvalues and takes the trust-region Newton step.
    """

    def __init__(self, estimator: FedIRLS, session: Session, weights: np.ndarray, theta: np.ndarray) -> None:
        self.est, self.session, self.w = estimator, session, weights
        self.theta, self.path = theta, [theta]
        self.H = self.H_floored = None
        self.lam, self.shortened = math.nan, None
        self.phases: list[_Phase] = []
        self.scales: list[np.ndarray] = []
        # the clients' rows are design^T x from round basis_from on; theta = basis phi (theta, H held in phi)
        self.design = self.basis = None
        self.basis_from = self.reference = 0

    def change_basis(self, design: np.ndarray, reference: int = 0) -> None:
        """From the next round on, the clients' rows are ``design^T x`` (and class ``reference`` their reference class)
        and the server's state is in phi."""
        basis = parameter_basis(design, self.theta.size, reference)
        self.theta = np.linalg.solve(basis, self.theta)
        self.H, self.H_floored = basis.T @ self.H @ basis, basis.T @ self.H_floored @ basis
        self.design, self.basis, self.basis_from, self.reference = design, basis, len(self.path) - 1, reference

    def _in_theta(self, value: np.ndarray) -> np.ndarray:
        return value if self.basis is None else self.basis @ value

    def run(self, phase: _Phase) -> None:
        """The rounds of ``phase``."""
        est, session, w = self.est, self.session, self.w
        p, family = session.clients.n_params, session.clients.family
        sens_g, sens_h = phase.gradient_sensitivity, phase.hessian_sensitivity
        secant = not math.isfinite(family.max_curvature)
        scales = np.ones(len(phase.shares))
        previous = None  # the last step of this phase and the gradient it started from (same bounds)
        for r in range(len(phase.shares)):
            g = session.mean("gradients", weights=w, theta=self.theta, clip=phase.clip, sensitivity=sens_g,
                             mu=phase.mu_gradient[r], stage="irls-gradient")
            if phase.shares[r, 1] > 0:
                self.H = vec_to_sym(session.mean("hessians", weights=w, theta=self.theta,
                                                 hessian_clip=phase.hessian_clip,
                                                 sensitivity=sens_h, mu=phase.mu_hessian[r], stage="irls-hessian"), p)
                self.lam = float(phase.floors[r])
                self.H_floored = floor_eigenvalues(self.H, self.lam)
            if secant and previous is not None:
                scales[r] = _secant_scale(previous[0], g - previous[1], self.H_floored,
                                          float(phase.gradient_var[r - 1] + phase.gradient_var[r]))
            step = est.step_size * np.linalg.solve(scales[r] * self.H_floored, g)
            length, radius = float(np.linalg.norm(step)), float(est.max_step)
            if math.isfinite(family.max_curvature):  # the loss grows at most quadratically: the region may grow with theta
                radius = max(radius, float(np.linalg.norm(self.theta)))
            taken = _within(step, radius)
            self.shortened = ((float(np.linalg.norm(self._in_theta(step))), float(np.linalg.norm(self._in_theta(taken))))
                              if length > radius else None)
            previous = (-taken, g)
            self.theta = self.theta - taken
            check_iterate(self.theta, "FedIRLS", est.step_size)
            self.path.append(self._in_theta(self.theta))
        self.phases.append(phase)
        self.scales.append(scales)

    def result(self, setup: Setup | None) -> Run:
        """The :class:`Run` (``setup``: the bounds of the last phase when they were searched again)."""
        est, phases = self.est, self.phases
        est.hessian_floor_ = self.lam
        scales = np.concatenate(self.scales)  # a secant-raised Newton matrix c Hf: floor c lambda, noise variance c^2 s^2
        newton = scales[-1] * self.H_floored  # the matrix of the last step
        noise_model = IRLSNoise(np.concatenate([ph.gradient_var for ph in phases]),
                                np.concatenate([ph.hessian_var for ph in phases]) * scales**2,
                                np.concatenate([ph.floors for ph in phases]) * scales, float(est.step_size), newton,
                                self.basis, self.basis_from)
        noise_sd, update_noise_sd = est._noise(newton, np.concatenate([ph.gradient_sd for ph in phases]), self.basis)
        hessian = self.H if self.basis is None else np.linalg.solve(self.basis.T, np.linalg.solve(self.basis.T, self.H).T)
        return Run(self._in_theta(self.theta), self.path, len(self.path) - 1, noise_sd=noise_sd,
                   update_noise_sd=update_noise_sd, hessian=(hessian + hessian.T) / 2,
                   hessian_sd=float(scales[-1]) * math.sqrt(float(phases[-1].hessian_var[-1])), shortened=self.shortened,
                   noise_model=noise_model, weights=self.w, setup=setup, damped=_damped(self.H, phases[-1].floors),
                   settle_from=len(self.path) - 1 - len(phases[-1].shares), basis=self.design,
                   reference=self.reference)


def _secant_scale(step: np.ndarray, change: np.ndarray, newton: np.ndarray, noise_var: float) -> float:
    """The factor c >= 1 by which the gradients' change along the last step says the Newton matrix is too flat.

    A per-sample Hessian bound C_H chosen where the curvature was lower (at theta = 0, where every
    Poisson row has weight exp(0) = 1, or at a located point short of the optimum) clips most rows'
    Hessians where the fitted means are larger: the released matrix is then several times too
    flat, each step overshoots, and the rounds fall into a 2-cycle the reused Hessian keeps. The
    released gradients g_{r-1}, g_r (same bounds) measure the clipped score's actual slope along
    the step s = theta_r - theta_{r-1}: ``s^T (g_r - g_{r-1})``, with noise sd
    ``||s|| sqrt(v_{r-1} + v_r)``. Where that slope, lowered by ``SECANT_NOISE_SDS`` noise sds,
    exceeds the Newton matrix's own ``s^T N s``, the step uses c N with c their ratio (at most
    ``MAX_SECANT_SCALE``): post-processing of released values, so no privacy cost; c = 1 where the
    slope is within the noise or the matrix is steep enough (the step is never lengthened).
    Inferred (a scalar secant condition; quasi-Newton methods use it to correct a curvature model).
    """
    slope = float(step @ change) - SECANT_NOISE_SDS * math.sqrt(noise_var) * float(np.linalg.norm(step))
    model = float(step @ newton @ step)
    if not (model > 0 and slope > model):
        return 1.0
    return min(slope / model, MAX_SECANT_SCALE)


def whitening(H_floored: np.ndarray, n_outputs: int = 1, reference: int = 0) -> np.ndarray:
    """The map of the rows ``x -> Hf^{-1/2} x`` (symmetric) under which the floored released Hessian Hf becomes the
    identity; for q = ``n_outputs`` > 1 (multinomial, Hf of size (d q)^2, parameters flat in C order) Hf is replaced
    by the mean of its q diagonal blocks ``X^T W_k X / N`` (a (d, d) map of the rows reaches only the design's
    part of the curvature; the classes' coupling stays), in the coefficients of class ``reference`` as the
    reference (:func:`~privfedstat.federation.protocol.reference_map`; see :func:`reference_class`).

    The refine rounds run in it: the clients map their rows x to ``Hf^{-1/2} x`` (the coefficients
    become ``phi = Hf^{1/2} theta``), clip per-sample gradients there and release noise that is
    isotropic in phi, that is shaped like the sampling noise (``Hf^-1``) in theta. On the fitting
    columns the noise is isotropic while the information is not: along a direction of small
    curvature (a rare binary column, correlated columns) the privacy noise is many times the
    sampling noise while elsewhere it is not. Post-processing of a released Hessian, so the change
    of basis costs no budget; the bounds are searched again in the new basis. Inferred, not from a
    paper (the preconditioning of Newton-type methods, here applied before the clipping).
    """
    H = (H_floored + H_floored.T) / 2
    if n_outputs > 1:
        T = parameter_basis(np.eye(H.shape[0] // n_outputs), H.shape[0], reference)  # the classes' map alone
        H = T.T @ H @ T
        H = np.mean([H[k::n_outputs, k::n_outputs] for k in range(n_outputs)], axis=0)
    vals, vecs = np.linalg.eigh(H)
    return (vecs / np.sqrt(vals)) @ vecs.T


def reference_class(H_floored: np.ndarray, n_outputs: int) -> int:
    """The reference class of a multinomial model's whitened refine rounds (0 for other families): the one under
    which :func:`whitening`'s row map comes closest to whitening the whole floored Hessian Hf.

    A (d, d) map of the rows whitens only the design's part of the curvature; the classes' coupling
    stays, and it is strong when the reference class is rare (each class's coefficients are contrasts
    with it, and they share its sampling noise): the isotropic noise of the rounds is then far from the
    shape of the sampling noise in theta. With Hf ~ A kron C (C the (q, q) traces of its blocks) and
    class j as reference (the clients swap its labels with class 0's; M = :func:`reference_map`,
    ``C_j = M^T C M``), the row map whitens ``A c_j`` (c_j the mean diagonal of C_j), and the isotropic noise
    has covariance ``A^-1 kron c_j C^-1 M^T M C^-1`` in theta against the sampling ``A^-1 kron C^-1``: the
    class whose mean ratio of the two diagonals is smallest wins, class 0 on ties within 1%. Post-processing
    of the released Hessian, O(d^2 q^2 + q^4) rather than the (d q)^3 of the exact ratio, whose choices it
    repeats. Inferred (measured in ``benchmarks/RESULTS.md``, "Multinomial refine rounds: the reference class").
    """
    if n_outputs == 1:
        return 0
    d = H_floored.shape[0] // n_outputs
    C = np.einsum("akal->kl", ((H_floored + H_floored.T) / 2).reshape(d, n_outputs, d, n_outputs))
    C_inv = np.linalg.inv(C)
    score = []
    for j in range(n_outputs + 1):
        M = reference_map(n_outputs, j)
        c_j = float(np.mean(np.diag(M.T @ C @ M)))
        score.append(float(np.mean(c_j * np.diag(C_inv @ M.T @ M @ C_inv) / np.diag(C_inv))))
    best = int(np.argmin(score))
    return best if score[best] < 0.99 * score[0] else 0


def _damped(H: np.ndarray, floors: np.ndarray) -> tuple[int, float] | None:
    """Directions along which the floored Newton rounds of a phase kept more than ``DAMPED_KEPT`` of their error.

    Along an eigenvector of the released Hessian H with eigenvalue lambda below a round's floor,
    the floored step removes ``lambda / floor`` of the error there (none where lambda <= 0);
    over the phase's rounds the kept share is ``prod_r (1 - max(lambda, 0) / max(lambda, floor_r))``
    (post-processing of H and the public floors). Returns their number and the largest kept
    share, or None.
    """
    vals = np.linalg.eigvalsh(0.5 * (H + H.T))
    positive = np.maximum(vals, 0.0)[:, None]
    kept = np.prod(1.0 - positive / np.maximum(positive, np.asarray(floors)[None, :]), axis=1)
    if not np.any(kept > DAMPED_KEPT):
        return None
    return int(np.sum(kept > DAMPED_KEPT)), float(np.max(kept))


def _within(step: np.ndarray, radius: float) -> np.ndarray:
    """``step`` shortened to Euclidean norm ``radius`` if it is longer (a trust region)."""
    norm = float(np.linalg.norm(step))
    return step * (radius / norm) if norm > radius else step


def _negligible(step: np.ndarray, theta: np.ndarray, tol: float) -> bool:
    return float(np.max(np.abs(step))) <= tol * (1.0 + float(np.max(np.abs(theta))))


def _safeguarded_step(theta: np.ndarray, step: np.ndarray, g: np.ndarray, f: float, evaluate):
    """Non-private step: halve ``step`` until, at ``theta - step``, the aggregated loss does not
    increase or the aggregated gradient is shorter (``evaluate(point) -> (gradient, loss)``).

    The Newton direction decreases both the loss and ``||g||^2``; the loss test handles regions
    where the gradient norm is flat (Huber far from the data), the gradient test the clipped
    problem, whose fixed point is not the loss minimiser. Returns the new point, its gradient and
    loss, or None if no halving was accepted.
    """
    g_norm, slack = float(np.linalg.norm(g)), 1e-13 * max(1.0, abs(f))
    for _ in range(MAX_HALVINGS):
        candidate = theta - step
        if np.all(np.isfinite(candidate)) and float(np.max(np.abs(candidate))) <= DIVERGENCE_NORM:
            g_new, f_new = evaluate(candidate)
            if f_new <= f + slack or np.linalg.norm(g_new) < g_norm:
                return candidate, g_new, f_new
        step = 0.5 * step
    return None
