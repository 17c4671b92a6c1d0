"""The network architectures: parameter counts, output shapes, the ``head`` convention, per-sample independence."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from privfedstat.deep.models import CifarCNN, DigitsCNN, FemnistCNN, MnistCNN, ResNet20, count_parameters  # noqa: E402

# model, input shape (C, H, W), total parameters, head parameters, classes
CASES = [
    (MnistCNN, (1, 28, 28), 421_642, 1290, 10),   # the head size ALGORITHMS.md 2(d) states for MNIST
    (CifarCNN, (3, 32, 32), 620_362, 2570, 10),   # ... and for CIFAR
    (ResNet20, (3, 32, 32), 269_722, 650, 10),    # He et al.: ~0.27M
    (FemnistCNN, (1, 14, 14), 27_326, 4030, 62),  # the count HiFedProx states
    (DigitsCNN, (1, 8, 8), 3_658, 330, 10),
]


@pytest.mark.parametrize("cls, shape, n_params, n_head, n_classes", CASES, ids=[c[0].__name__ for c in CASES])
def test_counts_shapes_and_head(cls, shape, n_params, n_head, n_classes):
    torch.manual_seed(0)
    model = cls()
    assert count_parameters(model) == n_params
    assert isinstance(model.head, nn.Linear) and model.head.out_features == n_classes
    assert sum(p.numel() for p in model.head.parameters()) == n_head
    # the head is the last layer: its parameters are the last ones registered
    names = [name for name, _ in model.named_parameters()]
    assert names[-2:] == ["head.weight", "head.bias"]
    out = model(torch.rand(3, *shape))
    assert out.shape == (3, n_classes)
    torch.testing.assert_close(out.exp().sum(dim=1), torch.ones(3))  # log-probabilities
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def test_head_receives_the_features():
    torch.manual_seed(1)
    model = DigitsCNN()
    x = torch.rand(4, 1, 8, 8)
    torch.testing.assert_close(model(x), torch.log_softmax(model.head(model.features(x)), dim=1))


@pytest.mark.parametrize("cls, shape", [(ResNet20, (3, 32, 32)), (MnistCNN, (1, 28, 28))])
def test_examples_do_not_interact(cls, shape):
    """An example's output (hence its gradient) does not depend on the rest of the batch (no BatchNorm)."""
    torch.manual_seed(2)
    model = cls().train()
    x = torch.rand(4, *shape)
    torch.testing.assert_close(model(x)[1:2], model(x[1:2]), rtol=1e-5, atol=1e-5)


def test_resnet_groups_validated():
    with pytest.raises(ValueError, match="divisor of 16"):
        ResNet20(norm_groups=3)
    assert count_parameters(ResNet20(norm_groups=16)) == 269_722
