"""Per-sample clipped means (torch.func) against a naive per-example autograd loop and against Opacus."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat.deep import per_sample_clipped_mean  # noqa: E402
from privfedstat.deep.per_sample import CLIP_SAFETY, PerSampleGradients, clip_factors, sample_norms  # noqa: E402

torch.set_num_threads(1)


def tiny_cnn(dtype=torch.float64, seed=0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3 * 4 * 4, 5),
                          nn.Tanh(), nn.Linear(5, 4), nn.LogSoftmax(dim=1))
    return model.to(dtype)


def batch(n=12, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g, dtype=dtype), torch.randint(0, 4, (n,), generator=g)


def naive_per_sample(model, loss_fn, X, y) -> np.ndarray:
    """One autograd backward per example: rows of flat gradients (n, P)."""
    rows = []
    for j in range(X.shape[0]):
        model.zero_grad()
        loss_fn(model(X[j:j + 1]), y[j:j + 1]).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).detach().numpy().copy())
    model.zero_grad()
    return np.array(rows)


def test_per_sample_gradients_equal_a_naive_autograd_loop():
    model = tiny_cnn()
    X, y = batch()
    psg = PerSampleGradients(model, F.nll_loss)
    params = {n: p.detach() for n, p in model.named_parameters()}
    (grads,) = list(psg.chunks(params, X, y))
    ours = torch.cat([g.reshape(X.shape[0], -1) for g in grads], dim=1).numpy()
    ref = naive_per_sample(model, F.nll_loss, X, y)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(psg.norms(params, X, y).numpy(), np.linalg.norm(ref, axis=1), rtol=1e-12)


@pytest.mark.parametrize("clip", [0.05, 0.5, math.inf])
def test_clipped_mean_equals_the_naive_loop_clipped(clip):
    model = tiny_cnn()
    X, y = batch(n=20)
    ref = naive_per_sample(model, F.nll_loss, X, y)
    norms = np.linalg.norm(ref, axis=1)
    factors = np.ones_like(norms) if math.isinf(clip) else np.minimum(1.0, clip * CLIP_SAFETY / norms)
    expected = (factors[:, None] * ref).mean(axis=0)
    if not math.isinf(clip):
        assert np.mean(factors < 1) > 0.3  # the bound binds for a good share of rows
    ours = per_sample_clipped_mean(model, F.nll_loss, X, y, clip)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-6, atol=1e-12)
    by_name = per_sample_clipped_mean(model, F.nll_loss, X, y, clip, flat=False)
    assert list(by_name) == [n for n, _ in model.named_parameters()]
    np.testing.assert_array_equal(torch.cat([t.reshape(-1) for t in by_name.values()]).numpy(), ours.numpy())


def test_chunks_give_the_same_mean(monkeypatch):
    from privfedstat.deep import per_sample

    model = tiny_cnn()
    X, y = batch(n=9)
    whole = per_sample_clipped_mean(model, F.nll_loss, X, y, 0.2)
    monkeypatch.setattr(per_sample, "CHUNK_ELEMENTS", 2 * sum(p.numel() for p in model.parameters()))
    np.testing.assert_allclose(per_sample_clipped_mean(model, F.nll_loss, X, y, 0.2).numpy(), whole.numpy(), rtol=1e-12,
                               atol=1e-15)


@pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning")
@pytest.mark.parametrize("clip", [0.1, 1.0])
def test_clipped_mean_equals_opacus_flat_clipping(clip):
    """Opacus 1.6: GradSampleModule's per-sample gradients, DPOptimizer's flat clipping (noise 0), averaged."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    model = tiny_cnn(dtype=torch.float32, seed=3)
    X, y = batch(n=32, dtype=torch.float32, seed=4)
    ours = per_sample_clipped_mean(model, F.nll_loss, X, y, clip)

    gsm = GradSampleModule(tiny_cnn(dtype=torch.float32, seed=3))
    opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.0), noise_multiplier=0.0, max_grad_norm=clip,
                      expected_batch_size=X.shape[0])
    F.nll_loss(gsm(X), y).backward()
    opt.pre_step()  # clip_and_accumulate, add_noise (sd 0), scale by 1 / expected_batch_size
    theirs = torch.cat([p.grad.reshape(-1) for p in gsm.parameters()])
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-7)


def test_norms_neither_overflow_nor_underflow():
    for dtype, big, tiny in [(torch.float64, 1e300, 1e-300), (torch.float32, 3e38, 1e-44)]:
        g = [torch.tensor([[big, big, 0.0], [tiny, tiny, tiny]], dtype=dtype), torch.tensor([[big], [0.0]], dtype=dtype)]
        norms = sample_norms(g)
        assert norms.dtype == torch.float64
        big64, tiny64 = float(torch.tensor(big, dtype=dtype)), float(torch.tensor(tiny, dtype=dtype))
        np.testing.assert_allclose(norms.numpy(), [big64 * math.sqrt(3), tiny64 * math.sqrt(3)], rtol=1e-6)
    assert sample_norms([torch.zeros(2, 3)]).tolist() == [0.0, 0.0]
    g = torch.randn(3, 2**16) * torch.tensor([[1.0], [1e-15], [1e15]])  # the blocked float32 path, then rescaled rows
    exact = np.array([math.sqrt(math.fsum(r)) for r in g.numpy().astype(np.float64) ** 2])
    np.testing.assert_allclose(sample_norms([g, g[:, :5]]).numpy() ** 2,
                               exact**2 + np.sum(g[:, :5].numpy().astype(float) ** 2, 1), rtol=2**-21)


@pytest.mark.parametrize("width", [50, 4096])  # 4096: float32 squares summed in blocks
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_clipped_term_has_norm_at_most_the_bound_after_rounding(dtype, width):
    """Gradients at every scale: each rounded term ``factor * g_j`` (in the model dtype), measured exactly, is <= B."""
    rng = np.random.default_rng(0)
    finfo = torch.finfo(dtype)
    exps = np.linspace(math.log10(finfo.tiny) + 2, math.log10(finfo.max) - 2, 400)
    g = torch.tensor(rng.standard_normal((400, width)) * 10.0 ** exps[:, None], dtype=dtype)
    g[::7, 0] = finfo.max / 2  # a huge entry next to ordinary ones
    for clip in (1e-30, 1e-3, 1.0, 1e30):
        f = clip_factors(sample_norms([g]), clip, dtype)
        terms = (f[:, None] * g).numpy().astype(np.float64)
        scale = np.max(np.abs(terms), axis=1, keepdims=True)
        exact = scale[:, 0] * np.sqrt([math.fsum(r) for r in (terms / np.where(scale > 0, scale, 1)) ** 2])
        assert np.all(exact <= clip), (dtype, clip, float(np.max(exact / clip)))


def test_a_non_finite_per_sample_gradient_contributes_zero():
    model = tiny_cnn()
    X, y = batch(n=6)
    X[2, 0, 0, 0] = math.inf  # row 2's loss is NaN
    clean = torch.cat([X[:2], X[3:]]), torch.cat([y[:2], y[3:]])
    ours = per_sample_clipped_mean(model, F.nll_loss, X, y, 0.3)
    np.testing.assert_allclose(ours.numpy(), per_sample_clipped_mean(model, F.nll_loss, *clean, 0.3).numpy() * 5 / 6,
                               rtol=1e-12)
    assert torch.isnan(per_sample_clipped_mean(model, F.nll_loss, X, y, math.inf)).any()  # no clipping: NaN propagates


def test_models_with_batch_dependent_or_random_layers_are_refused_in_training_mode():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4), nn.BatchNorm1d(4)).double()
    X, y = batch(n=4)
    with pytest.raises(ValueError, match="BatchNorm1d.*training mode"):
        per_sample_clipped_mean(model, F.cross_entropy, X, y, 1.0)
    model.eval()
    assert per_sample_clipped_mean(model, F.cross_entropy, X, y, 1.0).shape == (64 * 4 + 4 + 8,)
    with pytest.raises(ValueError, match="clip"):
        per_sample_clipped_mean(model, F.cross_entropy, X, y, 0.0)
    with pytest.raises(ValueError, match="at least"):
        per_sample_clipped_mean(model, F.cross_entropy, X, y, 1e-31)


@pytest.mark.slow
def test_importing_privfedstat_does_not_import_torch_and_deep_says_what_to_install():
    code = ("import sys; import privfedstat; assert 'torch' not in sys.modules; sys.modules['torch'] = None\n"
            "try:\n    import privfedstat.deep\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "privfedstat[deep]"' in out


@pytest.mark.slow
@pytest.mark.parametrize("n_params, n_rows", [(2, 100_000), (3, 20_000), (7, 100_000)])
@pytest.mark.parametrize("scale", [1e-12, 1.0, 1e12])
def test_the_clipped_mean_of_a_float32_model_has_norm_at_most_the_bound(n_params, n_rows, scale):
    """Many float32 rows whose gradients point the same way (each clipped to B kappa): the mean's exact norm stays
    <= B. Summed in float32 it exceeded B by up to 1e-3 relative at 10^5 rows; the sum is float64."""
    model = nn.Linear(n_params, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    g = torch.Generator().manual_seed(1)
    X = scale * (torch.rand(n_params, generator=g) + 0.5) * (1 + 1e-3 * torch.rand(n_rows, n_params, generator=g))
    y = torch.full((n_rows, 1), 1e6)
    for clip in (1e-30, 0.7, 1.0, 1e30):
        mean = per_sample_clipped_mean(model, F.mse_loss, X, y, clip).numpy().astype(np.float64)
        s = np.max(np.abs(mean))
        assert s * math.sqrt(math.fsum((mean / s) ** 2)) <= clip
