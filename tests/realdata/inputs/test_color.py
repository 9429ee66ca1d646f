"""Tests of realdata/inputs/color.py: the batched per-image colour ops against torchvision."""

from __future__ import annotations

import torch
from torchvision.transforms.v2 import functional as TF

from realdata.inputs.augment import AugmentParams, SimCLRAugment
from realdata.inputs.color import adjust_hue, hsv_to_rgb, rgb_to_hsv

OPS = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_accelerator_path_without_skipped_passes_is_identical(monkeypatch):
    # on an accelerator no pass is skipped (that test would synchronise); same views
    import realdata.inputs.color as color_mod

    x = torch.randint(0, 256, (32, 3, 16, 16), dtype=torch.uint8, generator=_gen(20))
    for aug in (SimCLRAugment(16), SimCLRAugment(16, jitter_p=0.1, hue=0.0)):
        expected = aug(x, _gen(21))
        with monkeypatch.context() as m:
            m.setattr(color_mod, "_skip_pass", lambda x, active: False)
            assert torch.equal(aug(x, _gen(21)), expected)


def test_jitter_ops_vectorised_match_torchvision_extremes():
    x = torch.rand(6, 3, 16, 16, generator=_gen(13), dtype=torch.float64)
    for op, factors in enumerate(
        [
            [0.0, 0.2, 1.0, 1.8, 3.0, 0.5],
            [0.0, 0.2, 1.0, 1.8, 3.0, 0.5],
            [0.0, 0.2, 1.0, 1.8, 3.0, 0.5],
            [-0.5, -0.2, 0.0, 0.2, 0.5, 0.37],
        ]
    ):
        f = torch.tensor([[1.0, 1.0, 1.0, 0.0]] * 6, dtype=torch.float64)
        f[:, op] = torch.tensor(factors, dtype=torch.float64)
        order = torch.tensor([[op] + [k for k in range(4) if k != op]] * 6)
        none = torch.zeros(6, dtype=torch.bool)
        p = AugmentParams(torch.tensor([[0, 0, 16, 16]] * 6), none, f, order, none)
        ours = SimCLRAugment(16, brightness=2, contrast=2, saturation=2, hue=0.5).apply(x, p, torch.float64)
        ref = torch.stack([OPS[op](x[b].float(), factors[b]) for b in range(6)]).double()
        torch.testing.assert_close(ours, ref, atol=2e-6, rtol=0)


def test_hsv_round_trip_and_hue_of_grey_pixels():
    x = torch.rand(4, 3, 8, 8, generator=_gen(14), dtype=torch.float64)
    x[0] = 0.3  # grey: hue undefined, must stay grey and finite
    x[1, :, 0, 0] = torch.tensor([0.0, 0.0, 0.0])
    torch.testing.assert_close(hsv_to_rgb(rgb_to_hsv(x)), x, atol=1e-12, rtol=0)
    y = adjust_hue(x, torch.tensor([0.5, 0.1, -0.3, 0.0], dtype=torch.float64))
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y[0], x[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(y[3], x[3], atol=1e-12, rtol=0)
    ref = TF.adjust_hue(x[1].float(), 0.1).double()
    torch.testing.assert_close(y[1], ref, atol=2e-6, rtol=0)
