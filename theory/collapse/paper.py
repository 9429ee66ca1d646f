"""The HCL authors' collapse metrics ("paper" variant), exactly as in their notebooks.

Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139), the authors' ``Visualization.ipynb``;
docs/metrics.md#paper-variant. Uncentred class means, cosines, mean Euclidean distance to
the class mean, the spectrum of the covariance of the C class means, nearest-class-mean (NCM)
accuracy with a raw inner product. Notation: :mod:`theory.collapse`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from theory.collapse._geometry import (
    class_means_input,
    offdiag,
    pow2_scale,
    rescaled,
    row_norms,
    safe_mean,
    unit_rows,
)
from theory.collapse._inputs import F64, ArrayLike, batch, features, labels_of
from theory.collapse.classifier import _CHUNK, SIMILARITIES, _centre_scores
from theory.collapse.stats import SPECTRUM_FLOOR, _check_floor, _distance_sums, _require_complete, _stats_of
from theory.validation import integer, one_of

__all__ = ["paper_conditions", "within_class_variation", "class_mean_spectrum", "ncm_accuracy"]


def paper_conditions(mu: ArrayLike) -> dict[str, float]:
    """The HCL authors' three NC conditions on uncentred class means ("paper" P1-P3).

    * ``unit_norm`` = (1/C) sum_c | ||mu_c|| - 1 |                            (P1)
    * ``zero_sum``  = || (1/C) sum_c mu_c ||  (no global-mean subtraction)    (P2)
    * ``etf_mean``  = mean over ordered pairs c != c' of | cos(mu_c, mu_c') + 1/(C-1) |   (P3,
      the plotted ``avg_*``)
    * ``etf_max``   = max over the same pairs (P3, the notebook's ``std_*``, not plotted)

    Uncentred, exactly as the authors' ``Visualization.ipynb`` (Jiang et al., arXiv 2311.05139;
    docs/metrics.md#paper-variant); the standard, centred NC2
    counterparts are :func:`nc2_equiangularity` / :func:`nc2_max_angle`. A class mean that is
    exactly zero has cosine 0 with every other mean (convention; the notebook would produce NaN).
    Scale-safe (docs/metrics.md#scale): the cosines of ``1e160 mu`` are those of ``mu``, and the
    norms are computed without squaring overflowing entries.

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.

    Returns:
        dict of Python floats, all 0 at a simplex ETF.

    Shape:
        ``mu`` ``(C, d)`` -> dict.

    Raises:
        ValueError: ``mu`` not 2-D, fewer than 2 rows, or non-finite (a missing class's NaN row);
            ``unit_norm`` or ``zero_sum`` beyond the float64 range (naming ``mu``).
    """
    m = class_means_input(mu)
    C = m.shape[0]
    unit_norm = safe_mean((row_norms(m, "mu") - 1.0).abs(), "mu", "unit_norm")
    s = pow2_scale(m)
    zero_sum = rescaled(torch.linalg.vector_norm((m / s).mean(dim=0)), s, 1, "mu", "zero_sum")
    u = unit_rows(m)
    dev = offdiag(u @ u.T + 1.0 / (C - 1)).abs()
    return {
        "unit_norm": unit_norm,
        "zero_sum": float(zero_sum),
        "etf_mean": float(dev.mean()),
        "etf_max": float(dev.max()),
    }


def within_class_variation(z: ArrayLike, labels: ArrayLike, num_classes: int | None = None) -> float:
    """Mean Euclidean distance to the class mean, averaged over classes ("paper" P5).

    ``(1/C) sum_c (1/n_c) sum_{i in c} || z_i - mu_c ||_2``  (the authors' ``inner_dist``,
    docs/metrics.md#within_class_variation, computed for any C rather than their hard-coded
    100). Ideal 0. A mean of distances (not squared distances) cannot be obtained from first and
    second moments; :class:`ClassStatsAccumulator` therefore offers it as a two-pass computation.

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)``.
        num_classes: ``C`` or ``None`` (as :func:`class_stats`); a missing class raises.

    Returns:
        The mean distance, a float ``>= 0``.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> float.

    Raises:
        ValueError: as :func:`class_stats`; a missing class; a value beyond the float64 range
            (naming ``z``).
    """
    zt, y, C, classes = batch(z, labels, num_classes)
    s = pow2_scale(zt)  # distances of z / s (no overflowing square), times s
    zt = zt / s
    st = _stats_of(zt, y, C, classes, covariance=False)
    _require_complete(st, "labels", "within_class_variation", min_classes=1)
    mean = (_distance_sums(zt, y, st.means) / st.counts.to(F64)).mean()
    return float(rescaled(mean, s, 1, "z", "within_class_variation"))


def class_mean_spectrum(
    mu: ArrayLike, floor: float = SPECTRUM_FLOOR, relative: bool = True
) -> npt.NDArray[np.float64]:
    """Sorted spectrum of the covariance of the C class means ("paper" P4, the DC spectrum).

    ``Sigma_M = np.cov(mu.T)`` = (1/(C-1)) sum_c (mu_c - mean_c' mu_c')(...)^T, a ``(d, d)``
    symmetric PSD matrix (class means as observations); ``sigma_1 >= ... >= sigma_d`` its
    singular values (= eigenvalues). Returns ``log(max(sigma_i / sigma_1, floor))``, the curve
    the authors plot against the index ``i = 0..d-1`` (Jiang et al., arXiv 2311.05139;
    docs/metrics.md#class-mean-spectrum-and-spectrum_min; ``d = C - 1`` in the paper). Flat at
    0 for a simplex ETF (every sigma_i = C/(C-1)^2); a drop after index ``r`` means the class
    means span only ``r`` dimensions (dimensional collapse).

    The sigma_i are computed as ``s_i(M~)^2 / (C - 1)`` from the singular values of the centred
    mean matrix (identical in exact arithmetic to the notebook's ``svd(np.cov(mu.T))``, but a
    zero direction comes out near 1e-32 relative instead of 1e-16); at most ``min(C-1, d)``
    of them are non-zero and the rest of the ``d`` values are exact zeros.

    Zeros: a ratio below ``floor`` (exact zeros included) is reported as ``log(floor)``
    (default :data:`SPECTRUM_FLOOR` = 1e-30 -> -69.08, below the authors' plotting range
    [-35, 2]); ``floor=0`` gives ``-inf`` for exact zeros. If all class means coincide
    (``Sigma_M = 0``) every entry is ``log(floor)``.

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.
        floor: relative floor in ``[0, 1)``.
        relative: if False return the raw singular values ``sigma_i`` (sorted, no log, no floor)
            instead of the log-ratios.

    Returns:
        1-D float64 numpy array of length ``d``.

    Shape:
        ``mu`` ``(C, d)`` -> ``(d,)``.

    Scale-safe (docs/metrics.md#scale): computed on ``mu / s`` (``s`` a power of two), so the
    log-ratios of ``1e200 mu`` are those of ``mu``; the raw values (``relative=False``) are
    multiplied back by ``s^2`` and raise when they leave the float64 range.

    Raises:
        ValueError: ``mu`` not 2-D, fewer than 2 rows, non-finite, or a bad ``floor``; with
            ``relative=False``, a ``sigma_i`` beyond the float64 range (naming ``mu``).
    """
    floor = _check_floor(floor)
    m = class_means_input(mu)
    C, d = m.shape
    scale = pow2_scale(m)
    m = m / scale
    centred = m - m.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(centred).cpu().numpy()
    sigma = np.zeros(d, dtype=np.float64)
    sigma[: s.shape[0]] = s**2 / (C - 1)
    sigma = np.sort(sigma)[::-1].copy()
    if not relative:
        raw: npt.NDArray[np.float64] = rescaled(
            torch.from_numpy(sigma), scale, 2, "mu", "the class-mean spectrum (relative=False)"
        ).numpy()
        return raw
    top = sigma[0]
    ratio = np.zeros(d, dtype=np.float64) if top <= 0 else sigma / top
    with np.errstate(divide="ignore"):
        out: npt.NDArray[np.float64] = np.log(np.maximum(ratio, floor))
    return out


def _test_rows(test_labels: object, n: int, classes: torch.Tensor, num_classes: int | None) -> torch.Tensor:
    """Row indices of the test labels in the training classes (compact relabelling aware)."""
    C = classes.numel()
    if num_classes is not None:
        return labels_of(test_labels, n, C, classes.device, "test_labels")[0]
    inverse, _, test_classes = labels_of(test_labels, n, None, classes.device, "test_labels")
    pos = torch.searchsorted(classes, test_classes).clamp_max(C - 1)
    unknown = test_classes[classes[pos] != test_classes]
    if unknown.numel() > 0:
        raise ValueError(f"test_labels: label(s) {unknown[:10].tolist()} have no training sample")
    return pos[inverse]


def ncm_accuracy(
    train_z: ArrayLike,
    train_labels: ArrayLike,
    test_z: ArrayLike,
    test_labels: ArrayLike,
    similarity: str = "dot",
    top_k: int = 1,
    num_classes: int | None = None,
) -> float:
    """Nearest-class-mean accuracy ("paper" P6; the NCC part of standard NC4).

    Class means ``mu_c`` of the training features; a test point scores
    ``s_c = z_test . mu_c`` (``similarity="dot"``: the authors' classifier, a raw inner product
    with **un-normalised** means) or ``s_c = -||z_test - mu_c||`` (``"euclidean"``: the standard
    nearest class centre); docs/metrics.md#ncm-accuracy. A test point is correct at top-k when
    fewer than ``k`` classes rank above its true class, ties broken toward the lower class index
    (so top-1 equals ``argmax`` with first-occurrence tie-breaking).

    Args:
        train_z: training features ``(N, d)``.
        train_labels: training labels ``(N,)``.
        test_z: test features ``(M, d)`` (moved to ``train_z``'s device).
        test_labels: test labels ``(M,)``.
        similarity: ``"dot"`` or ``"euclidean"``.
        top_k: ``k`` in ``[1, C]`` (the authors record top-1 and top-5).
        num_classes: ``C`` (every class needs a training sample; test labels in ``[0, C)``), or
            ``None``: the classes are the distinct training labels, and a test label without a
            training sample raises.

    Returns:
        The accuracy, a fraction in ``[0, 1]`` (not percent).

    Shape:
        ``train_z`` ``(N, d)``, ``train_labels`` ``(N,)``, ``test_z`` ``(M, d)``,
        ``test_labels`` ``(M,)`` -> float.

    Raises:
        ValueError: bad ``similarity``/``top_k``, dimension mismatch between train and test,
            labels out of range, or a training class without a sample.
    """
    one_of("similarity", similarity, SIMILARITIES)
    tr, ytr, C, classes = batch(train_z, train_labels, num_classes, "train_z", "train_labels")
    te = features(test_z, "test_z", device=tr.device)
    if te.shape[1] != tr.shape[1]:
        raise ValueError(f"test_z has dimension d = {te.shape[1]} but train_z has d = {tr.shape[1]}")
    scale = pow2_scale(tr, te)  # the rules are invariant under a common scale; no overflowing score
    tr, te = tr / scale, te / scale
    st = _stats_of(tr, ytr, C, classes, covariance=False)
    _require_complete(st, "train_labels", "ncm_accuracy", min_classes=1)
    yte = _test_rows(test_labels, te.shape[0], classes, None if num_classes is None else C)
    top_k = integer("top_k", top_k, lo=1, hi=C)
    mu = st.means
    correct = torch.zeros((), dtype=torch.int64, device=tr.device)
    cls = torch.arange(C, device=tr.device)
    for start in range(0, te.shape[0], _CHUNK):
        yy = yte[start : start + _CHUNK]
        s = _centre_scores(te[start : start + _CHUNK], mu, similarity)
        s_true = s.gather(1, yy.unsqueeze(1))
        above = (s > s_true) | ((s == s_true) & (cls.unsqueeze(0) < yy.unsqueeze(1)))
        correct += (above.sum(dim=1) < top_k).sum()
    return int(correct) / te.shape[0]
