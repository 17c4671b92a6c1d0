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
from ..families.curvature import MIN_RELEASED_FLOOR, resolve_hessian_floor, resolve_tau1
from ..privacy.calibration import (
    aggregate_sd,
    calibrated_sigma,
    gradient_calibration,
    hessian_sensitivity,
    newton_budgets,
    noise_floor,
    paper_newton_sensitivity,
    shared_newton_sensitivity,
    stage_budget,
)
from ..privacy.clipping import AutoClip
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


def _newton_hessian_clip(s: Setup) -> float | None:
    """C_H of the private calibration: the estimator's, else ``predict_mse_from_params``'s, else inf without clipping."""
    if s.params.get("newton_noise", "private") != "private":
        return None
    h = s.params.get("hessian_clip")
    if h is not None and not isinstance(h, (str, AutoClip)):
        return float(h)
    if s.hessian_clip is not None:
        return float(s.hessian_clip)
    if math.isinf(s.clip):
        return math.inf
    raise ValueError("FedNewton needs the per-sample Hessian bound: pass hessian_clip= (or set it on the estimator).")


def fednewton_moments(s: Setup):
    """FedAvg on the first halves, then one private Newton step per client (Algorithm 4)."""
    CH = _newton_hessian_clip(s)
    params, lin, n, B, mu = s.params, s.lin, s.sizes, s.clip, s.mu
    family = get_family(params["family"]) if isinstance(params["family"], str) else params["family"]
    paper = params.get("newton_noise", "private") == "paper"
    lam = resolve_hessian_floor(params["hessian_floor"], family, mu, "paper" if paper else "private")
    n1 = np.floor(n / 2)
    n2 = n - n1
    if np.any(n1 < s.d):
        raise ValueError("FedNewton needs n_i >= 2 d (each half must identify the parameter).")
    w = s.weights()
    h, c = params.get("hessian_clip"), params.get("clip")
    research = (h is None or isinstance(h, (str, AutoClip))) and not (isinstance(c, str) and c == "paper")
    mu_stage = stage_budget(mu, 2) if paper else newton_budgets(mu, research)[2]
    stage1 = fedavg_noise(clip=B, sizes=n1, mu=mu_stage, n_rounds=int(params["n_rounds"]),
                          n_local_steps=int(params["n_local_steps"]), step_size=lin.eta, weights=w)
    out1 = propagate(lin, list(stage1.stages), n1, np.zeros(s.d), path=s.path)
    Hc = lin.pop.clipped_hessian(lin.theta_star, np.inf if paper or CH is None else CH)
    ev, vec = np.linalg.eigh((Hc + Hc.T) / 2)
    if lam is None:  # the private floor, from the noise of the Hessian release (its noise itself left out)
        sd_h = aggregate_sd(calibrated_sigma(hessian_sensitivity(CH, n), newton_budgets(mu, research)[1]), w)
        lam = noise_floor(sd_h, Hc.shape[0], MIN_RELEASED_FLOOR * float(family.curvature_at_zero))
    Ht = (vec * np.maximum(ev, lam)) @ vec.T
    if paper:  # every client inverts its own first-half Hessian
        sens = paper_newton_sensitivity(B, resolve_tau1(params.get("tau1", "auto"), family), n)
        G, rows = np.full(n.size, np.inf), n1
    else:  # every client inverts the shared released Hessian (pooled over all N rows)
        g = params.get("newton_grad_clip")
        G, rows = np.full(n.size, np.inf if g is None else float(g)), np.full(n.size, float(np.sum(n)))
        sens = shared_newton_sensitivity(B, max(float(ev[0]), lam), G, n2)
    sd = calibrated_sigma(sens, mu_stage)
    out, caveats = newton_moments(lin, out1, w, rows, n2, Ht, G, sd**2, s.seed)
    if ev[0] < lam:
        caveats.append(f"the eigenvalue floor hessian_floor={lam:g} exceeds lambda_min of the Newton matrix "
                       f"({ev[0]:.3g}): the Newton step is damped and (I - Ht^-1 H) e_1 survives.")
    return out, {"newton_noise_sd": sd, "newton_grad_clip": G}, caveats
