"""Tests of realdata/evaluation/features.py: feature extraction, NCM against a loop reference, and the
whole frozen evaluation on the bundled digits, end to end."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from realdata.datasets import load_digits_dataset
from realdata.evaluation.features import FrozenEvaluation, evaluate_frozen, extract_features, ncm_classify
from realdata.inputs.views import hcl_view
from realdata.training.models import ModelOutput, build_model


def _ncm_reference(train_z, train_y, test_z, test_y, C, k):
    """Slow NCM: class means by a loop, scores by a loop, rank with lower-index ties."""
    d = train_z.shape[1]
    means = []
    for c in range(C):
        rows = [train_z[i].tolist() for i in range(len(train_y)) if int(train_y[i]) == c]
        means.append([sum(r[j] for r in rows) / len(rows) for j in range(d)])
    correct = 0
    for z, y in zip(test_z.tolist(), test_y.tolist()):
        scores = [sum(a * b for a, b in zip(z, m)) for m in means]
        ranking = sorted(range(C), key=lambda c: (-scores[c], c))
        correct += y in ranking[:k]
    return correct / len(test_y)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ncm_equals_slow_loop_reference(dtype):
    g = torch.Generator().manual_seed(0)
    C, d = 7, 4
    train_y = torch.arange(C).repeat(6)
    train_z = (torch.randn(C * 6, d, generator=g, dtype=torch.float64) + train_y[:, None] * 0.1).to(dtype)
    test_y = torch.randint(0, C, (50,), generator=g)
    test_z = torch.randn(50, d, generator=g, dtype=torch.float64).to(dtype)
    res = ncm_classify(train_z, train_y, test_z, test_y, chunk_size=9)
    assert res.top1 == pytest.approx(_ncm_reference(train_z, train_y, test_z, test_y, C, 1), abs=1e-12)
    assert res.top5 == pytest.approx(_ncm_reference(train_z, train_y, test_z, test_y, C, 5), abs=1e-12)
    assert res.features == "z" and res.num_queries == 50


def test_ncm_is_the_raw_inner_product_with_unnormalised_means():
    # class 1's mean is short but points at the query; class 0's is long and at 60 degrees:
    # the raw inner product prefers class 0, a cosine classifier would prefer class 1
    train_z = torch.tensor([[2.0, 3.4641], [0.2, 0.0]])
    res = ncm_classify(train_z, torch.tensor([0, 1]), torch.tensor([[1.0, 0.0]]), torch.tensor([0]))
    assert res.top1 == 1.0
    # ties go to the lower class index; top-5 with C = 2 is top-2
    tie = ncm_classify(
        torch.tensor([[1.0], [1.0]]), torch.tensor([0, 1]), torch.tensor([[1.0]]), torch.tensor([1])
    )
    assert tie.top1 == 0.0 and tie.top5 == 1.0


def test_ncm_agrees_with_theory_collapse():
    from theory.collapse import ncm_accuracy

    g = torch.Generator().manual_seed(1)
    train_y = torch.arange(10).repeat(8)
    train_z = torch.randn(80, 9, generator=g) + torch.eye(10, 9)[train_y]
    test_y = torch.randint(0, 10, (40,), generator=g)
    test_z = torch.randn(40, 9, generator=g) + torch.eye(10, 9)[test_y]
    res = ncm_classify(train_z, train_y, test_z, test_y)
    assert res.top1 == pytest.approx(ncm_accuracy(train_z, train_y, test_z, test_y))
    assert res.top5 == pytest.approx(ncm_accuracy(train_z, train_y, test_z, test_y, top_k=5))


def test_ncm_validation():
    z, y = torch.randn(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    with pytest.raises(ValueError, match="no sample of classes"):
        ncm_classify(z, y, z, y, num_classes=4)
    with pytest.raises(ValueError, match="test_labels must lie in"):
        ncm_classify(z, y, z, y + 1)
    with pytest.raises(ValueError, match="test_z has d = 2"):
        ncm_classify(z, y, z[:, :2], y)
    with pytest.raises(ValueError, match="train_z must not be empty"):
        ncm_classify(z[:0], y[:0], z, y)
    with pytest.raises(ValueError, match="train_labels must have shape"):
        ncm_classify(z, y[:3], z, y)


class _Pixels(nn.Module):
    """A 'model' whose features are the flattened input (h = z = pixels)."""

    def forward(self, x):
        flat = x.flatten(1)
        return ModelOutput(flat, flat)


def test_extract_features_eval_mode_batches_and_restores_training():
    model = build_model("smallcnn", "hcl", 10, in_channels=1, seed=0)
    images = torch.randint(0, 256, (37, 1, 8, 8), dtype=torch.uint8)
    labels = torch.arange(37) % 10
    assert model.training
    a = extract_features(model, images, labels, batch_size=5, progress=False)
    b = extract_features(model, images, batch_size=64, progress=False)
    assert model.training  # restored
    assert a.h.shape == (37, 128) and a.z.shape == (37, 9) and a.h.dtype == torch.float32
    torch.testing.assert_close(a.h, b.h, atol=1e-5, rtol=1e-5)  # eval-mode BN: batch-size free
    assert torch.equal(a.labels, labels) and b.labels is None
    with torch.no_grad():
        ref = model.eval()(images.float() / 255)
    torch.testing.assert_close(a.z, ref.z, atol=1e-5, rtol=1e-5)
    model.train()
    bf = extract_features(model, images, autocast_bf16=True, progress=False)
    assert bf.h.dtype == torch.float32 and (bf.z - a.z).abs().max() < 0.1
    pre = extract_features(model, images, preprocess=lambda x: hcl_view(x, (0.5,), (0.25,)), progress=False)
    assert not torch.allclose(pre.h, a.h)
    with pytest.raises(ValueError, match="images"):
        extract_features(model, images[:0], progress=False)
    with pytest.raises(ValueError, match="labels"):
        extract_features(model, images, labels[:3], progress=False)


def test_evaluate_frozen_on_digits_end_to_end():
    ds = load_digits_dataset()
    res = evaluate_frozen(_Pixels(), ds, probe_epochs=20, probe_lr=1e-2, progress=False)
    assert isinstance(res, FrozenEvaluation)
    # raw pixels of the digits are easy: well-known accuracies of these classifiers
    assert res.ncm.top1 > 0.8 and res.ncm.top5 > 0.97 and res.ncm.features == "z"
    assert res.probe.test_top1 > 0.9 and res.probe.val_top1 > 0.9 and res.probe.features == "h"
    assert res.knn_test.accuracy > 0.9 and res.knn_val.accuracy > 0.9
    assert res.knn_test.num_queries == len(ds.test) and res.knn_val.num_queries == 288
    assert res.recall_test.recall[1] > 0.9 and res.recall_test.recall[50] == pytest.approx(1.0, abs=0.01)
    row = res.to_row()
    assert row["ncm_features"] == "z" and row["probe_features"] == "h" and row["knn_features"] == "h"
    assert {"ncm_top1", "probe_test_top1", "knn_test", "recall1_test", "recall50_val"} <= set(row)
    assert set(res.to_dict()) == {"ncm", "probe", "knn_val", "knn_test", "recall_val", "recall_test"}
    # a real (untrained) encoder goes through the same path; metrics may be chosen
    model = build_model("smallcnn", "hcl", 10, in_channels=1, seed=0)
    part = evaluate_frozen(model, ds, metrics=("ncm", "knn"), progress=False)
    assert part.probe is None and part.recall_test is None and 0.0 <= part.ncm.top1 <= 1.0
    with pytest.raises(ValueError, match="metrics"):
        evaluate_frozen(model, ds, metrics=("ncm", "svm"))
