"""Book-keeping per-sample gradients (privfedstat.deep.ghost) against a naive per-example autograd loop.

The clipped mean and the per-sample norms of the automatic path (book-keeping layers + vmap for the
rest) equal the per-sample reference on the paper's CNNs, ResNet20 with GroupNorm, an Embedding +
LayerNorm model, models with layers that have no rule (mixed path) and models that break a rule
(the layer moves to vmap); every clipped term keeps norm <= B.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat.deep import per_sample_clipped_mean  # noqa: E402
from privfedstat.deep.models import DigitsCNN, MnistCNN, ResNet20  # noqa: E402
from privfedstat.deep.per_sample import CLIP_SAFETY, PerSampleGradients  # noqa: E402

torch.set_num_threads(1)


def naive(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample gradients from one autograd backward per example: (n, P), float64, named_parameters order."""
    rows = []
    for j in range(X.shape[0]):
        model.zero_grad()
        F.nll_loss(model(X[j:j + 1]), y[j:j + 1]).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad]).to(torch.float64))
    model.zero_grad()
    return torch.stack(rows)


def reference(model, X, y, clip):
    grads = naive(model, X, y)
    norms = torch.linalg.vector_norm(grads, dim=1)
    factors = torch.clamp(clip * CLIP_SAFETY / norms, max=1.0)
    return (factors[:, None] * grads).mean(dim=0), norms


def ours(model, X, y, clip):
    psg = PerSampleGradients(model, F.nll_loss)
    params = {k: p.detach() for k, p in model.named_parameters()}
    mean = torch.cat([t.reshape(-1) for t in psg.clipped_mean(params, X, y, clip)])
    return mean, psg.norms(params, X, y), psg


class EmbeddingModel(nn.Module):
    """Tokens -> Embedding (with padding index) -> LayerNorm -> Linear on every position -> Linear head."""

    def __init__(self, vocab=20, d=8, length=5, classes=3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.norm = nn.LayerNorm(d)
        self.mix = nn.Linear(d, 6)
        self.head = nn.Linear(6 * length, classes)

    def forward(self, x):
        return F.log_softmax(self.head(torch.tanh(self.mix(self.norm(self.embed(x)))).flatten(1)), dim=-1)


class MixedModel(nn.Module):
    """A conv, a PReLU and a bare scalar parameter (no rule: vmap) and a Linear head (book-keeping)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.act = nn.PReLU(4)
        self.fc = nn.Linear(4 * 6 * 6, 3)
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return F.log_softmax(self.scale * self.fc(self.act(self.conv(x)).flatten(1)), dim=-1)


class MisusedModel(nn.Module):
    """The parent reads ``fc.weight`` outside fc's forward: fc's per-sample gradient is not ``g a^T`` alone."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 4)
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.fc(x)) + 0.1 * F.linear(x, self.fc.weight).sum(-1, keepdim=True)
        return F.log_softmax(self.out(h), dim=-1)


class ReusedModel(nn.Module):
    """One Linear applied twice, a sequence Linear, a grouped dilated Conv1d and an in-place ReLU after a conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, stride=2, dilation=2, groups=2)
        self.act = nn.ReLU(inplace=True)
        self.seq = nn.Linear(6, 5)
        self.twice = nn.Linear(5, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        h = self.seq(self.act(self.conv(x)).transpose(1, 2)).mean(dim=1)  # (n, 5) from (n, positions, 5)
        return F.log_softmax(self.head(self.twice(torch.tanh(self.twice(h)))), dim=-1)


class VolumeModel(nn.Module):
    """A strided Conv3d with bias, GroupNorm on volumes, a Linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 3, stride=(1, 2, 2), padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.head = nn.Linear(4 * 4 * 2 * 2, 3)

    def forward(self, x):  # x: (n, 2, 4, 4, 4)
        return F.log_softmax(self.head(torch.tanh(self.norm(self.conv(x))).flatten(1)), dim=-1)


class TimeMajorModel(nn.Module):
    """A Linear applied to a (positions, n, d) layout: its input's first dimension is not the samples'."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x):  # x: (n, 3, 4)
        h = self.fc(x.transpose(0, 1)).sum(dim=0)
        return F.log_softmax(self.head(h), dim=-1)


def seeded(cls, dtype, seed=0):
    torch.manual_seed(seed)
    return cls().to(dtype)


def images(n, shape, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *shape, generator=g, dtype=dtype), torch.randint(0, 3, (n,), generator=g)


CASES = {
    "digits": (DigitsCNN, (1, 8, 8)),
    "mnist": (MnistCNN, (1, 28, 28)),
    "resnet20-groupnorm": (ResNet20, (3, 32, 32)),
    "mixed": (MixedModel, (1, 8, 8)),
    "reused": (ReusedModel, (4, 17)),
    "volume": (VolumeModel, (2, 4, 4, 4)),
}


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_clipped_mean_and_norms_equal_the_per_sample_reference(case, dtype, rtol):
    cls, shape = CASES[case]
    model = seeded(cls, dtype)
    X, y = images(6, shape, dtype)
    norms_ref = reference(model, X, y, math.inf)[1]
    clip = float(torch.quantile(norms_ref, 0.5))  # about half of the samples clipped
    want, norms_ref = reference(model, X, y, clip)
    got, norms, psg = ours(model, X, y, clip)
    atol = rtol * float(want.abs().max())
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(norms.numpy(), norms_ref.numpy(), rtol=rtol)
    assert psg._layers, "the layers with a rule go through book-keeping"


def test_layers_with_and_without_a_rule_are_told_apart():
    assert set(PerSampleGradients(MixedModel(), F.nll_loss)._layers) == {"conv", "fc"}  # PReLU, scale: vmap
    assert set(PerSampleGradients(seeded(ResNet20, torch.float32), F.nll_loss)._layers) >= {
        "features.0", "features.1", "features.3.norm1", "head"}
    tied = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.LogSoftmax(dim=1))
    tied[2].weight = tied[0].weight
    assert set(PerSampleGradients(tied, F.nll_loss)._layers) == set()  # a shared weight sums both uses
    frozen = nn.Sequential(nn.Linear(4, 4), nn.LogSoftmax(dim=1))
    frozen[0].bias.requires_grad_(False)
    X, y = torch.randn(5, 4), torch.randint(0, 4, (5,))
    want = reference(frozen, X, y, 0.1)[0]  # the weight only
    np.testing.assert_allclose(per_sample_clipped_mean(frozen, F.nll_loss, X, y, 0.1).numpy(), want.numpy(), rtol=1e-5)


def test_embedding_and_layer_norm():
    for dtype, rtol in [(torch.float64, 1e-10), (torch.float32, 1e-4)]:
        model = seeded(EmbeddingModel, dtype)
        g = torch.Generator().manual_seed(2)
        X = torch.randint(0, 20, (8, 5), generator=g)
        X[0, :3] = 0  # padding index
        X[1, 1] = X[1, 3]  # one index twice in a sample: its rows add up before the norm
        y = torch.randint(0, 3, (8,), generator=g)
        want, norms_ref = reference(model, X, y, 0.05)
        got, norms, psg = ours(model, X, y, 0.05)
        assert set(psg._layers) == {"embed", "norm", "mix", "head"}
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=rtol * float(want.abs().max()))
        np.testing.assert_allclose(norms.numpy(), norms_ref.numpy(), rtol=rtol)


@pytest.mark.parametrize("cls, moved", [(MisusedModel, {"fc"}), (TimeMajorModel, {"fc"})])
def test_a_layer_that_breaks_a_rule_moves_to_vmap_and_the_mean_stays_exact(cls, moved):
    model = seeded(cls, torch.float64)
    X = torch.randn(7, 10, dtype=torch.float64) if cls is MisusedModel else torch.randn(7, 3, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (7,))
    psg = PerSampleGradients(model, F.nll_loss)
    assert moved <= set(psg._layers)
    want, norms_ref = reference(model, X, y, 0.2)
    got, norms, psg = ours(model, X, y, 0.2)
    assert not moved & set(psg._layers) and psg._layers  # moved to vmap; the others stay
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(norms.numpy(), norms_ref.numpy(), rtol=1e-10)


class UnusedModel(nn.Module):
    """A Linear whose output the loss does not use (no output gradient arrives): its gradient is 0."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.spare = nn.Linear(4, 2)

    def forward(self, x):
        self.spare(x)
        return F.log_softmax(self.fc(x), dim=-1)


def test_unused_and_hooked_layers_move_to_vmap():
    model = seeded(UnusedModel, torch.float64)
    X, y = torch.randn(5, 4, dtype=torch.float64), torch.randint(0, 3, (5,))
    want = reference_with_unused(model, X, y, 0.3)
    got, _, psg = ours(model, X, y, 0.3)
    assert set(psg._layers) == {"fc"}
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-14)

    doubled = seeded(MisusedModel, torch.float64)
    psg = PerSampleGradients(doubled, F.nll_loss)
    doubled.out.register_forward_hook(lambda module, args, out: 2 * out)  # hooked after the layers were chosen
    X = torch.randn(5, 10, dtype=torch.float64)
    want = reference(doubled, X, y, 0.3)[0]
    params = {k: p.detach() for k, p in doubled.named_parameters()}
    got = torch.cat([t.reshape(-1) for t in psg.clipped_mean(params, X, y, 0.3)])
    assert "out" not in psg._layers
    assert "out" not in PerSampleGradients(doubled, F.nll_loss)._layers  # hooked from the start
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-14)


def reference_with_unused(model, X, y, clip):
    """The reference with a zero gradient for parameters the loss does not reach."""
    rows = []
    for j in range(X.shape[0]):
        grads = torch.autograd.grad(F.nll_loss(model(X[j:j + 1]), y[j:j + 1]), list(model.parameters()),
                                    allow_unused=True)
        rows.append(torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                               for p, g in zip(model.parameters(), grads)]))
    grads = torch.stack(rows)
    factors = torch.clamp(clip * CLIP_SAFETY / torch.linalg.vector_norm(grads, dim=1), max=1.0)
    return (factors[:, None] * grads).mean(dim=0)


@pytest.mark.parametrize("constant", ["CHUNK_ELEMENTS", "PASS_ROWS"])
def test_chunks_and_passes_of_samples_give_the_same_mean(monkeypatch, constant):
    from privfedstat.deep import per_sample

    model = seeded(ResNet20, torch.float64)
    X, y = images(5, (3, 32, 32), torch.float64)
    whole = per_sample_clipped_mean(model, F.nll_loss, X, y, 0.5)
    monkeypatch.setattr(per_sample, constant, 2 if constant == "PASS_ROWS" else 1)  # two samples a pass, one a chunk
    np.testing.assert_allclose(per_sample_clipped_mean(model, F.nll_loss, X, y, 0.5).numpy(), whole.numpy(),
                               rtol=1e-12, atol=1e-16)


def exact_norm(v: np.ndarray) -> float:
    s = np.max(np.abs(v))
    return 0.0 if s == 0 else float(s * math.sqrt(math.fsum((v / s) ** 2)))


@pytest.mark.parametrize("dtype, scale", [(torch.float32, s) for s in (1e-30, 1e-6, 1.0, 1e6, 1e30)]
                         + [(torch.float64, s) for s in (1e-200, 1e200)])
def test_every_clipped_term_has_norm_at_most_the_bound(dtype, scale):
    """Each sample's clipped term (the clipped mean of its batch of one) and the clipped mean of the batch, measured
    exactly, stay <= B at every scale of the inputs (factored Linear, formed conv and norm layers, Embedding rows;
    float64 squares of 1e200 would overflow)."""
    torch.manual_seed(0)
    models = [(seeded(DigitsCNN, dtype), *images(6, (1, 8, 8), dtype)),
              (seeded(EmbeddingModel, dtype), torch.randint(0, 20, (6, 5)), torch.randint(0, 3, (6,)))]
    for model, X, y in models:
        if X.is_floating_point():
            X = X * scale
        else:
            with torch.no_grad():
                model.embed.weight.mul_(scale)
        for clip in (1e-30, 1e-3, 1.0):
            for j in range(X.shape[0]):
                term = per_sample_clipped_mean(model, F.nll_loss, X[j:j + 1], y[j:j + 1], clip).numpy()
                assert exact_norm(term) <= clip
            assert exact_norm(per_sample_clipped_mean(model, F.nll_loss, X, y, clip).numpy()) <= clip
