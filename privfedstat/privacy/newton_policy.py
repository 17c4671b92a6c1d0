"""FedNewton's policy after its FedAvg stage: the one object that the fit and the MSE predictor read.

:class:`~privfedstat.FedNewton` builds it from its parameters and walks it on the clients' releases;
:func:`~privfedstat.predict_mse` builds it from the same parameters and walks it on the population's
noise-free counterparts (``privfedstat.theory._newton_step``). Derivations: ``docs/algorithms/fednewton.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from .._linalg import floor_eigenvalues
from ..families.base import Family
from ..families.curvature import MIN_RELEASED_FLOOR, resolve_hessian_floor, resolve_tau1
from .calibration import (
    aggregate_sd,
    calibrated_sigma,
    hessian_sensitivity,
    newton_budgets,
    noise_floor,
    paper_newton_sensitivity,
    shared_newton_sensitivity,
    stage_budget,
)
from .clipping import PILOT_AUTOCLIP, AutoClip, private_grid_quantile

__all__ = ["NewtonPolicy", "researches"]


def researches(clip, hessian_clip, mu: float, newton_noise: str = "private") -> bool:
    """Whether private FedNewton searches C_H privately (and so searches it again at the FedAvg point).

    As :func:`~privfedstat.fitting.stages.pending_bounds` decides it: the Hessian bound is chosen when
    ``hessian_clip`` is None (with a ``clip`` that is "auto", "paper", an AutoClip or finite), "auto" or an
    AutoClip; privately unless ``clip`` is "paper" or (mu infinite and ``clip`` not an AutoClip).
    Algorithm 4 as printed (``newton_noise="paper"``) clips no Hessian.
    """
    if newton_noise == "paper" or (isinstance(clip, str) and clip == "paper"):
        return False
    if hessian_clip is None:
        chosen = isinstance(clip, (str, AutoClip)) or math.isfinite(float(clip))
    else:
        chosen = isinstance(hessian_clip, (str, AutoClip))
    return chosen and (isinstance(clip, AutoClip) or math.isfinite(mu))


@dataclass(frozen=True)
class NewtonPolicy:
    """What FedNewton does after its FedAvg stage, fixed from public facts before any release.

    Attributes
    ----------
    mu : float
        The estimation budget (what is left after the clip search, scaling and inference shares).
    paper : bool
        Algorithm 4 as printed (``newton_noise="paper"``): each client's own Hessian, noise from tau1.
    research : bool
        Private mode: C_H is searched again at theta^(1), at ``search.pilot_quantile`` (:func:`researches`).
    floor : float or None
        The eigenvalue floor lambda given (or the invertibility floor); None: from the release's noise.
    lowest : float
        The least released floor, ``MIN_RELEASED_FLOOR ell''(0)``.
    tau1 : float
        Algorithm 4's strong-convexity constant (paper mode).
    grad_clip : float
        G, the radius of the Newton step's mean gradient (inf: none; always with ``paper``).
    search : AutoClip
        The bound search whose ``pilot_quantile`` and grid the re-search uses.
    """

    mu: float
    paper: bool
    research: bool
    floor: float | None
    lowest: float
    tau1: float
    grad_clip: float
    search: AutoClip

    @classmethod
    def of(cls, params: Mapping, family: Family, mu: float, search: AutoClip | None = None) -> NewtonPolicy:
        """The policy of a FedNewton with parameters ``params`` (``get_params()``) at estimation budget ``mu``."""
        noise = params.get("newton_noise", "private")
        clip = params["clip"]
        if search is None:
            search = clip if isinstance(clip, AutoClip) else PILOT_AUTOCLIP
        g = params.get("newton_grad_clip")
        return cls(mu=float(mu), paper=noise == "paper",
                   research=researches(clip, params.get("hessian_clip"), mu, noise),
                   floor=resolve_hessian_floor(params.get("hessian_floor", "auto"), family, mu, noise),
                   lowest=MIN_RELEASED_FLOOR * float(family.curvature_at_zero),
                   tau1=resolve_tau1(params.get("tau1", "auto"), family),
                   grad_clip=math.inf if g is None or noise == "paper" else float(g), search=search)

    def stage_step(self, step_size: float, hessian_clip: float) -> float:
        """The FedAvg stage's local step: ``min(eta, 1 / C_H)``, C_H the per-sample Hessian bound the fit chose at
        theta = 0 (public once released), so that the local steps stay within the descent lemma's ``1 / L`` of the
        clipped curvature (Algorithm 4 as printed, or no bound: ``eta``).

        The stage runs on half the rows with half the budget: its per-step noise, ``2 B eta sqrt(R K) / (mu n1_i)``,
        takes a client's iterates far from theta^(0), and with a step beyond ``1 / L`` of the curvature they reach
        (Poisson: ``ell''`` grows like ``exp(x^T theta)``) they bounce between the clipped extremes instead of
        contracting (issue 41: Fig. 16, m = 400, eta = 0.5: ``||e_1||^2`` 14.6; with 1 / C_H = 0.11: 0.47).
        """
        if self.paper or not math.isfinite(hessian_clip):
            return float(step_size)
        return min(float(step_size), 1.0 / float(hessian_clip))

    @property
    def budgets(self) -> tuple[float, float, float]:
        """``(mu_search, mu_hessian, mu_stage)``: the re-search of C_H, the Hessian release, each of the two stages."""
        if self.paper:
            return 0.0, 0.0, stage_budget(self.mu, 2)
        return newton_budgets(self.mu, self.research)

    def hessian_search(self, n_total: float, n_clients: int) -> Callable[[Callable[[float], float]], float]:
        """The re-search of C_H at theta^(1): a function of the pooled, noisy count of per-sample Hessian norms
        below a threshold, giving the smallest grid point whose count reaches the search's target."""
        grid = self.search.grid
        target = self.search.target(self.search.pilot_quantile, n_total, n_clients,
                                    self.search.query_budget(self.budgets[0], 1))
        return lambda count: private_grid_quantile(count, grid, target)

    def hessian_sd(self, hessian_clip: float, sizes: np.ndarray, weights: np.ndarray) -> float:
        """Per-entry noise sd of the weighted mean of the released Hessians (``sym_to_vec`` coordinates)."""
        return aggregate_sd(calibrated_sigma(hessian_sensitivity(hessian_clip, sizes), self.budgets[1]), weights)

    def newton_matrix(self, released: np.ndarray, sd: float) -> tuple[np.ndarray, float]:
        """The public Newton matrix from the averaged release and its floor lambda (the given one, else
        :func:`noise_floor` of the release at least ``lowest``): post-processing."""
        lam = self.floor if self.floor is not None else noise_floor(sd, released.shape[-1], self.lowest)
        return floor_eigenvalues((released + np.swapaxes(released, -1, -2)) / 2, lam), lam

    def sensitivity(self, clip: float, matrix_min: float, sizes: np.ndarray) -> np.ndarray:
        """The Newton step's L2 sensitivity per client: Algorithm 4's ``8 B / (tau1 n_i)``, or with the public
        Newton matrix of smallest eigenvalue ``matrix_min`` ``min(2 B / n2_i, 2 G) / matrix_min``."""
        n = np.asarray(sizes, dtype=np.float64)
        if self.paper:
            return paper_newton_sensitivity(clip, self.tau1, n)
        return shared_newton_sensitivity(clip, matrix_min, np.full(n.size, self.grad_clip), n - np.floor(n / 2))
