"""Continuing a run from its stored state: a raised budget extends a run instead of starting over.

docs/claims.md#extending-a-run. A run's **lineage** is its config without its budget (``epochs``,
``max_steps``): runs of one lineage follow one trajectory and differ only in where the budget
stops them. The engine (:func:`synthetic.engine.train.train_extend`) ends every run with a
:class:`RunState`: its recorded rows, and, for a run its convergence rule did not stop, everything
the next step needs -- the parameters, Adam's moments and step count(s), the states of the run's
``order`` and ``step`` generators (the ``data``, ``init`` and ``eval`` streams are re-seeded, not
consumed), the mini-batches drawn, and, when a step budget ended the run inside an epoch, the
position in that epoch and its partial loss sum. :func:`resume_for` turns the stored state of
one lineage into a :class:`Resume` of a config with a larger budget:

* a run that **settled** at a recorded epoch ``e`` of the new schedule is complete: its rows are
  the new run's table (the rule stopped it at ``e``, so a larger budget trains nothing more);
* a run that **did not settle** continues from its state: the rows of the new schedule before the
  resume point are kept (a row recorded at the old budget's last epoch off the ``eval_every``
  grid, or inside a cut epoch, is dropped: the longer run does not record it), and training goes
  on from the next step. The continued run draws exactly the numbers, and takes exactly the
  steps, of a run trained with the larger budget from the start (bit for bit when its stack is
  the same; the float rounding of batched products otherwise, as for any stack);
* anything else (another lineage, a smaller budget, a run settled off the new schedule) has no
  resume: the run trains from the start.

States are validated when read (:func:`state_from_blob`); a malformed one is an error the store
turns into "train from the start" (``synthetic.sweep.extend``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from synthetic.store.keys import run_key
from synthetic.store.schema import EPOCH, recorded_epochs

__all__ = [
    "STATE_FORMAT",
    "STATE_VERSION",
    "RunState",
    "Resume",
    "lineage_key",
    "resume_for",
    "state_to_blob",
    "state_from_blob",
]

#: The ``format`` and ``version`` fields of a stored state (a state of another version is ignored).
STATE_FORMAT = "synthetic-run-state"
STATE_VERSION = 1

#: The identity fields that only set the budget (left out of the lineage key).
_BUDGET_FIELDS = ("epochs", "max_steps")


def lineage_key(config: Any) -> str:
    """The key of a run's lineage: its identity (``RunConfig.identity_dict``) less the budget.

    ``eval_every`` enters with the config's own value (the identity caps it at ``epochs``), so two
    budgets share a lineage exactly when they record on the same grid.
    """
    ident = dict(config.identity_dict())
    for f in _BUDGET_FIELDS:
        ident.pop(f, None)
    if ident.get("eval_every") is not None:
        ident["eval_every"] = int(config.eval_every)
    reference = {f.name: f.default for f in dataclasses.fields(config)}
    return run_key({**ident, "lineage_of": "run"}, reference)


@dataclass(frozen=True)
class RunState:
    """Where a run ended (module docstring). Tensors are on the CPU.

    Attributes:
        key: run key of the run that ended here; lineage: its :func:`lineage_key`.
        epoch: the last epoch trained (the last recorded row's epoch); steps: mini-batches drawn.
        settled: the convergence rule stopped the run at ``epoch``.
        rows: the recorded rows (dicts of the metric columns and ``epoch``), in epoch order.
        start_epoch, offset: where training resumes: epoch ``start_epoch``, after its first
            ``offset`` mini-batches (``offset > 0`` only when a step budget cut the epoch).
        partial_loss, partial_skipped: sum of the losses and count of the skipped steps of those
            ``offset`` mini-batches.
        params: the run's ``state_dict`` (the single model's names); empty for a settled run.
        exp_avg, exp_avg_sq: Adam's moments, run ``r``'s slice of each stacked parameter, in the
            stacked model's parameter order.
        adam_step: Adam steps taken by the run; run_adam: the run was updated by the run-wise Adam
            (``synthetic.engine.adam.RunAdam``) when it ended.
        order_state: the ``order`` generator's state at the start of ``start_epoch``;
            step_state: the ``step`` generator's state at the resume point.
    """

    key: str
    lineage: str
    epoch: int
    steps: int
    settled: bool
    rows: tuple[dict, ...]
    start_epoch: int = 0
    offset: int = 0
    partial_loss: float = 0.0
    partial_skipped: int = 0
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    exp_avg: tuple[torch.Tensor, ...] = ()
    exp_avg_sq: tuple[torch.Tensor, ...] = ()
    adam_step: int = 0
    run_adam: bool = False
    order_state: torch.Tensor | None = None
    step_state: torch.Tensor | None = None

    @property
    def resumable(self) -> bool:
        """True when training can go on from this state (a run that did not settle)."""
        return not self.settled and self.order_state is not None


@dataclass(frozen=True)
class Resume:
    """How one config continues from a stored state (:func:`resume_for`).

    Attributes:
        state: the stored state.
        rows: the rows the new run keeps (its schedule's rows before the resume point).
        complete: the kept rows are the whole new run (a settled run): nothing is trained.
    """

    state: RunState
    rows: tuple[dict, ...]
    complete: bool

    @property
    def point(self) -> tuple[int, int] | None:
        """``(start_epoch, offset)``, or None for a complete run: runs of one program share it."""
        return None if self.complete else (self.state.start_epoch, self.state.offset)


def resume_for(config: Any, state: RunState | None) -> Resume | None:
    """How ``config`` continues from ``state``, or None when it must train from the start.

    Args:
        config: a ``RunConfig`` with a convergence rule (``settle_window > 0``).
        state: a stored state (any lineage), or None.

    Returns:
        A complete :class:`Resume` when the state's run settled at an epoch of ``config``'s
        schedule within its budget; a continuing one when it did not settle, ``config``'s budget
        is larger (more mini-batches) and the state's run is of the same lineage; else None.
    """
    if state is None or getattr(config, "settle_window", 0) <= 0 or state.lineage != lineage_key(config):
        return None
    if state.key == config.key():
        return None  # the very run: it is stored, nothing to extend
    schedule = set(recorded_epochs(config.num_epochs, config.eval_every))
    spe = config.steps_per_epoch
    if state.settled:
        e = state.epoch
        whole = state.steps == e * spe  # the rule stopped it at the end of epoch e
        if whole and e in schedule and e * spe <= config.num_steps:
            return Resume(state, state.rows, True)
        return None
    if not state.resumable or config.num_steps <= state.steps:
        return None
    rows = tuple(r for r in state.rows if int(r[EPOCH]) < state.start_epoch and int(r[EPOCH]) in schedule)
    return Resume(state, rows, False)


# ------------------------------------------------------------------------------ storage


def _plain(v: Any) -> Any:
    """A row value as a plain Python value (what ``torch.load(weights_only=True)`` reads)."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    raise ValueError(f"a row value of type {type(v).__name__} cannot be stored in a run state")


def state_to_blob(state: RunState, config: Any) -> dict:
    """The stored form of ``state`` (plain values and CPU tensors; ``config`` for the record)."""
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "key": state.key,
        "lineage": state.lineage,
        "config": {k: _plain(v) for k, v in config.to_dict().items()},
        "epoch": int(state.epoch),
        "steps": int(state.steps),
        "settled": bool(state.settled),
        "rows": [{k: _plain(v) for k, v in r.items()} for r in state.rows],
        "start_epoch": int(state.start_epoch),
        "offset": int(state.offset),
        "partial_loss": float(state.partial_loss),
        "partial_skipped": int(state.partial_skipped),
        "params": {k: v.detach().cpu().clone() for k, v in state.params.items()},
        "exp_avg": [t.detach().cpu().clone() for t in state.exp_avg],
        "exp_avg_sq": [t.detach().cpu().clone() for t in state.exp_avg_sq],
        "adam_step": int(state.adam_step),
        "run_adam": bool(state.run_adam),
        "order_state": None if state.order_state is None else state.order_state.clone(),
        "step_state": None if state.step_state is None else state.step_state.clone(),
    }


def _need(blob: Mapping, name: str, kind: type | tuple[type, ...]) -> Any:
    v = blob.get(name)
    if not isinstance(v, kind) or (isinstance(v, bool) and kind is int):
        raise ValueError(f"run state: field {name!r} must be {kind}, got {type(v).__name__}")
    return v


def state_from_blob(blob: Any) -> RunState:
    """A :class:`RunState` from its stored form, checked field by field.

    Raises:
        ValueError: not a state of this format and version, or a field of the wrong type or
            shape (rows out of epoch order, moments that do not match the parameters, a
            continuing state without generator states, non-finite tensors).
    """
    if not isinstance(blob, Mapping) or blob.get("format") != STATE_FORMAT:
        raise ValueError("not a run state")
    if blob.get("version") != STATE_VERSION:
        raise ValueError(f"run state version {blob.get('version')!r}, expected {STATE_VERSION}")
    rows = _need(blob, "rows", list)
    if not rows or not all(isinstance(r, Mapping) and EPOCH in r for r in rows):
        raise ValueError("run state: rows must be a non-empty list of rows with an epoch")
    epochs = [int(r[EPOCH]) for r in rows]
    if epochs != sorted(set(epochs)) or epochs[0] != 0:
        raise ValueError("run state: rows must start at epoch 0 in increasing epoch order")
    params = _need(blob, "params", dict)
    exp_avg, exp_avg_sq = _need(blob, "exp_avg", list), _need(blob, "exp_avg_sq", list)
    tensors = [*params.values(), *exp_avg, *exp_avg_sq]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError("run state: parameters and moments must be tensors")
    if not all(bool(torch.isfinite(t).all()) for t in tensors):
        raise ValueError("run state: non-finite parameters or moments")
    sizes = sorted(t.numel() for t in params.values())  # the moments are in the stacked model's order
    if sorted(t.numel() for t in exp_avg) != sizes or sorted(t.numel() for t in exp_avg_sq) != sizes:
        raise ValueError("run state: Adam's moments do not match the parameters")
    settled = _need(blob, "settled", bool)
    gens = [blob.get("order_state"), blob.get("step_state")]
    if not settled and not (
        params and all(isinstance(g, torch.Tensor) and g.dtype == torch.uint8 for g in gens)
    ):
        raise ValueError("run state: a run that did not settle needs its parameters and generator states")
    epoch, steps = _need(blob, "epoch", int), _need(blob, "steps", int)
    start, offset = _need(blob, "start_epoch", int), _need(blob, "offset", int)
    if epoch != epochs[-1] or steps < 0 or offset < 0 or (not settled and not 1 <= start <= epoch + 1):
        raise ValueError("run state: inconsistent epoch, steps or resume point")
    partial_loss = float(_need(blob, "partial_loss", (int, float)))
    if not math.isfinite(partial_loss):
        raise ValueError("run state: non-finite partial loss")
    return RunState(
        key=_need(blob, "key", str),
        lineage=_need(blob, "lineage", str),
        epoch=epoch,
        steps=steps,
        settled=settled,
        rows=tuple(dict(r) for r in rows),
        start_epoch=start,
        offset=offset,
        partial_loss=partial_loss,
        partial_skipped=_need(blob, "partial_skipped", int),
        params=dict(params),
        exp_avg=tuple(exp_avg),
        exp_avg_sq=tuple(exp_avg_sq),
        adam_step=_need(blob, "adam_step", int),
        run_adam=_need(blob, "run_adam", bool),
        order_state=gens[0] if isinstance(gens[0], torch.Tensor) else None,
        step_state=gens[1] if isinstance(gens[1], torch.Tensor) else None,
    )


def adam_moments(
    opt: Any, params: Sequence[torch.Tensor], r: int, run_adam: bool
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], int]:
    """Run ``r``'s Adam moments and step count from the engine's optimizer (torch's or RunAdam)."""
    if run_adam:
        return (
            tuple(m[r].detach().clone() for m in opt.exp_avg),
            tuple(v[r].detach().clone() for v in opt.exp_avg_sq),
            int(opt.steps[r]),
        )
    m, v, step = [], [], 0
    for p in params:
        st = opt.state.get(p)
        if st:
            m.append(st["exp_avg"][r].detach().clone())
            v.append(st["exp_avg_sq"][r].detach().clone())
            step = int(st["step"])
        else:  # no step yet
            m.append(torch.zeros_like(p[r]).detach())
            v.append(torch.zeros_like(p[r]).detach())
    return tuple(m), tuple(v), step
