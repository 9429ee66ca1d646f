"""Tests of synthetic/sweep/cost.py: the probe's three costs, the task cost, the makespan."""

from __future__ import annotations

import itertools
import time

import pytest

from synthetic.engine.config import RunConfig
from synthetic.store.schema import recorded_epochs
from synthetic.sweep.cost import TaskCost, estimate, makespan, probe_task, remaining

S, V, T = 0.06, 0.04, 0.01  # seconds: set-up, one evaluation, one optimisation step of the fake trainer


def _fake_train(configs):
    """Sleeps like a task: set-up, one evaluation per recorded epoch, T per optimisation step."""
    c = configs[0]
    # probes keep a rule (its evaluation loss costs time) with zero tolerances: nothing stops them
    assert all(
        x.init == "random" and (x.settle_window == 0 or x.settle_etf == x.settle_gap == 0.0) for x in configs
    )
    time.sleep(S + V * len(recorded_epochs(c.num_epochs, c.eval_every)) + T * c.num_steps)


def test_the_probe_recovers_setup_evaluation_and_epoch():
    cfg = RunConfig(num_classes=4, n_per_class=4, batch_size=8, epochs=80, eval_every=8, settle_window=16)
    assert cfg.steps_per_epoch == 2
    got = probe_task([cfg, cfg.replace(seed=1)], _fake_train)
    assert got.setup == pytest.approx(S, abs=0.02)
    assert got.evaluation == pytest.approx(V, abs=0.02)
    assert got.step == pytest.approx(T, abs=0.003)
    assert got.steps == 160 and got.records == len(recorded_epochs(80, 8)) == 11
    assert got.seconds == pytest.approx(got.setup + 11 * got.evaluation + 160 * got.step)
    with pytest.raises(ValueError, match="steps"):
        probe_task([cfg], _fake_train, steps=0)


def test_first_use_costs_are_not_taken_for_the_task():
    """A trainer whose first call pays a one-time cost (compilation in a fresh clone) is probed as
    one without it: the probe warms it up untimed first."""
    cfg = RunConfig(num_classes=4, n_per_class=4, batch_size=8, epochs=80, eval_every=8, settle_window=16)
    first = []

    def train(configs):
        if not first:
            first.append(True)
            time.sleep(0.3)
        _fake_train(configs)

    got = probe_task([cfg], train)
    assert got.setup == pytest.approx(S, abs=0.02) and got.evaluation == pytest.approx(V, abs=0.02)
    assert got.step == pytest.approx(T, abs=0.003)


def test_a_near_nc_task_adds_its_sources_training():
    cfg = RunConfig(num_classes=4, n_per_class=4, epochs=10, eval_every=5, init="nc", init_epochs=30)
    got = probe_task([cfg, cfg.replace(method="HSCL", beta=2.0)], _fake_train)  # one source
    plain = probe_task(
        [cfg.replace(init="random"), cfg.replace(init="random", method="HSCL", beta=2.0)], _fake_train
    )
    assert got.sources == pytest.approx(30 * T / 2, abs=0.05) and plain.sources == 0.0
    assert got.setup == pytest.approx(plain.setup, abs=0.05)
    assert got.seconds == pytest.approx(
        got.setup + got.sources + got.records * got.evaluation + got.steps * got.step
    )


def test_a_continued_task_costs_its_steps_left():
    """docs/claims.md#extending-a-run: steps already trained by a stored state are not paid again."""
    cfg = RunConfig(num_classes=4, n_per_class=4, batch_size=8, epochs=80, eval_every=8)
    a, b = cfg, cfg.replace(seed=1)
    cost = TaskCost(setup=1.0, evaluation=0.5, step=0.1, steps=160, records=11, sources=3.0)
    assert remaining(cost, [a, b], {}) == pytest.approx(cost.seconds) == pytest.approx(1 + 3 + 5.5 + 16)
    # both continue after 120 of 160 steps: 40 steps, ceil(11 * 40 / 160) = 3 metric steps, no sources
    assert remaining(cost, [a, b], {a.key(): 120, b.key(): 120}) == pytest.approx(1 + 3 * 0.5 + 4)
    # one continues after 120, the other is complete: the first decides
    assert remaining(cost, [a, b], {a.key(): 120, b.key(): None}) == pytest.approx(1 + 1.5 + 4)
    # both complete: the set-up only (the tables are assembled, nothing trained)
    assert remaining(cost, [a, b], {a.key(): None, b.key(): None}) == pytest.approx(1.0)
    # one starts afresh: its whole budget and the sources
    assert remaining(cost, [a, b], {a.key(): 120}) == pytest.approx(cost.seconds)


def _lpt_reference(costs, jobs):
    """Longest first, each to the worker with the least load so far (lowest index on ties)."""
    loads = [0.0] * jobs
    for c in sorted(costs, reverse=True):
        i = min(range(jobs), key=lambda k: (loads[k], k))
        loads[i] += c
    return max(loads)


@pytest.mark.parametrize("jobs", [1, 2, 3, 5])
def test_makespan_is_the_longest_first_schedule(jobs):
    for costs in ([3, 3, 2, 2, 2], [5.0], [], [1, 2, 3, 4, 5, 6, 7], [0.5] * 9):
        assert makespan(costs, jobs) == pytest.approx(_lpt_reference(costs, jobs) if costs else 0.0)
    # never below the optimum nor above the optimum's 4/3 (Graham's bound for this order)
    costs = [7, 5, 4, 4, 3, 3, 2]
    best = min(
        max(sum(c for c, w in zip(costs, ws, strict=True) if w == k) for k in range(2))
        for ws in itertools.product(range(2), repeat=len(costs))
    )
    assert best <= makespan(costs, 2) <= 4 / 3 * best
    with pytest.raises(ValueError, match="jobs"):
        makespan([1.0], 0)


def test_estimate_sums_tasks_and_says_what_it_measured():
    cfg = RunConfig(num_classes=4, n_per_class=4, epochs=4, eval_every=2)
    tasks = [[cfg], [cfg.replace(seed=1)], [cfg.replace(seed=2)]]
    got = estimate(tasks, _fake_train, jobs=2, threads=1)
    one = S + len(recorded_epochs(4, 2)) * V + 4 * T  # full batch: 4 steps
    assert got.core_seconds == pytest.approx(3 * one, rel=0.3)
    assert got.wall_seconds == pytest.approx(2 * one, rel=0.3)
    assert got.tasks == 3 and got.probed == 1 and got.jobs == 2 and got.probe_seconds > 0  # one shape
    other = estimate([[cfg], [cfg.replace(n_per_class=5)]], _fake_train, jobs=1, threads=1)
    assert other.probed == 2 and other.wall_seconds == pytest.approx(other.core_seconds)
    text = got.text()
    assert text.startswith("cost estimate: ") and "core-hours" in text and "on 2 worker(s)" in text
    assert TaskCost(1.0, 0.5, 0.25, 8, 3).seconds == 1.0 + 3 * 0.5 + 8 * 0.25


def test_probes_keep_the_evaluation_loss_of_their_rule():
    """A rule watching the evaluation loss adds work to every metric step: the probe must pay it."""
    from synthetic.sweep.cost import _probe_configs

    cfg = RunConfig(
        num_classes=4, n_per_class=4, batch_size=8, epochs=80, eval_every=8, normalization="ball",
        settle_window=16, settle_loss="eval", init="nc", init_epochs=3,
    )  # fmt: skip
    for p in _probe_configs([cfg], 0) + _probe_configs([cfg], 8):
        assert p.watches_eval_loss and p.init == "random"
        assert (p.settle_etf, p.settle_wcv, p.settle_rank, p.settle_erank, p.settle_gap) == (
            0.0,
            0.0,
            0,
            0.0,
            0.0,
        )
    assert _probe_configs([cfg], 8)[0].max_steps == 8 and _probe_configs([cfg], 0)[0].epochs == 0
