"""theory.options: one source of option literals and defaults, used everywhere."""

from __future__ import annotations

import inspect

import pytest

from theory import options
from theory.hcl import contrastive_loss, hucl_at_nc, make_psi, scl_optimum, ucl_optimum
from theory.hcl.symbolic import hucl_at_nc_expr, ucl_optimum_expr
from theory.infonce import info_nce
from theory.validation import one_of
from theory.weince import weince_loss


def test_literals_and_method_table():
    assert options.SETTINGS == ("supervised", "unsupervised")
    assert options.PSI_FORMS == ("mean", "sum", "triplet")
    assert options.ESTIMATORS == ("expectation", "sampled")
    assert options.NORMALIZATIONS == ("none", "ball", "sphere")
    assert options.HARDENINGS == ("exponential", "step", "polynomial")
    assert options.RECIPES == ("core", "released")
    assert options.METHODS["HSCL"][:2] == ("supervised", True) and options.METHODS["UCL"].hard is False
    assert options.HCL_METHODS == ("SCL", "HSCL", "UCL", "HUCL")
    assert options.TWO_VIEW_METHODS == ("InfoNCE", "WeiNCE")
    assert all(options.METHODS[m].setting in options.SETTINGS for m in options.HCL_METHODS)


def _default(fn, name):
    return inspect.signature(fn).parameters[name].default


def test_same_defaults_everywhere():
    for fn in (contrastive_loss, scl_optimum, ucl_optimum, hucl_at_nc, ucl_optimum_expr, hucl_at_nc_expr):
        assert _default(fn, "num_negatives") == options.NUM_NEGATIVES == 256, fn
        assert _default(fn, "tau") == options.HCL_TAU == 1.0, fn
        assert _default(fn, "margin") == options.MARGIN, fn
    assert _default(make_psi, "tau") == options.HCL_TAU
    assert _default(info_nce, "tau") == _default(weince_loss, "tau") == options.WEINCE_TAU == 0.5


def test_one_of_message():
    assert one_of("psi", "sum", options.PSI_FORMS) == "sum"
    assert one_of("method", "HUCL", options.METHODS) == "HUCL"
    with pytest.raises(ValueError, match=r"^psi must be one of \('mean', 'sum', 'triplet'\), got 'max'$"):
        one_of("psi", "max", options.PSI_FORMS)
    with pytest.raises(ValueError, match="method must be one of"):
        one_of("method", ["SCL"], options.METHODS)  # unhashable: rejected, not a TypeError


def test_the_authors_recipes_in_the_method_table():
    m = options.METHODS
    for name in options.HCL_METHODS:
        assert (m[name].views, m[name].head, m[name].normalization, m[name].tau, m[name].lr) == (
            "label",
            "hcl",
            "ball",
            options.HCL_TAU,
            1e-3,
        )
    assert m["UCL"].weight_decay == m["HUCL"].weight_decay == 1e-6 and m["SCL"].weight_decay == 0.0
    for name in options.TWO_VIEW_METHODS:
        assert (m[name].views, m[name].head, m[name].normalization, m[name].tau, m[name].lr) == (
            "simclr",
            "weince",
            "sphere",
            options.WEINCE_TAU,
            3e-4,
        )
    for spec in m.values():
        assert spec.views in options.VIEWS and spec.head in options.HEADS
        assert spec.normalization in options.NORMALIZATIONS


def test_every_two_view_method_has_its_loss():
    import torch

    from theory.two_view import TWO_VIEW_LOSSES, two_view_loss

    assert set(TWO_VIEW_LOSSES) == set(options.TWO_VIEW_METHODS)
    z1, z2 = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    assert float(two_view_loss("InfoNCE", z1, z2, tau=0.5)) == float(info_nce(z1, z2, tau=0.5))
    assert float(two_view_loss("WeiNCE", z1, z2, tau=0.5)) == float(weince_loss(z1, z2, tau=0.5))
    with pytest.raises(ValueError, match="method"):
        two_view_loss("HSCL", z1, z2, tau=0.5)
