"""The input rule of theory.collapse, table-driven: every public function and every array argument
against NaN/inf, meta, complex and bool tensors, bad shapes, bad labels and too few classes; the
numpy/device rule and the return types."""

import math
import re
import warnings

import numpy as np
import pytest
import torch

from theory.collapse import (
    ClassStatsAccumulator,
    between_class_covariance,
    class_counts,
    class_mean_spectrum,
    class_means,
    class_stats,
    effective_rank,
    embedding_spectrum,
    erank_cov,
    etf_error,
    global_mean,
    nc1,
    nc1_cdnv,
    nc1_cdnv_from_stats,
    nc1_from_stats,
    nc2_equiangularity,
    nc2_equinorm,
    nc2_max_angle,
    nc3_self_duality,
    nc3_self_duality_zhu,
    nc4_ncc_agreement,
    ncm_accuracy,
    ncm_classifier,
    paper_conditions,
    rankme,
    within_class_covariance,
    within_class_variation,
)
from theory.collapse._inputs import as_tensor

_rng = np.random.default_rng(0)
Z = _rng.standard_normal((6, 3))
Y = np.array([0, 1, 2, 0, 1, 2])
MU = np.stack([Z[Y == c].mean(axis=0) for c in range(3)])
W = _rng.standard_normal((3, 3))
B = _rng.standard_normal(3)
G = np.zeros(3)

# (id, call taking its array arguments as keywords, {argument: valid value})
CALLS = [
    ("class_stats", lambda z: class_stats(z, Y), {"z": Z}),
    ("class_means", lambda z: class_means(z, Y), {"z": Z}),
    ("global_mean", lambda z: global_mean(z), {"z": Z}),
    ("within_class_covariance", lambda z: within_class_covariance(z, Y), {"z": Z}),
    ("between_class_covariance", lambda z: between_class_covariance(z, Y), {"z": Z}),
    ("nc1", lambda z: nc1(z, Y), {"z": Z}),
    ("nc1_cdnv", lambda z: nc1_cdnv(z, Y), {"z": Z}),
    ("within_class_variation", lambda z: within_class_variation(z, Y), {"z": Z}),
    ("paper_conditions", lambda mu: paper_conditions(mu), {"mu": MU}),
    ("class_mean_spectrum", lambda mu: class_mean_spectrum(mu), {"mu": MU}),
    ("nc2_equinorm", lambda mu, global_mean: nc2_equinorm(mu, global_mean), {"mu": MU, "global_mean": G}),
    (
        "nc2_equiangularity",
        lambda mu, global_mean: nc2_equiangularity(mu, global_mean),
        {"mu": MU, "global_mean": G},
    ),
    ("nc2_max_angle", lambda mu, global_mean: nc2_max_angle(mu, global_mean), {"mu": MU, "global_mean": G}),
    ("etf_error", lambda mu, global_mean: etf_error(mu, global_mean), {"mu": MU, "global_mean": G}),
    (
        "nc3_self_duality",
        lambda W, mu, global_mean: nc3_self_duality(W, mu, global_mean),
        {"W": W, "mu": MU, "global_mean": G},
    ),
    (
        "nc3_self_duality_zhu",
        lambda W, mu, global_mean: nc3_self_duality_zhu(W, mu, global_mean),
        {"W": W, "mu": MU, "global_mean": G},
    ),
    (
        "nc4_ncc_agreement",
        lambda W, z, mu, b: nc4_ncc_agreement(W, z, mu, b),
        {"W": W, "z": Z, "mu": MU, "b": B},
    ),
    ("ncm_classifier", lambda mu: ncm_classifier(mu), {"mu": MU}),
    (
        "ncm_accuracy",
        lambda train_z, test_z: ncm_accuracy(train_z, Y, test_z, Y),
        {"train_z": Z, "test_z": Z},
    ),
    ("effective_rank", lambda matrix: effective_rank(matrix), {"matrix": Z}),
    ("rankme", lambda z: rankme(z), {"z": Z}),
    ("erank_cov", lambda z: erank_cov(z), {"z": Z}),
    ("embedding_spectrum", lambda z: embedding_spectrum(z), {"z": Z}),
    ("ClassStatsAccumulator.update", lambda z: ClassStatsAccumulator(3).update(z, Y), {"z": Z}),
]

ARRAY_CASES = [(cid, fn, defaults, arg) for cid, fn, defaults in CALLS for arg in defaults]
ARRAY_IDS = [f"{cid}-{arg}" for cid, _, _, arg in ARRAY_CASES]


def _with(defaults, arg, value):
    kw = dict(defaults)
    kw[arg] = value
    return kw


def _bad_values(x):
    """(kind, bad value) for an array argument whose valid value is ``x``."""
    nan, inf = x.copy(), x.copy()
    nan.flat[-1] = np.nan
    inf.flat[0] = -np.inf
    out = [
        ("nan", nan),
        ("inf", inf),
        ("nan-torch-float32", torch.tensor(nan, dtype=torch.float32)),
        ("inf-torch-bfloat16", torch.tensor(inf, dtype=torch.bfloat16)),
        ("meta", torch.empty(x.shape, device="meta")),
        ("complex", x.astype(np.complex128)),
        ("complex-torch", torch.tensor(x, dtype=torch.complex64)),
        ("bool", x > 0),
        ("object", np.array([object()] * x.size, dtype=object).reshape(x.shape)),
        ("ragged", [[1.0], [1.0, 2.0]]),
        ("sparse", torch.tensor(x).to_sparse()),
    ]
    if x.ndim == 2:
        out += [("1-D", x[0]), ("3-D", x[None]), ("no-columns", x[:, :0])]
    else:
        out += [("2-D", x[None]), ("wrong-length", x[:-1])]
    return out


@pytest.mark.parametrize("cid,fn,defaults,arg", ARRAY_CASES, ids=ARRAY_IDS)
def test_array_arguments_are_validated(cid, fn, defaults, arg):
    fn(**defaults)  # the valid call works
    for kind, bad in _bad_values(defaults[arg]):
        with pytest.raises(ValueError, match=rf"^{re.escape(arg)} ") as info:
            fn(**_with(defaults, arg, bad))
        if kind.startswith(("nan", "inf")):
            assert "non-finite" in str(info.value), (kind, str(info.value))
        if kind == "meta":
            assert "meta" in str(info.value)


# (id, call taking labels and num_classes, labels name)
LABEL_CALLS = [
    ("class_stats", lambda labels, num_classes=None: class_stats(Z, labels, num_classes), "labels"),
    ("class_means", lambda labels, num_classes=None: class_means(Z, labels, num_classes), "labels"),
    ("class_counts", lambda labels, num_classes=None: class_counts(labels, num_classes), "labels"),
    (
        "within_class_covariance",
        lambda labels, num_classes=None: within_class_covariance(Z, labels, num_classes),
        "labels",
    ),
    ("nc1", lambda labels, num_classes=None: nc1(Z, labels, num_classes), "labels"),
    ("nc1_cdnv", lambda labels, num_classes=None: nc1_cdnv(Z, labels, num_classes), "labels"),
    (
        "within_class_variation",
        lambda labels, num_classes=None: within_class_variation(Z, labels, num_classes),
        "labels",
    ),
    (
        "ncm_accuracy-train",
        lambda labels, num_classes=None: ncm_accuracy(Z, labels, Z, Y, num_classes=num_classes),
        "train_labels",
    ),
    (
        "ncm_accuracy-test",
        lambda labels, num_classes=None: ncm_accuracy(Z, Y, Z, labels, num_classes=num_classes),
        "test_labels",
    ),
    (
        "ClassStatsAccumulator.update",
        lambda labels, num_classes=3: ClassStatsAccumulator(num_classes).update(Z, labels),
        "labels",
    ),
]

BAD_LABELS = [
    ("out-of-range", np.array([0, 1, 2, 0, 1, 3]), 3, "< num_classes"),
    ("negative", np.array([0, 1, -1, 0, 1, 2]), None, ">= 0"),
    ("float", Y.astype(float), None, "integers"),
    ("bool", Y > 0, None, "integers"),
    ("complex", Y.astype(complex), None, "integers"),
    ("2-D", Y[None], None, "1-D"),
    ("short", Y[:5], None, "length"),
    ("meta", torch.empty(6, dtype=torch.int64, device="meta"), None, "meta"),
    ("strings", np.array(["a"] * 6), None, "numbers"),
]


LABEL_CASES = [
    (cid, fn, name, *bad)
    for cid, fn, name in LABEL_CALLS
    for bad in BAD_LABELS
    if not (cid == "class_counts" and bad[0] == "short")  # no features to match the length of
]


@pytest.mark.parametrize(
    "cid,fn,name,kind,bad,num_classes,message", LABEL_CASES, ids=[f"{c[0]}-{c[3]}" for c in LABEL_CASES]
)
def test_label_arguments_are_validated(cid, fn, name, kind, bad, num_classes, message):
    fn(Y)
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    with pytest.raises(ValueError, match=rf"^{name} .*{re.escape(message)}"):
        fn(bad, **kwargs)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: nc1(Z, np.zeros(6, dtype=int)), r"^labels: nc1 needs at least 2 classes"),
        (lambda: nc1_cdnv(Z, np.zeros(6, dtype=int)), r"^labels: nc1_cdnv needs at least 2 classes"),
        (lambda: nc1_from_stats(class_stats(Z, np.zeros(6, dtype=int))), r"^stats: nc1 needs at least 2"),
        (lambda: nc1_cdnv_from_stats(class_stats(Z, np.zeros(6, dtype=int))), r"^stats: nc1_cdnv needs"),
        (lambda: nc1(np.ones((6, 3)), Y), r"^z: all class means coincide"),
        (lambda: nc1_from_stats(class_stats(np.ones((6, 3)), Y)), r"^stats: all class means coincide"),
        (lambda: nc1_from_stats(MU), r"^stats must be a ClassStats"),
        (lambda: ClassStatsAccumulator(1).update(Z, np.zeros(6, dtype=int)).nc1(), r"^labels: nc1 needs"),
        (lambda: paper_conditions(MU[:1]), r"^mu needs at least 2"),
        (lambda: class_mean_spectrum(MU[:1]), r"^mu needs at least 2"),
        (lambda: nc2_equinorm(MU[:1]), r"^mu needs at least 2"),
        (lambda: nc2_equiangularity(MU[:1]), r"^mu needs at least 2"),
        (lambda: nc2_max_angle(MU[:1]), r"^mu needs at least 2"),
        (lambda: etf_error(MU[:1]), r"^mu needs at least 2"),
        (lambda: nc3_self_duality(W[:1], MU[:1]), r"^mu needs at least 2"),
        (lambda: nc3_self_duality_zhu(W[:1], MU[:1]), r"^mu needs at least 2"),
        (lambda: nc4_ncc_agreement(W[:1], Z, MU[:1]), r"^mu needs at least 2"),
        (lambda: erank_cov(Z[:1]), r"^z needs at least 2"),
        (lambda: embedding_spectrum(Z[:1]), r"^z needs at least 2"),
        (lambda: nc3_self_duality(W[:2], MU), r"^W must have shape \(C, d\) = \(3, 3\)"),
        (lambda: nc4_ncc_agreement(W, Z[:, :2], MU), r"^z has dimension d = 2"),
        (lambda: nc4_ncc_agreement(W, Z, MU, b=B[:2]), r"^b must have shape \(3,\)"),
        (lambda: nc3_self_duality(np.zeros((3, 3)), MU), r"^W is zero"),
        (lambda: nc3_self_duality(W, np.ones((3, 3))), r"^mu: every centred class mean is zero"),
        (lambda: nc2_equinorm(np.ones((3, 3))), r"^mu: every centred class mean is zero"),
        (lambda: nc2_equiangularity(np.ones((3, 3))), r"^mu: every centred class mean is zero"),
        (lambda: nc2_max_angle(np.ones((3, 3))), r"^mu: every centred class mean is zero"),
        (lambda: etf_error(np.full((3, 3), 0.1)), r"^mu: every centred class mean is zero"),
        # means one ulp apart are equal to working precision: Sigma_B = 0, NC1 undefined
        (
            lambda: nc1(np.repeat([[0.1], [np.nextafter(0.1, 1)]], 3, axis=0), [0, 0, 0, 1, 1, 1]),
            r"^z: all class means",
        ),
        (lambda: nc3_self_duality_zhu(np.zeros((3, 3)), MU), r"^W: W M~\^T is zero"),
        (lambda: etf_error(MU, global_mean=np.zeros(4)), r"^global_mean must have shape \(3,\)"),
        (lambda: ncm_classifier(MU, similarity="cosine"), r"^similarity must be one of"),
        (lambda: ncm_accuracy(Z, Y, Z, Y, similarity="cosine"), r"^similarity must be one of"),
        (lambda: ncm_accuracy(Z, Y, Z, Y, top_k=4), r"^top_k must be an integer in \[1, 3\]"),
        (lambda: ncm_accuracy(Z, Y, Z[:, :2], Y), r"^test_z has dimension d = 2"),
        (
            lambda: ncm_accuracy(Z, np.array([0, 0, 2, 0, 2, 2]), Z, Y, num_classes=3),
            r"^train_labels: class\(es\) \[1\]",
        ),
        (
            lambda: ncm_accuracy(Z, np.array([0, 0, 2, 0, 2, 2]), Z, Y),
            r"^test_labels: label\(s\) \[1\] have no training",
        ),
        (lambda: class_means(Z, Y, num_classes=0), r"^num_classes must be an integer >= 1"),
        (lambda: class_means(Z, Y, num_classes=True), r"^num_classes must be an integer"),
        (lambda: nc1(Z, Y, rtol=-1e-3), r"^rtol must be in"),
        (lambda: rankme(Z, eps=-1.0), r"^eps must be in"),
        (lambda: class_mean_spectrum(MU, floor=-1.0), r"^floor must be in"),
        (lambda: class_stats(Z[:0], Y[:0]), r"^z needs at least 1 row"),
        (lambda: ClassStatsAccumulator(0), r"^num_classes must be an integer >= 1"),
        (lambda: ClassStatsAccumulator(3, dim=0), r"^dim must be an integer >= 1"),
    ],
)
def test_value_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------------------------------------
# numpy and devices
# ------------------------------------------------------------------------------------------------


def test_numpy_arrays_are_wrapped_without_copy():
    a = np.arange(12.0).reshape(3, 4)
    for x in (a, np.asfortranarray(a), a[:, ::2], np.arange(5, dtype=np.int64)):
        t = as_tensor(x, "x")
        assert t.data_ptr() == x.ctypes.data, x.flags  # shares the numpy buffer
    ro = a.copy()
    ro.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert as_tensor(ro, "x").data_ptr() == ro.ctypes.data
        assert class_means(ro, [0, 1, 0]).shape == (2, 4)
    # arrays torch cannot view are copied, with the same values
    np.testing.assert_array_equal(as_tensor(a[::-1], "x").numpy(), a[::-1])
    swapped = a.astype(a.dtype.newbyteorder(">"))
    np.testing.assert_array_equal(as_tensor(swapped, "x").numpy(), a)
    assert paper_conditions(swapped) == paper_conditions(a)


def test_inputs_are_not_modified_and_sequences_are_accepted():
    z, y = Z.copy(), Y.copy()
    zt = torch.tensor(Z, requires_grad=True)
    nc1(z, y)
    nc1(zt, torch.from_numpy(y))
    within_class_variation(z, y)
    nc4_ncc_agreement(W, z, MU, B)
    ClassStatsAccumulator(3).update(z, y).update(zt, y)
    assert np.array_equal(z, Z) and np.array_equal(y, Y) and torch.equal(zt.detach(), torch.tensor(Z))
    assert nc1(Z.tolist(), Y.tolist()) == nc1(Z, Y)
    assert etf_error(MU, global_mean=0) == etf_error(MU, global_mean=np.zeros(3))  # scalar broadcasts


def test_return_types():
    zt = torch.tensor(Z, dtype=torch.float32)
    for v in (
        nc1(zt, Y),
        nc1_cdnv(zt, Y),
        within_class_variation(zt, Y),
        nc2_equinorm(MU),
        etf_error(MU),
        nc3_self_duality(W, MU),
        nc4_ncc_agreement(W, zt, MU),
        ncm_accuracy(zt, Y, zt, Y),
        rankme(zt),
    ):
        assert type(v) is float
    assert all(type(v) is float for v in paper_conditions(MU).values())
    for t in (
        global_mean(zt),
        within_class_covariance(zt, Y),
        between_class_covariance(zt, Y),
        *ncm_classifier(MU),
        class_stats(zt, Y).means,
    ):
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.device == zt.device
    assert class_counts(Y).dtype == torch.int64
    for s in (class_mean_spectrum(MU), embedding_spectrum(zt)):
        assert isinstance(s, np.ndarray) and s.dtype == np.float64
    assert class_means(zt, Y).dtype == torch.float32
    assert class_means(zt.half(), Y).dtype == torch.float32


def test_half_precision_is_computed_in_float64():
    zh = torch.tensor(Z, dtype=torch.bfloat16)
    z64 = zh.to(torch.float64)  # the exact values the statistics see
    assert nc1(zh, Y) == pytest.approx(nc1(z64, Y), rel=1e-13)
    assert torch.equal(class_stats(zh, Y).scatter, class_stats(z64, Y).scatter)
    assert math.isfinite(rankme(zh))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_inputs_stay_on_the_device():
    dev = torch.device("cuda")
    zc = torch.tensor(Z, device=dev, dtype=torch.bfloat16)
    yc = torch.tensor(Y, device=dev)
    st = class_stats(zc, yc)
    assert st.means.device.type == "cuda" and st.means.dtype == torch.float64
    ref = class_stats(zc.cpu(), Y)
    torch.testing.assert_close(st.scatter.cpu(), ref.scatter, rtol=1e-12, atol=1e-12)
    assert nc1(zc, yc) == pytest.approx(nc1(zc.cpu(), Y), rel=1e-10)
    assert nc4_ncc_agreement(W, zc, MU) == nc4_ncc_agreement(W, zc.cpu(), MU)
    assert ncm_accuracy(zc, yc, zc, Y) == ncm_accuracy(zc.cpu(), Y, zc.cpu(), Y)
