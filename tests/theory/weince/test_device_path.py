"""The device (torch-only) path of the gate and the loss: same numbers as the CPU fast path, no sync.

The device path is the only one off the CPU. Here it runs on the CPU with the numpy fast paths
switched off (``theory.weince._fast._NUMPY_FAST = False``), and with every tensor-to-host
conversion (``.item()``, ``bool()``, ``float()``, ``int()``, ``.tolist()``, ``.cpu()``, ``.numpy()``)
made to raise: a forward + backward pass with ``check_inputs=False`` must not need any of them.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import theory.weince._fast as W
from tests.theory.weince.reference import make_views, ref_released, ref_weince
from theory.weince import (
    GateConfig,
    WeibullBetaState,
    WeiNCELoss,
    weince_gate,
    weince_label_loss,
    weince_loss,
)


def _run(fast, dtype, recipe, monkeypatch, gate=None):
    gate = gate or GateConfig()
    monkeypatch.setattr(W, "_NUMPY_FAST", fast)
    z1, z2 = make_views(40, 8, seed=14, dtype=dtype)
    a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    state = WeibullBetaState() if recipe == "released" else None
    loss, diag = weince_loss(a1, a2, gate=gate, recipe=recipe, state=state, return_diagnostics=True)
    loss.backward()
    return loss.detach(), diag, state, a1.grad, a2.grad


@pytest.mark.parametrize("recipe", ["core", "released"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_torch_path_matches_numpy_path(dtype, recipe, monkeypatch):
    fast = _run(True, dtype, recipe, monkeypatch)
    slow = _run(False, dtype, recipe, monkeypatch)
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-6, rtol=1e-5)
    assert torch.allclose(fast[0], slow[0], **tol)
    for name in ("lam", "lam_rho", "lam_aic", "rho", "rho0"):
        assert torch.allclose(getattr(fast[1], name), getattr(slow[1], name), **tol), name
        assert getattr(slow[1], name).dtype == dtype
    assert torch.allclose(fast[1].dAIC, slow[1].dAIC, rtol=1e-9, atol=1e-7)
    assert torch.allclose(fast[3], slow[3], **tol) and torch.allclose(fast[4], slow[4], **tol)
    if recipe == "released":
        assert abs(float(fast[2].beta) - float(slow[2].beta)) < 1e-9
        assert abs(float(fast[2].r2) - float(slow[2].r2)) < 1e-9


def test_torch_path_matches_the_loop_reference(monkeypatch):
    monkeypatch.setattr(W, "_NUMPY_FAST", False)
    gate = GateConfig(margin=0.0, kappa_rho=5.0, kappa_aic=0.5)
    for N in (2, 5, 33):
        z1, z2 = make_views(N, 6, seed=N)
        loss, diag = weince_loss(z1, z2, gate=gate, return_diagnostics=True)
        ref = ref_weince(z1, z2, gate=gate)
        assert abs(loss.item() - ref[0]) < 1e-12
        assert torch.allclose(diag.lam, torch.tensor(ref[1], dtype=torch.float64), atol=1e-12, rtol=0)
    z1, z2 = make_views(20, 6, seed=7)
    loss = weince_loss(z1, z2, recipe="released", state=WeibullBetaState())
    assert abs(loss.item() - ref_released(z1, z2, 4.0)[0]) < 1e-10


def test_torch_path_ties_and_collapse(monkeypatch):
    monkeypatch.setattr(W, "_NUMPY_FAST", False)
    e = torch.zeros(8, 5, dtype=torch.float64)
    e[:, 0] = 1.0
    loss, diag = weince_loss(e, 2 * e, return_diagnostics=True)
    assert abs(loss.item() - torch.log(torch.tensor(15.0, dtype=torch.float64)).item()) < 1e-9
    assert torch.allclose(diag.dAIC, torch.tensor(ref_weince(e, 2 * e)[2], dtype=torch.float64), atol=1e-9)


@pytest.mark.parametrize("fast", [True, False])
def test_label_gate_paths_agree(fast, monkeypatch):
    g = torch.Generator().manual_seed(3)
    labels = torch.tensor([0] * 9 + [1] * 5 + [2] * 20 + [3] * 2 + [4] * 1)
    z = torch.randn(len(labels), 6, generator=g) + 1.5 * torch.randn(5, 6, generator=g)[labels]
    gate = GateConfig(tail_frac=0.3, min_tail=4)
    monkeypatch.setattr(W, "_NUMPY_FAST", True)
    ref, dref = weince_label_loss(z, labels, gate=gate, return_diagnostics=True)
    monkeypatch.setattr(W, "_NUMPY_FAST", fast)
    got, dgot = weince_label_loss(z, labels, gate=gate, return_diagnostics=True)
    assert torch.allclose(got, ref, atol=1e-6, rtol=1e-6)
    assert torch.allclose(dgot.lam, dref.lam, atol=1e-6, rtol=0)
    assert torch.equal(dgot.k_tail, dref.k_tail) and torch.equal(dgot.n_eff, dref.n_eff)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_torch_path_half_inputs_computed_in_float32(dtype, monkeypatch):
    monkeypatch.setattr(W, "_NUMPY_FAST", False)
    z1, z2 = make_views(24, 8, seed=5, dtype=torch.float32)
    h1, h2 = z1.to(dtype).requires_grad_(), z2.to(dtype)
    state = WeibullBetaState()
    loss, diag = weince_loss(h1, h2, recipe="released", state=state, return_diagnostics=True)
    ref = weince_loss(h1.detach().float(), h2.float(), recipe="released", state=WeibullBetaState())
    assert loss.dtype == torch.float32 and torch.equal(loss, ref)
    for name in ("lam", "lam_rho", "lam_aic", "rho", "rho0", "dAIC"):
        assert getattr(diag, name).dtype == torch.float32, name
    assert state.beta.dtype == torch.float64
    loss.backward()
    assert h1.grad.dtype == dtype and torch.isfinite(h1.grad.float()).all()
    st = weince_gate(h2[:, :6])  # the gate alone: float32 statistics for half input
    assert st.lam.dtype == torch.float32


@contextlib.contextmanager
def _no_host_sync(monkeypatch):
    """Make every tensor-to-host conversion raise inside the block."""

    def forbid(name):
        def f(*args, **kwargs):
            raise AssertionError(f"host synchronisation: Tensor.{name}")

        return f

    with monkeypatch.context() as m:
        for name in ("item", "__bool__", "__float__", "__int__", "tolist", "cpu", "numpy"):
            m.setattr(torch.Tensor, name, forbid(name))
        yield


def test_no_sync_helper_catches_a_sync(monkeypatch):
    t = torch.ones(3)
    with _no_host_sync(monkeypatch), pytest.raises(AssertionError, match="__bool__"):
        bool(t.max() > 0)
    with _no_host_sync(monkeypatch), pytest.raises(AssertionError, match="item"):
        t.sum().item()
    assert bool(t.max() > 0)  # restored


@pytest.mark.parametrize("recipe", ["core", "released"])
@pytest.mark.parametrize("N", [2, 4, 40])
def test_forward_and_backward_need_no_host_sync(recipe, N, monkeypatch):
    monkeypatch.setattr(W, "_NUMPY_FAST", False)
    mod = WeiNCELoss(recipe=recipe, check_inputs=False)
    z1, z2 = make_views(N, 8, seed=60 + N, dtype=torch.float32)
    z1 = z1.clone().requires_grad_()
    with _no_host_sync(monkeypatch):
        for _ in range(2):  # the second call reuses the cached responses
            loss = mod(z1, z2)
            loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z1.grad).all()
    assert mod.last_diagnostics is not None
    want = weince_loss(z1.detach(), z2, recipe=recipe, state=None if recipe == "core" else _replayed(z1, z2))
    assert torch.allclose(loss.detach(), want, atol=1e-6, rtol=1e-6)


def _replayed(z1, z2):
    """A state that has seen the batch once (the module saw it twice; compare with the second call)."""
    s = WeibullBetaState()
    weince_loss(z1.detach(), z2, recipe="released", state=s)
    return s


def test_check_inputs_is_the_only_sync_of_the_forward_pass(monkeypatch):
    monkeypatch.setattr(W, "_NUMPY_FAST", False)
    mod = WeiNCELoss(check_inputs=True)
    z1, z2 = make_views(8, 4, seed=1, dtype=torch.float32)
    with _no_host_sync(monkeypatch), pytest.raises(AssertionError, match="host synchronisation"):
        mod(z1, z2)


@pytest.mark.parametrize("recipe", ["core", "released"])
def test_device_path_runs_on_meta_tensors(recipe):
    # meta tensors carry shapes but no data: any host read or data-dependent branch would fail
    mod = WeiNCELoss(recipe=recipe, check_inputs=False).to("meta")
    if recipe == "released":
        assert mod.beta_state.beta.is_meta  # the EMA buffers moved with .to()
    z1 = torch.randn(12, 6, device="meta", requires_grad=True)
    z2 = torch.randn(12, 6, device="meta")
    loss = mod(z1, z2)
    loss.backward()
    assert loss.is_meta and loss.shape == () and z1.grad.shape == (12, 6)
    d = mod.last_diagnostics
    assert d.lam.is_meta and d.lam.shape == (24,) and d.rho0.shape == ()
    if recipe == "released":
        assert d.beta_t.is_meta
