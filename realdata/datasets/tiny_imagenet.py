"""Tiny-ImageNet-200 in its standard folder layout, decoded once and cached.

The official archive holds 100 000 training JPEGs (500 per class) and 10 000 labelled
validation JPEGs, 64x64 RGB (a few are stored greyscale and are converted to RGB). The labelled
``val`` folder is the evaluation split (the official ``test`` folder has no labels and is not
read). Tiny-ImageNet is one of the hard-negative paper's real datasets (arXiv 2311.05139,
Sec. 5; ``C = 200``, so ``d = C - 1 = 199``).

Decoding 110 000 JPEGs takes tens of seconds, so the decoded ``uint8`` arrays are cached in one
``.npz`` file under ``cache_dir`` (the data root may be read-only). The cache is written
atomically (temporary file, then rename) and carries a fingerprint of the source (the class list,
the validation annotations, every image's path and size); a cache that is truncated, unreadable,
or whose fingerprint or shapes do not match is detected, reported and rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from realdata.datasets.base import (
    CorruptDatasetError,
    DatasetNotFoundError,
    ImageDataset,
    ImageSplit,
    channel_stats,
    dataset_message,
)
from synthetic.store.folders import atomic_write

__all__ = [
    "TINY_IMAGENET_LAYOUT",
    "TINY_IMAGENET_URL",
    "TINY_IMAGENET_MD5",
    "default_cache_dir",
    "load_tiny_imagenet",
]

TINY_IMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_IMAGENET_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
FOLDER = "tiny-imagenet-200"

TINY_IMAGENET_LAYOUT = """
<root>/tiny-imagenet-200/        (or <root> itself)
    wnids.txt                    one WordNet id per line (200 classes)
    words.txt                    optional: '<wnid> TAB <names>' lines, for class names
    train/<wnid>/images/*.JPEG   training images, 64x64
    val/images/*.JPEG            labelled evaluation images
    val/val_annotations.txt      '<file> TAB <wnid> TAB x0 y0 x1 y1' lines
"""

_CACHE_KEYS = ("fingerprint", "train_images", "train_labels", "test_images", "test_labels",
               "mean", "std")  # fmt: skip


def default_cache_dir() -> Path:
    """``$REALDATA_CACHE``, else ``$XDG_CACHE_HOME/hardneg-collapse``, else ``~/.cache/...``."""
    if os.environ.get("REALDATA_CACHE"):
        return Path(os.environ["REALDATA_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hardneg-collapse"


def load_tiny_imagenet(
    root: str | Path,
    *,
    download: bool = False,
    cache_dir: str | Path | None = None,
    cache: bool = True,
    num_workers: int | None = None,
    progress: bool = True,
    **_: object,
) -> ImageDataset:
    """Tiny-ImageNet-200: 100 000 train and 10 000 labelled val (= test) images, 64x64 RGB.

    Args:
        root: the ``tiny-imagenet-200`` folder or its parent (see :data:`TINY_IMAGENET_LAYOUT`).
        download: fetch and extract the official zip (:data:`TINY_IMAGENET_URL`, md5-checked)
            into ``root`` when the folder is missing.
        cache_dir: folder of the decoded-array cache; default :func:`default_cache_dir`.
        cache: read and write the cache (``False``: decode every time, write nothing).
        num_workers: decoding threads; default ``min(8, os.cpu_count())``.
        progress: show a progress bar while decoding.
        **_: ignored (the uniform loader signature of :class:`realdata.datasets.Dataset`).

    Returns:
        An :class:`ImageDataset` named ``"tiny-imagenet"`` with ``num_classes`` = number of
        lines of ``wnids.txt`` (200), class names from ``words.txt`` when present.

    Raises:
        DatasetNotFoundError: the folder, a class folder or a listed image is missing.
        CorruptDatasetError: an image does not decode, sizes differ, or an annotation names an
            unknown class.
    """
    root = Path(root).expanduser()
    folder = _find_folder(root)
    if folder is None and download:
        _download(root)
        folder = _find_folder(root)
    if folder is None:
        raise DatasetNotFoundError(
            dataset_message("Tiny-ImageNet not found", root / FOLDER, TINY_IMAGENET_LAYOUT)
        )
    _wnids, names, train_files, train_labels, test_files, test_labels, fp = _index(folder)
    path = None
    if cache:
        path = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        path = path / f"{FOLDER}-{fp[:16]}.npz"
        hit = _read_cache(path, fp, len(train_files), len(test_files))
        if hit is not None:
            return _dataset(folder, names, *hit)
    workers = num_workers or min(8, os.cpu_count() or 1)
    train = _decode(train_files, workers, progress, "train")
    test = _decode(test_files, workers, progress, "val")
    if train.shape[1:] != test.shape[1:]:
        raise CorruptDatasetError(
            dataset_message(
                f"Tiny-ImageNet val images are {test.shape[2:]} but train images {train.shape[2:]}",
                folder / "val" / "images",
                TINY_IMAGENET_LAYOUT,
            )
        )
    arrays = dict(
        train_images=torch.from_numpy(train),
        train_labels=torch.as_tensor(train_labels, dtype=torch.int64),
        test_images=torch.from_numpy(test),
        test_labels=torch.as_tensor(test_labels, dtype=torch.int64),
    )
    mean, std = channel_stats(arrays["train_images"])
    if path is not None:
        _write_cache(path, fp, arrays, mean, std)
    return _dataset(
        folder,
        names,
        arrays["train_images"],
        arrays["train_labels"],
        arrays["test_images"],
        arrays["test_labels"],
        mean,
        std,
    )


def _find_folder(root: Path) -> Path | None:
    for cand in (root / FOLDER, root):
        if (cand / "wnids.txt").is_file():
            return cand
    return None


def _download(root: Path) -> None:
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(TINY_IMAGENET_URL, str(root), md5=TINY_IMAGENET_MD5)
    except (OSError, RuntimeError, zipfile.BadZipFile) as e:
        raise DatasetNotFoundError(
            dataset_message(
                f"Tiny-ImageNet download from {TINY_IMAGENET_URL} failed ({e!r})",
                root / FOLDER,
                TINY_IMAGENET_LAYOUT,
            )
        ) from e


def _index(folder: Path):
    """Class list, names, file lists with labels, and the source fingerprint."""
    layout = TINY_IMAGENET_LAYOUT

    def missing(what: str, path: Path) -> DatasetNotFoundError:
        return DatasetNotFoundError(
            dataset_message(f"Tiny-ImageNet incomplete ({what} missing)", path, layout)
        )

    wnids_text = (folder / "wnids.txt").read_text()
    wnids = [w.strip() for w in wnids_text.splitlines() if w.strip()]
    if not wnids or len(set(wnids)) != len(wnids):
        raise CorruptDatasetError(
            dataset_message("wnids.txt is empty or repeats an id", folder / "wnids.txt", layout)
        )
    index = {w: i for i, w in enumerate(wnids)}
    names = list(wnids)
    if (folder / "words.txt").is_file():
        words = {}
        for line in (folder / "words.txt").read_text().splitlines():
            parts = line.split("\t", 1)
            if len(parts) == 2:
                words[parts[0].strip()] = parts[1].split(",")[0].strip()
        names = [words.get(w, w) for w in wnids]
    h = hashlib.sha256()
    h.update(wnids_text.encode())
    train_files, train_labels = [], []
    for w in wnids:
        d = folder / "train" / w / "images"
        if not d.is_dir():
            raise missing(f"training folder of class {w}", d)
        files = sorted(p for p in d.iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
        if not files:
            raise missing(f"training images of class {w}", d)
        train_files += files
        train_labels += [index[w]] * len(files)
    ann = folder / "val" / "val_annotations.txt"
    if not ann.is_file():
        raise missing("val/val_annotations.txt", ann)
    ann_text = ann.read_text()
    h.update(ann_text.encode())
    test_files, test_labels = [], []
    for n, line in enumerate(ann_text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2 or parts[1].strip() not in index:
            raise CorruptDatasetError(
                dataset_message(
                    f"line {n} of val_annotations.txt names no class of wnids.txt: {line!r}",
                    ann,
                    layout,
                )
            )
        test_files.append(folder / "val" / "images" / parts[0].strip())
        test_labels.append(index[parts[1].strip()])
    if not test_files:
        raise CorruptDatasetError(dataset_message("val_annotations.txt is empty", ann, layout))
    for p in train_files + test_files:
        try:
            size = p.stat().st_size
        except FileNotFoundError:
            raise missing(f"image {p.name}", p) from None
        h.update(f"{p.relative_to(folder)}\0{size}\n".encode())
    return wnids, names, train_files, train_labels, test_files, test_labels, h.hexdigest()


def _decode(files: list[Path], workers: int, progress: bool, what: str) -> np.ndarray:
    """Decode JPEGs into one ``uint8`` array ``(N, 3, H, W)``; all images must share a size."""
    first = _read_image(files[0])
    out = np.empty((len(files), 3, *first.shape[:2]), dtype=np.uint8)

    def work(i: int) -> None:
        img = first if i == 0 else _read_image(files[i])
        if img.shape != first.shape:
            raise CorruptDatasetError(
                dataset_message(
                    f"Tiny-ImageNet image is {img.shape[1]}x{img.shape[0]}, the first one "
                    f"{first.shape[1]}x{first.shape[0]}",
                    files[i],
                    TINY_IMAGENET_LAYOUT,
                )
            )
        out[i] = img.transpose(2, 0, 1)

    bar = tqdm(total=len(files), desc=f"decode tiny-imagenet {what}", disable=not progress,
               unit="img", mininterval=2.0)  # fmt: skip
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(work, range(len(files)), chunksize=256):
            bar.update()
    bar.close()
    return out


def _read_image(path: Path) -> np.ndarray:
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, ValueError, SyntaxError) as e:  # PIL.UnidentifiedImageError is an OSError
        raise CorruptDatasetError(
            dataset_message(f"Tiny-ImageNet image cannot be decoded ({e!r})", path, TINY_IMAGENET_LAYOUT)
        ) from e


def _read_cache(path: Path, fp: str, n_train: int, n_test: int):
    """The cached arrays, or ``None`` (missing, or detected incomplete or stale: then warn)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if set(_CACHE_KEYS) - set(z.files):
                raise ValueError(f"keys {sorted(set(_CACHE_KEYS) - set(z.files))} missing")
            if str(z["fingerprint"]) != fp:
                raise ValueError("fingerprint differs from the source folder")
            a = {k: z[k] for k in _CACHE_KEYS[1:]}
        ok = (
            a["train_images"].dtype == np.uint8
            and a["train_images"].shape[:2] == (n_train, 3)
            and a["test_images"].shape[:2] == (n_test, 3)
            and a["train_labels"].shape == (n_train,)
            and a["test_labels"].shape == (n_test,)
        )
        if not ok:
            raise ValueError("array shapes do not match the source folder")
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        warnings.warn(f"Tiny-ImageNet cache {path} is incomplete or stale ({e}); rebuilding it",
                      stacklevel=3)  # fmt: skip
        return None
    return (
        torch.from_numpy(a["train_images"]),
        torch.from_numpy(a["train_labels"].astype(np.int64)),
        torch.from_numpy(a["test_images"]),
        torch.from_numpy(a["test_labels"].astype(np.int64)),
        tuple(float(v) for v in a["mean"]),
        tuple(float(v) for v in a["std"]),
    )


def _write_cache(path: Path, fp: str, arrays: dict, mean, std) -> None:
    """Write the cache atomically; an unwritable cache folder only warns."""
    try:
        atomic_write(
            path,
            lambda f: np.savez(
                f,
                fingerprint=np.array(fp),
                mean=np.array(mean),
                std=np.array(std),
                **{k: v.numpy() for k, v in arrays.items()},
            ),
        )
    except OSError as e:
        warnings.warn(f"cannot write the Tiny-ImageNet cache {path} ({e}); continuing without it",
                      stacklevel=3)  # fmt: skip


def _dataset(folder, names, tr_x, tr_y, te_x, te_y, mean, std) -> ImageDataset:
    return ImageDataset(
        name="tiny-imagenet",
        train=ImageSplit(tr_x, tr_y),
        test=ImageSplit(te_x, te_y),
        num_classes=len(names),
        class_names=tuple(names),
        mean=mean,
        std=std,
        root=str(folder),
    )
