"""CIFAR-10 and CIFAR-100 from a local root: torchvision's file list, a reader that runs no code.

The files are Python pickles, and ``pickle.load`` runs whatever a pickle names (a crafted file
runs a shell command). They are read by :func:`realdata.datasets.pickles.load_data_pickle`, which
builds only dicts, lists, strings, numbers and numpy arrays and refuses any other class or
function before running anything (:class:`~realdata.datasets.pickles.UnsafePickleError`, naming
the file). torchvision's :class:`~torchvision.datasets.CIFAR10` would ``pickle.load`` them itself,
so only its table of files, md5 sums and archive is used here. Its md5 check of every file is
exact but rejects any other file in the same format (and costs a full read of 180 MB); the
loaders check the **structure** instead:

1. every file of the layout is present and not empty (else :class:`DatasetNotFoundError`);
2. every file unpickles, and the arrays fit together: ``data`` is ``uint8`` with 3072 values
   per row, one label per row, labels in ``[0, C)``, ``C`` class names in the meta file
   (else :class:`CorruptDatasetError` naming the file).

``verify_md5=True`` adds torchvision's md5 check of the official files. With ``download=True``
the official archive is downloaded and extracted when a file is missing (torchvision's
``download_and_extract_archive``, which checks the archive's md5). Nothing is downloaded otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchvision.datasets import CIFAR10, CIFAR100
from torchvision.datasets.utils import check_integrity, download_and_extract_archive

from realdata.datasets.base import (
    CorruptDatasetError,
    DatasetNotFoundError,
    ImageDataset,
    ImageSplit,
    channel_stats,
    dataset_message,
)
from realdata.datasets.pickles import load_data_pickle

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
        CorruptDatasetError: a file does not unpickle or its arrays do not fit the format;
            :class:`~realdata.datasets.pickles.UnsafePickleError` (also a ``ValueError``) when it
            names a class or function other than a numpy array's (nothing of it is run).
    """
    return _load("cifar10", CIFAR10, 10, CIFAR10_LAYOUT, root, download, verify_md5)


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
        CorruptDatasetError: a file does not unpickle or its arrays do not fit the format;
            :class:`~realdata.datasets.pickles.UnsafePickleError` (also a ``ValueError``) when it
            names a class or function other than a numpy array's (nothing of it is run).
    """
    return _load("cifar100", CIFAR100, 100, CIFAR100_LAYOUT, root, download, verify_md5)


def _load(name, cls, num_classes, layout, root, download, verify_md5) -> ImageDataset:
    title = "CIFAR-10" if name == "cifar10" else "CIFAR-100"
    root = Path(root).expanduser()
    folder = root / cls.base_folder
    train_files = [f for f, _ in cls.train_list]
    test_files = [f for f, _ in cls.test_list]
    files = train_files + test_files + [cls.meta["filename"]]

    def missing() -> list[str]:
        return [f for f in files if not (folder / f).is_file() or (folder / f).stat().st_size == 0]

    if missing() and download:
        download_and_extract_archive(cls.url, str(root), filename=cls.filename, md5=cls.tgz_md5)
    absent = missing()
    if absent:
        what = "not found" if len(absent) == len(files) else f"incomplete (missing {', '.join(absent)})"
        raise DatasetNotFoundError(dataset_message(f"{title} {what}", folder, layout))
    if verify_md5:
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
    meta = folder / cls.meta["filename"]
    classes = _class_names(meta, cls.meta["key"], title, layout, num_classes)
    splits = []
    for names in (train_files, test_files):
        parts = [_read_batch(folder / f, title, layout, num_classes) for f in names]
        data = np.concatenate([x for x, _ in parts])
        labels = np.concatenate([y for _, y in parts])
        images = torch.from_numpy(np.ascontiguousarray(data.reshape(-1, 3, 32, 32)))  # rows are CHW
        splits.append(ImageSplit(images, torch.from_numpy(labels)))
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


def _corrupt(title: str, problem: str, path: Path, layout: str) -> CorruptDatasetError:
    return CorruptDatasetError(dataset_message(f"{title} {problem}", path, layout))


def _class_names(path: Path, key: str, title: str, layout: str, num_classes: int) -> tuple[str, ...]:
    """The ``key`` list of the meta pickle at ``path``: ``num_classes`` names."""
    meta: Any = load_data_pickle(path, layout=layout, title=title)
    names = meta.get(key) if isinstance(meta, dict) else None
    if not isinstance(names, list | tuple):
        raise _corrupt(title, f"meta file must be a dict with a list {key!r}", path, layout)
    if len(names) != num_classes:
        raise _corrupt(
            title, f"meta file lists {len(names)} class names, expected {num_classes}", path, layout
        )
    return tuple(n.decode("latin-1") if isinstance(n, bytes) else str(n) for n in names)


def _read_batch(path: Path, title: str, layout: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``data`` rows (uint8 ``(n, 3072)``) and labels (int64 ``(n,)``) of one batch file."""
    batch: Any = load_data_pickle(path, layout=layout, title=title)
    key = "labels" if isinstance(batch, dict) and "labels" in batch else "fine_labels"
    if not isinstance(batch, dict) or "data" not in batch or key not in batch:
        raise _corrupt(title, "file must be a dict with 'data' and 'labels' (or 'fine_labels')", path, layout)
    data = batch["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise _corrupt(title, f"images must be uint8 rows of 3072 values, got {got}", path, layout)
    try:
        labels = np.asarray(batch[key], dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _corrupt(title, f"labels must be integers ({exc})", path, layout) from exc
    if labels.shape != (data.shape[0],):
        raise _corrupt(title, f"has {data.shape[0]} images but {labels.size} labels", path, layout)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise _corrupt(
            title,
            f"labels must lie in [0, {num_classes}), got [{labels.min()}, {labels.max()}]",
            path,
            layout,
        )
    return data, labels
