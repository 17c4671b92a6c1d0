"""FedNewton-NN (Algorithm 5) for networks: a private, head-only, empirical-Fisher Newton step.

After DP-FedAvg rounds (stage 1), each client takes one damped Newton step on the **last layer**
(the Linear ``head`` of :mod:`privfedstat.deep.models`) with the rest of the network frozen, using
the empirical Fisher matrix of its per-sample head gradients in place of the Hessian, and sends the
step with Gaussian noise; the server moves the head by the weighted mean of the noisy steps
(stage 2). FedNewton-Iter repeats the two stages for a few cycles (Section 5.2.2).

Client side: :func:`head_newton_message` (the step and its sensitivity), built on
:func:`per_sample_head_gradients` and :func:`damped_fisher_solve`. Server side:
:func:`head_vector` / :func:`apply_head_step` (read and move the head). The calibration,
:func:`~privfedstat.privacy.calibration.head_newton_sensitivity` (derived in its docstring),
lives with every other calibration.

References
----------
Peng, Paul & Auddy, Algorithm 5 (FedNewton-NN) and Section 5.2.2 (FedNewton-Iter).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..privacy.calibration import head_newton_sensitivity
from .per_sample import clip_factors, sample_norms

__all__ = ["HEAD", "head_vector", "apply_head_step", "per_sample_head_gradients", "damped_fisher_solve",
           "head_newton_message"]

#: the name of the layer the Newton step acts on (the last Linear layer of every model in ``models``)
HEAD = "head"

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _head_names(model: nn.Module) -> list[str]:
    head = getattr(model, HEAD, None)
    if not isinstance(head, nn.Linear):
        raise TypeError(f"the Newton step acts on the Linear layer model.{HEAD}; {type(model).__name__} has "
                        f"{type(head).__name__ if head is not None else 'none'}.")
    return [f"{HEAD}.{name}" for name, _ in head.named_parameters()]


def head_vector(model: nn.Module) -> torch.Tensor:
    """The head's parameters as one flat float64 vector (weight row-major, then bias), of length p_h."""
    params = dict(model.named_parameters())
    return torch.cat([params[name].detach().reshape(-1) for name in _head_names(model)]).to(torch.float64)


def apply_head_step(model: nn.Module, step) -> None:
    """Server update of stage 2: ``head <- head - step`` (``step`` in :func:`head_vector`'s layout), in place.

    Parameters
    ----------
    model : nn.Module
        A model with a Linear ``head``.
    step : array-like of shape (p_h,)
        The aggregated step ``sum_i w_i (alpha (h_i + lambda I)^{-1} g_i + noise_i)``.
    """
    params = dict(model.named_parameters())
    step = torch.as_tensor(np.asarray(step, dtype=np.float64))
    sizes = [params[name].numel() for name in _head_names(model)]
    if step.shape != (sum(sizes),):
        raise ValueError(f"the head has {sum(sizes)} parameters, the step has shape {tuple(step.shape)}.")
    with torch.no_grad():
        for name, part in zip(_head_names(model), torch.split(step, sizes)):
            params[name].sub_(part.reshape(params[name].shape).to(params[name].dtype))


def per_sample_head_gradients(model: nn.Module, loss_fn: LossFn, inputs: torch.Tensor, targets: torch.Tensor,
                              clip: float = math.inf, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    """Per-sample gradients of the loss with respect to the head's parameters, clipped to L2 norm B.

    Computed with ``torch.func`` (``vmap`` of ``grad`` of a ``functional_call`` in which only the
    head is an argument; the other layers are frozen constants). Clipping follows
    :mod:`privfedstat.deep.per_sample` (norms without overflow, factor ``min(1, B kappa / ||v_j||)``,
    a row with a non-finite entry contributes 0 when B is finite).

    Parameters
    ----------
    model : nn.Module
        A model with a Linear ``head``.
    loss_fn : callable
        ``loss_fn(output, target)``, the mean loss of a batch (e.g. ``torch.nn.functional.nll_loss``).
    inputs : Tensor of shape (n, ...)
    targets : Tensor of shape (n, ...)
    clip : float, default inf
        B: each row is scaled to norm at most B.
    params : dict of str to Tensor, optional
        Parameters at which to evaluate (names as in ``model.named_parameters()``; missing ones
        are the model's own). Default: the model's own parameters.

    Returns
    -------
    Tensor of shape (n, p_h), float64
        Row j is ``clip_B(grad_head rho(x_j, theta))`` in :func:`head_vector`'s layout.
    """
    names = _head_names(model)
    given = dict(params or {})
    current = {k: given.get(k, v).detach() for k, v in model.named_parameters()}
    head = {k: current.pop(k) for k in names}
    frozen = {**current, **dict(model.named_buffers())}

    def loss(head_params, x, y):
        out = functional_call(model, {**frozen, **head_params}, (x.unsqueeze(0),))
        return loss_fn(out, y.unsqueeze(0))

    with torch.no_grad():
        grads = vmap(grad(loss), in_dims=(None, 0, 0))(head, inputs, targets)
    V = torch.cat([grads[name].reshape(inputs.shape[0], -1) for name in names], dim=1).to(torch.float64)
    if math.isinf(clip):
        return V
    norms = sample_norms([V])
    V = torch.where(torch.isfinite(norms)[:, None], V, torch.zeros((), dtype=V.dtype))
    return V * clip_factors(norms, clip, torch.float64)[:, None]


def damped_fisher_solve(V: torch.Tensor, damping: float) -> torch.Tensor:
    """``(h + lambda I)^{-1} g`` for ``h = V^T V / n`` (empirical Fisher) and ``g = V^T 1 / n`` (mean gradient).

    Solved in the smaller of the two spaces: with n <= p_h through the push-through identity
    ``(V^T V / n + lambda I)^{-1} V^T 1 / n = V^T (V V^T + n lambda I)^{-1} 1`` (an n x n system),
    otherwise through the p_h x p_h system; both by Cholesky in float64.

    Parameters
    ----------
    V : Tensor of shape (n, p_h)
        Per-sample (clipped) head gradients.
    damping : float
        lambda > 0, the ridge that floors the eigenvalues of the Fisher matrix.

    Returns
    -------
    Tensor of shape (p_h,), float64
    """
    V = V.to(torch.float64)
    n, p = V.shape
    ones = torch.ones(n, 1, dtype=torch.float64)
    if n <= p:
        K = V @ V.T
        K.diagonal().add_(n * damping)
        return (V.T @ torch.cholesky_solve(ones, torch.linalg.cholesky(K))).reshape(-1)
    A = V.T @ V
    A.diagonal().add_(n * damping)
    return torch.cholesky_solve(V.T @ ones, torch.linalg.cholesky(A)).reshape(-1)


def head_newton_message(model: nn.Module, loss_fn: LossFn, inputs: torch.Tensor, targets: torch.Tensor, *,
                        clip: float, damping: float, step: float,
                        params: dict[str, torch.Tensor] | None = None) -> tuple[np.ndarray, float]:
    """One client's head Newton step of Algorithm 5 and its sensitivity (the statistic before noise).

    ``s = alpha (h + lambda I)^{-1} g`` at the current model, with ``g`` the mean and
    ``h = (1/n) sum_j v_j v_j^T`` the empirical Fisher matrix (full, not diagonal) of the per-sample
    head gradients ``v_j`` clipped to B; the other layers are frozen. The client sends
    ``s + N(0, (Delta / mu)^2 I)`` and the server sets ``head <- head - sum_i w_i s_i``
    (:func:`apply_head_step`), which is Algorithm 5's ``theta_new = theta - alpha (h + lambda)^{-1} g``.

    Parameters
    ----------
    model : nn.Module
        A model with a Linear ``head`` (at theta^(R)).
    loss_fn : callable
        ``loss_fn(output, target)``, the mean loss of a batch.
    inputs : Tensor of shape (n, ...)
    targets : Tensor of shape (n, ...)
    clip : float
        B, the per-sample clipping bound.
    damping : float
        lambda, the ridge added to the Fisher matrix.
    step : float
        alpha, the damping factor of the step.
    params : dict of str to Tensor, optional
        The parameters theta^(R) (e.g. a clients backend's copy, evaluated with ``functional_call``);
        default: the model's own.

    Returns
    -------
    step : ndarray of shape (p_h,), float64
        s, in :func:`head_vector`'s layout.
    sensitivity : float
        Its L2 sensitivity to one replaced sample (:func:`~privfedstat.privacy.calibration.head_newton_sensitivity`).

    References
    ----------
    Peng, Paul & Auddy, Algorithm 5, stage 2.
    """
    if inputs.shape[0] == 0:
        raise ValueError("a client with no rows cannot take a Newton step.")
    sensitivity = float(head_newton_sensitivity(clip, damping, step, [inputs.shape[0]])[0])
    V = per_sample_head_gradients(model, loss_fn, inputs, targets, clip, params)
    return (step * damped_fisher_solve(V, damping)).numpy(), sensitivity
