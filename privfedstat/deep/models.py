"""Network architectures for the deep-model algorithms: the paper's MNIST and CIFAR-10 CNNs, ResNet20,
the FEMNIST CNN of the HiFedProx study and a small CNN for scikit-learn's 8x8 digits.

Every model maps images of shape (n, channels, height, width) to **log-probabilities** of shape
(n, n_classes): ``forward(x) = log_softmax(head(features(x)))``. The loss is the negative
log-likelihood (:func:`torch.nn.functional.nll_loss`), as in Section 5.2 of Peng, Paul & Auddy
("log-softmax outputs and negative log-likelihood loss"); ``cross_entropy`` on these outputs gives
the same values, since log-softmax is idempotent. The last layer of every model is the
:class:`~torch.nn.Linear` ``head``, the layer FedNewton-NN's Newton step acts on
(:mod:`privfedstat.deep.newton`); ``features`` is everything before it.

No model uses BatchNorm: a BatchNorm layer in training mode mixes the examples of a batch, so an
example's gradient depends on the other examples and per-sample clipping no longer bounds the
sensitivity (and ``torch.func.vmap`` over single examples computes different statistics).
ResNet20 uses GroupNorm, which normalises each example on its own.

=================  ======================  ===========
model              input                   parameters
=================  ======================  ===========
``MnistCNN``       (n, 1, 28, 28)          421,642
``CifarCNN``       (n, 3, 32, 32)          620,362
``ResNet20``       (n, 3, 32, 32)          269,722
``FemnistCNN``     (n, 1, 14, 14)          27,326
``DigitsCNN``      (n, 1, 8, 8)            3,658
=================  ======================  ===========
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["HeadModel", "MnistCNN", "CifarCNN", "ResNet20", "FemnistCNN", "DigitsCNN", "count_parameters"]


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (the dimension d of theta)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class HeadModel(nn.Module):
    """A classifier ``log_softmax(head(features(x)))`` whose last layer is the Linear ``head``.

    Subclasses set ``self.features`` (a module mapping images to vectors) and ``self.head``.
    """

    features: nn.Module
    head: nn.Linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of shape (n, n_classes) for images x of shape (n, C, H, W)."""
        return F.log_softmax(self.head(self.features(x)), dim=-1)


class _PlainCNN(HeadModel):
    """Conv blocks (conv3x3 padding 1 + ReLU + MaxPool2, one per width), Linear + ReLU, head."""

    def __init__(self, in_channels: int, side: int, widths: tuple[int, ...], hidden: int, n_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in widths:
            layers += [nn.Conv2d(in_channels, width, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            in_channels, side = width, side // 2
        layers += [nn.Flatten(), nn.Linear(in_channels * side * side, hidden), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(hidden, n_classes)


class MnistCNN(_PlainCNN):
    """The CNN of Section 5.2 for MNIST (28 x 28 grey images, 10 classes).

    "Two convolutional blocks with 32 and 64 channels, followed by a 128-unit fully connected layer
    and a 10-class classifier layer" [P]. Kernel size, padding and pooling are not given [I]: each
    block is conv3x3 (padding 1) + ReLU + MaxPool2, so the flattened features are 64 x 7 x 7 = 3136;
    a ReLU follows the 128-unit layer. 421,642 parameters; the head (Linear 128 -> 10) has 1290.

    References
    ----------
    Peng, Paul & Auddy, Section 5.2.2.
    """

    def __init__(self) -> None:
        super().__init__(1, 28, (32, 64), 128, 10)


class CifarCNN(_PlainCNN):
    """The CNN of Section 5.2 for CIFAR-10 (32 x 32 colour images, 10 classes).

    "Three convolutional blocks with 32, 64, and 128 channels, followed by a 256-unit fully
    connected layer and a 10-class classifier" [P, Section 5.2.2; the introduction of 5.2 says
    "three fully connected layers", which contradicts it: 5.2.2 is followed]. Each block is
    conv3x3 (padding 1) + ReLU + MaxPool2 [I], so the flattened features are 128 x 4 x 4 = 2048;
    a ReLU follows the 256-unit layer. 620,362 parameters; the head (Linear 256 -> 10) has 2570.

    References
    ----------
    Peng, Paul & Auddy, Section 5.2.2.
    """

    def __init__(self) -> None:
        super().__init__(3, 32, (32, 64, 128), 256, 10)


class FemnistCNN(_PlainCNN):
    """The FEMNIST CNN of the HiFedProx study: exactly 27,326 parameters, 14 x 14 inputs, 62 classes.

    Conv(1 -> 16, 3x3, padding 1), ReLU, MaxPool2 (16 x 7 x 7); Conv(16 -> 32, 3x3, padding 1),
    ReLU, MaxPool2 (32 x 3 x 3 = 288); Linear 288 -> 64, ReLU; head Linear 64 -> 62 [P: the
    layers and the count are stated in Section V-A]. Counts: 160 + 4640 + 18,496 + 4030 = 27,326.
    A flat 196-vector input is reshaped to 1 x 14 x 14 by the caller.

    Parameters
    ----------
    n_classes : int, default 62
        Outputs of the head (62 FEMNIST classes; 10 for the digits stand-in
        :func:`~privfedstat.deep.femnist_standin`, which gives 64 x 10 + 10 = 650 head parameters and
        23,946 in all).

    References
    ----------
    Kabgani, A. and Ahookhosh, M. Beyond conventional federated learning via high-order
    regularization (HiFedProx), Section V-A.
    """

    def __init__(self, n_classes: int = 62) -> None:
        if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}.")
        super().__init__(1, 14, (16, 32), 64, n_classes)


class DigitsCNN(_PlainCNN):
    """A small CNN for scikit-learn's 8 x 8 digits (10 classes), the offline stand-in for :class:`MnistCNN`.

    The MNIST CNN's shape at a quarter of the width: Conv(1 -> 8, 3x3, padding 1), ReLU, MaxPool2
    (8 x 4 x 4); Conv(8 -> 16, 3x3, padding 1), ReLU, MaxPool2 (16 x 2 x 2 = 64); Linear 64 -> 32,
    ReLU; head Linear 32 -> 10. 3,658 parameters (80 + 1168 + 2080 + 330); the head has 330.
    """

    def __init__(self) -> None:
        super().__init__(1, 8, (8, 16), 32, 10)


class _BasicBlock(nn.Module):
    """conv3x3-GN-ReLU-conv3x3-GN plus the shortcut, then ReLU (He et al. 2016, CIFAR variant)."""

    def __init__(self, in_channels: int, channels: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, channels)
        # "option A" shortcut: parameter-free; subsample by the stride and zero-pad the new channels
        self.pad = channels - in_channels
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        shortcut = x
        if self.stride != 1 or self.pad:
            half = self.pad // 2
            shortcut = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, half, self.pad - half))
        return F.relu(out + shortcut)


class ResNet20(HeadModel):
    """ResNet20 for CIFAR-10 (He et al. 2016, Section 4.2), with GroupNorm in place of BatchNorm.

    conv3x3 3 -> 16, norm, ReLU; three stages of three basic blocks with 16, 32 and 64 channels
    (strides 1, 2, 2), each block conv-norm-ReLU-conv-norm plus a parameter-free "option A"
    shortcut (subsample, zero-pad the channels), then ReLU; global average pooling; head Linear
    64 -> 10. Convolutions have no bias; Kaiming-normal initialisation (as in the reference
    implementation of Idelbayev). 269,722 parameters, the same count as with BatchNorm (its affine
    weights become GroupNorm's; BatchNorm's running statistics were buffers, not parameters).

    GroupNorm rather than BatchNorm: BatchNorm couples the examples of a batch, so per-sample
    gradients (and their clipping, on which every sensitivity rests) are not defined; GroupNorm
    normalises each example over groups of its own channels. The group count is an inference
    [I]: ``norm_groups=2`` follows Hsieh et al. (2020), who replaced BatchNorm by GroupNorm with
    two groups in federated training of ResNets.

    Parameters
    ----------
    n_classes : int, default 10
    norm_groups : int, default 2
        Groups of every GroupNorm layer (must divide 16).

    References
    ----------
    He, K., Zhang, X., Ren, S. and Sun, J. (2016). Deep residual learning for image recognition. CVPR.
    Hsieh, K., Phanishayee, A., Mutlu, O. and Gibbons, P. (2020). The non-IID data quagmire of
    decentralized machine learning. ICML.
    """

    def __init__(self, n_classes: int = 10, norm_groups: int = 2) -> None:
        super().__init__()
        if not isinstance(norm_groups, int) or norm_groups < 1 or 16 % norm_groups:
            raise ValueError(f"norm_groups must be a positive divisor of 16, got {norm_groups!r}.")
        layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.GroupNorm(norm_groups, 16), nn.ReLU()]
        in_channels = 16
        for channels, stride in ((16, 1), (32, 2), (64, 2)):
            for block in range(3):
                layers.append(_BasicBlock(in_channels, channels, stride if block == 0 else 1, norm_groups))
                in_channels = channels
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(64, n_classes)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight)
