"""WeiNCELoss: validated once, always returns a tensor, keeps the last diagnostics, checkpoints its state."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch

from tests.theory.weince.reference import make_views, ref_released, ref_weince
from theory.weince import GateConfig, ReleasedConfig, WeiNCEDiagnostics, WeiNCELoss, weince_loss


def test_core_module_equals_functional_and_keeps_diagnostics():
    gate = GateConfig(margin=0.0, kappa_rho=5.0)
    mod = WeiNCELoss(tau=0.3, gate=gate)
    assert mod.last_diagnostics is None and mod.beta_state is None
    assert list(mod.parameters()) == [] and mod.state_dict() == {}
    z1, z2 = make_views(12, 6, seed=1)
    out = mod(z1, z2)
    assert isinstance(out, torch.Tensor) and out.dim() == 0
    want, diag = weince_loss(z1, z2, tau=0.3, gate=gate, return_diagnostics=True)
    assert torch.equal(out, want)
    d = mod.last_diagnostics
    assert isinstance(d, WeiNCEDiagnostics) and d.beta_t is None
    assert torch.equal(d.lam, diag.lam) and torch.equal(d.dAIC, diag.dAIC)
    assert abs(out.item() - ref_weince(z1, z2, tau=0.3, gate=gate)[0]) < 1e-13


def test_diagnostics_are_detached_and_replaced_each_call():
    mod = WeiNCELoss(recipe="released")
    z1, z2 = make_views(10, 5, seed=2, dtype=torch.float32)
    a1 = z1.clone().requires_grad_()
    loss = mod(a1, z2)
    loss.backward()
    first = mod.last_diagnostics
    for name in ("lam", "lam_rho", "lam_aic", "rho", "rho0", "dAIC", "beta_t"):
        t = getattr(first, name)
        assert isinstance(t, torch.Tensor) and not t.requires_grad, name
    assert first.beta_t.dtype == torch.float64
    b_first = float(first.beta_t)
    mod(z1 * 1.5 + 0.1, z2)
    assert mod.last_diagnostics is not first
    assert float(first.beta_t) == b_first  # a copy, not the live buffer
    s = mod.last_diagnostics.summary()
    assert {"lam_mean", "lam_q50", "rho0", "k_tail", "n_eff", "beta_t"} <= set(s)


def test_released_module_matches_reference_and_checkpoint_resumes_exactly():
    batches = [make_views(20, 6, seed=10 + t) for t in range(5)]
    a = WeiNCELoss(recipe="released", released=ReleasedConfig(weib_top_m=8, pl_top_m=12))
    for z1, z2 in batches[:2]:
        a(z1, z2)
    assert set(a.state_dict()) == {f"beta_state.{n}" for n in ("beta", "beta_hat", "r2", "steps")}
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = WeiNCELoss(recipe="released", released=ReleasedConfig(weib_top_m=8, pl_top_m=12))
    b.load_state_dict(torch.load(buf))
    c = copy.deepcopy(a)
    for z1, z2 in batches[2:]:
        la, lb, lc = a(z1, z2), b(z1, z2), c(z1, z2)
        assert torch.equal(la, lb) and torch.equal(la, lc)
    assert torch.equal(a.beta_state.beta, b.beta_state.beta) and int(b.beta_state.steps) == 5
    # the released defaults against the loop reference, from a fresh module
    m = WeiNCELoss(recipe="released")
    z1, z2 = batches[0]
    want, beta = ref_released(z1, z2, 4.0)
    assert abs(m(z1, z2).item() - want) < 1e-10 and abs(float(m.beta_state.beta) - beta) < 1e-10


BAD_INIT = [
    (dict(tau=0.0), "tau must be > 0"),
    (dict(tau=math.nan), "tau must be"),
    (dict(gate={"margin": 2.0}), "gate must be a GateConfig"),
    (dict(recipe="Released"), "recipe must be one of"),
    (dict(released=ReleasedConfig()), "only used by recipe='released'"),
    (dict(recipe="released", released={"pl_weight": 0.0}), "released must be a ReleasedConfig"),
    (dict(check_inputs="yes"), "check_inputs must be a bool"),
]


@pytest.mark.parametrize("kwargs,match", BAD_INIT, ids=[m for _, m in BAD_INIT])
def test_constructor_validates_once(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WeiNCELoss(**kwargs)


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError):
        WeiNCELoss(temperature=0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        WeiNCELoss(margin=2.0)  # type: ignore[call-arg]


def test_repr_names_the_settings():
    r = repr(WeiNCELoss(recipe="released"))
    assert "tau=0.5" in r and "GateConfig(q=0.2" in r and "recipe='released'" in r
    assert "WeibullBetaState" in r and "ReleasedConfig(weib_weight=0.5" in r


def test_module_casts_with_to_and_state_stays_float64_by_default():
    m = WeiNCELoss(recipe="released").to(torch.device("cpu"))
    assert m.beta_state.beta.device.type == "cpu" and m.beta_state.beta.dtype == torch.float64


@pytest.mark.parametrize("cast", ["half", "bfloat16", "double"])
def test_a_dtype_cast_keeps_the_ema_in_float64(cast):
    m = WeiNCELoss(recipe="released")
    z1, z2 = make_views(20, 6, seed=5)
    m(z1, z2)
    before = m.beta_state.beta.clone()
    m = m.half() if cast == "half" else m.to(getattr(torch, cast))
    for name in ("beta", "beta_hat", "r2"):
        assert getattr(m.beta_state, name).dtype == torch.float64, name
    assert torch.equal(m.beta_state.beta, before) and m.beta_state.steps.dtype == torch.int64
    out = m(z1.to(torch.float32), z2.to(torch.float32))
    assert out.dtype == torch.float32 and torch.isfinite(out)
