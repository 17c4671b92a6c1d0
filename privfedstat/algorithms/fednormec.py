"""Fed-alpha-NormEC (Shulgin, Malinovsky, Khirirat & Richtarik 2025) and its DP-FedAvg comparator (their App. A.1).

Both protect each client's whole dataset (client-level DP): every round each participating client
sends one message of norm at most 1 (smoothed normalisation, or clipping of the pseudo-gradient at
beta and division by beta) plus Gaussian noise of sd sigma_DP; the server scales the messages by
``beta / p`` and aggregates them. They share the noise calibration, the participation, the server
loop and the accounting (:class:`_UnitMessageRounds`), and differ in the message and in whether
the server accumulates it (error compensation) or uses it once.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from .._validation import BOOL, ITERATIONS, Free, Interval, Options, check_iterate, validate_parameters
from .._warn import warn
from ..federation.protocol import Run, Setup
from ..federation.server import effective_weights, resolve_participation
from ..federation.session import Session
from ..fitting.base import CLIENT_LEVEL_INFERENCE, FederatedEstimator
from ..fitting.stages import resolve_weights
from ..fitting.steps import resolve_step_size
from ..privacy.calibration import calibrated_sigma, client_update_calibration, normec_noise_multiplier
from . import fednormec_client  # noqa: F401  (the clients' half: registers the verb normec_round)

__all__ = ["FedAlphaNormEC", "ClippedFedAvg", "DEFAULT_DELTA"]

#: delta at which ``epsilon_`` is reported when the fit was calibrated to mu (not to a target epsilon)
DEFAULT_DELTA = 1e-5

_CALIBRATION_DOC = """
    mu : float or None, default 2.0
        Client-level GDP budget per client towards the server, who knows who took part (replacement
        of a client's whole dataset: sensitivity 2 per message; the R messages share mu in squares,
        so ``sigma_DP = 2 sqrt(R) / mu``); ``inf`` for no noise. None with ``epsilon``.
    epsilon : (float, float) or None, default None
        A target (epsilon, delta) towards a third party, who sees the published model but not who
        took part: sigma_DP is then the smallest noise multiplier whose R-round Poisson-subsampled
        Gaussian composition (rate p, one client's whole dataset replaced: messages in the unit
        ball) meets it under dp-accounting's PLD, by bisection (as Opacus'
        ``make_private_with_epsilon``; :func:`~privfedstat.privacy.calibration.normec_noise_multiplier`).
        Give ``mu=None``; the fit's ``mu_`` is then the GDP budget towards the server that this
        sigma_DP implies, ``2 sqrt(R) / sigma_DP``. Without sampling (p = 1) both audiences face
        the target; with p < 1 the server, who knows who took part, faces more
        (``privacy_.epsilon(delta)``).
    sigma : None or "paper", default None
        With ``epsilon``: ``"paper"`` takes sigma_DP from the paper's formula
        ``p sqrt(R log(1/delta)) / epsilon`` (c = 1) instead of the PLD; the fit still reports the
        epsilon it actually has (``epsilon_``) and warns when that exceeds the target.
    participation : None, float, int or Participation, default None
        Which clients send each round (see :class:`~privfedstat.FedSGD`); a rate p in (0, 1) is
        the paper's independent participation (Poisson sampling), which ``epsilon_`` amplifies.
        The server draws it from its own stream; the clients learn only whether to send.
    weights : "size" or array of shape (n_clients,), default "size"
        Aggregation weights w_i (the paper's 1/M; equal for equal sizes). Size weights make the
        noise-free fixed point the pooled estimate.
    random_state : int, Generator, SeedSequence or None
    secure_mode : bool, default False
        See :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        See :class:`~privfedstat.FederatedEstimator` (a failed client's weight is spread over the
        live clients from then on).
    inference : None, default None
        Only None: the inference releases are record-level and cannot carry a client-level
        guarantee, so no standard errors are reported."""

_ATTRIBUTES_DOC = """
    Attributes
    ----------
    coef_, history_ (x^0, ..., x^R), converged_, privacy_ (client-level ledger), communication_
        See :class:`~privfedstat.FederatedEstimator`.
    n_iter_ : int
        Local gradient evaluations per client: R T, or R passes over the rows with
        ``local_solver="ig"``.
    sigma_ : float
        sigma_DP, the noise sd on each (unit-norm) message.
    delta_ : float
        The target's delta, or :data:`DEFAULT_DELTA` for a fit calibrated to mu.
    epsilon_ : float
        ``privacy_.public_view().epsilon(delta_)``: the epsilon towards a third party, who does not
        see who took part (PLD of the R Poisson-subsampled Gaussian rounds, replace-one; ``inf``
        without noise). See the caveat on per-client noise above."""


class _UnitMessageRounds(FederatedEstimator):
    """R rounds of client messages of norm at most 1 plus noise sigma_DP, scaled by ``beta / p`` at the server.

    Subclasses set ``_error_feedback`` (keep the server's per-client sums of scaled messages,
    ``h_i``, across rounds: ``v_hat = sum_i w_i h_i``; or use each round's messages once) and
    implement :meth:`_messages`.
    """

    privacy_unit = "client"
    supports_inference = False
    _norms = ()
    _error_feedback = True
    _parameter_constraints = {
        "n_rounds": ITERATIONS,
        "n_local_steps": ITERATIONS,
        "beta": Interval(Real, 0, None, closed="neither"),
        "server_step_size": [Interval(Real, 0, None, closed="neither"), "auto"],
        "mu": Free("_declared_mu: None with a target epsilon, else a number > 0"),
        "epsilon": Free("_target: None or a pair (epsilon, delta)"),
        "sigma": Options((None, "paper")),
        "inference": CLIENT_LEVEL_INFERENCE,
    }

    # ------------------------------------------------------------------ calibration
    def _target(self) -> tuple[float, float] | None:
        """The validated target (epsilon, delta), or None."""
        if self.epsilon is None:
            return None
        try:
            eps, delta = self.epsilon
        except (TypeError, ValueError):
            raise ValueError(f"epsilon must be a pair (epsilon, delta), got {self.epsilon!r}.") from None
        if not (isinstance(eps, Real) and isinstance(delta, Real) and 0 < eps < math.inf and 0 < delta < 1):
            raise ValueError(f"epsilon must be a pair (epsilon > 0 finite, delta in (0, 1)), got {self.epsilon!r}.")
        return float(eps), float(delta)

    def _declared_mu(self, n_clients: int) -> float:
        """mu, or with a target epsilon the GDP budget ``2 sqrt(R) / sigma_DP`` towards the server that it implies
        (the parameters checked first: the budget is derived from them)."""
        validate_parameters(self, self._parameter_table())
        target = self._target()
        if target is None:
            if self.sigma is not None:
                raise ValueError("sigma='paper' needs a target epsilon=(epsilon, delta) (the formula uses both).")
            return super()._declared_mu(n_clients)
        if self.mu is not None:
            raise ValueError("give either mu (GDP towards the server) or epsilon (a target towards outsiders), not "
                             "both: pass mu=None with epsilon=(epsilon, delta).")
        R = int(self.n_rounds)
        part = resolve_participation(self.participation, n_clients)
        q = 1.0 if part is None or part.rate is None else float(part.rate)  # a cohort is accounted unamplified
        sigma = normec_noise_multiplier(*target, q, R, rule="pld" if self.sigma is None else "paper")
        if self.sigma == "paper":
            from ..privacy.accounting import subsampled_gaussian_epsilon

            actual = subsampled_gaussian_epsilon(sigma, q, R, target[1])
            if actual > target[0]:
                warn(f"the paper's sigma_DP = {sigma:.4g} (c = 1) gives epsilon = {actual:.4g} > the target "
                     f"{target[0]:g} at delta = {target[1]:g} (PLD accountant); use sigma=None to meet it.",
                     UserWarning)
        return 2.0 * math.sqrt(R) / sigma

    # ------------------------------------------------------------------ results
    @property
    def epsilon_(self) -> float:
        """``privacy_.public_view().epsilon(delta_)`` (see the class docstring)."""
        self._check_fitted()
        return self.privacy_.public_view().epsilon(self.delta_)

    # ------------------------------------------------------------------ protocol
    def _messages(self, session: Session, x: np.ndarray, weights: np.ndarray, sensitivity: np.ndarray,
                  mu_round: float, step_size: float) -> tuple[np.ndarray, np.ndarray]:
        """This round's noisy unit-scale messages (n_clients, n_params) and the mask of clients that sent one."""
        raise NotImplementedError

    def _normalized_steps(self) -> bool:
        """Whether the server steps along ``v_hat / ||v_hat||`` (else along v_hat)."""
        return False

    def _run(self, session: Session, setup: Setup) -> Run:
        R, T = int(self.n_rounds), int(self.n_local_steps)
        clients = session.clients
        m = clients.n_clients
        gamma = resolve_step_size(self.step_size, clients.family, clients.n_features, setup.square_norm)
        eta = resolve_step_size(self.server_step_size, clients.family, clients.n_features, setup.square_norm)
        beta = float(self.beta)
        w = resolve_weights(self, session, setup.clip)
        p = 1.0 if session.participation is None else session.participation.expected_rate(m)
        sens, mu_round = client_update_calibration(1.0, m, R, setup.mu)  # sensitivity 2: norm < 1, whole client replaced
        sigma = float(calibrated_sigma(sens, mu_round)[0])
        x = clients.initial_parameters()
        h = np.zeros((m, x.size))  # the server's sums of scaled messages per client (h_i estimates beta sum Delta_i = v_i)
        path = [x]
        for _ in range(R):
            messages, sent = self._messages(session, x, w, sens, mu_round, gamma)
            if not self._error_feedback:
                h[:] = 0.0
            h[sent] += (beta / p) * messages[sent]  # q_i^k = 1/p for the participants, 0 for the others
            v_hat = effective_weights(w, session.channel.live) @ h
            if self._normalized_steps():
                norm = float(np.linalg.norm(v_hat))
                v_hat = v_hat / norm if norm > 0 else v_hat
            x = x - eta * v_hat
            check_iterate(x, f"the {self.method} server update", eta)
            path.append(x)
        self.sigma_ = sigma
        target = self._target()
        self.delta_ = DEFAULT_DELTA if target is None else target[1]
        # sd of one round's noise in v_hat: every client's row is noisy under Poisson participation (the server's
        # top-up), only the participants' with a cohort (expected over the cohort)
        round_sd = beta * sigma * math.sqrt(float(np.sum(w * w)) / (p * p if session.sampling_rate < 1.0 else p))
        if self._normalized_steps():  # every step has length eta: its noise is not a Gaussian sd
            noise_sd, update_noise_sd = 0.0, None
        elif self._error_feedback:  # v_hat carries every round's noise, a random walk shared by consecutive
            noise_sd = eta * round_sd * math.sqrt(R)  # updates: the mean update over diagnose's window
            update_noise_sd = noise_sd * math.sqrt(max(1, R // 4))  # (R // 4 of them) is as noisy as one
        else:
            noise_sd = update_noise_sd = eta * round_sd
        return Run(x, path, R * T, noise_sd=noise_sd, update_noise_sd=update_noise_sd, weights=w)


class FedAlphaNormEC(_UnitMessageRounds):
    __doc__ = """Fed-alpha-NormEC: smoothed normalisation with error compensation, partial participation, client-level DP.

    Rounds k = 0, ..., K (``n_rounds`` R = K + 1). The server broadcasts x^k. Every live client
    runs its local operator T_i from x^k (``n_local_steps`` T full-batch gradient steps of size
    gamma / T, or with ``local_solver="ig"`` one pass of incremental gradient steps of size
    gamma / n_i over its rows in a fixed cyclic order), forms ``u_i = (x^k - T_i(x^k)) / gamma``,
    ``Delta_i = Norm_alpha(u_i - v_i)`` with ``Norm_alpha(u) = u / (alpha + ||u||)``, and updates its
    error memory ``v_i <- v_i + beta Delta_i`` (verb ``normec_round``; v_i stays on the client).
    Each client takes part independently with probability p (``participation``); participants send
    ``Delta_i + z_i``, ``z_i ~ N(0, sigma_DP^2 I)``. The server keeps
    ``v_hat <- v_hat + beta sum_i w_i q_i (Delta_i + z_i)`` with ``q_i = 1/p`` for participants and
    0 otherwise (w_i = 1/M in the paper) and steps ``x^{k+1} = x^k - eta v_hat`` (or
    ``eta v_hat / ||v_hat||`` with ``server_normalization``, the paper's line 12).

    **Decisions where the paper is open** (Shulgin et al. 2025; the flags of the algorithm notes):

    1. *Every* live client updates v_i every round, participant or not (it receives x^k and runs
       T_i). Theorem 1 bounds ``||v_i^k - (x^k - T_i(x^k))/gamma||`` for every i and its constant
       ``B = 2 (1-p)^2/p + 2 (1-p) + 2 sigma_DP^2 / p`` is exactly twice the variance of
       ``q_i - 1`` plus that of ``q_i z_i``: v_hat is an unbiased noisy estimate of
       ``sum_i w_i v_i`` only if all v_i move with the unscaled Delta_i while the server scales the
       participants' messages by 1/p. (Updating only participants would make the 1/p scaling
       biased.) It costs computation, not communication or privacy: v_i never leaves the client,
       and every message has norm below 1 whatever v_i is, so each release is a Gaussian mechanism
       of sensitivity 2 given the past outputs (adaptive composition).
    2. beta multiplies at the server (on the noisy message) and on the client (on the clean one);
       the message itself is ``Delta_i + z_i``, so the noise in v_hat has sd ``beta sigma_DP`` per
       participant and round, the "sigma_DP proportional to p beta" of the experiments.
    3. ``sigma="paper"``: ``sigma_DP = c p sqrt((K+1) log(1/delta)) / epsilon`` with c = 1 (the
       experiments' "p beta sqrt(K log(1/delta)) / epsilon" is read as the sd of the beta-scaled
       noise, with the square root restored); it is not a guarantee and the fit says so.
    4. v_i^0 = 0 and v_hat^0 = 0 (the practical start; the theory's
       ``v_i^0 = (x^0 - T_i(x^0))/gamma + e`` would need an extra release). x^0 is the clients'
       ``initial_parameters()`` (0 for a GLM).
    5. The server keeps its sums per client (``h_i``, ``v_hat = sum_i w_i h_i``: the paper's
       recursion, unchanged while all clients live) so that a failed client's weight can be
       spread over the live ones (``on_client_failure="skip"``).
    6. The local gradients are not clipped (the message is normalised instead); a client whose
       local steps diverge sends ``Delta_i = 0``.

    **Privacy.** Unit: a client's whole dataset. Towards the server, who knows who took part, each
    message is a Gaussian mechanism of replacement sensitivity 2 (``||Norm_alpha|| < 1``), so with
    ``sigma_DP = 2 sqrt(R) / mu`` each client is mu-GDP (a client that sat rounds out spends less);
    the ledger records sensitivity 2 and sigma_DP. Towards an observer who does not see who took
    part, the paper appeals to Abadi et al.'s subsampled Gaussian: ``epsilon_`` is the PLD of R
    Poisson-subsampled Gaussian rounds with noise multiplier sigma_DP under the same replacement
    (messages in the unit ball), exactly as for :class:`~privfedstat.DPFedAvg`. That mechanism adds noise of fixed
    variance to the aggregate: in Algorithm 1 every participant adds its own, so the server puts
    noise of the same sd in the place of every client that was not sampled (the top-up of
    :meth:`~privfedstat.federation.session.Session.ask`; the 1/p scaling is already a fixed
    denominator) and does not redraw empty rounds; without it the aggregate's noise variance would
    reveal the number of participants. The guarantee towards the server (``privacy_.mu``) is exact
    GDP composition. ``privacy_`` is the server's view (it shows who took part);
    ``privacy_.public_view()`` is what may be published, and ``summary()`` states both epsilons.

    Parameters
    ----------
    family : str or Family, default "logistic"
    n_rounds : int, default 50
        Communication rounds R = K + 1.
    alpha : float, default 0.01
        Smoothing of the normalisation (alpha > 0; the paper's experiments use 0.01).
    beta : float, default 0.1
        Error-compensation step (beta > 0): v_i moves by less than beta per round.
    step_size : float or "auto", default "auto"
        Client step gamma of the local operator ("auto": ``1 / L`` from a public curvature bound,
        :func:`~privfedstat.families.curvature.auto_step_size`). With T = 1 GD it cancels
        (``u_i`` is the gradient).
    server_step_size : float or "auto", default "auto"
        Server step eta ("auto": ``1 / L``, since v_hat tracks the gradient); with
        ``server_normalization`` the length of every server step.
    n_local_steps : int, default 1
        T, full-batch gradient steps per round (``local_solver="gd"``; must be 1 with "ig").
    local_solver : {"gd", "ig"}, default "gd"
        Local GD (Section 5.2), or one pass of incremental gradient over the client's rows in their
        fixed order (Section 5.3; T = n_i).
    server_normalization : bool, default False
        Step along ``v_hat / ||v_hat||`` (the theory's line 12); the experiments omit it.
""" + _CALIBRATION_DOC + """
""" + _ATTRIBUTES_DOC + """

    References
    ----------
    Shulgin, E., Malinovsky, G., Khirirat, S. and Richtarik, P. (2025). First provable guarantees
    for practical private FL: beyond restrictive assumptions (Algorithm 1, Theorems 1-2,
    Corollaries 1 and 3). Abadi, M. et al. (2016). Deep learning with differential privacy.
    """

    method = "Fed-alpha-NormEC"

    _parameter_constraints = {
        "alpha": Interval(Real, 0, None, closed="neither"),
        "local_solver": Options(("gd", "ig")),
        "server_normalization": BOOL,
    }

    def __init__(
        self,
        *,
        family="logistic",
        n_rounds: int = 50,
        alpha: float = 0.01,
        beta: float = 0.1,
        step_size: float | str = "auto",
        server_step_size: float | str = "auto",
        n_local_steps: int = 1,
        local_solver: str = "gd",
        server_normalization: bool = False,
        mu: float | None = 2.0,
        epsilon: tuple[float, float] | None = None,
        sigma: str | None = None,
        participation=None,
        weights="size",
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference=None,
    ) -> None:
        self.family = family
        self.n_rounds = n_rounds
        self.alpha = alpha
        self.beta = beta
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.n_local_steps = n_local_steps
        self.local_solver = local_solver
        self.server_normalization = server_normalization
        self.mu = mu
        self.epsilon = epsilon
        self.sigma = sigma
        self.participation = participation
        self.weights = weights
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference

    def _validate_params(self, mu: float) -> None:
        super()._validate_params(mu)
        if self.local_solver == "ig" and self.n_local_steps != 1:
            raise ValueError("local_solver='ig' makes one pass over each client's rows (T = n_i); leave n_local_steps=1.")

    def _advice(self) -> str:
        return "Increase n_rounds, or lower server_step_size (eta) or beta."

    def _messages(self, session, x, weights, sensitivity, mu_round, step_size):
        values, _, sent = session.ask("normec_round", weights=weights, x=x, alpha=float(self.alpha),
                                      beta=float(self.beta), step_size=step_size, n_steps=int(self.n_local_steps),
                                      incremental=self.local_solver == "ig", sensitivity=sensitivity, mu=mu_round,
                                      stage="normec-message", active=session.participants())
        return values, sent

    def _normalized_steps(self) -> bool:
        return bool(self.server_normalization)


class ClippedFedAvg(_UnitMessageRounds):
    __doc__ = """DP-FedAvg with clipping, the comparator of Fed-alpha-NormEC (Shulgin et al. 2025, App. A.1).

    ``x^{k+1} = x^k - (eta / (p M)) sum_{i in S^k} [Psi_beta((x^k - T_i(x^k)) / gamma) + z_i^k]``,
    Psi_beta the clipping of the pseudo-gradient to norm beta and ``z_i ~ N(0, (beta sigma_DP)^2 I)``:
    Fed-alpha-NormEC's loop with the message ``Psi_beta(u_i) / beta`` (norm at most 1, the same
    sensitivity and noise multiplier sigma_DP) used once instead of accumulated (no error
    compensation, no alpha), and the same participation, 1/p scaling (``w_i / p``; 1/(pM) for
    equal sizes), calibration and accounting. The best results of the paper's comparator lie
    along beta gamma = 0.001 (their Fig. 4), i.e. the clip acts at the gradient scale.

    The clients answer with the verb ``clipped_update`` of :class:`~privfedstat.DPFedAvg`
    (T local GD steps of size gamma / T, the model update clipped to ``S = gamma beta`` plus noise of
    sd ``gamma beta sigma_DP``): ``-(update)/gamma`` is the bracket above, so the local operator is
    GD only. DPFedAvg itself (McMahan et al. 2018) differs in the aggregation: the mean over the
    clients that answered, where this comparator divides by the expected number p M.

    Privacy: as :class:`FedAlphaNormEC` (the same caveat on per-client noise applies).

    Parameters
    ----------
    family : str or Family, default "logistic"
    n_rounds : int, default 50
        Communication rounds R = K + 1.
    beta : float, default 0.1
        Clipping threshold of the pseudo-gradient ``(x - T_i(x)) / gamma`` (the "sensitivity threshold").
    step_size : float or "auto", default "auto"
        Client step gamma ("auto": ``1 / L``).
    server_step_size : float or "auto", default "auto"
        Server step eta ("auto": ``1 / L``).
    n_local_steps : int, default 1
        T, local full-batch gradient steps per round.
""" + _CALIBRATION_DOC + """
""" + _ATTRIBUTES_DOC + """

    References
    ----------
    Shulgin, Malinovsky, Khirirat & Richtarik (2025), App. A.1; McMahan, Ramage, Talwar & Zhang
    (2018), Learning differentially private recurrent language models.
    """

    method = "DP-FedAvg (clipped, App. A.1)"
    _error_feedback = False

    def __init__(
        self,
        *,
        family="logistic",
        n_rounds: int = 50,
        beta: float = 0.1,
        step_size: float | str = "auto",
        server_step_size: float | str = "auto",
        n_local_steps: int = 1,
        mu: float | None = 2.0,
        epsilon: tuple[float, float] | None = None,
        sigma: str | None = None,
        participation=None,
        weights="size",
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference=None,
    ) -> None:
        self.family = family
        self.n_rounds = n_rounds
        self.beta = beta
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.n_local_steps = n_local_steps
        self.mu = mu
        self.epsilon = epsilon
        self.sigma = sigma
        self.participation = participation
        self.weights = weights
        self.random_state = random_state
        self.secure_mode = secure_mode
        self.on_client_failure = on_client_failure
        self.inference = inference

    def _advice(self) -> str:
        return "Increase n_rounds, or raise beta if most pseudo-gradients are clipped."

    def _messages(self, session, x, weights, sensitivity, mu_round, step_size):
        T, scale = int(self.n_local_steps), step_size * float(self.beta)  # S = gamma beta
        values, _, sent = session.ask("clipped_update", weights=weights, theta=x, step_size=step_size / T, n_steps=T,
                                      update_clip=scale, sensitivity=scale * sensitivity, mu=mu_round,
                                      stage="clipped-update", active=session.participants())
        return values / -scale, sent

