"""Tests of synthetic/engine/models.py: encoders, normalisation, noise placement, stacked encoders."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.models import (
    ContrastiveModel,
    FreeFeatures,
    LinearEncoder,
    MLPEncoder,
    StackedModel,
    build_model,
    stack_models,
)

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_free_features_index_and_init_scale(dtype, torch_gen):
    m = FreeFeatures(4000, 8, init_scale=2.0, generator=torch_gen(0), dtype=dtype)
    assert m.weight.dtype == dtype and m.weight.shape == (4000, 8)
    idx = torch.tensor([3, 3, 0, 3999])
    assert torch.equal(m(idx), m.weight.detach()[idx])
    # coordinates ~ N(0, init_scale^2 / d) = N(0, 0.5)
    assert abs(float(m.weight.detach().double().var()) - 0.5) < 0.02


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_and_mlp_match_loop_references(dtype, torch_gen):
    x = torch.randn(5, 6, generator=torch_gen(1), dtype=torch.float64).to(dtype)
    lin = LinearEncoder(6, 3, generator=torch_gen(2), dtype=dtype)
    W, b = lin.weight.detach(), lin.bias.detach()
    ref = [
        [sum(float(x[i, k]) * float(W[k, j]) for k in range(6)) + float(b[j]) for j in range(3)]
        for i in range(5)
    ]
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(lin(x).detach().double().numpy(), ref, atol=tol)

    mlp = MLPEncoder(6, 4, 3, generator=torch_gen(3), dtype=dtype)
    p = {k: v.detach().double().numpy() for k, v in mlp.named_parameters()}
    xs = x.double().numpy()
    ref = np.zeros((5, 3))
    for i in range(5):
        h = [
            max(0.0, sum(xs[i, k] * p["weights.0"][k, j] for k in range(6)) + p["biases.0"][j])
            for j in range(4)
        ]
        for j in range(3):
            ref[i, j] = sum(h[k] * p["weights.1"][k, j] for k in range(4)) + p["biases.1"][j]
    np.testing.assert_allclose(mlp(x).detach().double().numpy(), ref, atol=tol)


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_deep_mlp_matches_a_loop_reference(depth, torch_gen):
    x = torch.randn(4, 5, generator=torch_gen(1), dtype=torch.float64)
    mlp = MLPEncoder(5, 3, 2, depth=depth, generator=torch_gen(4), dtype=torch.float64)
    assert mlp.depth == depth and len(list(mlp.parameters())) == 2 * (depth + 1)
    ws = [w.detach().numpy() for w in mlp.weights]
    bs = [b.detach().numpy() for b in mlp.biases]
    ref = np.zeros((4, 2))
    for i in range(4):
        h = list(x[i].numpy())
        for layer, (w, b) in enumerate(zip(ws, bs)):
            out = [sum(h[k] * w[k, j] for k in range(len(h))) + b[j] for j in range(w.shape[1])]
            h = out if layer == depth else [max(0.0, v) for v in out]
        ref[i] = h
    np.testing.assert_allclose(mlp(x).detach().numpy(), ref, atol=1e-12)
    # layer by layer, weight then bias: depth 1 draws what the 2-layer MLP always drew
    one = MLPEncoder(5, 3, 2, generator=torch_gen(4), dtype=torch.float64)
    deep = MLPEncoder(5, 3, 2, depth=3, generator=torch_gen(4), dtype=torch.float64)
    assert torch.equal(one.weights[0], deep.weights[0]) and torch.equal(one.biases[0], deep.biases[0])
    with pytest.raises(ValueError, match="depth"):
        MLPEncoder(5, 3, 2, depth=0)


def test_linear_init_bounds_follow_fan_in(torch_gen):
    lin = LinearEncoder(25, 7, generator=torch_gen(0), dtype=torch.float64)
    w = float(lin.weight.detach().abs().max())
    assert 0.8 / math.sqrt(25) < w <= 1 / math.sqrt(25)


@pytest.mark.parametrize("normalization", ["none", "ball", "sphere"])
def test_contrastive_model_normalisation(normalization, torch_gen):
    bb = FreeFeatures(50, 4, init_scale=3.0, generator=torch_gen(0), dtype=torch.float64)
    model = ContrastiveModel(bb, normalization)
    z = model(torch.arange(50)).detach()
    h = bb.weight.detach()
    norms = torch.linalg.vector_norm(h, dim=1, keepdim=True)
    if normalization == "none":
        ref = h
    elif normalization == "ball":
        ref = torch.where(norms > 1, h / norms, h)
    else:
        ref = h / norms
    np.testing.assert_allclose(z.numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)


def test_noise_goes_to_features_for_free_and_to_inputs_otherwise(torch_gen):
    free = ContrastiveModel(FreeFeatures(6, 3, generator=torch_gen(0), dtype=torch.float64), "none")
    idx = torch.tensor([1, 4])
    noise = torch.randn(2, 3, generator=torch_gen(1), dtype=torch.float64)
    assert torch.equal(free(idx, noise), free.backbone.weight[idx] + noise)

    mlp = ContrastiveModel(MLPEncoder(5, 4, 3, generator=torch_gen(2), dtype=torch.float64), "sphere")
    x = torch.randn(2, 5, generator=torch_gen(3), dtype=torch.float64)
    nx = torch.randn(2, 5, generator=torch_gen(4), dtype=torch.float64)
    assert torch.equal(mlp(x, nx), mlp(x + nx))


def test_build_model_from_config_and_determinism(torch_gen):
    cfg = RunConfig(encoder="mlp", num_classes=5, input_dim=7, hidden=11, dtype="float64")
    m1, m2 = build_model(cfg, torch_gen(0)), build_model(cfg, torch_gen(0))
    assert m1.backbone.weights[1].shape == (11, 4)  # d defaults to C - 1
    assert build_model(cfg.replace(depth=3), torch_gen(0)).backbone.depth == 3
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
    free = build_model(cfg.replace(encoder="free", d=6), torch_gen(0))
    assert free.backbone.weight.shape == (cfg.num_train, 6)
    lin = build_model(cfg.replace(encoder="linear", dtype="float32"), torch_gen(0))
    assert lin.backbone.weight.shape == (7, 4) and lin.backbone.weight.dtype == torch.float32


@pytest.mark.parametrize("encoder", ["free", "linear", "mlp"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_stacked_model_equals_single_models(encoder, dtype, torch_gen):
    R, B = 3, 5
    cfg = RunConfig(
        encoder=encoder,
        num_classes=4,
        n_per_class=3,
        input_dim=6,
        hidden=8,
        depth=2,
        normalization="ball",
        dtype="float64" if dtype == torch.float64 else "float32",
    )
    models = [build_model(cfg, torch_gen(s)) for s in range(R)]
    st = stack_models(models)
    assert isinstance(st, StackedModel)
    if encoder == "free":
        inputs = torch.randint(0, cfg.num_train, (R, B), generator=torch_gen(9))
        noise = torch.randn(R, B, 3, generator=torch_gen(10), dtype=torch.float64).to(dtype)
    else:
        inputs = torch.randn(R, B, 6, generator=torch_gen(9), dtype=torch.float64).to(dtype)
        noise = torch.randn(R, B, 6, generator=torch_gen(10), dtype=torch.float64).to(dtype)
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    for nz in (None, noise):
        out = st(inputs, nz)
        assert out.shape == (R, B, 3)
        for r in range(R):
            ref = models[r](inputs[r], None if nz is None else nz[r])
            np.testing.assert_allclose(out[r].detach().numpy(), ref.detach().numpy(), atol=tol)
            one = st.run(r, inputs[r], None if nz is None else nz[r])
            np.testing.assert_allclose(one.detach().numpy(), ref.detach().numpy(), atol=tol)
    # run_state is run r's state_dict of the single model
    for r in range(R):
        single = build_model(cfg, torch_gen(99))
        single.load_state_dict(st.run_state(r))
        for a, b in zip(single.parameters(), models[r].parameters()):
            assert torch.equal(a, b)
    # Parameters are copies: training the stack leaves the single models untouched.
    before = [p.detach().clone() for p in models[0].parameters()]
    st(inputs).sum().backward()
    with torch.no_grad():
        for p in st.parameters():
            p.add_(1.0)
    for a, b in zip(before, models[0].parameters()):
        assert torch.equal(a, b)


def test_stack_models_validation(torch_gen):
    a = ContrastiveModel(FreeFeatures(4, 2, generator=torch_gen(0)), "ball")
    b = ContrastiveModel(LinearEncoder(3, 2, generator=torch_gen(0)), "ball")
    c = ContrastiveModel(FreeFeatures(4, 2, generator=torch_gen(0)), "sphere")
    d = ContrastiveModel(FreeFeatures(5, 2, generator=torch_gen(0)), "ball")
    with pytest.raises(ValueError, match="non-empty"):
        stack_models([])
    for other in (b, c):
        with pytest.raises(ValueError, match="share one encoder"):
            stack_models([a, other])
    with pytest.raises(ValueError, match="identical parameter shapes"):
        stack_models([a, d])


@pytest.mark.parametrize(
    "ctor",
    [
        lambda: FreeFeatures(0, 3),
        lambda: FreeFeatures(3, 2, init_scale=0.0),
        lambda: LinearEncoder(3, 0),
        lambda: MLPEncoder(3, 0, 2),
        lambda: ContrastiveModel(LinearEncoder(3, 2), "unit"),
    ],
)
def test_constructor_validation(ctor):
    with pytest.raises(ValueError):
        ctor()
