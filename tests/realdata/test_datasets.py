"""Tests of realdata/datasets: tiny files in the real formats, loaded pixel for pixel; the
missing / corrupt dataset errors; the Tiny-ImageNet cache; digits; the registry."""

from __future__ import annotations

import codecs
import collections
import os
import pickle
import re
import shlex
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import realdata.datasets.tiny_imagenet as tiny_mod
from realdata.datasets import (
    DATASETS,
    CorruptDatasetError,
    DatasetError,
    DatasetNotFoundError,
    ImageDataset,
    ImageSplit,
    UnsafePickleError,
    channel_stats,
    load_cifar10,
    load_cifar100,
    load_dataset,
    load_digits_dataset,
    load_stl10,
    load_tiny_imagenet,
)
from realdata.datasets.pickles import load_data_pickle
from tests.realdata import fakes


def _check(ds: ImageDataset, expected: dict, name: str, num_classes: int) -> None:
    assert ds.name == name and ds.num_classes == num_classes
    assert list(ds.class_names) == expected["class_names"]
    for split in ("train", "test"):
        s = getattr(ds, split)
        assert s.images.dtype == torch.uint8 and s.labels.dtype == torch.int64
        np.testing.assert_array_equal(s.images.numpy(), expected[f"{split}_images"])
        np.testing.assert_array_equal(s.labels.numpy(), expected[f"{split}_labels"])
    mean, std = channel_stats(torch.from_numpy(expected["train_images"]))
    np.testing.assert_allclose(ds.mean, mean)
    np.testing.assert_allclose(ds.std, std)


def _message_ok(err: pytest.ExceptionInfo, path, *layout_words: str, flag: bool = True) -> None:
    msg = str(err.value)
    assert str(path) in msg
    assert "Expected layout" in msg
    for w in layout_words:
        assert w in msg
    assert "--download" in msg


# ----------------------------------------------------------------------------------- CIFAR


def test_cifar10_pixel_for_pixel(tmp_path):
    exp = fakes.write_cifar10(tmp_path)
    ds = load_cifar10(tmp_path)
    _check(ds, exp, "cifar10", 10)
    # the CHW layout of a row: red plane, then green, then blue, each row-major
    row = exp["train_images"][0].reshape(-1)
    assert ds.train.images[0, 1, 0, 0] == row[1024] and ds.train.images[0, 2, 31, 31] == row[-1]


def test_cifar100_pixel_for_pixel(tmp_path):
    exp = fakes.write_cifar100(tmp_path)
    ds = load_cifar100(tmp_path)
    _check(ds, exp, "cifar100", 100)


@pytest.mark.parametrize(
    "loader,folder", [(load_cifar10, "cifar-10-batches-py"), (load_cifar100, "cifar-100-python")]
)
def test_cifar_missing_names_path_layout_flag(tmp_path, loader, folder):
    with pytest.raises(DatasetNotFoundError) as err:
        loader(tmp_path)
    _message_ok(err, tmp_path / folder, folder)
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, DatasetError)


def test_cifar_incomplete_names_missing_file(tmp_path):
    fakes.write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DatasetNotFoundError, match="data_batch_3") as err:
        load_cifar10(tmp_path)
    _message_ok(err, tmp_path / "cifar-10-batches-py", "batches.meta")


def test_cifar_corrupt_pickle_names_file(tmp_path):
    exp = fakes.write_cifar10(tmp_path)
    (exp["folder"] / "test_batch").write_bytes(b"not a pickle at all")
    with pytest.raises(CorruptDatasetError) as err:
        load_cifar10(tmp_path)
    _message_ok(err, exp["folder"] / "test_batch")


def test_cifar_wrong_row_length_and_labels_are_corrupt(tmp_path):
    exp = fakes.write_cifar100(tmp_path)
    with open(exp["folder"] / "train", "wb") as f:
        pickle.dump({"data": np.zeros((2, 100), np.uint8), "fine_labels": [0, 1]}, f)
    with pytest.raises(CorruptDatasetError) as err:
        load_cifar100(tmp_path)
    _message_ok(err, exp["folder"] / "train")
    exp = fakes.write_cifar10(tmp_path / "b")
    with open(exp["folder"] / "test_batch", "wb") as f:
        pickle.dump({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, f)
    with pytest.raises(CorruptDatasetError, match=r"\[0, 10\)"):
        load_cifar10(tmp_path / "b")


@pytest.mark.parametrize("protocol", ["python2", 4, 5])
@pytest.mark.parametrize(
    "loader,writer", [(load_cifar10, "write_cifar10"), (load_cifar100, "write_cifar100")]
)
def test_cifar_pickles_of_every_protocol_load(tmp_path, loader, writer, protocol):
    # "python2": the official files (Python 2 byte strings, numpy.core); 4: Python 3's default
    # up to 3.13; 5: its default from 3.14 (numpy pickles contiguous arrays through _frombuffer)
    exp = getattr(fakes, writer)(tmp_path, protocol=protocol)
    ds = loader(tmp_path)
    _check(ds, exp, ds.name, ds.num_classes)


class _RunsCode:
    """Unpickling this creates ``marker``: through a shell command, or through ``open``."""

    def __init__(self, marker, how):
        self.marker, self.how = str(marker), how

    def __reduce__(self):
        if self.how == "os.system":
            return (os.system, (f"touch {shlex.quote(self.marker)}",))
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("how", ["os.system", "builtins.open"])
@pytest.mark.parametrize(
    "loader,writer,file,key",
    [
        (load_cifar10, "write_cifar10", "data_batch_2", "data"),
        (load_cifar10, "write_cifar10", "batches.meta", "label_names"),
        (load_cifar100, "write_cifar100", "train", "data"),
        (load_cifar100, "write_cifar100", "meta", "fine_label_names"),
    ],
)
def test_cifar_pickle_runs_no_code(tmp_path, loader, writer, file, key, how):
    exp = getattr(fakes, writer)(tmp_path / "data")
    marker = tmp_path / "marker"
    path = exp["folder"] / file
    with open(path, "rb") as f:
        entry = pickle.load(f)
    entry[key] = _RunsCode(marker, how)
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)
    with pytest.raises(CorruptDatasetError) as err:
        loader(tmp_path / "data")
    assert not marker.exists()
    assert isinstance(err.value, ValueError)
    _message_ok(err, path)
    assert "not allowed" in str(err.value) and ("system" in str(err.value) or "open" in str(err.value))


class _Reduces:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


@pytest.mark.parametrize(
    "obj,refused",
    [
        ({"x": _Reduces(codecs.encode, "abc", "utf-16")}, re.escape("_codecs.encode(..., 'utf-16')")),
        ({"x": _Reduces(collections.OrderedDict)}, r"collections\.OrderedDict"),
        ({"x": _Reduces(eval, "1")}, r"__builtin__\.eval"),  # protocol 2 writes Python 2's name
    ],
    ids=["codecs_other_than_latin1", "any_other_class", "builtin"],
)
def test_data_pickle_allows_only_numpy_arrays(tmp_path, obj, refused):
    path = tmp_path / "f"
    path.write_bytes(pickle.dumps(obj, protocol=2))
    with pytest.raises(UnsafePickleError, match=refused) as err:
        load_data_pickle(path, layout="<root>/f", title="Test")
    assert str(path) in str(err.value)
    # bytes keys (a file re-pickled after encoding="bytes") read as str
    path.write_bytes(pickle.dumps({b"data": np.arange(3, dtype=np.uint8), "n": np.int64(3)}, protocol=4))
    got = load_data_pickle(path, layout="<root>/f", title="Test")
    assert set(got) == {"data", "n"} and got["n"] == 3
    np.testing.assert_array_equal(got["data"], np.arange(3, dtype=np.uint8))


def test_cifar_verify_md5_rejects_non_official_files(tmp_path):
    fakes.write_cifar10(tmp_path)
    with pytest.raises(CorruptDatasetError, match="md5 mismatch") as err:
        load_cifar10(tmp_path, verify_md5=True)
    _message_ok(err, tmp_path / "cifar-10-batches-py")


def test_nothing_is_downloaded_without_the_flag(tmp_path, monkeypatch):
    import torchvision.datasets.stl10 as tv_stl

    import realdata.datasets.cifar as cifar_mod

    calls = []

    def fake_download(*args, **kwargs):
        calls.append(args)
        raise OSError("network unreachable (test)")

    monkeypatch.setattr(cifar_mod, "download_and_extract_archive", fake_download)
    monkeypatch.setattr(tv_stl, "download_and_extract_archive", fake_download)
    for loader in (load_cifar10, load_cifar100, load_stl10):
        with pytest.raises(DatasetNotFoundError):
            loader(tmp_path)
    assert calls == []
    with pytest.raises(OSError, match="network unreachable"):
        load_cifar10(tmp_path, download=True)
    assert len(calls) == 1 and "cifar-10-python.tar.gz" in calls[0][0]


# ------------------------------------------------------------------------------- STL-10


def test_stl10_pixel_for_pixel_with_unlabeled(tmp_path):
    exp = fakes.write_stl10(tmp_path)
    ds = load_stl10(tmp_path, unlabeled=True)
    _check(ds, exp, "stl10", 10)
    np.testing.assert_array_equal(ds.unlabeled.numpy(), exp["unlabeled"])
    assert load_stl10(tmp_path).unlabeled is None


def test_stl10_unlabeled_file_needed_only_when_asked(tmp_path):
    exp = fakes.write_stl10(tmp_path, class_names=False)
    (exp["folder"] / "unlabeled_X.bin").unlink()
    ds = load_stl10(tmp_path)
    assert ds.class_names[0] == "airplane" and len(ds.train) == 4
    with pytest.raises(DatasetNotFoundError, match="unlabeled_X.bin") as err:
        load_stl10(tmp_path, unlabeled=True)
    _message_ok(err, exp["folder"], "stl10_binary")


def test_stl10_missing_and_corrupt(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_stl10(tmp_path)
    _message_ok(err, tmp_path / "stl10_binary", "train_X.bin")
    exp = fakes.write_stl10(tmp_path)
    with open(exp["folder"] / "test_X.bin", "ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(CorruptDatasetError, match="multiple") as err:
        load_stl10(tmp_path)
    _message_ok(err, exp["folder"] / "test_X.bin")
    exp = fakes.write_stl10(tmp_path / "b")
    (exp["folder"] / "train_y.bin").write_bytes(bytes([0, 1, 2, 3]))  # label 0 is not 1..10
    with pytest.raises(CorruptDatasetError, match="1..10"):
        load_stl10(tmp_path / "b")
    (exp["folder"] / "train_y.bin").write_bytes(bytes([1, 2]))  # 4 images, 2 labels
    with pytest.raises(CorruptDatasetError, match="labels"):
        load_stl10(tmp_path / "b")


# ------------------------------------------------------------------------ Tiny-ImageNet


def test_tiny_imagenet_pixel_for_pixel(tmp_path):
    exp = fakes.write_tiny_imagenet(tmp_path / "data")
    ds = load_tiny_imagenet(tmp_path / "data", cache_dir=tmp_path / "cache", progress=False)
    _check(ds, exp, "tiny-imagenet", 3)
    # JPEG is lossy, but the decoded pixels stay close to what was drawn
    assert np.abs(ds.train.images.numpy().astype(int) - exp["train_source"]).max() <= 8
    # the greyscale JPEG comes back as three equal channels
    g = ds.train.images[0]
    assert torch.equal(g[0], g[1]) and torch.equal(g[1], g[2])
    # the folder itself works as root too
    ds2 = load_tiny_imagenet(exp["folder"], cache=False, progress=False)
    assert torch.equal(ds2.test.images, ds.test.images)


def test_tiny_imagenet_cache_hit_and_rebuild(tmp_path, monkeypatch):
    exp = fakes.write_tiny_imagenet(tmp_path / "data")
    cache = tmp_path / "cache"
    first = load_tiny_imagenet(tmp_path / "data", cache_dir=cache, progress=False)
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"  # no temporary file left behind
    decode = tiny_mod._decode

    def no_decode(*a, **k):
        raise AssertionError("decoded although the cache is valid")

    monkeypatch.setattr(tiny_mod, "_decode", no_decode)
    second = load_tiny_imagenet(tmp_path / "data", cache_dir=cache, progress=False)
    assert torch.equal(first.train.images, second.train.images)
    assert torch.equal(first.test.labels, second.test.labels) and first.mean == second.mean
    # a truncated cache is detected, reported and rebuilt
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    calls = []
    monkeypatch.setattr(tiny_mod, "_decode", lambda *a, **k: calls.append(1) or decode(*a, **k))
    with pytest.warns(UserWarning, match="incomplete or stale"):
        third = load_tiny_imagenet(tmp_path / "data", cache_dir=cache, progress=False)
    assert calls and torch.equal(third.train.images, first.train.images)
    # a changed source folder gets a new cache entry (different fingerprint)
    img = exp["folder"] / "train" / "n01629819" / "images" / "n01629819_0.JPEG"
    (img.parent / "n01629819_9.JPEG").write_bytes(img.read_bytes())
    fourth = load_tiny_imagenet(tmp_path / "data", cache_dir=cache, progress=False)
    assert len(fourth.train) == len(first.train) + 1 and len(list(cache.iterdir())) == 2


def test_tiny_imagenet_unwritable_cache_only_warns(tmp_path):
    fakes.write_tiny_imagenet(tmp_path / "data")
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    with pytest.warns(UserWarning, match="cannot write"):
        ds = load_tiny_imagenet(tmp_path / "data", cache_dir=blocker / "sub", progress=False)
    assert len(ds.train) == 6


def test_tiny_imagenet_missing_and_corrupt(tmp_path, monkeypatch):
    with pytest.raises(DatasetNotFoundError) as err:
        load_tiny_imagenet(tmp_path, cache=False)
    _message_ok(err, tmp_path / "tiny-imagenet-200", "wnids.txt", "val_annotations.txt")
    exp = fakes.write_tiny_imagenet(tmp_path)
    bad = exp["folder"] / "val" / "images" / "val_2.JPEG"
    bad.write_bytes(b"\xff\xd8 truncated jpeg")
    with pytest.raises(CorruptDatasetError) as err:
        load_tiny_imagenet(tmp_path, cache=False, progress=False)
    _message_ok(err, bad)
    bad.unlink()
    with pytest.raises(DatasetNotFoundError, match="val_2.JPEG"):
        load_tiny_imagenet(tmp_path, cache=False, progress=False)
    ann = exp["folder"] / "val" / "val_annotations.txt"
    ann.write_text("val_0.JPEG\tn00000000\t0\t0\t1\t1\n")
    with pytest.raises(CorruptDatasetError, match="names no class") as err:
        load_tiny_imagenet(tmp_path, cache=False, progress=False)
    _message_ok(err, ann)
    ann.unlink()
    with pytest.raises(DatasetNotFoundError, match="val_annotations"):
        load_tiny_imagenet(tmp_path, cache=False, progress=False)


def test_tiny_imagenet_image_sizes_must_agree(tmp_path):
    exp = fakes.write_tiny_imagenet(tmp_path)
    from PIL import Image

    odd = exp["folder"] / "train" / "n01641577" / "images" / "n01641577_1.JPEG"
    Image.new("RGB", (32, 32)).save(odd, format="JPEG")
    with pytest.raises(CorruptDatasetError, match="32x32") as err:
        load_tiny_imagenet(tmp_path, cache=False, progress=False)
    _message_ok(err, odd)


def test_tiny_imagenet_download_only_with_flag(tmp_path, monkeypatch):
    import torchvision.datasets.utils as tv_utils

    calls = []

    def fake(url, root, md5=None, **kw):
        calls.append((url, md5))
        raise OSError("offline (test)")

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", fake)
    with pytest.raises(DatasetNotFoundError):
        load_tiny_imagenet(tmp_path, cache=False)
    assert calls == []
    with pytest.raises(DatasetNotFoundError, match="download .* failed") as err:
        load_tiny_imagenet(tmp_path, download=True, cache=False)
    assert calls == [(tiny_mod.TINY_IMAGENET_URL, tiny_mod.TINY_IMAGENET_MD5)]
    _message_ok(err, tmp_path / "tiny-imagenet-200")


# ------------------------------------------------------------------------------- digits


def test_digits_dataset_matches_sklearn_and_is_stratified():
    ds = load_digits_dataset()
    assert ds.image_shape == (1, 8, 8) and ds.num_classes == 10 and ds.root is None
    assert len(ds.train) + len(ds.test) == 1797 and len(ds.test) == 360
    bunch = load_digits()
    # every image is one of sklearn's, mapped v -> round(v * 255 / 16)
    ref = np.rint(bunch.images * 255 / 16).astype(np.uint8)
    all_imgs = torch.cat([ds.train.images, ds.test.images]).numpy()[:, 0]
    all_labels = torch.cat([ds.train.labels, ds.test.labels]).numpy()
    key = {r.tobytes() + bytes([int(y)]) for r, y in zip(ref, bunch.target)}
    assert all(a.tobytes() + bytes([int(y)]) in key for a, y in zip(all_imgs, all_labels))
    assert ds.train.images.max() == 255 and ds.train.images.min() == 0
    counts = np.bincount(ds.test.labels.numpy(), minlength=10)
    expected = np.bincount(bunch.target, minlength=10) * 0.2
    assert np.all(np.abs(counts - expected) <= 1)
    again = load_digits_dataset()
    assert torch.equal(again.train.images, ds.train.images)
    other = load_digits_dataset(split_seed=1)
    assert not torch.equal(other.test.labels, ds.test.labels)
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits_dataset(test_fraction=1.0)


# -------------------------------------------------------------------- registry, types


def test_registry_and_load_dataset(tmp_path):
    assert set(DATASETS) == {"digits", "cifar10", "cifar100", "tiny-imagenet", "stl10"}
    assert [d.num_classes for d in DATASETS.values()] == [10, 10, 100, 200, 10]
    assert load_dataset().name == "digits"
    with pytest.raises(ValueError, match="name"):
        load_dataset("imagenet")
    with pytest.raises(ValueError, match="root"):
        load_dataset("cifar10")
    fakes.write_cifar10(tmp_path)
    ds = load_dataset("cifar10", tmp_path, cache_dir=tmp_path / "unused")
    assert ds.name == "cifar10"


def test_image_dataset_validates_and_moves():
    imgs = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    labels = torch.tensor([0, 1, 2, 1])
    split = ImageSplit(imgs, labels)
    with pytest.raises(ValueError, match="uint8"):
        ImageSplit(imgs.float(), labels)
    with pytest.raises(ValueError, match="labels"):
        ImageSplit(imgs, labels[:3])
    with pytest.raises(ValueError, match="labels"):
        ImageSplit(imgs, labels.int())
    names = ("a", "b", "c")
    ds = ImageDataset("x", split, split, 3, names, mean=(0.1,) * 3, std=(0.2,) * 3)
    assert ds.to("cpu").train.images.device.type == "cpu" and ds.image_size == 8
    with pytest.raises(ValueError, match="labels must lie"):
        ImageDataset("x", split, split, 2, ("a", "b"))
    with pytest.raises(ValueError, match="class_names"):
        ImageDataset("x", split, split, 3, ("a",))
    with pytest.raises(ValueError, match="mean"):
        ImageDataset("x", split, split, 3, names, mean=(0.1,))
    with pytest.raises(ValueError, match="test images"):
        ImageDataset("x", split, ImageSplit(imgs[:, :1], labels), 3, names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m, s = channel_stats(imgs.fill_(255))
    assert m == (1.0, 1.0, 1.0) and s == (0.0, 0.0, 0.0)
