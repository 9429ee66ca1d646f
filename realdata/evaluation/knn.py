"""Nearest-neighbour evaluation of frozen features: weighted kNN accuracy and Recall@k.

The WeiNCE protocol (arXiv 2606.00262, Sec. 5, Table 3 and appendix Tables 6-7): backbone
features ``h``, L2-normalised; cosine similarity between each query and a bank (the 80 % training
split); the ``k`` most similar bank items, merged over bank chunks so memory stays bounded.

* weighted kNN accuracy (``k = 50``, ``T = 0.1``): each neighbour ``n`` votes for its label with
  weight ``exp((s_n - s_max) / T)``, ``s_max`` the query's largest similarity (so every weight
  lies in ``(0, 1]``); the prediction is the class with the largest summed weight (ties to the
  lower class index);
* Recall@k (``k`` in 1, 2, 5, 10, 20, 50): the share of queries with at least one bank item of
  their own label among their ``k`` nearest bank items.

Ties between equally similar bank items are broken by :func:`torch.topk` (unspecified order).
Every result records which features it was computed on (``h`` or ``z``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from realdata.evaluation._checks import check_features, check_features_name, check_labels, check_positive_int

__all__ = [
    "RECALL_KS",
    "KNNResult",
    "RecallResult",
    "nearest_neighbours",
    "knn_classify",
    "recall_at_k",
]

RECALL_KS = (1, 2, 5, 10, 20, 50)


@dataclass(frozen=True)
class KNNResult:
    """Weighted kNN accuracy (a fraction in [0, 1]) and its settings."""

    accuracy: float
    k: int
    temperature: float
    features: str
    num_queries: int


@dataclass(frozen=True)
class RecallResult:
    """Recall@k for several ``k`` (fractions in [0, 1])."""

    recall: dict[int, float]
    features: str
    num_queries: int


def nearest_neighbours(
    query: torch.Tensor,
    bank: torch.Tensor,
    k: int,
    *,
    normalize: bool = True,
    query_chunk: int = 1024,
    bank_chunk: int = 8192,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most similar bank items of every query (inner product, cosine if normalised).

    Queries are processed ``query_chunk`` at a time and the bank ``bank_chunk`` at a time; the
    running top-``k`` is merged after every bank chunk, so memory is
    ``O(query_chunk * (bank_chunk + k))`` whatever the bank size.

    Args:
        query: query features.
        bank: bank features (same ``d``, device and dtype family).
        k: neighbours per query, ``1 <= k <= N``.
        normalize: L2-normalise both sides first.
        query_chunk: queries per chunk.
        bank_chunk: bank items per chunk.

    Returns:
        ``(similarities, indices)``, both ``(M, k)``, most similar first.

    Shape:
        query ``(M, d)``, bank ``(N, d)``.
    """
    query = check_features(query, "query")
    bank = check_features(bank, "bank")
    if query.shape[1] != bank.shape[1]:
        raise ValueError(f"query has d = {query.shape[1]} but bank has d = {bank.shape[1]}")
    k = check_positive_int("k", k)
    if k > bank.shape[0]:
        raise ValueError(f"k = {k} exceeds the bank size {bank.shape[0]}")
    check_positive_int("query_chunk", query_chunk)
    check_positive_int("bank_chunk", bank_chunk)
    dtype = torch.promote_types(query.dtype, bank.dtype)
    query, bank = query.to(dtype), bank.to(device=query.device, dtype=dtype)
    if normalize:
        query, bank = F.normalize(query, dim=1), F.normalize(bank, dim=1)
    sims, idx = [], []
    for q0 in range(0, query.shape[0], query_chunk):
        q = query[q0 : q0 + query_chunk]
        best_s = torch.full((q.shape[0], 0), -math.inf, dtype=dtype, device=q.device)
        best_i = torch.empty((q.shape[0], 0), dtype=torch.long, device=q.device)
        for b0 in range(0, bank.shape[0], bank_chunk):
            s = q @ bank[b0 : b0 + bank_chunk].T
            top_s, top_i = torch.topk(s, min(k, s.shape[1]), dim=1)
            cat_s = torch.cat([best_s, top_s], dim=1)
            cat_i = torch.cat([best_i, top_i + b0], dim=1)
            best_s, pos = torch.topk(cat_s, min(k, cat_s.shape[1]), dim=1)
            best_i = torch.gather(cat_i, 1, pos)
        sims.append(best_s)
        idx.append(best_i)
    return torch.cat(sims), torch.cat(idx)


def knn_classify(
    bank: torch.Tensor,
    bank_labels: torch.Tensor,
    query: torch.Tensor,
    query_labels: torch.Tensor,
    *,
    k: int = 50,
    temperature: float = 0.1,
    num_classes: int | None = None,
    features: str = "h",
    query_chunk: int = 1024,
    bank_chunk: int = 8192,
) -> KNNResult:
    """Weighted kNN accuracy on L2-normalised features (WeiNCE protocol; see the module doc).

    ``score_c(q) = sum over the k nearest n with label c of exp((s_n - s_max) / T)``;
    prediction ``argmax_c score_c``.

    Args:
        bank: the bank features (the training split).
        bank_labels: their labels.
        query: the evaluated points.
        query_labels: their labels.
        k: neighbours, ``k <= N``.
        temperature: ``T > 0``.
        num_classes: ``C``; default ``max(label) + 1``.
        features: which features these are, ``h`` (backbone) or ``z`` (projection).
        query_chunk: see :func:`nearest_neighbours`.
        bank_chunk: see :func:`nearest_neighbours`.

    Returns:
        :class:`KNNResult`.

    Shape:
        bank ``(N, d)``, bank_labels ``(N,)``, query ``(M, d)``, query_labels ``(M,)``.
    """
    features = check_features_name(features)
    bank = check_features(bank, "bank")
    query = check_features(query, "query")
    if not isinstance(temperature, (int, float)) or not temperature > 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    yb = check_labels(bank_labels, bank.shape[0], "bank_labels", num_classes)
    yq = check_labels(query_labels, query.shape[0], "query_labels", num_classes)
    C = num_classes if num_classes is not None else int(max(yb.max(), yq.max())) + 1
    sims, idx = nearest_neighbours(query, bank, k, query_chunk=query_chunk, bank_chunk=bank_chunk)
    weights = torch.exp((sims - sims[:, :1]) / temperature)
    votes = torch.zeros(query.shape[0], C, dtype=weights.dtype, device=weights.device)
    votes.scatter_add_(1, yb.to(idx.device)[idx], weights)
    pred = votes.argmax(dim=1)
    acc = (pred == yq.to(pred.device)).double().mean().item()
    return KNNResult(acc, k, float(temperature), features, int(query.shape[0]))


def recall_at_k(
    bank: torch.Tensor,
    bank_labels: torch.Tensor,
    query: torch.Tensor,
    query_labels: torch.Tensor,
    *,
    ks: tuple[int, ...] = RECALL_KS,
    features: str = "h",
    query_chunk: int = 1024,
    bank_chunk: int = 8192,
) -> RecallResult:
    """Recall@k: share of queries with a same-label bank item among their ``k`` nearest.

    On L2-normalised features (cosine similarity), WeiNCE protocol (see the module doc).

    Args:
        bank: the bank features.
        bank_labels: their labels.
        query: the queries.
        query_labels: their labels.
        ks: the ``k`` values, each ``<= N``.
        features: which features these are, ``h`` or ``z``.
        query_chunk: see :func:`nearest_neighbours`.
        bank_chunk: see :func:`nearest_neighbours`.

    Returns:
        :class:`RecallResult` with ``recall[k]`` for every ``k`` in ``ks``.

    Shape:
        bank ``(N, d)``, bank_labels ``(N,)``, query ``(M, d)``, query_labels ``(M,)``.
    """
    features = check_features_name(features)
    bank = check_features(bank, "bank")
    query = check_features(query, "query")
    if not isinstance(ks, (tuple, list)) or not ks:
        raise ValueError(f"ks must be a non-empty sequence of integers, got {ks!r}")
    for k in ks:
        check_positive_int("ks", k)
    yb = check_labels(bank_labels, bank.shape[0], "bank_labels")
    yq = check_labels(query_labels, query.shape[0], "query_labels")
    _, idx = nearest_neighbours(query, bank, max(ks), query_chunk=query_chunk, bank_chunk=bank_chunk)
    hit = yb.to(idx.device)[idx] == yq.to(idx.device)[:, None]  # (M, kmax)
    first = torch.cummax(hit.to(torch.int8), dim=1).values.bool()  # a hit at or before rank j
    recall = {int(k): first[:, k - 1].double().mean().item() for k in ks}
    return RecallResult(recall, features, int(query.shape[0]))
