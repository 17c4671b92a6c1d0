"""Exact (linearised) MSE predictor of a private federated algorithm at given parameters.

Beyond the paper: its bounds hold up to unknown constants, so only rates can be compared. Here the
recursion of each algorithm is linearised around the population target and every term is summed
exactly: sampling, privacy noise (step by step, through the products of step Jacobians),
optimisation error of the noise-free population path, and the bias (clipping, FedAvg's local drift).
The recursions of FedSGD, FedHybrid, FedAvg and FedNewton are in
:mod:`privfedstat.theory._method_moments`. :func:`predict_mse_from_params` takes a recursion and
the algorithm's parameters as plain data; :func:`privfedstat.predict_mse` reads both from an
estimator (its registered method and ``get_params()``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .._rng import as_seed_sequence
from ..families import get_family
from ..families.curvature import auto_step_size
from ..privacy.clipping import PILOT_AUTOCLIP, AutoClip
from ..privacy.newton_policy import researches
from ._engine import Linearisation
from ._method_moments import Setup
from ._population import Population, make_spec

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["Problem", "MSEPrediction", "predict_mse_from_params"]


@dataclass(frozen=True)
class Problem:
    """A data-generating process and the clients' sample sizes.

    Parameters
    ----------
    design : object
        Covariate design and response law, e.g. ``GLMDesign("logistic", beta=(0.5, -0.5, 0.5))``
        (x = (1, sigma_c z), z ~ N(0, I)); any object with ``family``, ``beta_true`` and
        ``sigma_c`` (and ``noise_sd`` for the Gaussian family).
    sizes : sequence of int
        Client sample sizes n_i (fixed; for random allocations pass one draw or their expected sizes).
    family, beta : optional
        Override the design's family and true parameter.
    """

    design: object
    sizes: tuple
    family: str | None = None
    beta: tuple | None = None

    def __post_init__(self) -> None:
        s = np.asarray(self.sizes, dtype=np.float64).ravel()
        if s.size == 0 or np.any(~(s >= 1)) or np.any(s != np.floor(s)):
            raise ValueError(f"sizes must be positive integers (one per client), got {self.sizes!r}.")
        object.__setattr__(self, "sizes", tuple(int(v) for v in s))


@dataclass(frozen=True)
class MSEPrediction:
    """Predicted E||theta_hat - theta_0||^2 and its parts (``total`` = the sum of the five parts).

    Attributes
    ----------
    method : str
    total : float
    sampling : float
        Data variance: trace(M Sigma M^T)-type terms; trace(H^-1 Sigma H^-1)/N once converged
        with weights n_i/N.
    privacy : float
        Privacy-noise variance, summed exactly over all noisy steps.
    optimisation : float
        ||theta_bar_S - theta*||^2 of the noise-free population path (or of the linearised path).
    bias : float
        ||b||^2, b = (theta* - theta_0) [clipping] + local drift (FedAvg, FedHybrid stage I) + the
        curvature bias of FedNewton's Newton step.
    cross : float
        2 (theta_bar_S - theta*)^T b.
    second_moment : ndarray of shape (d, d)
        E[(theta_hat - theta_0)(theta_hat - theta_0)^T]; its diagonal is the per-coordinate MSE.
    mean_error : ndarray of shape (d,)
        E[theta_hat - theta_0].
    regime : str
        The assumptions under which the prediction is accurate.
    caveats : tuple of str
        Conditions of this problem that fall outside the regime.
    diagnostics : dict
        ``clip``, ``mu_est`` (mu left after choosing bounds), ``clip_fraction`` (share of per-sample
        gradients clipped at the target), ``contraction`` (||P_{0->S}||_2: how far the noise-free
        path is from converged), ``local_nonlinearity`` (a client's second-order drift relative to
        the spread of its local iterates), ``target`` (theta*).
    """

    method: str
    total: float
    sampling: float
    privacy: float
    optimisation: float
    bias: float
    cross: float
    second_moment: np.ndarray
    mean_error: np.ndarray
    regime: str
    caveats: tuple = ()
    diagnostics: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """One row per component (tidy): columns ``component``, ``value``, ``share``."""
        import pandas as pd
        names = ["sampling", "privacy", "optimisation", "bias", "cross", "total"]
        vals = [getattr(self, k) for k in names]
        return pd.DataFrame({"component": names, "value": vals, "share": np.array(vals) / self.total})

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={getattr(self, k):.4g}" for k in ("sampling", "privacy", "optimisation", "bias", "cross"))
        return f"MSEPrediction({self.method}: total={self.total:.4g}; {parts})"


REGIME = (
    "Linearised around theta*, the root of the population estimating equation with the estimator's "
    "per-sample clipping (theta* = theta_0 when clipping is inactive there). Exact to first order in the "
    "sampling and privacy fluctuations; second-order terms kept: FedAvg's local drift (data and noise, "
    "O(1/n_i) and O(s_i^2) per client); FedNewton's Newton step exact in its FedAvg stage's end point. Accurate when "
    "(i) clipping is "
    "inactive or mild near theta*, (ii) every client has many samples per parameter (n_i >> d), and "
    "(iii) the predicted errors are small on the scale over which the Hessian changes. Neglected: the "
    "pooled O(1/N) second-order bias, client-to-client variation of local Hessians in the noise "
    "propagation (relative O(d/n_i)), and the effect of clipping on second-order terms."
)


def _resolve_auto(params: dict, method: str, auto_counts: Mapping[str, int], mu: float, d: int) -> dict:
    """``"auto"`` settings resolved as ``fit`` resolves them (public: the family, d, mu; the method's
    ``auto_counts``)."""
    params = dict(params)
    for key, default in auto_counts.items():
        if params.get(key) == "auto":
            if not math.isfinite(mu):
                raise ValueError(
                    f"with mu = inf, {method}'s {key}='auto' runs until convergence, which the predictor "
                    f"cannot know in advance; pass {key} as a number."
                )
            params[key] = default
    if params.get("step_size") == "auto":
        family = get_family(params["family"]) if isinstance(params["family"], str) else params["family"]
        params["step_size"] = auto_step_size(family, d)
    return params


def _clip_and_mu(params: Mapping, clip, inference_budget: float):
    mu = float(params["mu"])
    c = params["clip"]
    if isinstance(c, (str, AutoClip)):
        if clip is None:
            raise ValueError(
                f"the estimator's clip={c!r} chooses B from the data; pass clip=B (e.g. a fitted estimator's "
                "clip_) or build the estimator with a numeric clip."
            )
        budget = 0.0 if c == "paper" else (c.budget if isinstance(c, AutoClip) else AutoClip().budget)
        B = float(clip)
    else:
        if clip is not None and float(clip) != float(c):
            raise ValueError(f"clip={clip} conflicts with the estimator's clip={c}.")
        B = float(c)
        # a numeric clip with a Hessian bound to choose (FedNewton): the fit searches C_H with the search's budget
        searched = "hessian_clip" in params and researches(c, params["hessian_clip"], mu, params.get("newton_noise"))
        budget = PILOT_AUTOCLIP.budget if searched else 0.0
    if not B > 0:
        raise ValueError(f"the clipping bound must be > 0, got {B}.")
    if math.isinf(B) and math.isfinite(mu):
        raise ValueError("clip=inf (no clipping) has infinite sensitivity; it is only possible with mu=inf.")
    # what fit keeps for estimation: the clip budget, then the inference share, in squares
    share = float(inference_budget)
    if math.isfinite(mu) and budget**2 + share**2 >= 1:
        raise ValueError("the clipping and inference budgets leave nothing for estimation; lower their shares.")
    mu_est = math.sqrt(mu * mu - (budget * mu) ** 2 - (share * mu) ** 2) if math.isfinite(mu) else math.inf
    return B, mu_est


def predict_mse_from_params(recursion: Callable[[Setup], tuple], params: Mapping[str, object], problem: Problem, *,
                            method: str, auto_counts: Mapping[str, int] | None = None, inference_budget: float = 0.0,
                            clip=None, hessian_clip=None, linearise: str = "path", n_mc: int = 2**15,
                            random_state=0) -> MSEPrediction:
    """Predict E||theta_hat - theta_0||^2 of a private federated algorithm run with ``params``.

    Parameters
    ----------
    recursion : callable
        ``recursion(setup) -> (moments, diagnostics, caveats)``: the algorithm's linearised
        recursion, one of :mod:`privfedstat.theory._method_moments` (``fedsgd_moments``, ...).
    params : mapping
        The algorithm's parameters, as an estimator's ``get_params()`` gives them (``family``,
        ``mu``, ``clip``, ``step_size`` and the method's iteration counts). A numeric ``clip`` is
        used as is; with ``clip="auto"`` (or an :class:`~privfedstat.AutoClip`) pass the bound B it
        will choose as ``clip=`` -- the prediction then uses the mu left for estimation,
        ``sqrt(mu^2 - (budget mu)^2)`` (budget 0.1 by default); ``clip="paper"`` uses all of mu.
    problem : Problem
        The data-generating process and the client sizes.
    method : str
        The algorithm's name, for the result and for messages.
    auto_counts : mapping of str to int, optional
        The value each ``"auto"`` iteration count takes at finite mu (as ``fit`` resolves it).
    inference_budget : float, default 0
        The share of mu that ``fit`` spends on inference releases (``Inference.budget``; 0 for
        none), taken off in squares as ``fit`` does.
    clip : float, optional
        B, when ``params["clip"]`` chooses it from the data.
    hessian_clip : float, optional
        FedNewton's per-sample Hessian bound C_H at theta = 0, when ``params["hessian_clip"]`` chooses it from
        the data (it sets the FedAvg stage's step; where the fit searches C_H again at theta^(1), so does the
        prediction). Default: the population's noise-free search at theta = 0.
    linearise : {"path", "target"}, default "path"
        ``"target"``: every step uses A = I - eta H at the target and the optimisation error is
        ||A^S (theta^(0) - theta*)||^2, the closed forms
        (privacy = eta^2 sum_k ||A^k||_F^2 sum_i w_i^2 sigma_i^2 for FedSGD). ``"path"``: the
        noise-free population iteration theta_bar_{s+1} = theta_bar_s - eta E[clip(grad rho)] is
        run exactly from theta^(0) and the fluctuations are propagated through its Jacobians; this
        is more accurate when theta^(0) is far from theta_0 (the paper's theta^(0) = 0) and K is
        moderate. The two agree once the path has converged.
    n_mc : int, default 32768
        Monte-Carlo covariate draws for the population expectations (y | x is integrated exactly).
    random_state : int or SeedSequence, default 0
        Seed of those draws (and of FedNewton's projection Monte Carlo).

    Returns
    -------
    MSEPrediction

    Notes
    -----
    Per method (A = I - eta H, w_i the server weights, sigma_i the estimator's noise sd):

    * **FedSGD** (Algorithm 1): e_K = A^K e_0 - sum_k A^(K-1-k) eta (sum_i w_i psi_i + xi_k) with
      Cov(xi_k) = sum_i w_i^2 sigma_i^2 I (sigma_i = 2 B sqrt(K)/(mu n_i), **per coordinate**).
      Sampling: (I - A^K) V (I - A^K) sum_i w_i^2/n_i with V = H^-1 Sigma H^-1 (-> trace(V)/N);
      privacy: eta^2 sum_{k<K} ||A^k||_F^2 sum_i w_i^2 sigma_i^2.
    * **FedAvg** (Algorithm 3): the noise sigma_i = 2 B eta sqrt(RK)/(mu n_i) added to the parameter
      at local step t of round r reaches the output through A^(K-1-t) and A^(K(R-r)); averaged with
      w_i: privacy = sum_{s<RK} ||A^s||_F^2 sum_i w_i^2 sigma_i^2. Bias: each client's K local
      steps drift by beta_data/n_i + sigma_i^2 beta_noise (second-order local recursion; as
      K -> infinity beta_data is the first-order bias b of an M-estimator, E theta_hat_n - theta_0
      = b/n + o(1/n)), carried over the rounds: sum_r A^(K(R-r)) sum_i w_i (...). Both parts grow
      with m at fixed N (Remark 3.7).
    * **FedHybrid** (Algorithm 2): stage I is one FedAvg round of K1 steps (weights n_i/N), stage II
      K2 FedSGD steps; the data enter both stages and their correlation is kept.
    * **FedNewton** (Algorithm 4): the fit's :class:`~privfedstat.privacy.newton_policy.NewtonPolicy`
      walked on the population (:mod:`privfedstat.theory._newton_step`): the FedAvg stage (first halves,
      step ``min(eta, 1 / C_H)``) simulated on population clients for the mean and covariance of its end
      point theta_1; at draws of theta_1 the Newton step as the fit takes it (C_H re-searched there, the
      released Hessian's noise and floor, the step's noise from the floored matrix), exact in e_1. The
      error that survives is reported as bias (its mean) and split between sampling and privacy in
      proportion to the FedAvg stage's parts (its variance).

    **Where it breaks down.** Heavy clipping: theta*, H and Sigma are those of the clipped
    equation, but second-order terms ignore clipping and the linearisation degrades when a large
    share of gradients is clipped near theta* (see ``diagnostics["clip_fraction"]``). Few samples
    per client: local estimators are then far from their asymptotics, and FedAvg's drift and
    FedNewton's local Hessians are mis-predicted (n_i of a few times d). Large privacy noise on
    small clients (FedAvg, FedHybrid stage I; FedNewton's first stage is simulated instead): each client's local iterates
    wander far from theta*, the true drift saturates and the second-order drift overstates it
    (``diagnostics["local_nonlinearity"]`` > 0.35 is reported as a caveat). FedNewton's FedAvg-stage end
    point is drawn Gaussian with the simulated mean and covariance: heavy tails of it are missed.

    References
    ----------
    Core paper, Algorithms 1-4; Theorems 3.2, 3.3, 3.5, 3.7, 3.9 (whose constants this replaces).
    """
    if not isinstance(problem, Problem):
        raise TypeError("problem must be a privfedstat.theory.Problem(design=..., sizes=...).")
    if linearise not in ("path", "target"):
        raise ValueError(f"linearise must be 'path' or 'target', got {linearise!r}.")
    spec = make_spec(problem.design, problem.family, problem.beta)
    est_family = params.get("family")
    est_name = est_family if isinstance(est_family, str) else getattr(est_family, "name", None)
    if est_name != spec.family:
        raise ValueError(f"the estimator's family {est_family!r} differs from the problem's {spec.family!r}.")
    B, mu = _clip_and_mu(params, clip, inference_budget)
    n = np.asarray(problem.sizes, dtype=np.float64)
    params = _resolve_auto(params, method, auto_counts or {}, mu, spec.d)
    pop_seed, method_seed = as_seed_sequence(random_state).spawn(2)
    lin = Linearisation(Population(spec, n_mc, pop_seed), None if math.isinf(B) else B, float(params["step_size"]))
    setup = Setup(method, lin, params, n, B, hessian_clip, mu, linearise == "path", method_seed)
    out, diagnostics, caveats = recursion(setup)
    return _result(method, lin, spec, out, B, mu, n, diagnostics, caveats)


def _result(method, lin, spec, out, B, mu, n, extra_diag=None, extra_caveats=()):
    theta0 = spec.beta_array
    bias_vec = (lin.theta_star - theta0) + out["drift"]
    opt = out["optimisation"]
    mean = opt + bias_vec
    second = out["sampling"] + out["privacy"] + np.outer(mean, mean)
    frac = 0.0 if math.isinf(B) else lin.pop.clip_fraction(lin.theta_star, B)
    caveats = list(extra_caveats)
    if frac > 0.01:
        caveats.append(f"clipping is active at the target: {100 * frac:.1f}% of per-sample gradients are clipped "
                       f"(bias ||theta* - theta0||^2 = {float(np.sum((lin.theta_star - theta0) ** 2)):.3g}).")
    if n.min() < 20 * spec.d:
        caveats.append(f"few samples per client (min n_i = {int(n.min())}, d = {spec.d}): second-order terms "
                       "(local drift, local Hessians) are less reliable.")
    if out["contraction"] > 0.1:
        caveats.append(f"the noise-free path has not converged (||P_0->S|| = {out['contraction']:.2f}); "
                       "the optimisation term depends on the linearisation mode.")
    nonlin = out.get("local_nonlinearity", 0.0)
    if nonlin > 0.35:
        caveats.append(f"local iterates wander far from theta* (drift/spread = {nonlin:.2f} > 0.35): the "
                       "second-order local drift is overstated (the true drift saturates), so the prediction is "
                       "too high -- typically many clients with few samples and small mu.")
    total = float(np.trace(second))
    if total > 0.05 * max(1.0, float(theta0 @ theta0)):
        caveats.append("the predicted error is not small: effects beyond second order may matter.")
    diag = {"clip": B, "mu_est": mu, "clip_fraction": frac, "contraction": out["contraction"],
            "local_nonlinearity": nonlin,
            "target": lin.theta_star, "n_clients": n.size, "n_samples": int(n.sum())}
    diag.update(extra_diag or {})
    return MSEPrediction(
        method=method, total=total, sampling=float(np.trace(out["sampling"])), privacy=float(np.trace(out["privacy"])),
        optimisation=float(opt @ opt), bias=float(bias_vec @ bias_vec), cross=float(2 * opt @ bias_vec),
        second_moment=second, mean_error=mean, regime=REGIME, caveats=tuple(caveats), diagnostics=diag,
    )
