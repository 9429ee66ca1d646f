"""Tests of synthetic/stacked.py: the batched loss, grouping, and stacked == sequential runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from synthetic.config import RunConfig
from synthetic.results import METRIC_COLUMNS
from synthetic.stacked import stack_groups, stack_key, stackable, stacked_contrastive_loss, train_stacked
from synthetic.train import decode_class_means, train_run
from theory.hcl import contrastive_loss

# ----------------------------------------------------------------------------- batched loss


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
@pytest.mark.parametrize("psi", ["mean", "sum"])
@pytest.mark.parametrize("tau", [1.0, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stacked_loss_matches_contrastive_loss_per_run(setting, psi, tau, dtype, torch_gen):
    R, B = 4, 14
    z = torch.nn.functional.normalize(
        torch.randn(R, B, 5, generator=torch_gen(0), dtype=torch.float64), dim=2
    )
    z = z.to(dtype).requires_grad_()
    y = torch.randint(0, 3, (R, B), generator=torch_gen(1))
    beta = torch.tensor([0.0, 1.0, 5.0, 30.0], dtype=dtype)
    got = stacked_contrastive_loss(z, y, setting=setting, beta=beta, tau=tau, psi=psi, num_negatives=7)
    ref = torch.stack(
        [
            contrastive_loss(
                z[r], y[r], setting=setting, beta=float(beta[r]), tau=tau, psi=psi, num_negatives=7
            )
            for r in range(R)
        ]
    )
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), **tol)
    w = torch.arange(1.0, R + 1, dtype=dtype)  # distinct upstream gradients per run
    (ga,) = torch.autograd.grad((got * w).sum(), z)
    (gb,) = torch.autograd.grad((ref * w).sum(), z)
    np.testing.assert_allclose(ga.numpy(), gb.numpy(), **tol)


def test_stacked_loss_with_positive_groups_matches_reference(torch_gen):
    R, B = 2, 6
    z = torch.randn(R, 2 * B, 3, generator=torch_gen(3), dtype=torch.float64, requires_grad=True)
    y0 = torch.randint(0, 2, (R, B), generator=torch_gen(4))
    y = torch.cat([y0, y0], dim=1)
    ids = torch.arange(B).repeat(R, 2)
    beta = torch.tensor([0.5, 2.0], dtype=torch.float64)
    for setting in ("supervised", "unsupervised"):
        got = stacked_contrastive_loss(
            z, y, setting=setting, beta=beta, positive_groups=ids, self_positive=False
        ).detach()
        for r in range(R):
            ref = contrastive_loss(
                z[r], y[r], setting=setting, beta=float(beta[r]), positive_groups=ids[r], self_positive=False
            )
            assert float(got[r]) == pytest.approx(float(ref.detach()), rel=1e-12)


def test_stacked_loss_finite_at_small_tau(torch_gen):
    z = torch.nn.functional.normalize(torch.randn(2, 8, 3, generator=torch_gen(7)), dim=2).requires_grad_()
    y = torch.randint(0, 3, (2, 8), generator=torch_gen(8))
    for setting in ("supervised", "unsupervised"):
        loss = stacked_contrastive_loss(z, y, setting=setting, beta=torch.tensor([0.0, 50.0]), tau=0.01)
        (g,) = torch.autograd.grad(loss.sum(), z)
        assert torch.isfinite(loss).all() and torch.isfinite(g).all()


def test_stacked_loss_finite_on_collapsed_embeddings_and_large_beta():
    z = torch.zeros(2, 6, 3, dtype=torch.float64)
    z[..., 0] = 1.0  # every embedding identical: similarities exactly 1
    z.requires_grad_()
    y = torch.tensor([[0, 0, 1, 1, 2, 2]] * 2)
    for setting in ("supervised", "unsupervised"):
        loss = stacked_contrastive_loss(
            z, y, setting=setting, beta=torch.tensor([0.0, 1000.0], dtype=torch.float64)
        )
        (g,) = torch.autograd.grad(loss.sum(), z)
        assert torch.isfinite(loss).all() and torch.isfinite(g).all()
        np.testing.assert_allclose(loss.detach().numpy(), np.log(2.0), rtol=1e-12)  # log(1 + e^0)


def test_stacked_loss_validation():
    z = torch.randn(2, 4, 3)
    y = torch.tensor([[0, 0, 1, 1], [2, 2, 2, 2]])
    b = torch.zeros(2)
    with pytest.raises(ValueError, match="single-class"):
        stacked_contrastive_loss(z, y, setting="supervised", beta=b)
    with pytest.raises(ValueError, match="setting"):
        stacked_contrastive_loss(z, y, setting="self", beta=b)
    with pytest.raises(ValueError, match="psi"):
        stacked_contrastive_loss(z, y, setting="unsupervised", beta=b, psi="triplet")
    with pytest.raises(ValueError, match="beta"):
        stacked_contrastive_loss(z, y, setting="unsupervised", beta=torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="tau"):
        stacked_contrastive_loss(z, y, setting="unsupervised", beta=b, tau=0.0)
    with pytest.raises(ValueError, match="labels"):
        stacked_contrastive_loss(z, y[:, :3], setting="unsupervised", beta=b)


# ----------------------------------------------------------------------------- grouping


def test_stack_key_groups_and_stackable():
    base = RunConfig(num_classes=4)
    runs = [
        base,
        base.replace(seed=1),
        base.replace(method="HSCL", beta=2.0),
        base.replace(method="UCL"),
        base.replace(method="HUCL", beta=1.0, seed=4),
        base.replace(lr=0.01),
        base.replace(method="InfoNCE"),
        base.replace(method="WeiNCE"),
    ]
    assert stackable(runs[:3]) and stackable(runs[3:5])
    assert not stackable(runs[:4]) and not stackable([runs[0], runs[5]]) and not stackable(runs[6:])
    assert not stackable([]) and not stackable([base, "x"])
    assert stack_key(runs[0]) == stack_key(runs[2]) != stack_key(runs[3])
    groups = stack_groups(runs, max_stack=2)
    assert [len(g) for g in groups] == [2, 1, 2, 1, 1, 1]
    assert groups[0] == [runs[0], runs[1]] and groups[1] == [runs[2]]
    assert sum(len(g) for g in groups) == len(runs)
    with pytest.raises(ValueError, match="max_stack"):
        stack_groups(runs, max_stack=0)


def test_train_stacked_rejects_unstackable():
    a = RunConfig(num_classes=4, epochs=1)
    with pytest.raises(ValueError, match="lr"):
        train_stacked([a, a.replace(lr=0.1)])
    with pytest.raises(ValueError, match="method"):
        train_stacked([a, a.replace(method="UCL")])
    with pytest.raises(ValueError, match="non-empty"):
        train_stacked([])


# ----------------------------------------------------------------------------- stacked == sequential

SMALL = dict(
    num_classes=4,
    n_per_class=6,
    n_test_per_class=3,
    input_dim=6,
    hidden=8,
    epochs=4,
    eval_every=2,
    lr=0.02,
    dtype="float64",
)


def _assert_same_tables(seq: list[pd.DataFrame], st: list[pd.DataFrame]) -> None:
    assert len(seq) == len(st)
    for a, b in zip(seq, st):
        assert list(a.columns) == list(b.columns)
        other = [c for c in a.columns if c not in METRIC_COLUMNS and c != "class_means"]
        pd.testing.assert_frame_equal(a[other], b[other], check_exact=True)
        for c in METRIC_COLUMNS:
            # NC1 is a ratio of traces through a pseudo-inverse: ill-conditioned at initialisation.
            rtol = 1e-7 if c == "nc1" else 1e-9
            np.testing.assert_allclose(
                b[c].to_numpy(float), a[c].to_numpy(float), rtol=rtol, atol=1e-10, equal_nan=True, err_msg=c
            )
        if "class_means" in a.columns:
            for u, v in zip(a["class_means"], b["class_means"]):
                np.testing.assert_allclose(decode_class_means(v), decode_class_means(u), atol=1e-10)


@pytest.mark.parametrize(
    "family, kwargs",
    [
        ("SCL", dict(encoder="free", record_means=True)),
        ("SCL", dict(encoder="mlp", batch_size=8, psi="sum", tau=0.5)),
        ("UCL", dict(encoder="linear", positives="noise", normalization="ball")),
        ("UCL", dict(encoder="free", batch_size=12, estimator="sampled", num_negatives=5)),
        ("SCL", dict(encoder="mlp", psi="triplet", normalization="none")),
        ("InfoNCE", dict(encoder="free", batch_size=8, tau=0.5)),
    ],
)
def test_train_stacked_equals_sequential_runs(family, kwargs):
    base = RunConfig(method=family, **SMALL, **kwargs)
    cfgs = [base, base.replace(seed=1)]
    if family in ("SCL", "UCL"):
        hard = "H" + family
        cfgs += [base.replace(method=hard, beta=2.0), base.replace(method=hard, beta=10.0, seed=2)]
    assert stackable(cfgs)
    _assert_same_tables([train_run(c) for c in cfgs], train_stacked(cfgs))


def test_train_stacked_single_run_and_float32():
    base = RunConfig(method="HSCL", beta=3.0, **{**SMALL, "dtype": "float32"})
    (st,) = train_stacked([base])
    seq = train_run(base)
    np.testing.assert_allclose(st["etf_mean"], seq["etf_mean"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(st["loss"].iloc[1:], seq["loss"].iloc[1:], rtol=1e-5)


@pytest.mark.parametrize("positives", ["label", "noise"])
def test_train_stacked_run_chunks_give_the_same_tables(monkeypatch, positives):
    import synthetic.stacked as stacked_mod

    base = RunConfig(method="UCL", positives=positives, **SMALL)
    cfgs = [base, base.replace(method="HUCL", beta=1.0), base.replace(method="HUCL", beta=4.0, seed=5)]
    whole = train_stacked(cfgs)
    monkeypatch.setattr(stacked_mod, "CHUNK_ELEMENTS", 1)  # one run per loss call
    _assert_same_tables(whole, train_stacked(cfgs))


# ----------------------------------------------------------------------------- skipped steps

SKIP = dict(
    num_classes=2,
    d=4,
    n_per_class=3,
    n_test_per_class=2,
    input_dim=4,
    hidden=6,
    batch_size=2,
    epochs=6,
    lr=0.05,
    dtype="float64",
)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(encoder="free"),
        dict(encoder="linear", positives="noise"),
        dict(encoder="mlp", estimator="sampled", num_negatives=3, psi="triplet"),  # per-run fallback
    ],
)
def test_train_stacked_skips_steps_like_sequential_runs(kwargs):
    base = RunConfig(method="SCL", **SKIP, **kwargs)
    cfgs = [
        base,
        base.replace(seed=1),
        base.replace(method="HSCL", beta=2.0, seed=2),
        base.replace(method="HSCL", beta=5.0, seed=3),
    ]
    seq = [train_run(c) for c in cfgs]
    skipped = [tuple(t["skipped_steps"]) for t in seq]
    assert sum(map(sum, skipped)) > 0 and len(set(skipped)) > 1  # runs skip at different steps
    _assert_same_tables(seq, train_stacked(cfgs))


def test_train_stacked_raises_on_an_all_skipped_epoch():
    base = RunConfig(method="SCL", encoder="free", **{**SKIP, "n_per_class": 2, "epochs": 12})
    with pytest.raises(ValueError, match="single class"):
        train_run(base)
    with pytest.raises(ValueError, match="single class"):
        train_stacked([base.replace(seed=5), base])
