"""STL-10 through torchvision, from its binary layout ``stl10_binary/``.

torchvision's :class:`~torchvision.datasets.STL10` checks the md5 sums of all five official
files, including the 2.6 GB ``unlabeled_X.bin``, before it reads one. The loader here keeps
torchvision's reader and checks structure instead (as :mod:`realdata.datasets.cifar`): the files
it reads are present; every image file holds a whole number of 3x96x96 images; there is one label
per image, each in 1..10 on disk (0..9 after torchvision's shift). ``unlabeled_X.bin`` is needed
and read only with ``unlabeled=True``. ``verify_md5=True`` restores torchvision's md5 check;
``download=True`` lets torchvision fetch the official archive (nothing is downloaded otherwise).

STL-10 is one of WeiNCE's vision benchmarks (arXiv 2606.00262, Sec. 5); its recipe keeps the
ImageNet stem of the ResNet for 96x96 inputs (:func:`realdata.training.models.default_stem`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torchvision.datasets import STL10

from realdata.datasets.base import (
    CorruptDatasetError,
    DatasetNotFoundError,
    ImageDataset,
    ImageSplit,
    channel_stats,
    dataset_message,
)

__all__ = ["STL10_LAYOUT", "STL10_CLASSES", "load_stl10"]

STL10_LAYOUT = """
<root>/stl10_binary/
    train_X.bin       uint8, n x 3 x 96 x 96, each channel stored column-major
    train_y.bin       uint8, n labels in 1..10
    test_X.bin        same format
    test_y.bin        same format
    unlabeled_X.bin   uint8 images without labels (needed only with unlabeled=True)
    class_names.txt   optional, one name per line
"""

#: The ten class names in label order (used when ``class_names.txt`` is absent).
STL10_CLASSES = (
    "airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck",
)  # fmt: skip

_IMAGE_BYTES = 3 * 96 * 96


class _STL10(STL10):
    """torchvision's STL-10 reader with a structural integrity check (see module doc)."""

    def __init__(self, root, split: str, folds, download: bool, verify_md5: bool, need) -> None:
        self.verify_md5 = verify_md5
        self._need = need
        super().__init__(root, split=split, folds=folds, download=download)

    def _check_integrity(self) -> bool:
        if self.verify_md5:
            return super()._check_integrity()
        folder = os.path.join(self.root, self.base_folder)
        return all(os.path.isfile(os.path.join(folder, f)) for f in self._need)


def load_stl10(
    root: str | Path,
    *,
    download: bool = False,
    verify_md5: bool = False,
    unlabeled: bool = False,
    fold: int | None = None,
    **_: object,
) -> ImageDataset:
    """STL-10 (Coates et al. 2011): 5 000 labelled train, 8 000 test images, 96x96 RGB, 10 classes.

    Args:
        root: folder that holds ``stl10_binary/`` (see :data:`STL10_LAYOUT`).
        download: fetch the official archive into ``root`` if a file is missing.
        verify_md5: also check the md5 sums of the official files (all five).
        unlabeled: also read the 100 000 ``unlabeled`` images into ``ImageDataset.unlabeled``.
        fold: one of the 10 predefined 1 000-image training folds (``fold_indices.txt``), or
            ``None`` for the whole labelled training set.
        **_: ignored (the uniform loader signature of :class:`realdata.datasets.Dataset`).

    Returns:
        An :class:`ImageDataset` named ``"stl10"`` with ``num_classes = 10``.

    Raises:
        DatasetNotFoundError: a needed file is missing and ``download`` is false.
        CorruptDatasetError: a file's size or labels do not fit the format.
    """
    root = Path(root).expanduser()
    folder = root / _STL10.base_folder
    need = ["train_X.bin", "train_y.bin", "test_X.bin", "test_y.bin"]
    if unlabeled:
        need.append("unlabeled_X.bin")
    missing = [f for f in need if not (folder / f).is_file()]
    if missing and not download:
        what = "not found" if len(missing) == len(need) else f"incomplete (missing {', '.join(missing)})"
        raise DatasetNotFoundError(dataset_message(f"STL-10 {what}", folder, STL10_LAYOUT))
    for f in need if not missing else []:
        if f.endswith("_X.bin") and (folder / f).stat().st_size % _IMAGE_BYTES:
            raise CorruptDatasetError(
                dataset_message(
                    f"STL-10 image file size {(folder / f).stat().st_size} is not a multiple of "
                    f"3*96*96 = {_IMAGE_BYTES} bytes",
                    folder / f,
                    STL10_LAYOUT,
                )
            )
    names = ["train", "test"] + (["unlabeled"] if unlabeled else [])
    loaded = {}
    for i, split in enumerate(names):
        try:
            loaded[split] = _STL10(
                str(root),
                split=split,
                folds=fold if split == "train" else None,
                download=download and i == 0,
                verify_md5=verify_md5,
                need=need,
            )
        except RuntimeError as e:  # torchvision: "not found or corrupted"
            raise CorruptDatasetError(dataset_message(f"STL-10: {e}", folder, STL10_LAYOUT)) from e
        except (ValueError, OSError) as e:
            raise CorruptDatasetError(
                dataset_message(f"STL-10 files cannot be read ({e!r})", folder, STL10_LAYOUT)
            ) from e
    train = _split(loaded["train"], folder / "train_y.bin")
    test = _split(loaded["test"], folder / "test_y.bin")
    classes = tuple(getattr(loaded["train"], "classes", None) or STL10_CLASSES)
    if len(classes) != 10:
        raise CorruptDatasetError(
            dataset_message(
                f"STL-10 class_names.txt lists {len(classes)} names, expected 10",
                folder / "class_names.txt",
                STL10_LAYOUT,
            )
        )
    unl = None
    if unlabeled:
        unl = torch.from_numpy(np.ascontiguousarray(loaded["unlabeled"].data))
    mean, std = channel_stats(train.images)
    return ImageDataset(
        name="stl10",
        train=train,
        test=test,
        num_classes=10,
        class_names=classes,
        mean=mean,
        std=std,
        root=str(root),
        unlabeled=unl,
    )


def _split(ds, label_file: Path) -> ImageSplit:
    data = np.ascontiguousarray(ds.data)  # (n, 3, 96, 96), already CHW row-major
    labels = np.asarray(ds.labels).astype(np.int64)
    if labels.shape != (data.shape[0],):
        raise CorruptDatasetError(
            dataset_message(
                f"STL-10 has {data.shape[0]} images but {labels.shape[0]} labels",
                label_file,
                STL10_LAYOUT,
            )
        )
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        # torchvision subtracts 1 from the uint8 labels: a 0 on disk wraps to 255.
        raise CorruptDatasetError(
            dataset_message("STL-10 labels must lie in 1..10 on disk", label_file, STL10_LAYOUT)
        )
    return ImageSplit(torch.from_numpy(data), torch.from_numpy(labels))
