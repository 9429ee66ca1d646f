"""Reference batches: ``contrastive_loss(..., anchors=...)`` (docs/hcl.md#reference-batches-anchors).

The terms of a subset of the anchors against the whole batch, normalised as the whole batch's
loss: checked against a per-anchor Python loop, by the sum over a partition of the anchors (values
and gradients) and by the full call's per-pair values restricted to the selected anchors' pairs.
"""

import math
import zlib

import pytest
import torch

from theory.geometry import normalize
from theory.hcl import HSCL, UCL, contrastive_loss, positive_pairs, two_view_contrastive_loss
from theory.hcl.sampling import DRAW_CHUNK_PAIRS
from theory.options import PSI_FORMS, REDUCTIONS

# ---------------------------------------------------------------------------------------------
# a per-anchor loop reference (expectation estimator), written from the definition


def anchor_loop(z, labels, anchors, *, setting, beta, tau, psi, K, margin, self_positive, self_negative,
                groups=None, reduction="mean", detach_weights=True):  # fmt: skip
    """The selected anchors' terms, normalised over the whole batch, anchor by anchor in Python.

    Returns the scalar part, or the list of per-pair values (``reduction="none"``).
    """
    B = z.shape[0]
    lab = labels.tolist()
    grp = lab if groups is None else groups.tolist()
    betas = beta.tolist() if isinstance(beta, torch.Tensor) else [float(beta)] * B

    def positives(i):
        return [j for j in range(B) if grp[j] == grp[i] and (self_positive or j != i)]

    npos = [len(positives(i)) for i in range(B)]
    P = sum(npos)
    with_pos = sum(1 for c in npos if c > 0)
    values, total = [], z.new_zeros(())
    for i in anchors.tolist():
        if setting == "supervised":
            negs = [n for n in range(B) if lab[n] != lab[i]]
        else:
            negs = [n for n in range(B) if self_negative or n != i]
        s = {n: torch.dot(z[i], z[n]) for n in range(B)}
        logits = torch.stack([betas[i] * (s[n].detach() if detach_weights else s[n]) for n in negs])
        w = torch.softmax(logits, dim=0)
        for j in positives(i):
            t = torch.stack([(s[n] - s[j]) / tau for n in negs])
            if psi == "triplet":
                v = (w * torch.relu(t + margin)).sum()
            else:
                v = torch.log(1 + (K if psi == "sum" else 1) * (w * torch.exp(t)).sum())
            values.append(v)
            if reduction == "mean":
                total = total + v / P
            elif reduction == "sum":
                total = total + v
            elif reduction == "anchor_mean":
                total = total + v / (npos[i] * with_pos)
    return values if reduction == "none" else total


def _batch(B=12, d=4, C=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    z = normalize(1.5 * torch.randn(B, d, generator=g, dtype=dtype), "ball")
    labels = torch.randint(0, C, (B,), generator=g)
    labels[:C] = torch.arange(C)
    return z, labels


def _partition(B, seed):
    """A random partition of ``range(B)`` into 2 or 3 sorted parts (every part non-empty)."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(B, generator=g)
    k = 2 + seed % 2
    cuts = sorted(torch.randperm(B - 1, generator=g)[: k - 1].add(1).tolist())
    return [p.sort().values for p in torch.tensor_split(perm, cuts)]


LOOP_CASES = [
    # setting, psi, self_positive, self_negative, beta, detach_weights
    ("supervised", "mean", True, True, 2.0, True),
    ("supervised", "sum", False, True, 0.0, True),
    ("supervised", "triplet", True, True, 1.5, True),
    ("unsupervised", "mean", False, False, 3.0, True),
    ("unsupervised", "sum", True, False, 1.0, False),
    ("unsupervised", "triplet", True, True, 0.0, False),
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("setting,psi,self_positive,self_negative,beta,detach", LOOP_CASES)
def test_anchor_part_matches_loop_reference(
    reduction, setting, psi, self_positive, self_negative, beta, detach
):
    z0, labels = _batch(B=11, seed=3)
    anchors = torch.tensor([1, 4, 5, 9])
    kw = dict(setting=setting, beta=beta, tau=0.7, psi=psi, margin=0.3, self_positive=self_positive,
              self_negative=self_negative)  # fmt: skip
    z1, z2 = z0.clone().requires_grad_(True), z0.clone().requires_grad_(True)
    ref = anchor_loop(z1, labels, anchors, K=8, reduction=reduction, detach_weights=detach, **kw)
    got = contrastive_loss(
        z2, labels, anchors=anchors, num_negatives=8, reduction=reduction, detach_weights=detach, **kw
    )
    if reduction == "none":
        ref = torch.stack(ref)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, atol=1e-12, rtol=1e-12)
    weights = torch.linspace(1, 2, ref.numel(), dtype=ref.dtype).reshape(ref.shape)
    (ref * weights).sum().backward()
    (got * weights).sum().backward()
    torch.testing.assert_close(z2.grad, z1.grad, atol=1e-12, rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# partitions of the anchors add up to the loss of the batch

VARIANTS = ["plain", "beta_zero", "beta_per_anchor", "no_self_positive", "no_self_negative", "groups",
            "undetached"]  # fmt: skip
#: (setting, psi, estimator, variant) where the variant's option applies: self_negative only
#: without labels, detach_weights=False only for the expectation estimator
PARTITION_CASES = [
    (setting, psi, estimator, variant)
    for setting in ["supervised", "unsupervised"]
    for psi in PSI_FORMS
    for estimator in ["expectation", "sampled"]
    for variant in VARIANTS
    if not (variant == "no_self_negative" and setting == "supervised")
    and not (variant == "undetached" and estimator == "sampled")
]


def _variant(variant, z, labels, setting):
    """Keyword arguments and labels of one variant."""
    B = z.shape[0]
    kw = dict(setting=setting, beta=2.0, tau=0.6, margin=0.4)
    if variant == "beta_zero":
        kw["beta"] = 0.0
    elif variant == "beta_per_anchor":
        kw["beta"] = torch.linspace(0.5, 4.0, B, dtype=z.dtype)
    elif variant == "no_self_positive":
        kw["self_positive"] = False
    elif variant == "no_self_negative":
        kw["self_negative"] = False
    elif variant == "groups":  # two views of B/2 instances
        half = B // 2
        labels = torch.cat([labels[:half], labels[:half]])
        kw["positive_groups"] = torch.arange(half).repeat(2)
    elif variant == "undetached":
        kw["detach_weights"] = False
    return kw, labels


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("setting,psi,estimator,variant", PARTITION_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_partition_adds_up_to_the_batch(dtype, setting, psi, estimator, variant, reduction):
    seed = zlib.crc32(f"{setting}-{psi}-{estimator}-{variant}".encode()) % 1000
    z0, labels = _batch(B=16, d=5, C=3, seed=seed, dtype=dtype)
    kw, labels = _variant(variant, z0, labels, setting)
    kw.update(psi=psi, estimator=estimator, num_negatives=9, reduction=reduction)
    z_full = z0.clone().requires_grad_(True)
    full = contrastive_loss(z_full, labels, generator=torch.Generator().manual_seed(seed), **kw)
    parts, z_parts = [], z0.clone().requires_grad_(True)
    for anchors in _partition(16, seed):
        gen = torch.Generator().manual_seed(seed)  # every part draws from the same generator state
        parts.append(contrastive_loss(z_parts, labels, anchors=anchors, generator=gen, **kw))
    tol = dict(atol=1e-12, rtol=1e-11) if dtype == torch.float64 else dict(atol=2e-6, rtol=2e-5)
    if reduction == "none":
        # the parts are the full call's per-pair values of their anchors' pairs, in pair order
        pair_anchor = positive_pairs(labels, positive_groups=kw.get("positive_groups"),
                                     self_positive=kw.get("self_positive", True)).anchor  # fmt: skip
        where = [torch.nonzero(torch.isin(pair_anchor, a)).squeeze(1) for a in _partition(16, seed)]
        for at, part in zip(where, parts):
            torch.testing.assert_close(part, full[at], **tol)
        total = torch.cat(parts)[torch.argsort(torch.cat(where))]  # back in the batch's pair order
    else:
        assert all(p.shape == () for p in parts)
        total = torch.stack(parts).sum()
    torch.testing.assert_close(total, full, **tol)
    weights = torch.linspace(1, 2, full.numel(), dtype=dtype).reshape(full.shape)
    (full * weights).sum().backward()
    (total * weights).sum().backward()
    torch.testing.assert_close(z_parts.grad, z_full.grad, **tol)


def test_none_restricted_to_the_anchors_in_pair_order():
    z, labels = _batch(B=13, C=4, seed=8)
    anchors = torch.tensor([0, 2, 3, 7, 12])
    for estimator in ["expectation", "sampled"]:
        kw = dict(setting="unsupervised", beta=1.5, estimator=estimator, num_negatives=6, reduction="none")
        full = contrastive_loss(z, labels, generator=torch.Generator().manual_seed(2), **kw)
        part = contrastive_loss(z, labels, anchors=anchors, generator=torch.Generator().manual_seed(2), **kw)
        pairs = positive_pairs(labels)
        keep = [k for k, a in enumerate(pairs.anchor.tolist()) if a in anchors.tolist()]
        assert part.shape == (len(keep),)
        torch.testing.assert_close(part, full[keep], atol=1e-13, rtol=1e-13)


# ---------------------------------------------------------------------------------------------
# the sampled estimator's draws


def test_sampled_draws_are_those_of_the_full_call_beyond_one_draw_chunk():
    """With many pairs (more than one CPU draw chunk of sample_negatives; many row chunks of the
    compiled kernels), the parts still use the full call's draws exactly (the values are equal, not
    merely close in distribution), and the shared generator ends in the state the full call leaves
    it in."""
    g = torch.Generator().manual_seed(1)
    B = 64
    z = normalize(torch.randn(B, 6, generator=g, dtype=torch.float64), "ball")
    labels = torch.arange(B) % 2  # two classes: P = 2 * 32^2 pairs
    assert int((torch.bincount(labels) ** 2).sum()) > 3 * DRAW_CHUNK_PAIRS
    kw = dict(setting="unsupervised", beta=3.0, estimator="sampled", num_negatives=5, reduction="none")
    gen_full = torch.Generator().manual_seed(9)
    full = contrastive_loss(z, labels, generator=gen_full, **kw)
    pairs = positive_pairs(labels)
    for anchors in (torch.arange(0, 20), torch.arange(20, 64), torch.tensor([3, 40, 63])):
        gen = torch.Generator().manual_seed(9)
        part = contrastive_loss(z, labels, anchors=anchors, generator=gen, **kw)
        # equal to round-off (the rows (b, B) are a separate product): another draw would move a
        # pair's value by O(0.1)
        torch.testing.assert_close(part, full[torch.isin(pairs.anchor, anchors)], rtol=1e-13, atol=0)
        assert torch.equal(gen.get_state(), gen_full.get_state())


def test_sampled_with_a_sequence_of_one_generator():
    z, labels = _batch(B=12, seed=4)
    kw = dict(setting="supervised", beta=2.0, estimator="sampled", num_negatives=7)
    a = contrastive_loss(
        z, labels, anchors=torch.tensor([1, 5]), generator=[torch.Generator().manual_seed(3)], **kw
    )
    b = contrastive_loss(
        z, labels, anchors=torch.tensor([1, 5]), generator=torch.Generator().manual_seed(3), **kw
    )
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="generator"):
        contrastive_loss(z, labels, anchors=torch.tensor([1]), generator=[torch.Generator()] * 2, **kw)


# ---------------------------------------------------------------------------------------------
# edge cases, entry points, cost


def test_anchors_without_pairs_give_zero():
    z, _ = _batch(B=6, seed=5)
    labels = torch.tensor([0, 0, 1, 2, 3, 3])  # anchors 2 and 3 are singletons
    kw = dict(setting="unsupervised", beta=1.0, self_positive=False)
    zz = z.clone().requires_grad_(True)
    for estimator in ["expectation", "sampled"]:
        part = contrastive_loss(zz, labels, anchors=torch.tensor([2, 3]), estimator=estimator, **kw)
        assert float(part.detach()) == 0.0
        part.backward()
        assert torch.count_nonzero(zz.grad) == 0
        none = contrastive_loss(
            zz, labels, anchors=torch.tensor([2, 3]), estimator=estimator, reduction="none", **kw
        )
        assert none.shape == (0,)


def test_all_anchors_equal_the_full_call():
    z, labels = _batch(B=14, C=4, seed=6)
    for estimator in ["expectation", "sampled"]:
        kw = dict(setting="supervised", beta=2.0, estimator=estimator, num_negatives=11)
        full = contrastive_loss(z, labels, generator=torch.Generator().manual_seed(0), **kw)
        every = contrastive_loss(
            z, labels, anchors=torch.arange(14), generator=torch.Generator().manual_seed(0), **kw
        )
        assert float(every) == pytest.approx(float(full), rel=1e-14)


def test_modules_and_two_view_form_take_anchors():
    z, labels = _batch(B=12, seed=7)
    anchors = torch.tensor([0, 3, 4, 10])
    kw = dict(setting="supervised", beta=5.0)
    want = contrastive_loss(z, labels, anchors=anchors, **kw)
    assert torch.equal(HSCL(beta=5.0)(z, labels, anchors), want)
    assert torch.equal(HSCL(beta=5.0)(z, labels, anchors=anchors), want)
    ids = torch.arange(6).repeat(2)
    lab = torch.cat([labels[:6], labels[:6]])
    got = UCL()(z, lab, anchors, positive_groups=ids)
    assert torch.equal(
        got, contrastive_loss(z, lab, setting="unsupervised", positive_groups=ids, anchors=anchors)
    )
    two = two_view_contrastive_loss(z[:6], z[6:], labels[:6], setting="supervised", beta=1.0, anchors=anchors)
    cat = contrastive_loss(
        z, torch.cat([labels[:6], labels[:6]]), setting="supervised", beta=1.0, anchors=anchors
    )
    assert torch.equal(two, cat)


@pytest.mark.parametrize("estimator", ["expectation", "sampled"])
@pytest.mark.parametrize("psi", PSI_FORMS)
def test_only_the_anchor_rows_are_formed(estimator, psi):
    """No tensor kept for backward has the B x B elements of the whole similarity matrix: the
    cost of a part scales with its b anchors (b = 3 of B = 64 here)."""
    z0, labels = _batch(B=64, d=8, C=4, seed=11)
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    z = z0.clone().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = contrastive_loss(z, labels, setting="supervised", beta=2.0, psi=psi, estimator=estimator,
                                num_negatives=4, anchors=torch.tensor([5, 17, 40]))  # fmt: skip
    loss.backward()
    # the (b, B) rows hold 3 * 64 entries, z itself 64 * 8; the whole S would hold 64 * 64 = 4096
    assert sizes and max(sizes) <= 64 * 8
    assert torch.isfinite(z.grad).all()


INVALID = [
    (torch.tensor([0.0, 1.0]), "must be integers"),
    (torch.tensor([True, False]), "must be integers"),
    (torch.tensor([[0, 1]]), "1-D"),
    (torch.tensor([], dtype=torch.long), "at least one"),
    (torch.tensor([3, 1]), "sorted and unique"),
    (torch.tensor([1, 1, 2]), "sorted and unique"),
    (torch.tensor([-1, 2]), r"\[0, 10\)"),
    (torch.tensor([2, 10]), r"\[0, 10\)"),
    ("first", "anchors"),
]


@pytest.mark.parametrize("anchors,message", INVALID)
def test_invalid_anchors_are_named(anchors, message):
    z, labels = _batch(B=10, seed=0)
    with pytest.raises(ValueError, match="anchors") as info:
        contrastive_loss(z, labels, setting="supervised", anchors=anchors)
    assert info.match(message)


def test_anchors_with_stacked_runs_are_rejected():
    z = torch.randn(2, 8, 3, dtype=torch.float64)
    labels = torch.arange(8) % 2
    with pytest.raises(ValueError, match="anchors.*2-D"):
        contrastive_loss(z, labels, setting="unsupervised", anchors=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="anchors.*2-D"):
        UCL()(z, labels, torch.tensor([0]))


def test_anchors_as_a_list_and_unchecked_values():
    z, labels = _batch(B=10, seed=1)
    want = contrastive_loss(z, labels, setting="supervised", anchors=torch.tensor([2, 6]))
    assert torch.equal(contrastive_loss(z, labels, setting="supervised", anchors=[2, 6]), want)
    got = contrastive_loss(z, labels, setting="supervised", anchors=torch.tensor([2, 6]), check_inputs=False)
    assert torch.equal(got, want)
    assert math.isfinite(float(got))
