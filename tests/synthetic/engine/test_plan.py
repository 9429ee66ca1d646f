"""Tests of synthetic/engine/plan.py (stack keys, groups, modes) and of training a planned group."""

from __future__ import annotations

import pytest

from synthetic.engine.config import RunConfig
from synthetic.engine.plan import MIN_GAIN, Group, plan, stack_gain, stack_groups, stack_key, step_flop
from synthetic.engine.train import train_group, train_stack


def stackable(runs):
    return bool(runs) and len({stack_key(r) for r in runs}) == 1


def test_stack_key_families():
    base = RunConfig(num_classes=4)
    runs = [
        base,
        base.replace(seed=1),
        base.replace(method="HSCL", beta=2.0),
        base.replace(method="UCL"),
        base.replace(method="HUCL", beta=1.0, seed=4),
        base.replace(lr=0.01),
        base.replace(method="InfoNCE"),
        base.replace(method="WeiNCE"),
    ]
    assert stackable(runs[:5])  # SCL/HSCL/UCL/HUCL share one stack
    assert not stackable([runs[0], runs[5]]) and not stackable(runs[6:]) and not stackable([])
    assert stack_key(runs[0]) == stack_key(runs[3]) != stack_key(runs[6])
    with pytest.raises(ValueError):
        stack_key("x")


def test_plan_groups_every_config_once_and_keeps_sources_together():
    base = RunConfig(num_classes=4, init="nc", init_epochs=2)
    runs = [
        base.replace(method=m, beta=b, seed=s)
        for s in range(3)
        for m, b in (("SCL", 0.0), ("HSCL", 2.0), ("HUCL", 5.0))
    ]
    groups = plan(runs, max_stack=4)
    assert sorted(c.key() for g in groups for c in g.configs) == sorted(c.key() for c in runs)
    for g in groups:  # a source's runs never split; one source per chunk here (3 + 3 > 4)
        assert len({c.source_config().key() for c in g.configs}) == 1 and len(g) == 3
    plain = [RunConfig(num_classes=4, seed=s, batch_size=8) for s in range(5)]
    assert [(len(g), g.mode) for g in plan(plain, max_stack=2)] == [(2, "stacked")] * 2 + [(1, "sequential")]
    unstacked = plan(plain, stack=False)
    assert all(g.mode == "sequential" for g in unstacked) and [len(g) for g in unstacked] == [1] * 5
    with pytest.raises(ValueError, match="max_stack"):
        plan(plain, max_stack=0)
    assert [len(g) for g in stack_groups(plain, max_stack=3)] == [3, 2]
    # the sources' runs stay together even when the group is not stacked
    assert all(len(g) == 3 for g in plan(runs, max_stack=4, stack=False))


def test_modes_follow_the_cost_model():
    small = RunConfig(num_classes=10, n_per_class=50, batch_size=64)
    big = RunConfig(num_classes=20, n_per_class=50, batch_size=0)  # full batch of 1000
    assert step_flop(big) > 100 * step_flop(small)
    assert stack_gain(small, 16) > 4 and stack_gain(big, 16) < MIN_GAIN
    assert stack_gain(small, 1) == pytest.approx(1.0)
    assert plan([small.replace(seed=s) for s in range(4)])[0].mode == "stacked"
    assert plan([big.replace(seed=s) for s in range(4)])[0].mode == "sequential"
    sampled = small.replace(estimator="sampled")
    assert stack_gain(sampled, 16) < stack_gain(small, 16)
    with pytest.raises(ValueError):
        Group((small,), "parallel", 1.0)


def test_train_group_and_train_stack_return_tables_in_order():
    runs = [RunConfig(num_classes=3, n_per_class=4, epochs=2, seed=s, dtype="float64") for s in range(3)]
    for g in plan(runs):
        tables = train_group(g)
        assert [t["run_key"].iloc[0] for t in tables] == [c.key() for c in g.configs]
    out = train_stack(runs[::-1])
    assert [t["seed"].iloc[0] for t in out] == [2, 1, 0]
    with pytest.raises(ValueError, match="lr"):
        train_stack([runs[0], runs[0].replace(lr=0.1)])
    with pytest.raises(ValueError, match="non-empty"):
        train_stack([])
