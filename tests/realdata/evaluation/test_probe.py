"""Tests of realdata/evaluation/probe.py: the stratified split and the linear probe."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from realdata.evaluation.probe import linear_probe, stratified_split


def _blobs(seed: int, n_per_class: int = 60, C: int = 4, d: int = 12):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(C, d, generator=g) * 4
    y = torch.arange(C).repeat_interleave(n_per_class)
    y = y[torch.randperm(y.numel(), generator=g)]
    return centres[y] + torch.randn(y.numel(), d, generator=g), y


def test_stratified_split_keeps_class_proportions():
    y = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    tr, va = stratified_split(y, 0.2, seed=1)
    assert tr.numel() == 80 and va.numel() == 20
    assert torch.equal(torch.cat([tr, va]).sort().values, torch.arange(100))
    assert torch.equal(torch.bincount(y[va], minlength=3), torch.tensor([10, 6, 4]))
    _tr2, va2 = stratified_split(y, 0.2, seed=1)
    assert torch.equal(va, va2)
    _, va3 = stratified_split(y, 0.2, seed=2)
    assert not torch.equal(va, va3)
    with pytest.raises(ValueError, match="val_fraction"):
        stratified_split(y, 1.0)
    with pytest.raises(ValueError, match="stratified"):
        stratified_split(torch.tensor([0, 0, 0, 1]), 0.5)


def test_linear_probe_learns_a_separable_problem():
    x, y = _blobs(0)
    xt, yt = _blobs(0, n_per_class=25)  # same centres: same seed draws the same centres
    res = linear_probe(x, y, xt, yt, epochs=30, batch_size=32, lr=1e-2, progress=False)
    assert res.val_top1 is not None and res.val_top1 >= 0.98
    assert res.test_top1 >= 0.98 and res.train_top1 >= 0.98
    assert res.features == "h" and res.epochs == 30 and np.isfinite(res.final_loss)
    # deterministic for a seed; another probe seed gives another run
    again = linear_probe(x, y, xt, yt, epochs=30, batch_size=32, lr=1e-2, progress=False)
    assert again == res
    other = linear_probe(x, y, xt, yt, epochs=2, batch_size=32, lr=1e-2, seed=5, progress=False)
    assert other.final_loss != res.final_loss
    # no validation split: trains on everything
    full = linear_probe(x, y, xt, yt, epochs=5, lr=1e-2, val_fraction=0.0, progress=False)
    assert full.val_top1 is None


def test_linear_probe_default_protocol_runs_and_chance_on_noise():
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(200, 8, generator=g), torch.randint(0, 4, (200,), generator=g)
    res = linear_probe(x, y, x[:50], y[:50], epochs=3, progress=False)
    assert 0.0 <= res.val_top1 <= 0.6  # labels are noise


def test_linear_probe_validation():
    x, y = _blobs(1)
    for kwargs, match in [
        ({"epochs": 0}, "epochs"),
        ({"batch_size": 0}, "batch_size"),
        ({"lr": -1.0}, "lr"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"features": "q"}, "features"),
        ({"num_classes": 2}, "train_labels"),
    ]:
        with pytest.raises(ValueError, match=match):
            linear_probe(x, y, x, y, progress=False, **kwargs)
    with pytest.raises(ValueError, match="test_h has dimension"):
        linear_probe(x, y, x[:, :3], y, progress=False)
    with pytest.raises(ValueError, match="test_labels"):
        linear_probe(x, y, x, y[:-1], progress=False)
