"""Federated estimators for networks: the GLM estimators' server loops, run on torch clients.

:class:`DeepFedAvg`, :class:`DeepFedSGD`, :class:`DeepFedHybrid` and :class:`DeepDPFedAvg` subclass
:class:`~privfedstat.FedAvg`, :class:`~privfedstat.FedSGD`, :class:`~privfedstat.FedHybrid` and
:class:`~privfedstat.DPFedAvg`: the protocol (``_run``), the calibration, the Channel, the ledger,
participation and the failure policy are theirs. Only the data and the clients differ: ``fit``
takes a :class:`~privfedstat.deep.data.TensorFederatedData` and the clients are
:class:`~privfedstat.deep.clients.TorchClients` for the estimator's ``model`` and ``loss``.

What differs from the GLM estimators (and why):

* ``coef_`` is the flat vector of the model's trainable parameters (``model.named_parameters()``
  order) and ``model_`` a copy of ``model`` holding them; ``history_`` holds the server's flat
  parameters after every round that moved them, as for the GLM estimators (memory:
  ``(n_updates + 1) n_params`` float64 numbers); ``predict`` / ``predict_proba`` / ``score``
  (accuracy) take input tensors.
* No inference (``supports_inference = False``: standard errors of network weights are not
  defined by the paper), no feature scaling, and ``step_size`` is a number (the GLM curvature
  bound of ``"auto"`` does not apply). The noise comes from per-client ``torch.Generator``
  streams seeded from ``random_state``, or with ``secure_mode=True`` from the operating system's
  CSPRNG as for the GLM estimators (:class:`~privfedstat.FederatedEstimator`).
* ``clip`` is B, a number, or an :class:`~privfedstat.AutoClip` without pilot rounds (the private
  quantile of the per-sample gradient norms at the initial weights; it spends its budget share
  of mu); ``"auto"`` (whose pilot takes GLM steps) and ``"paper"`` are refused.
* A long fit shows a tqdm bar over its rounds on stderr (``progress``, default True): the bar
  appears once the fit has run :data:`~privfedstat.inference.bootstrap.PROGRESS_DELAY_S` seconds,
  so short fits (tests, the contract suite, the estimators of a study that draws its own bar with
  ``progress=False``) print nothing. A round is one request the clients answer (the clip search's
  included); the total is not known in advance (the clip search, HiFedProx's line search).
* The diagnostics keep the convergence and site-size checks; the GLM ones (sampling-SE proxy,
  stationarity) are skipped (:func:`~privfedstat.fitting.diagnostics.diagnose`).

References
----------
Peng, Paul & Auddy, Section 5.2 (CNNs on MNIST and CIFAR-10): DP-FedAvg with a server learning
rate, compute-matched DP-FedSGD and DP-FedHybrid; McMahan et al. (2018) for client-level DP-FedAvg.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from numbers import Integral, Real

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from .._linalg import safe_norm
from .._validation import BOOL, Free, InstanceOf, Interval, Options, check_positive_int
from ..algorithms.dpfedavg import DPFedAvg
from ..algorithms.fedavg import FedAvg
from ..algorithms.fedhybrid import FedHybrid
from ..algorithms.fedsgd import FedSGD
from ..inference.bootstrap import PROGRESS_DELAY_S
from ..privacy.clipping import AutoClip
from ..results.summary import Summary, privacy_rows, rounds_row
from .clients import TorchClients
from .data import TensorFederatedData
from .per_sample import check_model

__all__ = ["DeepFedAvg", "DeepFedSGD", "DeepFedHybrid", "DeepDPFedAvg", "compute_matched_rounds", "LOSSES"]

#: losses by name; each returns the mean over the batch (cross-entropy also takes log-probabilities:
#: log_softmax is idempotent, so on the models' log-softmax outputs it is the paper's NLL)
LOSSES: dict[str, Callable] = {"cross_entropy": F.cross_entropy, "nll": F.nll_loss}


def compute_matched_rounds(n_rounds: int, n_local_steps: int, local_steps: int = 0) -> int:
    """Server rounds that give a method FedAvg's compute: ``R K - local_steps`` gradient evaluations per client.

    Section 5.2.2 runs compute-matched DP-FedSGD and DP-FedHybrid: extra communication rounds so
    that every method evaluates as many (full-batch) gradients per client as DP-FedAvg's R rounds
    of K local steps. FedSGD evaluates one gradient per round (``local_steps = 0``: R K rounds,
    e.g. 100 for MNIST's 10 x 10); FedHybrid evaluates its K1 local steps and then one per server
    round (``local_steps = K1``: ``R K - K1`` rounds). The paper gives neither the rounds nor the
    K1 / K2 split (inferred).

    Parameters
    ----------
    n_rounds, n_local_steps : int
        FedAvg's R and K.
    local_steps : int, default 0
        Gradient evaluations the method spends before its server rounds (FedHybrid's K1).

    Returns
    -------
    int
    """
    total = check_positive_int(n_rounds, "n_rounds") * check_positive_int(n_local_steps, "n_local_steps")
    rounds = total - check_positive_int(local_steps, "local_steps", minimum=0)
    if rounds < 1:
        raise ValueError(f"local_steps={local_steps} leaves no server round within FedAvg's R K = {total} gradient "
                         "evaluations; lower it.")
    return rounds


class _Network:
    """What turns a GLM estimator into a network estimator (mixin placed first: data, clients, results)."""

    supports_inference = False
    scaling = None
    init = None
    inference = None
    _round_done = None  # the clients' ``on_round`` during ``fit``: the progress bar's update
    _parameter_constraints = {
        "model": Free("check_model and the fit's first forward pass"),
        "loss": [Options(tuple(LOSSES)), InstanceOf(Callable, "a callable loss(outputs, targets)")],
        "batch_size": [Interval(Integral, 1), None],
        "progress": BOOL,
        # numbers only: the GLMs' "auto" and "paper" rules read a GLM's curvature and rows (_validate_params says so)
        "step_size": Interval(Real, 0, None, closed="neither"),
        "clip": [Interval(Real, 0, None, closed="neither", finite=False), InstanceOf(AutoClip, "an AutoClip")],
    }

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None, *, clients=None, offset=None, budget=None):
        """Run the protocol on the clients' data (a :class:`~privfedstat.deep.data.TensorFederatedData`).

        Parameters
        ----------
        X : TensorFederatedData
        budget : PrivacyBudget, optional
            Charged with this fit's mu before any noise is drawn (see :class:`~privfedstat.PrivacyBudget`).

        Returns
        -------
        self
        """
        with tqdm(desc=self.method, unit="round", disable=not self.progress, delay=PROGRESS_DELAY_S) as bar:
            self._round_done = bar.update
            try:
                super().fit(X, y, clients=clients, offset=offset, budget=budget)
            finally:
                del self._round_done
        self.model_ = _with_parameters(self.model, self.coef_)
        return self

    def _check_data(self, X, y=None, clients=None, offset=None):
        extra = any(a is not None for a in (y, clients, offset))
        if not isinstance(X, TensorFederatedData) or extra:
            raise TypeError(f"{type(self).__name__}.fit takes one TensorFederatedData (privfedstat.deep), got "
                            f"{type(X).__name__}{' and more arguments' if extra else ''}.")
        _check_fits_model(self.model, self.loss, X)
        return X, None

    def _make_clients(self, data: TensorFederatedData, family, seed: np.random.SeedSequence, secure: bool) -> TorchClients:
        return TorchClients(data, self.model, _loss(self.loss), seed, batch_size=getattr(self, "batch_size", None),
                            secure=secure, on_round=self._round_done)

    def _coef_shape(self, n_features: int, family) -> tuple[int, ...]:
        return (-1,)  # the flat parameter vector

    def _validate_params(self, mu: float) -> None:
        check_model(self.model)
        if isinstance(self.step_size, str):
            raise ValueError("step_size must be a number for networks (the GLM curvature bound of 'auto' does not apply).")
        if isinstance(self.clip, str) or (isinstance(self.clip, AutoClip) and self.clip.pilot_rounds):
            raise ValueError("clip must be a number B, or an AutoClip without pilot rounds (the private quantile of the "
                             f"per-sample gradient norms at the initial weights), got {self.clip!r}.")
        super()._validate_params(mu)

    def _advice(self) -> str:
        return "Increase the number of rounds or lower step_size (a network's loss need not settle in a fixed budget)."

    # ------------------------------------------------------------------ results
    def _outputs(self, X) -> torch.Tensor:
        self._check_fitted()
        try:
            X = torch.as_tensor(X.inputs if isinstance(X, TensorFederatedData) else X)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"X must be a numeric array or tensor of inputs, got {type(X).__name__}: {err}") from None
        if X.dim() < 2 or math.prod(X.shape[1:]) != self.n_features_in_:
            raise ValueError(f"X must have shape (n_samples, *input_shape) with {self.n_features_in_} numbers per input, "
                             f"as the inputs the model was fitted on; got shape {tuple(X.shape)}.")
        dtype = next(self.model_.parameters()).dtype
        try:
            with torch.no_grad():
                return self.model_(X.to(dtype))
        except RuntimeError as err:
            raise ValueError(f"inputs of shape {tuple(X.shape[1:])} do not fit the model: {err}") from err

    def predict(self, X) -> np.ndarray:
        """Predicted class of each input (the argmax of the model's outputs), shape (n,)."""
        return self._outputs(X).argmax(dim=1).numpy()

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n, n_classes): the softmax of the outputs (of log-probabilities too)."""
        return torch.softmax(self._outputs(X), dim=1).to(torch.float64).numpy()

    def score(self, X, y=None) -> float:
        """Accuracy on inputs ``X`` with labels ``y``, or on a TensorFederatedData (its labels)."""
        if isinstance(X, TensorFederatedData):
            if y is not None:
                raise TypeError("a TensorFederatedData already holds its labels; call score(data) without y.")
            y = X.targets
        predicted = self.predict(X)
        y = np.asarray(y)
        if y.shape != predicted.shape:
            raise ValueError(f"y must hold one label per input ({predicted.shape[0]}), got shape {y.shape}.")
        return float(np.mean(predicted == y))

    def summary(self, delta: float = 1e-5) -> Summary:
        """Model, method, clients, rounds, privacy, clipping bound; one row per parameter tensor (shape, L2 norm)."""
        self._check_fitted()
        led, comm = self.privacy_, self.communication_
        header = {
            "Model": f"{type(self.model).__name__} ({self.coef_.size} parameters)",
            "Method": self.method,
            "Clients": f"{self.n_clients_} (N = {self.n_samples_})",
            **rounds_row(comm),
            **privacy_rows(led, delta),
            "Clipping bound B": f"{self.clip_:.4g}",
            "Iterations": str(self.n_iter_),
        }
        params = dict(self.model_.named_parameters())
        table = pd.DataFrame({"shape": [tuple(p.shape) for p in params.values()],
                              "norm": [safe_norm(p.detach().to(torch.float64).numpy()) for p in params.values()]},
                             index=pd.Index(list(params), name="parameter"))
        return Summary(f"{self.method} results", header, table, [f"NOT fully private: {leak}" for leak in led.leaks])


def _check_fits_model(model: nn.Module, loss, data: TensorFederatedData) -> None:
    """Refuse data the model cannot take, before anything is released.

    The model runs on one input (no gradient; after :func:`~privfedstat.deep.per_sample.check_model`):
    the inputs must have the shape it takes. With a named loss (:data:`LOSSES`, class scores) it
    must return one row of scores per input and every label must index one of them; a callable
    loss defines its own targets.
    """
    check_model(model)
    first = data.inputs[:1].to(next(model.parameters()).dtype)
    try:
        with torch.no_grad():
            out = model(first)
    except RuntimeError as err:
        raise ValueError(f"inputs of shape {tuple(data.inputs.shape[1:])} do not fit the model: {err}") from err
    if callable(loss):
        return
    if out.dim() != 2:
        raise ValueError(f"loss {loss!r} takes one row of class scores per input; the model returns shape "
                         f"{tuple(out.shape)} for one input.")
    top = int(data.targets.max())
    if top >= out.shape[1]:
        raise ValueError(f"label {top} has no output: the model scores {out.shape[1]} classes (labels 0 to "
                         f"{out.shape[1] - 1}).")


def _loss(loss) -> Callable:
    """``loss`` as a callable: a name in :data:`LOSSES` or a callable ``loss(outputs, targets)`` (mean over the batch)."""
    if callable(loss):
        return loss
    if loss in LOSSES:
        return LOSSES[loss]
    raise ValueError(f"loss must be one of {sorted(LOSSES)} or a callable loss(outputs, targets), got {loss!r}.")


def _with_parameters(model: nn.Module, theta: np.ndarray) -> nn.Module:
    """A copy of ``model`` whose trainable parameters are ``theta`` (flat, ``named_parameters()`` order)."""
    out = copy.deepcopy(model)
    flat = torch.from_numpy(np.ascontiguousarray(theta, dtype=np.float64))
    with torch.no_grad():
        start = 0
        for p in out.parameters():
            if p.requires_grad:
                p.copy_(flat[start:start + p.numel()].view(p.shape).to(p.dtype))
                start += p.numel()
    return out


_COMMON = """    model : torch.nn.Module
        The network (float32 or float64; its current weights are theta^(0)); never changed by ``fit``.
        No BatchNorm or Dropout in training mode (per-sample gradients need samples that do not
        interact): see :func:`~privfedstat.deep.per_sample.check_model`.
    loss : {"cross_entropy", "nll"} or callable, default "cross_entropy"
        rho: ``loss(outputs, targets)`` returning the mean over the batch."""
#: the ``progress`` parameter of every network estimator
PROGRESS_PARAM = """    progress : bool, default True
        Show a tqdm bar over the rounds on stderr once the fit has run ``PROGRESS_DELAY_S`` (2)
        seconds (short fits print nothing); False: never (a study drawing its own bar)."""
_TAIL = """    weights : "size" or array of shape (n_clients,), default "size"
        Server aggregation weights (w_i = n_i / N).
    participation : None, float, int or Participation, default None
        Which clients each round asks (q in (0, 1): Poisson sampling; an int: a cohort; see
        :class:`~privfedstat.FedSGD`). Only the clients asked compute.
    random_state : int, Generator, SeedSequence or None
        Seeds every client's noise and minibatch ``torch.Generator`` (same seed, same numbers).
    on_client_failure : {"raise", "skip"}, default "raise"
        See :class:`~privfedstat.FederatedEstimator`; fault injection with
        :class:`~privfedstat.deep.data.FailingTensorData`.
    secure_mode : bool, default False
        Noise from the operating system's CSPRNG, four normals summed (random_state must be None);
        see :class:`~privfedstat.FederatedEstimator`.
""" + PROGRESS_PARAM + """

    Attributes
    ----------
    coef_ : ndarray of shape (n_params,)
        The final trainable parameters, flat. ``model_``: a copy of ``model`` holding them.
    history_, n_iter_, converged_, clip_, privacy_, communication_
        As for every estimator (:class:`~privfedstat.FederatedEstimator`); ``history_`` rows are
        flat parameter vectors."""


class DeepFedAvg(_Network, FedAvg):
    __doc__ = f"""Differentially private FedAvg for networks (Algorithm 3; the DP-FedAvg of Section 5.2).

    Each round the server sends theta^(r-1) to the clients asked; each runs ``n_local_steps`` (K)
    local steps ``theta_i <- theta_i - eta gbar_i(theta_i) + sigma_i Z`` (noise on the parameters
    at every step, ``sigma_i = 2 B eta sqrt(R K) / (mu n_i)``) and sends its final iterate; the
    server moves by ``server_step_size`` (eta_s) times the change of the weighted average
    (``theta^r = theta^(r-1) + eta_s (avg_i theta_i - theta^(r-1))``). Each client is mu-GDP for
    one of its rows.

    Parameters
    ----------
{_COMMON}
    mu : float, default 2.0
        GDP budget per client (mu); ``inf`` for no privacy.
    n_rounds : int, default 10
        R.
    n_local_steps : int, default 10
        K (local epochs: full-batch steps, Section 5.2.1).
    step_size : float, default 0.01
        eta (MNIST 0.01, CIFAR 0.005 in Section 5.2.2).
    server_step_size : float, default 1.0
        eta_s (MNIST 1.0, CIFAR 0.75).
    clip : float or AutoClip, default 1.0
        B, the per-sample gradient clipping bound (MNIST 1.0, CIFAR 0.75).
    batch_size : int or None, default None
        Rows per local step (None: full batch); see :class:`~privfedstat.deep.clients.TorchClients`.
{_TAIL}
    """

    method = "DP-FedAvg (network)"

    _parameter_constraints = {"server_step_size": Interval(Real, 0, None, closed="neither")}

    def __init__(self, *, model: nn.Module, loss="cross_entropy", mu: float = 2.0, n_rounds: int = 10,
                 n_local_steps: int = 10, step_size: float = 0.01, server_step_size: float = 1.0, clip=1.0,
                 batch_size: int | None = None, weights="size", participation=None, random_state=None,
                 on_client_failure: str = "raise", secure_mode: bool = False, progress: bool = True) -> None:
        self.model = model
        self.loss = loss
        self.mu = mu
        self.n_rounds = n_rounds
        self.n_local_steps = n_local_steps
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.clip = clip
        self.batch_size = batch_size
        self.weights = weights
        self.participation = participation
        self.random_state = random_state
        self.on_client_failure = on_client_failure
        self.secure_mode = secure_mode
        self.progress = progress


class DeepFedSGD(_Network, FedSGD):
    __doc__ = f"""Differentially private FedSGD for networks (Algorithm 1; compute-matched in Section 5.2).

    Each of ``n_iter`` (K) rounds every client asked sends the mean of its per-sample gradients
    clipped to B plus noise ``sigma_i = 2 B sqrt(K) / (mu n_i)``; the server averages and steps.
    Compute-matched with DeepFedAvg: ``n_iter=compute_matched_rounds(R, K)``.

    Parameters
    ----------
{_COMMON}
    mu : float, default 2.0
    n_iter : int, default 100
        K, the number of rounds (R K of :class:`DeepFedAvg`'s defaults).
    step_size : float, default 0.01
        eta.
    clip : float or AutoClip, default 1.0
        B.
{_TAIL}
    """

    method = "DP-FedSGD (network)"
    aggregation, min_surviving = "local", None  # per-site noise: secure aggregation covers the GLM verbs only

    def __init__(self, *, model: nn.Module, loss="cross_entropy", mu: float = 2.0, n_iter: int = 100,
                 step_size: float = 0.01, clip=1.0, weights="size", participation=None, random_state=None,
                 on_client_failure: str = "raise", secure_mode: bool = False, progress: bool = True) -> None:
        self.model = model
        self.loss = loss
        self.mu = mu
        self.n_iter = n_iter
        self.step_size = step_size
        self.clip = clip
        self.weights = weights
        self.participation = participation
        self.random_state = random_state
        self.on_client_failure = on_client_failure
        self.secure_mode = secure_mode
        self.progress = progress


class DeepFedHybrid(_Network, FedHybrid):
    __doc__ = f"""Differentially private FedHybrid for networks (Algorithm 2; compute-matched in Section 5.2).

    Stage I: ``n_local_steps`` (K1) noisy local steps from theta^(0) on every client asked, averaged
    by the server; stage II: ``n_server_iter`` (K2) FedSGD rounds from that average; each stage
    spends ``mu / sqrt(2)``. Compute-matched with DeepFedAvg:
    ``n_server_iter=compute_matched_rounds(R, K, local_steps=K1)``.

    Parameters
    ----------
{_COMMON}
    mu : float, default 2.0
    n_local_steps : int, default 10
        K1.
    n_server_iter : int, default 90
        K2 (``compute_matched_rounds(10, 10, local_steps=10)``).
    step_size : float, default 0.01
        eta of both stages.
    clip : float or AutoClip, default 1.0
        B.
    batch_size : int or None, default None
        Rows per stage-I local step (None: full batch).
{_TAIL}
    """

    method = "DP-FedHybrid (network)"

    def __init__(self, *, model: nn.Module, loss="cross_entropy", mu: float = 2.0, n_local_steps: int = 10,
                 n_server_iter: int = 90, step_size: float = 0.01, clip=1.0, batch_size: int | None = None,
                 weights="size", participation=None, random_state=None, on_client_failure: str = "raise",
                 secure_mode: bool = False, progress: bool = True) -> None:
        self.model = model
        self.loss = loss
        self.mu = mu
        self.n_local_steps = n_local_steps
        self.n_server_iter = n_server_iter
        self.step_size = step_size
        self.clip = clip
        self.batch_size = batch_size
        self.weights = weights
        self.participation = participation
        self.random_state = random_state
        self.on_client_failure = on_client_failure
        self.secure_mode = secure_mode
        self.progress = progress


class DeepDPFedAvg(_Network, DPFedAvg):
    __doc__ = f"""Client-level DP-FedAvg for networks (McMahan et al. 2018): clipped model updates, unit "client".

    Each round every client asked runs ``n_local_steps`` (K) full-batch gradient steps on its mean
    loss from the server's model (no noise, no per-sample clipping), clips its update to L2 norm
    S (``update_clip``), adds noise ``2 S sqrt(R) / mu`` and sends it; the server moves by
    ``server_step_size`` times the weighted average. Protects a client's whole dataset;
    ``privacy_.public_view().epsilon`` accounts for Poisson participation (see :class:`~privfedstat.DPFedAvg`).

    Parameters
    ----------
{_COMMON}
    mu : float, default 2.0
        Client-level GDP budget per client.
    n_rounds : int, default 20
        R.
    n_local_steps : int, default 5
        K.
    step_size : float, default 0.01
        eta.
    server_step_size : float, default 1.0
        eta_g.
    update_clip : float, default 1.0
        S.
{_TAIL}
    """

    method = "DP-FedAvg (client-level, network)"
    clip = math.inf  # no per-sample clipping (the update is clipped)

    def __init__(self, *, model: nn.Module, loss="cross_entropy", mu: float = 2.0, n_rounds: int = 20,
                 n_local_steps: int = 5, step_size: float = 0.01, server_step_size: float = 1.0,
                 update_clip: float = 1.0, weights="size", participation=None, random_state=None,
                 on_client_failure: str = "raise", secure_mode: bool = False, progress: bool = True) -> None:
        self.model = model
        self.loss = loss
        self.mu = mu
        self.n_rounds = n_rounds
        self.n_local_steps = n_local_steps
        self.step_size = step_size
        self.server_step_size = server_step_size
        self.update_clip = update_clip
        self.weights = weights
        self.participation = participation
        self.random_state = random_state
        self.on_client_failure = on_client_failure
        self.secure_mode = secure_mode
        self.progress = progress
