"""The figure registry: what each figure shows, which tidy tables it needs, and how it renders.

Every figure module ``figures/fig_*.py`` declares a tuple ``FIGURES`` of :class:`FigureSpec`
(one per figure id; a module may declare the SCL/HSCL and the UCL/HUCL variant of one figure)
and a pure ``render(tables, **options) -> Figure``: no training, no file I/O, only pandas,
numpy, matplotlib and :mod:`figures.style`. :data:`MODULES` lists the modules in gallery order;
:func:`all_figures` collects their specs.

A figure is *available* when each table it needs is present, non-empty and has the required
columns, and its own ``check`` (if any) finds the data it draws (:func:`availability`). A figure
that is not available is reported as such, with the reason and the command that produces its
data (``FigureSpec.produce``) -- never silently skipped.

Table names used by the figures (producers in :mod:`figures.sources`):

``synthetic``         per (run, epoch) synthetic results: config columns, ``run_key``, ``epoch``,
                      metric columns (``python -m synthetic`` tables, with a ``grid`` column)
``spectrum``          per (run, epoch, index): the sorted normalised class-mean spectrum
                      ``log_ratio = log(sigma_i / sigma_max)`` and the run's config columns
``harris_gap``        Harris Monte Carlo: ``setting, beta, estimate, ci_low, ci_high, confidence``
``hucl_nc``           ``num_classes, beta, hucl_at_nc, q, ucl_optimum, scl_optimum``
``gram``              ``num_classes, program, row, col, value`` (optimal and ETF Gram matrices)
``noise_floor``       ``n, mse_softmax, mse_weibit, se_mse_softmax, se_mse_weibit,
                      theory_weibit, bias2_floor, c``
``pot_exceedances``   ``y`` (exceedances over the threshold)
``pot_fit``           one row: ``q, threshold, n_exceed, xi, sigma, exp_sigma, endpoint``
``pot_density``       ``y, gpd, exponential`` (fitted densities on a grid of exceedances)
``pot_qq``            ``p, empirical, gpd, exponential``
``pot_stability``     ``q, threshold, n_exceed, xi``
``lambda_profile``    ``lam, loglik`` (profile log-likelihood of lambda)
``lambda_fit``        one row: ``lam_hat, loglik, loglik0, lr_stat, p_boundary, n_rows``
``weince_gate``       per (step or epoch, anchor): ``epoch, lambda, lambda_rho, lambda_aic, daic``
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = [
    "TableNeed",
    "FigureSpec",
    "Availability",
    "MODULES",
    "all_figures",
    "get",
    "availability",
    "select",
]


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


#: Figure modules in gallery order.
MODULES = (
    "fig_spectrum",
    "fig_conditions",
    "fig_within_class",
    "fig_ncm",
    "fig_normalization",
    "fig_vs_beta",
    "fig_positives",
    "fig_batch_size",
    "fig_near_nc",
    "fig_loss_optimum",
    "fig_harris",
    "fig_hucl_nc",
    "fig_gram",
    "fig_noise_floor",
    "fig_pot",
    "fig_lambda_profile",
    "fig_lambda_training",
)


def all_figures() -> list[FigureSpec]:
    """Every registered figure, in gallery order.

    Raises:
        ValueError: two figures share an id.
    """
    out: list[FigureSpec] = []
    seen: set[str] = set()
    for name in MODULES:
        mod = importlib.import_module(f"figures.{name}")
        for spec in mod.FIGURES:
            if spec.id in seen:
                raise ValueError(f"figure id {spec.id!r} is declared twice (module {name})")
            seen.add(spec.id)
            out.append(spec)
    return out


def get(figure_id: str) -> FigureSpec:
    """The spec of ``figure_id``.

    Raises:
        ValueError: unknown id (the message lists the known ones).
    """
    specs = {s.id: s for s in all_figures()}
    if figure_id not in specs:
        raise ValueError(f"figure_id must be one of {sorted(specs)}, got {figure_id!r}")
    return specs[figure_id]


def select(ids: Sequence[str] | None, specs: Sequence[FigureSpec] | None = None) -> list[FigureSpec]:
    """The figures named by ``ids``: figure ids, or claim ids (every figure illustrating it).

    Args:
        ids: figure or claim ids; None or empty selects every figure.
        specs: the candidate figures (default :func:`all_figures`).

    Raises:
        ValueError: an id that names neither a figure nor a claim any figure illustrates.
    """
    specs = list(all_figures() if specs is None else specs)
    if not ids:
        return specs
    by_id = {s.id: s for s in specs}
    chosen: dict[str, FigureSpec] = {}
    for i in ids:
        if i in by_id:
            chosen[i] = by_id[i]
            continue
        matched = [s for s in specs if i in s.claims]
        if not matched:
            raise ValueError(
                f"--only: {i!r} is neither a figure id nor a claim id shown by a figure; "
                f"figure ids: {', '.join(by_id)}"
            )
        for s in matched:
            chosen[s.id] = s
    return [s for s in specs if s.id in chosen]


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
