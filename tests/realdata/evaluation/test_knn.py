"""Tests of realdata/evaluation/knn.py: weighted kNN and Recall@k against brute-force loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from realdata.evaluation.knn import RECALL_KS, knn_classify, nearest_neighbours, recall_at_k


def _data(seed: int, n_bank: int = 120, n_query: int = 40, d: int = 6, C: int = 5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(C, d, generator=g, dtype=torch.float64) * 1.5
    yb = torch.randint(0, C, (n_bank,), generator=g)
    yq = torch.randint(0, C, (n_query,), generator=g)
    bank = centres[yb] + torch.randn(n_bank, d, generator=g, dtype=torch.float64)
    query = centres[yq] + torch.randn(n_query, d, generator=g, dtype=torch.float64)
    return bank.to(dtype), yb, query.to(dtype), yq


def _ranked(bank: np.ndarray, query_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarities of one query to every bank item, most similar first (a loop)."""
    qn = query_row / math.sqrt(sum(v * v for v in query_row))
    sims = []
    for b in bank:
        bn = b / math.sqrt(sum(v * v for v in b))
        sims.append(sum(x * y for x, y in zip(qn, bn)))
    sims = np.array(sims)
    order = np.argsort(-sims, kind="stable")
    return sims[order], order


def _knn_reference(bank, yb, query, yq, k, T, C) -> float:
    bank, query = bank.double().numpy(), query.double().numpy()
    correct = 0
    for q, y in zip(query, yq.tolist()):
        sims, order = _ranked(bank, q)
        votes = [0.0] * C
        for s, i in zip(sims[:k], order[:k]):
            votes[int(yb[i])] += math.exp((s - sims[0]) / T)
        pred = max(range(C), key=lambda c: (votes[c], -c))  # ties: lower class index
        correct += pred == y
    return correct / len(yq)


def _recall_reference(bank, yb, query, yq, ks) -> dict[int, float]:
    bank, query = bank.double().numpy(), query.double().numpy()
    hits = {k: 0 for k in ks}
    for q, y in zip(query, yq.tolist()):
        _, order = _ranked(bank, q)
        for k in ks:
            hits[k] += any(int(yb[i]) == y for i in order[:k])
    return {k: hits[k] / len(yq) for k in ks}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k,T", [(50, 0.1), (7, 0.5), (1, 0.1)])
def test_weighted_knn_equals_loop_reference(dtype, k, T):
    bank, yb, query, yq = _data(0, dtype=dtype)
    res = knn_classify(bank, yb, query, yq, k=k, temperature=T, num_classes=5)
    assert res.accuracy == pytest.approx(_knn_reference(bank, yb, query, yq, k, T, 5), abs=1e-12)
    assert (res.k, res.temperature, res.features, res.num_queries) == (k, T, "h", 40)
    # chunked over queries and bank: the same answer
    small = knn_classify(bank, yb, query, yq, k=k, temperature=T, num_classes=5, query_chunk=3, bank_chunk=11)
    assert small.accuracy == res.accuracy


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_recall_at_k_equals_loop_reference(dtype):
    bank, yb, query, yq = _data(1, n_bank=150, C=8, dtype=dtype)
    res = recall_at_k(bank, yb, query, yq)
    ref = _recall_reference(bank, yb, query, yq, RECALL_KS)
    assert set(res.recall) == set(RECALL_KS)
    for k in RECALL_KS:
        assert res.recall[k] == pytest.approx(ref[k], abs=1e-12)
    vals = [res.recall[k] for k in RECALL_KS]
    assert vals == sorted(vals)  # monotone in k
    chunked = recall_at_k(bank, yb, query, yq, query_chunk=4, bank_chunk=9, features="z")
    assert chunked.recall == res.recall and chunked.features == "z"


def test_nearest_neighbours_chunked_equals_full_sort():
    bank, _, query, _ = _data(2, n_bank=97, n_query=13)
    s, i = nearest_neighbours(query, bank, 20, query_chunk=5, bank_chunk=8)
    full = torch.nn.functional.normalize(query, dim=1) @ torch.nn.functional.normalize(bank, dim=1).T
    ref_s, ref_i = torch.sort(full, dim=1, descending=True)
    torch.testing.assert_close(s, ref_s[:, :20])
    assert torch.equal(i, ref_i[:, :20])
    # without normalisation: raw inner products
    s2, _ = nearest_neighbours(query, bank, 3, normalize=False)
    torch.testing.assert_close(s2, torch.sort(query @ bank.T, dim=1, descending=True).values[:, :3])


def test_knn_is_perfect_on_separated_classes_and_weights_are_bounded():
    bank, yb, query, yq = _data(3, d=20)
    far = torch.eye(20, dtype=torch.float64)[:5] * 100
    res = knn_classify(far[yb] + bank * 0.01, yb, far[yq] + query * 0.01, yq, k=10)
    assert res.accuracy == 1.0
    # huge similarities do not overflow: weights are exp((s - s_max)/T) <= 1
    res = knn_classify(bank * 1e6, yb, query * 1e6, yq, k=5, temperature=1e-3)
    assert 0.0 <= res.accuracy <= 1.0


def test_validation_names_the_argument():
    bank, yb, query, yq = _data(4)
    with pytest.raises(ValueError, match="k = 121 exceeds the bank size 120"):
        knn_classify(bank, yb, query, yq, k=121)
    with pytest.raises(ValueError, match="exceeds the bank size"):
        recall_at_k(bank, yb, query, yq, ks=(1, 500))
    with pytest.raises(ValueError, match="temperature"):
        knn_classify(bank, yb, query, yq, temperature=0.0)
    with pytest.raises(ValueError, match="bank_labels"):
        knn_classify(bank, yb[:-1], query, yq)
    with pytest.raises(ValueError, match="bank_labels must lie in"):
        knn_classify(bank, yb, query, yq, num_classes=2)
    with pytest.raises(ValueError, match="query_labels must lie in"):
        knn_classify(bank, yb % 5, query, yq + 5, num_classes=5)
    with pytest.raises(ValueError, match="query must not be empty"):
        knn_classify(bank, yb, query[:0], yq[:0])
    with pytest.raises(ValueError, match="d = 6"):
        nearest_neighbours(query[:, :3], bank, 3)
    with pytest.raises(ValueError, match="features"):
        recall_at_k(bank, yb, query, yq, features="x")
    with pytest.raises(ValueError, match="ks"):
        recall_at_k(bank, yb, query, yq, ks=(0,))
    with pytest.raises(ValueError, match="bank must be floating"):
        knn_classify(yb[:, None], yb, query, yq)
    with pytest.raises(ValueError, match="non-finite"):
        knn_classify(bank * float("nan"), yb, query, yq)
