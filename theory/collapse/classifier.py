"""Classifier-based Neural Collapse: NC3 self-duality and NC4 agreement with the nearest class centre.

Papyan, Han & Donoho (PNAS 2020) for NC3 and NC4, Zhu et al. (NeurIPS 2021) for the Gram
variant of NC3; docs/metrics.md#nc3-self-duality and docs/metrics.md#nc4-classifier-agreement.
Notation: :mod:`theory.collapse`; a linear classifier is ``h -> argmax_c (w_c . h + b_c)`` with
weights ``W`` ``(C, d)`` (rows ``w_c``) and an optional bias ``b`` ``(C,)``.

A contrastive model has no classifier of its own: pass a linear probe's ``(W, b)``, or the
nearest-class-mean classifier written as a linear one by :func:`ncm_classifier`:

* ``similarity="euclidean"`` -- the nearest class centre (NCC),
  ``argmin_c ||h - mu_c||^2 = argmax_c (mu_c . h - ||mu_c||^2 / 2)``: ``W = M``,
  ``b_c = -||mu_c||^2 / 2``;
* ``similarity="dot"`` -- the HCL authors' NCM, a raw inner product with un-normalised means:
  ``W = M``, ``b = 0``. It agrees with the NCC when all class means have the same norm.
"""

from __future__ import annotations

from typing import Literal

import torch

from theory.collapse._geometry import (
    centred_means,
    class_means_input,
    gram_etf_distance,
    pow2_scale,
    vanishes,
)
from theory.collapse._inputs import F64, ArrayLike, features, vector
from theory.validation import one_of

__all__ = ["nc3_self_duality", "nc3_self_duality_zhu", "nc4_ncc_agreement", "ncm_classifier"]

#: The similarities of a nearest-class-mean classifier (as :func:`theory.collapse.ncm_accuracy`).
SIMILARITIES = ("dot", "euclidean")

_CHUNK = 4096  # rows scored at once: memory O(chunk * C)


def _weights(W: object, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Validated classifier weights ``(C, d)`` float64 on ``device``, matching the class means."""
    w = features(W, "W", device=device)
    if tuple(w.shape) != shape:
        raise ValueError(f"W must have shape (C, d) = {shape} to match mu, got {tuple(w.shape)}")
    return w


def _centre_scores(x: torch.Tensor, mu: torch.Tensor, similarity: str) -> torch.Tensor:
    """Scores ``(n, C)`` of a nearest-class-mean rule: ``x . mu_c`` or ``-||x - mu_c||`` (exact)."""
    if similarity == "dot":
        return x @ mu.T
    return -torch.cdist(x, mu, compute_mode="donot_use_mm_for_euclid_dist")


def nc3_self_duality(W: ArrayLike, mu: ArrayLike, global_mean: ArrayLike | float | None = None) -> float:
    """NC3 self-duality ``|| W / ||W||_F - M~ / ||M~||_F ||_F^2`` of a linear classifier.

    Papyan, Han & Donoho (PNAS 2020), squared as in the NC evaluation codes
    (docs/metrics.md#nc3-self-duality). ``M~`` are the centred class means ``mu_c - mu_G``; ``W``
    is used as given (not centred). Ideal 0 (the classifier rows are the centred means up to one
    scale); the value lies in ``[0, 4]`` (4 for ``W = -M~``).

    Args:
        W: classifier weights ``(C, d)``, row ``c`` for class ``c`` (the rows of ``mu``).
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: centre ``mu_G`` ``(d,)`` or a scalar; default the mean of the class means,
            as the NC2 functions (pass ``ClassStats.global_mean`` for Papyan's sample mean;
            identical for balanced classes).

    Returns:
        NC3, a float in ``[0, 4]``.

    Shape:
        ``W`` ``(C, d)``, ``mu`` ``(C, d)`` -> float.

    Raises:
        ValueError: bad shapes, NaN/inf, fewer than 2 classes, ``W = 0`` or all centred means zero.
    """
    c = centred_means(mu, global_mean, "NC3 self-duality")
    w = _weights(W, tuple(c.shape), c.device)
    w = w / pow2_scale(w)  # scale-invariant in W and in mu (c is rescaled too): no overflow
    nw, nm = torch.linalg.matrix_norm(w), torch.linalg.matrix_norm(c)
    if not float(nw) > 0:
        raise ValueError("W is zero; NC3 self-duality is undefined")
    return float(torch.linalg.matrix_norm(w / nw - c / nm) ** 2)


def nc3_self_duality_zhu(W: ArrayLike, mu: ArrayLike, global_mean: ArrayLike | float | None = None) -> float:
    """Zhu et al.'s NC3 ``|| W M~^T / ||W M~^T||_F - (I_C - J/C) / sqrt(C - 1) ||_F``.

    Zhu et al. (NeurIPS 2021), ``compute_W_H_relation`` of tding1/Neural-Collapse
    (docs/metrics.md#nc3-self-duality): the classifier-times-means Gram matrix against the
    normalised simplex ETF. 0 when ``W`` is a positive multiple of ``M~`` and ``M~`` is a simplex
    ETF; at most 2.

    Args:
        W: classifier weights ``(C, d)``.
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: centre, as in :func:`nc3_self_duality`.

    Returns:
        The distance, a float in ``[0, 2]``.

    Shape:
        ``W`` ``(C, d)``, ``mu`` ``(C, d)`` -> float.

    Raises:
        ValueError: bad shapes, NaN/inf, fewer than 2 classes, all centred means zero, or
            ``W M~^T = 0`` (``W`` orthogonal to the means), to working precision.
    """
    c = centred_means(mu, global_mean, "Zhu et al.'s NC3")
    w = _weights(W, tuple(c.shape), c.device)
    w = w / pow2_scale(w)  # scale-invariant in W and in mu (c is rescaled too): no overflow
    g = w @ c.T
    scale = float(torch.linalg.matrix_norm(w)) * float(torch.linalg.matrix_norm(c))
    if vanishes(g, scale, c.shape[1]):
        raise ValueError("W: W M~^T is zero (to working precision); Zhu et al.'s NC3 is undefined")
    return gram_etf_distance(g, "W", "W M~^T")


def ncm_classifier(
    mu: ArrayLike, similarity: Literal["euclidean", "dot"] = "euclidean"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The nearest-class-mean classifier as a linear classifier ``(W, b)``.

    ``similarity="euclidean"``: the nearest class centre, ``W = M``, ``b_c = -||mu_c||^2 / 2``
    (``argmax_c (w_c . h + b_c) = argmin_c ||h - mu_c||``). ``similarity="dot"``: the HCL
    authors' NCM, ``W = M``, ``b = 0`` (docs/metrics.md#nc4-classifier-agreement).

    Args:
        mu: class means ``(C, d)``.
        similarity: ``"euclidean"`` or ``"dot"``.

    Returns:
        ``(W, b)``: float64 tensors ``(C, d)`` and ``(C,)`` on ``mu``'s device.

    Shape:
        ``mu`` ``(C, d)`` -> ``(C, d)``, ``(C,)``.

    Raises:
        ValueError: bad ``similarity``, bad shapes, NaN/inf.
    """
    one_of("similarity", similarity, SIMILARITIES)
    m = class_means_input(mu, min_classes=1)
    if similarity == "euclidean":
        b = -0.5 * (m * m).sum(dim=1)
    else:
        b = torch.zeros(m.shape[0], dtype=F64, device=m.device)
    return m.clone(), b


def nc4_ncc_agreement(W: ArrayLike, z: ArrayLike, mu: ArrayLike, b: ArrayLike | float | None = None) -> float:
    """NC4: fraction of samples on which a linear classifier agrees with the nearest class centre.

    ``(1/N) sum_i 1[ argmax_c (w_c . z_i + b_c) = argmin_c ||z_i - mu_c|| ]`` (Papyan, Han &
    Donoho, PNAS 2020; docs/metrics.md#nc4-classifier-agreement); the NCC mismatch is
    ``1 - agreement``. Ideal 1. Distances are exact differences (no ``||a||^2 - 2ab + ||b||^2``
    cancellation); ties go to the lower class index in both rules. Memory ``O(4096 C)``.

    Args:
        W: classifier weights ``(C, d)``, row ``c`` for the class of row ``c`` of ``mu``.
        z: the features to classify ``(N, d)`` (Papyan et al.: the training features).
        mu: class centres ``(C, d)``, ``C >= 2`` (the training class means).
        b: bias ``(C,)`` or a scalar; default 0. :func:`ncm_classifier` builds ``(W, b)`` of the
            NCM classifiers.

    Returns:
        The agreement, a float in ``[0, 1]``; computed on ``z``'s device.

    Shape:
        ``W`` ``(C, d)``, ``z`` ``(N, d)``, ``mu`` ``(C, d)``, ``b`` ``(C,)`` -> float.

    Raises:
        ValueError: bad shapes (``z`` and ``mu`` of different ``d``, ``W`` not ``mu``'s shape,
            ``b`` not ``(C,)``), NaN/inf, fewer than 2 classes.
    """
    zt = features(z, "z")
    m = class_means_input(mu).to(zt.device)
    if m.shape[1] != zt.shape[1]:
        raise ValueError(f"z has dimension d = {zt.shape[1]} but mu has d = {m.shape[1]}")
    w = _weights(W, tuple(m.shape), zt.device)
    bias = (
        torch.zeros(m.shape[0], dtype=F64, device=zt.device)
        if b is None
        else vector(b, "b", m.shape[0], zt.device)
    )
    agree = torch.zeros((), dtype=torch.int64, device=zt.device)
    for start in range(0, zt.shape[0], _CHUNK):
        x = zt[start : start + _CHUNK]
        clf = torch.argmax(x @ w.T + bias, dim=1)
        ncc = torch.argmax(_centre_scores(x, m, "euclidean"), dim=1)
        agree += (clf == ncc).sum()
    return int(agree) / zt.shape[0]
