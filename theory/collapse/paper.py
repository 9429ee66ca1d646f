"""The HCL authors' collapse metrics ("paper" variant), exactly as in their notebooks.

Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139), the authors' ``Visualization.ipynb``;
spec/hcl.md §6, spec/metrics.md §2. Uncentred class means, cosines, mean Euclidean distance to
the class mean, the spectrum of the covariance of the C class means, nearest-class-mean (NCM)
accuracy with a raw inner product. Notation: :mod:`theory.collapse`.
"""

from __future__ import annotations

import numpy as np
import torch

from theory.collapse.stats import (
    _F64,
    SPECTRUM_FLOOR,
    _check_floor,
    _class_means_input,
    _features,
    _labels,
    _means64,
    _offdiag,
    _unit_rows,
)
from theory.validation import integer

__all__ = ["paper_conditions", "within_class_variation", "class_mean_spectrum", "ncm_accuracy"]


def paper_conditions(mu) -> dict[str, float]:
    """The HCL authors' three NC conditions on uncentred class means ("paper" P1-P3).

    Shapes: ``mu`` ``(C, d)``, ``C >= 2`` -> dict of Python floats (all 0 at a simplex ETF):

    * ``unit_norm`` = (1/C) sum_c | ||mu_c|| - 1 |                            (P1)
    * ``zero_sum``  = || (1/C) sum_c mu_c ||  (no global-mean subtraction)    (P2)
    * ``etf_mean``  = mean over ordered pairs c != c' of | cos(mu_c, mu_c') + 1/(C-1) |   (P3,
      the plotted ``avg_*``)
    * ``etf_max``   = max over the same pairs (P3, the notebook's ``std_*``, not plotted)

    Uncentred, exactly as the authors' ``Visualization.ipynb`` (spec/hcl.md §6 items 1-3); the
    standard, centred NC2 counterparts are :func:`nc2_equiangularity` / :func:`nc2_max_angle`.
    A class mean that is exactly zero has cosine 0 with every other mean (convention; the
    notebook would produce NaN).

    Raises:
        ValueError: ``mu`` not 2-D, fewer than 2 rows, or non-finite.
    """
    m = _class_means_input(mu)
    C = m.shape[0]
    norms = torch.linalg.vector_norm(m, dim=1)
    unit_norm = (norms - 1.0).abs().mean()
    zero_sum = torch.linalg.vector_norm(m.mean(dim=0))
    u = _unit_rows(m)
    dev = _offdiag(u @ u.T + 1.0 / (C - 1)).abs()
    return {
        "unit_norm": float(unit_norm),
        "zero_sum": float(zero_sum),
        "etf_mean": float(dev.mean()),
        "etf_max": float(dev.max()),
    }


def within_class_variation(z, labels, num_classes: int | None = None) -> float:
    """Mean Euclidean distance to the class mean, averaged over classes ("paper" P5).

    ``(1/C) sum_c (1/n_c) sum_{i in c} || z_i - mu_c ||_2``  (the authors' ``inner_dist``,
    spec/hcl.md §6 item 5, computed for any C rather than their hard-coded 100). Ideal 0.

    Shapes: ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> float.

    Note: a mean of distances (not squared distances) cannot be obtained from first and second
    moments; :class:`ClassStatsAccumulator` therefore offers it as a two-pass computation.

    Raises:
        ValueError: as :func:`class_means`.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    counts, mu = _means64(zt, y, C)
    dist = torch.linalg.vector_norm(zt - mu[y], dim=1)
    per_class = torch.zeros(C, dtype=_F64, device=zt.device).index_add_(0, y, dist)
    return float((per_class / counts.to(_F64)).mean())


def class_mean_spectrum(mu, floor: float = SPECTRUM_FLOOR, relative: bool = True) -> np.ndarray:
    """Sorted spectrum of the covariance of the C class means ("paper" P4, the DC spectrum).

    ``Sigma_M = np.cov(mu.T)`` = (1/(C-1)) sum_c (mu_c - mean_c' mu_c')(...)^T, a ``(d, d)``
    symmetric PSD matrix (class means as observations); ``sigma_1 >= ... >= sigma_d`` its
    singular values (= eigenvalues). Returns ``log(max(sigma_i / sigma_1, floor))``, the curve
    the authors plot against the index ``i = 0..d-1`` (spec/hcl.md §6 item 4; with ``d = C - 1``
    in the paper). Flat at 0 for a simplex ETF (every sigma_i = C/(C-1)^2); a drop after index
    ``r`` means the class means span only ``r`` dimensions (dimensional collapse).

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

    Raises:
        ValueError: ``mu`` not 2-D, fewer than 2 rows, non-finite, or a bad ``floor``.
    """
    floor = _check_floor(floor)
    m = _class_means_input(mu)
    C, d = m.shape
    centred = m - m.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(centred).cpu().numpy()
    sigma = np.zeros(d, dtype=np.float64)
    sigma[: s.shape[0]] = s**2 / (C - 1)
    sigma = np.sort(sigma)[::-1].copy()
    if not relative:
        return sigma
    top = sigma[0]
    if top <= 0:
        ratio = np.zeros(d, dtype=np.float64)
    else:
        ratio = sigma / top
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(ratio, floor))


def ncm_accuracy(
    train_z,
    train_labels,
    test_z,
    test_labels,
    similarity: str = "dot",
    top_k: int = 1,
    num_classes: int | None = None,
) -> float:
    """Nearest-class-mean accuracy ("paper" P6; the NCC part of standard NC4).

    Class means ``mu_c`` of the training features; a test point scores
    ``s_c = z_test . mu_c`` (``similarity="dot"``: the authors' classifier, a raw inner product
    with **un-normalised** means, spec/hcl.md §5.4) or ``s_c = -||z_test - mu_c||``
    (``"euclidean"``: the standard nearest class centre, spec/metrics.md §3.4). A test point is
    correct at top-k when fewer than ``k`` classes rank above its true class, ties broken toward
    the lower class index (so top-1 equals ``argmax`` with first-occurrence tie-breaking).

    Shapes: ``train_z`` ``(N, d)``, ``train_labels`` ``(N,)``, ``test_z`` ``(M, d)``,
    ``test_labels`` ``(M,)`` -> float in [0, 1] (fraction, not percent).

    Args:
        similarity: ``"dot"`` or ``"euclidean"``.
        top_k: ``k`` in ``[1, C]`` (the authors record top-1 and top-5).
        num_classes: ``C``; default ``train_labels.max() + 1``. Every class needs a training
            sample; test labels must lie in ``[0, C)``.

    Raises:
        ValueError: bad ``similarity``/``top_k``, dimension mismatch between train and test,
            labels out of range, or an empty training class.
    """
    if similarity not in ("dot", "euclidean"):
        raise ValueError(f"similarity must be 'dot' or 'euclidean', got {similarity!r}")
    tr = _features(train_z, "train_z")
    te = _features(test_z, "test_z")
    if te.shape[1] != tr.shape[1]:
        raise ValueError(
            f"test_z has dimension d = {te.shape[1]} but train_z has d = {tr.shape[1]}"
        )
    te = te.to(tr.device)
    ytr, C = _labels(train_labels, tr.shape[0], num_classes, tr.device, "train_labels")
    yte, _ = _labels(test_labels, te.shape[0], C, tr.device, "test_labels")
    top_k = integer("top_k", top_k, lo=1, hi=C)
    _, mu = _means64(tr, ytr, C, "train_labels")
    correct = 0
    chunk = 4096
    cls = torch.arange(C, device=tr.device)
    for start in range(0, te.shape[0], chunk):
        x = te[start : start + chunk]
        yy = yte[start : start + chunk]
        if similarity == "dot":
            s = x @ mu.T
        else:
            s = -torch.cdist(x, mu, compute_mode="donot_use_mm_for_euclid_dist")
        s_true = s.gather(1, yy.unsqueeze(1))
        above = (s > s_true) | ((s == s_true) & (cls.unsqueeze(0) < yy.unsqueeze(1)))
        correct += int((above.sum(dim=1) < top_k).sum())
    return correct / te.shape[0]
