"""Training: the config's identity, exact resume from checkpoints, corrupt checkpoints, failures."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import struct

import numpy as np
import pandas as pd
import pytest
import torch

from realdata.datasets import ImageSplit, load_digits_dataset
from realdata.training import store
from realdata.training.checkpoint import (
    FORMAT,
    MAGIC,
    CorruptCheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from realdata.training.config import TrainConfig
from realdata.training.loop import RunOptions, train_run
from synthetic.engine.convergence import SettleRule, settle_row
from synthetic.store.schema import stopped_at

TIMING = ["epoch_seconds", "views_per_second"]


@pytest.fixture(scope="module")
def small_digits():
    d = load_digits_dataset()
    return dataclasses.replace(
        d,
        train=ImageSplit(d.train.images[:300], d.train.labels[:300]),
        test=ImageSplit(d.test.images[:100], d.test.labels[:100]),
    )


def _cfg(**kw):
    base = dict(dataset="digits", arch="smallcnn", width=4, batch_size=64, epochs=4, eval_every=2)
    base.update(kw)
    return TrainConfig(**base)


# ---------------------------------------------------------------------------------- config


def test_config_defaults_per_method():
    h = TrainConfig(method="UCL").resolved()
    assert (h.views, h.head, h.normalization, h.tau, h.lr, h.weight_decay, h.out_dim) == (
        "label",
        "hcl",
        "ball",
        1.0,
        1e-3,
        1e-6,
        9,
    )
    w = TrainConfig(method="WeiNCE").resolved()
    assert (w.views, w.head, w.normalization, w.tau, w.lr, w.weight_decay, w.out_dim) == (
        "simclr",
        "weince",
        "sphere",
        0.5,
        3e-4,
        0.0,
        64,
    )
    assert TrainConfig(dataset="cifar100").resolved().arch == "resnet18"
    assert TrainConfig(dataset="cifar100").resolved().stem == "cifar"
    assert TrainConfig(dataset="tiny-imagenet").resolved().stem == "imagenet"


def test_config_key_canonical():
    a = TrainConfig(method="SCL", beta=-0.0)
    b = TrainConfig(method="SCL", beta=0.0)
    assert a.key() == b.key()
    assert (
        TrainConfig(method="SCL").key() == TrainConfig(method="SCL", lr=1e-3, tau=1.0).key()
    )  # defaults resolved
    # fields a run does not use do not change its identity
    assert (
        TrainConfig(method="InfoNCE", estimator="sampled").key()
        == TrainConfig(method="InfoNCE", estimator="expectation").key()
    )
    assert (
        TrainConfig(method="SCL", estimator="expectation", num_negatives=3).key()
        == TrainConfig(method="SCL", estimator="expectation").key()
    )
    assert TrainConfig(method="SCL").key() != TrainConfig(method="SCL", seed=1).key()
    # a sampled run carries the randomness contract: runs drawn before the streams never match
    from theory.options import SAMPLED_DRAWS

    sampled = TrainConfig(method="HSCL", beta=5.0, estimator="sampled").identity_dict()
    assert sampled["draws"] == SAMPLED_DRAWS
    assert "draws" not in TrainConfig(method="HSCL", beta=5.0, estimator="expectation").identity_dict()
    c = TrainConfig(method="HSCL", beta=5.0, dataset="cifar100")
    assert TrainConfig.from_dict(c.to_dict()).key() == c.key()


@pytest.mark.parametrize(
    ("numpy_kw", "python_kw"),
    [
        ({"seed": np.int64(1)}, {"seed": 1}),
        ({"method": "HSCL", "beta": np.float32(2)}, {"method": "HSCL", "beta": 2.0}),
        ({"epochs": np.int32(3), "tau": np.float64(0.5)}, {"epochs": 3, "tau": 0.5}),
    ],
    ids=["seed_int64", "beta_float32", "epochs_tau"],
)
def test_config_accepts_numpy_scalars_as_the_python_number(numpy_kw, python_kw):
    c, ref = TrainConfig(**numpy_kw), TrainConfig(**python_kw)
    assert c == ref and c.key() == ref.key()
    assert all(type(getattr(c, k)) is type(getattr(ref, k)) for k in python_kw)


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"method": "HSCL"}, "beta"),
        ({"method": "SCL", "beta": 1.0}, "beta"),
        ({"beta": -1.0, "method": "HSCL"}, "beta"),
        ({"tau": 0.0}, "tau"),
        ({"method": "WeiNCE", "views": "label"}, "views"),
        ({"epochs": -1}, "epochs"),
        ({"batch_size": 1}, "batch_size"),
        ({"method": "SCL", "recipe": "released"}, "recipe"),
        ({"dataset": "mnist"}, "dataset"),
        ({"init": "nc"}, "init_from"),
        ({"crop_min_scale": 1.5}, "crop_min_scale"),
        ({"lr": float("nan")}, "lr"),
    ],
)
def test_config_rejects_bad_values(kw, name):
    with pytest.raises(ValueError, match=name):
        TrainConfig(**kw)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"checkpoint_every": -1}, "checkpoint_every must be an integer >= 0 (0: at the end only), got -1"),
        ({"checkpoint_every": 2.5}, "checkpoint_every must be an integer >= 0 (0: at the end only), got 2.5"),
        (
            {"checkpoint_every": True},
            "checkpoint_every must be an integer >= 0 (0: at the end only), got True",
        ),
    ],
)
def test_run_options_reject_bad_values(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RunOptions(**kw)


# ---------------------------------------------------------------------------------- resume


@pytest.mark.parametrize(
    "kw",
    [
        dict(method="HSCL", beta=5.0, estimator="sampled", num_negatives=8),
        dict(method="WeiNCE", recipe="released", crop_min_scale=0.5, batch_size=32),
    ],
    ids=["hscl_sampled", "weince_released"],
)
def test_resume_is_bit_for_bit(tmp_path, small_digits, kw):
    torch.set_num_threads(1)
    cfg = _cfg(**kw)
    full = train_run(
        cfg, RunOptions(results=str(tmp_path / "a"), checkpoint_every=1, progress=False), dataset=small_digits
    )
    assert full.status == "done"
    part = train_run(
        cfg,
        RunOptions(results=str(tmp_path / "b"), checkpoint_every=1, stop_after=2, progress=False),
        dataset=small_digits,
    )
    assert part.status == "interrupted"
    assert not store.is_done(tmp_path / "b", part.key)
    with pytest.raises(ValueError, match="--resume"):
        train_run(cfg, RunOptions(results=str(tmp_path / "b"), progress=False), dataset=small_digits)
    resumed = train_run(
        cfg,
        RunOptions(results=str(tmp_path / "b"), checkpoint_every=1, resume=True, progress=False),
        dataset=small_digits,
    )
    assert resumed.status == "done"
    a = store.read_result(tmp_path / "a", full.key).drop(columns=TIMING)
    b = store.read_result(tmp_path / "b", full.key).drop(columns=TIMING)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    pa = load_checkpoint(store.final_checkpoint_file(tmp_path / "a", full.key))["model"]
    pb = load_checkpoint(store.final_checkpoint_file(tmp_path / "b", full.key))["model"]
    for k in pa:
        assert torch.equal(pa[k], pb[k]), k
    if full.gate is not None:
        pd.testing.assert_frame_equal(full.gate, resumed.gate, check_exact=True)
    # a finished run is cached, not retrained
    again = train_run(cfg, RunOptions(results=str(tmp_path / "a"), progress=False), dataset=small_digits)
    assert again.status == "cached"


def test_corrupt_checkpoints_are_named(tmp_path):
    p = save_checkpoint(tmp_path / "c.pt", {"config_key": "abc", "epoch": 1, "model": {"w": torch.ones(3)}})
    assert load_checkpoint(p, expect_key="abc")["epoch"] == 1
    with pytest.raises(CorruptCheckpointError, match="belongs to run"):
        load_checkpoint(p, expect_key="other")
    data = p.read_bytes()
    (tmp_path / "t.pt").write_bytes(data[:-10])
    with pytest.raises(CorruptCheckpointError, match=r"t\.pt: truncated"):
        load_checkpoint(tmp_path / "t.pt")
    flipped = bytearray(data)
    flipped[-5] ^= 0xFF
    (tmp_path / "f.pt").write_bytes(bytes(flipped))
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
        load_checkpoint(tmp_path / "f.pt")
    (tmp_path / "g.pt").write_bytes(b"garbage")
    with pytest.raises(CorruptCheckpointError, match="not a realdata checkpoint"):
        load_checkpoint(tmp_path / "g.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


class _Marker:
    """Unpickling this creates ``path`` (what a crafted checkpoint could do with any command)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _framed(blob: bytes) -> bytes:
    """``blob`` behind a valid header: the checksum matches, only the payload is hostile."""
    return MAGIC + hashlib.sha256(blob).digest() + struct.pack("<Q", len(blob)) + blob


def test_checkpoint_payload_runs_no_code(tmp_path):
    marker = tmp_path / "marker"
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "config_key": "abc", "model": {"w": _Marker(marker)}}, buf)
    (tmp_path / "evil.pt").write_bytes(_framed(buf.getvalue()))
    with pytest.raises(CorruptCheckpointError, match=r"evil\.pt: unreadable payload"):
        load_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload,where",
    [
        ({"rows": [{"loss": np.float64(1.0)}]}, r"payload\['rows'\]\[0\]\['loss'\]: float64"),
        ({"model": {"w": torch.ones(2)}, "step": slice(1, 2)}, r"payload\['step'\]: slice"),
        ({"order": {np.int64(3): 1}}, r"payload\['order'\] key (np\.int64\(3\)|3): int64"),
    ],
    ids=["numpy_scalar", "slice", "numpy_key"],
)
def test_save_checkpoint_refuses_what_weights_only_cannot_load(tmp_path, payload, where):
    with pytest.raises(ValueError, match=where):
        save_checkpoint(tmp_path / "c.pt", payload)
    assert not (tmp_path / "c.pt").exists()


def test_resume_from_corrupt_checkpoint_raises(tmp_path, small_digits):
    cfg = _cfg(method="SCL", estimator="expectation", epochs=2)
    train_run(
        cfg,
        RunOptions(results=str(tmp_path), checkpoint_every=1, stop_after=1, progress=False),
        dataset=small_digits,
    )
    ck = store.checkpoint_file(tmp_path, cfg.resolved(10).key())
    ck.write_bytes(ck.read_bytes()[:100])
    with pytest.raises(CorruptCheckpointError, match=str(ck.name)):
        train_run(cfg, RunOptions(results=str(tmp_path), resume=True, progress=False), dataset=small_digits)


def test_non_finite_run_is_recorded_as_failed(tmp_path, small_digits, monkeypatch):
    from realdata.training import objective as losses

    real = losses.Objective.forward

    def poisoned(self, z1, z2, labels, generator=None):
        out = real(self, z1, z2, labels, generator)
        return losses.StepLoss(out.loss * float("nan"), out.value * float("nan"))

    monkeypatch.setattr(losses.Objective, "forward", poisoned)
    cfg = _cfg(method="SCL", estimator="expectation", epochs=2)
    out = train_run(cfg, RunOptions(results=str(tmp_path), progress=False), dataset=small_digits)
    assert out.status == "failed" and "non-finite" in out.message
    assert not store.is_done(tmp_path, out.key)
    rec = store.failure(tmp_path, out.key)
    assert rec is not None and rec["epoch"] == 1 and "non-finite" in rec["reason"]


# ---------------------------------------------------------------------------------- convergence


def test_a_run_with_a_convergence_rule_stops_where_it_settles(tmp_path, small_digits):
    """The rule stops the run at the first recorded epoch it holds; the rows up to there equal the
    run without a rule, and the stored result is complete (stop) or whole (budget)."""
    torch.set_num_threads(1)
    base = _cfg(method="SCL", estimator="expectation", epochs=8, eval_every=1)
    free = train_run(base, RunOptions(results=str(tmp_path / "a"), progress=False), dataset=small_digits)
    loose = dict(
        settle_window=2, settle_etf=1.0, settle_wcv=1.0, settle_rank=100, settle_erank=100.0, settle_gap=100.0
    )
    cfg = base.replace(**loose)
    assert cfg.key() != base.key()
    rule = SettleRule.of(cfg)
    assert rule is not None
    whole = store.read_result(tmp_path / "a", free.key)
    rows = whole.to_dict("records")
    first = next(int(r["epoch"]) for k, r in enumerate(rows) if settle_row(rows[: k + 1], rule)["settled"])
    out = train_run(cfg, RunOptions(results=str(tmp_path / "b"), progress=False), dataset=small_digits)
    assert out.status == "done"
    stored = store.read_result(tmp_path / "b", out.key)
    assert list(stored["epoch"]) == list(range(first + 1)) and first < 8
    assert stopped_at(stored) == first
    same = [c for c in whole.columns if c not in (*TIMING, "run_key") and not c.startswith("settle")]
    pd.testing.assert_frame_equal(
        stored[same].reset_index(drop=True), whole[same].iloc[: first + 1].reset_index(drop=True)
    )
    # a rule that cannot hold: the run trains its budget, its last row says it did not settle
    strict = base.replace(**{**loose, "settle_etf": 0.0, "settle_rank": 0})
    out = train_run(strict, RunOptions(results=str(tmp_path / "c"), progress=False), dataset=small_digits)
    stored = store.read_result(tmp_path / "c", out.key)
    assert list(stored["epoch"]) == list(range(9)) and not bool(stored["settled"].iloc[-1])
    with pytest.raises(ValueError, match="settle_window"):
        base.replace(settle_window=-1)
