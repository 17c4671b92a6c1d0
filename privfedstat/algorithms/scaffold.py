"""SCAFFOLD with control variates: NP-SCAFFOLD (mu = inf) and DP-SCAFFOLD (finite mu)."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from .._validation import ITERATIONS, Interval, check_iterate
from ..federation import clients as federation_clients
from ..federation.clients import InProcessClients, Reply, _divergence
from ..federation.protocol import Run, Setup
from ..federation.server import aggregate
from ..federation.session import Session
from ..federation.verbs import Verb, register
from ..fitting.base import FederatedEstimator
from ..fitting.stages import resolve_weights
from ..fitting.steps import MAX_ROUNDS_NONPRIVATE, resolve_count, resolve_step_size, settled
from ..privacy.calibration import aggregate_sd, calibrated_sigma, gradient_calibration
from ..privacy.clipping import AutoClip
from ..theory.noise import ScaffoldNoise

__all__ = ["Scaffold"]

#: R with finite mu (the measurements in :class:`Scaffold`'s ``n_local_steps``)
DEFAULT_ROUNDS = 10


class Scaffold(FederatedEstimator):
    """SCAFFOLD (Karimireddy et al. 2020) and DP-SCAFFOLD (Noble et al. 2022), full participation.

    Server state: model x and control variate c; client state: control variate c_i (all start at
    0, as does x). Round r = 1..R:

    1. the server broadcasts (x, c); every client sets y_i = x and takes ``n_local_steps`` (K)
       full-batch steps ``y_i <- y_i - eta_l (g~_i(y_i) - c_i + c)``, where ``g~_i`` is the mean
       of its per-sample gradients, each clipped to norm B, plus Gaussian noise
       ``N(0, sigma_i^2 I)`` with ``sigma_i = 2 B sqrt(R K) / (mu n_i)`` (no noise when mu = inf);
    2. option II control variate: ``c_i+ = c_i - c + (x - y_i) / (K eta_l)``, which equals the
       mean of the K noisy gradients g~_i of the round;
    3. the client uploads ``(y_i - x, c_i+ - c_i)`` (2 d floats) and keeps ``c_i <- c_i+``;
    4. the server updates ``x <- x + eta_g sum_i w_i (y_i - x)`` and ``c <- c + sum_i w_i (c_i+ - c_i)``.

    **Privacy argument** (each client is ``mu``-GDP towards the server, for any data):
    (a) each local step runs a Gaussian mechanism on the clipped mean gradient, whose L2
    sensitivity is ``2B/n_i`` wherever it is evaluated (one datum replaced changes one clipped
    term); (b) it is calibrated to budget ``mu / sqrt(R K)``, and the R K steps compose adaptively
    (their query points depend only on earlier outputs) to ``mu`` (GDP composition; with
    ``clip="auto"`` or ``scaling="private"`` their shares are included and the total is still
    exactly mu);
    (c) ``y_i``, ``c_i+`` (the mean of the noisy gradients) and the uploads are computed from the
    noisy gradients, the previous ``c_i`` and the broadcast ``(x, c)`` only: by induction over
    rounds every state variable is post-processing of privatized outputs (the data are never
    touched except through the mechanism); (d) the server's x and c are post-processing of the
    uploads. The ledger records the R K releases (stage ``"local-gradient"``); the clients run the
    round (verb ``scaffold_round``), keep their ``c_i`` and send only the post-processed uploads.

    **Differences from Noble et al.'s code, on purpose.** Full participation and full-batch local
    steps: client subsampling and minibatching, which would give privacy amplification, are not
    used (the guarantee is then exact GDP composition with no subsampling analysis). Their
    heuristic of resetting the clipping bound to the median per-sample norm at every step is
    *not* copied: it makes B a function of the raw data and breaks the guarantee; here B is fixed
    or chosen privately once (``clip="auto"``). The server averages the control variates with the
    same weights w_i as the model (``n_i / N``; Noble et al. and Karimireddy et al. use 1/m):
    with size weights on the model and 1/m on c, the fixed point of the non-private iteration is
    the minimiser of the unweighted average of client losses, not the pooled M-estimator; with
    the same weights it is exactly the pooled estimator (the two coincide for equal sizes). With
    a finite clip the fixed point is the zero of the weighted mean *clipped* gradient, as for
    every clipped method here.

    Parameters
    ----------
    family : str or Family, default "logistic"
    mu : float, default 2.0
        GDP budget per client (mu); ``float('inf')`` gives NP-SCAFFOLD.
    n_rounds : int or "auto", default "auto"
        Communication rounds (R). "auto": 10 with finite mu (see ``n_local_steps``); with mu = inf
        until the model stops moving (``converged_``), at most
        :data:`~privfedstat.fitting.steps.MAX_ROUNDS_NONPRIVATE`.
    n_local_steps : int, default 10
        Local full-batch steps per round (K). The defaults R = K = 10 give R K = 100 gradient
        evaluations per client, as FedAvg's defaults (R = 2, K = 50): equal compute and, since
        the noise per step depends on R K only, equal noise per step. Among the splits of R K =
        100 into (R, K) = (2, 50), (4, 25), (5, 20), (10, 10), R = 10 had the smallest squared
        distance to the pooled MLE at mu = 2 in every setting we measured (logistic; 6
        heterogeneous clients, N = 7000: 0.0127, 0.0090, 0.0066, 0.0038, FedAvg 0.0048; 100
        clients of 100: 0.029, 0.024, 0.024, 0.022, FedAvg 0.025): the control variates need
        several rounds to pay off (round 1 is a FedAvg round). The price is communication:
        2 d floats per round, i.e. 20 d per client against FedAvg's 2 d.
    step_size : float or "auto", default "auto"
        Local learning rate (eta_l), as FedAvg's ("auto": ``1 / L`` from a public curvature
        bound, see :class:`~privfedstat.FedSGD`; the measurements above used 0.5).
    server_step_size : float, default 1.0
        Global learning rate (eta_g), as in Karimireddy et al.
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B); see :class:`~privfedstat.FedSGD`.
    weights : "size" or array of shape (n_clients,), default "size"
        Server weights w_i for the model and the control variate (``n_i / N``).
    scaling : None, "private", PrivateStandardize or FeatureBounds, default None
        Fit on rescaled columns and report coefficients on the original scale (see
        :mod:`privfedstat.fitting.scaling`); "private" spends 10% of mu on the centres/scales.
    random_state : int, Generator, SeedSequence or None
        Controls all noise.
    secure_mode : bool, default False
        Secure noise (OS CSPRNG, floating-point mitigation; ``random_state`` must be None): see
        :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        What the server does when a client fails mid-fit: see :class:`~privfedstat.FederatedEstimator`.
    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals and tests: see :class:`~privfedstat.FederatedEstimator`.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,), or (n_features, K - 1) for the multinomial family
        x after R rounds.
    history_ : ndarray of shape (R + 1, n_features) (or (R + 1, n_features, K - 1))
        x^(0) = 0, ..., x^(R).
    control_ : ndarray of shape (n_params,)
        The server control variate c after R rounds (flattened, on the fitting scale: the
        rescaled columns when ``scaling`` is used).
    n_iter_ : int
        Gradient evaluations per client (R K).
    clip_ : float
    privacy_ : PrivacyLedger
    communication_ : Communication
        R rounds of 2 d floats per client (plus the private clip search's counts).

    References
    ----------
    Karimireddy et al. (2020), SCAFFOLD, Algorithm 1 (option II); Noble, Bellet & Dieuleveut
    (2022), Differentially private federated learning on heterogeneous data (DP-SCAFFOLD);
    core paper, Section 5.1.
    """

    method = "SCAFFOLD"

    _parameter_constraints = {
        "n_rounds": [ITERATIONS, "auto"],
        "n_local_steps": ITERATIONS,
        "server_step_size": Interval(Real, 0, None, closed="neither"),
    }

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_rounds: int | str = "auto",
        n_local_steps: int = 10,
        step_size: float | str = "auto",
        server_step_size: float = 1.0,
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
        self.n_rounds = n_rounds
        self.n_local_steps = n_local_steps
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.clip = clip
        self.weights = weights
        self.scaling = scaling
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference

    def _advice(self) -> str:
        return "Increase n_rounds (R), or use step_size='auto' if a larger step oscillated."

    def _server_prox(self, x: np.ndarray, step: float) -> np.ndarray:
        """The server's map after averaging, with the round's effective step ``eta_g eta_l K``: the identity
        (:class:`~privfedstat.FedCanon` applies the proximal map of its penalty)."""
        return x

    def _run(self, session: Session, setup: Setup) -> Run:
        R, stop_early = resolve_count(self.n_rounds, setup.mu, DEFAULT_ROUNDS, MAX_ROUNDS_NONPRIVATE)
        K = self.n_local_steps
        eta = resolve_step_size(self.step_size, session.clients.family, session.clients.n_features,
                                setup.square_norm)
        eta_g = float(self.server_step_size)
        w = resolve_weights(self, session, setup.clip)
        p = session.clients.n_params
        sens, mu_step = gradient_calibration(setup.clip, session.sizes, R * K, setup.mu)  # R K noisy gradients
        x, c = session.clients.initial_parameters(), np.zeros(p)
        path = [x]
        for _ in range(R):  # each client keeps its control variate c_i (verb scaffold_round)
            upload, w_r, answered = session.ask("scaffold_round", weights=w, x=x, c=c, clip=setup.clip, step_size=eta,
                                                n_steps=K, sensitivity=sens, mu=mu_step, stage="local-gradient")
            x = self._server_prox(x + eta_g * aggregate(w, upload[:, :p], answered), eta_g * eta * K)
            c = c + aggregate(w, upload[:, p:], answered)
            check_iterate(x, "the SCAFFOLD server update", eta)
            path.append(x)
            if stop_early and settled(path[-1], path[-2]):
                break
        self.control_ = c
        sigma = calibrated_sigma(sens, mu_step)
        noise_sd = eta_g * eta * aggregate_sd(sigma, w)  # the last local step's
        return Run(x, path, (len(path) - 1) * K, noise_sd=noise_sd, update_noise_sd=math.sqrt(K) * noise_sd,
                   noise_model=ScaffoldNoise(eta**2 * float(np.sum(w**2 * sigma**2)), K, len(path) - 1, eta, eta_g),
                   weights=w)


# ---------------------------------------------------------------------------- the client's half
def scaffold_round(clients: InProcessClients, x, c, *, clip: float, step_size: float, n_steps: int, sensitivity,
                   mu: float, stage: str) -> Reply:
    """One SCAFFOLD round: K noisy-gradient local steps with correction ``c - c_i``; send ``(y - x, dc_i)``.

    Each client keeps its control variate ``c_i`` (0 at the start) and updates it to
    ``c_i - c + (x - y) / (K eta)`` (option II of Karimireddy et al.); the upload is
    post-processing of the noisy gradients.
    """
    answered, failing = clients._begin(None)
    o = clients._oracle
    m, p = o.n_clients, o.n_params
    if clients._state.get("scaffold_round") is None:
        clients._state["scaffold_round"] = np.zeros((m, p))
    c_local = clients._state["scaffold_round"]
    y = np.tile(x, (m, 1))
    correction = c - c_local
    records = []
    for _ in range(n_steps):
        g, rec = federation_clients.privatize(o.clipped_gradients(y, clip), clients._noise, sensitivity, mu, stage, "local")
        records.append(rec)
        y = y - step_size * (g + correction)
        if (error := _divergence(y, "SCAFFOLD local steps", step_size, answered)) is not None:
            return clients._reply(y, records, answered, failing, error=error)
    c_new = c_local - c + (x - y) / (n_steps * step_size)
    upload = np.hstack([y - x, c_new - c_local])
    clients._state["scaffold_round"] = np.where(answered[:, None], c_new, c_local)
    return clients._reply(upload, records, answered, failing)


def _model_and_control(n_params: int, n_features: int, request) -> tuple[int, ...]:
    """The model delta and the control-variate delta: 2p floats."""
    return (2 * n_params,)


register(Verb("scaffold_round", shape=_model_and_control, per_client=("sensitivity",), release=("local", "record"),
              steps="n_steps"),
         in_process=scaffold_round)
