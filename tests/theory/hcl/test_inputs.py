"""Sound inputs of the batch losses (issue 9, item 3): each observed failure raises or computes
correctly. Table-driven: one parametrised case per input, so one failure does not hide the rest."""

import math

import numpy as np
import pytest
import torch

from tests.reference import loop_loss
from theory.hcl import HSCL, HardContrastiveLoss, contrastive_loss, two_view_contrastive_loss
from theory.infonce import info_nce


def _batch(B=10, d=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, d, generator=g, dtype=dtype)
    z = z / z.norm(dim=1, keepdim=True)
    return z, torch.arange(B) % 3


def _with(z, row, value):
    z = z.clone()
    z[row, 0] = value
    return z


# ---------------------------------------------------------------------------------------------
# NaN / inf in z -> ValueError naming the argument
NONFINITE = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
}
CALLS = {
    "expectation": lambda z, y: contrastive_loss(z, y, setting="supervised", beta=2.0),
    "sampled": lambda z, y: contrastive_loss(
        z, y, setting="unsupervised", estimator="sampled", num_negatives=8
    ),
    "triplet": lambda z, y: contrastive_loss(z, y, setting="supervised", psi="triplet"),
    "undetached": lambda z, y: contrastive_loss(z, y, setting="supervised", beta=1.0, detach_weights=False),
    "module": lambda z, y: HSCL(beta=3.0)(z, y),
    "stacked": lambda z, y: contrastive_loss(torch.stack([z, z]), y, setting="supervised", beta=1.0),
}


@pytest.mark.parametrize("value", list(NONFINITE))
@pytest.mark.parametrize("call", list(CALLS))
def test_nonfinite_z_is_rejected_naming_z(call, value):
    z, y = _batch()
    with pytest.raises(ValueError, match=r"^z must be finite \(found NaN or inf\)$"):
        CALLS[call](_with(z, 3, NONFINITE[value]), y)


@pytest.mark.parametrize("view", ["z1", "z2"])
@pytest.mark.parametrize("value", list(NONFINITE))
def test_nonfinite_views_are_rejected_naming_the_view(view, value):
    z, y = _batch()
    z1, z2 = z[:5], z[5:]
    if view == "z1":
        z1 = _with(z1, 1, NONFINITE[value])
    else:
        z2 = _with(z2, 1, NONFINITE[value])
    with pytest.raises(ValueError, match=rf"^{view} must be finite"):
        two_view_contrastive_loss(z1, z2, y[:5], setting="supervised", beta=1.0)
    with pytest.raises(ValueError, match="must be finite"):
        info_nce(z1, z2)
    with pytest.raises(ValueError, match="must be finite"):
        info_nce(z1, z2, normalize=False)


# ---------------------------------------------------------------------------------------------
# |z| ~ 1e20 in float32 / bfloat16: the similarities overflow -> ValueError naming z with the reason
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("estimator", ["expectation", "sampled"])
@pytest.mark.parametrize("psi", ["mean", "triplet"])
def test_overflowing_similarities_raise_naming_z(dtype, estimator, psi):
    z, y = _batch(dtype=torch.float32)
    big = (z * 1e20).to(dtype)
    with pytest.raises(
        ValueError, match=r"^z is too large for torch.float32: max \|\|z_i\|\|\^2 = .*normalise z"
    ):
        contrastive_loss(big, y, setting="supervised", beta=2.0, estimator=estimator, psi=psi)
    # float64 holds the same input: the loss is computed (and finite)
    assert math.isfinite(
        contrastive_loss(big.double(), y, setting="supervised", beta=2.0, estimator=estimator, psi=psi).item()
    )


def test_overflow_limit_accounts_for_tau():
    z, y = _batch(dtype=torch.float32)
    z = z * 1e18  # ||z||^2 = 1e36: S fits in float32, S / tau with tau = 0.01 does not
    with pytest.raises(ValueError, match="too large"):
        contrastive_loss(z, y, setting="supervised", tau=0.01)
    with pytest.raises(ValueError, match="too large"):
        info_nce(z[:5], z[5:], tau=0.01, normalize=False)
    assert math.isfinite(info_nce(z[:5], z[5:], tau=0.01).item())  # normalised: fine


# ---------------------------------------------------------------------------------------------
# sparse, huge label values: relabelled compactly (no bincount over the raw values)
@pytest.mark.parametrize("values", [(0, 10**8), (0, 2**40), (-(2**62), 2**62), (7, 3)])
@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
def test_huge_label_values_are_relabelled(values, setting, monkeypatch):
    z, _ = _batch(B=8)
    small = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0])
    big = torch.where(small == 0, values[0], values[1])
    want = contrastive_loss(z, small, setting=setting, beta=1.5)

    def no_bincount(*args, **kwargs):
        raise AssertionError("bincount over label values")

    monkeypatch.setattr(torch, "bincount", no_bincount)
    kw = dict(setting=setting, beta=1.5, check_inputs=values[0] >= 0)  # negative labels fail the check
    assert torch.equal(contrastive_loss(z, big, **kw), want)
    assert torch.equal(contrastive_loss(z, small, positive_groups=big, **kw), want)
    assert torch.equal(
        contrastive_loss(z, small, estimator="sampled", generator=torch.Generator().manual_seed(0), **kw),
        contrastive_loss(z, big, estimator="sampled", generator=torch.Generator().manual_seed(0), **kw),
    )


def test_label_range_checks_remain():
    z, y = _batch()
    with pytest.raises(ValueError, match=r"labels must lie in \[0, num_classes=2\), got max 2"):
        contrastive_loss(z, y, setting="supervised", num_classes=2)
    with pytest.raises(ValueError, match="labels must be >= 0, got min -1"):
        contrastive_loss(z, y - 1, setting="supervised")


# ---------------------------------------------------------------------------------------------
# one rule for numpy arrays and devices (docs/README.md#conventions)
def test_numpy_inputs_equal_tensor_inputs():
    z, y = _batch()
    want = contrastive_loss(z, y, setting="supervised", beta=2.0)
    got = contrastive_loss(z.numpy(), y.numpy(), setting="supervised", beta=2.0)
    assert torch.equal(got, want) and got.device == z.device
    assert torch.equal(contrastive_loss(z, y.tolist(), setting="supervised", beta=2.0), want)
    ids = (y * 100 + 7).numpy()
    assert torch.equal(
        contrastive_loss(z, y, setting="unsupervised", positive_groups=ids),
        contrastive_loss(z, y, setting="unsupervised", positive_groups=torch.as_tensor(ids)),
    )


REJECTED = [
    ("meta z", lambda z, y: (z.to("meta"), y), r"^z is a meta tensor"),
    ("meta labels", lambda z, y: (z, y.to("meta")), r"^labels is a meta tensor"),
    ("complex z", lambda z, y: (z.to(torch.complex128), y), r"^z must be real"),
    ("float labels", lambda z, y: (z, y.double()), r"^labels must be integers"),
    ("bool labels", lambda z, y: (z, y > 0), r"^labels must be integers"),
    ("string z", lambda z, y: ("abc", y), r"^z must be a torch tensor, a numpy array or a sequence"),
    ("object array", lambda z, y: (np.array([None] * 10), y), r"^z must be a numeric array"),
]


@pytest.mark.parametrize("name,make,match", REJECTED, ids=[r[0] for r in REJECTED])
def test_rejected_inputs_name_the_argument(name, make, match):
    z, y = make(*_batch())
    with pytest.raises(ValueError, match=match):
        contrastive_loss(z, y, setting="supervised")


def test_integer_z_is_promoted_to_floating_point():
    zi = torch.tensor([[1, 0], [0, 1], [1, 0], [0, 1]])
    y = torch.tensor([0, 1, 0, 1])
    got = contrastive_loss(zi, y, setting="supervised", beta=1.0)
    assert got.dtype == torch.get_default_dtype()
    assert got.item() == pytest.approx(
        contrastive_loss(zi.double(), y, setting="supervised", beta=1.0).item(), rel=1e-6
    )


# ---------------------------------------------------------------------------------------------
# messages that name the right argument
MESSAGES = [
    (
        "empty batch",
        lambda: contrastive_loss(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), setting="supervised"),
        r"z must hold at least one embedding per run \(B >= 1\)",
        "self_positive=False",
    ),
    (
        "positive_groups length",
        lambda: contrastive_loss(
            torch.eye(4), torch.arange(4) % 2, setting="supervised", positive_groups=torch.arange(3)
        ),
        r"^positive_groups must have shape \(4,\) to match z, got \(3,\)",
        "labels must",
    ),
    (
        "labels length",
        lambda: contrastive_loss(torch.eye(4), torch.arange(3), setting="supervised"),
        r"^labels must have shape \(4,\) to match z, got \(3,\)",
        None,
    ),
    (
        "no pair",
        lambda: contrastive_loss(torch.eye(4), torch.arange(4), setting="unsupervised", self_positive=False),
        r"no \(anchor, positive\) pair in the batch: every positive group is a singleton and self_positive=False",
        None,
    ),
    (
        "single class",
        lambda: contrastive_loss(torch.eye(4), torch.zeros(4, dtype=torch.long), setting="supervised"),
        r"^anchor 0 \(label 0\) has an empty negative set in setting='supervised'",
        "run",
    ),
    (
        "numpy K",
        lambda: contrastive_loss(
            torch.eye(4), torch.arange(4) % 2, setting="supervised", num_negatives=np.int64(0)
        ),
        r"^num_negatives must be an integer >= 1, got np.int64\(0\)$",
        None,
    ),
    (
        "tensor beta values",
        lambda: contrastive_loss(
            torch.eye(4), torch.arange(4) % 2, setting="supervised", beta=torch.tensor([1.0, -1.0, 0.0, 2.0])
        ),
        r"beta must be finite and >= 0",
        None,
    ),
    (
        "beta shape",
        lambda: contrastive_loss(torch.eye(4), torch.arange(4) % 2, setting="supervised", beta=torch.ones(3)),
        r"beta must be a scalar or a tensor of shape \(4,\)",
        None,
    ),
]


@pytest.mark.parametrize("name,call,match,absent", MESSAGES, ids=[m[0] for m in MESSAGES])
def test_messages_name_the_right_argument(name, call, match, absent):
    with pytest.raises(ValueError, match=match) as info:
        call()
    if absent is not None:
        assert absent not in str(info.value)


def test_numpy_integer_scalars_are_accepted():
    z, y = _batch()
    a = contrastive_loss(
        z,
        y,
        setting="supervised",
        psi="sum",
        num_negatives=np.int64(8),
        num_classes=np.int32(3),
        beta=np.float32(1.5),
        tau=np.float64(0.5),
    )
    b = contrastive_loss(
        z, y, setting="supervised", psi="sum", num_negatives=8, num_classes=3, beta=1.5, tau=0.5
    )
    assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# the float32 cancellation of the fused estimator at beta = 1000, tau = 0.01
@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
@pytest.mark.parametrize("psi,value", [("mean", math.log(2)), ("sum", math.log1p(256))])
def test_collapsed_float32_at_extreme_beta_and_tau(setting, psi, value):
    """Every t = 0 on collapsed input: exactly log 2 (mean) / log(1 + K) (sum). The previous fused
    estimator gave 0.693086 in float32 (cancellation of two log-sum-exps near 1100)."""
    z = torch.ones(12, 3) / math.sqrt(3)
    y = torch.arange(12) % 3
    kw = dict(setting=setting, beta=1000.0, tau=0.01, psi=psi)
    f32 = contrastive_loss(z, y, **kw).item()
    f64 = contrastive_loss(z.double() / z.double().norm(dim=1, keepdim=True), y, **kw).item()
    assert abs(f64 - value) < 2e-15 * value
    assert abs(f32 - value) < 2e-6  # pinned float32 error (rounding of S = z z^T, times 1/tau)
    # the rounding of the float32 input itself: the float64 value of the same float32 embeddings
    f64_of_f32 = contrastive_loss(z.double(), y, **kw).item()
    assert abs(f32 - f64_of_f32) < 2e-6


def test_extreme_beta_tau_against_the_loop_reference_float64():
    z, y = _batch(B=9, seed=4)
    for beta, tau in [(1000.0, 1.0), (30.0, 0.05)]:
        got = contrastive_loss(z, y, setting="supervised", beta=beta, tau=tau).item()
        ref = loop_loss(z, y, setting="supervised", beta=beta, tau=tau).item()
        assert got == pytest.approx(ref, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# check_inputs=False: no host synchronisation on the forward path
def _forbid_host_reads(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the forward path read tensor data on the host")

    for name in ("item", "__bool__", "__int__", "__float__", "__index__", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, boom)


FORWARDS = {
    "expectation": dict(setting="supervised", beta=2.0),
    "expectation beta=0": dict(setting="unsupervised", beta=0.0, self_negative=False),
    "per-run beta": dict(setting="supervised", beta=torch.tensor([0.0, 3.0], dtype=torch.float64)),
    "sampled": dict(setting="supervised", beta=2.0, estimator="sampled", num_negatives=8),
    "triplet": dict(setting="unsupervised", beta=1.0, psi="triplet"),
    "undetached": dict(setting="supervised", beta=1.0, detach_weights=False),
    "anchor_mean": dict(setting="supervised", beta=1.0, reduction="anchor_mean", self_positive=False),
}


@pytest.mark.parametrize("case", list(FORWARDS))
def test_no_host_reads_with_check_inputs_false(case, monkeypatch):
    z, y = _batch(B=12)
    z2, y2 = torch.stack([z, z.flip(0)]).requires_grad_(True), torch.stack([y, y.flip(0)])
    kw = dict(FORWARDS[case])
    gen = torch.Generator().manual_seed(0)
    want = contrastive_loss(z2, y2, generator=torch.Generator().manual_seed(0), **kw)
    _forbid_host_reads(monkeypatch)
    got = contrastive_loss(z2, y2, check_inputs=False, generator=gen, **kw)
    got.sum().backward()
    monkeypatch.undo()
    assert torch.equal(got, want)
    assert torch.isfinite(z2.grad).all()


def test_the_no_host_read_guard_can_fail(monkeypatch):
    z, y = _batch()
    _forbid_host_reads(monkeypatch)
    with pytest.raises(AssertionError, match="read tensor data on the host"):
        contrastive_loss(z, y, setting="supervised", beta=1.0)  # check_inputs=True reads the data


def test_module_without_checks(monkeypatch):
    z, y = _batch()
    m = HardContrastiveLoss("supervised", 2.0, check_inputs=False)
    want = HardContrastiveLoss("supervised", 2.0)(z, y)
    _forbid_host_reads(monkeypatch)
    got = m(z, y)
    monkeypatch.undo()
    assert torch.equal(got, want)


@pytest.mark.parametrize("case", ["expectation", "expectation beta=0", "per-run beta", "anchor_mean"])
def test_a_non_finite_embedding_without_checks_gives_nan_not_a_number(case):
    """check_inputs=False skips the check, not the arithmetic: a NaN in z reaches the loss of every
    run it touches and its gradient, never a finite value that hides it (the row shift of the
    expectation estimator only replaces the -inf of a row without any allowed column)."""
    z, y = _batch(B=12)
    bad = z.clone()
    bad[3, 0] = float("nan")
    z2 = torch.stack([z, bad]).requires_grad_(True)
    y2 = torch.stack([y, y])
    got = contrastive_loss(z2, y2, check_inputs=False, **FORWARDS[case])  # (R,): one loss per run
    assert got.shape == (2,)
    assert torch.isnan(got[1]).all() and torch.isfinite(got[0]).all()
    got.sum().backward()
    assert torch.isfinite(z2.grad[0]).all() and torch.isnan(z2.grad[1]).any()
