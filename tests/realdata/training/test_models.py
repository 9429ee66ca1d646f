"""Tests of realdata/training/models.py: shapes, stems, heads, normalisations, channels_last, counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models import resnet18, resnet50

from realdata.training.models import (
    ARCHS,
    ContrastiveModel,
    HCLHead,
    ModelOutput,
    WeiNCEProjector,
    build_model,
    default_normalization,
    default_out_dim,
    default_stem,
    resnet_backbone,
)
from theory.options import HEADS


class SmallCNNStub(nn.Module):
    """A backbone of feature dimension 2 (the projection tests use an identity head)."""

    feat_dim = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("depth,builder,feat", [(18, resnet18, 512), (50, resnet50, 2048)])
def test_resnet_parameter_counts_equal_torchvision_minus_fc(depth, builder, feat):
    tv = builder(weights=None)
    fc = _count(tv.fc)
    std = resnet_backbone(depth, stem="imagenet")
    assert _count(std) == _count(tv) - fc
    cifar = resnet_backbone(depth, stem="cifar")
    # the CIFAR stem swaps the 7x7x3x64 conv1 for a 3x3x3x64 one
    assert _count(cifar) == _count(tv) - fc - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64
    assert std.feat_dim == cifar.feat_dim == feat
    expected = {18: 11_689_512 - 513_000, 50: 25_557_032 - 2_049_000}[depth]
    assert _count(std) == expected


def test_cifar_stem_layout_and_output_shapes():
    net = resnet_backbone(18, stem="cifar")
    c = net.conv1
    assert (c.kernel_size, c.stride, c.padding, c.bias) == ((3, 3), (1, 1), (1, 1), None)
    assert isinstance(net.maxpool, nn.Identity) and isinstance(net.fc, nn.Identity)
    std = resnet_backbone(18, stem="imagenet")
    assert std.conv1.kernel_size == (7, 7) and isinstance(std.maxpool, nn.MaxPool2d)
    net.eval()
    x = torch.randn(2, 3, 32, 32)
    assert net(x).shape == (2, 512)
    # the CIFAR stem keeps the resolution: layer4 sees 4x4 maps of a 32x32 input
    assert nn.Sequential(
        net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3, net.layer4
    )(x).shape == (2, 512, 4, 4)
    assert default_stem("cifar100") == "cifar" and default_stem("stl10") == "imagenet"
    assert default_stem("tiny-imagenet") == "imagenet" and default_stem(image_size=28) == "cifar"
    with pytest.raises(ValueError, match="image_size"):
        default_stem("mnist")


def test_heads_layout_and_defaults():
    m = build_model("resnet18", "hcl", num_classes=100, seed=0)
    assert m.out_dim == 99 and m.normalization == "ball" and m.feat_dim == 512
    lin1, bn, relu, lin2 = m.head
    assert (lin1.in_features, lin1.out_features, lin1.bias) == (512, 512, None)
    assert isinstance(bn, nn.BatchNorm1d) and bn.num_features == 512 and isinstance(relu, nn.ReLU)
    assert (lin2.in_features, lin2.out_features) == (512, 99) and lin2.bias is not None
    w = build_model("resnet18", "weince", num_classes=100, seed=0)
    assert w.out_dim == 64 and w.normalization == "sphere"  # the WeiNCE methods' normalisation
    a, _relu, b = w.head
    assert (a.in_features, a.out_features, a.bias, b.out_features, b.bias) == (512, 512, None, 64, None)
    assert not any(isinstance(x, nn.BatchNorm1d) for x in w.head.modules())
    r50 = build_model("resnet50", "hcl", num_classes=10, stem="cifar", seed=0)
    assert r50.head[0].in_features == 2048 and r50.out_dim == 9
    ident = build_model("smallcnn", "identity", num_classes=10, in_channels=1)
    assert ident.out_dim == ident.feat_dim == 128
    assert isinstance(HCLHead(8, 3), nn.Sequential) and isinstance(WeiNCEProjector(8), nn.Sequential)
    assert set(ARCHS) == {"resnet18", "resnet50", "smallcnn"} and set(HEADS) == {"hcl", "weince", "identity"}


@pytest.mark.parametrize(
    "arch,shape,stem",
    [
        ("resnet18", (3, 32, 32), "cifar"),
        ("resnet18", (3, 64, 64), "imagenet"),
        ("resnet50", (3, 32, 32), "cifar"),
        ("smallcnn", (1, 8, 8), None),
    ],
)
def test_forward_returns_h_and_z(arch, shape, stem):
    m = build_model(arch, "hcl", num_classes=10, stem=stem, in_channels=shape[0], seed=1)
    out = m(torch.randn(4, *shape))
    assert isinstance(out, ModelOutput)
    assert out.h.shape == (4, m.feat_dim) and out.z.shape == (4, 9)
    assert (out.z.norm(dim=1) <= 1 + 1e-6).all()


def test_the_projection_is_normalised_in_float32_with_finite_gradients_at_zero():
    head = nn.Identity()
    for norm, want in (
        ("ball", [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]),
        ("sphere", [[0.6, 0.8], [0.6, 0.8], [0.0, 0.0]]),
    ):
        model = ContrastiveModel(SmallCNNStub(), head, norm, 2)
        h = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]], requires_grad=True)
        z = model.project(h)
        torch.testing.assert_close(z.detach(), torch.tensor(want))
        (g,) = torch.autograd.grad(z.sum(), h)
        assert torch.isfinite(g).all()
    half = ContrastiveModel(SmallCNNStub(), head, "ball", 5).project(
        torch.randn(3, 5, dtype=torch.bfloat16) * 10
    )
    assert half.dtype == torch.float32 and (half.norm(dim=1) <= 1 + 1e-6).all()
    with pytest.raises(ValueError, match="normalization"):
        ContrastiveModel(SmallCNNStub(), head, "l2", 2)
    # a head's default normalisation is its methods' (theory.options.METHODS)
    assert [default_normalization(h) for h in HEADS] == ["ball", "sphere", "none"]
    assert [default_out_dim(h, 10) for h in HEADS] == [9, 64, None]
    assert build_model("smallcnn", "weince", 10, in_channels=1).normalization == "sphere"
    m = build_model("smallcnn", "hcl", 10, normalization="sphere", in_channels=1, seed=0)
    torch.testing.assert_close(m(torch.randn(5, 1, 8, 8)).z.norm(dim=1), torch.ones(5))


def test_channels_last_gives_the_same_outputs():
    x = torch.randn(3, 3, 32, 32)
    a = build_model("resnet18", "weince", 10, seed=3).eval()
    b = build_model("resnet18", "weince", 10, seed=3, channels_last=True).eval()
    assert b.backbone.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        oa, ob = a(x), b(x)
    torch.testing.assert_close(oa.h, ob.h, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(oa.z, ob.z, atol=1e-4, rtol=1e-4)
    # backward works in channels_last too
    b.train()
    b(x).z.sum().backward()
    assert all(p.grad is not None for p in b.parameters() if p.requires_grad)


def test_seed_is_deterministic_and_leaves_global_state():
    state = torch.random.get_rng_state()
    a = build_model("smallcnn", "hcl", 10, in_channels=1, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    b = build_model("smallcnn", "hcl", 10, in_channels=1, seed=7)
    c = build_model("smallcnn", "hcl", 10, in_channels=1, seed=8)
    sa, sb, sc = (m.state_dict() for m in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_build_model_validation():
    for kwargs, match in [
        ({"arch": "vit"}, "arch"),
        ({"head": "mlp"}, "head"),
        ({"num_classes": 1}, "num_classes"),
        ({"normalization": "l1"}, "normalization"),
        ({"stem": "tiny"}, "stem"),
        ({"out_dim": 0}, "out_dim"),
    ]:
        args = {"arch": "smallcnn", "head": "hcl", "num_classes": 10, "in_channels": 1, **kwargs}
        with pytest.raises(ValueError, match=match):
            build_model(**args)
    with pytest.raises(ValueError, match="identity"):
        build_model("smallcnn", "identity", 10, out_dim=3)
    m = build_model("smallcnn", "hcl", 10, in_channels=1)
    with pytest.raises(ValueError, match="x must have shape"):
        m(torch.randn(2, 64))
    with pytest.raises(ValueError, match="normalization"):
        ContrastiveModel(m.backbone, m.head, "unit", 9)
