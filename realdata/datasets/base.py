"""The one result type of every dataset loader, and the errors they raise.

Every loader of :mod:`realdata.datasets` returns an :class:`ImageDataset`: whole splits as
``uint8`` image tensors ``(N, C, H, W)`` and ``int64`` labels ``(N,)``, so a trainer can move a
complete dataset to the accelerator once (:meth:`ImageDataset.to`) and index, augment and
normalise batches there (:mod:`realdata.inputs.augment`, :mod:`realdata.inputs.views`).

Errors: a dataset that is not on disk raises :class:`DatasetNotFoundError`, one whose files are
present but unreadable or inconsistent raises :class:`CorruptDatasetError`. Both messages name the
path, the expected layout, and the ``--download`` flag (``download=True``) where one exists.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "DatasetError",
    "DatasetNotFoundError",
    "CorruptDatasetError",
    "ImageSplit",
    "ImageDataset",
    "channel_stats",
    "dataset_message",
]


class DatasetError(RuntimeError):
    """Base class of the dataset errors (a missing or corrupt dataset)."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The dataset's folder or one of its files is not on disk."""


class CorruptDatasetError(DatasetError):
    """The dataset's files are present but cannot be read or do not fit together."""


def dataset_message(problem: str, path: str | Path, layout: str, *, can_download: bool = True) -> str:
    """The text of a dataset error: what is wrong, where, the expected layout, how to fix it.

    Args:
        problem: one line, e.g. ``"CIFAR-10 not found"``.
        path: the folder or file concerned.
        layout: the expected folder layout, one entry per line.
        can_download: whether the loader can fetch the dataset itself (then the message names
            the ``--download`` flag; otherwise it says that one must place the files by hand).

    Returns:
        A multi-line message.
    """
    fix = (
        "Pass --download (download=True) to fetch it, or point --root at a folder that holds it."
        if can_download
        else "It cannot be downloaded automatically (--download does not apply): place the files "
        "by hand and point --root at their folder."
    )
    indented = "\n".join("    " + line for line in layout.strip("\n").splitlines())
    return f"{problem}: {path}\nExpected layout:\n{indented}\n{fix}"


@dataclass(frozen=True)
class ImageSplit:
    """One labelled split of an image dataset.

    Attributes:
        images: ``uint8`` tensor, pixel values 0..255.
        labels: ``int64`` tensor, class indices.

    Shape:
        images ``(N, C, H, W)``; labels ``(N,)``.
    """

    images: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        if not isinstance(self.images, torch.Tensor) or self.images.dtype != torch.uint8:
            raise ValueError(f"images must be a uint8 tensor, got {_describe(self.images)}")
        if self.images.ndim != 4:
            raise ValueError(f"images must have shape (N, C, H, W), got {tuple(self.images.shape)}")
        if not isinstance(self.labels, torch.Tensor) or self.labels.dtype != torch.int64:
            raise ValueError(f"labels must be an int64 tensor, got {_describe(self.labels)}")
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(
                f"labels must have shape ({self.images.shape[0]},) to match images, "
                f"got {tuple(self.labels.shape)}"
            )
        if self.labels.device != self.images.device:
            raise ValueError(f"labels are on {self.labels.device} but images on {self.images.device}")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ImageSplit:
        """The split with both tensors on ``device``."""
        return ImageSplit(
            self.images.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
        )


@dataclass(frozen=True)
class ImageDataset:
    """A labelled image dataset held in memory: train and test split, class names, statistics.

    Attributes:
        name: registry name (``"cifar100"``, ...).
        train: the training split.
        test: the labelled evaluation split (Tiny-ImageNet: the official ``val`` folder).
        num_classes: ``C``; every label lies in ``[0, C)``.
        class_names: ``C`` human-readable names, index ``c`` for label ``c``.
        mean: per-channel mean of the training images scaled to ``[0, 1]``, or ``None``.
        std: per-channel population standard deviation of the same, or ``None``.
        root: the folder the data was read from (``None`` for bundled data).
        unlabeled: optional extra ``uint8`` images without labels (STL-10's ``unlabeled``).

    Shape:
        ``train.images`` ``(N, C_img, H, W)``, ``test.images`` ``(M, C_img, H, W)``,
        ``unlabeled`` ``(U, C_img, H, W)``.
    """

    name: str
    train: ImageSplit
    test: ImageSplit
    num_classes: int
    class_names: tuple[str, ...]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    root: str | None = None
    unlabeled: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.train, ImageSplit) or not isinstance(self.test, ImageSplit):
            raise ValueError("train and test must be ImageSplit instances")
        if (
            not isinstance(self.num_classes, int)
            or isinstance(self.num_classes, bool)
            or self.num_classes < 1
        ):
            raise ValueError(f"num_classes must be an integer >= 1, got {self.num_classes!r}")
        if len(self.class_names) != self.num_classes:
            raise ValueError(
                f"class_names must hold num_classes = {self.num_classes} names, got {len(self.class_names)}"
            )
        shape = tuple(self.train.images.shape[1:])
        if tuple(self.test.images.shape[1:]) != shape:
            raise ValueError(
                f"test images have shape {tuple(self.test.images.shape[1:])} per image but train "
                f"images {shape}"
            )
        for split_name, split in (("train", self.train), ("test", self.test)):
            if len(split) and (int(split.labels.min()) < 0 or int(split.labels.max()) >= self.num_classes):
                raise ValueError(
                    f"{split_name} labels must lie in [0, {self.num_classes}), got range "
                    f"[{int(split.labels.min())}, {int(split.labels.max())}]"
                )
        for stat_name in ("mean", "std"):
            stat = getattr(self, stat_name)
            if stat is not None and len(stat) != shape[0]:
                raise ValueError(f"{stat_name} must have one value per channel ({shape[0]}), got {stat!r}")
        if self.unlabeled is not None:
            if self.unlabeled.dtype != torch.uint8 or tuple(self.unlabeled.shape[1:]) != shape:
                raise ValueError(
                    f"unlabeled must be uint8 images of shape (U, {', '.join(map(str, shape))}), "
                    f"got {_describe(self.unlabeled)}"
                )

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C_img, H, W)`` of one image."""
        c, h, w = self.train.images.shape[1:]
        return int(c), int(h), int(w)

    @property
    def channels(self) -> int:
        """Number of image channels (3 for colour, 1 for digits)."""
        return self.image_shape[0]

    @property
    def image_size(self) -> int:
        """Height of an image (every bundled dataset is square)."""
        return self.image_shape[1]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ImageDataset:
        """The dataset with every tensor moved to ``device`` (e.g. once to the GPU)."""
        unl = self.unlabeled
        return dataclasses.replace(
            self,
            train=self.train.to(device, non_blocking),
            test=self.test.to(device, non_blocking),
            unlabeled=None if unl is None else unl.to(device, non_blocking=non_blocking),
        )

    def __repr__(self) -> str:
        c, h, w = self.image_shape
        extra = "" if self.unlabeled is None else f", unlabeled={self.unlabeled.shape[0]}"
        return (
            f"ImageDataset(name={self.name!r}, train={len(self.train)}, test={len(self.test)}"
            f"{extra}, classes={self.num_classes}, image=({c}, {h}, {w}), "
            f"device={self.train.images.device})"
        )


def channel_stats(
    images: torch.Tensor, chunk_size: int = 4096
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and population standard deviation of uint8 images scaled to ``[0, 1]``.

    Accumulated in float64 over chunks of images, so memory stays bounded for large splits.

    Args:
        images: ``uint8`` tensor.
        chunk_size: images per chunk.

    Returns:
        ``(mean, std)``, each a tuple with one float per channel.

    Shape:
        images ``(N, C, H, W)`` with ``N >= 1``.
    """
    if images.ndim != 4 or images.shape[0] == 0:
        raise ValueError(f"images must have shape (N, C, H, W) with N >= 1, got {_describe(images)}")
    c = images.shape[1]
    s = torch.zeros(c, dtype=torch.float64, device=images.device)
    s2 = torch.zeros_like(s)
    for start in range(0, images.shape[0], chunk_size):
        x = images[start : start + chunk_size].to(torch.float64) / 255.0
        s += x.sum(dim=(0, 2, 3))
        s2 += (x * x).sum(dim=(0, 2, 3))
    n = images.shape[0] * images.shape[2] * images.shape[3]
    mean = s / n
    var = (s2 / n - mean * mean).clamp_min(0.0)
    return tuple(float(v) for v in mean), tuple(float(v) for v in var.sqrt())


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of dtype {x.dtype} and shape {tuple(x.shape)}"
    return f"{type(x).__name__}"
