"""GateConfig / ReleasedConfig: validation naming the field, one place for the defaults."""

from __future__ import annotations

import dataclasses
import inspect
import math

import numpy as np
import pytest

from theory.weince import GateConfig, ReleasedConfig, WeiNCELoss, weince_gate, weince_label_loss, weince_loss
from theory.weince.config import DEFAULT_GATE, DEFAULT_RELEASED
from theory.weince.tails import tail_aic_fit, tail_aic_fits

GATE_FIELDS = ("q", "tail_frac", "min_tail", "margin", "kappa_rho", "kappa_aic", "eps")


def test_gate_defaults_are_the_authors():
    g = GateConfig()
    assert tuple(f.name for f in dataclasses.fields(g)) == GATE_FIELDS
    assert (g.q, g.tail_frac, g.min_tail, g.margin, g.kappa_rho, g.kappa_aic, g.eps) == (
        0.2,
        0.1,
        32,
        2.0,
        10.0,
        1.0,
        1e-6,
    )
    assert g == DEFAULT_GATE and hash(g) == hash(DEFAULT_GATE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.q = 0.3  # type: ignore[misc]


def test_released_defaults_are_the_released_script():
    r = ReleasedConfig()
    assert (r.weib_weight, r.weib_top_m, r.pl_weight, r.pl_top_m) == (0.5, 50, 0.5, 50)
    assert (r.beta_init, r.auto_beta, r.momentum, r.r2_min, r.beta_min, r.beta_max) == (
        4.0,
        True,
        0.9,
        0.85,
        0.5,
        16.0,
    )
    assert (r.beta_tail_frac, r.beta_min_tail) == (0.05, 1024)
    assert r == DEFAULT_RELEASED


BAD_GATES = [
    ("q", 1.5),
    ("q", -0.1),
    ("q", math.nan),
    ("tail_frac", -1.0),
    ("min_tail", -2),
    ("min_tail", 3.0),
    ("min_tail", True),
    ("margin", math.nan),
    ("margin", "2"),
    ("kappa_rho", -1.0),
    ("kappa_aic", math.nan),
    ("kappa_aic", math.inf),
    ("eps", 0.0),
    ("eps", 0.7),
]


@pytest.mark.parametrize("field,value", BAD_GATES, ids=[f"{f}={v!r}" for f, v in BAD_GATES])
def test_gate_config_rejects_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        GateConfig(**{field: value})


BAD_RELEASED = [
    ("weib_weight", -0.5),
    ("weib_top_m", 0),
    ("pl_weight", math.inf),
    ("pl_top_m", 2.5),
    ("beta_init", 0.0),
    ("auto_beta", 1),
    ("momentum", 1.5),
    ("r2_min", -0.1),
    ("beta_min", 0.0),
    ("beta_max", 0.1),  # below beta_min = 0.5
    ("beta_tail_frac", 2.0),
    ("beta_min_tail", 0),
]


@pytest.mark.parametrize("field,value", BAD_RELEASED, ids=[f"{f}={v!r}" for f, v in BAD_RELEASED])
def test_released_config_rejects_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        ReleasedConfig(**{field: value})


def test_numpy_scalars_are_normalised():
    g = GateConfig(q=np.float32(0.25), min_tail=np.int64(16), margin=math.inf)
    assert type(g.q) is float and type(g.min_tail) is int and g.margin == math.inf
    assert g == GateConfig(q=0.25, min_tail=16, margin=math.inf)


@pytest.mark.parametrize(
    "fn", [weince_gate, weince_loss, weince_label_loss, WeiNCELoss.__init__, tail_aic_fit, tail_aic_fits]
)
def test_no_entry_point_spells_out_the_gate_parameters(fn):
    params = inspect.signature(fn).parameters
    assert not set(params) & set(GATE_FIELDS), sorted(set(params) & set(GATE_FIELDS))
    assert params["gate"].default is DEFAULT_GATE


def test_the_lower_level_defaults_come_from_the_gate_config():
    from theory.weince import link_select, rho0_index, tail_fits, tail_size, tlambda_logits, tlambda_loglik

    d = GateConfig()
    sig = {
        f: inspect.signature(f).parameters
        for f in (tail_size, rho0_index, tail_fits, tlambda_logits, tlambda_loglik, link_select)
    }
    assert (
        sig[tail_size]["tail_frac"].default == d.tail_frac
        and sig[tail_size]["min_tail"].default == d.min_tail
    )
    assert sig[rho0_index]["q"].default == d.q
    for f in (tail_fits, tlambda_logits, tlambda_loglik, link_select):
        assert sig[f]["eps"].default == d.eps, f.__name__
