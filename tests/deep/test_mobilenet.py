"""MobileNetV3-Small without torchvision (issue 14): torchvision's parameter counts, the channel rounding, per-sample
gradients, and FedNMap's Fig. 6 study (and its CLI) at a tiny scale."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from privfedstat import cli  # noqa: E402
from privfedstat.deep.fednmap_study import mobilenet_images  # noqa: E402
from privfedstat.deep.mobilenet import MobileNetV3Small, make_divisible  # noqa: E402
from privfedstat.deep.per_sample import PerSampleGradients, check_model  # noqa: E402

torch.set_num_threads(1)

#: torchvision's published count for mobilenet_v3_small (1000 classes); 10 classes: the last layer 1024 x 10 + 10
TORCHVISION_PARAMS = 2_542_856
TEN_CLASSES = TORCHVISION_PARAMS - (1024 * 1000 + 1000) + (1024 * 10 + 10)


def count(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_parameter_counts_are_torchvisions(norm):
    assert TEN_CLASSES == 1_528_106
    assert count(MobileNetV3Small(1000, norm=norm)) == TORCHVISION_PARAMS
    assert count(MobileNetV3Small(10, norm=norm)) == TEN_CLASSES


def test_channel_rounding_and_layout():
    # squeeze widths of the SE blocks (expanded / 4): 16 -> 8, 96 -> 24, 240 -> 64, 120 -> 32, 144 -> 40, 576 -> 144
    assert [make_divisible(c // 4) for c in (16, 96, 240, 120, 144, 288, 576)] == [8, 24, 64, 32, 40, 72, 144]
    assert make_divisible(18) == 24  # never more than 10% below
    m = MobileNetV3Small(10)
    assert m.features[0][0].out_channels == 16 and m.features[-1][0].out_channels == 576
    assert [type(x).__name__ for x in m.classifier] == ["Linear", "Hardswish", "Dropout", "Linear"]
    assert m.classifier[2].p == 0.2 and m.classifier[0].out_features == 1024
    assert sum(b.use_res_connect for b in m.features[1:-1]) == 6  # stride 1, same channels
    with pytest.raises(ValueError, match="norm"):
        MobileNetV3Small(norm="layer")


def test_per_sample_gradients_in_eval_mode_or_with_group_norm():
    torch.manual_seed(0)
    x, y = torch.randn(3, 3, 32, 32), torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="training mode"):
        check_model(MobileNetV3Small(10))
    model = MobileNetV3Small(10, norm="group").eval()
    check_model(model)
    psg = PerSampleGradients(model, torch.nn.functional.cross_entropy)
    params = dict(model.named_parameters())
    mean = psg.mean_gradient(params, x, y)
    clipped = psg.clipped_mean(params, x, y, float("inf"))  # per-sample gradients, averaged
    for a, b in zip(mean, clipped):  # the clipped mean is accumulated and returned in float64
        assert b.dtype == torch.float64
        torch.testing.assert_close(a.double(), b, atol=1e-6, rtol=1e-4)


def test_digit_images_are_upsampled_to_three_channels():
    x, y = mobilenet_images("digits", n_images=5)
    assert x.shape == (5, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (5,)
    torch.testing.assert_close(x[:, 0], x[:, 2])
    with pytest.raises(ValueError, match="data-dir"):
        mobilenet_images("cifar")


@pytest.mark.slow
def test_fig6_study_and_cli_at_a_tiny_scale(tmp_path, capsys):
    argv = ["reproduce", "fednmap-mobilenet", "--out", str(tmp_path), "--clients", "2", "--local-steps", "1",
            "--rounds", "1", "--samples", "16", "--threads", "1", "--no-progress"]
    assert cli.main(argv) == 0
    assert "hoyer" in capsys.readouterr().out
    df = pd.read_csv(tmp_path / "fednmap-mobilenet.csv")
    assert list(df.method.unique()) == ["FedNMap", "Zhang", "FedCanon"] and set(df["round"]) == {0, 1}
    start = df[df["round"] == 0]
    # the same initial network (FedNMap's and Zhang's x_0 = prox(z_0) thresholds it slightly; FedCanon's x_0 = z_0)
    assert start.hoyer.iloc[0] == start.hoyer.iloc[1] and np.allclose(start.hoyer, start.hoyer.iloc[0], rtol=1e-3)
    assert np.allclose(start.loss, np.log(10), atol=0.05)
    assert np.all((df.hoyer > 0) & (df.hoyer < 1)) and (tmp_path / "fednmap-mobilenet.png").exists()
