"""Tests of theory.validation: the shared scalar validators ``real`` and ``integer``, the tensor
rules, and the size checks (``check_size``) with the callers that use them.

References are plain Python comparisons written here (interval membership by hand).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from theory import options
from theory.collapse import ClassStatsAccumulator, class_counts, class_stats, metric_row, ncm_accuracy
from theory.geometry import etf_gram, simplex_etf
from theory.hcl import contrastive_loss, sample_negatives
from theory.hcl.convex import etf_gram_np
from theory.hcl.sampling import stream_uniforms
from theory.validation import check_size, integer, memory_limit, real
from theory.weince import link_select

# ---------------------------------------------------------------------------------------------
# real


@pytest.mark.parametrize(
    "value", [0.5, 1, np.float32(0.25), np.float64(2.0), np.int64(3), torch.tensor(0.75), torch.tensor([1.5])]
)
def test_real_accepts_and_returns_python_float(value):
    out = real("x", value, lo=0, lo_open=True)
    assert type(out) is float
    assert out == float(value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_real_keeps_value_of_float_tensors(dtype):
    t = torch.tensor(0.1, dtype=dtype)
    assert real("x", t) == t.item()


@pytest.mark.parametrize(
    "lo,lo_open,hi,hi_open",
    [
        (None, False, None, False),
        (0, False, None, False),
        (0, True, None, False),
        (None, False, 1, False),
        (None, False, 1, True),
        (0, False, 1, True),
        (0, True, 0.5, False),
        (-1, True, 1, True),
    ],
)
@pytest.mark.parametrize("v", [-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5])
def test_real_bounds_match_manual_interval(lo, lo_open, hi, hi_open, v):
    inside = True
    if lo is not None:
        inside &= v > lo if lo_open else v >= lo
    if hi is not None:
        inside &= v < hi if hi_open else v <= hi
    if inside:
        assert real("x", v, lo=lo, lo_open=lo_open, hi=hi, hi_open=hi_open) == v
    else:
        with pytest.raises(ValueError, match=r"^x must be .*got"):
            real("x", v, lo=lo, lo_open=lo_open, hi=hi, hi_open=hi_open)


def test_real_messages_name_argument_bound_and_value():
    with pytest.raises(ValueError, match=r"^tau must be > 0, got 0$"):
        real("tau", 0, lo=0, lo_open=True)
    with pytest.raises(ValueError, match=r"^beta must be >= 0, got -1.5$"):
        real("beta", -1.5, lo=0)
    with pytest.raises(ValueError, match=r"^eps must be in \(0, 0.5\], got 0.7$"):
        real("eps", 0.7, lo=0, lo_open=True, hi=0.5)
    with pytest.raises(ValueError, match=r"^floor must be in \[0, 1\), got 1$"):
        real("floor", 1, lo=0, hi=1, hi_open=True)
    with pytest.raises(ValueError, match=r"^q must be <= 1, got 2$"):
        real("q", 2, hi=1)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, np.float32("inf"), torch.tensor(float("inf"))])
def test_real_rejects_inf_by_default(bad):
    with pytest.raises(ValueError, match="margin must be a finite real number"):
        real("margin", bad)


def test_real_allow_inf():
    assert real("margin", math.inf, allow_inf=True) == math.inf
    assert real("margin", math.inf, lo=0, allow_inf=True) == math.inf
    assert real("m", -math.inf, allow_inf=True) == -math.inf
    with pytest.raises(ValueError, match="m must be >= 0"):
        real("m", -math.inf, lo=0, allow_inf=True)
    with pytest.raises(ValueError, match="m must be <= 1"):
        real("m", math.inf, hi=1, allow_inf=True)


@pytest.mark.parametrize("allow_inf", [False, True])
@pytest.mark.parametrize("bad", [math.nan, np.float64("nan"), torch.tensor(float("nan"))])
def test_real_rejects_nan_always(bad, allow_inf):
    with pytest.raises(ValueError, match="tau must be .*nan"):
        real("tau", bad, allow_inf=allow_inf)


@pytest.mark.parametrize("bad", [None, "abc", [1.0, 2.0], object(), torch.ones(3), np.ones(2), 1 + 2j])
def test_real_rejects_non_numbers_with_value_error(bad):
    with pytest.raises(ValueError, match="^beta must be a real number, got"):
        real("beta", bad)


# ---------------------------------------------------------------------------------------------
# integer


@pytest.mark.parametrize(
    "value", [3, np.int8(3), np.int16(3), np.int32(3), np.int64(3), np.uint8(3), np.uint64(3)]
)
def test_integer_accepts_python_and_numpy_integers(value):
    out = integer("K", value, lo=1)
    assert type(out) is int and out == 3


@pytest.mark.parametrize("bad", [True, False, np.bool_(True)])
def test_integer_rejects_bool(bad):
    with pytest.raises(ValueError, match="K must be an integer"):
        integer("K", bad)


@pytest.mark.parametrize("bad", [3.0, np.float64(3.0), "3", None, torch.tensor(3), np.array([3]), math.nan])
def test_integer_rejects_non_integers(bad):
    with pytest.raises(ValueError, match=r"^num_negatives must be an integer >= 1, got"):
        integer("num_negatives", bad, lo=1)


@pytest.mark.parametrize("lo,hi", [(None, None), (1, None), (None, 4), (2, 4), (0, 0)])
@pytest.mark.parametrize("v", range(-2, 7))
def test_integer_bounds_match_manual_interval(lo, hi, v):
    inside = (lo is None or v >= lo) and (hi is None or v <= hi)
    if inside:
        assert integer("n", v, lo=lo, hi=hi) == v
        assert integer("n", np.int64(v), lo=lo, hi=hi) == v
    else:
        with pytest.raises(ValueError, match=rf"^n must be an integer .*got {v}$"):
            integer("n", v, lo=lo, hi=hi)


def test_integer_messages():
    with pytest.raises(ValueError, match=r"^C must be an integer >= 2, got 1$"):
        integer("C", 1, lo=2)
    with pytest.raises(ValueError, match=r"^K must be an integer in \[2, 4\], got 5$"):
        integer("K", 5, lo=2, hi=4)
    with pytest.raises(ValueError, match=r"^top_k must be an integer <= 3, got 4$"):
        integer("top_k", 4, hi=3)
    with pytest.raises(ValueError, match=r"^order must be an integer, got 1.5$"):
        integer("order", 1.5)


# ---------------------------------------------------------------------------------------------
# the modules use the shared validators (same messages everywhere)


def test_modules_share_the_messages():
    from theory import collapse, hcl, infonce, weince
    from theory.hcl import convex, symbolic
    from theory.weince import gpd

    calls = [
        (lambda: hcl.scl_optimum(3, tau=0), r"tau must be > 0(\.0)?, got 0"),
        (lambda: hcl.binomial_mixture(1.5, 3), r"q must be in \[0(\.0)?, 1(\.0)?\], got 1.5"),
        (
            lambda: infonce.info_nce(torch.zeros(3, 2), torch.zeros(3, 2), tau=math.inf),
            "tau must be a finite",
        ),
        (
            lambda: collapse.nc1(torch.zeros(4, 2), torch.tensor([0, 0, 1, 1]), num_classes=True),
            "num_classes must",
        ),
        (lambda: convex.etf_gram_np(np.int64(1)), "num_classes must be an integer >= 2, got np.int64"),
        (lambda: gpd.gpd_loglik([0.1], 0.1, -1.0), "sigma must be > 0"),
        (lambda: weince.tail_size(True, 0.1, 1), "num_negatives must be an integer >= 1, got True"),
        (lambda: symbolic.etf_gram_matrix(True), "num_classes must be an integer >= 2, got True"),
    ]
    for call, match in calls:
        with pytest.raises(ValueError, match=match):
            call()
    assert symbolic.etf_gram_matrix(np.int64(3)).shape == (3, 3)


@pytest.mark.parametrize("bad", [True, False, "0.5", b"1", np.bool_(True)])
def test_real_rejects_bool_and_strings(bad):
    with pytest.raises(ValueError, match="tau must be a real number"):
        real("tau", bad)


# ---------------------------------------------------------------------------------------------
# the input rule for tensor arguments (docs/README.md#conventions)
from theory.validation import (  # noqa: E402
    as_float_tensor,
    as_labels,
    as_tensor,
    check_embeddings,
    check_label_range,
    floating_dtype,
    integer_tensor,
)

ACCEPTED = {
    "tensor": lambda: torch.arange(6.0).reshape(2, 3),
    "numpy": lambda: np.arange(6.0).reshape(2, 3),
    "list": lambda: [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
    "int numpy": lambda: np.arange(6).reshape(2, 3),
}


@pytest.mark.parametrize("kind", list(ACCEPTED))
def test_as_tensor_accepts(kind):
    x = ACCEPTED[kind]()
    t = as_tensor(x, "x")
    assert isinstance(t, torch.Tensor) and t.shape == (2, 3)
    assert torch.equal(t.double(), torch.arange(6.0, dtype=torch.float64).reshape(2, 3))


def test_as_tensor_shares_numpy_memory():
    a = np.zeros(4)
    t = as_tensor(a, "x")
    a[0] = 5.0
    assert t[0].item() == 5.0  # converted without a copy


REJECTED = {
    "meta": (lambda: torch.zeros(3, device="meta"), r"^x is a meta tensor"),
    "complex": (
        lambda: torch.zeros(3, dtype=torch.complex64),
        r"^x must be real, got dtype torch.complex64$",
    ),
    "complex numpy": (lambda: np.zeros(3, dtype=complex), r"^x must be real"),
    "object numpy": (lambda: np.array(["a", "b"]), r"^x must be a numeric array, got numpy dtype"),
    "string": (lambda: "abc", r"^x must be a torch tensor, a numpy array or a sequence of numbers, got str$"),
    "ragged": (lambda: [[1.0], [1.0, 2.0]], r"^x must be a torch tensor, a numpy array or a sequence"),
    "none": (lambda: None, r"^x must be a torch tensor"),
}


@pytest.mark.parametrize("kind", list(REJECTED))
def test_as_tensor_rejects_naming_the_argument(kind):
    make, match = REJECTED[kind]
    with pytest.raises(ValueError, match=match):
        as_tensor(make(), "x")


def test_as_float_tensor_promotions():
    assert as_float_tensor(torch.tensor([1, 2])).dtype == torch.get_default_dtype()
    assert as_float_tensor(torch.tensor([True])).dtype == torch.get_default_dtype()
    assert as_float_tensor(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.float32
    assert as_float_tensor(torch.ones(2, dtype=torch.float16)).dtype == torch.float32
    assert as_float_tensor(torch.ones(2, dtype=torch.float64)).dtype == torch.float64
    assert as_float_tensor(torch.ones(2), min_dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="^w is a meta tensor"):
        as_float_tensor(torch.ones(2, device="meta"), "w")


def test_integer_tensor_and_label_checks():
    assert integer_tensor(torch.tensor([1, 2], dtype=torch.int8), "y").dtype == torch.int64
    for bad in [torch.tensor([1.0]), torch.tensor([True]), torch.tensor([1j])]:
        with pytest.raises(ValueError, match="^y must be integers"):
            integer_tensor(bad, "y")
    check_label_range(torch.tensor([0, 4]), "y", 5)
    check_label_range(torch.zeros(0, dtype=torch.long), "y", 1)
    with pytest.raises(ValueError, match=r"^y must be >= 0, got min -3$"):
        check_label_range(torch.tensor([0, -3]), "y")
    with pytest.raises(ValueError, match=r"^y must lie in \[0, num_classes=4\), got max 4$"):
        check_label_range(torch.tensor([0, 4]), "y", 4)
    with pytest.raises(ValueError, match=r"^groups must have shape \(3,\) to match z, got \(2,\)$"):
        as_labels([0, 1], 3, None, name="groups")
    assert as_labels(np.array([-1, 5]), 2, None, check=False).tolist() == [-1, 5]  # no data check
    with pytest.raises(ValueError, match="labels must be >= 0"):
        as_labels(np.array([-1, 5]), 2, None)


def test_floating_dtype():
    assert floating_dtype(torch.bfloat16) == torch.bfloat16
    for bad in [torch.int32, torch.bool, torch.complex64, "float32", np.float64, None]:
        with pytest.raises(ValueError, match=r"^dtype must be a floating torch dtype"):
            floating_dtype(bad)


def test_check_embeddings():
    check_embeddings(torch.ones(3, 4))
    check_embeddings(torch.zeros(0, 4))
    check_embeddings(torch.full((2, 2), 1e18), scale=1.0)  # 2 * 2e36 < max / 16
    for v in [float("nan"), float("inf")]:
        z = torch.ones(3, 4)
        z[1, 2] = v
        with pytest.raises(ValueError, match=r"^q must be finite \(found NaN or inf\)$"):
            check_embeddings(z, "q")
    with pytest.raises(ValueError, match=r"^z is too large for torch.float32: max \|\|z_i\|\|\^2 = 2e\+40"):
        check_embeddings(torch.full((2, 2), 1e20))
    with pytest.raises(ValueError, match="times 100"):
        check_embeddings(torch.full((2, 2), 1e18), scale=100.0)
    check_embeddings(torch.full((2, 2), 1e20, dtype=torch.float64), scale=100.0)
    with pytest.raises(ValueError, match="too large for torch.float64"):
        check_embeddings(torch.full((2, 2), 1e160, dtype=torch.float64))


# ---------------------------------------------------------------------------------------------
# sizes that cannot be allocated


def test_memory_limit_is_the_smaller_of_the_cap_and_half_the_memory(monkeypatch):
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert memory_limit() == min(16 * 2**30, total // 2) == memory_limit("cpu")
    monkeypatch.setattr(options, "MEMORY_LIMIT", 2**20)  # read at call time
    assert memory_limit() == 2**20
    check_size("n", 7, 2**20, what="exactly the limit")  # at the limit: accepted
    with pytest.raises(ValueError) as err:
        check_size("n", 7, 2**20 + 1, what="one byte more")
    msg = str(err.value)
    assert msg.startswith("n = 7 needs 1 MiB (one byte more), over the memory limit of 1 MiB")
    assert "theory.options.MEMORY_LIMIT = 1 MiB" in msg and msg.endswith("pass a smaller n")


def test_a_lowered_limit_applies_to_every_size_check(monkeypatch):
    monkeypatch.setattr(options, "MEMORY_LIMIT", 2**20)
    simplex_etf(10, 12)  # 8 (3 C^2 + 2 C d) bytes: far below 1 MiB
    with pytest.raises(ValueError, match=r"^\(num_classes, d\) = \(300, 300\) needs 3.43 MiB"):
        simplex_etf(300, 300)  # 8 (3 + 2) 300^2 = 3.6e6 bytes


#: The issue's sizes, each beyond 16 GiB (so beyond the limit on every machine), with the
#: argument its message must name.
_Z = torch.nn.functional.normalize(torch.randn(12, 5, generator=torch.Generator().manual_seed(0)), dim=1)
_LABELS = torch.arange(12) % 3
HUGE = {
    "contrastive_loss sampled": (
        "num_negatives",
        lambda: contrastive_loss(_Z, _LABELS, setting="supervised", estimator="sampled", num_negatives=10**9),
    ),
    "contrastive_loss sampled triplet": (
        "num_negatives",
        lambda: contrastive_loss(
            _Z, _LABELS, setting="unsupervised", psi="triplet", estimator="sampled", num_negatives=10**9
        ),
    ),
    "sample_negatives": (
        "num_negatives",
        lambda: sample_negatives(torch.zeros(3, 4), torch.zeros(2, dtype=torch.long), 10**9),
    ),
    "stream_uniforms": ("num", lambda: stream_uniforms(0, torch.arange(4), 10**9)),
    "class_stats": ("num_classes", lambda: class_stats(_Z, _LABELS, num_classes=10**9)),
    "class_counts": ("num_classes", lambda: class_counts(_LABELS, num_classes=10**10)),
    "ncm_accuracy": ("num_classes", lambda: ncm_accuracy(_Z, _LABELS, _Z, _LABELS, num_classes=10**9)),
    "metric_row": ("num_classes", lambda: metric_row(_Z, _LABELS, 10**9)),
    "ClassStatsAccumulator": ("num_classes", lambda: ClassStatsAccumulator(10**9)),
    "simplex_etf": (r"\(num_classes, d\)", lambda: simplex_etf(10**5, 10**5)),
    "etf_gram": ("num_classes", lambda: etf_gram(10**6)),
    "etf_gram_np": ("num_classes", lambda: etf_gram_np(10**6)),
    "link_select": ("n_grid", lambda: link_select(np.full((4, 3), 0.1) + np.eye(4, 3), n_grid=10**9)),
}


@pytest.mark.parametrize("case", list(HUGE))
def test_sizes_that_cannot_be_allocated_raise_stating_size_need_and_limit(case):
    name, call = HUGE[case]
    with pytest.raises(
        ValueError, match=rf"^{name} = .* needs [0-9,.]+ GiB \(.*\), over the memory limit of "
    ):
        call()
