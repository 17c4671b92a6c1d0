"""Networks that mix the rows of a batch, or read a layer's weight outside its forward call, against a naive loop.

Book-keeping reads each sample's gradient off one batched pass; a batch statistic (``x - x.mean(0)``)
or attention with ``batch_first=False`` given the samples along dimension 0 makes every row's
gradient depend on the others there, so that one replaced row moved a client's clipped mean by
several times ``2B / n``. The probe (``PerSampleGradients._probe``) must send such a network to
``vmap`` over single rows (the definition of a per-sample gradient, and the naive loop's), and leave
the legitimate models on the book-keeping path without a warning. A weight read through a property
(``embed.weight.T``: an embedding tied to the output projection) must not drop out of the gradient.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat.deep import per_sample_clipped_mean  # noqa: E402
from privfedstat.deep.models import DigitsCNN, ResNet20  # noqa: E402
from privfedstat.deep.per_sample import CLIP_SAFETY, PerSampleGradients  # noqa: E402

torch.set_num_threads(1)


class Centred(nn.Module):
    """Centres its hidden layer over the batch: row j's output depends on every row."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.fc(x)
        return F.log_softmax(self.head(torch.tanh(h - h.mean(0))), dim=-1)


class TimeMajorAttention(nn.Module):
    """``MultiheadAttention(batch_first=False)`` given (n, L, E): it attends across the samples."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 8)
        self.attention = nn.MultiheadAttention(8, 2)
        self.head = nn.Linear(8 * 4, 3)

    def forward(self, x):  # x: (n, 4, 5)
        h = self.fc(x)
        return F.log_softmax(self.head(self.attention(h, h, h, need_weights=False)[0].flatten(1)), dim=-1)


class TiedEmbedding(nn.Module):
    """Tokens -> Embedding -> mean -> Linear -> scores against the embedding itself (``weight.T``)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return F.log_softmax(torch.tanh(self.fc(self.embed(x).mean(1))) @ self.embed.weight.T, dim=-1)


class TransposedLinear(nn.Module):
    """A Linear on a (positions, n, d) layout that sums the positions out: row-separable, not batched by rows."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x):  # x: (n, 3, 4)
        return F.log_softmax(self.head(self.fc(x.transpose(0, 1)).sum(dim=0)), dim=-1)


def rows(cls, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    if cls is TiedEmbedding:
        return torch.randint(0, 10, (n, 3), generator=g), torch.randint(0, 10, (n,), generator=g)
    shape = {Centred: (5,), TimeMajorAttention: (4, 5), TransposedLinear: (3, 4), DigitsCNN: (1, 8, 8),
             ResNet20: (3, 32, 32)}[cls]
    return torch.randn(n, *shape, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


def seeded(cls):
    torch.manual_seed(0)
    return cls().to(torch.float64)


def naive_clipped_mean(model, X, y, clip) -> np.ndarray:
    """One autograd backward per row, on that row alone; each gradient clipped to ``clip kappa``; their mean."""
    total = 0.0
    for j in range(X.shape[0]):
        model.zero_grad()
        F.nll_loss(model(X[j:j + 1]), y[j:j + 1]).backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).to(torch.float64)
        total = total + g * min(1.0, clip * CLIP_SAFETY / float(g.norm()))
    model.zero_grad()
    return (total / X.shape[0]).detach().numpy()


@pytest.mark.parametrize("cls", [Centred, TimeMajorAttention])
def test_a_network_that_mixes_rows_goes_to_vmap_and_keeps_the_sensitivity(cls):
    model, clip = seeded(cls), 0.1
    for n in (16, 64):
        X, y = rows(cls, n)
        X2 = X.clone()
        X2[0] = 1e3 * X2[0]  # one row replaced by an outlier
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = per_sample_clipped_mean(model, F.nll_loss, X, y, clip).numpy()
            moved = per_sample_clipped_mean(model, F.nll_loss, X2, y, clip).numpy() - got
        assert np.linalg.norm(moved) <= 2 * clip / n  # Lemma 3.1
        np.testing.assert_allclose(got, naive_clipped_mean(model, X, y, clip), rtol=1e-9, atol=1e-12 * clip)
        assert sum("mixes the rows of a batch" in str(w.message) for w in caught) == 2  # each call probes once


def test_the_warning_names_the_batch_first_layer():
    model = seeded(TimeMajorAttention)
    psg = PerSampleGradients(model, F.nll_loss)
    assert set(psg._layers) == {"fc", "head"}
    params = {k: p.detach() for k, p in model.named_parameters()}
    with pytest.warns(UserWarning, match=r"batch_first=False in \['attention'\]"):
        psg.norms(params, *rows(TimeMajorAttention, 8))
    assert psg._layers == {}


def test_a_weight_read_through_a_property_stays_in_the_per_sample_gradient():
    model, clip = seeded(TiedEmbedding), 0.05
    X, y = rows(TiedEmbedding, 16)
    psg = PerSampleGradients(model, F.nll_loss)
    params = {k: p.detach() for k, p in model.named_parameters()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # caught by the guard, not by the probe
        got = torch.cat([t.reshape(-1) for t in psg.clipped_mean(params, X, y, clip)]).numpy()
    assert set(psg._layers) == {"fc"}  # the embedding moved to vmap; the Linear stays
    np.testing.assert_allclose(got, naive_clipped_mean(model, X, y, clip), rtol=1e-9, atol=1e-12 * clip)


@pytest.mark.parametrize("cls, n", [(DigitsCNN, 7), (ResNet20, 3), (TransposedLinear, 3), (TransposedLinear, 5)])
def test_row_separable_networks_pass_the_probe_and_stay_exact(cls, n):
    """No warning and book-keeping kept; a Linear on a (positions, n, d) layout is caught by its trailing shape, also
    with n equal to its positions (3), which the batch-size check alone could not tell apart."""
    model, clip = seeded(cls), 0.2
    X, y = rows(cls, n)
    psg = PerSampleGradients(model, F.nll_loss)
    params = {k: p.detach() for k, p in model.named_parameters()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = torch.cat([t.reshape(-1) for t in psg.clipped_mean(params, X, y, clip)]).numpy()
    assert psg._layers and ("fc" not in psg._layers if cls is TransposedLinear else True)
    np.testing.assert_allclose(got, naive_clipped_mean(model, X, y, clip), rtol=1e-9, atol=1e-12 * clip)


def test_a_probe_with_non_finite_gradients_moves_everything_to_vmap():
    model = seeded(DigitsCNN)
    with torch.no_grad():
        model.head.bias.fill_(math.nan)
    psg = PerSampleGradients.__new__(PerSampleGradients)  # check_model refuses NaN weights; the probe is checked alone
    PerSampleGradients.__init__(psg, seeded(DigitsCNN), F.nll_loss)
    params = {k: p.detach() for k, p in model.named_parameters()}
    with pytest.warns(UserWarning, match="not finite"):
        psg.norms(params, *rows(DigitsCNN, 4))
    assert psg._layers == {}


def test_a_network_estimator_on_a_row_mixing_model_warns_and_releases_the_exact_clipped_mean():
    """DeepFedSGD with the centring network: the fit says so, and client 0's first message (noise removed: the same
    seed on D and D') moves by at most 2B / n_0 when one of its rows is replaced by an outlier (2.74 times that
    before the probe)."""
    from privfedstat.deep import DeepFedSGD, TensorFederatedData

    X, y = rows(Centred, 48, seed=3)
    X2 = X.clone()
    X2[0] = 1e3 * X2[0]
    fits = []
    for inputs in (X, X2):
        data = TensorFederatedData.from_pooled(inputs, y, sizes=[16, 16, 16])
        with pytest.warns(UserWarning, match="mixes the rows of a batch"):
            fits.append(DeepFedSGD(model=seeded(Centred), loss="nll", mu=2.0, n_iter=1, step_size=1.0, clip=0.1,
                                   progress=False, random_state=0).fit(data))  # (and a ConvergenceWarning)
    assert fits[0].privacy_.is_private
    step = fits[0].history_[1] - fits[1].history_[1]  # the server's step: eta times the weighted mean of messages
    assert np.linalg.norm(step) <= 1.0 * (16 / 48) * 2 * 0.1 / 16 * (1 + 1e-9)
