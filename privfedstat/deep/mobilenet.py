"""MobileNetV3-Small (Howard et al. 2019) as torchvision builds it, without torchvision: FedNMap's Section 5.2 network.

The layers, their order, the channel rounding (``make_divisible`` to multiples of 8), the squeeze-and-excitation
blocks (squeeze to ``make_divisible(expanded / 4)`` channels, ReLU, hard sigmoid), the activations (ReLU in the
first three blocks, hardswish after), BatchNorm with ``eps = 0.001``, the classifier (576 -> 1024, hardswish,
dropout 0.2, -> classes) and the initialisation (Kaiming normal, fan-out, for convolutions; N(0, 0.01) for
linear layers; zero biases) follow ``torchvision.models.mobilenet_v3_small`` (width 1, dilation 1): 2,542,856
trainable parameters for 1000 classes, 1,528,106 for 10 (tested). No pretrained weights.

Per-sample gradients need samples that do not interact (:func:`~privfedstat.deep.per_sample.check_model`):
fit the network in eval mode (BatchNorm then applies its running statistics, the identity at initialisation,
and dropout is off) or build it with ``norm="group"``: GroupNorm of 8 groups in place of every BatchNorm, the
same number of trainable parameters (a scale and a shift per channel) **[I: the paper does not say how its
MobileNet was normalised; its clients train without privacy]**.
"""

from __future__ import annotations

from functools import partial

from torch import nn

__all__ = ["MobileNetV3Small", "make_divisible", "SMALL_CONFIG"]

#: the inverted residual blocks of MobileNetV3-Small: (kernel, expanded channels, out channels, SE, activation, stride)
SMALL_CONFIG = (
    (3, 16, 16, True, "RE", 2),
    (3, 72, 24, False, "RE", 2),
    (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2),
    (5, 240, 40, True, "HS", 1),
    (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1),
    (5, 144, 48, True, "HS", 1),
    (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1),
    (5, 576, 96, True, "HS", 1),
)


def make_divisible(v: float, divisor: int = 8) -> int:
    """The nearest multiple of ``divisor`` to ``v`` (at least ``divisor``), not more than 10% below ``v`` (torchvision's
    ``_make_divisible``)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv(cin: int, cout: int, kernel: int, norm, activation, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """torchvision's ``Conv2dNormActivation``: convolution without bias (a norm follows), norm, activation."""
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False), norm(cout)]
    return nn.Sequential(*layers, *([activation()] if activation is not None else []))


class SqueezeExcitation(nn.Module):
    """torchvision's ``SqueezeExcitation`` as MobileNetV3 uses it: ``x * hardsigmoid(fc2(relu(fc1(avgpool(x)))))``."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        return x * self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))


class InvertedResidual(nn.Module):
    """One MobileNetV3 block: 1x1 expansion (if widened), depthwise k x k, optional SE, 1x1 projection; a residual
    connection when the stride is 1 and the channels are kept."""

    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act: str, stride: int, norm) -> None:
        super().__init__()
        activation = nn.Hardswish if act == "HS" else nn.ReLU
        self.use_res_connect = stride == 1 and cin == cout
        layers = [_conv(cin, expanded, 1, norm, activation)] if expanded != cin else []
        layers.append(_conv(expanded, expanded, kernel, norm, activation, stride, groups=expanded))
        if se:
            layers.append(SqueezeExcitation(expanded, make_divisible(expanded // 4)))
        layers.append(_conv(expanded, cout, 1, norm, None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        out = self.block(x)
        return out + x if self.use_res_connect else out


class MobileNetV3Small(nn.Module):
    """MobileNetV3-Small (torchvision's ``mobilenet_v3_small(weights=None)``) for 3-channel images.

    Parameters
    ----------
    num_classes : int, default 1000
    dropout : float, default 0.2
        Dropout before the last layer (active in training mode only).
    norm : {"batch", "group"}, default "batch"
        BatchNorm2d (torchvision's, ``eps=0.001, momentum=0.01``) or GroupNorm with 8 groups (per-sample
        gradients in training mode; the same trainable parameters).

    Any input of at least 32 x 32 pixels (five stride-2 layers; the average pool makes the head size-free).
    """

    def __init__(self, num_classes: int = 1000, *, dropout: float = 0.2, norm: str = "batch") -> None:
        super().__init__()
        if norm not in ("batch", "group"):
            raise ValueError(f"norm must be 'batch' or 'group', got {norm!r}.")
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01) if norm == "batch" else partial(nn.GroupNorm, 8)
        layers = [_conv(3, 16, 3, norm_layer, nn.Hardswish, stride=2)]
        cin = 16
        for kernel, expanded, cout, se, act, stride in SMALL_CONFIG:
            layers.append(InvertedResidual(cin, kernel, make_divisible(expanded), make_divisible(cout), se, act, stride,
                                           norm_layer))
            cin = make_divisible(cout)
        layers.append(_conv(cin, 6 * cin, 1, norm_layer, nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * cin, 1024), nn.Hardswish(), nn.Dropout(p=dropout),
                                        nn.Linear(1024, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))
