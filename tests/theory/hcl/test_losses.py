"""The vectorised batch losses of theory.hcl against slow per-anchor loop references and closed forms."""

import itertools
import math
import zlib

import numpy as np
import pytest
import torch
from scipy.stats import binom

from theory.geometry import normalize
from theory.hcl import HSCL, HUCL, SCL, UCL, contrastive_loss, two_view_contrastive_loss


# --------------------------------------------------------------------------------------------
# Slow, obviously-correct references (per anchor, per pair, Python loops)
# --------------------------------------------------------------------------------------------
def reference_loss(z, labels, *, setting, beta, tau, psi, K, margin, self_positive, self_negative,
                   detach_weights=True, groups=None):
    """Exact-expectation batched loss, written with loops (spec/hcl.md §2.5)."""
    B = z.shape[0]
    labels = [int(v) for v in labels]
    groups = labels if groups is None else [int(v) for v in groups]
    total, pairs = 0.0, 0
    for i in range(B):
        negs = [n for n in range(B) if (labels[n] != labels[i] if setting == "supervised"
                                        else (self_negative or n != i))]
        poss = [j for j in range(B) if groups[j] == groups[i] and (self_positive or j != i)]
        if not poss:
            continue
        s_w = [torch.dot(z[i], z[n]) for n in negs]
        if detach_weights:
            s_w = [s.detach() for s in s_w]
        w = torch.stack([torch.exp(beta * s) for s in s_w])
        w = w / w.sum()
        for j in poss:
            s_ij = torch.dot(z[i], z[j])
            terms = []
            for r, n in enumerate(negs):
                t = (torch.dot(z[i], z[n]) - s_ij) / tau
                terms.append(w[r] * (torch.relu(t + margin) if psi == "triplet" else torch.exp(t)))
            avg = torch.stack(terms).sum()
            if psi == "mean":
                total = total + torch.log(1 + avg)
            elif psi == "sum":
                total = total + torch.log(1 + K * avg)
            else:
                total = total + avg
            pairs += 1
    return total / pairs


OPTIONS = list(itertools.product(["supervised", "unsupervised"], ["mean", "sum", "triplet"],
                                 [True, False], [True, False]))


@pytest.mark.parametrize("setting,psi,self_positive,self_negative", OPTIONS)
@pytest.mark.parametrize("beta", [0.0, 2.5])
def test_expectation_estimator_matches_loop_float64(setting, psi, self_positive, self_negative, beta, ball_batch):
    seed = zlib.crc32(f"{setting}-{psi}-{self_positive}-{self_negative}".encode()) % 1000
    z, labels = ball_batch(seed=seed)
    kw = dict(setting=setting, beta=beta, tau=0.7, psi=psi, margin=0.3,
              self_positive=self_positive, self_negative=self_negative)
    ref = reference_loss(z, labels, K=32, **kw)
    got = contrastive_loss(z, labels, num_negatives=32, **kw)
    assert abs(float(got) - float(ref)) < 1e-10


@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
@pytest.mark.parametrize("detach", [True, False])
def test_gradients_match_loop(psi, detach, ball_batch):
    z0, labels = ball_batch(B=10, seed=3)
    z1 = z0.clone().requires_grad_(True)
    z2 = z0.clone().requires_grad_(True)
    kw = dict(setting="unsupervised", beta=1.7, tau=0.5, psi=psi, margin=0.2,
              self_positive=True, self_negative=False)
    reference_loss(z1, labels, K=8, detach_weights=detach, **kw).backward()
    contrastive_loss(z2, labels, num_negatives=8, detach_weights=detach, **kw).backward()
    torch.testing.assert_close(z2.grad, z1.grad, atol=1e-10, rtol=1e-9)


def test_detached_and_undetached_weights_differ_in_gradient_only(ball_batch):
    z0, labels = ball_batch(B=10, seed=4)
    za = z0.clone().requires_grad_(True)
    zb = z0.clone().requires_grad_(True)
    la = contrastive_loss(za, labels, setting="supervised", beta=3.0)
    lb = contrastive_loss(zb, labels, setting="supervised", beta=3.0, detach_weights=False)
    assert la.item() == pytest.approx(lb.item(), abs=1e-14)
    la.backward()
    lb.backward()
    assert not torch.allclose(za.grad, zb.grad)


@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_float32_matches_float64(psi, ball_batch):
    z, labels = ball_batch(B=32, d=6, C=5, seed=7)
    for setting in ["supervised", "unsupervised"]:
        kw = dict(setting=setting, beta=4.0, tau=0.5, psi=psi)
        l64 = contrastive_loss(z, labels, **kw)
        l32 = contrastive_loss(z.float(), labels, **kw)
        assert l32.dtype == torch.float32
        assert float(l32) == pytest.approx(float(l64), rel=1e-5, abs=1e-6)


def test_positive_groups_noise_positives(ball_batch):
    """Instance-level positives (two views) with label-defined supervised negatives."""
    z, labels = ball_batch(B=12, seed=11)
    ids = torch.arange(6).repeat(2)
    labels = torch.cat([labels[:6], labels[:6]])
    kw = dict(setting="supervised", beta=2.0, tau=1.0, psi="mean", margin=1.0,
              self_positive=False, self_negative=True)
    ref = reference_loss(z, labels, K=4, groups=ids, **kw)
    got = contrastive_loss(z, labels, positive_groups=ids, num_negatives=4, **kw)
    assert abs(float(got) - float(ref)) < 1e-10
    with pytest.raises(ValueError, match="positive_groups"):
        contrastive_loss(z, torch.arange(12) % 3, setting="supervised", positive_groups=torch.zeros(12, dtype=torch.long))


def test_two_view_contrastive_loss_pairs_views(ball_batch):
    z, labels = ball_batch(B=16, seed=5)
    z1, z2, lab = z[:8], z[8:], labels[:8]
    got = two_view_contrastive_loss(z1, z2, lab, setting="unsupervised", beta=1.0)
    ref = reference_loss(torch.cat([z1, z2]), torch.cat([lab, lab]), setting="unsupervised", beta=1.0,
                         tau=1.0, psi="mean", K=256, margin=1.0, self_positive=True, self_negative=True)
    assert abs(float(got) - float(ref)) < 1e-10


# --------------------------------------------------------------------------------------------
# Sampled estimator
# --------------------------------------------------------------------------------------------
def test_sampled_estimator_is_reproducible(ball_batch):
    z, labels = ball_batch(B=20, seed=1)
    kw = dict(setting="supervised", beta=3.0, estimator="sampled", num_negatives=64)
    a = contrastive_loss(z, labels, generator=torch.Generator().manual_seed(5), **kw)
    b = contrastive_loss(z, labels, generator=torch.Generator().manual_seed(5), **kw)
    c = contrastive_loss(z, labels, generator=torch.Generator().manual_seed(6), **kw)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_sampled_triplet_is_unbiased(setting, ball_batch):
    """The triplet psi is linear in the draws: the sampled estimator is unbiased, so its mean over
    seeds lies within 4 standard errors of the exact expectation."""
    z, labels = ball_batch(B=16, seed=2)
    kw = dict(setting=setting, beta=2.0, psi="triplet", margin=0.5)
    exact = float(contrastive_loss(z, labels, **kw))
    vals = np.array([float(contrastive_loss(z, labels, estimator="sampled", num_negatives=64,
                                            generator=torch.Generator().manual_seed(s), **kw))
                     for s in range(60)])
    se = vals.std(ddof=1) / math.sqrt(len(vals))
    assert abs(vals.mean() - exact) < 4 * se + 1e-12


@pytest.mark.parametrize("psi", ["mean", "sum"])
def test_sampled_converges_to_expectation_as_k_grows(psi, ball_batch):
    """log(1 + mean_K e^t) -> log(1 + E e^t) at rate O(K^-1/2); the error at K = 4096 is small and
    well below the error at K = 8 (averaged over seeds)."""
    z, labels = ball_batch(B=16, seed=9)
    errs = {}
    for K in (8, 4096):
        kw = dict(setting="unsupervised", beta=3.0, psi=psi, num_negatives=K)
        exact = float(contrastive_loss(z, labels, **kw))
        errs[K] = np.mean([abs(float(contrastive_loss(z, labels, estimator="sampled",
                                                        generator=torch.Generator().manual_seed(s), **kw)) - exact)
                           for s in range(8)])
    assert errs[4096] < 0.25 * errs[8]
    assert errs[4096] < 5e-3


# --------------------------------------------------------------------------------------------
# Closed forms at an exact ETF (Neural Collapse)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("C", [3, 10])
@pytest.mark.parametrize("beta", [0.0, 1.0, 5.0, 30.0])
def test_scl_hscl_at_etf_closed_form(C, beta, nc_batch):
    z, labels = nc_batch([3] * C, seed=0)
    expected = math.log1p(math.exp(-C / (C - 1)))
    for est in ["expectation", "sampled"]:
        got = contrastive_loss(z, labels, setting="supervised", beta=beta, estimator=est,
                               generator=torch.Generator().manual_seed(0))
        assert float(got) == pytest.approx(expected, abs=1e-12)
    K = 256
    got = contrastive_loss(z, labels, setting="supervised", beta=beta, psi="sum", num_negatives=K, tau=0.5)
    assert float(got) == pytest.approx(math.log1p(K * math.exp(-C / ((C - 1) * 0.5))), abs=1e-10)


def _batch_collision(n_c, B, C, beta, self_negative):
    """Tilted probability that a negative of an anchor of a class with n_c members is same-class."""
    same = (n_c if self_negative else n_c - 1) * math.exp(beta)
    other = (B - n_c) * math.exp(-beta / (C - 1))
    return same / (same + other)


@pytest.mark.parametrize("beta", [0.0, 2.0, 5.0])
@pytest.mark.parametrize("self_negative", [True, False])
def test_ucl_hucl_at_nc_binomial_formula(beta, self_negative, nc_batch):
    """Sampled estimator: its expectation is the binomial mixture of spec/hcl.md §3.5-3.6 with the
    batch's collision probability; the expectation estimator equals psi at the mean (Jensen form)."""
    C, per_class, K = 4, [5, 3, 4, 6], 16
    z, labels = nc_batch(per_class, seed=0)
    B = len(labels)
    a = C / (C - 1)
    pair_vals, pair_sd2, jensen = [], [], []
    for n_c in per_class:
        q = _batch_collision(n_c, B, C, beta, self_negative)
        m = np.arange(K + 1)
        psi = np.log1p((m + (K - m) * math.exp(-a)) / K)
        pmf = binom.pmf(m, K, q)
        mean = float((pmf * psi).sum())
        pair_vals += [mean] * n_c * n_c
        pair_sd2 += [float((pmf * (psi - mean) ** 2).sum())] * n_c * n_c
        jensen += [math.log1p(q + (1 - q) * math.exp(-a))] * n_c * n_c
    binomial_value = float(np.mean(pair_vals))
    se = math.sqrt(sum(pair_sd2)) / len(pair_vals)
    kw = dict(setting="unsupervised", beta=beta, self_negative=self_negative, num_negatives=K)
    exact = contrastive_loss(z, labels, **kw)
    assert float(exact) == pytest.approx(float(np.mean(jensen)), abs=1e-12)
    sampled = np.mean([float(contrastive_loss(z, labels, estimator="sampled",
                                              generator=torch.Generator().manual_seed(s), **kw))
                       for s in range(40)])
    assert abs(sampled - binomial_value) < 4 * se / math.sqrt(40) + 1e-12
    # The binomial (sampled) value lies below the Jensen (expectation-estimator) value.
    assert binomial_value <= float(exact) + 1e-12


# --------------------------------------------------------------------------------------------
# Harris monotonicity in beta
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_hard_losses_non_decreasing_in_beta(setting, psi, ball_batch):
    for seed in range(5):
        z, labels = ball_batch(B=24, d=4, C=5, seed=100 + seed)
        betas = [0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0]
        vals = [float(contrastive_loss(z, labels, setting=setting, beta=b, psi=psi, margin=0.5)) for b in betas]
        assert all(b >= a - 1e-12 for a, b in zip(vals, vals[1:])), vals


# --------------------------------------------------------------------------------------------
# Robustness: finite losses and gradients on adversarial inputs
# --------------------------------------------------------------------------------------------
ADVERSARIAL = {
    "collapsed": lambda: (torch.ones(12, 3) / math.sqrt(3), torch.arange(12) % 3),
    "similarity_one": lambda: (torch.tensor([[1.0, 0.0]] * 6 + [[0.0, 1.0]] * 6), torch.arange(12) % 2),
    "zero_vectors": lambda: (torch.zeros(8, 4), torch.arange(8) % 2),
    "singleton_classes": lambda: (normalize(torch.randn(6, 3), "sphere"), torch.tensor([0, 0, 1, 2, 3, 3])),
}


@pytest.mark.parametrize("case", list(ADVERSARIAL))
@pytest.mark.parametrize("beta,tau", [(0.0, 1.0), (1000.0, 1.0), (5.0, 0.01), (1000.0, 0.01)])
@pytest.mark.parametrize("estimator", ["expectation", "sampled"])
@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_finite_on_adversarial_inputs(case, beta, tau, estimator, psi):
    z, labels = ADVERSARIAL[case]()
    for setting in ["supervised", "unsupervised"]:
        for self_positive in [True, False]:
            zz = z.clone().requires_grad_(True)
            loss = contrastive_loss(zz, labels, setting=setting, beta=beta, tau=tau, psi=psi,
                                    estimator=estimator, num_negatives=16, self_positive=self_positive,
                                    generator=torch.Generator().manual_seed(0))
            loss.backward()
            assert torch.isfinite(loss), (setting, self_positive)
            assert torch.isfinite(zz.grad).all(), (setting, self_positive)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32(dtype, ball_batch):
    z, labels = ball_batch(B=40, d=8, C=4, seed=12, dtype=torch.float32)
    zh = z.to(dtype).requires_grad_(True)
    for estimator in ["expectation", "sampled"]:
        loss = contrastive_loss(zh, labels, setting="unsupervised", beta=50.0, tau=0.05,
                                estimator=estimator, generator=torch.Generator().manual_seed(0))
        assert loss.dtype == torch.float32
        ref = contrastive_loss(zh.detach().float(), labels, setting="unsupervised", beta=50.0, tau=0.05,
                               estimator=estimator, generator=torch.Generator().manual_seed(0))
        assert loss.item() == pytest.approx(float(ref), rel=1e-6)
        loss.backward()
        assert zh.grad.dtype == dtype and torch.isfinite(zh.grad.float()).all()
        zh.grad = None


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------
def test_invalid_inputs_raise(ball_batch):
    z, labels = ball_batch(B=8, C=3, seed=0)
    cases = [
        (dict(setting="supervised", tau=0.0), "tau"),
        (dict(setting="supervised", tau=-1.0), "tau"),
        (dict(setting="supervised", beta=-0.1), "beta"),
        (dict(setting="supervised", beta=float("nan")), "beta"),
        (dict(setting="weakly"), "setting"),
        (dict(setting="supervised", psi="hinge2"), "psi"),
        (dict(setting="supervised", estimator="mc"), "estimator"),
        (dict(setting="supervised", num_negatives=0), "num_negatives"),
        (dict(setting="supervised", margin=-1.0), "margin"),
        (dict(setting="supervised", num_classes=2), "num_classes"),
    ]
    for kw, word in cases:
        with pytest.raises(ValueError, match=word):
            contrastive_loss(z, labels, **kw)
    with pytest.raises(ValueError, match="labels"):
        contrastive_loss(z, labels[:-1], setting="supervised")
    with pytest.raises(ValueError, match="labels"):
        contrastive_loss(z, -labels - 1, setting="supervised")
    with pytest.raises(ValueError, match="labels"):
        contrastive_loss(z, labels.float(), setting="supervised")
    with pytest.raises(ValueError, match="2-D"):
        contrastive_loss(z[0], labels, setting="supervised")
    with pytest.raises(ValueError, match="empty negative set"):
        contrastive_loss(z, torch.zeros(8, dtype=torch.long), setting="supervised")
    with pytest.raises(ValueError, match="no \\(anchor, positive\\) pair"):
        contrastive_loss(z, torch.arange(8), setting="unsupervised", self_positive=False)
    # a single-class batch is fine without labels' help in the unsupervised setting
    assert torch.isfinite(contrastive_loss(z, torch.zeros(8, dtype=torch.long), setting="unsupervised"))


def test_named_losses(ball_batch):
    z, labels = ball_batch(B=12, C=3, seed=21)
    assert torch.equal(SCL(z, labels), contrastive_loss(z, labels, setting="supervised", beta=0.0))
    assert torch.equal(HSCL(z, labels, beta=2.0), contrastive_loss(z, labels, setting="supervised", beta=2.0))
    assert torch.equal(UCL(z, labels), contrastive_loss(z, labels, setting="unsupervised"))
    assert torch.equal(HUCL(z, labels, beta=3.0), contrastive_loss(z, labels, setting="unsupervised", beta=3.0))
    with pytest.raises(ValueError, match="beta"):
        HSCL(z, labels)
    with pytest.raises(ValueError, match="beta"):
        SCL(z, labels, beta=1.0)


def test_numpy_integer_and_tensor_arguments(ball_batch):
    z, labels = ball_batch(B=10, C=3, seed=31)
    a = contrastive_loss(z, labels, setting="supervised", psi="sum", num_negatives=np.int64(8))
    b = contrastive_loss(z, labels, setting="supervised", psi="sum", num_negatives=8)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="num_negatives"):
        contrastive_loss(z, labels, setting="supervised", num_negatives=True)
    with pytest.raises(ValueError, match="beta"):
        contrastive_loss(z, labels, setting="supervised", beta=torch.ones(2, 5))
    with pytest.raises(ValueError, match="beta > 0"):
        HSCL(z, labels, beta=0.0)
    # a per-anchor beta equals the scalar one when constant
    per = contrastive_loss(z, labels, setting="unsupervised", beta=torch.full((10,), 2.0, dtype=torch.float64))
    assert float(per) == pytest.approx(float(contrastive_loss(z, labels, setting="unsupervised", beta=2.0)), abs=1e-14)
