"""Reductions of the batch losses (mean / sum / none / anchor_mean) against the loop reference,
and the pair order of reduction="none" (theory.hcl.positive_pairs)."""

import pytest
import torch

from tests.reference import loop_loss
from theory.hcl import contrastive_loss, positive_pairs, two_view_contrastive_loss
from theory.options import REDUCTIONS

CASES = [
    # setting, psi, self_positive, self_negative, beta
    ("supervised", "mean", True, True, 0.0),
    ("supervised", "sum", False, True, 2.0),
    ("supervised", "triplet", True, True, 1.5),
    ("unsupervised", "mean", False, False, 3.0),
    ("unsupervised", "triplet", True, False, 0.0),
]


def _unbalanced(seed=0):
    """Classes of sizes 1..5 so that the pair mean and the anchor mean differ."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4])
    perm = torch.randperm(len(labels), generator=g)
    z = torch.randn(len(labels), 4, generator=g, dtype=torch.float64)
    return z / z.norm(dim=1, keepdim=True).clamp(min=1.0), labels[perm]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("setting,psi,self_positive,self_negative,beta", CASES)
def test_reduction_matches_loop_reference(reduction, setting, psi, self_positive, self_negative, beta):
    z, labels = _unbalanced(1)
    kw = dict(
        setting=setting,
        beta=beta,
        tau=0.7,
        psi=psi,
        margin=0.3,
        self_positive=self_positive,
        self_negative=self_negative,
    )
    z1, z2 = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
    ref = loop_loss(z1, labels, K=8, reduction=reduction, **kw)
    got = contrastive_loss(z2, labels, num_negatives=8, reduction=reduction, **kw)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, atol=1e-12, rtol=1e-12)
    (ref * torch.linspace(1, 2, ref.numel(), dtype=ref.dtype).reshape(ref.shape)).sum().backward()
    (got * torch.linspace(1, 2, got.numel(), dtype=got.dtype).reshape(got.shape)).sum().backward()
    torch.testing.assert_close(z2.grad, z1.grad, atol=1e-11, rtol=1e-10)


def test_reductions_are_consistent_with_each_other():
    z, labels = _unbalanced(2)
    kw = dict(setting="supervised", beta=1.0)
    none = contrastive_loss(z, labels, reduction="none", **kw)
    pairs = positive_pairs(labels)
    assert none.shape == pairs.anchor.shape
    torch.testing.assert_close(contrastive_loss(z, labels, reduction="sum", **kw), none.sum())
    torch.testing.assert_close(contrastive_loss(z, labels, reduction="mean", **kw), none.mean())
    per_anchor = torch.stack([none[pairs.anchor == i].mean() for i in range(len(labels))])
    torch.testing.assert_close(contrastive_loss(z, labels, reduction="anchor_mean", **kw), per_anchor.mean())
    assert not torch.isclose(per_anchor.mean(), none.mean())  # unbalanced classes: they differ


def test_pair_order_is_documented_order():
    labels = torch.tensor([2, 0, 2, 1, 0, 2])
    for sp in (True, False):
        p = positive_pairs(labels, self_positive=sp)
        want = [(i, j) for i in range(6) for j in range(6) if labels[i] == labels[j] and (sp or i != j)]
        assert list(zip(p.anchor.tolist(), p.positive.tolist())) == want
        assert (p.run == 0).all()
    stacked = positive_pairs(torch.stack([labels, torch.tensor([0, 0, 1, 1, 1, 5])]))
    want = [
        (r, i, j)
        for r, lab in enumerate([labels, torch.tensor([0, 0, 1, 1, 1, 5])])
        for i in range(6)
        for j in range(6)
        if lab[i] == lab[j]
    ]
    assert list(zip(stacked.run.tolist(), stacked.anchor.tolist(), stacked.positive.tolist())) == want
    ids = torch.tensor([0, 1, 2, 0, 1, 2])
    g = positive_pairs(torch.zeros(6, dtype=torch.long), positive_groups=ids, self_positive=False)
    assert list(zip(g.anchor.tolist(), g.positive.tolist())) == [
        (0, 3),
        (1, 4),
        (2, 5),
        (3, 0),
        (4, 1),
        (5, 2),
    ]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_sampled_estimator_reductions(reduction):
    """The sampled per-pair values reduce like the expectation ones (same draws for every reduction)."""
    z, labels = _unbalanced(3)
    kw = dict(setting="unsupervised", beta=2.0, estimator="sampled", num_negatives=16)
    none = contrastive_loss(z, labels, reduction="none", generator=torch.Generator().manual_seed(4), **kw)
    got = contrastive_loss(z, labels, reduction=reduction, generator=torch.Generator().manual_seed(4), **kw)
    pairs = positive_pairs(labels)
    want = {
        "none": none,
        "sum": none.sum(),
        "mean": none.mean(),
        "anchor_mean": torch.stack([none[pairs.anchor == i].mean() for i in range(len(labels))]).mean(),
    }[reduction]
    torch.testing.assert_close(got, want)


def test_two_view_reduction_none_follows_the_concatenated_batch():
    z, labels = _unbalanced(4)
    z1, z2, lab = z[:7], z[7:14], labels[:7]
    got = two_view_contrastive_loss(z1, z2, lab, setting="supervised", beta=1.0, reduction="none")
    want = contrastive_loss(
        torch.cat([z1, z2]), torch.cat([lab, lab]), setting="supervised", beta=1.0, reduction="none"
    )
    assert torch.equal(got, want)


def test_unknown_reduction_is_named():
    z, labels = _unbalanced(0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        contrastive_loss(z, labels, setting="supervised", reduction="batchmean")
