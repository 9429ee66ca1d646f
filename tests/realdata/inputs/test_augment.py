"""Tests of realdata/inputs/augment.py against torchvision.transforms.v2 (the per-image reference):
parameter distributions, rates, factor ranges, identity at zero strength, per-image equality
of the ops, the crop against resized_crop, reproducibility."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from realdata.inputs.augment import AugmentParams, SimCLRAugment

ALPHA = 1e-4  # significance level of the distribution tests (several per test)
OPS = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _smooth(b: int, c: int, h: int, w: int, seed: int) -> torch.Tensor:
    """Smooth random images in [0, 1] (neighbouring pixels differ little)."""
    g = _gen(seed)
    low = torch.rand(b, c, 4, 4, generator=g)
    return torch.nn.functional.interpolate(low, size=(h, w), mode="bilinear", align_corners=False)


def _reference(x: torch.Tensor, p: AugmentParams, size: int) -> torch.Tensor:
    """torchvision's per-image functional ops with the same parameters."""
    out = []
    for b in range(x.shape[0]):
        left, top, w, h = p.boxes[b].tolist()
        y = TF.resized_crop(x[b], top, left, h, w, [size, size], antialias=True)
        if p.flip[b]:
            y = TF.hflip(y)
        for op in p.order[b].tolist():
            y = OPS[op](y, float(p.factors[b, op]))
        if p.gray[b] and x.shape[1] == 3:
            y = TF.rgb_to_grayscale(y, 3)
        out.append(y)
    return torch.stack(out)


def test_same_generator_state_same_views():
    aug = SimCLRAugment(32)
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=_gen(0))
    a1, a2 = aug.two_views(x, _gen(5))
    b1, b2 = aug.two_views(x, _gen(5))
    assert torch.equal(a1, b1) and torch.equal(a2, b2)
    assert not torch.equal(a1, a2)
    c1, _ = aug.two_views(x, _gen(6))
    assert not torch.equal(a1, c1)
    assert a1.shape == (16, 3, 32, 32) and a1.dtype == torch.float32
    assert float(a1.min()) >= 0.0 and float(a1.max()) <= 1.0
    # uint8 input is x / 255
    f1 = aug(x.float() / 255.0, _gen(5))
    torch.testing.assert_close(f1, a1, atol=1e-6, rtol=0)
    assert aug(x, _gen(5), dtype=torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.parametrize("jitter_p", [0.0, 1.0])
def test_zero_strength_is_the_identity(jitter_p):
    x = torch.randint(0, 256, (8, 3, 24, 24), dtype=torch.uint8, generator=_gen(1))
    ident = SimCLRAugment(
        24,
        scale=(1, 1),
        ratio=(1, 1),
        flip_p=0,
        brightness=0,
        contrast=0,
        saturation=0,
        hue=0,
        jitter_p=jitter_p,
        gray_p=0,
    )
    assert torch.equal(ident(x, _gen(0)), x.float() / 255.0)
    # non-zero strengths but never applied: also exactly the identity
    never = SimCLRAugment(24, scale=(1, 1), ratio=(1, 1), flip_p=0, jitter_p=0, gray_p=0)
    assert torch.equal(never(x, _gen(0)), x.float() / 255.0)
    grey = torch.randint(0, 256, (8, 1, 24, 24), dtype=torch.uint8, generator=_gen(2))
    assert torch.equal(never(grey, _gen(0)), grey.float() / 255.0)


def test_crop_distributions_match_torchvision():
    n = 4000
    aug = SimCLRAugment(32)
    p = aug.sample_params(n, 32, 32, _gen(3))
    left, top, w, h = p.boxes.T.double()
    ref = v2.RandomResizedCrop(32)
    torch.manual_seed(0)
    img = torch.zeros(3, 32, 32)
    rp = [ref.make_params([img]) for _ in range(n)]
    rw = torch.tensor([r["width"] for r in rp], dtype=torch.float64)
    rh = torch.tensor([r["height"] for r in rp], dtype=torch.float64)
    assert stats.ks_2samp((w * h).numpy(), (rw * rh).numpy()).pvalue > ALPHA  # area
    assert stats.ks_2samp((w / h).numpy(), (rw / rh).numpy()).pvalue > ALPHA  # aspect ratio
    assert stats.ks_2samp(w.numpy(), rw.numpy()).pvalue > ALPHA
    assert ((w >= 1) & (w <= 32) & (h >= 1) & (h <= 32)).all()
    assert ((left >= 0) & (left + w <= 32) & (top >= 0) & (top + h <= 32)).all()
    # offsets uniform over the free range
    free = w < 32
    u = (left[free] / (32 - w[free])).numpy()
    assert abs(u.mean() - 0.5) < 4 * math.sqrt(1 / 12 / u.size)
    # the range of areas (scale 0.08..1 of 1024 px, up to rounding of w and h)
    frac = (w * h / 1024).numpy()
    assert frac.min() > 0.06 and frac.max() <= 1.0 and frac.min() < 0.1


def test_crop_fallback_is_torchvision_central_crop():
    # no draw can fit: torchvision falls back to the central crop clamped to the ratio range
    aug = SimCLRAugment(8, scale=(0.9, 1.0), ratio=(3.0, 4.0))
    p = aug.sample_params(50, 30, 30, _gen(0))
    ref = v2.RandomResizedCrop(8, scale=(0.9, 1.0), ratio=(3.0, 4.0))
    r = ref.make_params([torch.zeros(3, 30, 30)])
    expected = torch.tensor([r["left"], r["top"], r["width"], r["height"]])
    assert torch.equal(p.boxes, expected.expand(50, 4))


def test_rates_and_factor_ranges():
    n = 20000
    aug = SimCLRAugment(32)
    p = aug.sample_params(n, 32, 32, _gen(4))
    for rate, expected in ((p.flip, 0.5), (p.gray, 0.2)):
        assert abs(rate.double().mean().item() - expected) < 4 * math.sqrt(expected * (1 - expected) / n)
    jit = (p.factors != torch.tensor([1.0, 1.0, 1.0, 0.0])).any(dim=1)
    assert abs(jit.double().mean().item() - 0.8) < 4 * math.sqrt(0.16 / n)
    f = p.factors[jit].double()
    for k, (lo, hi) in enumerate([(0.2, 1.8)] * 3 + [(-0.2, 0.2)]):
        assert f[:, k].min() >= lo and f[:, k].max() <= hi
        assert stats.kstest(((f[:, k] - lo) / (hi - lo)).numpy(), "uniform").pvalue > ALPHA
    assert torch.equal(p.factors[~jit], torch.tensor([1.0, 1.0, 1.0, 0.0]).expand(int((~jit).sum()), 4))
    # torchvision's ColorJitter draws the same ranges
    cj = v2.ColorJitter(0.8, 0.8, 0.8, 0.2)
    assert (cj.brightness, cj.contrast, cj.saturation, cj.hue) == aug.factor_ranges()
    # every order is a permutation, all 24 equally likely
    assert torch.equal(p.order.sort(dim=1).values, torch.arange(4).expand(n, 4))
    perms = {q: i for i, q in enumerate(itertools.permutations(range(4)))}
    counts = np.bincount([perms[tuple(r)] for r in p.order.tolist()], minlength=24)
    assert stats.chisquare(counts).pvalue > ALPHA
    # independent of one another (flip vs grey)
    table = np.array([[int(((p.flip == a) & (p.gray == b)).sum()) for b in (0, 1)] for a in (0, 1)])
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_fixed_box_crop_equals_resized_crop():
    x = torch.rand(3, 3, 40, 40, generator=_gen(7))
    aug = SimCLRAugment(32, flip_p=0, jitter_p=0, gray_p=0)
    # a box of the output size: a plain slice, exactly
    p = AugmentParams(
        torch.tensor([[3, 5, 32, 32]] * 3),
        torch.zeros(3, dtype=torch.bool),
        torch.tensor([[1.0, 1.0, 1.0, 0.0]] * 3),
        torch.arange(4).expand(3, 4),
        torch.zeros(3, dtype=torch.bool),
    )
    assert torch.equal(aug.apply(x, p), x[:, :, 5:37, 3:35])
    # upscaled boxes: where an output pixel samples inside the box, equal to torchvision; where
    # it samples within half a pixel of the box edge, roi_align blends in the neighbouring
    # pixel outside the box (resized_crop repeats the edge): within one pixel step
    xs = _smooth(3, 3, 40, 40, seed=8)
    box = torch.tensor([[4, 6, 13, 17], [8, 0, 32, 32], [20, 9, 9, 31]])
    p = AugmentParams(box, p.flip, p.factors, p.order, p.gray)
    ours = aug.apply(xs, p)
    ref = _reference(xs, p, 32)
    j = torch.arange(32, dtype=torch.float64)
    for b, (_left, _top, w, h) in enumerate(box.tolist()):
        cols = ((j + 0.5) * w / 32 - 0.5 >= 0) & ((j + 0.5) * w / 32 - 0.5 <= w - 1)
        rows = ((j + 0.5) * h / 32 - 0.5 >= 0) & ((j + 0.5) * h / 32 - 0.5 <= h - 1)
        inside = rows[:, None] & cols[None, :]
        assert inside.sum() >= (32 - 2 * math.ceil(32 / (2 * min(w, h)))) ** 2
        torch.testing.assert_close(ours[b][:, inside], ref[b][:, inside], atol=1e-5, rtol=0)
    step = max((xs[..., 1:, :] - xs[..., :-1, :]).abs().max(), (xs[..., 1:] - xs[..., :-1]).abs().max())
    assert (ours - ref).abs().max() <= float(step) + 1e-6
    torch.testing.assert_close(ours[1], ref[1], atol=1e-6, rtol=0)  # same size: everywhere


@pytest.mark.parametrize("channels", [3, 1])
def test_full_pipeline_equals_torchvision_per_image(channels):
    x = torch.rand(64, channels, 32, 32, generator=_gen(9))
    aug = SimCLRAugment(32)
    p = aug.sample_params(64, 32, 32, _gen(10))
    p = AugmentParams(torch.tensor([[0, 0, 32, 32]] * 64), p.flip, p.factors, p.order, p.gray)
    ours = aug.apply(x, p)
    ref = _reference(x, p, 32)
    torch.testing.assert_close(ours, ref, atol=2e-5, rtol=0)
    # with random boxes on smooth images: agreement up to the crop's border treatment
    xs = _smooth(64, channels, 32, 32, seed=11)
    p = aug.sample_params(64, 32, 32, _gen(12))
    diff = (aug.apply(xs, p) - _reference(xs, p, 32)).abs()
    assert diff.mean() < 2e-3 and torch.quantile(diff.flatten(), 0.99) < 0.02


def test_grayscale_equals_torchvision():
    x = torch.rand(5, 3, 12, 12, generator=_gen(15))
    aug = SimCLRAugment(12, scale=(1, 1), ratio=(1, 1), flip_p=0, jitter_p=0, gray_p=1.0)
    torch.testing.assert_close(aug(x, _gen(0)), TF.rgb_to_grayscale(x, 3), atol=1e-6, rtol=0)


def test_flip_is_a_mirror():
    x = torch.rand(4, 3, 10, 10, generator=_gen(16))
    aug = SimCLRAugment(10, scale=(1, 1), ratio=(1, 1), flip_p=1.0, jitter_p=0, gray_p=0)
    assert torch.equal(aug(x, _gen(0)), x.flip(-1))


def test_downscaled_output_is_close_to_antialiased_resize():
    xs = _smooth(4, 3, 64, 64, seed=17)
    aug = SimCLRAugment(32, scale=(1, 1), ratio=(1, 1), flip_p=0, jitter_p=0, gray_p=0)
    ref = TF.resize(xs, [32, 32], antialias=True)
    assert (aug(xs, _gen(0)) - ref).abs().max() < 0.02


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"size": 0}, "size"),
        ({"size": 32, "scale": (0.5, 0.1)}, "scale"),
        ({"size": 32, "ratio": (0.0, 1.0)}, "ratio"),
        ({"size": 32, "flip_p": 1.5}, "flip_p"),
        ({"size": 32, "hue": 0.6}, "hue"),
        ({"size": 32, "brightness": -1}, "brightness"),
        ({"size": 32, "scale": (0.0, 0.0)}, "scale"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SimCLRAugment(**kwargs)


def test_input_validation():
    aug = SimCLRAugment(8)
    with pytest.raises(ValueError, match="images"):
        aug(torch.zeros(2, 4, 8, 8), _gen(0))
    with pytest.raises(ValueError, match="images"):
        aug(torch.zeros(2, 3, 8), _gen(0))
    with pytest.raises(ValueError, match="uint8 or floating"):
        aug(torch.zeros(2, 3, 8, 8, dtype=torch.int32), _gen(0))
    p = aug.sample_params(3, 8, 8, _gen(0))
    with pytest.raises(ValueError, match="params"):
        aug.apply(torch.zeros(2, 3, 8, 8), p)
    empty = aug(torch.zeros(0, 3, 8, 8), _gen(0))
    assert empty.shape == (0, 3, 8, 8)
