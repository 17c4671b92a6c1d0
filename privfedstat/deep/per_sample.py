"""Per-sample clipped mean gradients of a torch model: the clients' statistic of Algorithms 1-3 for networks.

A client's message in DP-FedSGD, and each of its local steps in DP-FedAvg, is the mean over its
rows of the per-sample gradients ``g_j = grad_theta rho(x_j, theta)``, each clipped to L2 norm B
over all parameters jointly: ``gbar = (1/n) sum_j g_j min(1, B / ||g_j||)``. Replacing one row
moves it by at most ``2B / n`` (the core paper's Lemma 3.1), whatever the model.

The per-sample gradients are computed in the model's dtype (float32 or float64), the fastest exact
way each parameter allows, chosen automatically:

* the parameters of Linear, Conv1d/2d/3d, GroupNorm, LayerNorm and Embedding layers by
  book-keeping (:mod:`privfedstat.deep.ghost`): one batched forward and backward pass records each
  layer's input and output gradient, from which its per-sample gradients follow without ``vmap``
  (a Linear layer's on one vector per sample stays factored, ``g_j a_j^T``: never formed);
* the other parameters from ``torch.func`` (``vmap`` of ``grad`` of the loss of one sample,
  evaluated with ``functional_call``).

Samples go :data:`PASS_ROWS` at a time through the batched pass and :data:`CHUNK_ELEMENTS` bounds
the per-sample entries formed at once. The clipping factors, the scaled terms and their sum are
computed in float64, and the clipped mean is returned in float64 (the clients release it in
float64). Nothing is taken from the model's ``.grad``.

Sensitivity for every finite input (the numba kernels' rules, :mod:`privfedstat.kernels.glm_nb`):

* the norm ``||g_j||`` is computed without overflow or harmful underflow (:func:`sample_norms`):
  float32 squares are summed over blocks of 16 entries in float32, the blocks in float64; a row
  whose sum of squares leaves a safe range is recomputed with every entry divided by the row's
  largest absolute entry ``a_j`` (exact), ``||g_j|| = a_j sqrt(sum (g_jk / a_j)^2)``;
* each term is scaled by ``min(1, B kappa / ||g_j||)`` with ``kappa = CLIP_SAFETY = 1 - 2^-20``.
  In float32 (unit roundoff ``u = 2^-24``) a block's sum of 16 squares has relative error at most
  ``16 u`` in any summation order (Higham 2002, sect. 4.2), so its float32 norm at most ``9 u``
  with the square root, its square ``18 u``, and the float64 total and root give ``||g_j||`` to
  within ``9 u`` (plus ``~P 2^-53``, negligible). The factor (float64, a normal number, see
  :func:`clip_factors`), its products with the entries (converted to float64 exactly) and the
  sum over the ``n`` rows are float64: their roundings add at most ``(n + 2) 2^-53`` relative
  (``< 2^-30`` for ``n < 2^22``). So every clipped term, and the clipped mean, has norm ``<= B``
  also after rounding (``9 u + 2^-30 < 2^-20``). A float32 sum would not do: its error grows with
  ``n`` (about ``1e-3`` relative at ``n = 10^5`` rows in one direction), far past the margin. The
  cost is a clipping bias of ``10^-6`` relative, far below the privacy noise;
* a factored Linear gradient ``g_j a_j^T`` has norm ``||g_j|| ||a_j||``, each factor's norm computed
  in float64 (float32 entries square exactly in float64, relative error about ``d 2^-53`` for d
  entries; float64 ones by :func:`sample_norms`), and its terms ``(c_j g_jk) a_jl`` are float64
  products (two roundings of ``2^-53``): the bound above holds with room to spare. The parts'
  norms (formed gradients jointly, factored layers, Embedding rows) are combined as
  ``m sqrt(sum (norm / m)^2)``, ``m`` the largest (no overflow, relative error about ``k 2^-53``
  for k parts);
* a per-sample gradient with a non-finite entry (a NaN or infinite loss) contributes 0: NaN against
  a finite value would be a perfect distinguisher. So does one whose clipping factor would be
  subnormal in the model's dtype (norm above about ``8e37 B`` in float32). With ``B = inf`` (no
  clipping: non-private fits only) NaN and inf propagate, so that divergence is detected.

Not bounded by this argument, as for the numba kernels: the sum over a client's rows is itself
computed in floating point, so neighbouring datasets differ by ``2B / n`` plus that rounding. That
floating-point side channel is not closed anywhere, secure mode included: secure mode changes only
the noise sampler (:class:`~privfedstat.privacy.mechanisms.SecureClientNoise`), not the sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from .._linalg import row_norms
from .._warn import warn
from .ghost import Call, Outer, Rows, batch_layout_modules, covered, ghost_layers, kept, layer_pieces, probe_batch, trace

__all__ = ["per_sample_clipped_mean", "PerSampleGradients", "sample_norms", "clip_factors", "check_model",
           "CLIP_SAFETY", "MIN_CLIP", "CHUNK_ELEMENTS", "PASS_ROWS"]

#: per-sample terms are clipped to ``B * CLIP_SAFETY`` so that float32 rounding never lifts one above B
CLIP_SAFETY = 1.0 - 2.0**-20
#: smallest clipping bound: float32's absolute rounding of subnormal products (``2^-150`` per entry) stays
#: inside the margin ``(1 - kappa) B`` for up to 2^40 parameters
MIN_CLIP = 1e-30
#: float32 squares are summed in float32 over blocks of this many entries (error <= 16 u in any order), then in float64
_BLOCK = 16
#: float64 sums of squares in these ranges are accurate as computed (no square overflowed; entries whose squares
#: underflowed change them by less than 2^-80 relative); other rows are rescaled by their largest entry
_SAFE = {torch.float32: (2.0**-60, 2.0**100), torch.float64: (2.0**-900, 2.0**1000)}
#: per-sample gradient entries materialised by one vmap call, or converted to float64 at once (2^23 float32 numbers:
#: 32 MiB; with chunks about the size of the last-level cache a private step on the MNIST CNN ran ~20% faster than
#: with 64 MiB, benchmarks/bench_deep.py)
CHUNK_ELEMENTS = 2**23
#: samples per batched forward and backward pass of the book-keeping path (the activations of a non-private step at
#: batch 256; a client's full batch of thousands of rows goes through in such passes)
PASS_ROWS = 256


def check_model(model: nn.Module) -> None:
    """Refuse layers that make a sample's gradient depend on the rest of the batch or on randomness, and non-finite weights.

    BatchNorm in training mode normalises with batch statistics (per-sample gradients are then
    undefined and one row moves every other row's gradient); Dropout in training mode draws random
    masks. Either must be in eval mode (``model.eval()``), or BatchNorm replaced by GroupNorm, as
    Opacus requires. Other ways of mixing the rows (a batch statistic in the forward, attention or a
    recurrent layer with ``batch_first=False``) are caught by :meth:`PerSampleGradients._probe` at
    the first gradient, which then takes every per-sample gradient from each row alone.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    for name, module in model.named_modules():
        if module.training and isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd)):
            raise ValueError(
                f"layer {name or type(module).__name__!r} ({type(module).__name__}) is in training mode: per-sample "
                "gradients need every sample's loss to depend on that sample only, without randomness. Call "
                "model.eval() (BatchNorm then uses its running statistics, Dropout is off) or replace BatchNorm "
                "by GroupNorm.")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the model has no trainable parameters (requires_grad=True).")
    bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise ValueError(f"the model's parameters {bad[:5]} hold NaN or infinite values; theta^(0) must be finite.")


class PerSampleGradients:
    """Per-sample gradients of ``loss_fn(model(x_j), y_j)`` with respect to the trainable parameters (torch.func).

    Parameters
    ----------
    model : torch.nn.Module
        Evaluated with :func:`torch.func.functional_call` on the parameters given to each method
        (the module's own parameters are not used or changed); its buffers are used as they are.
    loss_fn : callable
        ``loss_fn(outputs, targets)`` -> the mean loss of a batch (torch's default reduction),
        called on batches of one sample.

    Attributes
    ----------
    names : list of str
        The trainable parameters' names, in ``model.named_parameters()`` order (the flat order).
    shapes : list of torch.Size
    n_params : int
        P, the number of trainable parameters.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable) -> None:
        check_model(model)
        self.model = model
        self.loss_fn = loss_fn
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        dtypes = {p.dtype for _, p in trainable}
        if not dtypes <= {torch.float32, torch.float64} or len(dtypes) > 1:
            raise TypeError(f"the trainable parameters must all be float32 or all float64, got {sorted(map(str, dtypes))}.")
        self.names = [n for n, _ in trainable]
        self.shapes = [p.shape for _, p in trainable]
        self.n_params = sum(p.numel() for _, p in trainable)
        self._frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
        self._buffers = dict(model.named_buffers())
        self._grad = vmap(grad(self._loss), in_dims=(None, None, 0, 0))
        self._layers = ghost_layers(model, set(self.names))
        self._shapes: dict[tuple, dict[str, list[tuple[int, ...]]]] = {}  # per input shape: the probe's layer inputs

    def _loss(self, params: dict, fixed: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss of one sample as a function of ``params`` (``fixed``: trainable parameters held constant)."""
        out = functional_call(self.model, ({**params, **fixed, **self._frozen}, self._buffers), (x.unsqueeze(0),))
        return self.loss_fn(out, y.unsqueeze(0))

    def _sample_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``loss_fn`` on the model's output for one sample (``vmap``-ed over a batch's outputs)."""
        return self.loss_fn(output.unsqueeze(0), target.unsqueeze(0))

    def chunks(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor) -> Iterator[list[torch.Tensor]]:
        """The per-sample gradients from ``vmap``, a chunk of rows at a time: lists of tensors of shape (rows, *shape),
        one per parameter."""
        step = max(1, CHUNK_ELEMENTS // max(self.n_params, 1))
        for lo in range(0, inputs.shape[0], step):
            grads = self._grad(params, {}, inputs[lo:lo + step], targets[lo:lo + step])
            yield [grads[n] for n in self.names]

    def clipped_mean(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor, clip: float) -> list[torch.Tensor]:
        """``(1/n) sum_j g_j min(1, B kappa / ||g_j||)`` per parameter, in float64 (non-finite terms 0 when B is finite).

        Factors, terms and sum are float64 whatever the model's dtype (see the module docstring).
        """
        return [t / inputs.shape[0] for t in self._clipped_sums(params, inputs, targets, clip)[1]]

    def mean_gradient(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
        """The gradient of the batch's mean loss per parameter (one backward pass; no per-sample clipping)."""

        def batch_loss(p: dict) -> torch.Tensor:
            return self.loss_fn(functional_call(self.model, ({**p, **self._frozen}, self._buffers), (inputs,)), targets)

        g = grad(batch_loss)(params)
        return [g[n] for n in self.names]

    def norms(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-sample gradient norms ``||g_j||`` (float64, shape (n,); non-finite for non-finite gradients)."""
        return self._clipped_sums(params, inputs, targets, None)[0]

    def _clipped_sums(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor, clip: float | None
                      ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Per-sample norms and (``clip`` not None) ``sum_j g_j min(1, B kappa / ||g_j||)`` per parameter, float64.

        Samples go :data:`PASS_ROWS` at a time through :meth:`_pass` (the samples are independent,
        so the split changes nothing but the memory of the recorded activations).
        """
        key = self._probe(params, inputs, targets)
        total = {k: torch.zeros(s, dtype=torch.float64) for k, s in zip(self.names, self.shapes)}
        norms = [self._pass(params, inputs[lo:lo + PASS_ROWS], targets[lo:lo + PASS_ROWS], clip, total, key)
                 for lo in range(0, inputs.shape[0], PASS_ROWS)]
        return torch.cat(norms), [total[k] for k in self.names]

    def _probe(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor) -> tuple:
        """Move every parameter to ``vmap`` if the batched pass does not give each row's own gradient (once per shape).

        Book-keeping is right only for row-separable networks (docs/privacy.md, "Networks"). On
        :func:`~privfedstat.deep.ghost.probe_batch`'s synthetic rows (public, no data) the book-keeping
        norms and their sum are compared with ``vmap`` over single rows, relative to the largest norm
        (non-finite rows must match and are left out); a gap above ``eps^(1/4)`` of the dtype (2e-2 in
        float32, 1e-4 in float64: far above the rounding of a pass, about 1e-4 in float32 on ResNet20,
        far below a row's share 1/3 of a statistic of three rows), or no finite gradient, sends every
        parameter to ``vmap`` with a warning. The pass also records each layer call's trailing input
        shape, which later passes must repeat (:meth:`_reshaped`). Returns the input shape's key.
        """
        key = (tuple(inputs.shape[1:]), inputs.dtype, tuple(targets.shape[1:]), targets.dtype)
        if not self._layers or key in self._shapes:
            return key
        X, Y = probe_batch(self.model, inputs, targets)
        total = {k: torch.zeros(s, dtype=torch.float64) for k, s in zip(self.names, self.shapes)}
        try:  # the largest finite bound: every finite gradient unclipped, the others dropped
            norms = self._pass(params, X, Y, torch.finfo(torch.float64).max, total, key)
            alone = {k: v.detach() for k, v in self._grad(params, {}, X, Y).items()}
        except (RuntimeError, IndexError, ValueError) as err:
            self._to_vmap(f"the probe on synthetic rows failed ({type(err).__name__}: {err})")
            return key
        want = sample_norms([alone[k] for k in self.names])
        finite = torch.isfinite(want)
        if not bool(finite.any()):
            self._to_vmap("the probe's per-sample gradients on synthetic rows are not finite")
            return key
        scale, w = max(float(want[finite].max()), torch.finfo(torch.float64).tiny), finite.to(torch.float64)
        diff = np.concatenate([(total[k] - torch.tensordot(w, torch.nan_to_num(alone[k].to(torch.float64)), dims=1))
                               .detach().cpu().numpy().ravel() for k in self.names])  # batched sum - sum of singles
        gap = max(float((norms - want)[finite].abs().max()), float(row_norms(diff[None])[0])) / scale
        if not (gap <= torch.finfo(next(iter(params.values())).dtype).eps ** 0.25 and torch.equal(
                finite, torch.isfinite(norms))):  # NaN included
            suspects = batch_layout_modules(self.model)
            self._to_vmap(f"per-sample gradients from the batched pass differ from each row's own by {gap:.2g} "
                          f"relative on {X.shape[0]} synthetic rows: the network mixes the rows of a batch"
                          + (f" (batch_first=False in {suspects}: set batch_first=True)" if suspects else ""))
        return key

    def _reshaped(self, calls: dict[str, list[Call]], key: tuple) -> set[str]:
        """The layers whose inputs' trailing shapes differ from those of the probe's pass (the first to get here)."""
        seen = {name: [c.shape for c in each] for name, each in calls.items()}
        probed = self._shapes.setdefault(key, seen)
        return {name for name in seen if probed.get(name) != seen[name]}

    def _to_vmap(self, why: str) -> None:
        """Take every parameter's per-sample gradient from ``vmap`` over single rows from now on, and say why."""
        self._layers = {}
        warn(f"{why}. Every per-sample gradient now comes from the network applied to each row alone "
             "(torch.func.vmap: exact, slower); note that the batched outputs (predictions) are not what "
             "each row's loss sees.", UserWarning)

    def _pass(self, params: dict, inputs: torch.Tensor, targets: torch.Tensor, clip: float | None,
              total: dict[str, torch.Tensor], key: tuple) -> torch.Tensor:
        """The per-sample norms of a batch, adding its clipped terms to ``total`` (``clip`` not None).

        The book-keeping layers (:mod:`privfedstat.deep.ghost`) are traced in one batched forward
        and backward pass, which forms their per-sample gradients as their output gradients arrive
        (factored Linear layers and Embeddings are kept as inputs and output gradients); then, a
        chunk of samples at a time (:data:`CHUNK_ELEMENTS` bounds the entries converted to float64
        at once), those, the kept layers' (:func:`~privfedstat.deep.ghost.layer_pieces`) and the
        other parameters' (``vmap``) give the joint norms, the factors and the float64 terms. A
        layer that broke a rule during the pass, or whose inputs' trailing shapes differ from those
        of the probe's pass (``key``: the input shape's, :meth:`_probe`), moves to ``vmap`` for good,
        and the pass is redone.
        """
        trainable = set(self.names)
        while True:
            layers = self._layers
            ghost = set(covered(layers, trainable))
            fixed = {k: params[k].detach() for k in self.names if k in ghost}
            rest = {k: params[k] for k in self.names if k not in ghost}
            calls: dict[str, list[Call]] = {}
            formed: dict[str, torch.Tensor] = {}
            if layers:
                with torch.enable_grad():
                    rec = trace(self.model, layers, fixed, {k: v.detach() for k, v in rest.items()}, self._buffers,
                                inputs, targets, self._sample_loss)
                misused = rec.misused or self._reshaped(rec.calls, key)
                if misused:
                    self._layers = {k: m for k, m in layers.items() if k not in misused}
                    continue
                calls, formed = rec.calls, rec.formed
            break
        width = sum(p.numel() for p in rest.values()) + sum(t[0].numel() for t in formed.values())
        step = max(1, CHUNK_ELEMENTS // max(width, 1))
        norms = []
        with torch.no_grad():
            for lo in range(0, inputs.shape[0], step):
                hi = min(inputs.shape[0], lo + step)
                dense = {k: t[lo:hi] for k, t in formed.items()}
                outers, rows = [], []
                for name, m in layers.items():
                    if kept(m, calls[name]):
                        o, e = layer_pieces(m, name, trainable, calls[name], lo, hi)
                        outers += o
                        rows += e
                if rest:
                    dense.update(self._grad(rest, fixed, inputs[lo:hi], targets[lo:hi]))
                chunk = _joint_norms(list(dense.values()), outers, rows, hi - lo)
                norms.append(chunk)
                if clip is not None:
                    _add_terms(total, dense, outers, rows, chunk, clip)
        return torch.cat(norms)


def _vector_norms(t: torch.Tensor) -> torch.Tensor:
    """Row norms of ``t`` (r, ...) in float64: float32 entries squared and summed in float64 (no overflow or
    underflow possible, relative error about ``k 2^-53`` for k entries), float64 ones by :func:`sample_norms`."""
    if t.dtype == torch.float32:
        return torch.linalg.vector_norm(t.reshape(t.shape[0], -1), dim=1, dtype=torch.float64)
    return sample_norms([t])


def _segment_norms(rows: Rows, r: int) -> torch.Tensor:
    """Each sample's norm over its rows of an Embedding gradient (scaled by the sample's largest row norm)."""
    each = sample_norms([rows.rows]) if rows.rows.shape[0] else torch.zeros(0, dtype=torch.float64)
    finite = torch.isfinite(each)
    bad = torch.zeros(r, dtype=torch.float64).index_add_(0, rows.sample, (~finite).to(torch.float64)) > 0
    each = torch.where(finite, each, torch.zeros((), dtype=torch.float64))
    top = torch.zeros(r, dtype=torch.float64).scatter_reduce_(0, rows.sample, each, "amax")
    scale = torch.where(top > 0, top, torch.ones((), dtype=torch.float64))
    squares = torch.zeros(r, dtype=torch.float64).index_add_(0, rows.sample, (each / scale[rows.sample]) ** 2)
    return torch.where(bad, torch.full((), math.nan, dtype=torch.float64), top * torch.sqrt(squares))


def _joint_norms(dense: list[torch.Tensor], outers: list[Outer], rows: list[Rows], r: int) -> torch.Tensor:
    """``||g_j||`` over all parameters from the parts' norms: formed gradients (:func:`sample_norms`, jointly),
    factored Linear ones (``||g_j|| ||a_j||`` and ``||g_j||``) and Embedding rows, combined as
    ``m sqrt(sum (norm / m)^2)`` with ``m`` the largest part (no overflow; non-finite parts give a non-finite norm).
    """
    parts = [sample_norms(dense)] if dense else []
    for o in outers:
        g = _vector_norms(o.g)
        parts += ([g * _vector_norms(o.a)] if o.weight else []) + ([g] if o.bias else [])
    parts += [_segment_norms(e, r) for e in rows]
    if len(parts) == 1:
        return parts[0]
    stacked = torch.stack(parts)
    finite = torch.isfinite(stacked)
    clean = torch.where(finite, stacked, torch.zeros((), dtype=torch.float64))
    top = clean.amax(dim=0)
    scale = torch.where(top > 0, top, torch.ones((), dtype=torch.float64))
    joint = top * torch.sqrt(((clean / scale) ** 2).sum(dim=0))
    return torch.where(finite.all(dim=0), joint, stacked.sum(dim=0))


def _add_terms(total: dict[str, torch.Tensor], dense: dict[str, torch.Tensor], outers: list[Outer], rows: list[Rows],
               norms: torch.Tensor, clip: float) -> None:
    """Add ``sum_j g_j min(1, B kappa / ||g_j||)`` over a chunk's samples to ``total``, in float64 (a sample with a
    non-finite norm contributes 0 when B is finite)."""
    factors = clip_factors(norms, clip, torch.float64)
    finite = torch.isfinite(norms)
    drop = math.isfinite(clip) and not bool(finite.all())
    zero = torch.zeros((), dtype=torch.float64)

    def clean(t: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        t = t.to(torch.float64)
        return torch.where(keep.view((-1,) + (1,) * (t.dim() - 1)), t, zero) if drop else t

    for name, g in dense.items():
        total[name] += torch.tensordot(factors, clean(g, finite), dims=1)
    for o in outers:
        scaled = clean(o.g, finite) * factors[:, None]
        if o.weight:
            total[o.weight] += scaled.T @ clean(o.a, finite)
        if o.bias:
            total[o.bias] += scaled.sum(dim=0)
    for e in rows:
        keep = finite[e.sample]
        total[e.name].index_add_(0, e.index, clean(e.rows, keep) * factors[e.sample, None])


def sample_norms(grads: list[torch.Tensor]) -> torch.Tensor:
    """L2 norm of each sample's gradient over all parameters jointly, in float64, without overflow or harmful underflow.

    Fast path: each parameter's squares are summed in float64 (float32 gradients in blocks of
    :data:`_BLOCK` entries, each block's norm computed in float32 with relative error at most
    about ``9 u`` whatever the summation order, ``u = 2^-24``; float64 ones directly). A row whose
    sum of squares falls outside :data:`_SAFE` (an entry so large that a square overflowed, or
    every entry so small that the squares lost accuracy, or a non-finite entry) is recomputed
    with every entry divided by the row's largest absolute entry ``a_j`` (exact), so that
    ``||g_j|| = a_j sqrt(sum_k (g_jk / a_j)^2)`` with every term at most 1. A sample with a
    non-finite entry gets a non-finite norm; an all-zero gradient gets 0.

    Parameters
    ----------
    grads : list of torch.Tensor, each of shape (n, ...)
        Per-sample gradients of each parameter (float32 or float64).

    Returns
    -------
    torch.Tensor of shape (n,), float64
    """
    flat = [g.reshape(g.shape[0], -1) for g in grads if g.numel()]
    squares = sum(_row_squares(f) for f in flat)
    low, high = _SAFE[flat[0].dtype]
    redo = ~((squares >= low) & (squares <= high))
    norms = torch.sqrt(squares)
    if bool(redo.any()):
        norms[redo] = _rescaled_norms([f[redo] for f in flat])
    return norms


def _row_squares(f: torch.Tensor) -> torch.Tensor:
    """Sum of squares of each row of ``f`` (n, k) in float64 (float32 rows in blocks of ``_BLOCK`` when k allows)."""
    if f.dtype == torch.float32 and f.shape[1] % _BLOCK == 0:
        blocks = torch.linalg.vector_norm(f.reshape(f.shape[0], -1, _BLOCK), dim=2)
        return blocks.to(torch.float64).square().sum(dim=1)
    return torch.linalg.vector_norm(f, dim=1, dtype=torch.float64).square()


def _rescaled_norms(flat: list[torch.Tensor]) -> torch.Tensor:
    """Row norms ``a_j sqrt(sum_k (g_jk / a_j)^2)``, ``a_j`` the row's largest absolute entry (no overflow, no underflow)."""
    scale = torch.stack([torch.linalg.vector_norm(f, ord=math.inf, dim=1) for f in flat]).amax(dim=0)
    safe = torch.where((scale > 0) & torch.isfinite(scale), scale, torch.ones((), dtype=scale.dtype))
    squares = sum(torch.linalg.vector_norm(f / safe[:, None], dim=1, dtype=torch.float64) ** 2 for f in flat)
    return scale.to(torch.float64) * torch.sqrt(squares)


def clip_factors(norms: torch.Tensor, clip: float, dtype: torch.dtype) -> torch.Tensor:
    """``min(1, B kappa / ||g_j||)`` in ``dtype``: 1 for a zero gradient; 0 for a non-finite one or for one so large
    that its factor would be subnormal in ``dtype``; all 1 with ``B = inf``.

    ``kappa = CLIP_SAFETY`` (see the module docstring for why ``1 - 2^-20``). A factor below the
    dtype's smallest normal number (``||g_j|| > B kappa / tiny``: about ``8e37 B`` in float32)
    would carry only a few significant bits, and rounding could lift the term far above B; such
    a gradient contributes 0, as a non-finite one does. Every other factor is a normal number,
    rounded once (relative error at most the dtype's unit roundoff).

    Raises
    ------
    ValueError
        If ``clip < MIN_CLIP`` (float32's absolute rounding of subnormal products would no longer fit
        in the margin).
    """
    if math.isinf(clip):
        return torch.ones(norms.shape, dtype=dtype)
    if not clip >= MIN_CLIP:
        raise ValueError(f"the clipping bound must be at least {MIN_CLIP:g}, got {clip!r}.")
    exact = torch.clamp(clip * CLIP_SAFETY / torch.clamp(norms, min=torch.finfo(torch.float64).tiny), max=1.0)
    usable = torch.isfinite(norms) & (exact >= torch.finfo(dtype).tiny)
    return torch.where(usable, exact, torch.zeros((), dtype=torch.float64)).to(dtype)


def per_sample_clipped_mean(model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor,
                            clip: float, *, flat: bool = True) -> torch.Tensor | dict[str, torch.Tensor]:
    """Mean over a batch of the per-sample gradients, each clipped to L2 norm ``clip`` (B) over all parameters jointly.

    ``(1/n) sum_j g_j min(1, B kappa / ||g_j||)`` with ``g_j`` the gradient of
    ``loss_fn(model(x_j), y_j)`` at the model's current parameters, in the model's dtype (by
    book-keeping for Linear, convolution, GroupNorm/LayerNorm and Embedding layers, by
    ``torch.func`` ``vmap`` of ``grad`` for the other parameters), scaled and summed in float64;
    ``kappa = 1 - 2^-20`` keeps every clipped term's norm, and the mean's, ``<= B`` after
    rounding, and a non-finite per-sample gradient
    contributes 0 (see :mod:`privfedstat.deep.per_sample`). Its L2 sensitivity to one row replaced
    is ``2B / n`` (Lemma 3.1 of the core paper), whatever the model.

    Parameters
    ----------
    model : torch.nn.Module
        Without batch-dependent or random layers in training mode (:func:`check_model`); not changed.
    loss_fn : callable
        ``loss_fn(outputs, targets)`` -> mean loss of a batch (e.g. ``torch.nn.functional.cross_entropy``),
        called on batches of one sample.
    inputs : torch.Tensor of shape (n, ...)
        In the model's dtype.
    targets : torch.Tensor of shape (n, ...)
    clip : float
        B > 0; ``inf`` for no clipping (the plain mean gradient).
    flat : bool, default True
        Return one flat tensor of the P trainable parameters (``model.named_parameters()`` order),
        else a dict from parameter name to a tensor of the parameter's shape.

    Returns
    -------
    torch.Tensor of shape (P,) or dict of str to torch.Tensor
        float64 (the terms are scaled and summed in float64 whatever the model's dtype).
    """
    if not (isinstance(clip, (int, float)) and clip > 0):
        raise ValueError(f"clip must be a positive number (inf for no clipping), got {clip!r}.")
    if inputs.shape[0] == 0 or inputs.shape[0] != targets.shape[0]:
        raise ValueError(f"inputs and targets need the same positive number of rows, got {inputs.shape[0]} and "
                         f"{targets.shape[0]}.")
    psg = PerSampleGradients(model, loss_fn)
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    with torch.no_grad():
        mean = psg.clipped_mean(params, inputs, targets, float(clip))
    if flat:
        return torch.cat([t.reshape(-1) for t in mean])
    return dict(zip(psg.names, mean))
