"""The nn.Module losses: HardContrastiveLoss and SCL / HSCL / UCL / HUCL."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from tests.reference import loop_loss
from theory.hcl import HSCL, HUCL, SCL, UCL, HardContrastiveLoss, contrastive_loss
from theory.options import METHODS


@pytest.fixture
def batch(ball_batch):
    return ball_batch(B=14, C=4, seed=5)


@pytest.mark.parametrize(
    "module,kw",
    [
        (SCL(), dict(setting="supervised", beta=0.0)),
        (HSCL(beta=2.0), dict(setting="supervised", beta=2.0)),
        (UCL(self_negative=False), dict(setting="unsupervised", beta=0.0, self_negative=False)),
        (HUCL(3.0, tau=0.5, psi="sum"), dict(setting="unsupervised", beta=3.0, tau=0.5, psi="sum")),
        (
            HardContrastiveLoss("supervised", 1.5, reduction="anchor_mean"),
            dict(setting="supervised", beta=1.5, reduction="anchor_mean"),
        ),
    ],
)
def test_module_equals_function_and_loop_reference(module, kw, batch):
    z, labels = batch
    assert torch.equal(module(z, labels), contrastive_loss(z, labels, **kw))
    ref = loop_loss(z, labels, **{k: v for k, v in kw.items() if k != "num_negatives"})
    assert module(z, labels).item() == pytest.approx(ref.item(), abs=1e-12)


def test_subclasses_follow_the_method_table():
    for cls in (SCL, HSCL, UCL, HUCL):
        spec = METHODS[cls.__name__]
        m = cls(beta=1.0) if spec.hard else cls()
        assert isinstance(m, HardContrastiveLoss) and isinstance(m, nn.Module)
        assert m.setting == spec.setting
        assert (m.beta > 0) == spec.hard


BAD_INIT = [
    (lambda: HardContrastiveLoss("weakly"), "setting"),
    (lambda: HardContrastiveLoss("supervised", -1.0), "beta"),
    (lambda: HardContrastiveLoss("supervised", float("nan")), "beta"),
    (lambda: HardContrastiveLoss("supervised", tau=0.0), "tau"),
    (lambda: HardContrastiveLoss("supervised", psi="hinge"), "psi"),
    (lambda: HardContrastiveLoss("supervised", estimator="mc"), "estimator"),
    (lambda: HardContrastiveLoss("supervised", num_negatives=0), "num_negatives"),
    (lambda: HardContrastiveLoss("supervised", num_negatives=2.5), "num_negatives"),
    (lambda: HardContrastiveLoss("supervised", margin=-1.0), "margin"),
    (lambda: HardContrastiveLoss("supervised", reduction="avg"), "reduction"),
    (lambda: HardContrastiveLoss("supervised", self_positive=1), "self_positive"),
    (lambda: HardContrastiveLoss("supervised", self_negative="yes"), "self_negative"),
    (lambda: HardContrastiveLoss("supervised", detach_weights=None), "detach_weights"),
    (lambda: HardContrastiveLoss("supervised", check_inputs=0), "check_inputs"),
    (lambda: HardContrastiveLoss("supervised", num_classes=0), "num_classes"),
    (lambda: HardContrastiveLoss("supervised", estimator="sampled", detach_weights=False), "detach_weights"),
    (lambda: HSCL(beta=0.0), "beta > 0"),
    (lambda: HUCL(beta=-2.0), "beta"),
    (lambda: SCL(beta=1.0), "beta = 0; use HSCL"),
    (lambda: UCL(setting="supervised"), "setting"),
]


@pytest.mark.parametrize("make,word", BAD_INIT, ids=[w for _, w in BAD_INIT])
def test_init_validates_and_names_the_argument(make, word):
    with pytest.raises(ValueError, match=word):
        make()


def test_numpy_scalars_are_accepted():
    m = HSCL(beta=np.float64(2.0), num_negatives=np.int64(16), tau=np.float32(0.5))
    assert m.beta == 2.0 and m.num_negatives == 16 and m.tau == 0.5


def test_extra_repr_and_no_parameters():
    m = HUCL(beta=2.0, estimator="sampled", psi="triplet", margin=0.5, self_negative=False)
    text = repr(m)
    for part in [
        "setting='unsupervised'",
        "beta=2",
        "estimator='sampled'",
        "margin=0.5",
        "self_negative=False",
    ]:
        assert part in text, text
    assert "margin" not in repr(HSCL(beta=1.0))
    assert list(m.parameters()) == [] and m.state_dict() == {}


def test_forward_keywords(batch):
    z, labels = batch
    ids = torch.arange(7).repeat(2)
    lab = torch.cat([labels[:7], labels[:7]])
    m = HSCL(beta=2.0, self_positive=False, estimator="sampled", num_negatives=8)
    a = m(z, lab, positive_groups=ids, generator=torch.Generator().manual_seed(3))
    b = contrastive_loss(
        z,
        lab,
        setting="supervised",
        beta=2.0,
        self_positive=False,
        estimator="sampled",
        num_negatives=8,
        positive_groups=ids,
        generator=torch.Generator().manual_seed(3),
    )
    assert torch.equal(a, b)


def test_module_in_a_training_step(batch):
    z, labels = batch
    head = nn.Linear(5, 3).double()
    loss = HSCL(beta=5.0)(head(z), labels)
    loss.backward()
    assert math.isfinite(loss.item()) and all(torch.isfinite(p.grad).all() for p in head.parameters())


def test_reduction_none_shape(batch):
    z, labels = batch
    out = UCL(reduction="none")(z, labels)
    counts = torch.bincount(labels)
    assert out.shape == (int((counts**2).sum()),)


@pytest.mark.parametrize("cls", [HSCL, HUCL])
def test_beta_beyond_float32_raises_in_forward_and_works_in_float64(cls, ball_batch):
    z, labels = ball_batch(B=10, C=3, seed=8)
    m = cls(beta=1e308)  # a valid float; whether it fits depends on the dtype of the batch
    with pytest.raises(ValueError, match=r"^beta must satisfy beta \+ 1/tau <= 3.40282e\+38"):
        m(z.float(), labels)
    got = m(z, labels)  # float64: the hardest-negative limit (unit-ball z: 1e308 S never overflows)
    ref = loop_loss(z, labels, setting=m.setting, beta=1e308, K=256)
    assert torch.isfinite(got) and got.item() == pytest.approx(ref.item(), rel=1e-9)
