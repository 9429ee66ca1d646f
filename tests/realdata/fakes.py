"""Writers of tiny datasets in the real on-disk formats (CIFAR pickles, Tiny-ImageNet folder
tree of JPEGs, STL-10 binaries). Each returns what it wrote, as uint8 ``(N, C, H, W)`` arrays
and int64 labels, for pixel-for-pixel checks of the loaders."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
from PIL import Image


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


class _Python2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2's cPickle wrote the official CIFAR files: every string a byte
    string (``SHORT_BINSTRING`` / ``BINSTRING``), numpy's functions under ``numpy.core``."""

    dispatch = pickle._Pickler.dispatch.copy()

    def _byte_string(self, obj: str | bytes) -> None:
        raw = obj.encode("latin-1") if isinstance(obj, str) else obj
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(obj)

    def save_global(self, obj: object, name: str | None = None) -> None:
        module = obj.__module__.replace("numpy._core", "numpy.core")
        self.write(pickle.GLOBAL + f"{module}\n{name or obj.__qualname__}\n".encode())
        self.memoize(obj)

    dispatch[str] = _byte_string
    dispatch[bytes] = _byte_string
    dispatch[type] = save_global


def _pickle(path: Path, obj: dict, protocol: int | str = 2) -> None:
    """``protocol``: a pickle protocol number, or ``"python2"`` (see :class:`_Python2Pickler`)."""
    with open(path, "wb") as f:
        if protocol == "python2":
            _Python2Pickler(f, protocol=2).dump(obj)
        else:
            pickle.dump(obj, f, protocol=int(protocol))


def write_cifar10(
    root: Path, per_batch: int = 3, n_test: int = 5, seed: int = 0, protocol: int | str = 2
) -> dict:
    """``<root>/cifar-10-batches-py/``: 5 training batches of ``per_batch`` rows, a test batch
    (``protocol``: see :func:`_pickle`)."""
    rng = _rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"class{c}" for c in range(10)]
    train_x, train_y = [], []
    for b in range(1, 6):
        x = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        _pickle(
            folder / f"data_batch_{b}",
            {
                "batch_label": f"training batch {b} of 5",
                "labels": y,
                "data": x,
                "filenames": [f"f{b}_{i}.png" for i in range(per_batch)],
            },
            protocol,
        )
        train_x.append(x)
        train_y += y
    tx = rng.integers(0, 256, size=(n_test, 3072), dtype=np.uint8)
    ty = [int(v) for v in rng.integers(0, 10, size=n_test)]
    _pickle(
        folder / "test_batch",
        {
            "batch_label": "testing batch 1 of 1",
            "labels": ty,
            "data": tx,
            "filenames": [f"t{i}.png" for i in range(n_test)],
        },
        protocol,
    )
    _pickle(
        folder / "batches.meta",
        {"num_cases_per_batch": per_batch, "label_names": names, "num_vis": 3072},
        protocol,
    )
    return {
        "folder": folder,
        "train_images": np.concatenate(train_x).reshape(-1, 3, 32, 32),
        "train_labels": np.asarray(train_y, dtype=np.int64),
        "test_images": tx.reshape(-1, 3, 32, 32),
        "test_labels": np.asarray(ty, dtype=np.int64),
        "class_names": names,
    }


def write_cifar100(
    root: Path,
    n_train: int = 7,
    n_test: int = 4,
    seed: int = 1,
    balanced: bool = False,
    protocol: int | str = 2,
) -> dict:
    """``<root>/cifar-100-python/``: ``train``, ``test`` and ``meta`` pickles (``protocol``: see
    :func:`_pickle`).

    ``balanced``: labels ``i mod 100`` (every class present when ``n >= 100``), else uniform draws.
    """
    rng = _rng(seed)
    folder = Path(root) / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"fine{c}" for c in range(100)]
    out = {"folder": folder, "class_names": names}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        fine = [i % 100 for i in range(n)] if balanced else [int(v) for v in rng.integers(0, 100, size=n)]
        _pickle(
            folder / split,
            {
                "filenames": [f"{split}{i}.png" for i in range(n)],
                "batch_label": split,
                "fine_labels": fine,
                "coarse_labels": [f // 5 for f in fine],
                "data": x,
            },
            protocol,
        )
        out[f"{split}_images"] = x.reshape(-1, 3, 32, 32)
        out[f"{split}_labels"] = np.asarray(fine, dtype=np.int64)
    _pickle(
        folder / "meta",
        {"fine_label_names": names, "coarse_label_names": [f"coarse{c}" for c in range(20)]},
        protocol,
    )
    return out


def write_tiny_imagenet(
    root: Path,
    wnids=("n01443537", "n01629819", "n01641577"),
    per_class: int = 2,
    n_val: int = 4,
    size: int = 64,
    seed: int = 2,
    grey: bool = True,
) -> dict:
    """``<root>/tiny-imagenet-200/`` with ``per_class`` training JPEGs per class and ``n_val``
    labelled validation JPEGs; the first training image is stored greyscale (as a few real
    ones are). Returns the arrays PIL decodes back from the written files (RGB) and the
    source arrays (JPEG is lossy)."""
    rng = _rng(seed)
    folder = Path(root) / "tiny-imagenet-200"
    (folder / "val" / "images").mkdir(parents=True, exist_ok=True)
    (folder / "test" / "images").mkdir(parents=True, exist_ok=True)  # unlabelled, never read
    (folder / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (folder / "words.txt").write_text(
        "".join(f"{w}\tthing {i}, other name\n" for i, w in enumerate(wnids)) + "n99999999\tunused\n"
    )

    def smooth_image() -> np.ndarray:
        # smooth content keeps JPEG error small, so the source comparison is meaningful
        base = rng.integers(40, 216, size=(3, 1, 1))
        yy, xx = np.mgrid[0:size, 0:size]
        ramp = (yy * rng.uniform(-1, 1) + xx * rng.uniform(-1, 1))[None]
        return np.clip(base + ramp * 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0)

    def save(path: Path, arr: np.ndarray, as_grey: bool = False) -> tuple[np.ndarray, np.ndarray]:
        img = Image.fromarray(arr)
        if as_grey:
            img = img.convert("L")
        img.save(path, format="JPEG", quality=95)
        with Image.open(path) as im:
            decoded = np.asarray(im.convert("RGB"))
        src = np.asarray(img.convert("RGB"))
        return decoded.transpose(2, 0, 1), src.transpose(2, 0, 1)

    train_x, train_src, train_y = [], [], []
    for c, w in enumerate(wnids):
        d = folder / "train" / w / "images"
        d.mkdir(parents=True, exist_ok=True)
        (folder / "train" / w / f"{w}_boxes.txt").write_text("")
        for i in range(per_class):
            dec, src = save(d / f"{w}_{i}.JPEG", smooth_image(), as_grey=grey and c == 0 and i == 0)
            train_x.append(dec)
            train_src.append(src)
            train_y.append(c)
    val_x, val_src, val_y, lines = [], [], [], []
    for i in range(n_val):
        c = int(rng.integers(0, len(wnids)))
        dec, src = save(folder / "val" / "images" / f"val_{i}.JPEG", smooth_image())
        val_x.append(dec)
        val_src.append(src)
        val_y.append(c)
        lines.append(f"val_{i}.JPEG\t{wnids[c]}\t0\t0\t{size - 1}\t{size - 1}\n")
    (folder / "val" / "val_annotations.txt").write_text("".join(lines))
    return {
        "folder": folder,
        "train_images": np.stack(train_x),
        "train_source": np.stack(train_src),
        "train_labels": np.asarray(train_y, dtype=np.int64),
        "test_images": np.stack(val_x),
        "test_source": np.stack(val_src),
        "test_labels": np.asarray(val_y, dtype=np.int64),
        "class_names": [f"thing {i}" for i in range(len(wnids))],
    }


def write_stl10(
    root: Path,
    n_train: int = 4,
    n_test: int = 3,
    n_unlabeled: int = 2,
    seed: int = 3,
    class_names: bool = True,
) -> dict:
    """``<root>/stl10_binary/``: image files store each channel column-major, labels 1..10."""
    rng = _rng(seed)
    folder = Path(root) / "stl10_binary"
    folder.mkdir(parents=True, exist_ok=True)
    out = {"folder": folder}

    def images(n: int) -> np.ndarray:
        return rng.integers(0, 256, size=(n, 3, 96, 96), dtype=np.uint8)

    for split, n in (("train", n_train), ("test", n_test)):
        x = images(n)
        y = rng.integers(0, 10, size=n).astype(np.int64)
        (folder / f"{split}_X.bin").write_bytes(np.ascontiguousarray(x.transpose(0, 1, 3, 2)).tobytes())
        (folder / f"{split}_y.bin").write_bytes((y + 1).astype(np.uint8).tobytes())
        out[f"{split}_images"], out[f"{split}_labels"] = x, y
    u = images(n_unlabeled)
    (folder / "unlabeled_X.bin").write_bytes(np.ascontiguousarray(u.transpose(0, 1, 3, 2)).tobytes())
    out["unlabeled"] = u
    names = [f"stl{c}" for c in range(10)]
    if class_names:
        (folder / "class_names.txt").write_text("\n".join(names) + "\n")
    out["class_names"] = names
    return out
