"""What a figure is: the tidy tables it needs, its options, its renderer, and when it can be drawn.

A :class:`FigureSpec` (one per figure id) names the tables it reads (:class:`TableNeed`) and a
pure ``render(tables, **options) -> Figure``; :func:`availability` says whether the tables at hand
allow it (absent or empty tables, missing columns, the figure's own ``check``) and, if not, why
and with which command its data are produced (:class:`Availability`). The figure modules declare
their specs here; :mod:`figures.plots.registry` collects them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["TableNeed", "FigureSpec", "Availability", "availability"]


@dataclass(frozen=True)
class TableNeed:
    """One tidy table a figure reads.

    Args:
        name: the table name (see the module docstring).
        columns: columns that must be present.
        optional: columns used when present (the figure adapts when they are absent).
        required: False for a table the figure uses when present and draws without otherwise.
    """

    name: str
    columns: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    required: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "optional", tuple(self.optional))


@dataclass(frozen=True)
class FigureSpec:
    """Declaration of one figure.

    Args:
        id: the figure id (file name stem, ``[A-Za-z0-9_-]``).
        title: the figure's title (its suptitle).
        claims: claim ids (``theory.claims.CATALOGUE``) the figure illustrates.
        needs: the tables it reads.
        render: ``render(tables, **options) -> Figure``.
        produce: the command that produces its data, shown when it is not available.
        options: keyword arguments passed to ``render`` (e.g. ``{"family": "UCL"}``).
        check: optional ``check(tables, **options) -> str | None``: a reason why the tables hold
            nothing to draw (e.g. no UCL runs), or None.
        description: one sentence for the report's gallery.
        style_note: where the figure follows the authors' notebooks (N1-N6), else "".
    """

    id: str
    title: str
    claims: tuple[str, ...]
    needs: tuple[TableNeed, ...]
    render: Callable[..., Any]
    produce: str
    options: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[..., str | None] | None = None
    description: str = ""
    style_note: str = ""

    def __post_init__(self) -> None:
        import re

        if not isinstance(self.id, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,80}$", self.id):
            raise ValueError(f"id must be 1-81 characters from [A-Za-z0-9_-], got {self.id!r}")
        if not callable(self.render):
            raise ValueError(f"render of figure {self.id} must be callable")
        object.__setattr__(self, "claims", tuple(self.claims))
        object.__setattr__(self, "needs", tuple(self.needs))
        object.__setattr__(self, "options", dict(self.options))

    @property
    def table_names(self) -> tuple[str, ...]:
        """Names of the tables the figure reads."""
        return tuple(n.name for n in self.needs)

    def build(self, tables: Mapping[str, pd.DataFrame]):
        """``render`` applied to the needed tables and the spec's options."""
        return self.render({k: tables[k] for k in self.table_names if k in tables}, **self.options)


@dataclass(frozen=True)
class Availability:
    """Whether a figure can be drawn; ``reason`` and ``produce`` say why not and how to fix it."""

    ok: bool
    reason: str = ""
    produce: str = ""


def availability(spec: FigureSpec, tables: Mapping[str, pd.DataFrame]) -> Availability:
    """Can ``spec`` be drawn from ``tables``? (absent / empty tables, missing columns, ``check``)."""
    problems = []
    for need in spec.needs:
        t = tables.get(need.name)
        if not need.required:
            continue
        if t is None:
            problems.append(f"table '{need.name}' is absent")
            continue
        if not isinstance(t, pd.DataFrame) or len(t) == 0:
            problems.append(f"table '{need.name}' is empty")
            continue
        missing = [c for c in need.columns if c not in t.columns]
        if missing:
            problems.append(f"table '{need.name}' lacks the columns {missing}")
    if not problems and spec.check is not None:
        why = spec.check({k: tables[k] for k in spec.table_names if k in tables}, **spec.options)
        if why:
            problems.append(why)
    if problems:
        return Availability(False, "; ".join(problems), spec.produce)
    return Availability(True)
