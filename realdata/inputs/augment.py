"""Batched SimCLR augmentations on the device: a whole batch in, one or two views out.

The WeiNCE pre-training recipe (arXiv 2606.00262, Sec. 5; the SimCLR views of Chen et al.
2020) draws for every image, independently:

1. ``RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3))``, bilinear;
2. a horizontal flip with probability 0.5;
3. with probability 0.8 a ``ColorJitter(0.8, 0.8, 0.8, 0.2)``: brightness, contrast and saturation
   factors uniform in ``[0.2, 1.8]``, a hue shift uniform in ``[-0.2, 0.2]``, applied in a random
   order;
4. greyscale with probability 0.2;

no Gaussian blur and no mean/std normalisation (the output lies in ``[0, 1]``). torchvision
applies these to one image at a time on the CPU. :class:`SimCLRAugment` draws the same per-image
parameters for a whole batch at once and applies them with batched tensor operations, so views
are made on the GPU where the batch already lives:

* the crop and resize of every image is one :func:`torchvision.ops.roi_align` call with per-image
  boxes (``aligned=True``, so an output pixel samples the same point as
  :func:`torchvision.transforms.v2.functional.resized_crop`. Where that point lies inside the
  box the two agree to rounding; where it lies within half a pixel of the box's edge (when the
  box is enlarged: about ``size / (2 w)`` output columns at each side) roi_align blends in the
  neighbouring image pixel outside the box, where ``resized_crop`` repeats the box's edge pixel.
  A box larger than the output is averaged over a grid of samples per output pixel instead of
  torchvision's antialiasing filter);
* flip and greyscale are per-image selections;
* the colour jitter follows :mod:`torchvision.transforms.v2.functional` exactly (blend with black
  / the mean grey level / the grey image, clamped to ``[0, 1]``; hue through a fused
  RGB -> HSV -> RGB round trip; grey ``0.2989 R + 0.587 G + 0.114 B``). Each image's random
  order is applied in passes around its hue step: up to three blend passes, the hue rotation of
  the batch, up to three blend passes. In a pass every image applies its op at that position,
  or the neutral factor 1 (exactly the identity) where that op lies on the other side of its
  hue step; so the random order needs no data-dependent indexing and no host synchronisation,
  and the costly hue rotation runs once per view.

Randomness comes only from an explicit :class:`torch.Generator` (its device is where the numbers
are drawn; they are then moved to the images' device): the same generator state gives the same
views. One-channel images skip saturation, hue and greyscale, as torchvision does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torchvision.ops import roi_align

from realdata.inputs.color import NEUTRAL, jitter, rgb_to_grayscale

__all__ = ["AugmentParams", "SimCLRAugment"]


@dataclass(frozen=True)
class AugmentParams:
    """The per-image random parameters of one view of a batch of ``B`` images.

    Attributes:
        boxes: crop boxes ``(left, top, width, height)`` in integer pixels, ``int64``.
        flip: horizontal flip, ``bool``.
        factors: brightness, contrast, saturation, hue factors; the neutral ``(1, 1, 1, 0)``
            where the jitter is not applied or an op is disabled.
        order: ``order[b, p]`` is the op (``0..3``, as in ``factors``) applied at position ``p``.
        gray: convert to greyscale, ``bool``.

    Shape:
        boxes ``(B, 4)``, flip ``(B,)``, factors ``(B, 4)``, order ``(B, 4)``, gray ``(B,)``.
    """

    boxes: torch.Tensor
    flip: torch.Tensor
    factors: torch.Tensor
    order: torch.Tensor
    gray: torch.Tensor

    def to(self, device: torch.device | str) -> AugmentParams:
        """The parameters on ``device``."""
        return AugmentParams(*(t.to(device) for t in
                               (self.boxes, self.flip, self.factors, self.order, self.gray)))  # fmt: skip


def _pair(name: str, value, lo: float, hi: float | None) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (min, max), got {value!r}") from None
    if not (lo <= a <= b and (hi is None or b <= hi)) or (name == "ratio" and a <= 0):
        bound = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must satisfy min <= max within {bound}, got {value!r}")
    return a, b


@dataclass(frozen=True)
class SimCLRAugment:
    """Two-view SimCLR augmentation of a batch, defaults as in the WeiNCE recipe.

    Args:
        size: output height and width.
        scale: range of the crop area as a fraction of the image area.
        ratio: range of the crop aspect ratio ``width / height`` (drawn log-uniformly).
        flip_p: probability of a horizontal flip.
        brightness, contrast, saturation: jitter strengths ``s``: factors uniform in
            ``[max(0, 1 - s), 1 + s]`` (``0`` disables the op).
        hue: hue-shift strength in ``[0, 0.5]``: shifts uniform in ``[-hue, hue]``.
        jitter_p: probability of applying the colour jitter.
        gray_p: probability of converting to greyscale.
        attempts: crop draws before the central-crop fallback (torchvision uses 10).

    Shape:
        ``__call__``: images ``(B, C, H, W)`` (``uint8`` 0..255 or float in ``[0, 1]``, ``C`` in
        {1, 3}) -> ``(B, C, size, size)`` float in ``[0, 1]``.
    """

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    flip_p: float = 0.5
    brightness: float = 0.8
    contrast: float = 0.8
    saturation: float = 0.8
    hue: float = 0.2
    jitter_p: float = 0.8
    gray_p: float = 0.2
    attempts: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 1:
            raise ValueError(f"size must be an integer >= 1, got {self.size!r}")
        object.__setattr__(self, "scale", _pair("scale", self.scale, 0.0, 1.0))
        object.__setattr__(self, "ratio", _pair("ratio", self.ratio, 0.0, None))
        if self.scale[1] <= 0:
            raise ValueError(f"scale must allow a non-empty crop, got {self.scale!r}")
        for name in ("flip_p", "jitter_p", "gray_p"):
            p = getattr(self, name)
            if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
        for name in ("brightness", "contrast", "saturation"):
            s = getattr(self, name)
            if not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
                raise ValueError(f"{name} must be a finite strength >= 0, got {s!r}")
        if not isinstance(self.hue, (int, float)) or not 0.0 <= self.hue <= 0.5:
            raise ValueError(f"hue must lie in [0, 0.5], got {self.hue!r}")
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"attempts must be an integer >= 1, got {self.attempts!r}")

    # ------------------------------------------------------------------ parameters

    def factor_ranges(self) -> tuple[tuple[float, float], ...]:
        """``(low, high)`` of the brightness, contrast, saturation and hue draws."""
        b, c, s = (max(0.0, 1.0 - v) for v in (self.brightness, self.contrast, self.saturation))
        return ((b, 1 + self.brightness), (c, 1 + self.contrast), (s, 1 + self.saturation),
                (-self.hue, self.hue))  # fmt: skip

    def enabled_ops(self) -> tuple[bool, bool, bool, bool]:
        """Which jitter ops are active (strength > 0), as torchvision skips the others."""
        return (self.brightness > 0, self.contrast > 0, self.saturation > 0, self.hue > 0)

    def sample_params(self, batch: int, height: int, width: int, generator: torch.Generator) -> AugmentParams:
        """Draw the parameters of one view of ``batch`` images of ``height x width``.

        The numbers are drawn on ``generator.device`` in a fixed order (so the same generator
        state gives the same parameters) and returned there.

        Crop (as :class:`torchvision.transforms.v2.RandomResizedCrop`): up to ``attempts`` draws
        of an area ``U(scale) * H * W`` and a log-uniform aspect ratio; ``w = round(sqrt(area *
        ratio))``, ``h = round(sqrt(area / ratio))``; the first draw with ``0 < w <= W`` and
        ``0 < h <= H`` is placed uniformly, otherwise the central crop of the whole image
        clamped to the ratio range is used.
        """
        if batch < 0 or height < 1 or width < 1:
            raise ValueError(f"need batch >= 0 and a non-empty image, got {batch}, {height}x{width}")
        dev = generator.device
        f64 = torch.float64
        u = torch.rand(batch, 2 * self.attempts + 2, generator=generator, device=dev, dtype=f64)
        area = height * width * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[:, : self.attempts])
        lr0, lr1 = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(lr0 + (lr1 - lr0) * u[:, self.attempts : 2 * self.attempts])
        w = torch.round(torch.sqrt(area * aspect)).long()
        h = torch.round(torch.sqrt(area / aspect)).long()
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = torch.argmax(ok.to(torch.int8), dim=1, keepdim=True)  # first valid attempt
        found = ok.any(dim=1)
        w = torch.gather(w, 1, first)[:, 0]
        h = torch.gather(h, 1, first)[:, 0]
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            fw, fh = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            fw, fh = int(round(height * self.ratio[1])), height
        else:
            fw, fh = width, height
        w = torch.where(found, w, torch.full_like(w, fw))
        h = torch.where(found, h, torch.full_like(h, fh))
        # uniform integer offsets in [0, H - h] and [0, W - w]
        top = torch.floor(u[:, -2] * (height - h + 1).to(f64)).long().clamp_max(height - h)
        left = torch.floor(u[:, -1] * (width - w + 1).to(f64)).long().clamp_max(width - w)
        top = torch.where(found, top, torch.full_like(top, 0) + (height - fh) // 2)
        left = torch.where(found, left, torch.full_like(left, 0) + (width - fw) // 2)
        boxes = torch.stack([left, top, w, h], dim=1)

        v = torch.rand(batch, 7, generator=generator, device=dev)
        flip = v[:, 0] < self.flip_p
        jitter = v[:, 1] < self.jitter_p
        gray = v[:, 2] < self.gray_p
        lo = torch.tensor([r[0] for r in self.factor_ranges()], device=dev)
        hi = torch.tensor([r[1] for r in self.factor_ranges()], device=dev)
        factors = lo + (hi - lo) * v[:, 3:7]
        on = torch.tensor(self.enabled_ops(), device=dev)[None, :] & jitter[:, None]
        factors = torch.where(on, factors, torch.tensor(NEUTRAL, device=dev))
        order = torch.argsort(torch.rand(batch, 4, generator=generator, device=dev), dim=1)
        return AugmentParams(boxes, flip, factors, order, gray)

    # -------------------------------------------------------------------- applying

    def apply(
        self, images: torch.Tensor, params: AugmentParams, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """Apply drawn parameters to a batch (deterministic).

        Args:
            images: ``uint8`` (0..255) or floating (``[0, 1]``) images.
            params: from :meth:`sample_params` for this batch and image size.
            dtype: floating dtype of the output (the ops run in float32 or float64).

        Returns:
            The augmented views in ``[0, 1]``.

        Shape:
            images ``(B, C, H, W)`` -> ``(B, C, size, size)``.
        """
        x = _as_float(images, "images")
        B, C = x.shape[:2]
        if params.boxes.shape != (B, 4):
            raise ValueError(f"params are for {params.boxes.shape[0]} images, got a batch of {B}")
        p = params.to(x.device)
        box = p.boxes.to(x.dtype)
        rois = torch.cat([torch.arange(B, device=x.device, dtype=x.dtype)[:, None],
                          box[:, :2], box[:, :2] + box[:, 2:]], dim=1)  # fmt: skip
        x = roi_align(x, rois, output_size=(self.size, self.size), spatial_scale=1.0,
                      sampling_ratio=-1, aligned=True)  # fmt: skip
        W = x.shape[-1]
        cols = torch.arange(W, device=x.device)
        cols = torch.where(p.flip[:, None], W - 1 - cols, cols)  # mirrored columns where flipped
        x = x.gather(3, cols[:, None, None, :].expand_as(x))
        x = jitter(x, p.factors.to(x.dtype), p.order, self.enabled_ops())
        if C == 3:
            x = torch.where(p.gray[:, None, None, None], rgb_to_grayscale(x).expand_as(x), x)
        return x.to(dtype)

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """One augmented view of every image (parameters drawn from ``generator``).

        Shape:
            images ``(B, C, H, W)`` -> ``(B, C, size, size)``.
        """
        _as_float(images[:0] if isinstance(images, torch.Tensor) else images, "images")
        B, _, H, W = images.shape
        return self.apply(images, self.sample_params(B, H, W, generator), dtype)

    def two_views(
        self, images: torch.Tensor, generator: torch.Generator, dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Two independent views of every image: the positive pairs of SimCLR / WeiNCE.

        Shape:
            images ``(B, C, H, W)`` -> two tensors ``(B, C, size, size)``.
        """
        return self(images, generator, dtype), self(images, generator, dtype)


def _as_float(images: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] not in (1, 3):
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"{name} must have shape (B, C, H, W) with C in (1, 3), got {shape}")
    if images.dtype == torch.uint8:
        return images.to(torch.float32) / 255.0
    if images.dtype in (torch.float32, torch.float64):
        return images
    if images.is_floating_point():
        return images.to(torch.float32)
    raise ValueError(f"{name} must be uint8 or floating, got {images.dtype}")
