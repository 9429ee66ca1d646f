"""Vision datasets held in memory as ``uint8`` tensors, one uniform result type.

Loaders (each returns an :class:`ImageDataset`; all take ``root`` plus keyword arguments and
ignore the keywords that do not apply to them, so a command line can pass the same flags):

=================  ==========================================================  =============
name               source                                                      image
=================  ==========================================================  =============
``digits``         scikit-learn's bundled digits (offline; the default)        1 x 8 x 8
``cifar10``        ``<root>/cifar-10-batches-py/``, pickles read safely        3 x 32 x 32
``cifar100``       ``<root>/cifar-100-python/``, pickles read safely           3 x 32 x 32
``tiny-imagenet``  ``<root>/tiny-imagenet-200/`` (standard layout), cached     3 x 64 x 64
``stl10``          ``<root>/stl10_binary/`` via torchvision                    3 x 96 x 96
=================  ==========================================================  =============

Nothing is downloaded unless ``download=True`` (the ``--download`` flag) is passed. A missing
dataset raises :class:`DatasetNotFoundError`, a corrupt one :class:`CorruptDatasetError`; both
name the path, the expected layout and the flag. A dataset pickle is read without running code
from it (:mod:`realdata.datasets.pickles`): one that names any other class or function than a
numpy array's raises :class:`UnsafePickleError` (a :class:`CorruptDatasetError` and a
``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from realdata.datasets.base import (
    CorruptDatasetError,
    DatasetError,
    DatasetNotFoundError,
    ImageDataset,
    ImageSplit,
    channel_stats,
)
from realdata.datasets.cifar import CIFAR10_LAYOUT, CIFAR100_LAYOUT, load_cifar10, load_cifar100
from realdata.datasets.digits import load_digits_dataset
from realdata.datasets.pickles import UnsafePickleError
from realdata.datasets.stl10 import STL10_LAYOUT, load_stl10
from realdata.datasets.tiny_imagenet import (
    TINY_IMAGENET_LAYOUT,
    default_cache_dir,
    load_tiny_imagenet,
)

__all__ = [
    "Dataset",
    "DATASETS",
    "DEFAULT_DATASET",
    "load_dataset",
    "ImageDataset",
    "ImageSplit",
    "DatasetError",
    "DatasetNotFoundError",
    "CorruptDatasetError",
    "UnsafePickleError",
    "channel_stats",
    "default_cache_dir",
    "load_digits_dataset",
    "load_cifar10",
    "load_cifar100",
    "load_tiny_imagenet",
    "load_stl10",
]


class Dataset(NamedTuple):
    """One registered dataset: its loader and what a run needs to know before loading it.

    Attributes:
        load: ``(root, *, download=False, **options) -> ImageDataset``.
        layout: the expected on-disk layout (``None``: bundled with a package).
        num_classes: ``C`` (the default ``d = C - 1`` of the HCL head needs it before loading).
        stem: the default ResNet stem (``cifar`` for 32x32 inputs, ``imagenet`` for larger ones;
            ``None``: chosen by the image size).
    """

    load: Callable[..., ImageDataset]
    layout: str | None
    num_classes: int
    stem: str | None


#: name -> :class:`Dataset`. A new dataset is its loader module and one line here
#: (CONTRIBUTING.md#how-to-add-a-dataset).
DATASETS: dict[str, Dataset] = {
    "digits": Dataset(load_digits_dataset, None, 10, None),
    "cifar10": Dataset(load_cifar10, CIFAR10_LAYOUT, 10, "cifar"),
    "cifar100": Dataset(load_cifar100, CIFAR100_LAYOUT, 100, "cifar"),
    "tiny-imagenet": Dataset(load_tiny_imagenet, TINY_IMAGENET_LAYOUT, 200, "imagenet"),
    "stl10": Dataset(load_stl10, STL10_LAYOUT, 10, "imagenet"),
}

DEFAULT_DATASET = "digits"


def load_dataset(
    name: str = DEFAULT_DATASET,
    root: str | Path | None = None,
    *,
    download: bool = False,
    **options: object,
) -> ImageDataset:
    """Load a dataset of :data:`DATASETS` by name.

    Args:
        name: one of :data:`DATASETS`.
        root: data folder (required for every dataset except ``digits``).
        download: allow the loader to fetch a missing dataset (never done otherwise).
        **options: loader-specific options, e.g. ``cache_dir`` (Tiny-ImageNet), ``verify_md5``
            (CIFAR, STL-10), ``unlabeled`` (STL-10), ``test_fraction`` (digits).

    Returns:
        The dataset, on the CPU.

    Raises:
        ValueError: unknown ``name``, or ``root`` missing for a dataset on disk.
        DatasetNotFoundError, CorruptDatasetError: see the loaders.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {sorted(DATASETS)}, got {name!r}")
    if root is None and DATASETS[name].layout is not None:
        raise ValueError(f"root is required for dataset {name!r} (the folder that holds it)")
    return DATASETS[name].load(root, download=download, **options)
