"""The figures cache cannot lie: a cached file is a hit only when it is complete and unchanged.

Observed: a ``noise_floor.csv`` cut mid-line was read as a cache hit (its last row NaN), the job
exited 0 and W5 flipped to NOT REPRODUCED with "softmax bias² floor = nan"; a garbage
``claims.json`` made the theory stage fail on every later run.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from figures.pipeline.cache import StageCache
from figures.pipeline.context import Context
from figures.pipeline.stages import TheoryStage, WeinceStage
from figures.pipeline.w5 import w5_claim
from figures.plots import registry
from theory import claims


class Counter:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *a, **k):
        self.calls += 1
        return self.fn(*a, **k)


def _damage(path, how: str) -> None:
    """Damage a cached file the ways a disk, a kill of an older writer or a hand edit do."""
    data = path.read_bytes()
    if how == "midline":  # cut inside the last row
        data = data[: len(data) - 5]
    elif how == "last_row":  # cut at a line boundary: the last row is gone, every line whole
        data = b"".join(data.splitlines(keepends=True)[:-1])
    elif how == "empty":
        data = b""
    elif how == "garbage":
        data = b'\x00\x01garbage,,\n"unclosed'
    elif how == "edited":  # the same length and structure, one digit changed
        i = data.rindex(b"0.0")
        data = data[:i] + b"9.0" + data[i + 3 :]
    elif how == "no_record":  # a file whose completeness record is gone
        path.with_name(path.name + ".record.json").unlink()
        return
    path.write_bytes(data)


HOWS = ["midline", "last_row", "empty", "garbage", "edited", "no_record"]


@pytest.mark.parametrize("how", HOWS)
def test_a_damaged_noise_floor_is_named_set_aside_and_recomputed(tmp_path, theory_tables, how):
    table = theory_tables["noise_floor"]
    want = w5_claim(table, scale="quick", results=str(tmp_path / "res"))  # judged from the producer's table
    producer = Counter(lambda scale, seed: table)

    def run():
        ctx = Context(
            scale="quick",
            results=tmp_path / "res",
            out=tmp_path / "out",
            figures=[registry.get("noise_floor")],
        )
        detail = WeinceStage(noise_floor=producer).run(ctx)
        return ctx, detail

    ctx, _ = run()
    entry = ctx.cache("weince").folder
    victim = entry / "noise_floor.csv"
    assert producer.calls == 1 and victim.is_file()
    _damage(victim, how)

    ctx, detail = run()
    assert producer.calls == 2, "a damaged cache file was taken as a hit"
    pd.testing.assert_frame_equal(ctx.tables["noise_floor"], table, check_dtype=False)
    (w5,) = ctx.records
    assert w5.verdict == want.verdict
    assert [e.value for e in w5.evidence] == pytest.approx([e.value for e in want.evidence], nan_ok=True)
    # named in the stage's one line, moved (not deleted) with a note saying why
    assert "set aside 1 bad cached file(s)" in detail and "noise_floor.csv" in detail, detail
    moved = list((entry / "quarantine").glob("*-noise_floor.csv"))
    assert len(moved) == 1 and moved[0].with_name(moved[0].name + ".why").is_file()
    # healed: the next run is a plain hit
    ctx, detail = run()
    assert producer.calls == 2 and "set aside" not in detail and "cached" in detail


def _checks(scale, seed):
    sub = claims.SubCheck.tolerance("x", 0.0, 1e-9)
    return [claims.Claim.from_subchecks(cid, [sub], command="python -m theory") for cid in claims.CHECK_IDS]


@pytest.mark.parametrize("how", ["midline", "garbage", "no_record"])
def test_a_damaged_theory_cache_heals_on_the_next_run(tmp_path, how):
    checks = Counter(_checks)
    want = [c.verdict for c in _checks("quick", 0)]

    def run():
        ctx = Context(scale="quick", results=tmp_path / "res", out=tmp_path / "out", figures=[])
        return ctx, TheoryStage(checks=checks, tables={}).run(ctx)

    ctx, _ = run()
    victim = ctx.cache("theory").folder / "claims.json"
    _damage(victim, how)
    ctx, detail = run()
    assert checks.calls == 2 and [r.verdict for r in ctx.records] == want
    assert "claims.json" in detail and "set aside" in detail
    assert json.loads(victim.read_text()) and run()[1].startswith(f"{len(want)} PASS; cached")


def test_cache_entries_round_trip_and_carry_a_record(tmp_path):
    c = StageCache(tmp_path, "theory", "quick", "0" * 64)
    t = pd.DataFrame({"a": [0.1, 1 / 3, 2.0**-40], "b": ["x", "y", "z"]})
    c.write_table("t", t)
    c.write_text("claims.json", "[]\n")
    pd.testing.assert_frame_equal(c.read_table("t"), t)
    assert c.read_text("claims.json") == "[]\n" and c.describe() == "cached"
    record = json.loads((c.folder / "t.csv.record.json").read_text())
    assert record["rows"] == 3 and record["bytes"] == (c.folder / "t.csv").stat().st_size
    # a record whose file never came (a kill between the two writes) is a plain miss
    (c.folder / "t.csv").unlink()
    assert c.read_table("t") is None and c.set_aside == []
    with pytest.raises(ValueError, match="name"):
        c.read_text("t.csv.record.json")  # a record is not an entry


def test_a_bad_file_that_cannot_be_set_aside_says_which_flag_heals_it(tmp_path, monkeypatch):
    from figures.pipeline import cache as cache_mod

    c = StageCache(tmp_path, "weince", "quick", "0" * 64)
    c.write_table("noise_floor", pd.DataFrame({"n": [1, 2]}))
    _damage(c.folder / "noise_floor.csv", "midline")

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache_mod, "set_aside", refuse)
    with pytest.raises(OSError, match="--refresh") as err:
        c.read_table("noise_floor")
    assert "noise_floor.csv" in str(err.value) and "truncated" in str(err.value)
