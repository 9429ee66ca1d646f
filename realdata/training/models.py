"""Encoders for the real-data runs: a backbone ``f`` and a head ``g``, returning ``h`` and ``z``.

A :class:`ContrastiveModel` maps images ``x`` to the backbone feature ``h = f(x)`` (the input of
frozen-feature probes) and the projection ``z = normalise(g(h))`` (the input of the losses and of
the authors' NCM classifier); :meth:`ContrastiveModel.forward` returns both as a
:class:`ModelOutput`.

Backbones (:data:`ARCHS`):

* ``resnet18`` / ``resnet50``: torchvision's ResNets (``weights=None``), ``fc`` replaced by
  ``Identity`` (``h`` of 512 / 2048 dimensions). The **CIFAR stem** (``stem="cifar"``) replaces
  ``conv1`` by a 3x3 stride-1 convolution (padding 1, no bias) and ``maxpool`` by ``Identity``,
  as both papers do for 32x32 inputs (arXiv 2311.05139, Sec. 5; arXiv 2606.00262, Sec. 5); the
  **standard stem** (``stem="imagenet"``) keeps the 7x7 stride-2 convolution and the max-pool,
  as the WeiNCE recipe does for STL-10 (96x96). :func:`default_stem` chooses per dataset: CIFAR
  -> ``cifar``; Tiny-ImageNet (64x64) and STL-10 -> ``imagenet``. (The hard-negative authors'
  model class applies the CIFAR stem to every input size; pass ``stem="cifar"`` to match it on
  Tiny-ImageNet, at four times the compute.)
* ``smallcnn``: three 3x3 convolutions with batch norm for the 8x8 greyscale digits
  (``h`` of ``4 * width`` dimensions).

Heads (:data:`theory.options.HEADS`):

* ``hcl``, the hard-negative authors' head: ``Linear(feat, 512, bias=False) -> BatchNorm1d(512)
  -> ReLU -> Linear(512, d)``, ``d = C - 1`` by default (the smallest dimension that holds a
  simplex ETF), normalisation ``ball`` by default (arXiv 2311.05139, Sec. 5);
* ``weince``, the WeiNCE projector: ``Linear(feat, hidden, bias=False) -> ReLU ->
  Linear(hidden, 64, bias=False)``, no batch norm, ``hidden = feat`` (512 for ResNet-18),
  normalisation ``sphere`` by default (the loss uses cosines, so this only fixes the metrics'
  ``z``; arXiv 2606.00262, Sec. 5);
* ``identity``: ``z = h``.

Normalisations: :func:`theory.geometry.normalize` (``none``; ``ball``, ``z * min(1, 1/||z||)``, the
unit-ball projection of the authors' code; ``sphere``, ``z / ||z||``, 0 stays 0), in at least
float32, so under bf16 autocast ``z`` comes back in float32. A head's default normalisation is
that of the methods whose authors use it (:func:`default_normalization`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn
from torchvision.models import resnet18, resnet50

from realdata.datasets import DATASETS
from theory.geometry import normalize
from theory.options import HEADS, METHODS, NORMALIZATIONS, STEMS
from theory.validation import one_of

__all__ = [
    "ModelOutput",
    "ARCHS",
    "default_out_dim",
    "default_normalization",
    "default_stem",
    "resnet_backbone",
    "SmallCNN",
    "HCLHead",
    "WeiNCEProjector",
    "ContrastiveModel",
    "build_model",
]


class ModelOutput(NamedTuple):
    """What a :class:`ContrastiveModel` returns.

    Attributes:
        h: backbone features, ``(B, feat_dim)``.
        z: normalised projections, ``(B, out_dim)``.
    """

    h: torch.Tensor
    z: torch.Tensor


def default_stem(dataset: str | None = None, image_size: int | None = None) -> str:
    """The ResNet stem for a dataset (see the module doc) or, failing that, an image size.

    ``cifar`` for CIFAR-10/100 and inputs of at most 32 pixels; ``imagenet`` for Tiny-ImageNet,
    STL-10 and larger inputs.
    """
    if dataset is not None:
        if dataset in DATASETS and DATASETS[dataset].stem is not None:
            return str(DATASETS[dataset].stem)
        if image_size is None:
            raise ValueError(f"no default stem for dataset {dataset!r}; pass image_size")
    if image_size is None or image_size < 1:
        raise ValueError(f"image_size must be a positive integer, got {image_size!r}")
    return "cifar" if image_size <= 32 else "imagenet"


def resnet_backbone(depth: int = 18, stem: str = "cifar", in_channels: int = 3) -> nn.Module:
    """Torchvision ResNet-18/50 without pretrained weights, ``fc = Identity``.

    Args:
        depth: 18 or 50.
        stem: ``cifar`` (3x3 stride-1 ``conv1`` without bias, no max-pool) or ``imagenet``
            (torchvision's 7x7 stride-2 ``conv1`` and max-pool).
        in_channels: input channels (3; 1 for greyscale).

    Returns:
        The backbone; its attribute ``feat_dim`` is 512 (ResNet-18) or 2048 (ResNet-50).

    Shape:
        ``(B, in_channels, H, W)`` -> ``(B, feat_dim)``.
    """
    builders = {18: resnet18, 50: resnet50}
    if depth not in builders:
        raise ValueError(f"depth must be 18 or 50, got {depth!r}")
    one_of("stem", stem, STEMS)
    net = builders[depth](weights=None)
    feat = net.fc.in_features
    if stem == "cifar":
        net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
        net.maxpool = nn.Identity()
    elif in_channels != 3:
        net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
    net.fc = nn.Identity()
    net.feat_dim = feat
    return net


class SmallCNN(nn.Module):
    """A small CNN for 8x8 greyscale digits.

    ``[conv3x3(w) BN ReLU] -> [conv3x3(2w) BN ReLU] -> maxpool2 -> [conv3x3(4w) BN ReLU] ->
    global average pool``.

    Args:
        in_channels: input channels (1 for digits).
        width: ``w``; ``feat_dim = 4 w``.

    Shape:
        ``(B, in_channels, H, W)`` -> ``(B, 4 w)``.
    """

    def __init__(self, in_channels: int = 1, width: int = 32) -> None:
        super().__init__()
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width!r}")

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU(inplace=True)]  # fmt: skip

        self.features = nn.Sequential(
            *block(in_channels, width),
            *block(width, 2 * width),
            nn.MaxPool2d(2),
            *block(2 * width, 4 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.feat_dim = 4 * width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``h`` ``(B, 4 w)`` of images ``(B, C, H, W)``."""
        return self.features(x)


class HCLHead(nn.Sequential):
    """The hard-negative authors' head (arXiv 2311.05139, Sec. 5).

    ``Linear(feat, hidden, bias=False) -> BatchNorm1d(hidden) -> ReLU -> Linear(hidden, d)``.

    Shape:
        ``(B, feat)`` -> ``(B, d)``.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int = 512) -> None:
        super().__init__(
            nn.Linear(in_dim, hidden_dim, bias=False),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, out_dim, bias=True),
        )


class WeiNCEProjector(nn.Sequential):
    """The WeiNCE recipe's projector (arXiv 2606.00262, Sec. 5): no batch norm, no biases.

    ``Linear(feat, hidden, bias=False) -> ReLU -> Linear(hidden, out, bias=False)``.

    Shape:
        ``(B, feat)`` -> ``(B, out)``.
    """

    def __init__(self, in_dim: int, out_dim: int = 64, hidden_dim: int | None = None) -> None:
        hidden = in_dim if hidden_dim is None else hidden_dim
        super().__init__(
            nn.Linear(in_dim, hidden, bias=False),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, out_dim, bias=False),
        )


class ContrastiveModel(nn.Module):
    """Backbone + head + normalisation; ``forward(x)`` returns :class:`ModelOutput` ``(h, z)``.

    Args:
        backbone: module with attribute ``feat_dim``, ``(B, C, H, W) -> (B, feat_dim)``.
        head: ``(B, feat_dim) -> (B, out_dim)``.
        normalization: one of :data:`NORMALIZATIONS`, applied to the head's output.
        out_dim: ``d``.
        channels_last: keep parameters and inputs in ``torch.channels_last`` memory format.

    Shape:
        ``x`` ``(B, C, H, W)`` -> ``h`` ``(B, feat_dim)``, ``z`` ``(B, out_dim)``.
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: nn.Module,
        normalization: str,
        out_dim: int,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        one_of("normalization", normalization, NORMALIZATIONS)
        self.backbone = backbone
        self.head = head
        self.normalization = normalization
        self.feat_dim = _feat_dim(backbone)
        self.out_dim = int(out_dim)
        self.channels_last = bool(channels_last)
        if self.channels_last:
            self.to(memory_format=torch.channels_last)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone feature ``h``, ``(B, feat_dim)``."""
        if x.ndim != 4:
            raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.backbone(x)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """The normalised projection ``z`` of backbone features, ``(B, out_dim)``, in at least float32.

        :func:`theory.geometry.normalize` of the head's output, which is first cast to float32
        when it is half precision (under bf16 autocast), so the losses see float32 ``z``.
        """
        z = self.head(h)
        if z.dtype in (torch.float16, torch.bfloat16):
            z = z.float()
        return normalize(z, self.normalization)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        """``(h, z)`` of images ``(B, C, H, W)``."""
        h = self.features(x)
        return ModelOutput(h, self.project(h))

    def extra_repr(self) -> str:  # noqa: D102
        return (f"feat_dim={self.feat_dim}, out_dim={self.out_dim}, "
                f"normalization={self.normalization!r}, channels_last={self.channels_last}")  # fmt: skip


def _feat_dim(backbone: nn.Module) -> int:
    """The ``feat_dim`` attribute every backbone of :data:`ARCHS` carries."""
    value = getattr(backbone, "feat_dim", None)
    if not isinstance(value, int):
        raise ValueError(f"backbone must have an integer attribute feat_dim, got {value!r}")
    return value


def _resnet(depth: int) -> Callable[..., nn.Module]:
    def build(stem: str = "cifar", in_channels: int = 3, **_: object) -> nn.Module:
        return resnet_backbone(depth, stem, in_channels)

    build.__doc__ = f"ResNet-{depth} backbone (see :func:`resnet_backbone`)."
    return build


def _smallcnn(stem: str | None = None, in_channels: int = 1, width: int = 32, **_: object) -> nn.Module:
    """Small CNN backbone for digits (the stem does not apply)."""
    return SmallCNN(in_channels, width)


#: name -> backbone builder ``(stem, in_channels, **options) -> nn.Module`` with ``feat_dim``.
ARCHS: dict[str, Callable[..., nn.Module]] = {
    "resnet18": _resnet(18),
    "resnet50": _resnet(50),
    "smallcnn": _smallcnn,
}

#: Output dimension of the WeiNCE projector (arXiv 2606.00262, Sec. 5).
WEINCE_OUT_DIM = 64


def default_out_dim(head: str, num_classes: int) -> int | None:
    """The default ``d`` of a head.

    ``C - 1`` for ``hcl`` (the smallest dimension holding a simplex ETF), 64 for ``weince``, None
    for ``identity`` (``z = h``).
    """
    one_of("head", head, HEADS)
    return {"hcl": num_classes - 1, "weince": WEINCE_OUT_DIM, "identity": None}[head]


def default_normalization(head: str) -> str:
    """The default normalisation of a head: that of the methods whose authors use it.

    From :data:`theory.options.METHODS`: ``ball`` for ``hcl``, ``sphere`` for ``weince``; ``none``
    for ``identity``.
    """
    one_of("head", head, HEADS)
    norms = {m.normalization for m in METHODS.values() if m.head == head}
    return norms.pop() if len(norms) == 1 else "none"


def build_model(
    arch: str,
    head: str,
    num_classes: int,
    normalization: str | None = None,
    *,
    out_dim: int | None = None,
    hidden_dim: int | None = None,
    stem: str | None = None,
    in_channels: int = 3,
    width: int = 32,
    channels_last: bool = False,
    seed: int | None = None,
) -> ContrastiveModel:
    """Build a :class:`ContrastiveModel` by names.

    Args:
        arch: one of :data:`ARCHS`.
        head: one of :data:`theory.options.HEADS` (``hcl``, ``weince``, ``identity``).
        num_classes: ``C`` of the dataset (sets the ``hcl`` default ``d = C - 1``).
        normalization: ``none`` / ``ball`` / ``sphere``; default per head
            (:func:`default_normalization`: ``hcl`` ``ball``, ``weince`` ``sphere``,
            ``identity`` ``none``).
        out_dim: ``d``; default per head (``C - 1``, 64, or ``feat_dim`` for ``identity``).
        hidden_dim: hidden width of the head; default 512 (``hcl``) or ``feat_dim``
            (``weince``).
        stem: ResNet stem ``cifar`` / ``imagenet`` (default ``cifar``; see
            :func:`default_stem`); ignored by ``smallcnn``.
        in_channels: image channels.
        width: ``smallcnn`` width.
        channels_last: convert to ``torch.channels_last``.
        seed: if given, initialise the parameters from ``torch.manual_seed(seed)`` without
            changing the global random state.

    Returns:
        The model in training mode, on the CPU.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {sorted(ARCHS)}, got {arch!r}")
    one_of("head", head, HEADS)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if stem is not None and stem not in STEMS:
        raise ValueError(f"stem must be one of {STEMS}, got {stem!r}")
    norm = default_normalization(head) if normalization is None else normalization
    one_of("normalization", norm, NORMALIZATIONS)
    for name, v in (("out_dim", out_dim), ("hidden_dim", hidden_dim)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if head == "identity" and (out_dim is not None or hidden_dim is not None):
        raise ValueError("out_dim and hidden_dim do not apply to head 'identity' (z = h)")
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        backbone = ARCHS[arch](stem=stem or "cifar", in_channels=in_channels, width=width)
        feat = _feat_dim(backbone)
        g: nn.Module
        if head == "identity":
            d, g = feat, nn.Identity()
        else:
            resolved = default_out_dim(head, num_classes) if out_dim is None else out_dim
            assert resolved is not None  # only the identity head has no default
            d = resolved
            if head == "hcl":
                g = HCLHead(feat, d, 512 if hidden_dim is None else hidden_dim)
            else:
                g = WeiNCEProjector(feat, d, hidden_dim)
    return ContrastiveModel(backbone, g, norm, d, channels_last=channels_last)
