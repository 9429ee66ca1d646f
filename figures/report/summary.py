"""The report at a glance: claims grouped by outcome, and the settings a group of claims shares.

:func:`summarize` puts every row of the claims table (:func:`figures.report.assemble.assemble`)
into exactly one outcome group -- what reproduces, what reproduces in part, what does not, what is
undecided, what was not run -- through :data:`OUTCOME_GROUPS`, a mapping from the verdict value of
the claims record (``theory.claims.Verdict``) to the group's title. A verdict value the mapping
does not know gets a group of its own, titled by the value, after the known groups: a new verdict
is shown, never dropped. Each line carries the deciding numbers (:func:`deciding_numbers`).

:func:`setting_groups` splits the claims table into runs of consecutive claims judged by the same
command and states the setting they share once, at the head of the run (:class:`SettingGroup`);
each row then shows only what is its own (:func:`own_setting`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OUTCOME_GROUPS",
    "SUMMARY_NUMBERS",
    "OutcomeGroup",
    "SettingGroup",
    "summarize",
    "deciding_numbers",
    "setting_groups",
    "own_setting",
]

#: The summary group of each verdict value, in the order the summary shows the groups (a title
#: may collect several values). A value missing here gets its own group, titled by the value,
#: after these.
OUTCOME_GROUPS: dict[str, str] = {
    "PASS": "Reproduces",
    "REPRODUCED": "Reproduces",
    "PARTLY": "Reproduces in part",
    "FAIL": "Does not reproduce",
    "NOT REPRODUCED": "Does not reproduce",
    "UNDECIDED": "Undecided",
    "NOT RUN": "Not run",
    "FOUND": "Open problems: found",
    "NOT FOUND": "Open problems: not found",
}

#: Evidence items shown on a summary line (the judges list their deciding numbers first).
SUMMARY_NUMBERS = 3


@dataclass
class OutcomeGroup:
    """One outcome group of the summary: its title and its rows (catalogue order)."""

    title: str
    rows: list[Any] = field(default_factory=list)


def _value(verdict: Any) -> str:
    return str(getattr(verdict, "value", verdict))


def summarize(rows: list[Any], groups: dict[str, str] | None = None) -> list[OutcomeGroup]:
    """Every row in exactly one outcome group; the groups in order, empty ones left out.

    Args:
        rows: the claims table (``ClaimRow``: ``.record.verdict``).
        groups: verdict value -> group title (default :data:`OUTCOME_GROUPS`).

    Returns:
        The known groups in the order of ``groups``, then one group per unknown verdict value
        (titled by the value), in order of first appearance.
    """
    groups = OUTCOME_GROUPS if groups is None else groups
    out: dict[str, OutcomeGroup] = {title: OutcomeGroup(title) for title in groups.values()}
    for r in rows:
        v = _value(r.record.verdict)
        title = groups.get(v, v)
        out.setdefault(title, OutcomeGroup(title)).rows.append(r)
    return [g for g in out.values() if g.rows]


def deciding_numbers(rec: Any, limit: int = SUMMARY_NUMBERS) -> list[str]:
    """The numbers a verdict rests on, as text: the record's first evidence items.

    A record without evidence gives its worst sub-check's first number, named by the sub-check;
    a NOT RUN record gives none (its summary line names the command instead).
    """
    if _value(rec.verdict) == "NOT RUN":
        return []
    ev = [e.text() for e in rec.evidence[:limit]]
    if not ev and rec.subchecks:
        w = rec.worst()
        if w is not None and w.evidence:
            ev = [f"{w.what}: {w.evidence[0].text()}"]
    return ev


@dataclass
class SettingGroup:
    """Consecutive claims judged by one command, and the setting items they all share."""

    producer: str
    rows: list[Any]
    shared: dict[str, str]

    @property
    def ids(self) -> str:
        """``"T1-W-law"``-style span of the group's ids (a single id when it holds one row)."""
        first, last = self.rows[0].id, self.rows[-1].id
        return first if first == last else f"{first} – {last}"


def _producer(row: Any) -> str:
    """The program that judged a row's record: ``theory`` of ``python -m theory --quick``."""
    m = re.match(r"\s*python\s+-m\s+([\w.]+)", row.record.command or "")
    return m.group(1) if m else getattr(row.entry, "package", "")


def setting_groups(rows: list[Any]) -> list[SettingGroup]:
    """The claims table as runs of consecutive rows with one producer and their shared setting.

    ``shared`` holds the ``key=value`` items every row of the run carries (empty for a run of one
    row, or when the rows share nothing); the groups cover the rows once, in order.
    """
    out: list[SettingGroup] = []
    for r in rows:
        p = _producer(r)
        if out and out[-1].producer == p:
            out[-1].rows.append(r)
        else:
            out.append(SettingGroup(p, [r], {}))
    for g in out:
        if len(g.rows) > 1:
            first = g.rows[0].record.setting
            g.shared = {
                k: v for k, v in first.items() if all(x.record.setting.get(k) == v for x in g.rows[1:])
            }
    return out


def own_setting(rec: Any, shared: dict[str, str]) -> dict[str, str]:
    """The record's setting without the items its group states once."""
    return {k: v for k, v in rec.setting.items() if shared.get(k) != v}
