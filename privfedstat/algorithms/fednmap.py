"""FedNMap (Huang, Pu & Johansson): composite federated learning by the normal map -- private federated lasso and
elastic net for GLMs -- and the composite baselines of its experiments, Zhang et al. (2024a) and FedCanon.

All three minimise ``psi = f + phi`` with ``f = sum_i w_i f_i`` (``f_i`` client i's mean loss, ``w_i = n_i / N``:
the pooled mean loss) and the elastic net ``phi`` (:class:`~privfedstat.penalty.ElasticNet`), and share the
penalty's parameters (:class:`_Penalized`). FedNMap and Zhang's method share one client verb
(``composite_round``: local steps with a correction ``c_i`` kept on the client, one vector sent) and one server
loop; FedCanon is SCAFFOLD (:class:`~privfedstat.Scaffold`) with a proximal server step.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from .._validation import ITERATIONS, Free, Interval, Options, check_iterate
from ..federation import clients as federation_clients
from ..federation.clients import InProcessClients, Reply, _divergence
from ..federation.protocol import Run, Setup
from ..federation.server import aggregate
from ..federation.session import Session
from ..federation.verbs import Verb, parameters, register
from ..fitting.base import FederatedEstimator
from ..fitting.scaling import FeatureBounds, PrivateStandardize
from ..fitting.stages import resolve_weights
from ..fitting.steps import resolve_count, resolve_step_size, settled
from ..penalty import ElasticNet
from ..privacy.calibration import aggregate_sd, calibrated_sigma, gradient_calibration
from ..privacy.clipping import AutoClip
from .scaffold import Scaffold

__all__ = ["FedNMap", "ZhangComposite", "FedCanon", "DEFAULT_ROUNDS", "MAX_ROUNDS"]

#: R with finite mu (rounds of Q local steps; see FedNMap's ``step_size``)
DEFAULT_ROUNDS = 10
#: cap on the rounds of ``n_rounds="auto"`` with mu = inf (the loop stops once settled)
MAX_ROUNDS = 2000
PENALTIES = ("l1", "elasticnet")

_PENALTY_DOC = """
    penalty : {"l1", "elasticnet"}, default "l1"
        The regulariser phi: the lasso ``alpha ||x||_1``, or the elastic net
        ``alpha (l1_ratio ||x||_1 + (1 - l1_ratio) ||x||^2 / 2)`` (glmnet's and scikit-learn's
        scaling: the paper's ``nu1 = alpha l1_ratio``, ``nu2 = alpha (1 - l1_ratio) / 2``), on
        the fitting scale (with ``scaling``, the columns as it rescales them: the private scaling
        uses a robust centre and the 90% quantile of ``|x - centre|``, not glmnet's standard
        deviations) and on every coefficient but those in ``unpenalized``.
    alpha : float, default 0.01
        Penalty strength (>= 0; 0 fits the unpenalised likelihood). Choose it by validation;
        0.01 keeps coefficients of standardised columns whose score exceeds 0.01 in size.
    l1_ratio : float or None, default None
        The elastic net's mixing in [0, 1] (``penalty="elasticnet"`` needs it; ``"l1"`` takes None).
    unpenalized : tuple of int, default (0,)
        Columns whose coefficients are not penalised: the intercept, column 0 by the package's
        convention (``glm()`` passes its design's intercept, or none). A ``scaling`` that declares
        an intercept column must find it here. For the multinomial family a column's K - 1
        coefficients are left out together."""

_PRIVATE_COMMON_DOC = """
    clip : float, "auto", "paper" or AutoClip, default "auto"
        Per-sample gradient clipping bound (B); see :class:`~privfedstat.FedSGD`.
    weights : "size" or array of shape (n_clients,), default "size"
        Server weights w_i (``n_i / N``: the fixed point is the pooled penalised estimate; the
        paper's 1/n gives the unweighted average of the client losses).
    scaling : None, "private", PrivateStandardize or FeatureBounds, default None
        Fit on rescaled columns and report coefficients on the original scale (see
        :mod:`privfedstat.fitting.scaling`); the penalty acts on the fitting scale.
    random_state : int, Generator, SeedSequence or None
    secure_mode : bool, default False
        See :class:`~privfedstat.FederatedEstimator`.
    on_client_failure : {"raise", "skip"}, default "raise"
        See :class:`~privfedstat.FederatedEstimator`. After a client fails, the live clients'
        corrections no longer average to zero: the fit is then biased by their mean, as SCAFFOLD's.
    inference : None, default None
        Only None: naive Wald intervals after l1 selection are not valid (a coefficient set to 0
        has a point mass at 0; the selection depends on the data), so no standard errors are
        reported (``supports_inference`` is False)."""


def _store(estimator, params: dict) -> None:
    """``__init__``'s only work (scikit-learn's contract): store every keyword parameter as given."""
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


def _init_penalized(
    self,
    *,
    family="logistic",
    mu: float = 2.0,
    n_rounds: int | str = "auto",
    n_local_steps: int = 10,
    step_size: float | str = "auto",
    server_step_size: float = 1.0,
    penalty: str = "l1",
    alpha: float = 0.01,
    l1_ratio: float | None = None,
    unpenalized: tuple[int, ...] = (0,),
    clip: float | str | AutoClip = "auto",
    weights="size",
    scaling=None,
    random_state=None,
    secure_mode: bool = False,
    on_client_failure: str = "raise",
    inference=None,
) -> None:
    """Store the parameters (FedNMap's without ``gamma``: Zhang's method and FedCanon)."""
    _store(self, locals())


class _Penalized:
    """The penalty parameters of the composite estimators: checks, the penalty on the fitting scale, no inference."""

    supports_inference = False
    _parameter_constraints = {
        "penalty": Options(PENALTIES),
        "alpha": Interval(Real, 0, None, closed="left"),
        "l1_ratio": Free("_l1_ratio, with penalty"),
        "unpenalized": Free("_mask, against the columns of X and the scaling's intercept"),
        "inference": Options((None,), hint="{estimator} reports no standard errors (naive intervals after l1 "
                             "selection are not valid); fit with inference=None (the default)."),
    }

    def _l1_ratio(self) -> float:
        """The mixing, checked against the penalty (1 for the lasso)."""
        ratio = self.l1_ratio
        if self.penalty == "l1":
            if ratio is not None:
                raise ValueError(f"l1_ratio is the elastic net's mixing; penalty='l1' takes l1_ratio=None, got {ratio!r}. "
                                 "Use penalty='elasticnet' to mix.")
            return 1.0
        if isinstance(ratio, bool) or not isinstance(ratio, Real) or not 0 <= ratio <= 1:
            raise ValueError(f"penalty='elasticnet' needs l1_ratio in [0, 1], got {ratio!r}.")
        return float(ratio)

    def _validate_params(self, mu: float) -> None:
        super()._validate_params(mu)
        self._l1_ratio()

    def _check_data(self, X, y=None, clients=None, offset=None):
        data, family = super()._check_data(X, y, clients, offset)
        self._mask(data.n_features, family)  # bad columns are refused before anything is released
        return data, family

    def _mask(self, n_features: int, family) -> np.ndarray:
        """The penalised coefficients, flat (row-major over ``coef_``'s shape, as the parameters)."""
        cols = self.unpenalized
        if isinstance(cols, (str, bytes)) or not hasattr(cols, "__iter__"):
            raise TypeError(f"unpenalized must be a tuple of column indices, got {cols!r}.")
        cols = tuple(cols)
        bad = [j for j in cols if isinstance(j, bool) or not isinstance(j, Integral) or not 0 <= j < n_features]
        if bad:
            raise ValueError(f"unpenalized names {bad}, not columns of X (0..{n_features - 1}).")
        scaling = self.scaling
        scaling = PrivateStandardize() if scaling == "private" else scaling
        j = scaling.intercept if isinstance(scaling, (PrivateStandardize, FeatureBounds)) else None
        if j is not None and j not in cols:
            raise ValueError(f"the scaling declares column {j} the intercept, but unpenalized={cols!r} penalises it; "
                             f"add {j} to unpenalized (an intercept is not penalised).")
        mask = np.ones(self._coef_shape(n_features, family), dtype=bool)
        mask[list(cols)] = False
        return mask.ravel()

    def _penalty(self, clients) -> ElasticNet:
        """phi on the fitting scale, set as ``penalty_`` (the mu = inf stationarity check reads it)."""
        self.penalty_ = ElasticNet.from_alpha(self.alpha, self._l1_ratio(), self._mask(clients.n_features, clients.family))
        return self.penalty_


class FedNMap(_Penalized, FederatedEstimator):
    """FedNMap (Huang, Pu & Johansson, Algorithm 1) on the GLM backend: private federated lasso and elastic net.

    Minimises ``psi(x) = f(x) + phi(x)``, ``f = sum_i w_i f_i``, with the normal map
    ``F_nor(z) = grad f(prox_{gamma phi}(z)) + (z - prox_{gamma phi}(z)) / gamma``, whose zeros z* give
    the minimiser ``x* = prox_{gamma phi}(z*)``. Server state z (0 at the start, so x = 0); client
    state ``c_i`` (0) and its last upload ``y_i``. Round t = 0..R-1:

    1. the server broadcasts ``z_t`` (``x_t = prox_{gamma phi}(z_t)``) and the previous aggregate
       ``ybar_{t-1}``; every client updates ``c_i <- c_i - y_i + ybar_{t-1}`` (t >= 1) and takes Q
       local steps from ``z^0 = z_t``: ``x^l = prox_{gamma phi}(z^l)``,
       ``z^{l+1} = z^l - eta_a (g~_i(x^l) + (z_t - x_t) / gamma + c_i)`` (the correction uses the
       round-start point, the paper's App. B.1-B.2), ``g~_i`` the mean of its per-sample gradients
       clipped to B plus Gaussian noise;
    2. it sends ``y_i = (z_t - z^Q) / (eta_a Q)`` (one vector; verb ``composite_round``);
    3. the server steps ``z_{t+1} = z_t - eta_hat ybar_t``, ``ybar_t = sum_i w_i y_i``,
       ``eta_hat = eta_s eta_a Q``, and ``x_{t+1} = prox_{gamma phi}(z_{t+1})``, the model.

    Since ``sum_i w_i c_i = 0`` at every round, ``c_i`` converges to ``grad f(x*) - grad f_i(x*)``
    and the exact minimiser is a fixed point whatever the heterogeneity: with mu = inf and B = inf
    the fit converges to the pooled elastic-net estimate (tested against a pooled solver to 1e-6).
    With a finite B it converges to the minimiser of the clipped objective, as every clipped method.

    **Privacy** (each client mu-GDP towards the server, record level, for any data). The data enter
    only through the R Q local gradients ``g~_i``; each is a Gaussian mechanism on the mean of
    per-sample gradients clipped to B, whose L2 sensitivity is ``2 B / n_i`` wherever it is
    evaluated (one row replaced changes one clipped term), calibrated to ``mu / sqrt(R Q)``; the
    R Q releases compose adaptively to mu (with ``clip="auto"`` or private scaling their shares
    are included and the total is still exactly mu). Every other quantity is post-processing: by
    induction over steps and rounds, ``z^l``, ``x^l``, the upload ``y_i`` and ``c_i`` (updated
    from the *sent* ``y_i`` and the broadcast ``ybar``) are functions of the noisy gradients and
    public broadcasts only. The ledger records the local releases (stage ``"local-gradient"``);
    the upload costs nothing more.

    *Why the noise is on the local gradients and not on the upload.* ``y_i - c_i - shift`` is the
    mean of the Q clipped gradients along the client's local path. With Q = 1 its sensitivity is
    ``2 B / n_i``; with Q >= 2 the paths on neighbouring datasets part after the first step and a
    clipped gradient is bounded but not Lipschitz uniformly over datasets (the other rows'
    curvature is unbounded), so the only bound valid for every dataset is ``2 B`` (two means of
    norm <= B): n_i times more noise. Noising each local gradient at ``mu / sqrt(R Q)`` instead
    puts noise of sd ``2 B sqrt(R Q) / (mu n_i) / sqrt(Q) = 2 B sqrt(R) / (mu n_i)`` on ``y_i``,
    exactly what one release of sensitivity ``2 B / n_i`` per round would need, for every Q.

    Parameters
    ----------
    family : str or Family, default "logistic"
    mu : float, default 2.0
        GDP budget per client; ``float('inf')`` for the non-private FedNMap of the paper.
    n_rounds : int or "auto", default "auto"
        Communication rounds (T). "auto": :data:`DEFAULT_ROUNDS` (10) with finite mu; with mu = inf
        until x and z stop moving (``converged_``), at most :data:`MAX_ROUNDS`.
    n_local_steps : int, default 10
        Local steps per round (Q; the paper's experiments use 10 and 20).
    step_size : float or "auto", default "auto"
        Local step (eta_a). "auto": ``1 / L``, the public curvature bound of
        :func:`~privfedstat.families.curvature.auto_step_size`, so that a round moves the server
        as far as Q corrected local gradient steps (``eta_hat = eta_s Q / L``), as SCAFFOLD's
        defaults do. The paper's rule ``eta_a = 1 / Q`` (Section 5.1: ``eta_hat`` fixed as Q
        varies) is ``step_size = 1 / (L Q)``: one gradient step's progress per round. Measured on
        the sparse logistic design of ``benchmarks/bench_fednmap.py`` (10 sites of 500, d = 21,
        Q = 10, alpha = 0.02, two seeds), the distance to the pooled lasso after 30 rounds at
        mu = 2 was 0.57-0.61 with ``1 / (L Q)`` and 0.09-0.15 with ``1 / L``; with ``1 / L``, 10
        rounds gave 0.16 at mu = 2 and 0.18 at mu = 1 (30 rounds: 0.15 / 0.09 and 0.33 / 0.27,
        the noise of more rounds outweighing their progress at small mu), hence R = 10
        **[I: the paper gives no scale for its steps]**.
    server_step_size : float, default 1.0
        Server step (eta_s).
    gamma : float or "auto", default "auto"
        The normal map's parameter (gamma). "auto": ``eta_hat``; then one round with Q = 1 and one
        client is exactly a proximal gradient step of size gamma (``z_{t+1} = x_t - gamma grad f(x_t)``)
        **[I: the paper gives no value; its theory asks gamma <= 1 / (5 L) and a much smaller eta_hat]**.
    {penalty}
    {common}

    Attributes
    ----------
    coef_, history_ (x_0 = 0, ..., x_R), converged_, privacy_, communication_
        See :class:`~privfedstat.FederatedEstimator`.
    n_iter_ : int
        Gradient evaluations per client (R Q).
    penalty_ : ElasticNet
        phi on the fitting scale (nu1, nu2 and the penalised coefficients).
    clip_ : float

    References
    ----------
    Huang, Pu & Johansson, *Achieving linear speedup for composite federated learning* (FedNMap),
    Algorithm 1, App. B.1-B.2; Robinson (1992), normal maps.
    """

    method = "FedNMap"

    _parameter_constraints = {
        "n_rounds": [ITERATIONS, "auto"],
        "n_local_steps": ITERATIONS,
        "server_step_size": Interval(Real, 0, None, closed="neither"),
        "gamma": [Interval(Real, 0, None, closed="neither"), "auto"],
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
        gamma: float | str = "auto",
        penalty: str = "l1",
        alpha: float = 0.01,
        l1_ratio: float | None = None,
        unpenalized: tuple[int, ...] = (0,),
        clip: float | str | AutoClip = "auto",
        weights="size",
        scaling=None,
        random_state=None,
        secure_mode: bool = False,
        on_client_failure: str = "raise",
        inference=None,
    ) -> None:
        _store(self, locals())

    def _advice(self) -> str:
        return "Increase n_rounds (T), or the step sizes if the path moved slowly."

    def _schedule(self, eta_a: float, eta_hat: float, Q: int) -> tuple[tuple[float, ...], float, bool]:
        """The prox parameters of the Q local steps, of the server step, and whether the round is a normal-map round
        (local steps from z with the shift ``(z - x) / gamma``; else from x without shift)."""
        gamma = eta_hat if self.gamma == "auto" else float(self.gamma)
        return (gamma,) * Q, gamma, True

    def _run(self, session: Session, setup: Setup) -> Run:
        R, stop_early = resolve_count(self.n_rounds, setup.mu, DEFAULT_ROUNDS, MAX_ROUNDS)
        Q = int(self.n_local_steps)
        clients = session.clients
        eta_a = resolve_step_size(self.step_size, clients.family, clients.n_features, setup.square_norm)
        eta_hat = float(self.server_step_size) * eta_a * Q
        local_steps, server_step, normal_map = self._schedule(eta_a, eta_hat, Q)
        phi = self._penalty(clients)
        w = resolve_weights(self, session, setup.clip)
        sens, mu_step = gradient_calibration(setup.clip, session.sizes, R * Q, setup.mu)  # R Q noisy local gradients
        z = clients.initial_parameters()
        x = phi.prox(z, server_step)
        ybar = None
        path = [x]
        for _ in range(R):
            start, shift = (z, (z - x) / server_step) if normal_map else (x, np.zeros_like(x))
            uploads, _, answered = session.ask("composite_round", weights=w, z=start, shift=shift,
                                               prox_steps=local_steps, penalty=phi, ybar=ybar, clip=setup.clip,
                                               step_size=eta_a, sensitivity=sens, mu=mu_step, stage="local-gradient")
            ybar = aggregate(w, uploads, answered)
            z_old, z = z, start - eta_hat * ybar
            x = phi.prox(z, server_step)
            check_iterate(x, f"the {self.method} server update", eta_hat)
            path.append(x)
            if stop_early and settled(x, path[-2]) and settled(z, z_old):
                break
        noise_sd = eta_hat * aggregate_sd(calibrated_sigma(sens, mu_step), w) / math.sqrt(Q)
        return Run(x, path, (len(path) - 1) * Q, noise_sd=noise_sd, update_noise_sd=noise_sd, weights=w)


class ZhangComposite(FedNMap):
    """The composite federated method of Zhang, Hu & Johansson (2024a), FedNMap's first baseline.

    As reconstructed in FedNMap's App. A.1 **[I: rebuilt from that appendix and the notes; the
    growing local prox parameter is from memory of arXiv 2309.01795]**: every client starts its Q
    local steps from the server's model ``x_t`` (``z^0 = x^0 = x_t``),
    ``z^{l+1} = z^l - eta_a (g~_i(x^l) + c_i)``, ``x^{l+1} = prox_{(l+1) eta_a phi}(z^{l+1})``, and
    sends ``y_i = (x_t - z^Q) / (eta_a Q) = mean_l g~_i(x^l) + c_i``; the server steps
    ``z_{t+1} = x_t - eta_hat ybar_t``, ``x_{t+1} = prox_{eta_hat phi}(z_{t+1})`` **[P]**, and
    ``c_i <- c_i - y_i + ybar_t = (x_t - z_{t+1}) / eta_hat - mean_l g~_i(x^l)`` **[P]**. No
    normal-map term: the same verb (``composite_round``) and server loop as :class:`FedNMap`, with
    the shift 0, the local start x_t and these prox parameters. The privacy argument, the
    parameters (but ``gamma``) and the attributes are FedNMap's.

    References
    ----------
    Zhang, Hu & Johansson (2024a), Composite federated learning with heterogeneous data, ICASSP;
    FedNMap's App. A.1.
    """

    method = "Zhang (2024a)"

    __init__ = _init_penalized  # FedNMap's parameters without gamma

    def _schedule(self, eta_a: float, eta_hat: float, Q: int) -> tuple[tuple[float, ...], float, bool]:
        return tuple(l * eta_a for l in range(Q)), eta_hat, False


class FedCanon(_Penalized, Scaffold):
    """FedCanon (Zhou et al. 2025) as SCAFFOLD with one proximal step at the server: FedNMap's second baseline.

    **[I]** Only its design is stated in FedNMap's paper (one server prox per round, no local prox,
    SCAFFOLD-style control variables); the notes' reconstruction, used here, is SCAFFOLD
    (:class:`~privfedstat.Scaffold`, option II, its local steps, noise and privacy argument
    unchanged) whose averaged model is mapped by ``prox_{eta_g eta_l K phi}`` each round:
    ``x_{t+1} = prox(x_t + eta_g sum_i w_i (y_i - x_t))``. It is therefore also "SCAFFOLD with a
    server prox". The local steps ignore phi, so the fixed point is not the composite minimiser in
    general (the control variates average the gradients along the local paths, not at x): with
    mu = inf the stationarity check says how far it settles (measured against FedNMap in
    ``tests/estimators/test_fednmap.py``).

    Parameters are SCAFFOLD's (``n_rounds`` R, ``n_local_steps`` K, ``step_size`` eta_l,
    ``server_step_size`` eta_g, ``clip``, ``weights``, ``scaling``, ``random_state``,
    ``secure_mode``, ``on_client_failure``) and the penalty's below.

    Parameters
    ----------
    {penalty}
    inference : None, default None
        See :class:`FedNMap`.

    Attributes are SCAFFOLD's (``control_``) and ``penalty_``.

    References
    ----------
    Zhou, Zhong, Shi, Wen & Yu (2025), FedCanon, arXiv 2504.11903; Karimireddy et al. (2020), SCAFFOLD.
    """

    method = "FedCanon"

    __init__ = _init_penalized  # FedNMap's parameters without gamma

    def _server_prox(self, x: np.ndarray, step: float) -> np.ndarray:
        return self.penalty_.prox(x, step)

    def _run(self, session: Session, setup: Setup) -> Run:
        self._penalty(session.clients)
        return super()._run(session, setup)


for _cls in (FedNMap, ZhangComposite, FedCanon):
    _cls.__doc__ = _cls.__doc__.replace("{penalty}", _PENALTY_DOC.strip()).replace(
        "{common}", _PRIVATE_COMMON_DOC.strip("\n"))


# ---------------------------------------------------------------------------- the client's half
def composite_round(clients: InProcessClients, z, *, shift, prox_steps, penalty, ybar, clip: float, step_size: float,
                    sensitivity, mu: float, stage: str) -> Reply:
    """One round of FedNMap (Huang, Pu & Johansson, Algorithm 1) or of Zhang et al. (2024a): send ``y_i``.

    Each client first updates its correction ``c_i <- c_i - y_i + ybar`` from its last upload
    ``y_i`` and the server's aggregate ``ybar`` of that round (``ybar`` None: the first round,
    ``c_i = 0``), then takes Q = ``len(prox_steps)`` local steps from ``z^0 = z``:
    ``x^l = prox_{tau_l phi}(z^l)``, ``z^{l+1} = z^l - eta_a (g~_i(x^l) + shift + c_i)``, with
    ``g~_i`` the mean of its per-sample gradients clipped to B plus Gaussian noise (a local
    release of sensitivity ``sensitivity``), ``phi`` the public ``penalty``
    (:class:`~privfedstat.penalty.ElasticNet`) and ``tau_l = prox_steps[l]``. It sends
    ``y_i = (z - z^Q) / (eta_a Q) = mean_l g~_i(x^l) + shift + c_i`` (computed as that mean) and
    keeps ``c_i`` and ``y_i``: both are post-processing of its noisy gradients and the broadcasts.
    """
    answered, failing = clients._begin(None)
    o = clients._oracle
    m, p = o.n_clients, o.n_params
    c, y_last = clients._state.get("composite_round") or (np.zeros((m, p)), np.zeros((m, p)))
    if ybar is not None:
        c = np.where(answered[:, None], c - y_last + ybar, c)
    local = np.tile(z, (m, 1))
    direction = shift + c
    total = np.zeros((m, p))
    records = []
    for tau in prox_steps:
        g, rec = federation_clients.privatize(o.clipped_gradients(penalty.prox(local, tau), clip), clients._noise,
                                              sensitivity, mu, stage, "local")
        records.append(rec)
        total += g
        local = local - step_size * (g + direction)
        if (error := _divergence(local, "FedNMap local steps", step_size, answered)) is not None:
            return clients._reply(local, records, answered, failing, error=error)
    upload = total / len(prox_steps) + direction
    clients._state["composite_round"] = (c, np.where(answered[:, None], upload, y_last))
    return clients._reply(upload, records, answered, failing)


register(Verb("composite_round", shape=parameters, per_client=("sensitivity",), release=("local", "record"),
              steps="prox_steps"),
         in_process=composite_round)
