"""The run-batched kernel: z (R, B, d) equals R separate calls (values, gradients, draws)."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from tests.reference import loop_loss, splitmix64_uniforms
from theory.geometry import normalize
from theory.hcl import (
    HUCL,
    contrastive_loss,
    positive_pairs,
    sample_negatives,
    tilted_log_weights,
    two_view_contrastive_loss,
)
from theory.options import REDUCTIONS


def _runs(R=4, B=12, d=5, C=3, seed=0, dtype=torch.float64):
    """R runs with different embeddings and different labels (every class present in each run)."""
    g = torch.Generator().manual_seed(seed)
    z = normalize(1.5 * torch.randn(R, B, d, generator=g, dtype=dtype), "ball")
    labels = torch.randint(0, C, (R, B), generator=g)
    labels[:, :C] = torch.arange(C)
    labels = torch.stack([lab[torch.randperm(B, generator=g)] for lab in labels])
    return z, labels


CASES = [
    dict(setting="supervised", psi="mean"),
    dict(setting="supervised", psi="sum", self_positive=False),
    dict(setting="supervised", psi="triplet", margin=0.4),
    dict(setting="unsupervised", psi="mean", self_negative=False),
    dict(setting="unsupervised", psi="triplet"),
    dict(setting="unsupervised", psi="mean", detach_weights=False),
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_expectation_equals_separate_calls(case, reduction, dtype, tol):
    z, labels = _runs(dtype=dtype, seed=case)
    beta = torch.tensor([0.0, 0.5, 2.0, 7.0], dtype=dtype)
    kw = dict(CASES[case], tau=0.6, num_negatives=9, reduction=reduction)
    za = z.clone().requires_grad_(True)
    got = contrastive_loss(za, labels, beta=beta, **kw)
    want = []
    zs = [z[r].clone().requires_grad_(True) for r in range(4)]
    for r in range(4):
        want.append(contrastive_loss(zs[r], labels[r], beta=float(beta[r]), **kw))
    want_t = torch.cat(want) if reduction == "none" else torch.stack(want)
    torch.testing.assert_close(got, want_t, atol=tol, rtol=tol)
    weights = torch.linspace(0.5, 1.5, got.numel(), dtype=dtype)
    (got * weights).sum().backward()
    (want_t * weights).sum().backward()
    for r in range(4):
        torch.testing.assert_close(za.grad[r], zs[r].grad, atol=10 * tol, rtol=10 * tol)


def test_batched_against_the_loop_reference_per_run():
    """Independent of the single-run path too: each run against the loop reference."""
    z, labels = _runs(R=3, seed=11)
    beta = torch.tensor([0.0, 1.0, 4.0], dtype=torch.float64)
    got = contrastive_loss(z, labels, setting="unsupervised", beta=beta, tau=0.5)
    for r in range(3):
        ref = loop_loss(z[r], labels[r], setting="unsupervised", beta=float(beta[r]), tau=0.5)
        assert abs(got[r].item() - ref.item()) < 1e-12


def test_one_run_is_the_plain_call():
    z, labels = _runs(R=1, seed=2)
    for est in ["expectation", "sampled"]:
        kw = dict(setting="supervised", beta=3.0, estimator=est)
        a = contrastive_loss(z[0], labels[0], generator=torch.Generator().manual_seed(1), **kw)
        b = contrastive_loss(z, labels, generator=torch.Generator().manual_seed(1), **kw)
        assert a.shape == () and b.shape == (1,)
        assert torch.equal(a, b[0])


def test_shared_labels_and_per_anchor_beta():
    z, _ = _runs(R=3, seed=3)
    labels = torch.arange(12) % 3
    beta = torch.rand(3, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    got = contrastive_loss(z, labels, setting="supervised", beta=beta)
    for r in range(3):
        want = contrastive_loss(z[r], labels, setting="supervised", beta=beta[r])
        assert abs(got[r].item() - want.item()) < 1e-12
    with pytest.raises(ValueError, match="beta must be a scalar or a tensor of shape"):
        contrastive_loss(z, labels, setting="supervised", beta=torch.ones(12))


def test_positive_groups_per_run():
    z, labels = _runs(R=2, B=12, seed=4)
    ids = torch.stack([torch.arange(6).repeat(2), torch.arange(6).repeat_interleave(2)])
    lab = torch.gather(
        labels, 1, torch.stack([torch.arange(6).repeat(2), torch.arange(6).repeat_interleave(2)])
    )
    kw = dict(setting="supervised", beta=2.0, self_positive=False)
    got = contrastive_loss(z, lab, positive_groups=ids, **kw)
    for r in range(2):
        want = contrastive_loss(z[r], lab[r], positive_groups=ids[r], **kw)
        assert abs(got[r].item() - want.item()) < 1e-12


def test_two_view_stacked_runs():
    z, labels = _runs(R=2, B=12, seed=5)
    got = two_view_contrastive_loss(z[:, :6], z[:, 6:], labels[:, :6], setting="unsupervised", beta=1.0)
    for r in range(2):
        want = two_view_contrastive_loss(z[r, :6], z[r, 6:], labels[r, :6], setting="unsupervised", beta=1.0)
        assert abs(got[r].item() - want.item()) < 1e-12


# --------------------------------------------------------------------------------------------
# sampled estimator: one generator for all runs, or one per run
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "setting,psi", [("supervised", "mean"), ("unsupervised", "sum"), ("unsupervised", "triplet")]
)
def test_sampled_generator_per_run_equals_separate_calls(setting, psi):
    z, labels = _runs(seed=6)
    beta = torch.tensor([0.0, 1.0, 3.0, 9.0], dtype=torch.float64)
    kw = dict(setting=setting, psi=psi, estimator="sampled", num_negatives=33, reduction="none")
    za = z.clone().requires_grad_(True)
    got = contrastive_loss(
        za, labels, beta=beta, generator=[torch.Generator().manual_seed(10 + r) for r in range(4)], **kw
    )
    zs = [z[r].clone().requires_grad_(True) for r in range(4)]
    parts = [
        contrastive_loss(
            zs[r], labels[r], beta=float(beta[r]), generator=torch.Generator().manual_seed(10 + r), **kw
        )
        for r in range(4)
    ]
    want = torch.cat(parts)
    torch.testing.assert_close(got, want, atol=1e-13, rtol=1e-13)
    got.sum().backward()
    want.sum().backward()
    for r in range(4):
        torch.testing.assert_close(za.grad[r], zs[r].grad, atol=1e-12, rtol=1e-12)
    for r in range(4):  # one run (R = 1) with a list of one generator and a tensor beta (0 included)
        one = contrastive_loss(
            z[r : r + 1],
            labels[r : r + 1],
            beta=beta[r : r + 1],
            generator=[torch.Generator().manual_seed(10 + r)],
            **kw,
        )
        torch.testing.assert_close(one, parts[r].detach(), atol=1e-13, rtol=1e-13)


def test_sampled_single_generator_layout():
    """One generator draws one stream seed; pair p of the batch's pair order uses the stream's uniforms
    p K .. p K + K - 1, so run r's pairs continue the counters after P_0 + ... + P_{r-1} pairs: the
    separate call of run r with those uniforms (sample_negatives(..., uniforms=...)) gives the same
    per-pair values."""
    z, labels = _runs(R=3, seed=7)
    beta = torch.tensor([0.5, 2.0, 6.0], dtype=torch.float64)
    K = 21
    got = contrastive_loss(
        z,
        labels,
        setting="supervised",
        beta=beta,
        estimator="sampled",
        num_negatives=K,
        reduction="none",
        generator=torch.Generator().manual_seed(5),
    )
    pairs = positive_pairs(labels)
    seed = int(torch.randint(0, 2**62, (), generator=torch.Generator().manual_seed(5)))  # the documented seed
    P = pairs.run.numel()
    u = torch.tensor(splitmix64_uniforms(seed, 0, P * K), dtype=torch.float64).view(P, K)
    start = 0
    for r in range(3):
        P_r = int((pairs.run == r).sum())
        S = (z[r] @ z[r].T).double()
        allowed = labels[r][:, None] != labels[r][None, :]
        rows = pairs.anchor[pairs.run == r]
        idx = sample_negatives(
            tilted_log_weights(S, allowed, float(beta[r])), rows, K, uniforms=u[start : start + P_r]
        )
        draws = {i: idx[rows == i] for i in range(12)}
        ref = loop_loss(
            z[r],
            labels[r],
            setting="supervised",
            beta=float(beta[r]),
            K=K,
            estimator="sampled",
            draws=draws,
            reduction="none",
        )
        torch.testing.assert_close(got[start : start + P_r], ref, atol=1e-14, rtol=1e-14)
        start += P_r
    assert start == got.numel()


def test_sampled_draws_follow_q_in_every_run():
    """Each run's rows of the batched tilted law are sampled with that run's law (chi-square)."""
    z, labels = _runs(R=3, B=8, seed=8)
    beta = torch.tensor([0.0, 2.0, 5.0], dtype=torch.float64)
    S = torch.bmm(z, z.transpose(1, 2)).reshape(24, 8)
    allowed = (labels[:, :, None] != labels[:, None, :]).reshape(24, 8)
    logq = tilted_log_weights(S, allowed, beta.repeat_interleave(8))
    rows = torch.arange(24)
    idx = sample_negatives(logq, rows, 60_000, torch.Generator().manual_seed(0))
    for a in range(24):
        r, i = divmod(a, 8)
        w = torch.softmax(float(beta[r]) * (z[r, i] @ z[r].T)[allowed[a]], 0).numpy()
        counts = np.bincount(idx[a].numpy(), minlength=8)
        assert counts[~allowed[a].numpy()].sum() == 0
        assert chisquare(counts[allowed[a].numpy()], w * counts.sum()).pvalue > 1e-4


# --------------------------------------------------------------------------------------------
# degenerate runs: raise naming the run (the caller leaves such runs out of the stack)
# --------------------------------------------------------------------------------------------
def test_single_class_run_raises_naming_the_run():
    z, labels = _runs(R=3, seed=9)
    labels[1] = 2
    with pytest.raises(ValueError, match=r"run 1: anchor 0 \(label 2\) has an empty negative set"):
        contrastive_loss(z, labels, setting="supervised", beta=1.0)
    # unsupervised: a single-class run is fine
    assert torch.isfinite(contrastive_loss(z, labels, setting="unsupervised", beta=1.0)).all()
    # leaving the run out gives the other runs' values unchanged
    keep = torch.tensor([0, 2])
    got = contrastive_loss(z[keep], labels[keep], setting="supervised", beta=1.0)
    for k, r in enumerate([0, 2]):
        assert got[k].item() == pytest.approx(
            contrastive_loss(z[r], labels[r], setting="supervised", beta=1.0).item(), abs=1e-12
        )


def test_run_without_pairs_raises_naming_the_run():
    z, labels = _runs(R=2, seed=10)
    labels[0] = torch.arange(12)
    with pytest.raises(ValueError, match="run 0 has no \\(anchor, positive\\) pair"):
        contrastive_loss(z, labels, setting="unsupervised", self_positive=False)


def test_module_on_stacked_runs():
    z, labels = _runs(seed=12)
    got = HUCL(beta=2.0, tau=0.5)(z, labels)
    assert got.shape == (4,)
    for r in range(4):
        assert got[r].item() == pytest.approx(HUCL(beta=2.0, tau=0.5)(z[r], labels[r]).item(), abs=1e-12)


def test_shape_errors_name_the_argument():
    z, labels = _runs(R=2, seed=13)
    with pytest.raises(ValueError, match=r"labels must have shape \(2, 12\) or \(12,\)"):
        contrastive_loss(z, labels[:, :5], setting="supervised")
    with pytest.raises(ValueError, match=r"positive_groups must have shape \(2, 12\) or \(12,\)"):
        contrastive_loss(z, labels, setting="supervised", positive_groups=torch.arange(5))
    with pytest.raises(ValueError, match="generator must be a torch.Generator or a sequence of R = 2"):
        contrastive_loss(z, labels, setting="supervised", estimator="sampled", generator=[torch.Generator()])
    with pytest.raises(ValueError, match="z must be a 2-D"):
        contrastive_loss(z[None], labels, setting="supervised")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sampled_generator_per_run_with_draw_chunks_inside_and_across_runs(dtype):
    """Runs of 1000+ pairs (many row chunks of the compiled kernels per run): the stacked call
    draws run r's negatives from generator r's stream exactly as the separate call does, and
    leaves every generator in the same state."""
    from theory.hcl.sampling import DRAW_CHUNK_PAIRS

    g = torch.Generator().manual_seed(3)
    R, B = 3, 150
    z = torch.nn.functional.normalize(torch.randn(R, B, 5, generator=g, dtype=dtype), dim=2)
    labels = torch.randint(0, 7, (R, B), generator=g)
    assert int((torch.bincount(labels[0]) ** 2).sum()) > 2 * DRAW_CHUNK_PAIRS
    kw = dict(setting="supervised", estimator="sampled", num_negatives=40, reduction="none")
    gens = [torch.Generator().manual_seed(20 + r) for r in range(R)]
    got = contrastive_loss(z, labels, beta=torch.tensor([0.0, 2.0, 5.0], dtype=dtype), generator=gens, **kw)
    sep = [torch.Generator().manual_seed(20 + r) for r in range(R)]
    want = torch.cat(
        [
            contrastive_loss(z[r], labels[r], beta=float(b), generator=sep[r], **kw)
            for r, b in enumerate((0, 2, 5))
        ]
    )
    tol = 1e-5 if dtype == torch.float32 else 1e-13  # batched vs single products round differently
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    for a, b in zip(gens, sep):
        assert torch.equal(a.get_state(), b.get_state())
