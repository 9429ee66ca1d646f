"""Collapse metrics: Neural Collapse (NC) versus Dimensional Collapse (DC).

Two families of metrics live here (spec/metrics.md §1). Every function says which one it is:

* **"paper"** -- exactly as the HCL authors compute them in their notebooks (spec/hcl.md §6,
  spec/metrics.md §2): uncentred class means, cosines, mean Euclidean distance to the class mean,
  the spectrum of the covariance of the C class means, nearest-class-mean (NCM) accuracy with a raw
  inner product.  :func:`class_means`, :func:`paper_conditions`, :func:`within_class_variation`,
  :func:`class_mean_spectrum`, :func:`ncm_accuracy`.
* **"standard"** -- the literature definitions (spec/metrics.md §3), centred at the global mean:
  :func:`nc1` (Papyan et al. 2020 / Han et al. 2022), :func:`nc1_cdnv` (Galanti et al. 2022),
  :func:`nc2_equinorm`, :func:`nc2_equiangularity`, :func:`nc2_max_angle` (Papyan et al. 2020),
  :func:`etf_error` (Zhu et al. 2021), :func:`effective_rank` (Roy & Vetterli 2007),
  :func:`rankme` (Garrido et al. 2023), :func:`erank_cov` (the covariance-eigenvalue variant, NOT
  RankMe), :func:`embedding_spectrum` (Jing et al. 2022, DirectCLR).

The metrics are computed on whatever tensor the caller passes. The HCL authors used the
**unit-ball-normalised projector outputs** of the training set (eval mode, no augmentation),
with ``d = C - 1``; say which tensor you pass when you report a number (spec/metrics.md pitfall 6).

Notation (spec/metrics.md §0; DESIGN.md)::

    N            number of samples;  C number of classes;  d feature dimension
    z            (N, d)  features h_i as rows (the tensor the caller chose)
    labels       (N,)    integer class labels in [0, C);  n_c = #{i : labels_i = c}
    mu           (C, d)  uncentred class means  mu_c = (1/n_c) sum_{i in c} z_i   (matrix M)
    mu_G         (d,)    global mean = (1/N) sum_i z_i  (sample mean, Papyan et al.); equals the
                         mean of the class means only for balanced classes (pitfall 3)
    mu~_c        mu_c - mu_G, centred class means (matrix M~)
    Sigma_W      (d, d)  (1/N) sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T   within-class covariance
    Sigma_B      (d, d)  (1/C) sum_c mu~_c mu~_c^T                        between-class, rank<=C-1
    cos(u, v)    u.v / (||u|| ||v||)
    I, J         identity, all-ones matrix (C x C)
    sigma_i      singular values, sorted descending

Simplex ETF (the NC target): unit vectors with sum_c v_c = 0 and v_c.v_c' = -1/(C-1) (c != c');
Gram C/(C-1) (I - J/C); needs d >= C - 1 (:func:`theory.geometry.simplex_etf`).

Conventions of this module:

* inputs are torch tensors or numpy arrays (any float dtype; half precision is fine); every
  statistic is computed in float64 on the input's device; scalar metrics come back as Python
  ``float``; spectra come back as 1-D float64 numpy arrays;
* ``labels`` must be integers in ``[0, C)``; ``C`` is ``num_classes`` when given, otherwise
  ``labels.max() + 1``; a class with no sample raises ``ValueError`` (a mean would be undefined);
* invalid inputs (non-2-D features, non-finite values, label/feature length mismatch, labels out
  of range, feature-dimension mismatch, empty class) raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from theory.validation import integer, real

__all__ = [
    "SPECTRUM_FLOOR",
    "RANKME_EPS",
    "class_means",
    "paper_conditions",
    "within_class_variation",
    "class_mean_spectrum",
    "ncm_accuracy",
    "within_class_covariance",
    "between_class_covariance",
    "nc1",
    "nc1_cdnv",
    "nc2_equinorm",
    "nc2_equiangularity",
    "nc2_max_angle",
    "etf_error",
    "effective_rank",
    "rankme",
    "erank_cov",
    "embedding_spectrum",
    "ClassStatsAccumulator",
]

#: Default floor of the spectra: a singular value below ``SPECTRUM_FLOOR * sigma_max`` (in
#: particular an exact zero) is reported as ``log(SPECTRUM_FLOOR)`` = -69.08 instead of -inf.
#: The authors plot the spectrum on [-35, 2]; float64 round-off of a rank-deficient covariance
#: sits near 1e-32 relative (squared singular values of the centred means), so "at the floor"
#: means "zero to working precision".
SPECTRUM_FLOOR = 1e-30

#: Garrido et al. (2023) RankMe epsilon (float32 value of the paper).
RANKME_EPS = 1e-7

_F64 = torch.float64
_EPS64 = float(np.finfo(np.float64).eps)


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def _to_tensor(x, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    try:
        return torch.as_tensor(np.asarray(x))
    except Exception as exc:
        raise ValueError(f"{name} must be a torch tensor or numpy array, got {type(x).__name__}") from exc


def _features(x, name: str = "z", min_rows: int = 1) -> torch.Tensor:
    """``x`` as a 2-D float64 torch tensor (same device), validated."""
    t = _to_tensor(x, name)
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D (rows, d), got shape {tuple(t.shape)}")
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be a real floating array, got dtype {t.dtype}")
    t = t.to(_F64)
    if t.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows, got shape {tuple(t.shape)}")
    if t.shape[1] < 1:
        raise ValueError(f"{name} must have at least one column, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return t


def _check_num_classes(num_classes) -> int | None:
    return None if num_classes is None else integer("num_classes", num_classes, lo=1)


def _labels(labels, n: int, num_classes, device, name: str = "labels") -> tuple[torch.Tensor, int]:
    """Validated int64 labels of length ``n`` and the number of classes ``C``."""
    num_classes = _check_num_classes(num_classes)
    y = _to_tensor(labels, name)
    if y.dim() != 1:
        raise ValueError(f"{name} must be 1-D (N,), got shape {tuple(y.shape)}")
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise ValueError(f"{name} must hold integers, got dtype {y.dtype}")
    if y.shape[0] != n:
        raise ValueError(f"{name} has length {y.shape[0]} but the features have {n} rows")
    y = y.to(device=device, dtype=torch.int64)
    if n == 0:
        raise ValueError(f"{name} is empty")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0:
        raise ValueError(f"{name} must be >= 0, got a label {lo}")
    C = hi + 1 if num_classes is None else num_classes
    if hi >= C:
        raise ValueError(f"{name} must be < num_classes = {C}, got a label {hi}")
    return y, C


def _means64(z: torch.Tensor, y: torch.Tensor, C: int, name: str = "labels"):
    """Per-class counts ``(C,)`` and float64 means ``(C, d)``; ValueError on an empty class."""
    counts = torch.bincount(y, minlength=C)
    empty = torch.nonzero(counts == 0).flatten()
    if empty.numel() > 0:
        shown = empty[:10].tolist()
        raise ValueError(
            f"{name}: class(es) {shown}{' ...' if empty.numel() > 10 else ''} have no sample "
            f"(C = {C}); their class mean is undefined"
        )
    sums = torch.zeros(C, z.shape[1], dtype=_F64, device=z.device).index_add_(0, y, z)
    return counts, sums / counts.to(_F64).unsqueeze(1)


def _class_means_input(mu, name: str = "mu", min_classes: int = 2) -> torch.Tensor:
    t = _features(mu, name)
    if t.shape[0] < min_classes:
        raise ValueError(f"{name} needs at least {min_classes} classes (rows), got shape {tuple(t.shape)}")
    return t


def _global_mean(mu: torch.Tensor, global_mean) -> torch.Tensor:
    if global_mean is None:
        return mu.mean(dim=0)
    g = _to_tensor(global_mean, "global_mean")
    if g.dim() != 1 or g.shape[0] != mu.shape[1]:
        raise ValueError(
            f"global_mean must have shape ({mu.shape[1]},) to match mu, got {tuple(g.shape)}"
        )
    g = g.to(device=mu.device, dtype=_F64)
    if not bool(torch.isfinite(g).all()):
        raise ValueError("global_mean contains non-finite values")
    return g


_check_floor = functools.partial(real, "floor", lo=0, hi=1, hi_open=True)


def _entropy_exp(p: torch.Tensor) -> float:
    """``exp(-sum_k p_k log p_k)`` with ``0 log 0 = 0``."""
    p = p[p > 0]
    return float(torch.exp(-(p * torch.log(p)).sum()))


def _unit_rows(m: torch.Tensor) -> torch.Tensor:
    """Rows divided by their norm; an exactly-zero row stays zero (its cosines are 0)."""
    norms = torch.linalg.vector_norm(m, dim=1, keepdim=True)
    return m / torch.where(norms > 0, norms, torch.ones_like(norms))


def _offdiag(a: torch.Tensor) -> torch.Tensor:
    C = a.shape[0]
    return a[~torch.eye(C, dtype=torch.bool, device=a.device)]


# --------------------------------------------------------------------------------------------
# "Paper" variant (spec/hcl.md §6, spec/metrics.md §2)
# --------------------------------------------------------------------------------------------


def class_means(z, labels, num_classes: int | None = None):
    """Uncentred class means ``mu_c = (1/n_c) sum_{i: labels_i = c} z_i`` ("paper" and standard).

    Shapes: ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> ``(C, d)``.

    Sums are accumulated in float64; the result has the container type of ``z`` (torch tensor on
    the same device, or numpy array) and its float dtype (half precision is returned as float32).
    The HCL authors average the unit-ball-normalised projector outputs of the training set
    (spec/hcl.md §5.4, the ``feature_bank`` entries).

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)`` in ``[0, C)``.
        num_classes: ``C``; default ``labels.max() + 1``.

    Raises:
        ValueError: non-2-D ``z``, length mismatch, labels out of range, or an empty class.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    _, mu = _means64(zt, y, C)
    if isinstance(z, torch.Tensor):
        out_dtype = z.dtype if z.dtype in (torch.float32, torch.float64) else torch.float32
        return mu.to(out_dtype)
    z_np = np.asarray(z)
    out_dtype = z_np.dtype if z_np.dtype in (np.float32, np.float64) else np.float32
    return mu.cpu().numpy().astype(out_dtype, copy=False)


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


# --------------------------------------------------------------------------------------------
# "Standard" variant: NC1-NC2 (spec/metrics.md §3.1-3.2)
# --------------------------------------------------------------------------------------------


def within_class_covariance(z, labels, num_classes: int | None = None) -> torch.Tensor:
    """``Sigma_W = (1/N) sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T``, ``(d, d)`` float64 tensor.

    Papyan, Han & Donoho (PNAS 2020), spec/metrics.md §0. Symmetrised.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    _, mu = _means64(zt, y, C)
    r = zt - mu[y]
    sw = r.T @ r / zt.shape[0]
    return (sw + sw.T) / 2


def between_class_covariance(z, labels, num_classes: int | None = None) -> torch.Tensor:
    """``Sigma_B = (1/C) sum_c (mu_c - mu_G)(mu_c - mu_G)^T``, ``(d, d)`` float64 tensor.

    ``mu_G`` is the sample mean of ``z`` (Papyan et al. 2020), spec/metrics.md §0. Symmetrised.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    _, mu = _means64(zt, y, C)
    c = mu - zt.mean(dim=0)
    sb = c.T @ c / C
    return (sb + sb.T) / 2


def _nc1_from_cov(sw: torch.Tensor, sb: torch.Tensor, C: int, rtol: float | None) -> float:
    """Tr(Sigma_W Sigma_B^+)/C with Sigma_B^+ on its top C-1 eigenpairs above ``rtol``."""
    d = sb.shape[0]
    if rtol is None:
        rtol = max(d, C) * _EPS64
    else:
        rtol = real("rtol", rtol, lo=0, hi=1, hi_open=True)
    sw = (sw + sw.T) / 2
    sb = (sb + sb.T) / 2
    evals, evecs = torch.linalg.eigh(sb)  # ascending
    k = min(C - 1, d)
    evals, evecs = evals[d - k :], evecs[:, d - k :]
    lam_max = float(evals[-1]) if k > 0 else 0.0
    if not lam_max > 0:
        # No between-class spread: the classes are indistinguishable, NC1 is unbounded.
        return math.inf
    keep = evals > rtol * lam_max
    v, lam = evecs[:, keep], evals[keep]
    quad = torch.einsum("dk,de,ek->k", v, sw, v).clamp_min(0.0)  # v_k^T Sigma_W v_k >= 0
    return float((quad / lam).sum() / C)


def nc1(z, labels, num_classes: int | None = None, rtol: float | None = None) -> float:
    """NC1 = Tr(Sigma_W Sigma_B^+) / C, within-class variability collapse ("standard").

    Papyan, Han & Donoho (PNAS 2020), with the Han et al. (ICLR 2022) pseudo-inverse on the top
    ``C - 1`` eigenpairs of Sigma_B (spec/metrics.md §3.1 and pitfall 1). Computed in float64:
    Sigma_W and Sigma_B are symmetrised, Sigma_B is eigendecomposed (``eigh``), its top
    ``min(C-1, d)`` eigenpairs with ``lambda_k > rtol * lambda_max`` are kept (default
    ``rtol = max(d, C) * eps_float64``), and NC1 = (1/C) sum_k (v_k^T Sigma_W v_k) / lambda_k with
    each quadratic form clamped at 0, so the value is never negative. ``mu_G`` is the sample mean.

    If all class means coincide (Sigma_B = 0) NC1 is unbounded and ``inf`` is returned.

    Shapes: ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> float >= 0 (0 at full collapse).

    Raises:
        ValueError: as :func:`class_means`; fewer than 2 classes.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    if C < 2:
        raise ValueError(f"nc1 needs at least 2 classes, got C = {C}")
    _, mu = _means64(zt, y, C)
    r = zt - mu[y]
    sw = r.T @ r / zt.shape[0]
    c = mu - zt.mean(dim=0)
    sb = c.T @ c / C
    return _nc1_from_cov(sw, sb, C, rtol)


def _cdnv(mu: torch.Tensor, var: torch.Tensor) -> float:
    C = mu.shape[0]
    iu = torch.triu_indices(C, C, offset=1, device=mu.device)
    dist2 = torch.cdist(mu, mu, compute_mode="donot_use_mm_for_euclid_dist") ** 2
    num = (var[iu[0]] + var[iu[1]]) / 2
    den = dist2[iu[0], iu[1]]
    if bool((den == 0).any()):
        return math.inf
    return float((num / den).mean())


def nc1_cdnv(z, labels, num_classes: int | None = None) -> float:
    """Class-distance normalised variance (CDNV), Galanti, György & Hutter (ICLR 2022).

    ``mean over pairs c < c' of (sigma_c^2 + sigma_c'^2) / (2 ||mu_c - mu_c'||^2)`` with
    ``sigma_c^2 = (1/n_c) sum_{i in c} ||z_i - mu_c||^2`` (spec/metrics.md §3.1). ``inf`` if two
    class means coincide. Shapes: ``(N, d)``, ``(N,)`` -> float >= 0.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    if C < 2:
        raise ValueError(f"nc1_cdnv needs at least 2 classes, got C = {C}")
    counts, mu = _means64(zt, y, C)
    sq = ((zt - mu[y]) ** 2).sum(dim=1)
    var = torch.zeros(C, dtype=_F64, device=zt.device).index_add_(0, y, sq) / counts.to(_F64)
    return _cdnv(mu, var)


def _centred(mu, global_mean) -> torch.Tensor:
    m = _class_means_input(mu)
    return m - _global_mean(m, global_mean)


def nc2_equinorm(mu, global_mean=None) -> float:
    """NC2 equinorm: coefficient of variation of the centred class-mean norms ("standard").

    ``Std_c(||mu_c - mu_G||) / Avg_c(||mu_c - mu_G||)`` with the sample std (ddof = 1, as
    ``torch.std`` in Papyan et al.'s code), Papyan, Han & Donoho (PNAS 2020), spec/metrics.md
    §3.2. Ideal 0.

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: ``mu_G`` ``(d,)``; default the mean of the class means (equal to the sample
            mean only for balanced classes, pitfall 3). Pass ``z.mean(0)`` for the Papyan one.

    Raises:
        ValueError: bad shapes, or all centred norms zero (the ratio is undefined).
    """
    c = _centred(mu, global_mean)
    norms = torch.linalg.vector_norm(c, dim=1)
    avg = norms.mean()
    if not float(avg) > 0:
        raise ValueError("mu: every centred class mean is zero; the equinorm ratio is undefined")
    return float(norms.std(correction=1) / avg)


def _centred_cosines(mu, global_mean) -> torch.Tensor:
    c = _centred(mu, global_mean)
    u = _unit_rows(c)
    return u @ u.T


def nc2_equiangularity(mu, global_mean=None) -> float:
    """NC2 equiangularity: ``Std_{c != c'} cos(mu~_c, mu~_c')`` of centred means ("standard").

    Sample std (ddof = 1) over the ``C(C-1)`` ordered off-diagonal cosines of the centred class
    means; Papyan, Han & Donoho (PNAS 2020), spec/metrics.md §3.2. Ideal 0. ``global_mean`` as
    in :func:`nc2_equinorm`. A centred mean that is exactly zero has cosine 0 (convention).
    """
    cos = _centred_cosines(mu, global_mean)
    return float(_offdiag(cos).std(correction=1))


def nc2_max_angle(mu, global_mean=None) -> float:
    """NC2 maximal angle: ``Avg_{c != c'} |cos(mu~_c, mu~_c') + 1/(C-1)|`` ("standard").

    The Papyan/Han code's "coherence" (spec/metrics.md §3.2); the centred counterpart of
    :func:`paper_conditions`' ``etf_mean``. Ideal 0. ``global_mean`` as in :func:`nc2_equinorm`.
    """
    cos = _centred_cosines(mu, global_mean)
    C = cos.shape[0]
    return float(_offdiag(cos + 1.0 / (C - 1)).abs().mean())


def etf_error(mu, global_mean=None) -> float:
    """Single-number ETF error of the centred class means ("standard"), Zhu et al. (NeurIPS 2021).

    ``|| M~ M~^T / ||M~ M~^T||_F - (I_C - J/C) / sqrt(C - 1) ||_F`` (``compute_ETF`` of
    tding1/Neural-Collapse, spec/metrics.md §3.2); 0 exactly at a (scaled, rotated, shifted)
    simplex ETF, at most 2. Pass classifier weights ``W`` ``(C, d)`` as ``mu`` with
    ``global_mean = 0`` for the classifier version. ``global_mean`` as in :func:`nc2_equinorm`.

    Raises:
        ValueError: bad shapes or all centred means zero.
    """
    c = _centred(mu, global_mean)
    C = c.shape[0]
    g = c @ c.T
    fro = torch.linalg.matrix_norm(g)
    if not float(fro) > 0:
        raise ValueError("mu: every centred class mean is zero; the ETF error is undefined")
    eye = torch.eye(C, dtype=_F64, device=c.device)
    target = (eye - 1.0 / C) / math.sqrt(C - 1)
    return float(torch.linalg.matrix_norm(g / fro - target))


# --------------------------------------------------------------------------------------------
# Rank and spectra (spec/metrics.md §3.5)
# --------------------------------------------------------------------------------------------


def effective_rank(matrix) -> float:
    """Effective rank of Roy & Vetterli (EUSIPCO 2007), from the singular values of ``matrix``.

    ``p_k = sigma_k / sum_j sigma_j``, ``erank = exp(-sum_k p_k log p_k)`` with ``0 log 0 = 0``;
    ``1 <= erank <= rank <= min(rows, cols)``. Standard use: ``matrix = Z`` (embeddings, not
    centred), spec/metrics.md §3.5; also the class-mean matrix M (``C - 1`` at a simplex ETF).
    A zero matrix returns 0.0 (its rank).

    Shapes: ``matrix`` ``(rows, cols)`` -> float.
    """
    a = _features(matrix, "matrix")
    s = torch.linalg.svdvals(a)
    total = s.sum()
    if not float(total) > 0:
        return 0.0
    return _entropy_exp(s / total)


def rankme(z, eps: float = RANKME_EPS) -> float:
    """RankMe of Garrido, Balestriero, Najman & LeCun (ICML 2023).

    ``p_k = sigma_k(Z) / ||sigma(Z)||_1 + eps``, ``RankMe = exp(-sum_{k=1}^{min(N, K)} p_k log p_k)``
    on the singular values of the (uncentred, unsquared) embeddings ``Z`` ``(N, K)``
    (spec/metrics.md §3.5); ``eps = 1e-7`` as in the paper. The paper uses N >> K (about 25 600
    samples); with N < K the value is capped by N. A zero matrix gives p_k = eps.
    Not the covariance variant (that is :func:`erank_cov`).
    """
    eps = real("eps", eps, lo=0, hi=1, hi_open=True)
    zt = _features(z, "z")
    s = torch.linalg.svdvals(zt)
    total = s.sum()
    p = (s / total if float(total) > 0 else torch.zeros_like(s)) + eps
    return _entropy_exp(p)


def erank_cov(z) -> float:
    """Entropy effective rank of the centred covariance eigenvalues (NOT RankMe, NOT erank(Z)).

    ``lambda_k`` = eigenvalues of ``Cov(z)`` (``(d, d)``, centred, np.cov convention; they are
    ``sigma_k(z - mean)^2 / (N - 1)``), ``p_k = lambda_k / sum_j lambda_j``,
    ``exp(-sum_k p_k log p_k)``. This is what e.g. reptrix's ``rankme`` and many "effective rank"
    utilities compute (spec/metrics.md §3.5 and pitfall 5); it differs from :func:`rankme` and
    :func:`effective_rank`. At most ``min(N - 1, d)``. Zero covariance returns 0.0.

    Shapes: ``z`` ``(N, d)``, ``N >= 2`` -> float.
    """
    zt = _features(z, "z", min_rows=2)
    s = torch.linalg.svdvals(zt - zt.mean(dim=0, keepdim=True))
    lam = s**2
    total = lam.sum()
    if not float(total) > 0:
        return 0.0
    return _entropy_exp(lam / total)


def embedding_spectrum(z, normalize: bool = True, floor: float = SPECTRUM_FLOOR) -> np.ndarray:
    """DirectCLR embedding spectrum of Jing, Vincent, LeCun & Tian (ICLR 2022).

    ``z_i <- z_i / ||z_i||`` (if ``normalize``; a zero row stays zero), ``Cov(z)`` ``(d, d)`` over
    **all samples** (np.cov convention, ddof = 1), its singular values sorted descending,
    returned as ``log(max(sigma_k, floor))`` (absolute floor; exact zeros -> ``log(floor)``,
    ``floor=0`` -> -inf). Dimensional collapse shows as a tail at the floor. Differs from
    :func:`class_mean_spectrum`, which uses only the C class means (spec/metrics.md §3.5).

    Shapes: ``z`` ``(N, d)``, ``N >= 2`` -> 1-D float64 numpy array of length ``d``.
    """
    floor = _check_floor(floor)
    zt = _features(z, "z", min_rows=2)
    N, d = zt.shape
    if normalize:
        zt = _unit_rows(zt)
    s = torch.linalg.svdvals(zt - zt.mean(dim=0, keepdim=True)).cpu().numpy()
    sigma = np.zeros(d, dtype=np.float64)
    sigma[: s.shape[0]] = s**2 / (N - 1)
    sigma = np.sort(sigma)[::-1].copy()
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(sigma, floor))


# --------------------------------------------------------------------------------------------
# Streaming accumulation
# --------------------------------------------------------------------------------------------


class ClassStatsAccumulator:
    """Streaming per-class statistics in float64, for datasets too large to hold in memory.

    Pass 1 (``update`` on every mini-batch) keeps per-class counts ``n_c``, per-class means
    ``mu_c`` (sums = ``n_c mu_c``), per-class scalar scatter ``sum_{i in c} ||z_i - mu_c||^2`` and,
    if ``covariance=True``, the pooled within-class scatter matrix
    ``S_W = sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T`` ``(d, d)``. Batches are merged with the
    pairwise update of Chan, Golub & LeVeque (1979) per class,
    ``S <- S + S_batch + (n_a n_b / (n_a + n_b)) delta delta^T`` with ``delta`` the difference
    of the class means, so no raw second moment is ever differenced (no cancellation near
    collapse). Memory ``O(C d + d^2)``. This gives :meth:`class_means`, :meth:`global_mean`,
    :meth:`within_class_covariance`, :meth:`between_class_covariance`, :meth:`nc1` and
    :meth:`nc1_cdnv`, equal to the full-matrix functions up to round-off.

    Pass 2 (``update_distances`` on every mini-batch again) is needed only for
    :meth:`within_class_variation` ("paper" P5): a mean of Euclidean **distances** is not a
    function of first and second moments, so it is accumulated against the class means frozen
    at the end of pass 1. The first ``update_distances`` call freezes the means (a later
    ``update`` raises ``RuntimeError``); :meth:`within_class_variation` checks that pass 2 saw
    exactly as many samples per class as pass 1. Example::

        acc = ClassStatsAccumulator(num_classes=C)
        for z, y in loader:
            acc.update(z, y)
        mu, nc1 = acc.class_means(), acc.nc1()
        for z, y in loader:            # second pass, same data, any batching/order
            acc.update_distances(z, y)
        p5 = acc.within_class_variation()

    Args:
        num_classes: ``C`` (labels must lie in ``[0, C)``).
        dim: ``d``; default taken from the first batch.
        covariance: keep the ``(d, d)`` within-class scatter matrix (needed by :meth:`nc1` and
            :meth:`within_class_covariance`).

    State is held on the device of the first batch.
    """

    def __init__(self, num_classes: int, dim: int | None = None, covariance: bool = True) -> None:
        C = _check_num_classes(num_classes)
        if C is None:
            raise ValueError("num_classes must be a positive integer, got None")
        self.num_classes = C
        self.dim = None if dim is None else integer("dim", dim, lo=1)
        self.covariance = bool(covariance)
        self._counts: torch.Tensor | None = None
        self._means: torch.Tensor | None = None
        self._class_ss: torch.Tensor | None = None
        self._scatter: torch.Tensor | None = None
        self._frozen = False
        self._dist_sum: torch.Tensor | None = None
        self._dist_counts: torch.Tensor | None = None

    # -- helpers -----------------------------------------------------------------------------

    def _batch(self, z, labels) -> tuple[torch.Tensor, torch.Tensor]:
        zt = _features(z, "z")
        if self.dim is not None and zt.shape[1] != self.dim:
            raise ValueError(f"z has dimension d = {zt.shape[1]} but the accumulator has d = {self.dim}")
        device = zt.device if self._counts is None else self._counts.device
        zt = zt.to(device)
        y, _ = _labels(labels, zt.shape[0], self.num_classes, device)
        return zt, y

    def _init_state(self, d: int, device) -> None:
        C = self.num_classes
        self.dim = d
        self._counts = torch.zeros(C, dtype=torch.int64, device=device)
        self._means = torch.zeros(C, d, dtype=_F64, device=device)
        self._class_ss = torch.zeros(C, dtype=_F64, device=device)
        if self.covariance:
            self._scatter = torch.zeros(d, d, dtype=_F64, device=device)

    def _require_data(self) -> None:
        if self._counts is None:
            raise RuntimeError("ClassStatsAccumulator: no batch has been added (call update first)")
        empty = torch.nonzero(self._counts == 0).flatten()
        if empty.numel() > 0:
            raise ValueError(
                f"labels: class(es) {empty[:10].tolist()} received no sample "
                f"(C = {self.num_classes}); their class mean is undefined"
            )

    # -- pass 1 ------------------------------------------------------------------------------

    def update(self, z, labels) -> "ClassStatsAccumulator":
        """Add a mini-batch ``z`` ``(B, d)`` with ``labels`` ``(B,)`` (pass 1). Returns self."""
        if self._frozen:
            raise RuntimeError(
                "ClassStatsAccumulator: class means are frozen by update_distances; "
                "start a new accumulator for new data"
            )
        zt, y = self._batch(z, labels)
        if self._counts is None:
            self._init_state(zt.shape[1], zt.device)
        C = self.num_classes
        nb = torch.bincount(y, minlength=C)
        nb64 = nb.to(_F64)
        sums = torch.zeros(C, self.dim, dtype=_F64, device=zt.device).index_add_(0, y, zt)
        mb = sums / nb64.clamp_min(1.0).unsqueeze(1)  # batch class means (0 for absent classes)
        r = zt - mb[y]
        ss_b = torch.zeros(C, dtype=_F64, device=zt.device).index_add_(0, y, (r * r).sum(dim=1))
        na64 = self._counts.to(_F64)
        n64 = na64 + nb64
        present = nb > 0
        delta = torch.where(present.unsqueeze(1), mb - self._means, torch.zeros_like(mb))
        w = torch.where(present, na64 * nb64 / n64.clamp_min(1.0), torch.zeros_like(n64))
        if self.covariance:
            self._scatter += r.T @ r + (delta * w.unsqueeze(1)).T @ delta
        self._class_ss += ss_b + w * (delta * delta).sum(dim=1)
        frac = torch.where(present, nb64 / n64.clamp_min(1.0), torch.zeros_like(n64))
        self._means += delta * frac.unsqueeze(1)
        self._counts += nb
        return self

    @property
    def counts(self) -> torch.Tensor:
        """Per-class sample counts ``n_c`` ``(C,)`` (int64)."""
        if self._counts is None:
            raise RuntimeError("ClassStatsAccumulator: no batch has been added (call update first)")
        return self._counts.clone()

    def class_sums(self) -> torch.Tensor:
        """Per-class sums ``n_c mu_c`` ``(C, d)`` float64."""
        self._require_data()
        return self._means * self._counts.to(_F64).unsqueeze(1)

    def class_means(self) -> torch.Tensor:
        """Uncentred class means ``(C, d)`` float64 (as :func:`class_means`)."""
        self._require_data()
        return self._means.clone()

    def global_mean(self) -> torch.Tensor:
        """Sample mean ``mu_G = sum_c n_c mu_c / N`` ``(d,)`` float64."""
        self._require_data()
        n = self._counts.to(_F64)
        return (self._means * n.unsqueeze(1)).sum(dim=0) / n.sum()

    def within_class_covariance(self) -> torch.Tensor:
        """``Sigma_W = S_W / N`` ``(d, d)`` float64 (as :func:`within_class_covariance`)."""
        self._require_data()
        if not self.covariance:
            raise RuntimeError("ClassStatsAccumulator(covariance=False) keeps no scatter matrix")
        sw = self._scatter / float(self._counts.sum())
        return (sw + sw.T) / 2

    def between_class_covariance(self) -> torch.Tensor:
        """``Sigma_B`` ``(d, d)`` float64, centred at the sample mean (as the full function)."""
        self._require_data()
        c = self._means - self.global_mean()
        sb = c.T @ c / self.num_classes
        return (sb + sb.T) / 2

    def nc1(self, rtol: float | None = None) -> float:
        """NC1 = Tr(Sigma_W Sigma_B^+)/C, exactly as :func:`nc1`."""
        if self.num_classes < 2:
            raise ValueError(f"nc1 needs at least 2 classes, got C = {self.num_classes}")
        return _nc1_from_cov(
            self.within_class_covariance(), self.between_class_covariance(), self.num_classes, rtol
        )

    def nc1_cdnv(self) -> float:
        """CDNV, exactly as :func:`nc1_cdnv`."""
        if self.num_classes < 2:
            raise ValueError(f"nc1_cdnv needs at least 2 classes, got C = {self.num_classes}")
        self._require_data()
        return _cdnv(self._means, self._class_ss / self._counts.to(_F64))

    # -- pass 2 ------------------------------------------------------------------------------

    def update_distances(self, z, labels) -> "ClassStatsAccumulator":
        """Pass 2: add ``||z_i - mu_{y_i}||`` against the frozen pass-1 means. Returns self."""
        if self._counts is None:
            raise RuntimeError("ClassStatsAccumulator: run pass 1 (update) before update_distances")
        zt, y = self._batch(z, labels)
        if not self._frozen:
            self._frozen = True
            self._dist_sum = torch.zeros(self.num_classes, dtype=_F64, device=zt.device)
            self._dist_counts = torch.zeros(self.num_classes, dtype=torch.int64, device=zt.device)
        dist = torch.linalg.vector_norm(zt - self._means[y], dim=1)
        self._dist_sum.index_add_(0, y, dist)
        self._dist_counts += torch.bincount(y, minlength=self.num_classes)
        return self

    def within_class_variation(self) -> float:
        """"Paper" P5 (as :func:`within_class_variation`), after a complete second pass."""
        self._require_data()
        if not self._frozen:
            raise RuntimeError(
                "within_class_variation needs a second pass: call update_distances on every batch"
            )
        if not torch.equal(self._dist_counts, self._counts):
            bad = torch.nonzero(self._dist_counts != self._counts).flatten()[:10].tolist()
            raise ValueError(
                f"update_distances saw different per-class counts than update for classes {bad}: "
                "pass 2 must visit exactly the samples of pass 1"
            )
        return float((self._dist_sum / self._counts.to(_F64)).mean())
