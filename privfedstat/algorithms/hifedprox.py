"""HiFedProx (Kabgani & Ahookhosh): power-p proximal local objectives with Armijo steps, optionally client-level DP."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from .._linalg import clip_rows
from .._validation import ITERATIONS, MAX_ITERATIONS, Free, Interval, check_finite_bounds, check_iterate
from ..federation import clients as federation_clients
from ..federation import power_prox
from ..federation.clients import InProcessClients, Reply
from ..federation.oracle import make_oracle
from ..federation.power_prox import Armijo, PowerProx
from ..federation.protocol import Run, Setup
from ..federation.server import aggregate
from ..federation.session import Session
from ..federation.verbs import Verb, register
from ..fitting.base import CLIENT_LEVEL_INFERENCE, FederatedEstimator
from ..kernels.glm_nb import CLIP_SAFETY
from ..privacy.calibration import aggregate_sd, calibrated_sigma, client_update_calibration

__all__ = ["HiFedProx"]


class HiFedProx(FederatedEstimator):
    """HiFedProx: local minimisation of ``f_i(u) + mu/(p R^(p-2)) ||u - w||^p`` by Armijo minibatch steps.

    Each of ``n_rounds`` (R) rounds the server broadcasts w^t to the clients asked
    (``participation``; the paper samples 18 of 60 uniformly without replacement, an integer cohort
    here). Client i starts at ``u = w^t`` and takes ``n_local_steps`` (S_i) steps: it draws a
    minibatch B of ``batch_size`` (b) rows, forms ``Q_B(u) = f_B(u) + phi(u - w^t)`` with the
    scale-matched regulariser ``phi(d) = mu/(p R^(p-2)) ||d||^p`` (gradient
    ``mu R^(2-p) ||d||^(p-2) d``, 0 at d = 0; :class:`~privfedstat.federation.power_prox.PowerProx`)
    and its gradient g, and accepts the first of the trial steps ``alpha0 rho^j`` (j = 0..J) with
    ``Q_B(u - alpha g) <= Q_B(u) - c alpha ||g||^2`` (same minibatch; if all J + 1 fail, u is
    kept and the failure counted). It sends ``Delta_i = u - w^t``; the server moves to
    ``w^t + mean_i Delta_i``, the client-uniform average over the clients that answered.
    p = 2 is FedProx with a safeguarded step; ``prox_coef = 0`` is FedAvg with Armijo steps.

    Decisions where the paper is open [I]: alpha0 restarts every local step; the trial counts
    include every trial point evaluated (1 to J + 1 per local step); minibatches are drawn
    without replacement within a step, afresh each step, from a per-client stream derived from
    the fit's seed, the round and the client only, so that fits with the same ``random_state``
    and different p (or prox_coef) see the same cohorts and minibatches (the paper's paired
    design); ``n_local_steps`` and ``step_size`` may differ between clients (the stress protocol).

    **Privacy.** The paper's method is not private. With finite ``mu`` each client's update is
    clipped to L2 norm S (``update_clip``) and gets Gaussian noise of sd ``2 S sqrt(R) / mu`` on the
    client, exactly as in :class:`~privfedstat.DPFedAvg` (the calibration of
    :func:`~privfedstat.privacy.calibration.client_update_calibration`): each client is mu-GDP for
    its whole dataset towards the server (unit "client"), and ``privacy_.public_view().epsilon``, the
    third party's, covers Poisson participation (a cohort is accounted without amplification). ``mu=inf`` runs the
    paper's method (no clipping by default, no noise) and the ledger reports no privacy. The
    default is private (mu = 2), as for every estimator of this package.

    Parameters
    ----------
    family : str or Family, default "logistic"
    mu : float, default 2.0
        Client-level GDP budget per client towards the server (not the paper's mu, which is
        ``prox_coef``); ``inf`` for the paper's non-private method.
    n_rounds : int, default 100
        R.
    power : float, default 5.0
        p >= 2 (the paper's useful range is 5-7; p = 5 is its lowest-cost choice there).
    prox_coef : float, default 0.03
        mu in the paper (>= 0): the regulariser's gradient norm at ``||d|| = R`` is mu R for every p.
    prox_radius : float, default 1.0
        R > 0, the reference displacement.
    n_local_steps : int or array of shape (n_clients,), default 3
        S_i, local steps per round.
    step_size : float or array of shape (n_clients,), default 0.5
        alpha0, the initial Armijo trial step.
    batch_size : int or None, default 16
        b, rows per minibatch (a client with fewer rows uses all of them); None: full batch.
    armijo_c : float, default 1e-4
        c, the sufficient-decrease constant.
    backtrack_factor : float, default 0.5
        rho.
    max_backtracks : int, default 12
        J (at most J + 1 trial points per local step).
    update_clip : float or "auto", default "auto"
        S, the bound on ``||Delta_i||``. "auto": ``prox_radius`` (R, the displacement scale the
        regulariser is matched to; public) with finite mu, no clipping with mu = inf.
    participation : None, float, int or Participation, default None
        Which clients each round asks (see :class:`~privfedstat.FedSGD`): an int is a uniform cohort
        without replacement (the paper: 18), a rate q in (0, 1) Poisson sampling.
    random_state : int, Generator, SeedSequence or None
    secure_mode : bool, default False
        See :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        See :class:`~privfedstat.FederatedEstimator`.
    inference : None, default None
        Only None (client-level: no standard errors).

    Attributes
    ----------
    coef_, history_ (w^0, ..., w^R), converged_, privacy_ (client-level ledger), communication_
        See :class:`~privfedstat.FederatedEstimator`.
    n_iter_ : int
        Local gradient evaluations per client, ``R max_i S_i``.
    displacements_ : pandas.DataFrame
        Server-side, not for publication: one row per (round, client that sent): ``round``,
        ``client``, ``displacement`` (the norm of the message received, ``||Delta_i||`` with
        mu = inf), ``armijo_trials`` and ``line_search_failures`` (that round's; NaN with finite mu,
        where they are not released). It shows who took part in each round, which the third
        party's amplified epsilon assumes hidden.
    armijo_trials_, line_search_failures_ : int or None
        Their totals over the fit (None with finite mu).

    References
    ----------
    Kabgani, A. and Ahookhosh, M. Beyond conventional federated learning via high-order
    regularization (HiFedProx), eqs. (4)-(8), Proposition 1, Section V. Li, T. et al. (2020),
    FedProx. McMahan, Ramage, Talwar & Zhang (2018) for the client-level privacy.
    """

    method = "HiFedProx"
    privacy_unit = "client"
    supports_inference = False
    _norms = ()

    _parameter_constraints = {
        "n_rounds": ITERATIONS,
        "power": Interval(Real, 2, None, closed="left", hint="It is the power p of the proximal term."),
        "prox_coef": Interval(Real, 0, None, closed="left", hint="It is the proximal coefficient (mu in the paper)."),
        "prox_radius": Interval(Real, 0, None, closed="neither"),
        "n_local_steps": Free("_local_settings: an integer >= 1, or one per client"),
        "step_size": Free("_local_settings: a number > 0 (alpha0), or one per client"),
        "batch_size": [Interval(Integral, 1), None],
        "armijo_c": Interval(Real, 0, 1, closed="neither", hint="It is Armijo's sufficient-decrease constant c."),
        "backtrack_factor": Interval(Real, 0, 1, closed="neither", hint="It is Armijo's backtracking factor rho."),
        "max_backtracks": Interval(Integral, 0),
        "update_clip": [Interval(Real, 0, None, closed="neither", finite=False), "auto"],
        "inference": CLIENT_LEVEL_INFERENCE,
    }

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_rounds: int = 100,
        power: float = 5.0,
        prox_coef: float = 0.03,
        prox_radius: float = 1.0,
        n_local_steps=3,
        step_size=0.5,
        batch_size: int | None = 16,
        armijo_c: float = 1e-4,
        backtrack_factor: float = 0.5,
        max_backtracks: int = 12,
        update_clip: float | str = "auto",
        participation=None,
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference=None,
    ) -> None:
        self.family = family
        self.mu = mu
        self.n_rounds = n_rounds
        self.power = power
        self.prox_coef = prox_coef
        self.prox_radius = prox_radius
        self.n_local_steps = n_local_steps
        self.step_size = step_size
        self.batch_size = batch_size
        self.armijo_c = armijo_c
        self.backtrack_factor = backtrack_factor
        self.max_backtracks = max_backtracks
        self.update_clip = update_clip
        self.participation = participation
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference

    # ------------------------------------------------------------------ parameters
    def _declared_mu(self, n_clients: int) -> float:
        self._local_settings(n_clients)  # per-client settings checked against M before a budget is charged
        return super()._declared_mu(n_clients)

    def _validate_params(self, mu: float) -> None:
        super()._validate_params(mu)
        check_finite_bounds(self, ("update_clip",), mu, "the model updates")

    def _prox(self) -> PowerProx:
        return PowerProx(self.prox_coef, self.prox_radius, self.power)

    def _armijo(self) -> Armijo:
        return Armijo(self.armijo_c, self.backtrack_factor, self.max_backtracks)

    def _update_clip(self, mu: float) -> float:
        """S: ``update_clip``, or with "auto" R (finite mu) or inf (mu = inf)."""
        if isinstance(self.update_clip, str):  # "auto", the only string the parameter table lets through
            return math.inf if math.isinf(mu) else float(self.prox_radius)
        return float(self.update_clip)

    def _local_settings(self, n_clients: int) -> tuple[np.ndarray, np.ndarray]:
        """(S_i, alpha0_i) for every client, checked."""
        steps = _per_client(self.n_local_steps, n_clients, "n_local_steps", Integral)
        if np.any(steps < 1) or np.any(steps > MAX_ITERATIONS):
            raise ValueError(f"n_local_steps must be integers in [1, {MAX_ITERATIONS}] (MAX_ITERATIONS, the bound of "
                             f"every iteration count), got {self.n_local_steps!r}.")
        alphas = _per_client(self.step_size, n_clients, "step_size", Real).astype(np.float64)
        if not np.all(np.isfinite(alphas) & (alphas > 0)):
            raise ValueError(f"step_size (alpha0) must be finite numbers > 0, got {self.step_size!r}.")
        return steps.astype(np.int64), alphas

    def _advice(self) -> str:
        return "Increase n_rounds, or lower step_size (alpha0) or n_local_steps (a stochastic method need not settle)."

    # ------------------------------------------------------------------ protocol
    def _run(self, session: Session, setup: Setup) -> Run:
        import pandas as pd
        clients = session.clients
        m, R = clients.n_clients, int(self.n_rounds)
        steps, alphas = self._local_settings(m)
        prox, armijo = self._prox(), self._armijo()
        S = self._update_clip(setup.mu)
        sens, mu_round = client_update_calibration(S, m, R, setup.mu)
        weights = np.full(m, 1.0 / m)  # client-uniform (the paper's objective (2))
        theta = clients.initial_parameters()
        p = theta.size
        path, rows = [theta], []
        for t, batch_seed in enumerate(session.seed.spawn(R)):
            part = session.participants()
            values, _, answered = session.ask("hifedprox_round", weights=weights, w=theta, prox=prox, armijo=armijo,
                                              n_steps=steps, step_size=alphas, batch_size=self.batch_size,
                                              batch_seed=batch_seed, update_clip=S, sensitivity=sens, mu=mu_round,
                                              stage="hifedprox-update", active=part)
            theta = theta + aggregate(weights, values[:, :p], answered) / session.sampling_rate  # Poisson: fixed q
            check_iterate(theta, "the HiFedProx server update", 1.0)
            path.append(theta)
            sent = np.flatnonzero(answered if part is None else answered & part)
            diag = values[sent, p:] if values.shape[1] > p else np.full((sent.size, 2), np.nan)
            rows.append(pd.DataFrame({"round": t, "client": sent,
                                      "displacement": np.linalg.norm(values[sent, :p], axis=1),
                                      "armijo_trials": diag[:, 0], "line_search_failures": diag[:, 1]}))
        self.displacements_ = pd.concat(rows, ignore_index=True)
        private = math.isfinite(setup.mu)
        self.armijo_trials_ = None if private else int(self.displacements_["armijo_trials"].sum())
        self.line_search_failures_ = None if private else int(self.displacements_["line_search_failures"].sum())
        noise_sd = aggregate_sd(calibrated_sigma(sens, mu_round), weights)
        return Run(theta, path, R * int(steps.max()), noise_sd=noise_sd, update_noise_sd=noise_sd, weights=weights)


def _per_client(value, n_clients: int, name: str, kind: type) -> np.ndarray:
    """A number of type ``kind`` for every client, or one per client (array of shape (n_clients,))."""
    if isinstance(value, kind) and not isinstance(value, bool):
        return np.full(n_clients, value)
    arr = np.asarray(value)
    if arr.shape != (n_clients,) or arr.dtype == bool or not all(isinstance(v, kind) for v in arr.tolist()):
        raise ValueError(f"{name} must be one number or one per client ({n_clients}), got {value!r}.")
    return arr


# ---------------------------------------------------------------------------- the client's half
def hifedprox_round(clients: InProcessClients, w, *, prox, armijo, n_steps, step_size, batch_size: int | None,
                    batch_seed, update_clip: float, sensitivity, mu: float, stage: str, active=None) -> Reply:
    """One round of HiFedProx (Kabgani & Ahookhosh): each asked client's ``Delta_i = u_i - w``, clipped to S, plus noise.

    Client i takes ``n_steps[i]`` (S_i) local steps from the broadcast w on
    ``f_B(u) + phi(u - w)`` (``prox``: :class:`~privfedstat.federation.power_prox.PowerProx`), each on
    a fresh minibatch of ``min(batch_size, n_i)`` rows drawn from its stream for the round
    (:func:`~privfedstat.federation.power_prox.client_batch_rng` of the public ``batch_seed``) with
    Armijo backtracking from ``step_size[i]`` (alpha0;
    :func:`~privfedstat.federation.power_prox.power_prox_descent`). ``Delta_i`` is clipped to L2
    norm S (``update_clip``; a non-finite one is sent as 0), so replacing the client's whole
    dataset moves it by at most 2S (``sensitivity``): a client-level release. With mu = inf (no
    privacy) each row also carries two diagnostics after ``Delta_i``: the client's Armijo trial
    points and its failed line searches.
    """
    answered, failing = clients._begin(active)
    who_asked = np.flatnonzero(answered)
    data, family, sizes = clients._oracle.data, clients.family, clients.sizes
    rngs = [power_prox.client_batch_rng(batch_seed, clients.first_client + i) for i in who_asked]

    def batch_objective(step: int, who: np.ndarray):
        rows = [power_prox.minibatch_rows(rngs[k], int(sizes[who_asked[k]]), batch_size) for k in who]
        o = make_oracle(data.take(np.concatenate([data.offsets[who_asked[k]] + r for k, r in zip(who, rows)]),
                                  np.array([r.size for r in rows])), family)
        return o.losses, lambda U: (o.losses(U), o.clipped_gradients(U, math.inf))

    u, trials, failures = power_prox.power_prox_descent(np.asarray(w, dtype=np.float64), np.asarray(n_steps)[who_asked],
                                                        np.asarray(step_size, dtype=np.float64)[who_asked], prox,
                                                        armijo, batch_objective)
    delta = np.zeros((clients.n_clients, clients.n_params))
    delta[who_asked] = clip_rows(u - w, update_clip * CLIP_SAFETY)
    noisy, rec = federation_clients.privatize(delta, clients._noise, sensitivity, mu, stage, "aggregated", unit="client")
    if math.isinf(mu):
        diagnostics = np.zeros((clients.n_clients, 2))
        diagnostics[who_asked] = np.column_stack([trials, failures])
        noisy = np.hstack([noisy, diagnostics])
    return clients._reply(noisy, [rec], answered, failing)


def _update_and_diagnostics(n_params: int, n_features: int, request) -> tuple[int, ...]:
    """``Delta_i`` (p floats), then with mu = inf the two diagnostics (Armijo trials, failed line searches)."""
    return (n_params + (2 if math.isinf(request.get("mu", 0.0)) else 0),)


register(Verb("hifedprox_round", shape=_update_and_diagnostics,
              per_client=("sensitivity", "active", "n_steps", "step_size"), release=("aggregated", "client"),
              records=(("prox", PowerProx), ("armijo", Armijo))),
         in_process=hifedprox_round)
