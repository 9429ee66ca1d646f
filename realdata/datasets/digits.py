"""scikit-learn's bundled ``digits``: the embedded real dataset that works offline (the default).

:func:`sklearn.datasets.load_digits` ships 1 797 greyscale 8x8 images of handwritten digits
(UCI optdigits test set), pixel values 0..16, 10 classes. They are stored here as ``uint8``
``(N, 1, 8, 8)`` with ``round(v * 255 / 16)`` (so 16 maps to 255 and ``x / 255`` recovers
``v / 16`` up to rounding), and split into train and test by a seeded stratified split
(:func:`sklearn.model_selection.train_test_split`).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from realdata.datasets.base import ImageDataset, ImageSplit, channel_stats

__all__ = ["digits_to_uint8", "load_digits_dataset"]


def digits_to_uint8(values: np.ndarray) -> np.ndarray:
    """Map digits pixel values 0..16 to ``uint8`` 0..255: ``round(v * 255 / 16)``."""
    return np.rint(np.asarray(values, dtype=np.float64) * (255.0 / 16.0)).astype(np.uint8)


def load_digits_dataset(
    root: object = None,
    *,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    **_: object,
) -> ImageDataset:
    """The bundled digits data as an :class:`ImageDataset` (needs no files and no network).

    Args:
        root: ignored (the data ships with scikit-learn).
        test_fraction: share of each class held out as the test split, in ``(0, 1)``.
        split_seed: seed of the stratified split.
        **_: ignored (``download``, ``cache_dir``: the uniform loader signature).

    Returns:
        An :class:`ImageDataset` named ``"digits"``: ``num_classes = 10``, class names
        ``"0"``..``"9"``, images ``(N, 1, 8, 8)`` ``uint8``; about 1 437 train / 360 test
        images at the default fraction.
    """
    if not isinstance(test_fraction, (int, float)) or not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    if not isinstance(split_seed, (int, np.integer)) or isinstance(split_seed, bool):
        raise ValueError(f"split_seed must be an integer, got {split_seed!r}")
    bunch = load_digits()
    images = digits_to_uint8(bunch.images)[:, None]  # (N, 1, 8, 8)
    labels = bunch.target.astype(np.int64)
    idx_train, idx_test = train_test_split(
        np.arange(labels.shape[0]),
        test_size=float(test_fraction),
        random_state=int(split_seed),
        stratify=labels,
    )
    idx_train.sort()
    idx_test.sort()

    def split(idx: np.ndarray) -> ImageSplit:
        return ImageSplit(
            torch.from_numpy(np.ascontiguousarray(images[idx])), torch.from_numpy(labels[idx])
        )

    train = split(idx_train)
    mean, std = channel_stats(train.images)
    return ImageDataset(
        name="digits",
        train=train,
        test=split(idx_test),
        num_classes=10,
        class_names=tuple(str(c) for c in bunch.target_names),
        mean=mean,
        std=std,
        root=None,
    )
