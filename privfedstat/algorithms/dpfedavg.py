"""DP-FedAvg with client-level privacy (McMahan, Ramage, Talwar & Zhang 2018): clipped model updates, Poisson participation."""

from __future__ import annotations

from numbers import Real

from .._validation import ITERATIONS, Interval, check_finite_bounds, check_iterate
from ..federation.protocol import Run, Setup
from ..federation.session import Session
from ..fitting.base import CLIENT_LEVEL_INFERENCE, FederatedEstimator
from ..fitting.stages import resolve_weights
from ..fitting.steps import resolve_step_size
from ..privacy.calibration import aggregate_sd, calibrated_sigma, client_update_calibration

__all__ = ["DPFedAvg"]


class DPFedAvg(FederatedEstimator):
    """Differentially private FedAvg that protects each client's whole dataset (client-level DP).

    Each of ``n_rounds`` (R) rounds the server asks a sample of the clients (``participation``);
    every client asked runs ``n_local_steps`` (K) full-batch gradient steps from the server's model
    (no noise, no per-sample clipping), clips its model update to L2 norm S (``update_clip``),
    adds Gaussian noise and sends it; the server averages the updates with weights w_i
    renormalised over the clients that answered and moves its model by ``server_step_size``
    times the average. This is DP-FedAvg of McMahan et al. (2018) with each client adding its own
    noise (the server is not trusted with clean updates, as everywhere in this package).

    Privacy unit: a client's whole dataset. Replacing all of a client's rows moves its clipped
    update by at most 2S, so with noise ``sigma = 2 S sqrt(R) / mu`` per message each client is
    ``mu``-GDP for its whole dataset towards the server, who knows who took part (sampling
    amplifies nothing there; a client that sits rounds out spends less). With Poisson participation
    (rate q) the server adds its own noise of the same sd in the place of every client that did not
    send (so the published aggregate's noise does not reveal how many took part), keeps the
    weights fixed and divides the aggregate by q (the fixed-denominator estimator of McMahan et
    al.); rounds with nobody sampled are not redrawn. Towards a third party, who sees the published
    model but not who took part, this amplifies the guarantee:
    ``privacy_.public_view().epsilon(delta)`` composes the R Poisson-subsampled Gaussian mechanisms
    (one client's whole dataset replaced, noise multiplier ``sigma / S``) with dp-accounting's PLD.
    The price is the noise of all m clients in every round. ``privacy_`` is the server's view (it
    shows who took part); ``summary()`` states both audiences' epsilons.

    Parameters
    ----------
    family : str or Family, default "logistic"
    mu : float, default 2.0
        Client-level GDP budget per client towards the server (mu); ``inf`` for no noise.
    n_rounds : int, default 20
        Communication rounds (R).
    n_local_steps : int, default 5
        Local full-batch gradient steps per round (K).
    step_size : float or "auto", default "auto"
        Local learning rate (eta); "auto": ``1 / L`` from a public curvature bound
        (:func:`~privfedstat.families.curvature.auto_step_size`).
    server_step_size : float, default 1.0
        Server learning rate (eta_g) applied to the averaged update.
    update_clip : float, default 1.0
        S, the bound on the L2 norm of each client's model update (public; with columns on the
        unit scale an update of K steps of size 1/L is of order ``K / L`` times the gradient).
    participation : None, float, int or Participation, default None
        Which clients each round asks (see :class:`~privfedstat.algorithms.fedsgd.FedSGD`); a rate
        q in (0, 1) is Poisson sampling, which the third party's epsilon accounts for.
    weights : "size" or array of shape (n_clients,), default "size"
        Server aggregation weights (w_i).
    random_state : int, Generator, SeedSequence or None
    secure_mode : bool, default False
        See :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        See :class:`~privfedstat.FederatedEstimator`.
    inference : None, default None
        Only None: the inference releases are record-level (per-row sensitivities) and cannot
        carry a client-level guarantee, so this estimator reports no standard errors.

    Attributes
    ----------
    coef_, history_ (theta^(0..R)), n_iter_ (local gradient steps per client, R K), converged_,
    privacy_ (client-level ledger), communication_.

    References
    ----------
    McMahan, H. B., Ramage, D., Talwar, K. and Zhang, L. (2018). Learning differentially private
    recurrent language models. ICLR 2018 (DP-FedAvg, Algorithm 1).
    """

    method = "DP-FedAvg (client-level)"
    privacy_unit = "client"
    supports_inference = False
    _norms = ()

    _parameter_constraints = {
        "n_rounds": ITERATIONS,
        "n_local_steps": ITERATIONS,
        "server_step_size": Interval(Real, 0, None, closed="neither"),
        "update_clip": Interval(Real, 0, None, closed="neither", finite=False),
        "inference": CLIENT_LEVEL_INFERENCE,
    }

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_rounds: int = 20,
        n_local_steps: int = 5,
        step_size: float | str = "auto",
        server_step_size: float = 1.0,
        update_clip: float = 1.0,
        participation=None,
        weights="size",
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference=None,
    ) -> None:
        self.family = family
        self.mu = mu
        self.n_rounds = n_rounds
        self.n_local_steps = n_local_steps
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.update_clip = update_clip
        self.participation = participation
        self.weights = weights
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference

    def _validate_params(self, mu: float) -> None:
        super()._validate_params(mu)
        check_finite_bounds(self, ("update_clip",), mu, "the model updates")

    def _advice(self) -> str:
        return "Increase n_rounds (R) or n_local_steps (K), or raise update_clip if most updates are clipped."

    def _run(self, session: Session, setup: Setup) -> Run:
        R, K = int(self.n_rounds), int(self.n_local_steps)
        eta = resolve_step_size(self.step_size, session.clients.family, session.clients.n_features)
        eta_g = float(self.server_step_size)
        S = float(self.update_clip)
        w = resolve_weights(self, session, setup.clip)
        sens, mu_round = client_update_calibration(S, session.clients.n_clients, R, setup.mu)
        theta = session.clients.initial_parameters()
        path = [theta]
        for _ in range(R):
            update = session.mean("clipped_update", weights=w, theta=theta, step_size=eta, n_steps=K, update_clip=S,
                                  sensitivity=sens, mu=mu_round, stage="client-update", active=session.participants())
            theta = theta + eta_g * update / session.sampling_rate  # Poisson rounds: fixed denominator q (unbiased)
            check_iterate(theta, "the DP-FedAvg server update", eta_g)
            path.append(theta)
        noise_sd = eta_g * aggregate_sd(calibrated_sigma(sens, mu_round), w)
        return Run(theta, path, R * K, noise_sd=noise_sd, update_noise_sd=noise_sd, weights=w)
