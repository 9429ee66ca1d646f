"""Tests of realdata/inputs/samplers.py (class-balanced batches) and of the shuffled batches it uses."""

from __future__ import annotations

import pytest
import torch

from realdata.inputs.samplers import class_balanced_batches
from synthetic.engine.data import epoch_batches


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_the_authors_shuffled_batches_are_the_one_batch_rule():
    # synthetic.engine.data.epoch_batches: a permutation cut into N // b batches (drop_last)
    b = epoch_batches(500, 64, _gen(0))
    assert b.shape == (500 // 64, 64) and b.dtype == torch.int64
    assert b.flatten().unique().numel() == b.numel()
    assert torch.equal(b.flatten(), torch.randperm(500, generator=_gen(0))[: 7 * 64])
    assert len(epoch_batches(50000, 512, _gen(1))) == 97  # the authors' CIFAR-100 count
    assert torch.equal(epoch_batches(10, 10, _gen(0)), torch.arange(10)[None])  # a full batch: no draw


def test_class_balanced_batches_m_classes_by_n_samples():
    labels = torch.arange(10).repeat_interleave(30)[torch.randperm(300, generator=_gen(5))]
    batches = class_balanced_batches(labels, 4, classes_per_batch=3, generator=_gen(1))
    assert len(batches) == 300 // 12
    draws = {c: [] for c in range(10)}
    for b in batches:
        assert b.numel() == 12 and b.unique().numel() == 12  # no repeat inside a batch
        counts = torch.bincount(labels[b], minlength=10)
        assert sorted(counts[counts > 0].tolist()) == [4, 4, 4]
        for c in labels[b].unique().tolist():
            draws[c].append(set(b[labels[b] == c].tolist()))
    # a class's 30 samples are drawn 4 at a time from one permutation: 7 draws without reuse
    for c, d in draws.items():
        for k in range(0, len(d), 7):
            chunk = d[k : k + 7]
            assert len(set().union(*chunk)) == 4 * len(chunk)
        assert all(labels[i] == c for s in d for i in s)
    again = class_balanced_batches(labels, 4, classes_per_batch=3, generator=_gen(1))
    assert all(torch.equal(x, y) for x, y in zip(batches, again))


def test_class_balanced_over_all_classes_and_cycles():
    labels = torch.tensor([0] * 5 + [1] * 7 + [2] * 6)
    batches = class_balanced_batches(labels, 2, generator=_gen(2), num_batches=20)
    assert len(batches) == 20
    for b in batches:
        assert torch.equal(torch.bincount(labels[b], minlength=3), torch.tensor([2, 2, 2]))
    # class 0 has 5 samples, drawn 2 at a time: every sample appears over 20 batches
    used = torch.cat(batches)
    assert set(used[labels[used] == 0].tolist()) == {0, 1, 2, 3, 4}
    # classes appear equally often when m < C
    b2 = class_balanced_batches(labels, 1, classes_per_batch=2, generator=_gen(3), num_batches=300)
    freq = torch.bincount(labels[torch.cat(b2)], minlength=3).double() / 600
    assert (freq - 1 / 3).abs().max() < 0.05


def test_class_balanced_validation():
    labels = torch.tensor([0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="samples_per_class"):
        class_balanced_batches(labels, 3, generator=_gen(0))
    with pytest.raises(ValueError, match="classes_per_batch"):
        class_balanced_batches(labels, 1, classes_per_batch=3, generator=_gen(0))
    with pytest.raises(ValueError, match="labels"):
        class_balanced_batches(torch.zeros(0, dtype=torch.long), 1, generator=_gen(0))
    with pytest.raises(ValueError, match="integers"):
        class_balanced_batches(labels.float(), 1, generator=_gen(0))
    with pytest.raises(ValueError, match="num_batches"):
        class_balanced_batches(labels, 1, generator=_gen(0), num_batches=0)
