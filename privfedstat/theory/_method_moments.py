"""The linearised recursion of each algorithm, as :func:`~privfedstat.theory.predict_mse_from_params`
sums it.

One function per method (the estimators' registry names it as the method's ``MethodSpec.predictor``):
``predictor(setup) -> (moments, diagnostics, caveats)`` with ``moments`` the dict of
:func:`~privfedstat.theory._engine.propagate` (``sampling``, ``privacy``, ``optimisation``, ``drift``,
``contraction``, ...), extra ``diagnostics`` for the prediction and a list of ``caveats``. The noise
of every stage comes from the noise models the estimators record (:mod:`privfedstat.theory.noise`),
with the same calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..families import get_family
from ..privacy.calibration import calibrated_sigma, gradient_calibration, stage_budget
from ..privacy.clipping import AutoClip, private_grid_quantile
from ..privacy.newton_policy import NewtonPolicy
from ._engine import Linearisation, propagate
from ._newton_step import newton_moments
from .noise import fedavg_noise, fedhybrid_noise, fedsgd_noise

__all__ = ["Setup", "fedsgd_moments", "fedavg_moments", "fedhybrid_moments", "fednewton_moments"]


@dataclass(frozen=True)
class Setup:
    """What a method's predictor receives, resolved as ``fit`` resolves it.

    Attributes
    ----------
    method : str
        Display name of the method (for messages).
    lin : Linearisation
        Population moments at the target theta*, with the clipping bound and the step size eta.
    params : dict
        The estimator's parameters, ``"auto"`` iteration counts and step size resolved.
    sizes : ndarray of shape (m,)
        Client sizes n_i.
    clip : float
        The per-sample gradient bound B (inf: no clipping).
    hessian_clip : float or None
        ``predict_mse_from_params``'s ``hessian_clip`` (C_H chosen from data), for methods that clip
        per-sample Hessians.
    mu : float
        The mu left for estimation (after the clip and inference budgets).
    path : bool
        Propagate along the noise-free population path (``linearise="path"``) or at the target.
    seed : SeedSequence
        Seed of a predictor's own Monte Carlo (FedNewton's projection).
    """

    method: str
    lin: Linearisation
    params: dict
    sizes: np.ndarray
    clip: float
    hessian_clip: float | None
    mu: float
    path: bool
    seed: np.random.SeedSequence

    @property
    def d(self) -> int:
        return self.lin.H.shape[0]

    def weights(self, noise_sd=None, sizes=None) -> np.ndarray:
        """The server weights w_i (``weights="size"``, ``"optimal"`` given the message noise sd, or an array)."""
        n = self.sizes if sizes is None else sizes
        w = self.params.get("weights", "size")
        if isinstance(w, str):
            if w == "size":
                return n / n.sum()
            if w == "optimal" and noise_sd is not None:
                B2 = self.clip * self.clip if math.isfinite(self.clip) else 1.0
                inv = 1.0 / (B2 / n + self.d * noise_sd**2)
                return inv / inv.sum()
            raise ValueError(f"weights={w!r} is not available for {self.method}.")
        arr = np.asarray(w, dtype=np.float64)
        if arr.shape != n.shape or abs(arr.sum() - 1) > 1e-8 or np.any(arr < 0):
            raise ValueError("weights must be a non-negative array with one entry per client, summing to 1.")
        return arr


def fedsgd_moments(s: Setup):
    """FedSGD (Algorithm 1): K server steps on noisy aggregated gradients, from ``init`` (default 0)."""
    K = int(s.params["n_iter"])
    w = s.weights(calibrated_sigma(*gradient_calibration(s.clip, s.sizes, K, s.mu)))
    init = np.zeros(s.d) if s.params.get("init") is None else np.asarray(s.params["init"], dtype=np.float64)
    model = fedsgd_noise(clip=s.clip, sizes=s.sizes, mu=s.mu, n_iter=K, step_size=s.lin.eta, weights=w)
    return propagate(s.lin, list(model.stages), s.sizes, init, path=s.path), {}, []


def fedavg_moments(s: Setup):
    """FedAvg (Algorithm 3): R rounds of K noisy local steps per client, averaged."""
    model = fedavg_noise(clip=s.clip, sizes=s.sizes, mu=s.mu, n_rounds=int(s.params["n_rounds"]),
                         n_local_steps=int(s.params["n_local_steps"]), step_size=s.lin.eta, weights=s.weights())
    return propagate(s.lin, list(model.stages), s.sizes, np.zeros(s.d), path=s.path), {}, []


def fedhybrid_moments(s: Setup):
    """FedHybrid (Algorithm 2): one FedAvg round of K1 local steps, then K2 FedSGD steps."""
    K1, K2 = int(s.params["n_local_steps"]), int(s.params["n_server_iter"])
    w = s.weights(calibrated_sigma(*gradient_calibration(s.clip, s.sizes, K2, stage_budget(s.mu, 2))))
    model = fedhybrid_noise(clip=s.clip, sizes=s.sizes, mu=s.mu, n_local_steps=K1, n_server_iter=K2,
                            step_size=s.lin.eta, weights=w)
    return propagate(s.lin, list(model.stages), s.sizes, np.zeros(s.d), path=s.path), {}, []


def _newton_hessian_clip(s: Setup, policy: NewtonPolicy) -> float | None:
    """C_H of the private mode when it is not searched again at theta^(1): the estimator's, else
    ``predict_mse_from_params``'s, else inf without clipping."""
    if policy.paper or policy.research:
        return None
    h = s.params.get("hessian_clip")
    if h is not None and not isinstance(h, (str, AutoClip)):
        return float(h)
    if s.hessian_clip is not None:
        return float(s.hessian_clip)
    if math.isinf(s.clip):
        return math.inf
    raise ValueError("FedNewton needs the per-sample Hessian bound: pass hessian_clip= (or set it on the estimator).")


def _start_hessian_clip(s: Setup, policy: NewtonPolicy) -> float:
    """C_H at theta = 0, where the fit chose it: the estimator's, else ``predict_mse_from_params``'s, else inf without
    clipping or a Hessian bound (paper mode), else the population's noise-free search at the search's start quantile."""
    h = s.params.get("hessian_clip")
    if policy.paper or math.isinf(s.clip):
        return math.inf
    if h is not None and not isinstance(h, (str, AutoClip)):
        return float(h)
    if s.hessian_clip is not None:
        return float(s.hessian_clip)
    norms = np.sort(s.lin.pop.hessian_norms(np.zeros(s.d)))
    level = policy.search.start_quantile("hessian")
    return private_grid_quantile(lambda t: np.searchsorted(norms, t, side="right") / norms.size, policy.search.grid,
                                 level)


def fednewton_moments(s: Setup):
    """FedAvg on the first halves, then one Newton step per client (Algorithm 4), as the fit's
    :class:`~privfedstat.privacy.newton_policy.NewtonPolicy` takes it (:mod:`._newton_step`)."""
    params, lin, n = s.params, s.lin, s.sizes
    family = get_family(params["family"]) if isinstance(params["family"], str) else params["family"]
    policy = NewtonPolicy.of(params, family, s.mu)
    if np.any(np.floor(n / 2) < s.d):
        raise ValueError("FedNewton needs n_i >= 2 d (each half must identify the parameter).")
    w = s.weights()
    step = policy.stage_step(lin.eta, _start_hessian_clip(s, policy))
    if step != lin.eta:  # the FedAvg stage's step, as the fit takes it
        lin = Linearisation(lin.pop, lin.clip, step)
    stage1 = fedavg_noise(clip=s.clip, sizes=np.floor(n / 2), mu=policy.budgets[2], n_rounds=int(params["n_rounds"]),
                          n_local_steps=int(params["n_local_steps"]), step_size=lin.eta, weights=w)
    out1 = propagate(lin, list(stage1.stages), np.floor(n / 2), np.zeros(s.d), path=s.path)
    out, caveats, diagnostics = newton_moments(lin, out1, list(stage1.stages), policy, n, w, s.clip,
                                               _newton_hessian_clip(s, policy), s.seed)
    return out, diagnostics, caveats
