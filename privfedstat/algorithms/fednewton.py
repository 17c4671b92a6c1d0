"""FedNewton: FedAvg on half of each client's data, then one private local Newton step (Algorithm 4)."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from .._linalg import MAX_HESSIAN_GB, clip_rows, floor_eigenvalues, vec_to_sym
from .._validation import ITERATIONS, InstanceOf, Interval, Options, check_finite_bounds
from .._warn import warn
from ..data.federated import FederatedData
from ..exceptions import ConvergenceWarning, PrivacyLeakWarning
from ..families.base import Family
from ..federation.clients import InProcessClients, Reply
from ..federation.oracle import ClientOracle
from ..federation.protocol import Run, Setup
from ..federation.queries import search_bounds
from ..federation.session import Session
from ..federation.verbs import Verb, parameters, register
from ..fitting.base import FederatedEstimator
from ..fitting.stages import bound_search, resolve_weights
from ..fitting.steps import resolve_step_size
from ..fitting.verdict import remedy
from ..privacy.calibration import aggregate_sd, calibrated_sigma, hessian_sensitivity
from ..privacy.clipping import AutoClip
from ..privacy.newton_policy import NewtonPolicy
from ..theory.noise import NewtonNoise
from .fedavg import run_fedavg

__all__ = ["FedNewton", "newton_step", "max_clients", "warn_many_clients"]


class FedNewton(FederatedEstimator):
    """Differentially private FedNewton (Algorithm 4 of the core paper), private for any data.

    1. Every client splits its rows at random into halves X1 (floor(n_i/2) rows) and X2.
    2. ``n_rounds`` (R) rounds of FedAvg with ``n_local_steps`` (K) local steps on the X1 halves,
       with budget ``mu_N / sqrt(2)``: ``sigma_i = 2 B eta sqrt(R K) / ((mu_N / sqrt 2) n1_i)``, which is
       the paper's ``4 B eta sqrt(2K) / (mu n_i)`` for R = 1, n1_i = n_i / 2 and mu_N = mu.
    3. Each client takes one Newton step from the FedAvg output theta^(1),
       ``theta_i = theta^(1) - H^{-1} gbar_i + noise`` (budget ``mu_N / sqrt(2)``), and the server
       averages with w_i.

    **Where this differs from Algorithm 4, and why** (``newton_noise="private"``, the default;
    ``docs/algorithms/fednewton.md`` has the measurements). Algorithm 4 inverts each client's own
    first-half Hessian and calibrates the noise with ``B_new = 4 sqrt(2) B / tau_1``, tau_1 the
    strong-convexity constant of the *population* loss: for a given data set nothing bounds
    ``||H_i^{-1}||`` by 1/tau_1, so that is no privacy guarantee. Bounding it by flooring each
    client's eigenvalues at lambda makes the step's sensitivity ``O(C_H / (lambda^2 n1_i))``, which
    at small n_i forces a floor above the Hessian's spectrum, and a floored "Newton step" is then a
    damped gradient step that keeps FedAvg's bias (issue 41: logistic's ``ell''(0) = 1/4`` against
    eigenvalues 0.13-0.21). So here every client uses the same *public* Newton matrix H:

    * at theta^(1) the fit searches C_H privately again, at the search's ``pilot_quantile`` (where
      C_H was searched; ``RESEARCH_SHARE`` = 5% of mu^2), and every client releases its mean
      Hessian, per-sample Hessians clipped to C_H, over all its rows (sensitivity
      ``sqrt(2) C_H / n_i``, ``HESSIAN_SHARE`` = 15% of mu^2). Both shares are fixed before any
      release; the two stages share the rest in squares (``mu_N = sqrt(0.8) mu``).
    * H is the weighted mean of the releases with its eigenvalues floored at lambda, the level
      below which they cannot be told from the release's noise
      (:func:`~privfedstat.privacy.calibration.noise_floor`), at least 1% of ``ell''(0)``:
      post-processing, so H and lambda are public.
    * gbar_i is the mean over X2 of per-sample gradients clipped to B, projected onto the ball of
      radius ``newton_grad_clip`` (G_i; none by default). Replacing one datum moves the step by at
      most ``min(2 B / n2_i, 2 G_i) / lambda_min(H)``, to which the noise is calibrated.

    Theorem 3.9's error bound needs ``m <= (N / (d v log N))^(2/3)`` (its constant taken as 1): with
    more clients the FedAvg stage's bias is too large for one Newton step from it, and the fit warns
    with :class:`~privfedstat.ConvergenceWarning` (fewer, larger sites, or :class:`~privfedstat.FedIRLS`).

    Parameters
    ----------
    family : str or Family, default "logistic"
    mu : float, default 2.0
        GDP budget per client (mu); ``inf`` for no privacy.
    n_rounds : int, default 1
        FedAvg rounds before the Newton step (R).
    n_local_steps : int, default 50
        Local iterations per FedAvg round (K).
    step_size : float or "auto", default "auto"
        Local learning rate (eta) of the FedAvg stage; "auto": ``1 / L`` from a public curvature
        bound (see :class:`~privfedstat.FedSGD`). The paper's simulations use 0.5.
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B). A number is a complete setting (the Hessian bound is
        then searched privately alone).
    hessian_clip : float or None, default None
        Bound on per-sample Hessian norms (C_H). None: chosen like ``clip`` ("auto": privately, at
        the same quantile, sharing the clip budget, and again at theta^(1) as above; "paper":
        raw-data rule; infinite if clip is; a finite number: privately as by "auto", the clip budget
        going to C_H alone; infinite with mu = inf). A number is used as given.
    hessian_floor : float or "auto", default "auto"
        Eigenvalue floor lambda. "auto": the release's noise level as above (private mode, finite
        mu); 1e-8 of ``ell''(0)`` with ``mu=inf`` or ``newton_noise="paper"`` (only to keep the
        Hessian invertible). A number is used as given.
    newton_grad_clip : float or None, default None
        Radius G for the mean gradient of the Newton step (private mode); None: no projection.
    newton_noise : {"private", "paper"}, default "private"
        ``"private"``: the construction above, private for any data. ``"paper"``: Algorithm 4 as
        printed: ``sigma_i = 2 B_new / (mu n_i)`` with ``B_new = 4 sqrt(2) B / tau1``, on the
        unclipped Hessian (floored only to stay invertible) and the unclipped mean gradient. It is a
        guarantee only if the data satisfy Assumption 2 with that tau1, so it warns with
        ``PrivacyLeakWarning`` and the ledger marks the run as not fully private. Offered to
        reproduce the paper.
    tau1 : float or "auto", default "auto"
        Algorithm 4's strong-convexity constant (used only with ``newton_noise="paper"``); "auto":
        half the family's ``ell''(0)`` (:func:`~privfedstat.families.curvature.resolve_tau1`).
    weights : "size" or array, default "size"
        Server averaging weights (w_i = n_i / N in Algorithm 4).
    scaling : None, "private", PrivateStandardize or FeatureBounds, default None
        Fit on rescaled columns and report coefficients on the original scale (see
        :mod:`privfedstat.fitting.scaling`); "private" spends 10% of mu on the centres/scales.
    random_state : int, Generator, SeedSequence or None
        Controls the sample splitting and all noise.
    secure_mode : bool, default False
        Secure noise (OS CSPRNG, floating-point mitigation; ``random_state`` must be None): see
        :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        What the server does when a client fails mid-fit: see :class:`~privfedstat.FederatedEstimator`.
    inference : "auto", None, "model", "sandwich", "bootstrap" or Inference, default "auto"
        Standard errors, intervals and tests: see :class:`~privfedstat.FederatedEstimator`.

    References
    ----------
    Core paper, Algorithm 4, Lemma 3.8, Theorem 3.9; Avella-Medina, Bradshaw & Loh (2023) for
    private Newton steps with floored Hessians. ``docs/algorithms/fednewton.md``.
    """

    method = "FedNewton"

    @property
    def _norms(self) -> tuple[str, ...]:
        return ("gradient",) if self.newton_noise == "paper" else ("gradient", "hessian")

    _parameter_constraints = {
        "n_rounds": ITERATIONS,
        "n_local_steps": ITERATIONS,
        "hessian_clip": [Interval(Real, 0, None, closed="neither", finite=False), None, "auto",
                         InstanceOf(AutoClip, "an AutoClip")],
        "hessian_floor": [Interval(Real, 0, None, closed="neither"), "auto"],
        "newton_grad_clip": [Interval(Real, 0, None, closed="neither", finite=False), None],
        "newton_noise": Options(("private", "paper")),
        "tau1": [Interval(Real, 0, None, closed="neither"), "auto"],
    }

    def __init__(
        self,
        *,
        family="logistic",
        mu: float = 2.0,
        n_rounds: int = 1,
        n_local_steps: int = 50,
        step_size: float | str = "auto",
        clip: float | str | AutoClip = "auto",
        hessian_clip: float | None = None,
        hessian_floor: float | str = "auto",
        newton_grad_clip: float | None = None,
        newton_noise: str = "private",
        tau1: float | str = "auto",
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
        self.clip = clip
        self.hessian_clip = hessian_clip
        self.hessian_floor = hessian_floor
        self.newton_grad_clip = newton_grad_clip
        self.newton_noise = newton_noise
        self.tau1 = tau1
        self.weights = weights
        self.scaling = scaling
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference

    def _validate_params(self, mu: float) -> None:
        super()._validate_params(mu)
        check_finite_bounds(self, ("hessian_clip", "newton_grad_clip"), mu, "the Newton step")

    def _advice(self) -> str:
        advice = ("FedNewton takes one Newton step from FedAvg's output, which ended far from the optimum: increase "
                  "n_rounds or n_local_steps, or use FedIRLS (several server-aggregated Newton rounds).")
        if self.step_size == "auto" and self.scaling is None:  # raw columns: FedAvg's steps may have thrown it out
            advice += " Or FedAvg's local steps threw the path out: " + remedy(self, "oscillating")
        return advice

    def _check_data(self, X, y=None, clients=None, offset=None) -> tuple[FederatedData, Family]:
        """The data and family (:meth:`FederatedEstimator._check_data`), refused when the public sizes rule FedNewton
        out: a client whose Hessian half (``floor(n_i / 2)`` rows) has fewer rows than features, or Hessians beyond
        the memory limit. Checked before the fit is charged or anything is released (the clip search included)."""
        data, family = super()._check_data(X, y, clients, offset)
        n1, d = data.sizes // 2, data.n_features
        if np.any(n1 < d):
            i = int(np.argmax(n1 < d))
            raise ValueError(
                f"FedNewton inverts a Hessian on half of each client's rows: client {i} has {n1[i]} rows "
                f"in that half but there are {d} features. FedNewton needs n_i >= 2 d; use FedAvg or merge small clients."
            )
        p = d * family.n_outputs
        need_gb = n1.size * p * p * 8 / 1e9
        if need_gb > MAX_HESSIAN_GB:
            raise ValueError(
                f"FedNewton forms a {p} x {p} Hessian on every client ({need_gb:.1f} GB for {n1.size} clients, "
                f"limit {MAX_HESSIAN_GB} GB); reduce the number of parameters or use FedAvg / Scaffold."
            )
        return data, family

    def _run(self, session: Session, setup: Setup) -> Run:
        clients = session.clients
        family = clients.family
        warn_many_clients(session.sizes, clients.n_params)
        half1, _ = clients.split_halves(session.seed)
        n1 = half1.sizes
        d = clients.n_features
        policy = NewtonPolicy.of(self.get_params(), family, setup.mu, bound_search(self))
        B, C_H = setup.clip, setup.hessian_clip
        mu_search, mu_hessian, mu_stage = policy.budgets  # fixed before any release
        weights = resolve_weights(self, session, B)

        step = policy.stage_step(resolve_step_size(self.step_size, family, d, setup.square_norm), C_H)
        first = run_fedavg(session, half1, clip=B, n_rounds=self.n_rounds, n_local_steps=self.n_local_steps,
                           step_size=step, mu=mu_stage, weights=weights)
        theta1 = first.theta
        hessian, lam = None, policy.floor
        if policy.paper:
            C_H = math.inf
            warn(
                f"newton_noise='paper' calibrates the Newton step with the strong-convexity constant tau1 = "
                f"{policy.tau1:g}, which bounds its sensitivity only under Assumption 2; use the default 'private' "
                "for a guarantee that holds for any data.",
                PrivacyLeakWarning,
            )
            session.ledger.add_leak(f"Newton step noise from the paper's B_new = 4 sqrt(2) B / tau_1 with tau_1 = "
                                    f"{policy.tau1:g} (valid only under Assumption 2)")
            sens = policy.sensitivity(B, math.nan, session.sizes)
        else:
            if policy.research:  # C_H where the Newton step looks, at the pilot quantile (the paper clips no Hessian)
                C_H = search_bounds(session, ["hessian"], theta1, policy.search.pilot_quantile, policy.search,
                                    mu_search, stage="newton-clip")["hessian"]
            hessian, lam = _shared_hessian(session, theta1, C_H, weights, mu_hessian, policy)
            sens = policy.sensitivity(B, float(np.linalg.eigvalsh(hessian)[0]), session.sizes)
        G = np.full(n1.size, policy.grad_clip)
        theta2 = session.mean("newton_steps", weights=weights, clients=half1, theta=theta1, clip=B, hessian_clip=C_H,
                              hessian_floor=lam, grad_clip=G, sensitivity=sens, mu=mu_stage, stage="newton",
                              hessian=hessian)
        sigma = calibrated_sigma(sens, mu_stage)
        noise_sd = aggregate_sd(sigma, weights)
        return Run(theta2, first.path + [theta2], self.n_rounds * self.n_local_steps + 1, noise_sd=noise_sd,
                   update_noise_sd=noise_sd, noise_model=NewtonNoise(first.noise_model, sigma**2, weights, lam),
                   weights=weights)


def _shared_hessian(session: Session, theta: np.ndarray, hessian_clip: float, weights: np.ndarray, mu: float,
                    policy: NewtonPolicy) -> tuple[np.ndarray, float]:
    """The public Newton matrix and its floor: every client's mean Hessian clipped at C_H at ``theta``, released with
    budget ``mu`` (stage "newton-hessian"), averaged with ``weights`` and floored as ``policy`` says -- post-processing."""
    p = session.clients.n_params
    sens = hessian_sensitivity(hessian_clip, session.sizes)
    H = vec_to_sym(session.mean("hessians", weights=weights, theta=theta, hessian_clip=hessian_clip, sensitivity=sens,
                                mu=mu, stage="newton-hessian"), p)
    return policy.newton_matrix(H, policy.hessian_sd(hessian_clip, session.sizes, weights))


def max_clients(n_samples: int, n_params: int) -> float:
    """Theorem 3.9's bound on the number of clients, ``(N / (d v log N))^(2/3)`` with its constant taken as 1."""
    return (n_samples / max(n_params, math.log(n_samples))) ** (2.0 / 3.0)


def warn_many_clients(sizes: np.ndarray, n_params: int) -> None:
    """Warn (:class:`ConvergenceWarning`) when there are more clients than Theorem 3.9 allows (:func:`max_clients`)."""
    m, N = sizes.size, int(np.sum(sizes))
    bound = max_clients(N, n_params)
    if m > bound:
        warn(
            f"FedNewton's error bound (Theorem 3.9) needs m << (N / (d v log N))^(2/3) = {bound:.0f} clients; "
            f"there are {m} (N = {N}). With this many small clients the FedAvg stage ends too far from the "
            "optimum for one Newton step to remove its bias, so FedNewton may do no better than FedAvg. "
            "Use fewer, larger sites (merge clients) or FedIRLS (several aggregated Newton rounds).",
            ConvergenceWarning,
        )


# ---------------------------------------------------------------------------- the client's half
def newton_step(half1: ClientOracle, half2: ClientOracle, theta, *, clip: float, hessian_clip: float,
                hessian_floor: float, grad_clip: np.ndarray, hessian: np.ndarray | None = None) -> np.ndarray:
    """Every client's Newton step ``H_i^{-1} gbar_i`` at ``theta``, shape (n_clients, d) (FedNewton, Algorithm 4).

    ``H_i``: the public ``hessian`` (the server's floored, released mean Hessian, the same for every
    client) if given, else the mean over the first half of per-sample Hessians clipped to norm
    ``hessian_clip`` (C_H), eigenvalues floored at ``hessian_floor`` (lambda). ``gbar_i``: the mean over
    the second half of per-sample gradients clipped to ``clip`` (B), projected onto the ball of radius
    ``grad_clip[i]`` (G_i) with :func:`~privfedstat._linalg.clip_rows` (its norm neither underflows
    for tiny gradients nor overflows for huge ones, so ``||gbar_i|| <= G_i`` for every finite input).
    With a public ``hessian`` its L2 sensitivity (one datum replaced, in either half) is
    :func:`~privfedstat.privacy.calibration.shared_newton_sensitivity`; with the clients' own Hessians
    (Algorithm 4 as printed) it is bounded only under Assumption 2
    (:func:`~privfedstat.privacy.calibration.paper_newton_sensitivity`).
    """
    H = hessian if hessian is not None else floor_eigenvalues(half1.hessians(theta, hessian_clip), hessian_floor)
    g = half2.clipped_gradients(theta, clip)
    g = clip_rows(g, grad_clip)
    return np.linalg.solve(H, g[..., None])[..., 0]


def newton_steps(clients: InProcessClients, theta, *, clip: float, hessian_clip: float, hessian_floor: float,
                 grad_clip: np.ndarray, sensitivity, mu: float, stage: str, hessian: np.ndarray | None = None) -> Reply:
    """FedNewton's message ``theta - H_i^-1 gbar_i`` plus noise (asked of the first half after ``split_halves``).

    ``H_i``: the public ``hessian`` if given, else the first half's mean per-sample Hessian clipped to
    C_H, eigenvalues floored at lambda; ``gbar_i``: the second half's mean gradient clipped to B,
    projected onto the ball of radius ``grad_clip[i]`` (G_i); the sensitivity is the server's (see
    :func:`newton_step`).
    """
    if clients._halves is None:
        raise RuntimeError("newton_steps needs split_halves first.")
    halves = tuple(h._oracle for h in clients._halves)
    return clients._release(lambda _, t: t - newton_step(*halves, t, clip=clip, hessian_clip=hessian_clip,
                                                         hessian_floor=hessian_floor, grad_clip=grad_clip,
                                                         hessian=hessian),
                            sensitivity, mu, stage, theta=theta)


register(Verb("newton_steps", shape=parameters, per_client=("sensitivity", "grad_clip")), in_process=newton_steps)
