"""FedAvg: R rounds of K noisy local GD steps, averaged by the server (Algorithm 3)."""

from __future__ import annotations

import math

import numpy as np

from .._validation import ITERATIONS
from ..federation.protocol import Run, Setup
from ..federation.session import Session
from ..fitting.base import FederatedEstimator
from ..fitting.stages import resolve_weights
from ..fitting.steps import MAX_ROUNDS_NONPRIVATE, local_gradient_descent, resolve_count, resolve_step_size, settled
from ..privacy.calibration import aggregate_sd, calibrated_sigma, local_step_calibration, stage_budget
from ..privacy.clipping import AutoClip
from ..theory.noise import fedavg_noise

__all__ = ["FedAvg", "run_fedavg"]

#: R of the paper's simulations (Section 4.1), the "auto" count with finite mu
PAPER_N_ROUNDS = 2


def run_fedavg(session: Session, clients, *, clip: float, n_rounds: int, n_local_steps: int, step_size: float,
               mu: float, weights: np.ndarray, stop_early: bool = False, server_step_size: float = 1.0) -> Run:
    """R rounds of FedAvg from 0 on ``clients``' data (``session.clients`` or FedNewton's halves).

    The budget ``mu`` is split evenly over the R K local steps, i.e. each step adds noise with
    ``sigma_i = 2 B eta sqrt(R K) / (mu n_i)`` (Algorithm 3, Lemma 3.6; B = ``clip``). The
    returned :class:`~privfedstat.federation.protocol.Run` holds the server path theta^(0..R), the
    last local step's noise averaged (``noise_sd``) and sqrt(K) times it, the K steps of a round
    (``update_noise_sd``), and the noise model (:func:`~privfedstat.theory.noise.fedavg_noise`).
    With ``stop_early`` (mu = inf only) the rounds end once the averaged model stops moving
    (:func:`~privfedstat.fitting.steps.settled`). ``server_step_size`` (eta_s, the CNN runs
    of Section 5.2; inferred): the server moves by eta_s times the change of the averaged model,
    ``theta^r = theta^(r-1) + eta_s (avg_i theta_i - theta^(r-1))``; 1 is Algorithm 3 (the noise
    model assumes 1: an estimator that offers inference keeps it).
    """
    mu_round = stage_budget(mu, n_rounds)
    path = [clients.initial_parameters()]
    for _ in range(n_rounds):
        avg = local_gradient_descent(session, clients, path[-1], clip=clip, n_steps=n_local_steps, step_size=step_size,
                                     mu=mu_round, stage="local-step", weights=weights)
        path.append(avg if server_step_size == 1.0 else path[-1] + server_step_size * (avg - path[-1]))
        if stop_early and settled(path[-1], path[-2]):
            break
    noise_sd = server_step_size * aggregate_sd(calibrated_sigma(*local_step_calibration(
        clip, step_size, clients.sizes, n_local_steps, mu_round)), weights)
    noise_model = fedavg_noise(clip=clip, sizes=clients.sizes, mu=mu, n_rounds=n_rounds, n_local_steps=n_local_steps,
                               step_size=step_size, weights=weights)
    return Run(path[-1], path, (len(path) - 1) * n_local_steps, noise_sd=noise_sd,
               update_noise_sd=math.sqrt(n_local_steps) * noise_sd, noise_model=noise_model, weights=weights)


class FedAvg(FederatedEstimator):
    """Differentially private FedAvg (Algorithm 3 of the core paper).

    Each round the server broadcasts theta^(r-1); every client runs ``n_local_steps`` (K) noisy
    GD steps, adding ``sigma_i Z`` with ``sigma_i = 2 B eta sqrt(R K) / (mu n_i)`` to the parameter
    at every step, and sends its final iterate; the server averages with weights w_i.

    Parameters
    ----------
    family : str or Family, default "logistic"
    mu : float, default 2.0
        GDP budget per client (mu); ``inf`` for no privacy.
    n_rounds : int or "auto", default "auto"
        Communication rounds (R). "auto": the paper's R = 2 with finite mu; with mu = inf until
        the averaged model stops moving (``converged_``), at most
        :data:`~privfedstat.fitting.steps.MAX_ROUNDS_NONPRIVATE`.
    n_local_steps : int, default 50
        Local iterations per round (K).
    step_size : float or "auto", default "auto"
        Local learning rate (eta); "auto": ``1 / L`` from a public curvature bound (see
        :class:`~privfedstat.FedSGD`). The paper's simulations use 0.5.
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B) ("auto" with ``mu=inf``: no clipping).
    weights : "size" or array, default "size"
        Server averaging weights (w_i = n_i / N in Algorithm 3).
    scaling : None, "private", PrivateStandardize or FeatureBounds, default None
        Fit on rescaled columns and report coefficients on the original scale (see
        :mod:`privfedstat.fitting.scaling`); "private" spends 10% of mu on the centres/scales.
    random_state : int, Generator, SeedSequence or None
    secure_mode : bool, default False
        Secure noise (OS CSPRNG, floating-point mitigation; ``random_state`` must be None): see
        :class:`~privfedstat.FederatedEstimator`.
    participation : None, float, int or Participation, default None
        Which clients each round asks: see :class:`~privfedstat.algorithms.fedsgd.FedSGD`.
    on_client_failure : {"raise", "skip"}, default "raise"
        What the server does when a client fails mid-fit: see :class:`~privfedstat.FederatedEstimator`.
    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals and tests: see :class:`~privfedstat.FederatedEstimator`.

    Notes
    -----
    Third-party privacy: the server publishes averages of client iterates whose noise went through
    further non-linear local steps, so the ledger reports the post-processing bound (the client's
    own mu) rather than the paper's contraction-based ``mu / sqrt(m)`` (Lemma 3.6); see
    :class:`~privfedstat.privacy.PrivacyLedger`.

    References
    ----------
    Core paper, Algorithm 3, Lemma 3.6, Theorems 3.3 and 3.7.
    """

    method = "FedAvg"

    _parameter_constraints = {"n_rounds": [ITERATIONS, "auto"], "n_local_steps": ITERATIONS}

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_rounds: int | str = "auto",
        n_local_steps: int = 50,
        step_size: float | str = "auto",
        clip: float | str | AutoClip = "auto",
        weights="size",
        scaling=None,
        random_state=None,
        secure_mode: bool = False,
        participation=None,
        on_client_failure: str = "raise",
        inference="auto",
    ) -> None:
        self.family = family
        self.mu = mu
        self.n_rounds = n_rounds
        self.n_local_steps = n_local_steps
        self.step_size = step_size
        self.clip = clip
        self.weights = weights
        self.scaling = scaling
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.participation = participation
        self.on_client_failure = on_client_failure
        self.inference = inference

    def _advice(self) -> str:
        return ("Increase n_rounds (R), or lower n_local_steps (K) or step_size: where the sites' data differ, the K "
                "local steps pull each site towards its own optimum and FedAvg settles at a point that is not the pooled "
                "estimate, more so the larger eta K (n_local_steps=1 is FedSGD; Scaffold corrects the drift; FedIRLS, "
                "glm()'s default, has none).")

    def _run(self, session: Session, setup: Setup) -> Run:
        R, stop_early = resolve_count(self.n_rounds, setup.mu, PAPER_N_ROUNDS, MAX_ROUNDS_NONPRIVATE)
        eta = resolve_step_size(self.step_size, session.clients.family, session.clients.n_features,
                                setup.square_norm)
        return run_fedavg(session, session.clients, clip=setup.clip, n_rounds=R, n_local_steps=self.n_local_steps,
                          step_size=eta, mu=setup.mu, weights=resolve_weights(self, session, setup.clip),
                          stop_early=stop_early, server_step_size=getattr(self, "server_step_size", 1.0))
