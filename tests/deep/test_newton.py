"""FedNewton-NN's head-only Newton step: the solve, the sensitivity bound, convergence with mu = inf."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _seam import ServerView  # noqa: E402
from deep_fixtures import one_torch_thread  # noqa: E402,F401
from scipy.optimize import minimize  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from privfedstat.deep import DeepFedAvg, TensorFederatedData, estimators, newton  # noqa: E402
from privfedstat.deep.models import DigitsCNN, HeadModel  # noqa: E402
from privfedstat.deep.newton import (  # noqa: E402
    DeepFedNewton,
    damped_fisher_solve,
    head_newton_message,
    head_slice,
    per_sample_head_gradients,
)
from privfedstat.deep.per_sample import CLIP_SAFETY  # noqa: E402
from privfedstat.privacy.calibration import head_newton_sensitivity  # noqa: E402

#: a few rounds of a network do not settle: the fits below warn, as they should
pytestmark = pytest.mark.filterwarnings("ignore::privfedstat.exceptions.ConvergenceWarning")


class FrozenFeatures(HeadModel):
    """A fixed random tanh layer (the frozen features) and a Linear head: the head's loss is convex."""

    def __init__(self, d_in: int, d: int, k: int) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(d_in, d), nn.Tanh())
        self.head = nn.Linear(d, k)


def head_vector(model):
    """The head's parameters, flat, float64 (weight row-major, then bias)."""
    return torch.cat([model.head.weight.detach().reshape(-1), model.head.bias.detach()]).to(torch.float64)


def apply_head_step(model, step):
    """head <- head - step (the server's update for one model)."""
    k = model.head.weight.numel()
    with torch.no_grad():
        model.head.weight -= torch.as_tensor(step[:k]).reshape(model.head.weight.shape).to(model.head.weight.dtype)
        model.head.bias -= torch.as_tensor(step[k:]).to(model.head.bias.dtype)


def _digits_batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


# --------------------------------------------------------------------------- pieces
@pytest.mark.parametrize("n, p", [(30, 12), (8, 12)], ids=["n>p", "n<p"])
def test_solve_equals_direct_inverse(n, p):
    V = torch.randn(n, p, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    direct = torch.linalg.solve(V.T @ V / n + 0.3 * torch.eye(p, dtype=torch.float64), V.mean(0))
    torch.testing.assert_close(damped_fisher_solve(V, 0.3), direct, rtol=1e-12, atol=1e-12)


def test_per_sample_head_gradients_match_a_loop():
    torch.manual_seed(0)
    model = DigitsCNN().double()
    X, y = _digits_batch(6)
    X = X.double()
    V = per_sample_head_gradients(model, F.nll_loss, X, y)
    for j in range(6):
        model.zero_grad()
        F.nll_loss(model(X[j:j + 1]), y[j:j + 1]).backward()
        loop = torch.cat([model.head.weight.grad.reshape(-1), model.head.bias.grad])
        torch.testing.assert_close(V[j], loop, rtol=1e-10, atol=1e-12)
    clipped = per_sample_head_gradients(model, F.nll_loss, X, y, clip=0.01)
    norms = torch.linalg.vector_norm(V, dim=1)
    torch.testing.assert_close(clipped, V * torch.clamp(0.01 * CLIP_SAFETY / norms, max=1.0)[:, None])
    assert torch.linalg.vector_norm(clipped, dim=1).max() <= 0.01


def test_parameters_given_explicitly():
    """``params=`` evaluates at those parameters (a clients backend's theta), as loading them into the model does."""
    torch.manual_seed(6)
    model, other = DigitsCNN(), DigitsCNN()
    X, y = _digits_batch(12, seed=7)
    params = {k: v.detach() for k, v in other.named_parameters()}
    s, sens = head_newton_message(model, F.nll_loss, X, y, clip=1.0, damping=0.1, step=0.5, params=params)
    s_other, sens_other = head_newton_message(other, F.nll_loss, X, y, clip=1.0, damping=0.1, step=0.5)
    np.testing.assert_array_equal(s, s_other)
    assert sens == sens_other


def test_head_slice():
    model = DigitsCNN()
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    assert head_slice(names, shapes) == slice(3658 - 330, 3658)
    with pytest.raises(ValueError, match="head"):
        head_slice(names[:-2], shapes[:-2])


def test_model_without_head_rejected():
    with pytest.raises(TypeError, match="model.head"):
        per_sample_head_gradients(nn.Sequential(nn.Linear(2, 2)), F.cross_entropy, torch.zeros(1, 2),
                                  torch.zeros(1, dtype=torch.int64))


# --------------------------------------------------------------------------- sensitivity
@pytest.mark.parametrize("clip, damping", [(1.0, 0.1), (0.05, 1e-3), (1.0, 10.0), (math.inf, 0.01)])
def test_sensitivity_holds_for_random_neighbours(clip, damping):
    """Replacing one image (by an out-of-range one, with a random label) never moves the step more than the bound."""
    torch.manual_seed(2)
    model = DigitsCNN()
    X, y = _digits_batch(40, seed=3)
    g = torch.Generator().manual_seed(4)
    s, sens = head_newton_message(model, F.nll_loss, X, y, clip=clip, damping=damping, step=0.7)
    assert sens == pytest.approx(head_newton_sensitivity(clip, damping, 0.7, [40])[0])
    worst = 0.0
    for j in range(0, 40, 2):
        X2, y2 = X.clone(), y.clone()
        X2[j] = 5 * torch.rand(1, 8, 8, generator=g)
        y2[j] = torch.randint(0, 10, (), generator=g)
        s2, _ = head_newton_message(model, F.nll_loss, X2, y2, clip=clip, damping=damping, step=0.7)
        worst = max(worst, float(np.linalg.norm(s - s2)))
    assert 0 < worst <= sens


@pytest.mark.parametrize("n", [1, 3, 50])
def test_sensitivity_holds_for_adversarial_gradients(n):
    """At the level of the clipped gradient rows: row 0 replaced by a row of norm B, opposite or random."""
    rng = np.random.default_rng(n)
    B, lam, p = 2.0, 0.05, 4
    bound = head_newton_sensitivity(B, lam, 1.0, [n])[0]
    worst = 0.0
    for trial in range(60):
        V = rng.standard_normal((n, p))
        radii = B if trial % 2 else B * rng.uniform(0.0, 1.0, (n, 1))  # all rows at the bound, or inside
        V *= radii / np.linalg.norm(V, axis=1, keepdims=True)
        u = rng.standard_normal(p)
        for w in (-V[0], B * u / np.linalg.norm(u)):
            V2 = V.copy()
            V2[0] = w
            d = damped_fisher_solve(torch.as_tensor(V), lam) - damped_fisher_solve(torch.as_tensor(V2), lam)
            worst = max(worst, float(torch.linalg.vector_norm(d)))
    assert 0 < worst <= bound


def test_sensitivity_formula():
    B, lam, a = 1.0, 0.1, 0.5
    c = min(B / lam, 1 / (2 * math.sqrt(lam)))
    np.testing.assert_allclose(head_newton_sensitivity(B, lam, a, [1, 1000]),
                               [a * 2 * c, a * (2 * B + B * B * c) / (lam * 1000)])
    assert head_newton_sensitivity(math.inf, 0.04, 1.0, [10])[0] == pytest.approx(5.0)  # alpha / sqrt(lambda)
    for bad in (dict(damping=0.0), dict(step=-1.0), dict(clip=0.0)):
        args = dict(clip=1.0, damping=0.1, step=1.0) | bad
        with pytest.raises(ValueError):
            head_newton_sensitivity(sizes=[5], **args)


# --------------------------------------------------------------------------- convergence (mu = inf)
def test_repeated_steps_converge_to_the_head_optimum():
    torch.manual_seed(5)
    n, d, k = 400, 5, 3
    model = FrozenFeatures(4, d, k).double()
    X = torch.randn(n, 4, dtype=torch.float64)
    with torch.no_grad():
        Z = model.features(X)
        y = torch.multinomial(torch.softmax(Z @ (2 * torch.randn(k, d, dtype=torch.float64)).T, 1), 1).reshape(-1)
    Zn, yn = Z.numpy(), y.numpy()

    def loss_and_grad(theta):
        W, b = theta[:k * d].reshape(k, d), theta[k * d:]
        eta = Zn @ W.T + b
        lse = np.logaddexp.reduce(eta, axis=1)
        R = np.exp(eta - lse[:, None])
        R[np.arange(n), yn] -= 1
        return (lse - eta[np.arange(n), yn]).mean(), np.concatenate([(R.T @ Zn / n).ravel(), R.mean(0)])

    ref = minimize(loss_and_grad, np.zeros(k * d + k), jac=True, method="L-BFGS-B",
                   options=dict(gtol=1e-12, ftol=1e-16, maxiter=10_000))
    features = [p.detach().clone() for p in model.features.parameters()]
    for _ in range(60):
        s, sens = head_newton_message(model, F.nll_loss, X, y, clip=math.inf, damping=1e-4, step=1.0)
        apply_head_step(model, s)
    value, gradient = loss_and_grad(head_vector(model).numpy())
    assert np.abs(gradient).max() < 1e-8
    assert value == pytest.approx(ref.fun, abs=1e-12)
    W, b = ref.x[:k * d].reshape(k, d), ref.x[k * d:]
    eta = Zn @ W.T + b
    with torch.no_grad():  # the log-probabilities are identified (the softmax parameters are not)
        np.testing.assert_allclose(model(X).numpy(), eta - np.logaddexp.reduce(eta, axis=1)[:, None], atol=1e-6)
    for before, after in zip(features, model.features.parameters()):
        assert torch.equal(before, after)


# --------------------------------------------------------------------------- the estimator (FedNewton-NN / -Iter)
def _digits_clients(m=4, n=15, seed=8):
    sizes = [n + k for k in range(m)]  # unequal sizes: the weights n_i / N matter
    X, y = _digits_batch(sum(sizes), seed=seed)
    return TensorFederatedData.from_pooled(X, y, sizes=sizes)


@pytest.mark.usefixtures("one_torch_thread")
def test_one_cycle_is_fedavg_then_the_weighted_newton_step():
    """mu = inf, C = 1 (Algorithm 5): R DP-FedAvg rounds, then head -= sum_i w_i alpha (h_i + lambda I)^-1 g_i."""
    data = _digits_clients()
    torch.manual_seed(9)
    model = DigitsCNN()
    common = dict(model=model, loss="nll", mu=math.inf, n_rounds=3, n_local_steps=2, step_size=0.5, clip=1.0,
                  server_step_size=0.8, random_state=0)
    newton = DeepFedNewton(n_cycles=1, damping=0.3, newton_step=0.7, **common).fit(data)
    fedavg = DeepFedAvg(**common).fit(data)
    w = data.sizes / data.sizes.sum()
    step = sum(wi * head_newton_message(fedavg.model_, F.nll_loss, *data.client(i), clip=1.0, damping=0.3,
                                        step=0.7)[0] for i, wi in enumerate(w))
    expected = fedavg.coef_.copy()
    expected[-330:] -= step
    np.testing.assert_allclose(newton.coef_, expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(newton.history_[3], fedavg.coef_)  # R FedAvg iterates, then the Newton step
    assert newton.communication_.rounds == 4 and newton.n_iter_ == 6


@pytest.mark.usefixtures("one_torch_thread")
def test_ledger_spends_mu_over_2C_stages():
    data = _digits_clients()
    torch.manual_seed(10)
    est = DeepFedNewton(model=DigitsCNN(), loss="nll", mu=2.0, n_cycles=2, n_rounds=2, n_local_steps=2, step_size=0.1,
                        clip=0.5, damping=0.2, newton_step=0.9, random_state=1).fit(data)
    assert est.privacy_.mu == pytest.approx(2.0, rel=1e-12)
    frame = est.privacy_.to_frame()
    newton = frame[frame["stage"] == "newton-step"]
    assert len(newton) == 2 * data.n_clients  # one release per cycle
    sens = np.tile(head_newton_sensitivity(0.5, 0.2, 0.9, data.sizes), 2)
    np.testing.assert_allclose(newton["sensitivity"], sens, rtol=1e-12)
    np.testing.assert_allclose(newton["mu"], 2.0 / 2.0, rtol=1e-12)  # mu / sqrt(2C) with C = 2
    assert np.isfinite(est.coef_).all() and 0 <= est.score(data) <= 1


@pytest.mark.usefixtures("one_torch_thread")
def test_participation_asks_a_sample_for_the_newton_step():
    data = _digits_clients(m=6, n=8)
    torch.manual_seed(11)
    est = DeepFedNewton(model=DigitsCNN(), loss="nll", mu=2.0, n_cycles=1, n_rounds=1, n_local_steps=1, step_size=0.1,
                        participation=0.5, random_state=2).fit(data)
    newton = est.privacy_.to_frame().query("stage == 'newton-step'")
    asked = newton["sigma"] > 0
    assert 1 <= asked.sum() < data.n_clients  # seed 2 leaves some clients out of the Newton round
    assert (newton.loc[~asked, "sensitivity"] == 0).all()


def test_model_without_a_linear_head_is_refused():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with pytest.raises(TypeError, match="model.head"):
        DeepFedNewton(model=model, mu=math.inf).fit(_digits_clients())
    with pytest.raises(ValueError, match="damping"):
        DeepFedNewton(model=DigitsCNN(), damping=0.0).fit(_digits_clients())


@pytest.mark.usefixtures("one_torch_thread")
def test_server_uses_only_verbs(monkeypatch):
    """Through a view that exposes only verbs and public metadata the fit is the same (the seam holds)."""
    data = _digits_clients()
    torch.manual_seed(12)
    model = DigitsCNN()
    settings = dict(model=model, loss="nll", mu=2.0, n_cycles=2, n_rounds=1, n_local_steps=1, step_size=0.1,
                    random_state=4)
    reference = newton.DeepFedNewton(**settings).fit(data)
    replies: list = []
    real = estimators.TorchClients
    monkeypatch.setattr(estimators, "TorchClients", lambda *a, **kw: ServerView(real(*a, **kw), replies))
    est = newton.DeepFedNewton(**settings).fit(data)
    np.testing.assert_array_equal(est.coef_, reference.coef_)
    assert [verb for verb, _, _ in replies].count("head_newton_steps") == 2
