"""Claim records as a table: one row per claim, or one per sub-check; CSV and the text table.

:func:`to_frame` flattens records (:class:`theory.claims.record.Claim`) for pandas,
:func:`to_csv` writes them, :func:`format_table` is the verification table printed by
``python -m theory``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from theory.claims.record import Claim, Evidence

__all__ = ["to_frame", "to_csv", "format_table"]


def _evidence_text(evs: Sequence[Evidence]) -> str:
    return "; ".join(e.text() for e in evs)


def _setting_text(setting: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items())


def to_frame(claims: Iterable[Claim], *, subchecks: bool = False) -> Any:
    """Tidy ``pandas.DataFrame``: one row per claim (or per sub-check with ``subchecks=True``).

    Columns (per claim): ``id, statement, verdict, evidence, setting, command, criterion,
    figures, checks, instances, worst``. Per sub-check: ``id, what, verdict, evidence, setting,
    instances, note``.
    """
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for c in claims:
        if subchecks:
            for s in c.subchecks:
                rows.append(
                    {
                        "id": c.id,
                        "what": s.what,
                        "verdict": s.verdict.value,
                        "evidence": _evidence_text(s.evidence),
                        "setting": _setting_text(s.setting),
                        "instances": s.instances,
                        "note": s.note,
                    }
                )
            continue
        w = c.worst()
        rows.append(
            {
                "id": c.id,
                "statement": c.statement,
                "verdict": c.verdict.value,
                "evidence": _evidence_text(c.evidence),
                "setting": _setting_text(c.setting),
                "command": c.command,
                "criterion": c.criterion,
                "figures": " ".join(c.figures),
                "checks": len(c.subchecks),
                "instances": c.instances,
                "worst": _evidence_text(w.evidence[:1]) if w is not None and w.evidence else "",
            }
        )
    cols = (
        ["id", "what", "verdict", "evidence", "setting", "instances", "note"]
        if subchecks
        else [
            "id",
            "statement",
            "verdict",
            "evidence",
            "setting",
            "command",
            "criterion",
            "figures",
            "checks",
            "instances",
            "worst",
        ]
    )
    return pd.DataFrame(rows, columns=cols)


def to_csv(claims: Iterable[Claim], *, subchecks: bool = False) -> str:
    """CSV text of :func:`to_frame` (RFC 4180 quoting)."""
    frame = to_frame(claims, subchecks=subchecks)
    buf = io.StringIO()
    frame.to_csv(buf, index=False, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    return buf.getvalue()


def format_table(claims: Iterable[Claim], *, subchecks: bool = True) -> str:
    """Plain-text table: one row per claim, then one line per sub-check when ``subchecks``.

    The claim rows show id, statement, checks, instances, worst and verdict.
    """
    claims = list(claims)
    head = (
        f"{'claim':6} {'statement':48} {'checks':>8} {'instances':>10}  "
        f"{'worst (sub-check nearest its tolerance)':40} result"
    )
    lines = [head, "-" * len(head)]
    for c in claims:
        w = c.worst()
        worst = "-"
        if w is not None and w.evidence:
            e = w.evidence[0]
            worst = (
                f"{e.label} {e.value:.2e} (tol {e.spread:.0e})"
                if e.spread_kind == "tol" and e.spread is not None
                else e.text()
            )
        checks = f"{len(c.subchecks)} checks" if c.subchecks else "no check ran"
        lines.append(
            f"{c.id:6} {c.statement[:48]:48} {checks:>8} {c.instances:>10}  {worst:40} {c.verdict.value}"
        )
    if subchecks:
        lines += ["", "sub-checks:"]
        for c in claims:
            for s in c.subchecks:
                first = s.evidence[0] if s.evidence else None
                val = f"{first.label} {first.value:.2e}" if first is not None else ""
                tol = (
                    f"tol {first.spread:.0e}"
                    if first is not None and first.spread_kind == "tol" and first.spread is not None
                    else ""
                )
                note = f"  [{s.note}]" if s.note else ""
                lines.append(
                    f"  {c.id:6} {s.verdict.value:4}  {val:20} {tol:9}  n={s.instances:<8} {s.what}{note}"
                )
    return "\n".join(lines)
