"""FedHybrid: one round of local noisy GD, then K2 FedSGD rounds from the average (Algorithm 2)."""

from __future__ import annotations

from .._validation import ITERATIONS
from ..federation.protocol import Run, Setup
from ..federation.session import Session
from ..fitting.base import FederatedEstimator
from ..fitting.stages import resolve_weights
from ..fitting.steps import gradient_noise_sd, local_gradient_descent, resolve_count, resolve_step_size, server_gradient_descent
from ..privacy.calibration import aggregate_sd, stage_budget
from ..privacy.clipping import AutoClip
from ..theory.noise import fedhybrid_noise

__all__ = ["FedHybrid"]

#: K2 of the paper's simulations (Section 4.1), the "auto" count with finite mu
PAPER_N_SERVER_ITER = 20


class FedHybrid(FederatedEstimator):
    """Differentially private FedHybrid (Algorithm 2 of the core paper).

    Stage I: every client runs ``n_local_steps`` (K1) noisy GD steps from 0 on its own data with
    noise ``a_i = 2 B eta sqrt(2 K1) / (mu n_i)`` on the parameter, and sends the result; the
    server averages them with weights n_i / N. Stage II: ``n_server_iter`` (K2) FedSGD steps from
    that average with ``sigma_i = 2 B sqrt(2 K2) / (mu n_i)``. Each stage spends ``mu / sqrt(2)``,
    so each client is ``mu``-fed-GDP (Lemma 3.4).

    Parameters
    ----------
    family : str or Family, default "logistic"
        The loss rho.
    mu : float, default 2.0
        GDP budget per client (mu); ``inf`` for no privacy.
    n_local_steps : int, default 30
        Stage I local iterations (K1; the same K1i = K1 for every client).
    n_server_iter : int or "auto", default "auto"
        Stage II server iterations (K2). "auto": the paper's 20 with finite mu; with mu = inf
        until the step is negligible (``converged_``), at most
        :data:`~privfedstat.fitting.steps.MAX_ITER_NONPRIVATE`.
    step_size : float or "auto", default "auto"
        Learning rate of both stages (eta_1 = eta_2, as in the paper's simulations, which use
        0.5). "auto": ``1 / L`` from a public curvature bound (see :class:`~privfedstat.FedSGD`).
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B); see :class:`~privfedstat.FedSGD` ("auto" with
        ``mu=inf``: no clipping).
    weights : "size", "optimal" or array, default "size"
        Stage II server weights (w_i); stage I always averages with n_i / N as in Algorithm 2.
    scaling : None, "private", PrivateStandardize or FeatureBounds, default None
        Fit on rescaled columns and report coefficients on the original scale (see
        :mod:`privfedstat.fitting.scaling`); "private" spends 10% of mu on the centres/scales.
    random_state : int, Generator, SeedSequence or None
    secure_mode : bool, default False
        Secure noise (OS CSPRNG, floating-point mitigation; ``random_state`` must be None): see
        :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        What the server does when a client fails mid-fit: see :class:`~privfedstat.FederatedEstimator`.
    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals and tests: see :class:`~privfedstat.FederatedEstimator`.

    Attributes
    ----------
    coef_, history_, n_iter_ (K1 + K2), converged_, clip_, privacy_, communication_ : see FedSGD.

    References
    ----------
    Core paper, Algorithm 2, Lemma 3.4, Theorem 3.5.
    """

    method = "FedHybrid"

    _parameter_constraints = {"n_local_steps": ITERATIONS, "n_server_iter": [ITERATIONS, "auto"]}

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_local_steps: int = 30,
        n_server_iter: int | str = "auto",
        step_size: float | str = "auto",
        clip: float | str | AutoClip = "auto",
        weights="size",
        scaling=None,
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference="auto",
    ) -> None:
        self.family = family
        self.mu = mu
        self.n_local_steps = n_local_steps
        self.n_server_iter = n_server_iter
        self.step_size = step_size
        self.clip = clip
        self.weights = weights
        self.scaling = scaling
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference

    def _advice(self) -> str:
        return "Increase n_server_iter (K2), or use step_size='auto' if a larger step oscillated."

    def _run(self, session: Session, setup: Setup) -> Run:
        K1 = self.n_local_steps
        K2, stop_early = resolve_count(self.n_server_iter, setup.mu, PAPER_N_SERVER_ITER)
        eta = resolve_step_size(self.step_size, session.clients.family, session.clients.n_features,
                                setup.square_norm)
        mu_stage = stage_budget(setup.mu, 2)
        theta0 = session.clients.initial_parameters()
        theta_bar = local_gradient_descent(session, session.clients, theta0, clip=setup.clip, n_steps=K1, step_size=eta,
                                           mu=mu_stage, stage="local-step", weights=session.size_weights)
        sd = gradient_noise_sd(setup.clip, session.sizes, K2, mu_stage)
        weights = resolve_weights(self, session, setup.clip, noise_var=sd**2)
        theta, path = server_gradient_descent(session, theta_bar, clip=setup.clip, n_iter=K2, step_size=eta,
                                              mu=mu_stage, weights=weights, stage="gradient", stop_early=stop_early)
        noise_sd = eta * aggregate_sd(sd, weights)
        noise_model = fedhybrid_noise(clip=setup.clip, sizes=session.sizes, mu=setup.mu, n_local_steps=K1,
                                      n_server_iter=K2, step_size=eta, weights=weights)
        return Run(theta, [theta0, theta_bar] + path, K1 + len(path), noise_sd=noise_sd, update_noise_sd=noise_sd,
                   noise_model=noise_model, weights=weights)
