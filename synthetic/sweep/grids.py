"""Sweep grids: TOML files (stdlib ``tomllib``), scales, overrides and their expansion into run configs.

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

    # Optional in [sweep]: main_job_scales = ["quick", "paper"] -- the scales at which
    # `python -m figures` trains this grid (absent: every scale); at the others the main job
    # judges the grid's stored runs, if any, and its claims read NOT RUN otherwise.

    # Alternative to groups for the beta constraint: with `auto_hard = true` in [sweep], beta
    # picks the method inside each family (SCL/HSCL or UCL/HUCL): beta = 0 -> SCL/UCL,
    # beta > 0 -> HSCL/HUCL; e.g. axes method = ["SCL"], beta = [0, 2, 5] gives SCL, HSCL, HSCL.

    [claim]                          # the verdict criteria of the grid's claim (read by
    id = "S1"                        #   synthetic.claims.criteria; declared before the runs)

    [scale.paper.base]               # a named scale ("profile"): base and axes entries replace
    epochs = 400                     #   the default ones key by key; a [[scale.paper.group]]
    [scale.paper.axes]               #   list replaces all groups.
    seed = [0, 1, 2, 3, 4]

Without ``[[sweep.group]]`` the sweep is the plain cartesian product of the axes. A field may
appear in only one of base / axes / a group (an error names it otherwise). Scales: ``default``
(the ``[sweep]`` tables as written), any ``[scale.NAME]`` in the file, and ``quick`` (a smoke-test
scale: the file's ``[scale.quick]`` or, if absent, 2 epochs and the first seed only).
Duplicate configs (same key) produced by overlapping groups are run once.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomllib

from synthetic.engine.config import RunConfig

__all__ = [
    "GRIDS_DIR",
    "Grid",
    "grid_files",
    "load_grid",
    "parse_grid",
    "apply_scale",
    "expand_grid",
    "did_you_mean",
    "config_fields",
    "check_fields",
]

#: Folder of the grid files shipped with the package.
GRIDS_DIR = Path(__file__).resolve().parent.parent / "grids"

_SWEEP_KEYS = {"name", "claim", "description", "auto_hard", "main_job_scales", "base", "axes", "group"}
_HARD = {"SCL": "HSCL", "UCL": "HUCL"}
_EASY = {v: k for k, v in _HARD.items()}
_SCALE_KEYS = {"base", "axes", "group", "description"}


def _default_config_cls():

    return RunConfig


def did_you_mean(name: str, options) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options`` to ``name`` (difflib), else ``""``."""
    close = difflib.get_close_matches(str(name), [str(o) for o in options], n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def config_fields(config_cls: Any = None) -> list[str] | None:
    """The field names of the config class (default ``RunConfig``); None if it is not a dataclass."""
    cls = config_cls or _default_config_cls()
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else None


def check_fields(names, where: str, config_cls: Any = None) -> None:
    """Raise ValueError for names that are not config fields, with a "did you mean" for each.

    Args:
        names: field names to check.
        where: where they come from, for the message (``"grid g.toml, group 0"``, ``"--set"``).
        config_cls: the config class (default ``RunConfig``).
    """
    fields = config_fields(config_cls)
    if fields is None:
        return
    unknown = [n for n in names if n not in fields]
    if unknown:
        hints = [did_you_mean(n, fields) for n in unknown]
        parts = [f"{n!r}{h}" for n, h in zip(unknown, hints, strict=True)]
        known = "" if all(hints) else f"; known fields: {', '.join(fields)}"
        raise ValueError(
            f"{where}: unknown config field{'s' if len(unknown) > 1 else ''} {', '.join(parts)}{known}"
        )


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
        ``{"name", "claim", "description", "auto_hard", "main_job_scales", "base", "axes",
        "groups", "scales", "criteria"}`` with ``axes`` and each group mapping field -> list of
        values; ``main_job_scales`` the scales at which ``python -m figures`` trains the grid
        (``None``: every scale; a grid too costly for the main job's budget at some scale lists
        the others, and its stored runs are still judged).
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"grid {source} must be a mapping, got {type(spec).__name__}")
    unknown = set(spec) - {"sweep", "scale", "claim"}
    if unknown:
        hints = "".join(did_you_mean(u, ("sweep", "scale")) for u in sorted(unknown))
        raise ValueError(
            f"grid {source}: unknown top-level tables {sorted(unknown)}{hints}; expected [sweep], [scale.NAME]"
        )
    sweep = _check_table(spec.get("sweep"), f"grid {source}: [sweep]")
    bad = set(sweep) - _SWEEP_KEYS
    if bad:
        hints = "".join(did_you_mean(b, _SWEEP_KEYS) for b in sorted(bad))
        raise ValueError(
            f"grid {source}: unknown keys {sorted(bad)} in [sweep]{hints}; expected {sorted(_SWEEP_KEYS)}"
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
        # the verdict criteria of the grid's claim, declared before the runs (synthetic.claims.criteria)
        "criteria": _check_table(spec.get("claim"), f"grid {source}: [claim]"),
    }
    if not isinstance(out["auto_hard"], bool):
        raise ValueError(f"grid {source}: sweep.auto_hard must be true or false, got {out['auto_hard']!r}")
    job = sweep.get("main_job_scales")
    if job is not None and (not isinstance(job, list) or not all(isinstance(x, str) and x for x in job)):
        raise ValueError(f"grid {source}: sweep.main_job_scales must be a list of scale names, got {job!r}")
    # the scales at which `python -m figures` trains the grid (None: every scale)
    out["main_job_scales"] = None if job is None else list(job)
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
            hints = "".join(did_you_mean(b, _SCALE_KEYS) for b in sorted(bad))
            raise ValueError(
                f"grid {source}: unknown keys {sorted(bad)} in [scale.{sname}]{hints}; expected {sorted(_SCALE_KEYS)}"
            )
        out["scales"][sname] = copy.deepcopy(sc)
    if out["main_job_scales"] is not None:
        known = {"default", "quick", *out["scales"]}
        strays = sorted(set(out["main_job_scales"]) - known)
        if strays:
            hints = "".join(did_you_mean(u, known) for u in strays)
            raise ValueError(
                f"grid {source}: sweep.main_job_scales names unknown scales {strays}{hints}; "
                f"known: {sorted(known)}"
            )
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
        raise ValueError(
            f"scale {scale!r} is not defined in grid {source}{did_you_mean(scale, known)}; known: {known}"
        )
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
            ``synthetic.engine.config.RunConfig``.
        source: the grid's name in error messages.

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
            d.update(zip(names, combo, strict=True))
            if spec.get("auto_hard") and "method" in d:
                beta = d.get("beta", 0.0)
                if isinstance(beta, (int, float)) and beta > 0:
                    d["method"] = _HARD.get(d["method"], d["method"])
                elif isinstance(beta, (int, float)) and beta == 0:
                    d["method"] = _EASY.get(d["method"], d["method"])
            if fields is not None and set(d) - fields:
                where = f"grid {source}" + (f", group {gi}" if spec["groups"] else "")
                check_fields(sorted(set(d) - fields), where, cls)
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
                f"grid {str(grid)!r} is neither a TOML file nor a shipped grid"
                f"{did_you_mean(path.stem, grid_files())} ({sorted(grid_files())})"
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
    if overrides:
        check_fields(list(overrides), "overrides", config_cls)
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
