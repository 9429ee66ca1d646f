"""A sweep with a raised budget continues its stored runs (synthetic.sweep.extend).

Reference: a fresh sweep of the same configs with the larger budget; the extended sweep's run
files must be byte-identical to it. Bad state files are set aside and never executed.
"""

from __future__ import annotations

import os
import pickle

import pandas as pd
import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.resume import lineage_key
from synthetic.sweep import run as sw
from synthetic.sweep.extend import STATES_SUBDIR, find_resumes, split_tasks, state_path
from tests.synthetic.fakes import never_settling_free_run


def _grid(epochs: int, max_steps: int = 0) -> list[RunConfig]:
    base = never_settling_free_run(
        num_classes=3, n_per_class=10, batch_size=10, epochs=epochs, max_steps=max_steps, eval_every=2
    )
    return [base.replace(seed=s, beta=b) for s in (0, 1) for b in (1.0, 2.0)]


def _run_files(folder) -> dict[str, bytes]:
    runs = folder / "runs"
    return {p.name: p.read_bytes() for p in sorted(runs.glob("*.csv"))}


def test_a_raised_budget_continues_the_stored_runs(tmp_path):
    a = sw.run_sweep(_grid(4), tmp_path / "a", progress=False)
    assert a.ok and a.resumed == 0
    assert len(list((tmp_path / "a" / STATES_SUBDIR).glob("*.pt"))) == 4
    b = sw.run_sweep(_grid(10), tmp_path / "a", progress=False)
    assert b.ok and b.n_done == 4 and b.resumed == 4 and b.complete == 0
    assert "continued from a stored state" in b.format()
    fresh = sw.run_sweep(_grid(10), tmp_path / "fresh", progress=False)
    assert fresh.resumed == 0
    files = _run_files(tmp_path / "fresh")
    assert {k: v for k, v in _run_files(tmp_path / "a").items() if k in files} == files


def test_stacked_runs_continue_up_to_the_rounding_of_their_stack(tmp_path):
    # the first epochs ran in a stack ordered by the shorter budget's keys: batched products may
    # round differently from the longer sweep's stack, so the tables agree up to float32 rounding
    sw.run_sweep(_grid(4), tmp_path / "a", stack=True, progress=False)
    b = sw.run_sweep(_grid(10), tmp_path / "a", stack=True, progress=False)
    fresh = sw.run_sweep(_grid(10), tmp_path / "fresh", stack=True, progress=False)
    assert b.resumed == 4
    keys = sorted(c.key() for c in _grid(10))
    x = b.table[b.table["run_key"].isin(keys)].sort_values(["run_key", "epoch"]).reset_index(drop=True)
    y = fresh.table.sort_values(["run_key", "epoch"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(x, y, check_exact=False, rtol=1e-4, atol=1e-5)
    # a step budget inside an epoch (3 steps per epoch), then a larger one, without stacking
    c = sw.run_sweep(_grid(1, max_steps=14), tmp_path / "c", progress=False)
    d = sw.run_sweep(_grid(1, max_steps=25), tmp_path / "c", progress=False)
    assert c.ok and d.ok and d.resumed == 4
    ref = sw.run_sweep(_grid(1, max_steps=25), tmp_path / "ref", progress=False)
    files = _run_files(tmp_path / "ref")
    assert ref.ok and {k: v for k, v in _run_files(tmp_path / "c").items() if k in files} == files


def test_a_shorter_budget_keeps_the_longer_state(tmp_path):
    sw.run_sweep(_grid(8), tmp_path, progress=False)
    c = _grid(8)[0]
    path = state_path(tmp_path, lineage_key(c))
    before = path.read_bytes()
    s = sw.run_sweep(_grid(4), tmp_path, progress=False)  # trains from the start, keeps epoch 8's state
    assert s.resumed == 0 and path.read_bytes() == before


def test_resumes_are_split_by_their_start(tmp_path):
    sw.run_sweep(_grid(4)[:2], tmp_path, progress=False)
    longer = _grid(8)
    resumes, notes, stored = find_resumes(tmp_path, longer)
    assert len(resumes) == 2 and not notes
    assert sorted(stored.values()) == [4 * 3, 4 * 3]  # two lineages' states, 4 epochs of 3 steps
    parts = split_tasks([longer], resumes)
    assert sorted(len(p) for p in parts) == [2, 2]
    assert all(len({resumes.get(c.key()) is None for c in p}) == 1 for p in parts)


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))


def test_bad_state_files_are_set_aside_and_never_run(tmp_path):
    sw.run_sweep(_grid(4), tmp_path, progress=False)
    configs = _grid(4)
    paths = [state_path(tmp_path, lineage_key(c)) for c in configs]
    marker = tmp_path / "executed"
    _Payload.marker = str(marker)
    paths[0].write_bytes(pickle.dumps(_Payload(), protocol=2))  # code in a pickle
    paths[1].write_bytes(b"not a torch file")
    blob = torch.load(paths[2], weights_only=True)
    blob["lineage"] = "0" * 16  # another lineage's state under this name
    torch.save(blob, paths[2])
    s = sw.run_sweep(_grid(10), tmp_path, progress=False)
    assert not marker.exists()
    assert s.ok and s.resumed == 1  # only the intact fourth state was used
    assert len([q for q in s.quarantined if "run state" in q]) == 3
    assert len(list((tmp_path / "quarantine").glob("*.pt"))) == 3
    assert sw.run_sweep(_grid(10), tmp_path / "ref", progress=False).ok
    files = _run_files(tmp_path / "ref")
    assert {k: v for k, v in _run_files(tmp_path).items() if k in files} == files
