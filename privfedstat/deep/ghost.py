"""Per-sample gradients of common layers from their inputs and output gradients (book-keeping), without ``vmap``.

A layer ``z = f(a; W)`` applied to a batch gives, after one ordinary backward pass of the summed
per-sample losses ``sum_j rho_j``, the output gradients ``g_j = d rho_j / d z_j`` (sample j's loss
depends on sample j's rows only). Its per-sample parameter gradient is then a small product of
``a_j`` and ``g_j`` (Bu et al. 2023, "book-keeping"; the ghost norm of Goodfellow 2015 and Li et
al. 2022 for the rank-one case):

* :class:`~torch.nn.Linear` on one vector per sample: ``grad_W = g_j a_j^T`` (rank one: its norm
  is ``||g_j|| ||a_j||`` and its clipped sum ``sum_j c_j g_j a_j^T`` one matrix product; nothing
  of size ``n x P`` is formed, see :class:`Outer`); on a sequence (or called more than once):
  ``sum_t g_jt a_jt^T``, formed per sample;
* :class:`~torch.nn.Conv1d` / ``Conv2d`` / ``Conv3d`` (zero padding, any stride, dilation and
  groups): ``grad_W`` is the weight gradient of the convolution of ``a_j`` alone, formed for a
  block of samples at once as one grouped convolution (the samples as groups);
* :class:`~torch.nn.GroupNorm` / :class:`~torch.nn.LayerNorm` (affine): ``grad_gamma = sum g_j *
  xhat_j`` and ``grad_beta = sum g_j`` over the positions, ``xhat_j`` the normalised input
  (per-sample statistics, so exact);
* :class:`~torch.nn.Embedding`: ``grad_W`` has one row per distinct index of the sample, the sum
  of the output gradients at that index (:class:`Rows`: formed from the index counts, never as a
  dense vocabulary-sized matrix).

Forming a convolution's per-sample gradients costs about what its weight gradient costs in an
ordinary backward pass (the Gram form ``sum_{t,s} (U U^T)_{ts} (g g^T)_{ts}`` over the unfolded
input ``U`` costs ``L^2 (D + C_out)`` against ``L D C_out`` per sample, ``L`` the positions, ``D``
the patch size: more for every convolution of the paper's CNNs and of ResNet20); the norm and
the clipped term are then taken from the same computed vector, so the float argument of
:mod:`privfedstat.deep.per_sample` holds unchanged.

Which layers qualify (:func:`ghost_layers`): modules of exactly these classes (not subclasses,
whose forward may differ) with at least one trainable parameter, none shared with another module.
What the forward pass must respect, checked on every pass (:func:`trace`, a module that breaks it
is reported in :attr:`Trace.misused` and its parameters go to the ``vmap`` path):

* the layer's parameters are used only inside its own forward call (a ``TorchFunctionMode`` sees
  every torch call of the forward pass: a parent that reads ``self.fc.weight`` into ``F.linear``,
  or its values through a property such as ``self.embed.weight.T``, is caught);
* its input and output have the samples along dimension 0 (size n; an input without a batch
  dimension is refused), and its input is not changed in place after the call (the tensor's
  version counter);
* the loss depends on its output through the recorded graph (its output gradient arrives), and
  it carries no hooks of its own (a hook could change its output or gradients).

Checked once per input shape, by a probe (:meth:`~privfedstat.deep.per_sample.PerSampleGradients`
compares this path with ``vmap`` over single rows on :func:`probe_batch`'s synthetic rows): that
the network's outputs are row-separable (a batch statistic or a ``batch_first=False`` attention
layer mixes the rows; the probe then moves every parameter to ``vmap``), and the trailing shape
(all but dimension 0) of each call's input, which every later pass must repeat: a layer whose
input's first dimension is not the samples' but happens to have size n (a (positions, n, d)
layout with n positions) has a trailing shape that follows n, so it is caught at any n other
than the probe's (which avoids the inputs' own sizes).

The output gradients come from tensor hooks, which receive the gradient of the output as it was
when the layer returned (an in-place ReLU afterwards does not alter it). The hooks form the
per-sample gradients of convolutions, normalisation layers and Linear layers on sequences as the
backward pass reaches them and drop the layer's input then, so that the pass holds no more
activations than an ordinary backward pass (keeping every input and output gradient to the end
made a private step on ResNet20 about 15% slower: more freshly mapped memory); factored Linear
layers and Embeddings keep theirs (:func:`kept`), which are small.

References
----------
Bu, Z., Wang, Y.-X., Zha, S. and Karypis, G. (2023). Differentially private optimization on large
model at small cost. ICML.
Li, X., Tramer, F., Liang, P. and Hashimoto, T. (2022). Large language models can be strong
differentially private learners. ICLR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

__all__ = ["ghost_layers", "trace", "Trace", "Call", "Outer", "Rows", "layer_pieces", "covered",
           "kept", "probe_batch", "batch_layout_modules", "PROBE_ROWS"]

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORM = (nn.GroupNorm, nn.LayerNorm)
_LAYERS = (nn.Linear, *_CONV, *_NORM, nn.Embedding)
#: samples per grouped convolution that forms per-sample convolution gradients (:func:`_conv_weight`; blocks of
#: 8-32 samples ran 2-10x faster than unfolding the input and multiplying, on the paper's CNN and on ResNet20)
GROUP_ROWS = 16
#: least rows of the synthetic batch on which the book-keeping path is compared with each row alone (:func:`probe_batch`)
PROBE_ROWS = 3
#: tensor functions that read a parameter's metadata only (a parent may call them on a layer's weight); a property
#: (``__get__``) only when it returns no tensor (``.shape``, ``.dtype``; not ``.T``)
_METADATA = frozenset({"__get__", "size", "dim", "numel"})


def _full(prefix: str, local: str) -> str:
    """A parameter's name in ``model.named_parameters()`` from its module's name and its own."""
    return f"{prefix}.{local}" if prefix else local


def _qualifies(module: nn.Module) -> bool:
    """Whether the layer's forward is one of the rules' (exact class, options the rule covers)."""
    if type(module) not in _LAYERS or _hooked(module):
        return False
    if isinstance(module, _CONV):
        return module.padding_mode == "zeros" and not isinstance(module.padding, str)
    if isinstance(module, nn.Embedding):
        return module.max_norm is None and not module.scale_grad_by_freq
    if isinstance(module, _NORM):
        return bool(module.elementwise_affine if isinstance(module, nn.LayerNorm) else module.affine)
    return True


def _hooked(module: nn.Module) -> bool:
    """Whether the module carries forward or backward hooks of its own."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def _batched(module: nn.Module, a: torch.Tensor) -> bool:
    """Whether the layer's input has a batch dimension in front (an unbatched call would group the rows wrongly)."""
    if isinstance(module, _CONV):
        return a.dim() == module.weight.dim()
    if isinstance(module, nn.LayerNorm):
        return a.dim() > len(module.normalized_shape)
    return a.dim() >= (1 if isinstance(module, nn.Embedding) else 2)


def ghost_layers(model: nn.Module, trainable: set[str]) -> dict[str, nn.Module]:
    """The layers whose per-sample gradients come by book-keeping, by module name.

    A layer qualifies when it is of one of the supported classes exactly, has a parameter among
    ``trainable`` (full names, ``model.named_parameters()``), and none of its parameters belongs
    to another module too (a tied weight's per-sample gradient sums both uses).
    """
    owners: dict[int, int] = {}
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None:
                owners[id(p)] = owners.get(id(p), 0) + 1
    out = {}
    for name, module in model.named_modules():
        own = [(_full(name, k), p) for k, p in module._parameters.items() if p is not None]
        if (_qualifies(module) and any(full in trainable for full, _ in own)
                and all(owners[id(p)] == 1 for _, p in own)):
            out[name] = module
    return out


def probe_batch(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic rows shaped like ``inputs`` and ``targets`` (public: a fixed seed, no data): :data:`PROBE_ROWS` of
    them, or the next count that is none of their other sizes (so that no layout can take the rows for another axis).

    Floating inputs are standard normal, floating targets uniform on [0, 1) (valid for squared
    error and binary cross-entropy alike); integer inputs lie below the smallest Embedding's size
    (2 without one), integer targets in {0, 1} (class indices any classifier takes).
    """
    g = torch.Generator().manual_seed(0)
    vocab = min((m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)), default=2)
    k = next(k for k in range(PROBE_ROWS, PROBE_ROWS + inputs.dim() + targets.dim())
             if k not in (*inputs.shape[1:], *targets.shape[1:]))

    def draw(like: torch.Tensor, target: bool) -> torch.Tensor:
        shape = (k, *like.shape[1:])
        if like.is_floating_point() or like.is_complex():
            return (torch.rand if target else torch.randn)(shape, generator=g, dtype=like.dtype)
        return torch.randint(0, 2 if target else vocab, shape, generator=g).to(like.dtype)

    return draw(inputs, False), draw(targets, True)


def batch_layout_modules(model: nn.Module) -> list[str]:
    """The modules that read dimension 1 as the batch (``batch_first=False``: attention, transformer and recurrent
    layers; a transformer's are its attention layers): given rows along dimension 0 they mix the samples of a batch
    (the usual cause of a failed probe)."""
    return [name or type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, (nn.MultiheadAttention, nn.RNNBase)) and not m.batch_first]


@dataclass
class Call:
    """One forward call of a layer: its input ``a`` (detached; dropped once used) and that input's version counter,
    whether ``a`` needed a gradient, the gradient ``g`` of the summed losses with respect to its output (kept layers
    only), whether the backward pass reached it (a call it did not reach makes the layer misused) and the input's
    trailing shape (all but dimension 0)."""

    a: torch.Tensor | None
    version: int
    first: bool
    g: torch.Tensor | None = None
    reached: bool = False
    shape: tuple[int, ...] = ()


@dataclass
class Trace:
    """What one forward and backward pass recorded: the calls of the layers kept for later (:func:`kept`), the
    per-sample gradients formed during the backward pass ``{name: (n, *shape)}`` (the other layers', summed over
    their calls), and the layers that broke the rules."""

    calls: dict[str, list[Call]] = field(default_factory=dict)
    misused: set[str] = field(default_factory=set)
    formed: dict[str, torch.Tensor] = field(default_factory=dict)
    losses: torch.Tensor | None = None


class _Guard(TorchFunctionMode):
    """Records the layers whose parameters a torch function receives outside the layer's own forward call."""

    def __init__(self, owner: dict[int, str]) -> None:
        super().__init__()
        self.owner = owner
        self.active: str | None = None
        self.misused: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        # a property read is metadata unless it returns a tensor: ``.T``, ``.mT``, ``.data`` read the values
        if name not in _METADATA or (name == "__get__" and isinstance(out, torch.Tensor)):
            for t in tree_leaves((args, kwargs)):
                if isinstance(t, torch.Tensor) and (m := self.owner.get(id(t))) is not None and m != self.active:
                    self.misused.add(m)
        return out


def trace(model: nn.Module, layers: dict[str, nn.Module], params: dict[str, torch.Tensor],
          fixed: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], inputs: torch.Tensor,
          targets: torch.Tensor, sample_loss: Callable) -> Trace:
    """Run the model on the batch with ``params`` (and ``fixed``: parameters held constant), record every call
    of ``layers``, and backpropagate ``sum_j rho_j`` to their outputs only.

    The layers' trainable parameters enter as fresh leaves requiring a gradient (so each layer's
    output carries one and can be hooked); the backward pass asks for the gradient of one
    parameter of each layer whose input needed none (its bias when trainable, a reduction of the
    output gradient), so that every hooked output is on the path and no other parameter gradient
    is computed. ``sample_loss(output, target)`` is the loss of one sample, ``vmap``-ed over the
    batch.
    """
    n = inputs.shape[0]
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    owner = {id(leaves[_full(name, k)]): name for name, m in layers.items() for k in m._parameters
             if _full(name, k) in leaves}
    rec = Trace(calls={name: [] for name in layers})
    guard = _Guard(owner)
    handles = []

    def enter(name: str):
        def pre(module, args):
            guard.active = name
        return pre

    def leave(name: str):
        def post(module, args, out):
            guard.active = None
            a = args[0] if args else None
            if (not isinstance(a, torch.Tensor) or not isinstance(out, torch.Tensor) or not _batched(module, a)
                    or a.shape[0] != n or out.shape[0] != n or not out.requires_grad):
                rec.misused.add(name)
                return None
            call = Call(a.detach(), a._version, not a.requires_grad, shape=tuple(a.shape[1:]))
            rec.calls[name].append(call)
            out.register_hook(lambda g: arrived(name, call, g))
            return None
        return post

    def arrived(name: str, call: Call, g: torch.Tensor) -> None:
        """Keep the gradient of a kept layer; form the others' per-sample gradients now and drop the input, so that
        the pass holds no more activations than an ordinary backward pass."""
        call.reached = True
        if call.a._version != call.version:  # changed in place after the call: not the input the layer saw
            rec.misused.add(name)
        elif kept(layers[name], rec.calls[name]):
            call.g = g
        else:
            with torch.no_grad():
                wanted = {k: _full(name, k) for k, p in layers[name]._parameters.items()
                          if p is not None and _full(name, k) in leaves}
                for k, t in _formed(layers[name], call.a, g, set(wanted)).items():
                    rec.formed[wanted[k]] = rec.formed[wanted[k]] + t if wanted[k] in rec.formed else t
            call.a = None

    rec.misused = {name for name, m in layers.items() if _hooked(m)}  # hooks added since ghost_layers
    if rec.misused:
        return rec
    for name, module in layers.items():
        handles += [module.register_forward_pre_hook(enter(name)), module.register_forward_hook(leave(name))]
    try:
        with guard:
            out = functional_call(model, ({**leaves, **fixed}, buffers), (inputs,))
    finally:
        for h in handles:
            h.remove()
    rec.misused |= guard.misused
    if not isinstance(out, torch.Tensor):
        rec.misused |= set(layers)
    if rec.misused:  # the pass is redone without these layers
        return rec
    rec.losses = vmap(sample_loss)(out, targets)
    anchors = []
    for name, calls in rec.calls.items():
        if any(c.first for c in calls):
            local = "bias" if _full(name, "bias") in leaves else "weight"
            anchors.append(leaves[_full(name, local)])
    if anchors:
        torch.autograd.grad(rec.losses.sum(), anchors, allow_unused=True)
    for name, calls in rec.calls.items():
        if not all(c.reached for c in calls):  # the loss does not depend on it, or through a graph the hook missed
            rec.misused.add(name)
    return rec


def kept(module: nn.Module, calls: list[Call]) -> bool:
    """Whether the layer's inputs and output gradients are kept for :func:`layer_pieces` (an Embedding; a Linear
    called once on vectors, whose gradient stays factored) rather than formed during the backward pass."""
    return isinstance(module, nn.Embedding) or (
        isinstance(module, nn.Linear) and len(calls) == 1 and calls[0].a is not None and calls[0].a.dim() == 2)


@dataclass
class Outer:
    """The per-sample gradients of a Linear layer on one vector per sample, kept factored: ``g_j a_j^T`` for
    ``weight`` and ``g_j`` for ``bias`` (either name None when that parameter is not trainable)."""

    weight: str | None
    bias: str | None
    a: torch.Tensor  # (r, d_in)
    g: torch.Tensor  # (r, d_out)


@dataclass
class Rows:
    """The per-sample gradients of an Embedding: sample ``sample[k]``'s gradient has row ``rows[k]`` (float64) at
    index ``index[k]`` of the weight, and zeros elsewhere; each (sample, index) pair appears once."""

    name: str
    sample: torch.Tensor  # (k,) int64, in 0..r-1
    index: torch.Tensor  # (k,) int64
    rows: torch.Tensor  # (k, d) float64


def covered(layers: dict[str, nn.Module], trainable: set[str]) -> list[str]:
    """The trainable parameters (full names) of ``layers``."""
    return [_full(name, k) for name, m in layers.items() for k in m._parameters if _full(name, k) in trainable]


def layer_pieces(module: nn.Module, prefix: str, trainable: set[str], calls: list[Call], lo: int, hi: int
                 ) -> tuple[list[Outer], list[Rows]]:
    """Per-sample gradients of a kept layer's (:func:`kept`) trainable parameters for samples ``lo:hi``: a factored
    Linear one (:class:`Outer`) or an Embedding's rows (:class:`Rows`, over all its calls)."""
    wanted = {k: _full(prefix, k) for k, p in module._parameters.items() if p is not None and _full(prefix, k) in trainable}
    if not calls:
        return [], []
    parts = [(c.a[lo:hi], c.g[lo:hi]) for c in calls]
    if isinstance(module, nn.Embedding):
        return [], [_embedding_rows(module, wanted["weight"], parts)]
    a, g = parts[0]
    return [Outer(wanted.get("weight"), wanted.get("bias"), a, g)], []


def _formed(module: nn.Module, a: torch.Tensor, g: torch.Tensor, wanted: set[str]) -> dict[str, torch.Tensor]:
    """One call's per-sample gradients ``{local name: (r, *shape)}`` of a Linear (sequence), conv or norm layer."""
    r = a.shape[0]
    out = {}
    if isinstance(module, nn.Linear):
        a3, g3 = a.reshape(r, -1, a.shape[-1]), g.reshape(r, -1, g.shape[-1])
        if "weight" in wanted:
            out["weight"] = torch.bmm(g3.transpose(1, 2), a3)
        if "bias" in wanted:
            out["bias"] = g3.sum(dim=1)
    elif isinstance(module, _CONV):
        if "weight" in wanted:
            out["weight"] = _conv_weight(module, a, g)
        if "bias" in wanted:
            out["bias"] = g.reshape(r, g.shape[1], -1).sum(dim=2)
    else:
        if isinstance(module, nn.GroupNorm):
            xhat = F.group_norm(a, module.num_groups, None, None, module.eps)
            dims = tuple(range(2, g.dim()))
        else:
            xhat = F.layer_norm(a, module.normalized_shape, None, None, module.eps)
            dims = tuple(range(1, g.dim() - len(module.normalized_shape)))
        if "weight" in wanted:
            out["weight"] = (g * xhat).sum(dim=dims) if dims else g * xhat
        if "bias" in wanted:
            out["bias"] = g.sum(dim=dims) if dims else g
    return out


def _conv_weight(module: nn.Conv1d | nn.Conv2d | nn.Conv3d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample weight gradients of a convolution: (r, C_out, C_in / groups, *kernel).

    Blocks of :data:`GROUP_ROWS` samples at a time as one convolution's weight gradient with the
    samples as groups (input ``(1, q C_in, ...)``, output gradient ``(1, q C_out, ...)``,
    ``q groups`` groups): the library's direct convolution kernels, without unfolding the input.
    """
    r, shape = a.shape[0], module.weight.shape
    out = torch.empty((r, *shape), dtype=g.dtype)
    for lo in range(0, r, GROUP_ROWS):
        q = min(GROUP_ROWS, r - lo)
        blocks = torch.ops.aten.convolution_backward(
            g[lo:lo + q].reshape(1, q * shape[0], *g.shape[2:]), a[lo:lo + q].reshape(1, -1, *a.shape[2:]),
            module.weight.new_empty(()).expand(q * shape[0], *shape[1:]),  # read for its shape only
            None, module.stride, module.padding, module.dilation, False, [0] * len(module.stride), q * module.groups,
            (False, True, False))[1]
        out[lo:lo + q] = blocks.view(q, *shape)
    return out


def _embedding_rows(module: nn.Embedding, name: str, parts: list[tuple[torch.Tensor, torch.Tensor]]) -> Rows:
    """Sum the output gradients of each sample at each distinct index (float64), padding_idx excluded."""
    vocab, d = module.num_embeddings, module.embedding_dim
    keys, values = [], []
    for idx, g in parts:
        r = idx.shape[0]
        idx = idx.reshape(r, -1)
        sample = torch.arange(r).repeat_interleave(idx.shape[1])
        key, val = sample * vocab + idx.reshape(-1), g.reshape(-1, d)
        if module.padding_idx is not None:
            keep = idx.reshape(-1) != module.padding_idx
            key, val = key[keep], val[keep]
        keys.append(key)
        values.append(val)
    unique, inverse = torch.unique(torch.cat(keys), return_inverse=True)
    rows = torch.zeros(unique.shape[0], d, dtype=torch.float64).index_add_(0, inverse, torch.cat(values).double())
    return Rows(name, unique // vocab, unique % vocab, rows)
