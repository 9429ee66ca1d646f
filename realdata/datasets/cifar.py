"""CIFAR-10 and CIFAR-100 through torchvision, from a local root.

torchvision's :class:`~torchvision.datasets.CIFAR10` checks the md5 sum of every file of the
official archive before it reads any. That check is exact but it rejects any other file in the
same format (and costs a full read of 180 MB). The loaders here keep torchvision's reader and
replace its integrity check by a **structural** one:

1. every file of the layout is present and not empty (else :class:`DatasetNotFoundError`);
2. every pickle unpickles, and the arrays fit together: ``data`` is ``uint8`` with 3072 values
   per row, one label per row, labels in ``[0, C)``, ``C`` class names in the meta file
   (else :class:`CorruptDatasetError` naming the file).

``verify_md5=True`` restores torchvision's md5 check of the official files on top. With
``download=True`` torchvision downloads and extracts the official archive when a file is
missing, checking the archive's md5. Nothing is downloaded otherwise.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import torch
from torchvision.datasets import CIFAR10, CIFAR100
from torchvision.datasets.utils import check_integrity

from realdata.datasets.base import (
    CorruptDatasetError,
    DatasetNotFoundError,
    ImageDataset,
    ImageSplit,
    channel_stats,
    dataset_message,
)

__all__ = ["CIFAR10_LAYOUT", "CIFAR100_LAYOUT", "load_cifar10", "load_cifar100"]

CIFAR10_LAYOUT = """
<root>/cifar-10-batches-py/
    data_batch_1 .. data_batch_5   python pickles: 'data' uint8 (n, 3072) row-major CHW, 'labels'
    test_batch                     same format
    batches.meta                   pickle: 'label_names' (10 names)
"""

CIFAR100_LAYOUT = """
<root>/cifar-100-python/
    train   python pickle: 'data' uint8 (n, 3072) row-major CHW, 'fine_labels'
    test    same format
    meta    pickle: 'fine_label_names' (100 names)
"""

_READ_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    UnicodeDecodeError,
    ImportError,
)


class _StructuralCheck:
    """Mixin: torchvision's CIFAR reader with the md5 check made optional (see module doc)."""

    verify_md5: bool = False
    # provided by torchvision's CIFAR10 / CIFAR100, the other base class
    train_list: list[list[str]]
    test_list: list[list[str]]
    meta: dict[str, str]
    root: str
    base_folder: str
    classes: list[str]
    class_to_idx: dict[str, int]

    def _files(self) -> list[str]:
        names = [f for f, _ in self.train_list + self.test_list] + [self.meta["filename"]]
        return [os.path.join(self.root, self.base_folder, f) for f in names]

    def _check_integrity(self) -> bool:
        if self.verify_md5:
            return bool(super()._check_integrity())  # type: ignore[misc]
        return all(os.path.isfile(p) and os.path.getsize(p) > 0 for p in self._files())

    def _load_meta(self) -> None:
        path = os.path.join(self.root, self.base_folder, self.meta["filename"])
        if self.verify_md5 and not check_integrity(path, self.meta["md5"]):
            raise RuntimeError(f"md5 mismatch: {path}")
        with open(path, "rb") as f:
            meta = pickle.load(f, encoding="latin1")
        self.classes = meta[self.meta["key"]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


class _CIFAR10(_StructuralCheck, CIFAR10):
    def __init__(self, root, train: bool, download: bool, verify_md5: bool) -> None:
        self.verify_md5 = verify_md5
        super().__init__(root, train=train, download=download)


class _CIFAR100(_StructuralCheck, CIFAR100):
    def __init__(self, root, train: bool, download: bool, verify_md5: bool) -> None:
        self.verify_md5 = verify_md5
        super().__init__(root, train=train, download=download)


def load_cifar10(
    root: str | Path, *, download: bool = False, verify_md5: bool = False, **_: object
) -> ImageDataset:
    """CIFAR-10 (Krizhevsky 2009) from ``root``: 50 000 train and 10 000 test images, 32x32 RGB.

    Args:
        root: folder that holds ``cifar-10-batches-py/`` (see :data:`CIFAR10_LAYOUT`).
        download: fetch the official archive into ``root`` if a file is missing.
        verify_md5: also check the md5 sums of the official files.
        **_: ignored (the uniform loader signature of :class:`realdata.datasets.Dataset`).

    Returns:
        An :class:`ImageDataset` named ``"cifar10"`` with ``num_classes = 10``.

    Raises:
        DatasetNotFoundError: a file of the layout is missing and ``download`` is false.
        CorruptDatasetError: a file does not unpickle or its arrays do not fit the format.
    """
    return _load("cifar10", _CIFAR10, 10, CIFAR10_LAYOUT, root, download, verify_md5)


def load_cifar100(
    root: str | Path, *, download: bool = False, verify_md5: bool = False, **_: object
) -> ImageDataset:
    """CIFAR-100 (Krizhevsky 2009), fine labels: 50 000 train and 10 000 test images, 32x32 RGB.

    The main real-data benchmark of the hard-negative paper (arXiv 2311.05139, Sec. 5) and of
    WeiNCE (arXiv 2606.00262, Table 2).

    Args:
        root: folder that holds ``cifar-100-python/`` (see :data:`CIFAR100_LAYOUT`).
        download: fetch the official archive into ``root`` if a file is missing.
        verify_md5: also check the md5 sums of the official files.
        **_: ignored (the uniform loader signature of :class:`realdata.datasets.Dataset`).

    Returns:
        An :class:`ImageDataset` named ``"cifar100"`` with ``num_classes = 100``.

    Raises:
        DatasetNotFoundError: a file of the layout is missing and ``download`` is false.
        CorruptDatasetError: a file does not unpickle or its arrays do not fit the format.
    """
    return _load("cifar100", _CIFAR100, 100, CIFAR100_LAYOUT, root, download, verify_md5)


def _load(name, cls, num_classes, layout, root, download, verify_md5) -> ImageDataset:
    title = "CIFAR-10" if name == "cifar10" else "CIFAR-100"
    root = Path(root).expanduser()
    folder = root / cls.base_folder
    files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    missing = [f for f in files if not (folder / f).is_file() or (folder / f).stat().st_size == 0]
    if missing and not download:
        what = "not found" if len(missing) == len(files) else f"incomplete (missing {', '.join(missing)})"
        raise DatasetNotFoundError(dataset_message(f"{title} {what}", folder, layout))
    if verify_md5 and not missing:
        sums = dict(cls.train_list + cls.test_list)
        sums[cls.meta["filename"]] = cls.meta["md5"]
        bad = [f for f in files if not check_integrity(str(folder / f), sums[f])]
        if bad:
            raise CorruptDatasetError(
                dataset_message(
                    f"{title} files differ from the official ones (md5 mismatch: {', '.join(bad)})",
                    folder,
                    layout,
                )
            )
    splits = []
    for train in (True, False):
        try:
            ds = cls(str(root), train=train, download=download and train, verify_md5=verify_md5)
        except _READ_ERRORS as e:
            unreadable = _first_unreadable(folder, files, cls.meta)
            raise CorruptDatasetError(
                dataset_message(f"{title} file cannot be read ({e!r})", unreadable or folder, layout)
            ) from e
        except RuntimeError as e:  # torchvision: "not found or corrupted" after a download
            raise CorruptDatasetError(dataset_message(f"{title}: {e}", folder, layout)) from e
        splits.append(_to_split(ds, title, folder, layout, num_classes, train))
        classes = tuple(str(c) for c in ds.classes)
    if len(classes) != num_classes:
        raise CorruptDatasetError(
            dataset_message(
                f"{title} meta file lists {len(classes)} class names, expected {num_classes}",
                folder / cls.meta["filename"],
                layout,
            )
        )
    mean, std = channel_stats(splits[0].images)
    return ImageDataset(
        name=name,
        train=splits[0],
        test=splits[1],
        num_classes=num_classes,
        class_names=classes,
        mean=mean,
        std=std,
        root=str(root),
    )


def _to_split(ds, title, folder, layout, num_classes, train) -> ImageSplit:
    data = np.asarray(ds.data)
    labels = np.asarray(ds.targets, dtype=np.int64)
    where = folder / ("train files" if train else "test file")
    if data.dtype != np.uint8 or data.ndim != 4 or data.shape[1:] != (32, 32, 3):
        raise CorruptDatasetError(
            dataset_message(
                f"{title} images must be uint8 rows of 3072 values, got {data.dtype} {data.shape}",
                where,
                layout,
            )
        )
    if labels.shape != (data.shape[0],):
        raise CorruptDatasetError(
            dataset_message(f"{title} has {data.shape[0]} images but {labels.shape[0]} labels", where, layout)
        )
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise CorruptDatasetError(
            dataset_message(
                f"{title} labels must lie in [0, {num_classes}), got [{labels.min()}, {labels.max()}]",
                where,
                layout,
            )
        )
    images = torch.from_numpy(np.ascontiguousarray(data.transpose(0, 3, 1, 2)))
    return ImageSplit(images, torch.from_numpy(labels))


def _first_unreadable(folder: Path, files: list[str], meta: dict) -> Path | None:
    """The first file of ``files`` that does not unpickle into the expected dict (error path)."""
    for f in files:
        try:
            with open(folder / f, "rb") as fh:
                obj = pickle.load(fh, encoding="latin1")
            if f == meta["filename"]:
                ok = isinstance(obj, dict) and meta["key"] in obj
            else:
                labels = obj.get("labels", obj.get("fine_labels"))
                data = np.asarray(obj["data"])
                ok = data.ndim == 2 and data.shape[1] == 3072 and len(labels) == data.shape[0]
        except Exception:
            ok = False
        if not ok:
            return folder / f
    return None
