"""Single views and label positives, as in the hard-negative authors' pipeline.

The hard-negative paper's released code (arXiv 2311.05139, Sec. 5) trains CIFAR-100 with **no
augmentation**: every training image passes through the test-time transform (``ToTensor`` and
``Normalize``), and the positives of an anchor are the batch members with the same label, the
anchor itself included. This module provides both pieces, explicitly:

* :func:`normalize` / :func:`hcl_view`: ``uint8`` (or ``[0, 1]`` float) batch ->
  ``(x / 255 - mean) / std``, on the batch's device. The authors normalise **every** dataset
  with the constants :data:`HCL_MEAN` / :data:`HCL_STD`, which are CIFAR-10's channel means and
  a commonly copied set of CIFAR-10 standard deviations (0.2023, 0.1994, 0.2010; the population
  values of CIFAR-10 are about 0.247, 0.243, 0.262). :func:`hcl_view` uses them by default so a
  run can match the authors; pass a dataset's own ``mean``/``std`` to normalise with its
  statistics instead.
* :func:`label_positive_mask`: ``P[i, j] = (y_i == y_j)``, the diagonal included.

For the two-view SimCLR recipe of WeiNCE see :class:`realdata.inputs.augment.SimCLRAugment` (no
normalisation there: its views stay in ``[0, 1]``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "HCL_MEAN",
    "HCL_STD",
    "to_float",
    "normalize",
    "hcl_view",
    "label_positive_mask",
]

#: Channel means used by the hard-negative authors for every dataset (CIFAR-10's).
HCL_MEAN = (0.4914, 0.4822, 0.4465)
#: Channel standard deviations used by the hard-negative authors for every dataset.
HCL_STD = (0.2023, 0.1994, 0.2010)


def to_float(images: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``uint8`` images to floats in ``[0, 1]`` (``x / 255``); floating input is only cast.

    Shape:
        ``(B, C, H, W)`` -> ``(B, C, H, W)``.
    """
    _check_images(images)
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    if images.dtype == torch.uint8:
        return images.to(dtype) / 255.0
    return images.to(dtype)


def normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Per-channel normalisation ``(x - mean) / std`` of images scaled to ``[0, 1]``.

    As ``ToTensor()`` followed by ``Normalize(mean, std)``, for a whole batch on its device.

    Args:
        images: ``uint8`` (0..255) or floating (``[0, 1]``) images.
        mean: one value per channel.
        std: one positive value per channel.
        dtype: floating output dtype.

    Returns:
        The normalised batch.

    Shape:
        ``(B, C, H, W)`` -> ``(B, C, H, W)``.
    """
    x = to_float(images, dtype)
    c = x.shape[1]
    if len(mean) != c or len(std) != c:
        raise ValueError(f"mean and std need one value per channel ({c}), got {len(mean)} and {len(std)}")
    if any(not float(s) > 0 for s in std):
        raise ValueError(f"std must be positive, got {tuple(std)}")
    m = torch.tensor(mean, dtype=dtype, device=x.device).view(1, c, 1, 1)
    s = torch.tensor(std, dtype=dtype, device=x.device).view(1, c, 1, 1)
    return (x - m) / s


def hcl_view(
    images: torch.Tensor,
    mean: Sequence[float] = HCL_MEAN,
    std: Sequence[float] = HCL_STD,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The authors' only training view: no augmentation, normalisation with ``mean``/``std``.

    (arXiv 2311.05139, Sec. 5: the CIFAR-100 runs use the test transform for training.) The
    defaults are the authors' CIFAR-10 constants, applied to every three-channel dataset; a
    one-channel dataset (digits) needs its own statistics (``ImageDataset.mean``/``std``).

    Shape:
        ``(B, C, H, W)`` -> ``(B, C, H, W)``.
    """
    return normalize(images, mean, std, dtype)


def label_positive_mask(labels: torch.Tensor) -> torch.Tensor:
    """Positives from labels: ``P[i, j] = (labels[i] == labels[j])``, ``P[i, i]`` true.

    Every anchor is its own positive, as in the authors' code (arXiv 2311.05139, Sec. 5), so
    every row has at least one positive, also in a batch where a class occurs once.

    Shape:
        labels ``(B,)`` integers -> ``(B, B)`` bool.
    """
    if not isinstance(labels, torch.Tensor) or labels.ndim != 1:
        raise ValueError(f"labels must be a 1-D tensor, got {getattr(labels, 'shape', labels)!r}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got {labels.dtype}")
    return labels[:, None] == labels[None, :]


def _check_images(images) -> None:
    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images must have shape (B, C, H, W), got {shape}")
    if images.dtype != torch.uint8 and not images.is_floating_point():
        raise ValueError(f"images must be uint8 or floating, got {images.dtype}")
