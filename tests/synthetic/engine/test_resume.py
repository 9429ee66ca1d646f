"""Extending a run from its stored state (synthetic.engine.resume, train_extend).

The reference is the obvious one: the same config trained with the larger budget from the start.
A run continued from the state of a shorter budget must give the very same table (bit for bit:
same draws, same steps, same stack), whatever cut the shorter budget made (end of an epoch,
inside an epoch), with skipped steps (the run-wise Adam), an MLP with sampled negatives and noise
positives, near-NC starts, and settled runs (complete at once).
"""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest
import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.resume import (
    STATE_FORMAT,
    Resume,
    lineage_key,
    resume_for,
    state_from_blob,
    state_to_blob,
)
from synthetic.engine.train import train_extend, train_extend_stack
from tests.synthetic.fakes import never_settling_free_run

#: A rule that holds as soon as the window is full.
AT_ONCE = dict(
    settle_window=4, settle_etf=9.0, settle_wcv=9.0, settle_rank=99, settle_erank=99.0, settle_gap=99.0
)


def _roundtrip(state, config):
    """The state as the sweep stores and reads it (torch.save, torch.load(weights_only=True))."""
    buf = io.BytesIO()
    torch.save(state_to_blob(state, config), buf)
    buf.seek(0)
    return state_from_blob(torch.load(buf, weights_only=True))


def _runs(config: RunConfig, n: int) -> list[RunConfig]:
    return [config.replace(seed=s, beta=config.beta + s if config.beta else 0.0) for s in range(n)]


def _extend_equals_straight(short: RunConfig, long: RunConfig, n: int = 1):
    torch.manual_seed(0)
    shorts, longs = _runs(short, n), _runs(long, n)
    straight = train_extend(longs, None)
    first = train_extend(shorts, None)
    resumes = [
        resume_for(lc, _roundtrip(st, sc)) for lc, (_, st), sc in zip(longs, first, shorts, strict=True)
    ]
    assert all(r is not None for r in resumes)
    extended = train_extend(longs, resumes)
    for (a, sa), (b, sb) in zip(straight, extended, strict=True):
        pd.testing.assert_frame_equal(a, b)
        assert (sa.steps, sa.settled, sa.start_epoch, sa.offset) == (
            sb.steps,
            sb.settled,
            sb.start_epoch,
            sb.offset,
        )
    return resumes, extended


FREE = never_settling_free_run(num_classes=4, n_per_class=20, batch_size=16, epochs=12, eval_every=4)


def test_a_run_extended_at_the_end_of_an_epoch_equals_the_longer_run():
    resumes, ext = _extend_equals_straight(FREE, FREE.replace(epochs=21))
    r = resumes[0]
    assert r.point == (13, 0) and not r.complete
    assert [int(row["epoch"]) for row in r.rows] == [0, 4, 8, 12]
    assert list(ext[0][0]["epoch"]) == [0, 4, 8, 12, 16, 20, 21]


def test_a_budget_off_the_grid_drops_its_last_row_and_continues():
    # 10 epochs record 0, 4, 8, 10; a run of 16 epochs does not record epoch 10
    resumes, _ = _extend_equals_straight(FREE.replace(epochs=10), FREE.replace(epochs=16))
    assert [int(row["epoch"]) for row in resumes[0].rows] == [0, 4, 8]
    assert resumes[0].point == (11, 0)


def test_a_step_budget_inside_an_epoch_continues_that_epoch_in_a_stack():
    short, long = FREE.replace(epochs=1, max_steps=33), FREE.replace(epochs=1, max_steps=71)
    assert short.steps_per_epoch == 5 and 33 % 5 and 71 % 5
    resumes, ext = _extend_equals_straight(short, long, n=3)
    assert {r.point for r in resumes} == {(7, 3)}  # 6 whole epochs, then 3 mini-batches of epoch 7
    assert int(ext[0][0]["steps"].iloc[-1]) == 71


def test_skipped_steps_and_the_runwise_adam_continue():
    # SCL with batches of 2 from 2 classes: single-class batches are skipped, some runs settle
    # first (the others then use the run-wise Adam)
    scl = FREE.replace(
        method="SCL", beta=0.0, num_classes=2, n_per_class=10, batch_size=2, epochs=8, eval_every=2,
        normalization="sphere",
    )  # fmt: skip
    resumes, ext = _extend_equals_straight(scl, scl.replace(epochs=14), n=3)
    assert any(int(t["skipped_steps"].sum()) > 0 for t, _ in ext)
    assert all(r.state.run_adam for r in resumes if not r.complete)


def test_an_mlp_with_sampled_negatives_and_noise_positives_continues():
    mlp = FREE.replace(
        method="HUCL", beta=5.0, encoder="mlp", hidden=16, num_classes=3, batch_size=20, lr=1e-3,
        epochs=6, eval_every=2, estimator="sampled", num_negatives=8, positives="noise", noise_std=0.1,
    )  # fmt: skip
    _extend_equals_straight(mlp, mlp.replace(epochs=10), n=2)


def test_a_near_nc_run_continues_without_its_source():
    nc = FREE.replace(
        method="UCL", beta=0.0, num_classes=3, n_per_class=10, batch_size=10, epochs=4, eval_every=2,
        init="nc", init_method="HSCL", init_beta=5.0, init_epochs=3,
    )  # fmt: skip
    _extend_equals_straight(nc, nc.replace(epochs=8), n=2)


def test_a_settled_run_is_complete_for_a_larger_budget():
    cfg = FREE.replace(batch_size=0, epochs=40, **AT_ONCE)
    resumes, ext = _extend_equals_straight(cfg, cfg.replace(epochs=400))
    assert resumes[0].complete and resumes[0].point is None
    assert bool(ext[0][0]["settled"].iloc[-1]) and int(ext[0][0]["epoch"].iloc[-1]) < 40


def test_what_cannot_be_extended_trains_from_the_start():
    ((_, st),) = train_extend([FREE], None)
    assert resume_for(FREE, st) is None  # the very run
    assert resume_for(FREE.replace(epochs=8), st) is None  # a smaller budget
    assert resume_for(FREE.replace(epochs=20, lr=0.01), st) is None  # another lineage
    assert resume_for(FREE.replace(epochs=20, eval_every=5), st) is None  # another grid of rows
    assert resume_for(FREE.replace(epochs=20, settle_window=0), st) is None  # no rule
    assert resume_for(FREE.replace(epochs=20), None) is None
    assert lineage_key(FREE) == lineage_key(FREE.replace(epochs=99)) == lineage_key(FREE.replace(max_steps=7))
    assert lineage_key(FREE) != lineage_key(FREE.replace(seed=1))
    # settled at a multiple of 4 but the longer run records every 3 epochs: not one of its rows
    settled = FREE.replace(batch_size=0, epochs=40, **AT_ONCE)
    ((_, s2),) = train_extend([settled], None)
    assert s2.settled and s2.epoch % 3 and resume_for(settled.replace(epochs=80), s2).complete
    assert resume_for(settled.replace(epochs=80, eval_every=3), s2) is None


def test_runs_resuming_from_different_points_do_not_share_a_program():
    ((_, a),) = train_extend([FREE.replace(epochs=8)], None)
    ((_, b),) = train_extend([FREE.replace(epochs=12, seed=1)], None)
    longs = [FREE.replace(epochs=16), FREE.replace(epochs=16, seed=1)]
    ra, rb = resume_for(longs[0], a), resume_for(longs[1], b)
    with pytest.raises(ValueError, match="one point"):
        train_extend(longs, [ra, rb])
    with pytest.raises(ValueError, match="one point"):
        train_extend(longs, [ra, None])
    # train_extend_stack plans them; the sweep splits them (synthetic.sweep.extend.split_tasks)
    with pytest.raises(ValueError, match="resumes"):
        train_extend_stack(longs, [ra])


def _blob():
    ((_, st),) = train_extend([FREE.replace(epochs=4)], None)
    return state_to_blob(st, FREE.replace(epochs=4))


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda b: b.update(format="other"), "not a run state"),
        (lambda b: b.update(version=99), "version"),
        (lambda b: b["rows"].reverse(), "epoch order"),
        (lambda b: b.update(rows=[]), "rows"),
        (lambda b: next(iter(b["params"].values())).fill_(math.nan), "non-finite"),
        (lambda b: b["exp_avg"].pop(), "moments"),
        (lambda b: b.update(order_state=None), "generator states"),
        (lambda b: b.update(epoch=99), "inconsistent"),
        (lambda b: b.update(steps="12"), "steps"),
        (lambda b: b.update(partial_loss=math.inf), "partial loss"),
    ],
)
def test_a_malformed_state_is_rejected(corrupt, match):
    blob = _blob()
    corrupt(blob)
    with pytest.raises(ValueError, match=match):
        state_from_blob(blob)


def test_resume_objects_and_states_are_validated():
    assert _blob()["format"] == STATE_FORMAT
    with pytest.raises(ValueError, match="resumes"):
        train_extend([FREE], ["not a resume"])  # type: ignore[list-item]
    st = state_from_blob(_blob())
    wrong = FREE.replace(num_classes=5)  # another model shape
    with pytest.raises(ValueError, match="does not fit"):
        train_extend([wrong], [Resume(st, st.rows, False)])
