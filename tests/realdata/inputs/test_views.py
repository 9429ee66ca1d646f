"""Tests of realdata/inputs/views.py: the authors' single normalised view and label positives."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import v2

from realdata.inputs.views import HCL_MEAN, HCL_STD, hcl_view, label_positive_mask, normalize, to_float


def test_hcl_view_equals_totensor_normalize_per_image():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8, generator=g)
    ref = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(HCL_MEAN, HCL_STD)])
    expected = torch.stack([ref(xi) for xi in x])
    torch.testing.assert_close(hcl_view(x), expected, atol=1e-6, rtol=0)
    # the authors' constants are CIFAR-10 statistics, applied to every dataset
    assert HCL_MEAN == (0.4914, 0.4822, 0.4465) and HCL_STD == (0.2023, 0.1994, 0.2010)
    # float input in [0, 1] gives the same
    torch.testing.assert_close(
        hcl_view(x.double() / 255, dtype=torch.float64), expected.double(), atol=1e-6, rtol=0
    )


def test_normalize_validates_and_handles_one_channel():
    grey = torch.full((2, 1, 8, 8), 255, dtype=torch.uint8)
    out = normalize(grey, (0.5,), (0.25,))
    assert torch.allclose(out, torch.full_like(out, 2.0))
    with pytest.raises(ValueError, match="one value per channel"):
        hcl_view(grey)
    with pytest.raises(ValueError, match="std"):
        normalize(grey, (0.5,), (0.0,))
    with pytest.raises(ValueError, match="images"):
        to_float(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError, match="uint8 or floating"):
        to_float(torch.zeros(1, 3, 8, 8, dtype=torch.int64))
    assert torch.equal(to_float(grey), torch.ones(2, 1, 8, 8))


def test_label_positive_mask_includes_the_anchor():
    labels = torch.tensor([3, 1, 3, 0])
    P = label_positive_mask(labels)
    expected = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(P, expected)
    assert P.diagonal().all()
    for i in range(4):
        for j in range(4):
            assert bool(P[i, j]) == (int(labels[i]) == int(labels[j]))
    with pytest.raises(ValueError, match="labels"):
        label_positive_mask(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="integers"):
        label_positive_mask(torch.zeros(3))
