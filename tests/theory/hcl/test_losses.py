"""The vectorised batch losses of theory.hcl against the shared per-anchor loop reference
(tests/reference.py) and closed forms."""

import math
import zlib

import numpy as np
import pytest
import torch
from scipy.stats import binom

from tests.reference import loop_loss, psi_ref
from theory.geometry import normalize
from theory.hcl import contrastive_loss, sample_negatives, tilted_log_weights, two_view_contrastive_loss
from theory.hcl.pairs import positive_pairs


def reference_loss(z, labels, *, K, groups=None, **kw):
    """The exact-expectation loop reference (tests/reference.py)."""
    return loop_loss(z, labels, K=K, groups=groups, estimator="expectation", **kw)


OPTIONS = [
    (setting, psi, sp, sn)
    for setting in ["supervised", "unsupervised"]
    for psi in ["mean", "sum", "triplet"]
    for sp in [True, False]
    for sn in [True, False]
]


@pytest.mark.parametrize("setting,psi,self_positive,self_negative", OPTIONS)
@pytest.mark.parametrize("beta", [0.0, 2.5])
def test_expectation_estimator_matches_loop_float64(
    setting, psi, self_positive, self_negative, beta, ball_batch
):
    seed = zlib.crc32(f"{setting}-{psi}-{self_positive}-{self_negative}".encode()) % 1000
    z, labels = ball_batch(seed=seed)
    kw = dict(
        setting=setting,
        beta=beta,
        tau=0.7,
        psi=psi,
        margin=0.3,
        self_positive=self_positive,
        self_negative=self_negative,
    )
    ref = reference_loss(z, labels, K=32, **kw)
    got = contrastive_loss(z, labels, num_negatives=32, **kw)
    assert abs(float(got) - float(ref)) < 1e-10


@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
@pytest.mark.parametrize("detach", [True, False])
def test_gradients_match_loop(psi, detach, ball_batch):
    z0, labels = ball_batch(B=10, seed=3)
    z1 = z0.clone().requires_grad_(True)
    z2 = z0.clone().requires_grad_(True)
    kw = dict(
        setting="unsupervised",
        beta=1.7,
        tau=0.5,
        psi=psi,
        margin=0.2,
        self_positive=True,
        self_negative=False,
    )
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
    kw = dict(
        setting="supervised",
        beta=2.0,
        tau=1.0,
        psi="mean",
        margin=1.0,
        self_positive=False,
        self_negative=True,
    )
    ref = reference_loss(z, labels, K=4, groups=ids, **kw)
    got = contrastive_loss(z, labels, positive_groups=ids, num_negatives=4, **kw)
    assert abs(float(got) - float(ref)) < 1e-10
    with pytest.raises(ValueError, match="positive_groups"):
        contrastive_loss(
            z, torch.arange(12) % 3, setting="supervised", positive_groups=torch.zeros(12, dtype=torch.long)
        )


def test_two_view_contrastive_loss_pairs_views(ball_batch):
    z, labels = ball_batch(B=16, seed=5)
    z1, z2, lab = z[:8], z[8:], labels[:8]
    got = two_view_contrastive_loss(z1, z2, lab, setting="unsupervised", beta=1.0)
    ref = reference_loss(
        torch.cat([z1, z2]),
        torch.cat([lab, lab]),
        setting="unsupervised",
        beta=1.0,
        tau=1.0,
        psi="mean",
        K=256,
        margin=1.0,
        self_positive=True,
        self_negative=True,
    )
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
    vals = np.array(
        [
            float(
                contrastive_loss(
                    z,
                    labels,
                    estimator="sampled",
                    num_negatives=64,
                    generator=torch.Generator().manual_seed(s),
                    **kw,
                )
            )
            for s in range(60)
        ]
    )
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
        errs[K] = np.mean(
            [
                abs(
                    float(
                        contrastive_loss(
                            z, labels, estimator="sampled", generator=torch.Generator().manual_seed(s), **kw
                        )
                    )
                    - exact
                )
                for s in range(8)
            ]
        )
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
        got = contrastive_loss(
            z,
            labels,
            setting="supervised",
            beta=beta,
            estimator=est,
            generator=torch.Generator().manual_seed(0),
        )
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
    """Sampled estimator: its expectation is the binomial mixture of docs/hcl.md#hucl-at-neural-collapse-t7 with the
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
    sampled = np.mean(
        [
            float(
                contrastive_loss(
                    z, labels, estimator="sampled", generator=torch.Generator().manual_seed(s), **kw
                )
            )
            for s in range(40)
        ]
    )
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
        vals = [
            float(contrastive_loss(z, labels, setting=setting, beta=b, psi=psi, margin=0.5)) for b in betas
        ]
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
            loss = contrastive_loss(
                zz,
                labels,
                setting=setting,
                beta=beta,
                tau=tau,
                psi=psi,
                estimator=estimator,
                num_negatives=16,
                self_positive=self_positive,
                generator=torch.Generator().manual_seed(0),
            )
            loss.backward()
            assert torch.isfinite(loss), (setting, self_positive)
            assert torch.isfinite(zz.grad).all(), (setting, self_positive)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32(dtype, ball_batch):
    z, labels = ball_batch(B=40, d=8, C=4, seed=12, dtype=torch.float32)
    zh = z.to(dtype).requires_grad_(True)
    for estimator in ["expectation", "sampled"]:
        loss = contrastive_loss(
            zh,
            labels,
            setting="unsupervised",
            beta=50.0,
            tau=0.05,
            estimator=estimator,
            generator=torch.Generator().manual_seed(0),
        )
        assert loss.dtype == torch.float32
        ref = contrastive_loss(
            zh.detach().float(),
            labels,
            setting="unsupervised",
            beta=50.0,
            tau=0.05,
            estimator=estimator,
            generator=torch.Generator().manual_seed(0),
        )
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


def test_numpy_integer_and_tensor_arguments(ball_batch):
    z, labels = ball_batch(B=10, C=3, seed=31)
    a = contrastive_loss(z, labels, setting="supervised", psi="sum", num_negatives=np.int64(8))
    b = contrastive_loss(z, labels, setting="supervised", psi="sum", num_negatives=8)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="num_negatives"):
        contrastive_loss(z, labels, setting="supervised", num_negatives=True)
    with pytest.raises(ValueError, match="beta"):
        contrastive_loss(z, labels, setting="supervised", beta=torch.ones(2, 5))
    # a per-anchor beta equals the scalar one when constant
    per = contrastive_loss(
        z, labels, setting="unsupervised", beta=torch.full((10,), 2.0, dtype=torch.float64)
    )
    assert float(per) == pytest.approx(
        float(contrastive_loss(z, labels, setting="unsupervised", beta=2.0)), abs=1e-14
    )


# --------------------------------------------------------------------------------------------
# The sampled estimator equals the authors' per-anchor structure on the same draws
# --------------------------------------------------------------------------------------------
def _draws_per_anchor(
    z, labels, *, setting, beta, K, seed, self_positive=True, self_negative=True, groups=None
):
    """The draws the loss makes with generator seed ``seed``, as the loop reference wants them.

    Documented contract: contrastive_loss draws with sample_negatives(tilted_log_weights(S.double(),
    allowed, beta), pair_rows, K, generator) in pair order.
    """
    B = z.shape[0]
    S = (z.detach() @ z.detach().T).double()
    lab = torch.as_tensor(labels)
    if setting == "supervised":
        allowed = lab[:, None] != lab[None, :]
    else:
        allowed = torch.ones(B, B, dtype=torch.bool) if self_negative else ~torch.eye(B, dtype=torch.bool)
    pairs = positive_pairs(lab, positive_groups=groups, self_positive=self_positive)
    idx = sample_negatives(
        tilted_log_weights(S, allowed, beta), pairs.anchor, K, torch.Generator().manual_seed(seed)
    )
    return {i: idx[pairs.anchor == i] for i in range(B) if bool((pairs.anchor == i).any())}


SAMPLED_OPTIONS = [
    ("supervised", "mean", True, True),
    ("supervised", "sum", False, True),
    ("supervised", "triplet", True, True),
    ("unsupervised", "mean", True, True),
    ("unsupervised", "mean", False, False),
    ("unsupervised", "sum", True, False),
    ("unsupervised", "triplet", False, True),
]


@pytest.mark.parametrize("setting,psi,self_positive,self_negative", SAMPLED_OPTIONS)
@pytest.mark.parametrize("beta", [0.0, 3.0])
def test_sampled_equals_loop_reference_on_the_same_draws(
    setting, psi, self_positive, self_negative, beta, ball_batch
):
    z0, labels = ball_batch(B=13, seed=zlib.crc32(f"{setting}{psi}{self_positive}".encode()) % 997)
    K = 17
    kw = dict(
        setting=setting,
        beta=beta,
        tau=0.6,
        psi=psi,
        margin=0.4,
        self_positive=self_positive,
        self_negative=self_negative,
    )
    draws = _draws_per_anchor(
        z0,
        labels,
        setting=setting,
        beta=beta,
        K=K,
        seed=3,
        self_positive=self_positive,
        self_negative=self_negative,
    )
    z1, z2 = z0.clone().requires_grad_(True), z0.clone().requires_grad_(True)
    ref = loop_loss(z1, labels, K=K, estimator="sampled", draws=draws, **kw)
    got = contrastive_loss(
        z2, labels, num_negatives=K, estimator="sampled", generator=torch.Generator().manual_seed(3), **kw
    )
    assert abs(got.item() - ref.item()) < 1e-15 * max(1.0, abs(ref.item()))
    ref.backward()
    got.backward()
    torch.testing.assert_close(z2.grad, z1.grad, atol=1e-13, rtol=1e-12)


def test_sampled_draws_follow_the_tilted_law_in_the_loss(ball_batch):
    """The draws contrastive_loss uses (the documented sample_negatives call) follow q_i: chi-square
    per anchor, supervised (masked columns never drawn) and unsupervised."""
    from scipy.stats import chisquare

    z, labels = ball_batch(B=10, C=3, seed=8)
    for setting in ["supervised", "unsupervised"]:
        draws = _draws_per_anchor(z, labels, setting=setting, beta=2.0, K=40_000, seed=1)
        S = z @ z.T
        for i, d in draws.items():
            neg = labels != labels[i] if setting == "supervised" else torch.ones(10, dtype=torch.bool)
            w = torch.softmax(2.0 * S[i][neg], 0).numpy()
            counts = np.bincount(d.reshape(-1).numpy(), minlength=10)
            assert counts[~neg.numpy()].sum() == 0
            assert chisquare(counts[neg.numpy()], w * counts.sum()).pvalue > 1e-4


def test_retain_graph(ball_batch):
    """The expectation estimator supports a second backward (retain_graph=True); the sampled one
    reuses its saved buffers and raises instead of returning a wrong gradient."""
    z0, labels = ball_batch(B=10, seed=2)
    z = z0.clone().requires_grad_(True)
    loss = contrastive_loss(z, labels, setting="supervised", beta=1.0)
    loss.backward(retain_graph=True)
    first = z.grad.clone()
    loss.backward()
    torch.testing.assert_close(z.grad, 2 * first)
    loss = contrastive_loss(
        z,
        labels,
        setting="supervised",
        beta=1.0,
        estimator="sampled",
        generator=torch.Generator().manual_seed(0),
    )
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward can run only once"):
        loss.backward()


# --------------------------------------------------------------------------------------------
# Large beta: the hardest-negative limit, or a ValueError naming beta (never a silent NaN)
# --------------------------------------------------------------------------------------------
def _hardest_negative_limit(z, labels, *, setting, psi, tau, K, margin):
    """The beta -> inf value, anchor by anchor: every negative is the hardest allowed one.

    Independent of the estimators: for anchor ``i`` the hardest negative ``n*`` maximises
    ``S[i, n]`` over the allowed negatives (unique in these batches), and every pair ``(i, j)``
    takes ``psi`` of ``K`` copies of ``t = S[i, n*] - S[i, j]``.
    """
    S = (z @ z.T).tolist()
    B = len(S)
    lab = labels.tolist()
    values = []
    for i in range(B):
        negs = [n for n in range(B) if setting == "unsupervised" or lab[n] != lab[i]]
        hardest = max(S[i][n] for n in negs)
        assert sum(S[i][n] == hardest for n in negs) == 1, "a tie: the limit law is not a point mass"
        for j in range(B):
            if lab[j] == lab[i]:  # self_positive=True: the anchor is one of its positives
                values.append(psi_ref([hardest - S[i][j]] * K, psi, tau=tau, margin=margin))
    return sum(values) / len(values)


@pytest.mark.parametrize("estimator", ["expectation", "sampled"])
@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
@pytest.mark.parametrize(
    "dtype,beta", [(torch.float64, 1e300), (torch.float64, 1.7e308), (torch.float32, 3e38)]
)
def test_large_beta_gives_the_hardest_negative_limit(estimator, psi, setting, dtype, beta, ball_batch):
    z, labels = ball_batch(B=12, d=5, C=3, seed=41, dtype=dtype, scale=3.0)
    z = 3 * z  # similarities up to 9: beta S itself overflows, only beta (S - max S) does not
    kw = dict(setting=setting, psi=psi, tau=0.5, margin=0.3)
    ref = _hardest_negative_limit(z.double(), labels, K=8, **kw)
    for detach in [True, False] if estimator == "expectation" else [True]:
        zz = z.clone().requires_grad_(True)
        got = contrastive_loss(
            zz,
            labels,
            beta=beta,
            estimator=estimator,
            num_negatives=8,
            detach_weights=detach,
            generator=torch.Generator().manual_seed(0),
            **kw,
        )
        got.backward()
        # float64: 1e-9 relative (F.softplus is linear above 20: log1p(exp(-20)) = 2e-9 absolute)
        tol = 1e-9 if dtype == torch.float64 else 1e-5
        assert got.item() == pytest.approx(ref, rel=tol, abs=tol), (detach, got.item(), ref)
        assert torch.isfinite(zz.grad).all()


@pytest.mark.parametrize("estimator", ["expectation", "sampled"])
@pytest.mark.parametrize(
    "dtype,beta,tau",
    [
        (torch.float32, 1e39, 1.0),  # beyond the largest float32
        (torch.float32, 3.4028e38, 1e-34),  # beta is a float32, beta + 1/tau is not
        (torch.float16, 1e39, 1.0),  # half inputs are computed in float32
        (torch.float64, 1.7976931348623157e308, 1e-300),  # beta + 1/tau = inf in float64
    ],
)
def test_beta_beyond_the_compute_dtype_raises_naming_beta(estimator, dtype, beta, tau, ball_batch):
    z, labels = ball_batch(B=8, C=3, seed=2, dtype=torch.float64)
    z = (z * 1e-20 if tau < 1e-20 else z).to(dtype)  # tiny z: the similarities (times 1/tau) fit
    with pytest.raises(ValueError, match=r"^beta must satisfy beta \+ 1/tau <="):
        contrastive_loss(z, labels, setting="supervised", beta=beta, tau=tau, estimator=estimator)


def test_large_tensor_beta_is_checked_before_the_cast(ball_batch):
    z, labels = ball_batch(B=8, C=3, seed=5, dtype=torch.float32)
    beta = torch.full((8,), 2.0, dtype=torch.float64)
    beta[3] = 1e39  # finite in float64, inf in float32
    with pytest.raises(ValueError, match="beta must satisfy beta \\+ 1/tau"):
        contrastive_loss(z, labels, setting="unsupervised", beta=beta)
    # the same per-anchor beta on float64 embeddings is the hardest-negative limit of anchor 3
    z64 = z.double()
    got = contrastive_loss(z64, labels, setting="unsupervised", beta=beta, reduction="none")
    ref = loop_loss(z64, labels, setting="unsupervised", beta=beta.tolist(), K=256, reduction="none")
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
