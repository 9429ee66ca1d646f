"""Tests of synthetic/engine/data.py: seeded streams, Gaussian mixtures, positive-pair constructions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.data import (
    STREAMS,
    class_centres,
    gaussian_mixture,
    make_data,
    noise_like,
    run_generators,
    same_class_partners,
    stream_seed,
)


def test_stream_seeds_are_deterministic_and_distinct():
    a = [stream_seed(3, s) for s in STREAMS]
    assert a == [stream_seed(3, s) for s in STREAMS]
    assert len(set(a)) == len(STREAMS)
    assert stream_seed(3, "data") != stream_seed(4, "data")
    g1, g2 = run_generators(7), run_generators(7)
    for s in STREAMS:
        assert torch.equal(torch.rand(5, generator=g1[s]), torch.rand(5, generator=g2[s]))


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_stream_seed_rejects_bad_seed(bad):
    with pytest.raises(ValueError, match="seed"):
        stream_seed(bad, "data")


def test_stream_seed_rejects_unknown_stream():
    with pytest.raises(ValueError, match="stream"):
        stream_seed(0, "nope")


@pytest.mark.parametrize("kind", ["random", "orthogonal"])
def test_class_centres_norms_and_geometry(kind, torch_gen):
    m = class_centres(5, 12, 2.5, kind, generator=torch_gen(0))
    assert m.shape == (5, 12) and m.dtype == torch.float64
    np.testing.assert_allclose(torch.linalg.vector_norm(m, dim=1).numpy(), 2.5, rtol=1e-12)
    if kind == "orthogonal":
        np.testing.assert_allclose((m @ m.T).numpy(), 2.5**2 * np.eye(5), atol=1e-12)


def test_class_centres_validation(torch_gen):
    with pytest.raises(ValueError, match="D must be >= C"):
        class_centres(5, 3, 1.0, "orthogonal", generator=torch_gen(0))
    with pytest.raises(ValueError, match="kind"):
        class_centres(5, 8, 1.0, "grid", generator=torch_gen(0))
    with pytest.raises(ValueError, match="C must"):
        class_centres(1, 8, 1.0, generator=torch_gen(0))
    with pytest.raises(ValueError, match="separation"):
        class_centres(3, 8, -1.0, generator=torch_gen(0))


def test_gaussian_mixture_statistics(torch_gen):
    centres = torch.tensor([[3.0, 0.0, 0.0], [0.0, -3.0, 1.0]], dtype=torch.float64)
    x, y = gaussian_mixture(centres, 20000, 0.5, generator=torch_gen(1))
    assert x.shape == (40000, 3) and y.shape == (40000,)
    assert torch.equal(torch.bincount(y), torch.tensor([20000, 20000]))
    for c in range(2):
        xc = x[y == c].numpy()
        # standard error of the mean = 0.5 / sqrt(20000) ~ 0.0035
        np.testing.assert_allclose(xc.mean(axis=0), centres[c].numpy(), atol=0.02)
        np.testing.assert_allclose(xc.std(axis=0), 0.5, rtol=0.03)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_make_data_shapes_balance_determinism(dtype):
    cfg = RunConfig(num_classes=4, n_per_class=6, n_test_per_class=3, input_dim=5, dtype=dtype)
    a, b = make_data(cfg), make_data(cfg)
    assert a.x_train.shape == (24, 5) and a.x_test.shape == (12, 5)
    assert a.x_train.dtype == cfg.torch_dtype and a.y_train.dtype == torch.long
    assert torch.equal(torch.bincount(a.y_train), torch.full((4,), 6))
    assert torch.equal(torch.bincount(a.y_test), torch.full((4,), 3))
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.x_test, b.x_test)
    c = make_data(cfg.replace(seed=1))
    assert not torch.equal(a.x_train, c.x_train)
    # Data depend only on data fields and the seed: another method/beta sees the same data.
    d = make_data(cfg.replace(method="HUCL", beta=3.0, lr=0.1))
    assert torch.equal(a.x_train, d.x_train)


def test_make_data_float32_matches_float64():
    cfg = RunConfig(num_classes=3, n_per_class=4, input_dim=6, dtype="float64")
    a = make_data(cfg)
    b = make_data(cfg.replace(dtype="float32"))
    np.testing.assert_allclose(b.x_train.numpy(), a.x_train.numpy(), rtol=1e-6, atol=1e-6)


def _partners_loop(labels, anchors, u):
    """Reference: the floor(u (n-1))-th other member of the anchor's class, ascending index."""
    out = []
    for k, i in enumerate(anchors.tolist()):
        members = [j for j in range(len(labels)) if labels[j] == labels[i] and j != i]
        out.append(members[min(int(math.floor(u[k] * len(members))), len(members) - 1)])
    return out


def test_same_class_partners_matches_loop_reference(torch_gen):
    g = torch_gen(5)
    labels = torch.randint(0, 4, (37,), generator=g)
    labels[:8] = torch.arange(4).repeat(2)  # every class has >= 2 members
    anchors = torch.randint(0, 37, (50,), generator=g)
    got = same_class_partners(labels, anchors, generator=torch_gen(9))
    u = torch.rand(50, generator=torch_gen(9), dtype=torch.float64).numpy()
    assert got.tolist() == _partners_loop(labels.tolist(), anchors, u)


def test_same_class_partners_uniform_over_other_members(torch_gen):
    labels = torch.tensor([0, 0, 0, 0, 1, 1])
    anchors = torch.zeros(30000, dtype=torch.long)
    got = same_class_partners(labels, anchors, generator=torch_gen(2))
    counts = torch.bincount(got, minlength=6).numpy()
    assert counts[0] == 0 and counts[4] == 0 and counts[5] == 0
    np.testing.assert_allclose(counts[1:4] / 30000, 1 / 3, atol=0.015)


def test_same_class_partners_singleton_class_raises(torch_gen):
    with pytest.raises(ValueError, match="single member"):
        same_class_partners(torch.tensor([0, 0, 1]), generator=torch_gen(0))


def test_noise_like_shape_std_and_validation(torch_gen):
    n = noise_like((4000, 5), 0.3, generator=torch_gen(0), dtype=torch.float32)
    assert n.shape == (4000, 5) and n.dtype == torch.float32
    assert abs(float(n.std()) - 0.3) < 0.01
    with pytest.raises(ValueError, match="std"):
        noise_like((2, 2), -1.0, generator=torch_gen(0))
