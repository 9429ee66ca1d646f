"""The claims report's content: one row per claim, and the environment the job ran in.

Both report files (:mod:`figures.report.markdown`, :mod:`figures.report.html`) list every claim
id of the catalogue (``theory.claims.CATALOGUE``: T1-T8, W-law, S1-S4, R1-R5, W1-W5) exactly
once, in catalogue order (:func:`assemble`), with its statement, verdict, evidence (numbers with
their spread), the figures that show it, the exact command that reproduces it and the setting it
was tested in. A claim without results reads NOT RUN and gives the command that produces them.
When several records exist for one claim (e.g. results at two scales, or a record picked up from
another machine), the first one with a result (not NOT RUN) is the claim's row and the others
are listed under it as further results. :func:`environment` gives package versions, git commit,
device and scale.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from figures.pipeline import children
from figures.plots import registry
from figures.report.commands import command_for
from theory import claims

__all__ = ["ClaimRow", "assemble", "environment", "PACKAGES"]


#: Packages whose versions the environment block lists.
PACKAGES = (
    "numpy",
    "scipy",
    "torch",
    "pandas",
    "matplotlib",
    "seaborn",
    "cvxpy",
    "clarabel",
    "scs",
    "sympy",
    "scikit-learn",
    "tqdm",
    "joblib",
    "dask",
)


_EVIDENCE_SHOWN = 6


@dataclass
class ClaimRow:
    """One row of the claims table: the catalogue entry, its record, further records, its figures."""

    id: str
    entry: Any
    record: Any
    others: list[Any] = field(default_factory=list)
    figures: list[Any] = field(default_factory=list)  # FigureResult or bare ids


def assemble(
    records: list[Any], figure_results: list[Any], *, results: str = "results", scale: str = "default"
) -> list[ClaimRow]:
    """One :class:`ClaimRow` per catalogue id, in catalogue order.

    Args:
        records: claim records from every stage (any order; several per id allowed).
        figure_results: the figures' outcomes (``FigureResult``).
        results: the results folder (for the NOT RUN commands).
        scale: the scale (for the NOT RUN commands).

    Raises:
        ValueError: a record with an id outside the catalogue.
    """
    by_id: dict[str, list[Any]] = {cid: [] for cid in claims.CATALOGUE}
    for r in records:
        if r.id not in by_id:
            raise ValueError(f"record id must be a catalogue id, got {r.id!r}")
        by_id[r.id].append(r)
    figs = {f.id: f for f in figure_results}
    all_specs = registry.all_figures()
    rows = []
    for cid, entry in claims.CATALOGUE.items():
        recs = by_id[cid]
        ran = [r for r in recs if r.verdict != claims.Verdict.NOT_RUN]
        if ran:
            primary = ran[0]
        elif recs:
            primary = recs[0]
        else:
            primary = claims.not_run(
                cid,
                command_for(cid, results=results, scale=scale),
                notes="no stage produced a result for this claim",
            )
        others = [r for r in recs if r is not primary and (r.verdict != claims.Verdict.NOT_RUN)]
        ids: list[str] = []
        for r in [primary, *others]:
            ids += [f for f in r.figures if f not in ids]
        ids += [s.id for s in all_specs if cid in s.claims and s.id not in ids]
        rows.append(ClaimRow(cid, entry, primary, others, [figs.get(i, i) for i in ids]))
    return rows


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str:
    root = Path(__file__).resolve().parents[2]  # the repository (figures/report/ is two levels down)
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def environment(ctx: Any) -> dict[str, str]:
    """Package versions, git commit, device, scale, command line and date of the run."""
    commit = _git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    if commit and dirty:
        commit += " (with uncommitted changes)"
    env = {
        "date (UTC)": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(["python -m figures", *ctx.argv]),
        "scale": ctx.scale,
        "results folder": str(ctx.results),
        "output folder": str(ctx.out),
        "git commit": commit,
        "device": children.device_description(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "jobs": str(ctx.jobs),
    }
    if ctx.scheduler:
        env["scheduler"] = ctx.scheduler
    for p in PACKAGES:
        env[p] = _version(p)
    return env


def _evidence(rec: Any) -> list[str]:
    return [e.text() for e in rec.evidence]


def _setting_text(setting: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items())


def _setting(rec: Any) -> str:
    return _setting_text(rec.setting)


def _md(text: str) -> str:
    """Escape a cell of a markdown table."""
    return (
        str(text)
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("\n", " ")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


def _fig_id(f: Any) -> str:
    return f if isinstance(f, str) else f.id


def _rendered(f: Any) -> bool:
    return not isinstance(f, str) and f.status == "rendered"


def _fig_status(f: Any) -> str:
    """``"not available"``, ``"failed"`` or, for a figure this run did not select, ``"not rendered in this run"``."""
    return "not rendered in this run" if isinstance(f, str) else f.status


def _style_text(note: str) -> str:
    return f"reproduced in the style of the authors' notebooks ({note})" if note else ""
