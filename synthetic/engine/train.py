"""The one training engine of the synthetic study: R runs of one shape in one tensor program.

:func:`train_runs` trains R >= 1 runs (``synthetic.engine.config.RunConfig``) with Adam and returns one
tidy table per run (the layout of :mod:`synthetic.store.read`); a single run is the R = 1 case
(``synthetic.engine.train.train_run``). The parameters of the R runs are stacked along a leading run
dimension (``synthetic.engine.models.StackedModel``: weights ``(R, in, out)``, ``torch.baddbmm``), their
mini-batches are ``(R, B)`` index tensors, their losses come from one run-batched objective
(:mod:`synthetic.engine.objective`), their R losses are summed before ``backward`` (run r's parameters
receive exactly run r's gradient), and one Adam updates them (``torch.optim.Adam``, element-wise
and hence run by run; :class:`synthetic.engine.adam.RunAdam` once some runs skip a step). The metric
step is :mod:`synthetic.engine.evaluation`. Which runs are stacked together, and whether a group is
stacked at all, is decided by :func:`synthetic.engine.plan.plan`.

**Epochs.** Row ``epoch = 0`` is the initialisation (before any update; ``loss`` NaN); row
``epoch = e`` the state after ``e`` epochs. Rows at epoch 0, every ``eval_every`` epochs and at
the last epoch. With a step budget (``steps > 0``) the run draws exactly ``steps`` mini-batches
and its last epoch is cut short; the ``steps`` column counts the mini-batches drawn so far.

**Batches.** Full batch (``batch_size`` 0 or >= N): one step per epoch on all N samples in index
order. Mini-batches: a fresh permutation per epoch (``"order"`` stream), ``N // batch_size``
steps (drop_last, as the authors' loader).

**Convergence.** A run with a convergence rule (``settle_window > 0``,
:mod:`synthetic.engine.convergence`) is judged at every recorded epoch; at the first one where the
rule holds its row gets ``settled`` true and the run stops: it draws nothing and is not updated
again (the other runs of its stack go on; the stack ends when every run has stopped or the budget
is spent). A run whose rule never holds trains its budget and ends with ``settled`` false.

**Skipped steps.** A supervised (SCL/HSCL) mini-batch holding a single class leaves every
anchor without negatives: that run skips the step (no draw, no update, no loss), while the other
runs of the stack proceed; the epoch's ``loss`` averages the executed steps and
``skipped_steps`` counts the others. An epoch in which every step of a run is skipped raises
``ValueError``.

**Near-NC initialisation** (``init="nc"``, claim R4). The run starts from the final parameters of
its :meth:`~synthetic.engine.config.RunConfig.source_config` (the same run trained from a random
initialisation with ``init_method`` / ``init_beta`` for ``init_epochs`` epochs) with a fresh Adam
state (the authors' commented-out checkpoint load restores the model only). Sources are trained
first, stacked, once per call; with ``state_dir`` (or the environment variable
:data:`STATE_DIR_ENV`) each source's ``state_dict`` is saved there as ``<source key>.pt`` and
reused by later calls. The ``init_key`` column names the source run.

**Failures.** Non-finite parameters, embeddings or training losses raise
:class:`synthetic.engine.errors.NonFiniteRun` (a ``FloatingPointError``) with the run's key and epoch: a
diverging run is never recorded (the sphere normalisation would otherwise map NaN rows to zero,
which looks like perfect collapse); the sweep stores a failure record instead.

**Randomness.** Every draw of run r comes from run r's own generators (``synthetic.engine.data``
streams ``data``, ``init``, ``order``, ``step``, ``eval``), in the order of the sequential
reference trainer, so run r's table does not depend on the runs stacked with it (up to the float
rounding of batched products). The same configs give identical tables (bit for bit on the same
machine and thread count).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from synthetic.engine.adam import RunAdam, make_adam
from synthetic.engine.config import RunConfig
from synthetic.engine.convergence import SETTLE_COLUMNS, SettleRule, settle_row
from synthetic.engine.data import epoch_batches, make_data, run_generators
from synthetic.engine.errors import non_finite
from synthetic.engine.evaluation import EVAL_COLUMNS, TRAINING_COLUMNS, Evaluator
from synthetic.engine.models import ContrastiveModel, StackedModel, build_model, stack_models
from synthetic.engine.objective import skipped_steps, step_losses
from synthetic.engine.plan import Group, plan, stack_key
from synthetic.engine.resume import Resume, RunState, adam_moments, lineage_key
from synthetic.store.folders import atomic_write
from synthetic.store.schema import EPOCH, RUN_KEY, recorded_epochs
from theory.collapse import ROW_COLUMNS, spectrum_columns

__all__ = [
    "STATE_DIR_ENV",
    "metric_columns",
    "train_runs",
    "train_run",
    "train_group",
    "train_stack",
    "train_extend",
    "train_extend_stack",
]

#: Environment variable naming the folder where source states of ``init="nc"`` runs are kept.
STATE_DIR_ENV = "SYNTHETIC_STATE_DIR"


def metric_columns(config: RunConfig) -> list[str]:
    """The metric columns of a run's table, in order (after ``run_key`` and ``epoch``).

    The training columns (:data:`synthetic.engine.evaluation.TRAINING_COLUMNS`), the metric row
    (:data:`theory.collapse.ROW_COLUMNS`), the spectrum, with ``record_means`` ``class_means``,
    where the rule watches the evaluation loss :data:`synthetic.engine.evaluation.EVAL_COLUMNS`
    and, with a convergence rule (``settle_window > 0``),
    :data:`synthetic.engine.convergence.SETTLE_COLUMNS`.
    """
    cols = [*TRAINING_COLUMNS]
    if config.watches_eval_loss:
        cols.extend(EVAL_COLUMNS)
    cols += [*ROW_COLUMNS, *spectrum_columns(config.num_classes, config.embed_dim)]
    if config.record_means:
        cols.append("class_means")
    if config.settle_window > 0:
        cols.extend(SETTLE_COLUMNS)
    return cols


def _state_dir(state_dir: str | os.PathLike | None) -> Path | None:
    if state_dir is not None:
        return Path(state_dir)
    env = os.environ.get(STATE_DIR_ENV)
    return Path(env) if env else None


def _load_state(folder: Path | None, key: str) -> dict[str, torch.Tensor] | None:
    if folder is None:
        return None
    path = folder / f"{key}.pt"
    if not path.is_file():
        return None
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(blob, dict) or blob.get("key") != key:
        return None
    return blob["state"]


def _save_state(folder: Path | None, source: RunConfig, state: dict[str, torch.Tensor]) -> None:
    if folder is None:
        return
    key = source.key()
    blob = {"key": key, "config": source.to_dict(), "state": state}
    atomic_write(folder / f"{key}.pt", lambda fh: torch.save(blob, fh))


def _source_states(
    configs: Sequence[RunConfig], device: Any, state_dir: Path | None, progress: bool
) -> dict[str, dict[str, torch.Tensor]]:
    """Final ``state_dict`` of every source run the ``init="nc"`` configs need, by source key."""
    needed: dict[str, RunConfig] = {}
    for c in configs:
        s = c.source_config()
        if s is not None:
            needed.setdefault(s.key(), s)
    states: dict[str, dict[str, torch.Tensor]] = {}
    missing: dict[tuple, list[RunConfig]] = {}
    for k, s in needed.items():
        st = _load_state(state_dir, k)
        if st is None:
            missing.setdefault(stack_key(s), []).append(s)
        else:
            states[k] = st
    for group in missing.values():
        # only the final state is kept: evaluate at the first and last epoch only (the metric step
        # draws from its own "eval" stream, so the trained parameters are the same)
        quiet = [s.replace(eval_every=max(1, s.num_epochs)) for s in group]
        _, model, _ = _train(quiet, {}, progress=progress, device=device)
        for r, s in enumerate(group):
            st = model.run_state(r)
            states[s.key()] = st
            _save_state(state_dir, s, st)
    return states


# ------------------------------------------------------------------------------ the engine


def _check(configs: Sequence[RunConfig]) -> list[RunConfig]:
    if not isinstance(configs, (list, tuple)) or not configs:
        raise ValueError("configs must be a non-empty list of RunConfig")
    for c in configs:
        if not isinstance(c, RunConfig):
            raise ValueError(f"configs must hold RunConfig objects, got {type(c).__name__}")
    k0 = stack_key(configs[0])
    for c in configs[1:]:
        if stack_key(c) != k0:
            a, b = configs[0].to_dict(), c.to_dict()
            diff = [f for f in a if a[f] != b[f] and f not in ("seed", "beta", "method")] or ["method"]
            raise ValueError(
                f"configs are not stackable: field(s) {diff} differ ({configs[0].key()} vs {c.key()})"
            )
    return list(configs)


def train_runs(
    configs: Sequence[RunConfig],
    *,
    progress: bool = False,
    device: str | torch.device = "cpu",
    state_dir: str | os.PathLike | None = None,
    mode: str = "stacked",
) -> list[pd.DataFrame]:
    """Train R stackable runs in one tensor program; one table per config, in order.

    Args:
        configs: non-empty list of RunConfig with equal :func:`synthetic.engine.plan.stack_key`
            (same shapes; seeds, betas and methods may differ).
        progress: tqdm bar over epochs (only on a terminal).
        device: torch device of the parameters and data (random draws stay on CPU generators).
        state_dir: where source states of ``init="nc"`` runs are saved and reused (default: the
            folder named by :data:`STATE_DIR_ENV`, else none: sources are trained in-process).
        mode: ``"stacked"`` (one program of R runs) or ``"sequential"`` (one run at a time; the
            sources of ``init="nc"`` runs are still trained once, stacked).

    Returns:
        One ``pandas.DataFrame`` per config: the resolved config columns, ``run_key``, ``epoch``
        and :func:`metric_columns`, one row per recorded epoch.

    Raises:
        ValueError: empty list, a non-RunConfig, configs that are not stackable (the message names
            the differing field), or an epoch in which every step of a run is skipped.
        NonFiniteRun: a run's parameters, embeddings or loss became non-finite.
    """
    return [
        t
        for t, _ in train_extend(
            configs, None, progress=progress, device=device, state_dir=state_dir, mode=mode
        )
    ]


def train_extend(
    configs: Sequence[RunConfig],
    resumes: Sequence[Resume | None] | None,
    *,
    progress: bool = False,
    device: str | torch.device = "cpu",
    state_dir: str | os.PathLike | None = None,
    mode: str = "stacked",
) -> list[tuple[pd.DataFrame, RunState]]:
    """:func:`train_runs`, continuing runs from stored states, and returning where each run ended.

    Args:
        configs: as :func:`train_runs`.
        resumes: one :class:`synthetic.engine.resume.Resume` (from
            :func:`synthetic.engine.resume.resume_for`) or None (train from the start) per config,
            or None for all. In one stacked program the runs that train share one resume point
            (all from the start, or all from the same ``(epoch, offset)``); complete resumes
            (settled runs) train nothing and may join any program.
        progress: as :func:`train_runs`.
        device: as :func:`train_runs`.
        state_dir: as :func:`train_runs`.
        mode: as :func:`train_runs`.

    Returns:
        ``(table, state)`` per config: the run's table (the kept rows of a resume, then the new
        ones) and its :class:`synthetic.engine.resume.RunState` (docs/claims.md#extending-a-run).

    Raises:
        ValueError: as :func:`train_runs`; ``resumes`` of the wrong length or type, resume points
            that differ within one stacked program, a state whose parameters do not fit the model.
    """
    if mode not in ("stacked", "sequential"):
        raise ValueError(f"mode must be 'stacked' or 'sequential', got {mode!r}")
    configs = _check(configs)
    rs = [None] * len(configs) if resumes is None else list(resumes)
    if len(rs) != len(configs) or not all(r is None or isinstance(r, Resume) for r in rs):
        raise ValueError(f"resumes must hold one Resume or None per config ({len(configs)})")
    fresh = [c for c, r in zip(configs, rs, strict=True) if r is None]
    sources = _source_states(fresh, device, _state_dir(state_dir), progress) if fresh else {}
    if mode == "sequential":
        out = []
        for c, r in zip(configs, rs, strict=True):
            tables, _, states = _train([c], sources, progress=progress, device=device, resumes=[r])
            out.append((tables[0], states[0]))
        return out
    if len({r.point if r is not None else (1, 0) for r in rs if r is None or not r.complete}) > 1:
        raise ValueError("the runs of one stacked program must resume from one point (epoch, offset)")
    tables, _, states = _train(configs, sources, progress=progress, device=device, resumes=rs)
    return list(zip(tables, states, strict=True))


def _progress(iterable, enabled: bool, desc: str, total: int | None = None):
    if not enabled:
        return iterable
    import sys

    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, disable=not sys.stderr.isatty(), leave=False)


def _train(
    configs: list[RunConfig],
    sources: dict[str, dict[str, torch.Tensor]],
    *,
    progress: bool,
    device: Any,
    resumes: Sequence[Resume | None] | None = None,
) -> tuple[list[pd.DataFrame], StackedModel, list[RunState]]:
    cfg = configs[0]
    R = len(configs)
    rs = list(resumes) if resumes is not None else [None] * R
    going = [r is not None and not r.complete for r in rs]  # runs continuing from a stored state
    gens = [run_generators(c.seed) for c in configs]
    datas = [make_data(c, device=device) for c in configs]
    models: list[ContrastiveModel] = []
    for c, g, res in zip(configs, gens, rs, strict=True):
        model = build_model(c, generator=g["init"])
        src = c.source_config()
        if res is not None and not res.complete:
            st = res.state
            try:
                model.load_state_dict(st.params)
            except RuntimeError as exc:
                raise ValueError(f"run {c.key()}: its stored state does not fit the model ({exc})") from None
            if st.order_state is None or st.step_state is None:
                raise ValueError(f"run {c.key()}: its stored state has no generator states")
            g["order"].set_state(st.order_state)
            g["step"].set_state(st.step_state)
        elif src is not None and res is None:
            model.load_state_dict(sources[src.key()])
        models.append(model)
    smodel = stack_models(models).to(device)
    free = cfg.encoder == "free"
    N = cfg.num_train
    X = None if free else torch.stack([d.x_train for d in datas])
    Y = torch.stack([d.y_train for d in datas])
    betas = torch.tensor([c.beta for c in configs], dtype=cfg.torch_dtype, device=device)
    params = list(smodel.parameters())
    opt: Any = make_adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    run_adam = False  # becomes a RunAdam at the first step some runs skip and others do not
    if any(going):
        opt, run_adam = _restore_adam(opt, params, rs, cfg)
    ev = Evaluator(configs, smodel, datas, X, Y, betas)
    epochs, budget = cfg.num_epochs, cfg.num_steps
    record_at = set(recorded_epochs(epochs, cfg.eval_every))
    step_gens = [g["step"] for g in gens]
    run_ids = torch.arange(R, device=device)[None, :, None]

    rule = SettleRule.of(cfg)  # equal within a stack (the settle_* fields are in its stack key)
    stopped = torch.zeros(R, dtype=torch.bool)  # runs that have settled take no more steps
    records: list[list[dict]] = [[] for _ in range(R)]

    def record(r: int, row: dict) -> None:
        records[r].append(row)
        if rule is not None:
            row.update(settle_row(records[r], rule))
            stopped[r] = row["settled"]

    first, offset, drawn = 1, 0, 0
    partial_loss, partial_skipped = [0.0] * R, [0] * R
    for k, rk in enumerate(rs):
        if rk is not None:
            records[k] = [dict(row) for row in rk.rows]
            stopped[k] = rk.complete
            if not rk.complete:
                first, offset, drawn = rk.state.start_epoch, rk.state.offset, rk.state.steps
                partial_loss[k], partial_skipped[k] = rk.state.partial_loss, rk.state.partial_skipped
    if first == 1 and offset == 0 and drawn == 0:
        fresh = [x is None for x in rs]
        for r, row in enumerate(ev.rows(0, 0, [math.nan] * R, [0] * R, fresh)):
            if row is not None:
                record(r, row)
    order_start: list[torch.Tensor] = []  # each run's order stream at the start of the last epoch
    last_steps, full_steps = 0, 0  # mini-batches of the last epoch trained, of a whole epoch
    for epoch in _progress(range(first, epochs + 1), progress, f"{R} run(s)", epochs):
        if bool(stopped.all()):
            break
        order_start = [g["order"].get_state() for g in gens]
        batches = torch.stack([epoch_batches(N, cfg.batch, g["order"]) for g in gens], dim=1).to(
            device
        )  # (S, R, b)
        full_steps = batches.shape[0]
        if epoch == first and offset:
            batches = batches[offset:]  # the mini-batches a cut epoch had not reached
        batches = batches[: budget - drawn]
        drawn += batches.shape[0]
        labels = Y[run_ids, batches]  # (S, R, b)
        skip = skipped_steps(configs, labels).cpu()
        dead = skip.all(dim=0) & ~stopped
        if epoch == first and offset:  # a resumed epoch: its earlier mini-batches count too
            dead &= torch.tensor([offset == k for k in partial_skipped])
        skip |= stopped[None, :]  # a settled run draws nothing and is not updated
        if bool(dead.any()):
            c = configs[int(torch.nonzero(dead)[0])]
            raise ValueError(
                f"run {c.key()}: every mini-batch of epoch {epoch} holds a single class; the "
                f"{c.method} loss is undefined (batch_size={c.batch_size} is too small for "
                f"num_classes={c.num_classes})"
            )
        any_skip = bool(skip.any())
        total = torch.zeros(R, dtype=torch.float64, device=device)
        before = offset if epoch == first else 0  # mini-batches of this epoch trained before a resume
        if before:
            total += torch.tensor(partial_loss, dtype=torch.float64, device=device)
        batch_inputs = batches if X is None else X[run_ids, batches]  # (S, R, b[, D]) in one gather
        for s in range(batches.shape[0]):
            idx = batches[s]
            active = None
            if any_skip:
                act = ~skip[s]
                if not bool(act.any()):
                    continue
                active = act.tolist()
                if not run_adam and not all(active):
                    opt, run_adam = RunAdam.from_torch(opt, params, R), True
            losses = step_losses(
                configs,
                smodel,
                batch_inputs[s],
                labels[s],
                idx,
                step_gens,
                betas,
                y_pool=Y,
                pool_inputs=X,
                active=active,
            )
            opt.zero_grad(set_to_none=True)
            losses.sum().backward()
            if run_adam:
                opt.step(active)
            else:
                opt.step()
            if active is None:
                total += losses.detach().to(torch.float64)
            else:
                total[act.to(device)] += losses.detach().to(torch.float64)
        total_cpu = total.cpu()
        for r in range(R):
            if not math.isfinite(float(total_cpu[r])):
                raise non_finite(configs[r], "training loss", epoch)
        bad = _non_finite_params(params, R)
        if bad is not None:
            raise non_finite(configs[bad], "parameters after the epoch's Adam steps", epoch)
        last_steps = before + batches.shape[0]
        # the epoch so far (with a resumed epoch's earlier mini-batches): what a cut epoch stores
        counted = [int(k) for k in skip.sum(dim=0).tolist()]
        partial_skipped = (
            [p + k for p, k in zip(partial_skipped, counted, strict=True)] if before else counted
        )
        partial_loss = total_cpu.tolist()
        if epoch in record_at:
            n_skipped = partial_skipped
            n_steps = last_steps
            was_stopped = stopped.tolist()
            mean_loss = [
                math.nan if was_stopped[r] else float(total_cpu[r]) / (n_steps - n_skipped[r])
                for r in range(R)
            ]
            active = [not s for s in was_stopped]
            for r, row in enumerate(ev.rows(epoch, drawn, mean_loss, n_skipped, active)):
                if row is not None:
                    record(r, row)
    tables = [_assemble(c, rec) for c, rec in zip(configs, records, strict=True)]
    states = []
    for r, c in enumerate(configs):
        rows, settled = tuple(records[r]), bool(stopped[r])
        last = int(rows[-1][EPOCH])
        if settled:
            states.append(RunState(c.key(), lineage_key(c), last, int(rows[-1]["steps"]), True, rows))
            continue
        whole = last_steps == full_steps  # the budget ended the run at the end of an epoch
        m, v, step = adam_moments(opt, params, r, run_adam)
        states.append(
            RunState(
                c.key(),
                lineage_key(c),
                last,
                drawn,
                False,
                rows,
                start_epoch=last + 1 if whole else last,
                offset=0 if whole else last_steps,
                partial_loss=0.0 if whole else float(partial_loss[r]),
                partial_skipped=0 if whole else int(partial_skipped[r]),
                params=smodel.run_state(r),
                exp_avg=m,
                exp_avg_sq=v,
                adam_step=step,
                run_adam=run_adam,
                order_state=gens[r]["order"].get_state() if whole else order_start[r],
                step_state=gens[r]["step"].get_state(),
            )
        )
    return tables, smodel, states


def _restore_adam(
    opt: Any, params: Sequence[torch.Tensor], rs: Sequence[Resume | None], cfg: RunConfig
) -> tuple[Any, bool]:
    """The optimizer of a program whose runs continue from stored states (moments and steps restored).

    torch's Adam with the stored moments when every run took the same number of steps under it;
    the run-wise Adam (:class:`synthetic.engine.adam.RunAdam`) when a run ended under it or the
    step counts differ, as the uninterrupted program would have.
    """
    states = [r.state for r in rs if r is not None and not r.complete]
    R = len(rs)
    steps = {s.adam_step for s in states}
    zeros = [torch.zeros_like(p[0]) for p in params]

    def moments(i: int, which: str) -> torch.Tensor:
        out = []
        for r in rs:
            if r is None or r.complete:
                out.append(zeros[i])
            else:
                t = getattr(r.state, which)[i]
                if t.numel() != zeros[i].numel():
                    raise ValueError("a stored state's Adam moments do not fit the model")
                out.append(t.reshape(zeros[i].shape).to(zeros[i]))
        return torch.stack(out)

    if any(s.run_adam for s in states) or len(steps) > 1 or len(states) < R:
        ra = RunAdam(params, R, lr=cfg.lr, weight_decay=cfg.weight_decay)
        for i in range(len(params)):
            ra.exp_avg[i].copy_(moments(i, "exp_avg"))
            ra.exp_avg_sq[i].copy_(moments(i, "exp_avg_sq"))
        ra.steps = [0 if r is None or r.complete else r.state.adam_step for r in rs]
        return ra, True
    step = steps.pop()
    if step == 0:
        return opt, False
    sd = opt.state_dict()
    sd["state"] = {
        i: {
            "step": torch.tensor(float(step)),
            "exp_avg": moments(i, "exp_avg"),
            "exp_avg_sq": moments(i, "exp_avg_sq"),
        }
        for i in range(len(params))
    }
    opt.load_state_dict(sd)
    return opt, False


def _non_finite_params(params: Sequence[torch.Tensor], R: int) -> int | None:
    """Index of the first run with a non-finite parameter, else None."""
    with torch.no_grad():
        ok = torch.ones(R, dtype=torch.bool)
        for p in params:
            ok &= torch.isfinite(p.detach()).reshape(R, -1).all(dim=1).cpu()
    return None if bool(ok.all()) else int(torch.nonzero(~ok)[0])


def _assemble(config: RunConfig, records: list[dict]) -> pd.DataFrame:
    base = config.to_dict()
    base[RUN_KEY] = config.key()
    cols = list(base) + [EPOCH] + metric_columns(config)
    df = pd.DataFrame([{**base, **r} for r in records], columns=cols)
    for c in (EPOCH, "skipped_steps", "steps"):
        df[c] = df[c].astype(np.int64)
    return df


def train_run(
    config: RunConfig,
    *,
    progress: bool = False,
    device: str | torch.device = "cpu",
    state_dir: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Train one run with Adam and return its per-epoch table (see the module docstring).

    Args:
        config: a validated :class:`synthetic.engine.config.RunConfig`.
        progress: show a tqdm bar over epochs (only on a terminal).
        device: torch device of the model and data (random draws stay on the CPU generators).
        state_dir: where the source state of an ``init="nc"`` run is saved and reused.

    Returns:
        ``pandas.DataFrame`` with ``len(recorded_epochs(num_epochs, eval_every))`` rows.

    Raises:
        ValueError: ``config`` is not a RunConfig, or every step of an epoch was skipped (each
            mini-batch held a single class under SCL/HSCL).
        NonFiniteRun: the parameters, embeddings or training loss became non-finite
            (``synthetic.engine.errors``; a ``FloatingPointError``).
    """
    if not isinstance(config, RunConfig):
        raise ValueError(f"config must be a RunConfig, got {type(config).__name__}")
    return train_runs([config], progress=progress, device=device, state_dir=state_dir)[0]


def train_group(group: Group, **kwargs) -> list[pd.DataFrame]:
    """Train a :class:`Group` in its mode; one table per config, in order.

    Args:
        group: a group from :func:`plan`.
        **kwargs: passed to :func:`synthetic.engine.train.train_runs` (``progress``, ``device``,
            ``state_dir``).
    """
    if not isinstance(group, Group):
        raise ValueError(f"group must be a Group, got {type(group).__name__}")
    return train_runs(list(group.configs), mode=group.mode, **kwargs)


def train_stack(configs: Sequence[RunConfig], **kwargs) -> list[pd.DataFrame]:
    """Train one group of a sweep (stackable configs) in its planned mode; one table per config.

    The group is planned again (:func:`synthetic.engine.plan.plan` with ``max_stack`` its size),
    which gives its mode; a group that does not stack raises, naming the differing field.

    Raises:
        ValueError: empty list, a non-RunConfig, or configs that are not stackable.
    """
    configs = _check(configs)
    tables: dict[str, pd.DataFrame] = {}
    for g in plan(configs, max_stack=len(configs)):
        for c, t in zip(g.configs, train_group(g, **kwargs), strict=True):
            tables[c.key()] = t
    return [tables[c.key()] for c in configs]


def train_extend_stack(
    configs: Sequence[RunConfig], resumes: Sequence[Resume | None], **kwargs
) -> list[tuple[pd.DataFrame, RunState]]:
    """:func:`train_stack` continuing runs from stored states: ``(table, state)`` per config.

    The members must share one resume point (the sweep groups them so); see :func:`train_extend`.
    """
    configs = _check(configs)
    if len(resumes) != len(configs):
        raise ValueError(f"resumes must hold one Resume or None per config ({len(configs)})")
    by_key = {c.key(): r for c, r in zip(configs, resumes, strict=True)}
    out: dict[str, tuple[pd.DataFrame, RunState]] = {}
    for g in plan(configs, max_stack=len(configs)):
        members = list(g.configs)
        pairs = train_extend(members, [by_key[c.key()] for c in members], mode=g.mode, **kwargs)
        for c, pair in zip(members, pairs, strict=True):
            out[c.key()] = pair
    return [out[c.key()] for c in configs]
