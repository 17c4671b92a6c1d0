"""FedSGD: K rounds of server-side gradient descent on privatized client gradients (Algorithm 1)."""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from .._validation import ITERATIONS, Free, Interval
from ..federation.protocol import Run, Setup
from ..federation.secure import AGGREGATIONS
from ..federation.session import Session
from ..fitting.base import FederatedEstimator
from ..fitting.stages import resolve_weights
from ..fitting.steps import gradient_noise_sd, resolve_count, resolve_step_size, secure_gradient_spec, server_gradient_descent
from ..privacy.calibration import aggregate_sd
from ..privacy.clipping import AutoClip
from ..theory.noise import GradientNoise, Stage, fedsgd_noise

__all__ = ["FedSGD", "PAPER_N_ITER"]

#: K of the paper's simulations (Section 4.1), the "auto" count with finite mu
PAPER_N_ITER = 50


class FedSGD(FederatedEstimator):
    """Differentially private FedSGD (Algorithm 1 of the core paper).

    In each of ``n_iter`` rounds every client sends the mean of its per-sample gradients, each
    clipped to norm B, plus Gaussian noise with ``sigma_i = 2 B sqrt(K) / (mu n_i)``; the server
    takes a weighted average and a gradient step. Each client is ``mu``-fed-GDP (Lemma 3.1).

    Parameters
    ----------
    family : str or Family, default "logistic"
        The loss rho: ``"logistic"``, ``"poisson"``, ``"gaussian"`` or ``"huber"``.
    mu : float, default 2.0
        GDP budget per client (mu); ``float('inf')`` for a non-private fit.
    n_iter : int or "auto", default "auto"
        Number of server iterations (K); also the number of communication rounds. "auto": the
        paper's K = 50 with finite mu (every round's noise is calibrated to K, fixed in
        advance); with mu = inf, iterate until the step is negligible (``converged_``), at most
        :data:`~privfedstat.fitting.steps.MAX_ITER_NONPRIVATE`.
    step_size : float or "auto", default "auto"
        Server learning rate (eta). "auto": ``1 / L`` from a public bound L on the Hessian's
        largest eigenvalue: the family's maximum curvature times ``mean ||x||^2``, the number of
        columns for columns on the unit scale, or the private scaling's reference mean squares on
        privately scaled columns (:func:`~privfedstat.families.curvature.auto_step_size`).
        The paper's simulations use 0.5.
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B). ``"auto"`` chooses it privately with 10% of mu
        (see :class:`~privfedstat.privacy.AutoClip`), and with ``mu=inf`` means no clipping
        (B = inf: no clipping bias; pass an AutoClip to clip anyway); ``"paper"`` uses the
        paper's non-private rule and warns; ``float('inf')`` (no clipping) needs ``mu=inf``.
    weights : "size", "optimal" or array of shape (n_clients,), default "size"
        Server aggregation weights (w_i): ``n_i / N``, the optimal weights of eq. (2) (with
        trace(Sigma) replaced by B^2), or given.
    init : array of shape (n_params,) or None, default None
        Initial value (theta^(0)); zeros by default, as in the paper's simulations.
    scaling : None, "private", PrivateStandardize or FeatureBounds, default None
        Fit on rescaled columns and report coefficients on the original scale (see
        :mod:`privfedstat.fitting.scaling`); "private" spends 10% of mu on the centres/scales.
    random_state : int, Generator, SeedSequence or None
        Controls all noise.
    secure_mode : bool, default False
        Secure noise (OS CSPRNG, floating-point mitigation; ``random_state`` must be None): see
        :class:`~privfedstat.FederatedEstimator`.
    participation : None, float, int or Participation, default None
        Which clients each round asks (:class:`~privfedstat.federation.server.Participation`): None
        every client; a rate q in (0, 1) Poisson sampling; an int a uniform cohort of that size;
        drawn from the server's own stream. Each client's noise stays calibrated to all rounds
        (it spends less when it sits a round out); the sampling amplifies nothing towards the
        server, who knows who took part. Inference is not available with partial participation
        (its noise model assumes every client in every round): use ``inference=None``.
    on_client_failure : {"raise", "skip"}, default "raise"
        What the server does when a client fails mid-fit: see :class:`~privfedstat.FederatedEstimator`.
    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals and tests: see :class:`~privfedstat.FederatedEstimator`.
    aggregation : {"local", "secure"}, default "local"
        ``"local"``: every site adds its full Gaussian noise (Algorithm 1). ``"secure"``: the sites'
        gradient messages are summed under secure aggregation (:mod:`privfedstat.federation.secure`):
        each sends its weighted message quantized, with a Skellam share of the noise, and the sum
        carries the noise of one mechanism with budget ``mu / sqrt(K)`` per round -- about
        ``1 / sqrt(m)`` of the local sum's sd. Needs every site asked each round; with mu = inf
        nothing is noised and it changes nothing.
    min_surviving : int or None, default None
        With ``aggregation="secure"``: the fewest sites whose noise shares keep the declared guarantee
        (each share is calibrated for them); a round with fewer survivors is refused
        (:class:`~privfedstat.federation.secure.SecureAggregationRefused`). None: every site.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,), or (n_features, K - 1) for the multinomial family
        theta^(K).
    history_ : ndarray of shape (K + 1, n_params)
        theta^(0), ..., theta^(K).
    n_iter_ : int
        Gradient evaluations per client (K).
    converged_ : bool
        Whether the last step was negligible (see :class:`~privfedstat.FederatedEstimator`).
    clip_ : float
        The clipping bound B used.
    privacy_ : PrivacyLedger
    communication_ : Communication

    References
    ----------
    Peng & Paul, core paper, Algorithm 1, Lemma 3.1, Theorem 3.2.
    """

    method = "FedSGD"

    _parameter_constraints = {
        "n_iter": [ITERATIONS, "auto"],
        "init": Free("_initial, against the number of parameters"),
        "aggregation": list(AGGREGATIONS),
        "min_surviving": [Interval(Integral, 1), None],
    }

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_iter: int | str = "auto",
        step_size: float | str = "auto",
        clip: float | str | AutoClip = "auto",
        weights="size",
        init=None,
        scaling=None,
        random_state=None,
        secure_mode: bool = False,
        participation=None,
        on_client_failure: str = "raise",
        inference="auto",
        aggregation: str = "local",
        min_surviving: int | None = None,
    ) -> None:
        self.family = family
        self.mu = mu
        self.n_iter = n_iter
        self.step_size = step_size
        self.clip = clip
        self.weights = weights
        self.init = init
        self.scaling = scaling
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.participation = participation
        self.on_client_failure = on_client_failure
        self.inference = inference
        self.aggregation = aggregation
        self.min_surviving = min_surviving

    def _advice(self) -> str:
        return ("Increase n_iter (K), or use step_size='auto' if a larger step oscillated; with finite mu more "
                "rounds also mean more noise per round, so consider FedIRLS (Newton steps) on correlated designs.")

    def _run(self, session: Session, setup: Setup) -> Run:
        K, stop_early = resolve_count(self.n_iter, setup.mu, PAPER_N_ITER)
        eta = resolve_step_size(self.step_size, session.clients.family, session.clients.n_features,
                                setup.square_norm)
        sd = gradient_noise_sd(setup.clip, session.sizes, K, setup.mu)
        weights = resolve_weights(self, session, setup.clip, noise_var=sd**2)
        theta0 = _initial(self.init, session.clients)
        if self.aggregation == "secure" and math.isfinite(setup.mu):
            return self._run_secure(session, setup, theta0, K, eta, weights)
        theta, path = server_gradient_descent(session, theta0, clip=setup.clip, n_iter=K, step_size=eta, mu=setup.mu,
                                              weights=weights, stage="gradient", stop_early=stop_early)
        noise_sd = eta * aggregate_sd(sd, weights)
        noise_model = fedsgd_noise(clip=setup.clip, sizes=session.sizes, mu=setup.mu, n_iter=K, step_size=eta,
                                   weights=weights)
        return Run(theta, [theta0] + path, len(path), noise_sd=noise_sd, update_noise_sd=noise_sd,
                   noise_model=noise_model, weights=weights)


    def _run_secure(self, session: Session, setup: Setup, theta0: np.ndarray, K: int, eta: float,
                    weights: np.ndarray) -> Run:
        """Algorithm 1 with the gradients summed under secure aggregation (``secure_gradients``:
        :func:`~privfedstat.fitting.steps.server_gradient_descent` in a secure session; the arithmetic of
        :func:`~privfedstat.fitting.steps.secure_gradient_spec`, a round's budget ``mu / sqrt(K)``)."""
        theta, path = server_gradient_descent(session, theta0, clip=setup.clip, n_iter=K, step_size=eta, mu=setup.mu,
                                              weights=weights, stage="gradient")
        spec = secure_gradient_spec(session, weights, setup.clip, K, setup.mu)
        var = eta**2 * spec.variance(session.clients.n_clients)  # the sum's noise and rounding per step, all surviving
        noise_sd = math.sqrt(var)
        noise_model = GradientNoise(float(eta), (Stage(K, weights, var),))
        return Run(theta, [theta0] + path, len(path), noise_sd=noise_sd, update_noise_sd=noise_sd,
                   noise_model=noise_model, weights=weights)


def _initial(init, clients) -> np.ndarray:
    """theta^(0): ``init`` (checked), or the model's initial parameters (zeros for a GLM)."""
    if init is None:
        return clients.initial_parameters()
    d = clients.n_params
    arr = np.asarray(init, dtype=np.float64)
    if arr.shape != (d,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"init must be {d} finite numbers, got shape {arr.shape}.")
    return arr.copy()
