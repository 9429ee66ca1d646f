"""Batched colour operations with per-image factors (the colour half of the SimCLR views).

Each function takes a batch ``(B, C, H, W)`` of floats in ``[0, 1]`` and per-image parameters
``(B,)``, and follows :mod:`torchvision.transforms.v2.functional` (the per-image reference):
brightness ``clamp(f x)``, contrast ``clamp(f x + (1 - f) mean(grey(x)))``, saturation
``clamp(f x + (1 - f) grey(x))``, hue rotation through HSV, grey ``0.2989 R + 0.587 G + 0.114 B``.
One-channel images have no saturation or hue (as torchvision). :func:`jitter` applies the four
ops in a per-image random order (:class:`realdata.inputs.augment.SimCLRAugment`, arXiv 2606.00262,
Sec. 5).
"""

from __future__ import annotations

import torch

__all__ = [
    "BRIGHTNESS",
    "CONTRAST",
    "SATURATION",
    "HUE",
    "NEUTRAL",
    "rgb_to_grayscale",
    "rgb_to_hsv",
    "hsv_to_rgb",
    "adjust_hue",
    "jitter",
]

#: Index of each colour-jitter operation in the factor and order tensors.
BRIGHTNESS, CONTRAST, SATURATION, HUE = 0, 1, 2, 3
#: The factors that leave an image unchanged.
NEUTRAL = (1.0, 1.0, 1.0, 0.0)
_GREY = (0.2989, 0.587, 0.114)


def rgb_to_grayscale(x: torch.Tensor) -> torch.Tensor:
    """Luma ``0.2989 R + 0.587 G + 0.114 B`` (as torchvision); one channel passes through.

    Shape:
        ``(B, C, H, W)`` -> ``(B, 1, H, W)``.
    """
    if x.shape[1] == 1:
        return x
    return (x[:, 0:1] * _GREY[0]).add_(x[:, 1:2], alpha=_GREY[1]).add_(x[:, 2:3], alpha=_GREY[2])


def jitter(x: torch.Tensor, factors: torch.Tensor, order: torch.Tensor, enabled) -> torch.Tensor:
    """The colour jitter of every image, its ops in its own order.

    ``factors[b]`` holds brightness, contrast, saturation and hue factors, ``order[b, p]`` the op
    applied at position ``p``, ``enabled`` which of the four ops are on at all.

    Every image's hue shift sits at one position ``q`` of its order. The ops before ``q`` are
    applied in up to three passes, then the hue of every image, then the ops after ``q``. Each
    pass applies, per image, the one blend op at that position,
    ``clamp(f x + (1 - f) ref, 0, 1)`` with ``ref`` = 0 (brightness), the mean grey level
    (contrast) or the grey image (saturation), and ``f = 1`` (exactly the identity) for an image
    whose op at that position lies on the other side of ``q``.

    Shape:
        x ``(B, C, H, W)``, factors ``(B, 4)``, order ``(B, 4)`` -> ``(B, C, H, W)``.
    """
    C = x.shape[1]
    pos_of = torch.argsort(order, dim=1)  # pos_of[b, op] = position of op in image b's order
    hue_pos = pos_of[:, HUE]
    use_hue = enabled[HUE] and C == 3
    skip = torch.zeros(4, dtype=torch.bool)
    skip[HUE] = True
    if C == 1:
        skip[SATURATION] = True  # as torchvision: no saturation on one channel
    for k in range(3):
        if not enabled[k]:
            skip[k] = True
    if bool(skip[:3].all()) and not use_hue:
        return x
    skip = skip.to(order.device)
    for stage, positions in (("before", (0, 1, 2)), ("after", (1, 2, 3))):
        if stage == "after" and use_hue:
            shift = factors[:, HUE]
            x = torch.where((shift != 0)[:, None, None, None], adjust_hue(x, shift), x)
        for pos in positions:
            op = order[:, pos]
            side = pos < hue_pos if stage == "before" else pos > hue_pos
            active = side & ~skip[op]
            if _skip_pass(x, active):
                continue
            f = torch.where(active, factors.gather(1, op[:, None])[:, 0], 1.0)[:, None, None, None]
            grey = rgb_to_grayscale(x)
            is_sat = (op == SATURATION).to(x.dtype)[:, None, None, None]
            is_con = (op == CONTRAST).to(x.dtype)[:, None, None, None]
            ref = is_sat * grey + is_con * grey.mean(dim=(1, 2, 3), keepdim=True)
            # lerp(ref, x, f) = f x + (1 - f) ref, and exactly x at f = 1
            x = torch.lerp(ref, x, f, out=x).clamp_(0.0, 1.0)
    return x


def _skip_pass(x: torch.Tensor, active: torch.Tensor) -> bool:
    """Whether a jitter pass with no active image can be skipped (decided on the CPU only).

    On an accelerator the test would synchronise with the host; the pass is then the identity.
    """
    return x.device.type == "cpu" and not bool(active.any())


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """RGB in ``[0, 1]`` to HSV, hue in ``[0, 1)`` (0 where the pixel is grey).

    Shape:
        ``(B, 3, H, W)`` -> ``(B, 3, H, W)``.
    """
    r, g, b = x.unbind(1)
    maxc = torch.maximum(torch.maximum(r, g), b)
    minc = torch.minimum(torch.minimum(r, g), b)
    delta = maxc - minc
    s = delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc))
    d = torch.where(delta > 0, delta, torch.ones_like(delta))
    h = torch.where(maxc == r, (g - b) / d,
                    torch.where(maxc == g, 2.0 + (b - r) / d, 4.0 + (r - g) / d))  # fmt: skip
    h = torch.where(delta > 0, torch.remainder(h / 6.0, 1.0), torch.zeros_like(h))
    return torch.stack([h, s, maxc], dim=1)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """HSV to RGB, batched.

    Channel ``n`` in (5, 3, 1) for (R, G, B) is ``v - v s clamp(min(k, 4 - k), 0, 1)`` with
    ``k = (n + 6 h) mod 6``.

    Shape:
        ``(B, 3, H, W)`` -> ``(B, 3, H, W)``.
    """
    h, s, v = (t[:, None] for t in x.unbind(1))
    return _from_hue(6.0 * h, v * s, v)


def _from_hue(h6: torch.Tensor, chroma: torch.Tensor, maxc: torch.Tensor) -> torch.Tensor:
    """RGB from the hue in sextants ``h6``, the chroma ``M - m`` and the value ``M``.

    Shape:
        each ``(B, 1, H, W)`` -> ``(B, 3, H, W)``.
    """
    n = torch.tensor([5.0, 3.0, 1.0], device=h6.device, dtype=h6.dtype)[None, :, None, None]
    k = (h6 + n).remainder_(6.0)
    w = torch.minimum(k, 4.0 - k, out=k).clamp_(0.0, 1.0)  # in place: few large allocations
    return w.mul_(chroma).neg_().add_(maxc).clamp_(0.0, 1.0)


def adjust_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate the hue of every image by its own ``shift`` (in turns, ``[-0.5, 0.5]``).

    A fused HSV round trip: with ``M = max(R, G, B)``, ``m = min(R, G, B)`` and the hue ``h`` of
    :func:`rgb_to_hsv`, the result is :func:`hsv_to_rgb` of ``(h + shift, s, M)``, computed
    directly from ``M``, ``M - m`` and ``h`` (since ``v s = M - m``).

    Shape:
        x ``(B, 3, H, W)``, shift ``(B,)`` -> ``(B, 3, H, W)``.
    """
    r, g, b = x.unbind(1)
    maxc = torch.maximum(torch.maximum(r, g), b)
    delta = maxc - torch.minimum(torch.minimum(r, g), b)
    d = torch.where(delta > 0, delta, torch.ones_like(delta))
    h6 = torch.where(maxc == r, (g - b) / d,
                     torch.where(maxc == g, 2.0 + (b - r) / d, 4.0 + (r - g) / d))  # fmt: skip
    h6 = h6.add_(6.0 * shift.to(x.dtype)[:, None, None])
    return _from_hue(h6[:, None], delta[:, None], maxc[:, None])
