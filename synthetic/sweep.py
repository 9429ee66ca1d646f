"""Sweeps: TOML grids, resumable parallel execution, seed-aggregated summaries, claim verdicts.

Grid files (stdlib ``tomllib``; examples in ``synthetic/grids/``)::

    [sweep]
    name = "s1_scl_hscl_nc"          # default results sub-folder name
    claim = "S1"                     # claim id(s) the grid tests (informative)
    description = "..."

    [sweep.base]                     # fixed RunConfig fields of every run
    num_classes = 10
    epochs = 60

    [sweep.axes]                     # crossed (cartesian product) with every group below
    normalization = ["sphere", "ball"]
    seed = [0, 1, 2]

    [[sweep.group]]                  # sub-grids: the sweep is the UNION over groups of
    method = "SCL"                   #   axes x group; a scalar is a one-value axis.
    beta = 0.0                       # This is how constraints are written: here SCL only
                                     # takes beta = 0 ...
    [[sweep.group]]
    method = "HSCL"                  # ... and HSCL only the positive betas.
    beta = [2.0, 5.0, 10.0]

    # Alternative to groups for the beta constraint: with `auto_hard = true` in [sweep], beta
    # picks the method inside each family (SCL/HSCL or UCL/HUCL): beta = 0 -> SCL/UCL,
    # beta > 0 -> HSCL/HUCL; e.g. axes method = ["SCL"], beta = [0, 2, 5] gives SCL, HSCL, HSCL.

    [scale.paper.base]               # a named scale ("profile"): base and axes entries replace
    epochs = 400                     #   the default ones key by key; a [[scale.paper.group]]
    [scale.paper.axes]               #   list replaces all groups.
    seed = [0, 1, 2, 3, 4]

Without ``[[sweep.group]]`` the sweep is the plain cartesian product of the axes. A field may
appear in only one of base / axes / a group (an error names it otherwise). Scales: ``default``
(the ``[sweep]`` tables as written), any ``[scale.NAME]`` in the file, and ``quick`` (a smoke-test
scale: the file's ``[scale.quick]`` or, if absent, 2 epochs and the first seed only).
Duplicate configs (same key) produced by overlapping groups are run once.

Execution (:func:`run_sweep`): finished runs (a file ``runs/<key>.csv`` in the results folder)
are skipped; the rest run on local processes (joblib) or on a dask.distributed cluster
(``scheduler=ADDRESS``). Each finished run is sent back to this process and stored atomically as
soon as it completes, so a SIGKILL loses at most the runs in flight; restarting the same command
finishes the sweep, and the final ``table.csv`` is byte-identical to the one of an uninterrupted
sweep (runs are deterministic given their config, the table is sorted by config and epoch).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tomllib

from synthetic import store

__all__ = [
    "GRIDS_DIR",
    "Grid",
    "SweepSummary",
    "grid_files",
    "load_grid",
    "parse_grid",
    "apply_scale",
    "expand_grid",
    "run_sweep",
    "final_epoch",
    "summarize",
    "format_summary",
    "load_results",
    "evaluate_claims",
    "claim_details",
    "CLAIMS",
    "NC_ETF_TOL",
    "NC_WCV_TOL",
    "DC_SPECTRUM_TOL",
]

#: Folder of the grid files shipped with the package.
GRIDS_DIR = Path(__file__).resolve().parent / "grids"

_SWEEP_KEYS = {"name", "claim", "description", "auto_hard", "base", "axes", "group"}
_HARD = {"SCL": "HSCL", "UCL": "HUCL"}
_EASY = {v: k for k, v in _HARD.items()}
_SCALE_KEYS = {"base", "axes", "group", "description"}

#: Final-epoch metrics shown by :func:`summarize` when present in the table (in this order).
SUMMARY_METRICS = (
    "loss",
    "gap_to_optimum",
    "unit_norm",
    "zero_sum",
    "etf_mean",
    "within_class_variation",
    "nc1",
    "etf_error",
    "effective_rank",
    "spectrum_min",
    "mean_norm",
    "ncm_acc",
)


# --------------------------------------------------------------------------------------------
# Grids
# --------------------------------------------------------------------------------------------


def _default_config_cls():
    from synthetic.config import RunConfig

    return RunConfig


def _as_list(value: Any, where: str) -> list:
    if isinstance(value, list):
        if not value:
            raise ValueError(f"{where} must not be an empty list")
        return list(value)
    if isinstance(value, dict):
        raise ValueError(f"{where} must be a value or a list of values, got a table {value!r}")
    return [value]


def _check_table(obj: Any, where: str) -> dict:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be a TOML table, got {obj!r}")
    return dict(obj)


def parse_grid(spec: Mapping, *, source: str = "<grid>") -> dict:
    """Validate the structure of a grid mapping (a parsed TOML file); return a clean copy.

    Returns:
        ``{"name", "claim", "description", "base", "axes", "groups", "scales"}`` with ``axes``
        and each group mapping field -> list of values.
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"grid {source} must be a mapping, got {type(spec).__name__}")
    unknown = set(spec) - {"sweep", "scale"}
    if unknown:
        raise ValueError(f"grid {source}: unknown top-level tables {sorted(unknown)}")
    sweep = _check_table(spec.get("sweep"), f"grid {source}: [sweep]")
    bad = set(sweep) - _SWEEP_KEYS
    if bad:
        raise ValueError(
            f"grid {source}: unknown keys {sorted(bad)} in [sweep]; expected {sorted(_SWEEP_KEYS)}"
            " (config fields go into [sweep.base], [sweep.axes] or [[sweep.group]])"
        )
    name = sweep.get("name", Path(source).stem if source != "<grid>" else "sweep")
    if not isinstance(name, str) or not name or any(ch in name for ch in "/\\"):
        raise ValueError(f"grid {source}: sweep.name must be a plain folder name, got {name!r}")
    out = {
        "name": name,
        "claim": str(sweep.get("claim", "")),
        "description": str(sweep.get("description", "")),
        "auto_hard": sweep.get("auto_hard", False),
        "base": _check_table(sweep.get("base"), f"grid {source}: [sweep.base]"),
        "axes": {
            k: _as_list(v, f"grid {source}: sweep.axes.{k}")
            for k, v in _check_table(sweep.get("axes"), f"grid {source}: [sweep.axes]").items()
        },
        "groups": [],
        "scales": {},
    }
    if not isinstance(out["auto_hard"], bool):
        raise ValueError(f"grid {source}: sweep.auto_hard must be true or false, got {out['auto_hard']!r}")
    groups = sweep.get("group", [])
    if not isinstance(groups, list):
        raise ValueError(f"grid {source}: sweep.group must be an array of tables [[sweep.group]]")
    for i, g in enumerate(groups):
        g = _check_table(g, f"grid {source}: sweep.group[{i}]")
        out["groups"].append({k: _as_list(v, f"grid {source}: sweep.group[{i}].{k}") for k, v in g.items()})
    scales = _check_table(spec.get("scale"), f"grid {source}: [scale]")
    for sname, sc in scales.items():
        sc = _check_table(sc, f"grid {source}: [scale.{sname}]")
        bad = set(sc) - _SCALE_KEYS
        if bad:
            raise ValueError(f"grid {source}: unknown keys {sorted(bad)} in [scale.{sname}]")
        out["scales"][sname] = copy.deepcopy(sc)
    _check_disjoint(out, source)
    return out


def _check_disjoint(spec: dict, source: str) -> None:
    base, axes = set(spec["base"]), set(spec["axes"])
    both = base & axes
    if both:
        raise ValueError(f"grid {source}: fields {sorted(both)} given in both base and axes")
    for i, g in enumerate(spec["groups"]):
        clash = set(g) & (base | axes)
        if clash:
            raise ValueError(f"grid {source}: fields {sorted(clash)} of group {i} also given in base or axes")


def apply_scale(spec: dict, scale: str = "default", *, source: str = "<grid>") -> dict:
    """Return a copy of a parsed grid with the scale ``scale`` applied (see module docstring)."""
    if not isinstance(scale, str) or not scale:
        raise ValueError(f"scale must be a non-empty string, got {scale!r}")
    out = copy.deepcopy(spec)
    if scale == "default":
        return out
    if scale in spec["scales"]:
        sc = spec["scales"][scale]
    elif scale == "quick":
        sc = {"base": {}, "axes": {}}
        if "epochs" in out["axes"]:
            sc["axes"]["epochs"] = [2]
        else:
            sc["base"]["epochs"] = 2
        if "seed" in out["axes"]:
            sc["axes"]["seed"] = out["axes"]["seed"][:1]
    else:
        known = ["default", "quick", *sorted(spec["scales"])]
        raise ValueError(f"scale {scale!r} is not defined in grid {source}; known: {known}")
    for k, v in sc.get("base", {}).items():
        _drop_field(out, k)
        out["base"][k] = v
    for k, v in sc.get("axes", {}).items():
        _drop_field(out, k)
        out["axes"][k] = _as_list(v, f"grid {source}: scale.{scale}.axes.{k}")
    if "group" in sc:
        out["groups"] = [
            {k: _as_list(v, f"grid {source}: scale.{scale}.group[{i}].{k}") for k, v in g.items()}
            for i, g in enumerate(sc["group"])
        ]
    _check_disjoint(out, source)
    return out


def _drop_field(spec: dict, field: str) -> None:
    spec["base"].pop(field, None)
    spec["axes"].pop(field, None)
    for g in spec["groups"]:
        g.pop(field, None)


def _override(spec: dict, overrides: Mapping | None) -> dict:
    out = copy.deepcopy(spec)
    if overrides and ("beta" in overrides or "method" in overrides):
        out["auto_hard"] = True  # overriding one of them must keep (method, beta) pairs valid
    for k, v in (overrides or {}).items():
        _drop_field(out, k)
        if isinstance(v, list):
            out["axes"][k] = _as_list(v, f"override {k}")
        else:
            out["base"][k] = v
    # groups emptied by overrides collapse into one
    seen, groups = set(), []
    for g in out["groups"]:
        sig = repr(sorted(g.items()))
        if sig not in seen:
            seen.add(sig)
            groups.append(g)
    out["groups"] = groups
    return out


def expand_grid(spec: dict, *, config_cls: Any = None, source: str = "<grid>") -> list:
    """Expand a parsed grid into its list of run configs, in a deterministic order.

    Order: groups in file order; inside a group, the cartesian product of the axes (file order)
    then the group's fields, the last field varying fastest. Configs with equal keys are kept once.
    With ``spec["auto_hard"]`` the method follows beta inside its family (see module docstring).

    Args:
        spec: output of :func:`parse_grid` / :func:`apply_scale`.
        config_cls: class with ``from_dict(dict)`` and instances with ``key()``; default
            ``synthetic.config.RunConfig``.

    Returns:
        List of configs (each validated by ``config_cls``).
    """
    cls = config_cls or _default_config_cls()
    fields = None
    if dataclasses.is_dataclass(cls):
        fields = {f.name for f in dataclasses.fields(cls)}
    groups = spec["groups"] or [{}]
    configs, seen = [], set()
    for gi, group in enumerate(groups):
        names = list(spec["axes"]) + list(group)
        values = [spec["axes"][n] for n in spec["axes"]] + [group[n] for n in group]
        for combo in itertools.product(*values):
            d = dict(spec["base"])
            d.update(zip(names, combo))
            if spec.get("auto_hard") and "method" in d:
                beta = d.get("beta", 0.0)
                if isinstance(beta, (int, float)) and beta > 0:
                    d["method"] = _HARD.get(d["method"], d["method"])
                elif isinstance(beta, (int, float)) and beta == 0:
                    d["method"] = _EASY.get(d["method"], d["method"])
            if fields is not None:
                unknown = set(d) - fields
                if unknown:
                    raise ValueError(
                        f"grid {source}: unknown config fields {sorted(unknown)} "
                        f"(group {gi}); known fields: {sorted(fields)}"
                    )
            try:
                cfg = cls.from_dict(d)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"grid {source}: invalid config {d}: {exc}") from exc
            k = cfg.key()
            if k not in seen:
                seen.add(k)
                configs.append(cfg)
    return configs


@dataclasses.dataclass(frozen=True)
class Grid:
    """A resolved sweep grid: its name, claim, scale, source file and expanded configs."""

    name: str
    claim: str
    description: str
    scale: str
    source: str
    spec: dict = dataclasses.field(repr=False)
    configs: tuple = dataclasses.field(repr=False)

    def __len__(self) -> int:
        return len(self.configs)


def grid_files() -> dict[str, Path]:
    """The grid files shipped in ``synthetic/grids``: ``{name: path}``."""
    return {p.stem: p for p in sorted(GRIDS_DIR.glob("*.toml"))}


def load_grid(
    grid: str | os.PathLike | Mapping,
    *,
    scale: str = "default",
    overrides: Mapping | None = None,
    config_cls: Any = None,
) -> Grid:
    """Load, scale and expand a grid.

    Args:
        grid: a TOML path, the name of a shipped grid (e.g. ``"s1_scl_hscl_nc"``), or a mapping
            with the TOML structure.
        scale: ``"default"``, ``"quick"`` or a ``[scale.NAME]`` defined in the file (``"paper"``).
        overrides: fields forced on every run after scaling (a list value becomes an axis), e.g.
            ``{"epochs": 5}``.
        config_cls: see :func:`expand_grid`.

    Returns:
        A :class:`Grid`.
    """
    if isinstance(grid, Mapping):
        raw, source = grid, "<mapping>"
    elif isinstance(grid, (str, os.PathLike)):
        path = Path(grid)
        if not path.is_file() and str(grid) in grid_files():
            path = grid_files()[str(grid)]
        if not path.is_file():
            raise ValueError(
                f"grid {str(grid)!r} is neither a TOML file nor a shipped grid ({sorted(grid_files())})"
            )
        source = str(path)
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"grid {source} is not valid TOML: {exc}") from exc
    else:
        raise ValueError(f"grid must be a path, a shipped grid name or a mapping, got {grid!r}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ValueError(f"overrides must be a mapping, got {overrides!r}")
    spec = parse_grid(raw, source=source)
    spec = _override(apply_scale(spec, scale, source=source), overrides)
    configs = expand_grid(spec, config_cls=config_cls, source=source)
    return Grid(
        name=spec["name"],
        claim=spec["claim"],
        description=spec["description"],
        scale=scale,
        source=source,
        spec=spec,
        configs=tuple(configs),
    )


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class SweepSummary:
    """What :func:`run_sweep` did.

    Attributes:
        n_runs: configs in the sweep; n_skipped: already stored; n_done: run and stored now;
        failures: ``{run_key: traceback}`` of runs that raised; seconds: wall time;
        results_dir, table_path: where the results are; table: the sweep's rows (all its
        stored runs); summary: :func:`summarize` of the table.
    """

    n_runs: int
    n_skipped: int
    n_done: int
    failures: dict
    seconds: float
    results_dir: Path
    table_path: Path | None
    table: pd.DataFrame = dataclasses.field(repr=False)
    summary: pd.DataFrame = dataclasses.field(repr=False)

    @property
    def ok(self) -> bool:
        """True when every run of the sweep is stored."""
        return not self.failures and self.n_skipped + self.n_done == self.n_runs

    def format(self) -> str:
        """Human-readable report: counts, time, and the seed-aggregated final metrics."""
        lines = [
            f"sweep: {self.n_runs} runs, {self.n_skipped} already stored, {self.n_done} run now,"
            f" {len(self.failures)} failed, {self.seconds:.1f} s",
            f"results: {self.results_dir}" + (f"  table: {self.table_path}" if self.table_path else ""),
        ]
        for k, tb in self.failures.items():
            last = tb.strip().splitlines()[-1] if tb.strip() else ""
            lines.append(f"FAILED {k}: {last}")
        if len(self.summary):
            lines.append("final epoch, mean ± std over seeds:")
            lines.append(format_summary(self.summary))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _default_runner():
    from synthetic.train import train_run

    return train_run


def _find_stacking():
    """(group_fn, stacked_fn) of synthetic.stacked; import errors propagate."""
    from synthetic.stacked import stack_groups, train_stacked

    return stack_groups, train_stacked


def _execute(
    task: list, runner: Callable | None, stacked_runner: Callable | None, threads: int | None = 1
) -> list:
    """Run one task (a list of configs); return ``[(key, frame or None, error or None)]``.

    Runs in a worker (joblib process or dask worker); never raises so that one failing run does
    not abort the others. ``threads`` fixes torch's intra-op thread count during the task (then
    restores it): results are bit-identical only at equal thread counts, so a sweep gives the
    same numbers whatever ``n_jobs`` or cluster it runs on.
    """
    keys = [c.key() for c in task]
    old_threads = None
    if threads is not None:
        import torch

        old_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
    try:
        return _execute_inner(task, keys, runner, stacked_runner)
    finally:
        if old_threads is not None:
            torch.set_num_threads(old_threads)


def _check_frame(k: str, f: Any) -> None:
    if not isinstance(f, pd.DataFrame):
        raise RuntimeError(f"runner returned {type(f).__name__}, not a DataFrame, for run {k}")
    if store.RUN_KEY not in f.columns or set(f[store.RUN_KEY].astype(str)) != {k}:
        raise RuntimeError(f"runner frame for run {k} must carry run_key == {k}")


def _run_single(config: Any, k: str, runner: Callable | None, note: str = "") -> tuple:
    try:
        fn = runner or _default_runner()
        f = fn(config)
        _check_frame(k, f)
        return (k, f, None)
    except Exception:
        return (k, None, note + traceback.format_exc())


def _execute_inner(task: list, keys: list, runner: Callable | None, stacked_runner: Callable | None) -> list:
    """Train a task; a failing stack falls back to training each member alone.

    A stack of several configs that raises (or returns bad frames) is retried member by member
    with the single runner, so one failing run does not fail its whole stack (on every retry);
    only the members that fail alone are reported, with the stack's error noted.
    """
    note = ""
    if len(task) > 1 and stacked_runner is not None:
        try:
            frames = list(stacked_runner(list(task)))
            if len(frames) != len(task):
                raise RuntimeError(f"stacked runner returned {len(frames)} frames for {len(task)} configs")
            for k, f in zip(keys, frames):
                _check_frame(k, f)
            return [(k, f, None) for k, f in zip(keys, frames)]
        except Exception:
            last = traceback.format_exc().strip().splitlines()[-1]
            note = f"(stacked training of {len(task)} runs failed: {last}; this run then failed alone)\n"
    return [_run_single(c, k, runner, note) for c, k in zip(task, keys)]


def _make_tasks(pending: list, all_configs: list, stack: bool, group_fn: Callable | None) -> list:
    if not stack or group_fn is None:
        return [[c] for c in pending]
    # Group the WHOLE grid (not only pending runs), in key order, so a resumed sweep trains exactly
    # the same groups as an uninterrupted one whatever the order of the configs: stacked results
    # may depend on the group composition (float rounding of batched products).
    pending_keys = {c.key() for c in pending}
    tasks = []
    for group in group_fn(sorted(all_configs, key=lambda c: c.key())):
        group = list(group)
        if any(c.key() in pending_keys for c in group):
            tasks.append(group)
    return tasks


def _resolve_configs(grid: Any, config_cls: Any) -> tuple[list, str]:
    if isinstance(grid, Grid):
        return list(grid.configs), grid.name
    if isinstance(grid, (str, os.PathLike, Mapping)):
        g = load_grid(grid, config_cls=config_cls)
        return list(g.configs), g.name
    if isinstance(grid, Iterable):
        configs = list(grid)
        for c in configs:
            if not (hasattr(c, "key") and hasattr(c, "to_dict")):
                raise ValueError(f"grid_or_configs must hold RunConfig objects, got {c!r}")
        seen, out = set(), []
        for c in configs:
            if c.key() not in seen:
                seen.add(c.key())
                out.append(c)
        return out, "sweep"
    raise ValueError(f"grid_or_configs must be a Grid, a TOML path, a mapping or configs, got {grid!r}")


def run_sweep(
    grid_or_configs: Any,
    results_dir: str | os.PathLike,
    *,
    n_jobs: int = 1,
    scheduler: Any = None,
    stack: bool = False,
    progress: bool | None = None,
    runner: Callable | None = None,
    stacked_runner: Callable | None = None,
    group_fn: Callable | None = None,
    write_table: bool = True,
    config_cls: Any = None,
    threads: int | None = 1,
) -> SweepSummary:
    """Run every not-yet-stored run of a sweep and store each one atomically as it finishes.

    Args:
        grid_or_configs: a :class:`Grid`, a grid TOML path / shipped name / mapping (default
            scale), or an iterable of run configs.
        results_dir: the results folder (``runs/<key>.csv`` per run, ``table.csv``).
        n_jobs: local worker processes (joblib; 1 runs in this process, -1 all cores).
            Ignored when ``scheduler`` is given.
        scheduler: a dask.distributed scheduler address (``"tcp://host:8786"``) or a
            ``distributed.Client``; runs then execute on that cluster and come back here to be
            stored (no shared file system needed).
        stack: train groups of stackable configs in one tensor program
            (``synthetic.stacked``), grouped over the whole grid so resuming trains the same
            groups. A stack that fails is retried run by run with ``runner``.
        progress: tqdm bar with ETA; default: only when stderr is a terminal.
        runner: ``config -> DataFrame`` (default ``synthetic.train.train_run``); must be
            picklable (a module-level function) for processes and dask.
        stacked_runner, group_fn: override the stacking helpers (``list[config] -> list[frame]``
            and ``list[config] -> list[list[config]]``).
        write_table: write ``table.csv`` (all runs stored in the folder) at the end.
        config_cls: see :func:`expand_grid` (only used for a path or mapping).
        threads: torch threads per run (default 1, the same in every worker so that the numbers
            do not depend on ``n_jobs``); None leaves the worker's setting alone.

    Returns:
        A :class:`SweepSummary`. Failed runs are reported there (and not stored); they are
        retried by the next call.
    """
    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs must be a positive int or -1, got {n_jobs!r}")
    if runner is not None and not callable(runner):
        raise ValueError(f"runner must be callable, got {runner!r}")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress must be True, False or None, got {progress!r}")
    t0 = time.perf_counter()
    configs, _ = _resolve_configs(grid_or_configs, config_cls)
    results = Path(results_dir)
    if str(results_dir) == "":
        raise ValueError("results_dir must be a non-empty path")
    (results / store.RUNS_SUBDIR).mkdir(parents=True, exist_ok=True)
    store.remove_temp_files(results)

    done = store.finished_keys(results)
    keys = [c.key() for c in configs]
    pending = [c for c, k in zip(configs, keys) if k not in done]
    n_skipped = len(configs) - len(pending)

    stacking = None
    if stack:
        if stacked_runner is not None and group_fn is not None:
            stacking = (group_fn, stacked_runner)
        else:
            found = _find_stacking()
            stacking = (group_fn or found[0], stacked_runner or found[1])
    tasks = _make_tasks(pending, configs, stacking is not None, stacking[0] if stacking else None)
    s_runner = stacking[1] if stacking else None

    if progress is None:
        progress = bool(getattr(sys.stderr, "isatty", lambda: False)())
    from tqdm.auto import tqdm

    bar = tqdm(total=len(pending), unit="run", desc="sweep", disable=not progress, dynamic_ncols=True)
    failures: dict[str, str] = {}
    n_done = 0
    pending_keys = {c.key() for c in pending}

    def _store(result: list) -> None:
        nonlocal n_done
        for k, frame, err in result:
            if k not in pending_keys:
                continue  # a finished member of a re-trained stack group: already stored
            if err is not None:
                failures[k] = err
            else:
                store.write_run(results, frame, key=k)
                n_done += 1
            pending_keys.discard(k)
            bar.update(1)

    try:
        if not tasks:
            pass
        elif scheduler is not None:
            _run_dask(tasks, scheduler, runner, s_runner, threads, _store)
        else:
            from joblib import Parallel, delayed

            par = Parallel(n_jobs=n_jobs, return_as="generator_unordered")
            for result in par(delayed(_execute)(t, runner, s_runner, threads) for t in tasks):
                _store(result)
    finally:
        bar.close()

    table_path = store.write_table(results) if write_table else None
    stored = store.finished_keys(results)
    mine = [k for k in dict.fromkeys(keys) if k in stored]
    table = store.load_table(results, keys=mine) if mine else pd.DataFrame()
    summary = summarize(table) if len(table) else pd.DataFrame()
    return SweepSummary(
        n_runs=len(configs),
        n_skipped=n_skipped,
        n_done=n_done,
        failures=failures,
        seconds=time.perf_counter() - t0,
        results_dir=results,
        table_path=table_path,
        table=table,
        summary=summary,
    )


def _run_dask(tasks: list, scheduler: Any, runner, s_runner, threads, on_result: Callable) -> None:
    from distributed import Client, as_completed

    own = not isinstance(scheduler, Client)
    if own and not isinstance(scheduler, str):
        raise ValueError(f"scheduler must be an address string or a distributed.Client, got {scheduler!r}")
    client = Client(scheduler) if own else scheduler
    try:
        futures = [
            client.submit(_execute, t, runner, s_runner, threads, pure=False, key=f"sweep-{t[0].key()}-{i}")
            for i, t in enumerate(tasks)
        ]
        for fut in as_completed(futures):
            on_result(fut.result())
            fut.release()
    finally:
        if own:
            client.close()


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------


def final_epoch(table: pd.DataFrame) -> pd.DataFrame:
    """The last-epoch row of every run of a tidy table (sorted like the table).

    Runs are told apart by ``(grid, run_key)`` when the table has a ``grid`` column (a parent
    folder: the same config may be stored in several grid folders), else by ``run_key``.
    """
    if not isinstance(table, pd.DataFrame) or store.RUN_KEY not in table or store.EPOCH not in table:
        raise ValueError("table must be a tidy results table with run_key and epoch columns")
    by = ["grid", store.RUN_KEY] if "grid" in table.columns else store.RUN_KEY
    idx = table.groupby(by, sort=False)[store.EPOCH].idxmax()
    return table.loc[sorted(idx.values)].reset_index(drop=True)


def _config_cols(table: pd.DataFrame) -> list[str]:
    return [c for c in store.config_columns(table) if c not in ("grid",)]


def summarize(
    table: pd.DataFrame, metrics: Sequence[str] | None = None, *, seed_column: str = "seed"
) -> pd.DataFrame:
    """Final-epoch metrics aggregated over seeds: mean and sample std (ddof=1) per config.

    Args:
        table: tidy results table (config columns, run_key, epoch, metrics).
        metrics: metric columns; default the :data:`SUMMARY_METRICS` present in the table.
        seed_column: the config column aggregated over.

    Returns:
        One row per config-without-seed: the config columns that vary in the table (plus
        ``grid`` when present), ``n_seeds``, and ``<metric>_mean`` / ``<metric>_std`` columns
        (std NaN for one seed).
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    if len(table) == 0:
        return pd.DataFrame()
    last = final_epoch(table)
    if metrics is None:
        metrics = [m for m in SUMMARY_METRICS if m in last.columns]
    else:
        missing = [m for m in metrics if m not in last.columns]
        if missing:
            raise ValueError(f"metrics not in the table: {missing}")
    cfg = [c for c in _config_cols(last) if c != seed_column]
    varying = [c for c in cfg if last[c].astype(str).nunique() > 1]
    by = (["grid"] if "grid" in last.columns else []) + varying
    if not by:
        last = last.assign(_all="all")
        by = ["_all"]
    rows = []
    for key, g in last.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n_seeds"] = int(len(g))
        for m in metrics:
            vals = pd.to_numeric(g[m], errors="coerce").to_numpy(dtype=float)
            row[f"{m}_mean"] = float(np.mean(vals))
            row[f"{m}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.drop(columns=["_all"], errors="ignore")


def _pm(mean: float, std: float) -> str:
    if not math.isfinite(mean):
        return "nan"
    if not math.isfinite(std):
        return f"{mean:.4g}"
    return f"{mean:.4g} ± {std:.2g}"


def format_summary(summary: pd.DataFrame) -> str:
    """Render :func:`summarize` output as text with ``mean ± std`` cells."""
    if not isinstance(summary, pd.DataFrame):
        raise ValueError(f"summary must be a DataFrame, got {type(summary).__name__}")
    if len(summary) == 0:
        return "(no finished runs)"
    metric_names = [c[: -len("_mean")] for c in summary.columns if c.endswith("_mean")]
    keep = [c for c in summary.columns if not c.endswith("_mean") and not c.endswith("_std")]
    shown = summary[keep].copy()
    for m in metric_names:
        shown[m] = [_pm(a, b) for a, b in zip(summary[f"{m}_mean"], summary[f"{m}_std"])]
    with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_rows", None):
        return shown.to_string(index=False)


def load_results(folder: str | os.PathLike) -> pd.DataFrame:
    """Load results for claims: one results folder, or a folder of per-grid result folders.

    A folder with ``runs/`` is read as one table with a leading ``grid`` column holding the
    folder's name; otherwise every sub-folder holding ``runs/`` is read and the tables are
    concatenated with a leading ``grid`` column (the sub-folder name). Folder names keep their
    scale suffix (``s3_hucl_beta-paper``): :func:`evaluate_claims` matches a claim grid with or
    without it and reports each scale apart.
    """
    base = Path(folder)
    if (base / store.RUNS_SUBDIR).is_dir():
        t = store.read_table(base)
        if len(t) and "grid" not in t.columns:
            t.insert(0, "grid", base.resolve().name)
        return t
    subs = sorted(p for p in base.iterdir() if (p / store.RUNS_SUBDIR).is_dir()) if base.is_dir() else []
    if not subs:
        raise FileNotFoundError(
            f"no results under {base}: expected {base / store.RUNS_SUBDIR} or sub-folders "
            f"<grid>/{store.RUNS_SUBDIR}"
        )
    frames = []
    for p in subs:
        t = store.read_table(p)
        if len(t):
            t.insert(0, "grid", p.name)
            frames.append(t)
    return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()


# --------------------------------------------------------------------------------------------
# Claims S1-S4, R5 (spec/hcl.md §4, §5.7)
# --------------------------------------------------------------------------------------------

#: NC is declared when the final-epoch seed mean of ``etf_mean`` (paper condition P3: mean
#: |cos + 1/(C-1)| over class pairs; 0 at a simplex ETF, about 0.3 for random features and 0.24
#: for the authors' SCL run in DC) is below this ...
NC_ETF_TOL = 0.05
#: ... and the seed mean of ``within_class_variation`` (P5: mean distance to the class mean, for
#: features of norm <= 1; about 0.9 at a random initialisation) is below this. Mini-batch Adam at
#: a constant learning rate leaves a floor of a few hundredths, hence 0.1 rather than ~0.
NC_WCV_TOL = 0.1
#: Dimensional collapse of a run: ``spectrum_min`` = log(sigma_min / sigma_max) of the class-mean
#: covariance (0 at an ETF) below log(1e-4), i.e. the smallest direction of the centred class
#: means has under 1 % of the amplitude of the largest: numerically a lower-dimensional subspace.
DC_SPECTRUM_TOL = math.log(1e-4)

CLAIMS = {
    "S1": ("With ball or sphere normalisation, SCL and HSCL reach NC for every beta.", "s1_scl_hscl_nc"),
    "S2": ("UCL reaches NC with label positives, not with additive-noise positives.", "s2_ucl_positives"),
    "S3": ("HUCL does not reach NC; its ETF deviation grows with beta.", "s3_hucl_beta"),
    "S4": ("Without normalisation, random and hard negatives end in DC, not NC.", "s4_no_normalisation"),
    "R5": (
        "NC is reached for batch sizes 64-512; batch size 32 hinders NC with many classes.",
        "r5_batch_size",
    ),
}


def _col(df: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    return df[name] if name in df.columns else pd.Series([default] * len(df), index=df.index)


def _matches_grid(grid: str, name: str) -> bool:
    """True for a claim grid's folder ``name`` or a scaled one ``name-<scale>``."""
    return grid == name or grid.startswith(name + "-")


def _claim_grids(table: pd.DataFrame, claim: str) -> list:
    """The grid folders of ``claim`` in the table (default scale first), or [None] without a grid column."""
    if "grid" not in table.columns:
        return [None]
    name = CLAIMS[claim][1]
    grids = [g for g in dict.fromkeys(table["grid"].astype(str)) if _matches_grid(g, name)]
    return sorted(grids, key=lambda g: (g != name, g))


def _claim_rows(table: pd.DataFrame, claim: str, grid: str | None = None) -> pd.DataFrame:
    if "grid" in table.columns:  # grid folders: each claim reads its own grid's runs (any scale)
        name = CLAIMS[claim][1]
        g = table["grid"].astype(str)
        return table[g == grid] if grid is not None else table[[_matches_grid(x, name) for x in g]]
    method, norm = _col(table, "method"), _col(table, "normalization")
    if claim == "S1":
        sel = method.isin(["SCL", "HSCL"]) & norm.isin(["ball", "sphere"])
    elif claim == "S2":
        sel = (method == "UCL") & norm.isin(["ball", "sphere"])
    elif claim == "S3":
        sel = (
            method.isin(["UCL", "HUCL"])
            & norm.isin(["ball", "sphere"])
            & (_col(table, "positives", "label") == "label")
        )
    elif claim == "S4":
        sel = norm == "none"
    else:
        sel = pd.Series(False, index=table.index)
    return table[sel]


def _class_mean_rank(last: pd.DataFrame) -> pd.Series | None:
    if "effective_rank" in last.columns:
        return pd.to_numeric(last["effective_rank"], errors="coerce")
    return None


def _is_nc(row: pd.Series) -> bool:
    return bool(row["etf_mean_mean"] < NC_ETF_TOL and row["within_class_variation_mean"] < NC_WCV_TOL)


def claim_details(table: pd.DataFrame) -> pd.DataFrame:
    """Per-setting evidence for each claim: seed-aggregated final metrics and an NC flag.

    Returns:
        One row per (claim, grid folder, config without seed): ``claim``, ``grid`` (when the
        table has a grid column; each scale of a claim grid is kept apart), the varying config
        columns, ``n_seeds``, metric means/stds, and ``nc`` (etf_mean and within_class_variation
        seed means below :data:`NC_ETF_TOL` / :data:`NC_WCV_TOL`).
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    out = []
    for claim in CLAIMS:
        if len(table) == 0:
            continue
        for grid in _claim_grids(table, claim):
            rows = _claim_rows(table, claim, grid)
            if len(rows) == 0:
                continue
            s = summarize(rows.drop(columns=["grid"], errors="ignore"))
            for m in ("etf_mean", "within_class_variation"):
                if f"{m}_mean" not in s.columns:
                    raise ValueError(f"table lacks the metric {m!r} needed to judge claim {claim}")
            if grid is not None:
                s.insert(0, "grid", grid)
            s.insert(0, "claim", claim)
            s["nc"] = [_is_nc(r) for _, r in s.iterrows()]
            out.append(s)
    return pd.concat(out, ignore_index=True, sort=False) if out else pd.DataFrame()


def _fmt_setting(row: pd.Series, cols: Sequence[str]) -> str:
    parts = []
    for c in cols:
        if c in row.index and not (isinstance(row[c], float) and math.isnan(row[c])):
            v = row[c]
            parts.append(f"{c}={v:g}" if isinstance(v, (float, np.floating)) else f"{c}={v}")
    return ",".join(parts)


def _metric_str(row: pd.Series, m: str) -> str:
    return _pm(row.get(f"{m}_mean", float("nan")), row.get(f"{m}_std", float("nan")))


def evaluate_claims(table: pd.DataFrame) -> pd.DataFrame:
    """Judge claims S1-S4 and R5 (spec/hcl.md §4, §5.7) from a results table.

    Criteria (final epoch, seed means; thresholds are module constants):
      * NC = ``etf_mean`` < NC_ETF_TOL and ``within_class_variation`` < NC_WCV_TOL.
      * S1: every SCL/HSCL setting with ball/sphere normalisation is NC.
      * S2: every UCL label-positive setting is NC and every noise-positive setting is not.
      * S3: judged per setting (config without method/beta, e.g. encoder x normalisation)
        over its HUCL betas (beta > 0): the ETF deviation grows (Spearman correlation between
        beta and the seed-mean ``etf_mean`` > 0.5 and etf_mean at the largest beta above that
        at the smallest by more than 2 pooled seed stds) and no HUCL setting is NC.
      * S4: no setting without normalisation is NC, and every run is dimensionally collapsed:
        ``spectrum_min`` < DC_SPECTRUM_TOL (the value at initialisation is reported alongside).
      * R5: every batch size >= 64 is NC and batch size 32 is not (or has etf_mean above every
        larger batch size by 2 seed stds).

    Runs are taken from the claim's grid folder (``grid`` column equal to the grid name, or the
    name plus ``-<scale>``); each scale found is judged apart. Without a ``grid`` column runs
    are selected by method/normalisation (S1-S4; R5 then has no data).

    Returns:
        One row per claim and grid folder (default scale first; one "no data" row for a claim
        without runs): ``claim``, ``grid`` ("" without a grid column), ``statement``,
        ``n_runs``, ``measured`` (numbers with seed spread), ``verdict`` ("reproduced",
        "not reproduced", "partly reproduced" or "no data").
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    details = claim_details(table) if len(table) else pd.DataFrame()
    rows = []
    for claim, (statement, _grid) in CLAIMS.items():
        d_claim = details[details["claim"] == claim] if len(details) else details
        if len(d_claim) == 0:
            rows.append(
                dict(claim=claim, grid="", statement=statement, n_runs=0, measured="", verdict="no data")
            )
            continue
        for grid in _claim_grids(table, claim):
            d = d_claim if grid is None else d_claim[d_claim["grid"] == grid]
            if len(d) == 0:
                continue
            sel = _claim_rows(table, claim, grid)
            d = d.drop(columns=["grid"], errors="ignore")
            empty = [c for c in _setting_cols(d) if d[c].isna().all()]  # other grids' columns
            d = d.drop(columns=empty)
            verdict, measured = _JUDGES[claim](d, sel)
            rows.append(
                dict(
                    claim=claim,
                    grid=grid or "",
                    statement=statement,
                    n_runs=int(sel[store.RUN_KEY].nunique()),
                    measured=measured,
                    verdict=verdict,
                )
            )
    return pd.DataFrame(rows)


def _setting_cols(d: pd.DataFrame) -> list[str]:
    skip = {"claim", "n_seeds", "nc"}
    return [c for c in d.columns if c not in skip and not c.endswith("_mean") and not c.endswith("_std")]


def _listing(d: pd.DataFrame, metrics: Sequence[str] = ("etf_mean", "within_class_variation")) -> str:
    cols = _setting_cols(d)
    parts = []
    for _, r in d.iterrows():
        vals = " ".join(f"{m}={_metric_str(r, m)}" for m in metrics if f"{m}_mean" in r.index)
        parts.append(f"[{_fmt_setting(r, cols)}] {vals} (n={r['n_seeds']})")
    return "; ".join(parts)


def _judge_s1(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    ok = d["nc"].to_numpy(dtype=bool)
    verdict = "reproduced" if ok.all() else ("not reproduced" if not ok.any() else "partly reproduced")
    return verdict, f"{int(ok.sum())}/{len(ok)} settings NC. " + _listing(d)


def _judge_s2(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    if "positives" not in d.columns:
        return "no data", "needs both label and noise positives. " + _listing(d)
    lab = d[d["positives"] == "label"]
    noi = d[d["positives"] == "noise"]
    if len(lab) == 0 or len(noi) == 0:
        return "no data", "needs both label and noise positives. " + _listing(d)
    a, b = bool(lab["nc"].all()), bool((~noi["nc"]).all())
    verdict = "reproduced" if a and b else ("partly reproduced" if a or b else "not reproduced")
    return verdict, f"label NC: {a}; noise not NC: {b}. " + _listing(d)


def _pooled_std(values: Iterable[float]) -> float:
    v = [x for x in values if math.isfinite(x)]
    return float(np.sqrt(np.mean(np.square(v)))) if v else 0.0


def _judge_s3(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    """S3 per setting (config without method/beta, e.g. encoder x normalisation), HUCL = beta > 0.

    A setting *grows* when, over its HUCL betas, Spearman rho(beta, etf_mean seed mean) > 0.5
    and etf_mean at its largest beta exceeds that at its smallest by more than 2 pooled seed
    stds (two betas: rho is the sign of the difference). Verdict: "reproduced" when every
    setting grows and no HUCL setting is NC; "not reproduced" when no setting grows and some
    HUCL setting is NC; else "partly reproduced".
    """
    from scipy.stats import spearmanr

    if "beta" not in d.columns:
        return "no data", "needs HUCL runs at two or more betas > 0. " + _listing(d)
    by = [c for c in _setting_cols(d) if c not in ("beta", "method")]
    groups = list(d.groupby(by, sort=False, dropna=False)) if by else [((), d)]
    parts, n_grow, n_judged, nc_betas = [], 0, 0, set()
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = _fmt_setting(pd.Series(dict(zip(by, key))), by) or "all"
        g = g.sort_values("beta", kind="mergesort")
        hucl = g[g["beta"] > 0]
        nc_here = [float(b) for b in hucl.loc[hucl["nc"].astype(bool), "beta"]]
        nc_betas.update(nc_here)
        curve = ", ".join(
            f"beta={b:g}{' (UCL)' if b == 0 else ''}: {_pm(e, sd)}{' NC' if nc else ''}"
            for b, e, sd, nc in zip(g["beta"], g["etf_mean_mean"], g["etf_mean_std"], g["nc"])
        )
        if hucl["beta"].nunique() < 2:
            parts.append(f"[{label}] {curve}; fewer than two HUCL betas: trend not judged")
            continue
        h = hucl.groupby("beta", sort=True).agg(
            etf=("etf_mean_mean", "mean"), sd=("etf_mean_std", _pooled_std)
        )
        betas, etf = h.index.to_numpy(dtype=float), h["etf"].to_numpy(dtype=float)
        if np.ptp(etf) == 0:
            rho = 0.0  # flat: no trend (Spearman is undefined for a constant input)
        elif len(betas) > 2:
            rho = float(spearmanr(betas, etf).statistic)
        else:
            rho = float(np.sign(etf[-1] - etf[0]))
        grows = bool(rho > 0.5 and etf[-1] - etf[0] > 2 * _pooled_std(h["sd"]))
        n_judged += 1
        n_grow += grows
        nc_txt = ", ".join(f"{b:g}" for b in nc_here) or "none"
        parts.append(
            f"[{label}] {curve}; HUCL Spearman rho={rho:.2f}, grows: {grows}; HUCL NC at beta: {nc_txt}"
        )
    if n_judged == 0:
        return "no data", "needs HUCL runs at two or more betas > 0. " + "; ".join(parts)
    all_grow, no_nc = n_grow == n_judged, not nc_betas
    if all_grow and no_nc:
        verdict = "reproduced"
    elif n_grow == 0 and not no_nc:
        verdict = "not reproduced"
    else:
        verdict = "partly reproduced"
    head = (
        f"ETF deviation grows over the HUCL betas in {n_grow}/{n_judged} settings (judged per setting); "
        f"HUCL (beta > 0) reaches NC at beta: {', '.join(f'{b:g}' for b in sorted(nc_betas)) or 'none'}. "
    )
    return verdict, head + " | ".join(parts)


def _judge_s4(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    no_nc = bool((~d["nc"]).all())
    last = final_epoch(rows)
    text = f"no setting NC: {no_nc}. "
    dc = None
    if "spectrum_min" in last.columns:
        spec = pd.to_numeric(last["spectrum_min"], errors="coerce")
        flags = spec < DC_SPECTRUM_TOL
        dc = bool(flags.all())
        first = rows[rows[store.EPOCH] == rows[store.EPOCH].min()]
        init = pd.to_numeric(first["spectrum_min"], errors="coerce")
        text += (
            f"class-mean spectrum_min {_pm(float(spec.mean()), float(spec.std(ddof=1)))} over {len(spec)} runs"
            f" (initialisation {_pm(float(init.mean()), float(init.std(ddof=1)))}; DC below"
            f" {DC_SPECTRUM_TOL:.2f}): DC in {int(flags.sum())}/{len(spec)} runs. "
        )
        rank = _class_mean_rank(last)
        if rank is not None:
            text += (
                f"class-mean effective rank {_pm(float(rank.mean()), float(rank.std(ddof=1)))} (ETF: C-1). "
            )
    metrics = ["etf_mean", "within_class_variation", "spectrum_min", "effective_rank", "mean_norm"]
    text += _listing(d, [m for m in metrics if f"{m}_mean" in d.columns])
    if dc is None:
        verdict = "partly reproduced (no spectrum metric)" if no_nc else "not reproduced"
    else:
        verdict = "reproduced" if no_nc and dc else ("partly reproduced" if no_nc or dc else "not reproduced")
    return verdict, text


def _judge_r5(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    if "batch_size" not in d.columns or not (d["batch_size"] == 32).any() or not (d["batch_size"] > 32).any():
        return "no data", "needs batch size 32 and larger ones. " + _listing(d)
    small = d[d["batch_size"] == 32]
    large = d[d["batch_size"] >= 64]
    large_nc = bool(large["nc"].all())
    worst_large = float(large["etf_mean_mean"].max())
    margin = 2 * _pooled_std(list(small["etf_mean_std"]) + list(large["etf_mean_std"]))
    small_worse = bool((~small["nc"]).all() or (small["etf_mean_mean"] > worst_large + margin).all())
    verdict = (
        "reproduced"
        if large_nc and small_worse
        else ("partly reproduced" if large_nc or small_worse else "not reproduced")
    )
    g = d.groupby("batch_size", sort=True)[["etf_mean_mean", "within_class_variation_mean"]].mean()
    trend = ", ".join(
        f"b={int(b)}: etf {e:.3g}, wcv {w:.3g}"
        for b, e, w in zip(g.index, g["etf_mean_mean"], g["within_class_variation_mean"])
    )
    return verdict, f"b>=64 all NC: {large_nc}; b=32 hindered: {small_worse}. Trend: {trend}. " + _listing(d)


_JUDGES = {"S1": _judge_s1, "S2": _judge_s2, "S3": _judge_s3, "S4": _judge_s4, "R5": _judge_r5}
