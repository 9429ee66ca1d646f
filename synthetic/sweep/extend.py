"""Extending a sweep's runs: the stored states of a results folder (docs/claims.md#extending-a-run).

Every run the engine trains ends in a :class:`synthetic.engine.resume.RunState`; the sweep keeps
the longest one of each lineage (a run's config less its budget) as ``states/<lineage>.pt``
beside the run files. When a sweep is asked for a run with a larger budget (``--epochs``,
``--max-steps``, a grid file with a raised budget) whose lineage has a stored state, the run is
not trained from the start: a run that settled within the new budget is complete at once, one
that did not continues from its last step (:func:`synthetic.engine.resume.resume_for`). The
continued runs of one stacked group are trained together when they resume from the same point
(:func:`split_tasks`).

States are read with ``torch.load(weights_only=True)`` (nothing in a results folder can run
code) and checked field by field (:func:`synthetic.engine.resume.state_from_blob`); a state file
that cannot be read, is of another lineage or version, or is malformed is set aside in
``quarantine/`` and the run trains from the start. Only the sweep's process writes the folder: the
workers send their states back with their tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synthetic.store.folders import QUARANTINE_SUBDIR, atomic_write, set_aside

__all__ = ["STATES_SUBDIR", "state_path", "find_resumes", "split_tasks", "store_state"]

#: Subfolder of a results folder holding one state per lineage.
STATES_SUBDIR = "states"


def state_path(results: Path, lineage: str) -> Path:
    """``<results>/states/<lineage>.pt``."""
    return Path(results) / STATES_SUBDIR / f"{lineage}.pt"


def _read(path: Path, lineage: str) -> Any:
    """The state stored at ``path``, or the reason it cannot be used (a string)."""
    # lazy: torch and the engine are needed only by a sweep that trains with stored states
    import torch

    from synthetic.engine.resume import state_from_blob

    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        state = state_from_blob(blob)
    except Exception as exc:  # any unreadable or malformed file is set aside, never trusted
        return f"unreadable run state ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    if state.lineage != lineage:
        return f"run state of lineage {state.lineage}, not {lineage}"
    return state


def find_resumes(results: Path, configs: Sequence[Any]) -> tuple[dict[str, Any], list[str], dict[str, int]]:
    """The resumes of ``configs`` (the runs a sweep must train) from the folder's stored states.

    Returns:
        ``({run key: Resume}, set_aside, {lineage: steps})``: a
        :class:`synthetic.engine.resume.Resume` for each config that continues (or is complete)
        from its lineage's state, ``"<path>: <reason>"`` for each state file set aside, and the
        steps of every lineage's usable stored state (what :func:`store_state` compares with).
    """
    # lazy: see _read
    from synthetic.engine.resume import lineage_key, resume_for

    out: dict[str, Any] = {}
    notes: list[str] = []
    cache: dict[str, Any] = {}
    for c in configs:
        if getattr(c, "settle_window", 0) <= 0:
            continue
        lin = lineage_key(c)
        if lin not in cache:
            path = state_path(results, lin)
            got = _read(path, lin) if path.is_file() else None
            if isinstance(got, str):
                notes.append(f"{path}: {got}")
                try:
                    set_aside(path, Path(results) / QUARANTINE_SUBDIR, got)
                except OSError:
                    pass  # left in place: it is read, and set aside, again next time
                got = None
            cache[lin] = got
        res = resume_for(c, cache[lin])
        if res is not None:
            out[c.key()] = res
    return out, notes, {lin: st.steps for lin, st in cache.items() if st is not None}


def split_tasks(tasks: Sequence[Sequence[Any]], resumes: Mapping[str, Any]) -> list[list[Any]]:
    """Each task split by where its runs start: from the beginning, from one resume point, complete.

    The runs of one stacked program share a start (:func:`synthetic.engine.train.train_extend`);
    the order of the runs within each part is kept.
    """
    out: list[list[Any]] = []
    for task in tasks:
        parts: dict[Any, list[Any]] = {}
        for c in task:
            res = resumes.get(c.key())
            where = "start" if res is None else ("complete" if res.complete else res.point)
            parts.setdefault(where, []).append(c)
        out.extend(parts.values())
    return out


def store_state(results: Path, config: Any, state: Any, stored: dict[str, int]) -> bool:
    """Keep ``state`` as its lineage's state unless the stored one went further (more steps).

    ``stored``: the steps of the lineages' stored states, as :func:`find_resumes` read them at the
    start of the sweep (the sweep's lock keeps them current); updated when a state is written.

    Returns:
        True when the file was written.
    """
    # lazy: see _read
    import torch

    from synthetic.engine.resume import state_to_blob

    if getattr(config, "settle_window", 0) <= 0:
        return False  # a run without a rule is never extended (its budget is its definition)
    if stored.get(state.lineage, -1) > state.steps:
        return False
    blob = state_to_blob(state, config)
    atomic_write(state_path(results, state.lineage), lambda fh: torch.save(blob, fh))
    stored[state.lineage] = state.steps
    return True
