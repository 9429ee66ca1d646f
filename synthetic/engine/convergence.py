"""When a run has settled: the convergence rule of the synthetic engine (docs/claims.md#convergence-and-undecided).

A run with ``settle_window = W > 0`` (:class:`synthetic.engine.config.RunConfig`) is judged at
every recorded epoch ``e >= W`` on its **scale-free** metrics over the trailing window
``[e - w, e]`` with ``w = max(W, e // 2)``: the last half of the run, and at least W epochs (the
recorded rows whose epoch is at least ``e - w``). A window that grows with the run is what makes
a slow drift visible: a metric that still moves like ``log e`` changes by the same amount over
every last half and never settles, while a fixed window would shrink its change and call it
settled; a short plateau early in training is not taken for the end either.

* ``etf_mean`` (deviation of the class-mean Gram from the simplex ETF);
* ``within_class_relative`` = ``within_class_variation / mean_norm`` (mean distance to the class
  mean in units of the mean feature norm: scale-free where the norms grow without normalisation);
* ``rank_1e-2`` and ``rank_1e-4`` (numerical ranks of the centred class means);
* ``effective_rank`` of the class means;
* ``gap_to_optimum`` (the loss minus its closed-form NC value), only where the features are
  normalised (without normalisation the loss has no minimiser and the gap is not scale-free) and
  the closed form exists (a gap that is NaN throughout the window, as for InfoNCE and WeiNCE, is
  not watched).

The **change** of a metric over the window is its range (max - min over the window's rows); the
run has **settled** at ``e`` when every change is at most its tolerance (``settle_etf``,
``settle_wcv``, ``settle_rank``, ``settle_erank``, ``settle_gap``). A metric that is NaN in the
window makes its change NaN, and a NaN change is never within tolerance. The rule is declared with
the run (in the grid file, before any run) and is part of the run's key.

A settled run stops: the engine records the settling epoch as its last row and takes no more
steps for it; a run that has not settled when its ``epochs`` budget ends stops there, with
``settled`` False in its last row. Every row of a run with a rule carries :data:`SETTLE_COLUMNS`:
``settled`` (the rule held over the window ending at this row) and ``change_<metric>`` (the
window's change of each metric; NaN while the window is not yet full or where the metric does not
apply).

The tolerances are absolute, in each metric's own units, declared from what the verdicts can
resolve (defaults: a tenth of the claims' NC thresholds for ``etf_mean`` and the relative
within-class variation, no change at all in the integer ranks, a tenth of a dimension of effective
rank, 1e-3 of loss); a rule is a statement about the recorded epochs, so a change between two
recorded epochs (``eval_every``) is not seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synthetic.store.schema import SETTLED

__all__ = [
    "SETTLE_FIELDS",
    "check_rule_fields",
    "SETTLE_METRICS",
    "TOLERANCE_FIELDS",
    "SETTLE_COLUMNS",
    "SETTLED",
    "SettleRule",
    "settle_value",
    "window_changes",
    "settle_row",
]

#: The scale-free metrics the rule watches, in order.
SETTLE_METRICS = (
    "etf_mean",
    "within_class_relative",
    "rank_1e-2",
    "rank_1e-4",
    "effective_rank",
    "gap_to_optimum",
)

#: The columns a run with a rule adds to each row: ``settled`` and one ``change_<metric>`` each.
SETTLE_COLUMNS = (SETTLED, *(f"change_{m}" for m in SETTLE_METRICS))

#: The config fields of a rule and their defaults: both stacks' configs (``RunConfig``,
#: ``realdata.training.config.TrainConfig``) carry them. ``settle_window = 0`` means no rule.
SETTLE_FIELDS: dict[str, int | float] = {
    "settle_window": 0,
    "settle_etf": 0.005,  # a tenth of the claims' NC threshold on etf_mean (0.05)
    "settle_wcv": 0.01,  # a tenth of the NC threshold on the within-class variation (0.1)
    "settle_rank": 0,  # the numerical ranks are counts: constant over the window
    "settle_erank": 0.1,  # a tenth of one dimension of effective rank
    "settle_gap": 1e-3,  # loss units
}


def check_rule_fields(config: Any) -> None:
    """Validate the rule fields of a frozen config in place (floats made float), naming the field.

    Raises:
        ValueError: ``settle_window`` or ``settle_rank`` not an integer >= 0, or a tolerance not a
            finite number >= 0.
    """
    for name in ("settle_window", "settle_rank"):
        v = getattr(config, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    for name in ("settle_etf", "settle_wcv", "settle_erank", "settle_gap"):
        v = getattr(config, name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) and v >= 0
        if not ok:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        object.__setattr__(config, name, float(v))


#: The row columns a rule's gap can be read from (``SettleRule.gap_column``).
GAP_COLUMNS = ("gap_to_optimum", "eval_gap")

#: The config field holding each metric's tolerance.
TOLERANCE_FIELDS = {
    "etf_mean": "settle_etf",
    "within_class_relative": "settle_wcv",
    "rank_1e-2": "settle_rank",
    "rank_1e-4": "settle_rank",
    "effective_rank": "settle_erank",
    "gap_to_optimum": "settle_gap",
}


@dataclass(frozen=True)
class SettleRule:
    """A convergence rule: the trailing window (epochs) and the tolerance of each watched metric.

    Attributes:
        window: W >= 1 epochs, the shortest window (the window is the last half of the run once
            that is longer).
        tolerances: ``{metric: tolerance >= 0}`` for the metrics that apply (a subset of
            :data:`SETTLE_METRICS`).
    """

    window: int
    tolerances: Mapping[str, float]
    gap_column: str = "gap_to_optimum"

    def __post_init__(self) -> None:
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        if not isinstance(self.tolerances, Mapping) or not self.tolerances:
            raise ValueError("tolerances must be a non-empty mapping {metric: tolerance}")
        for m, t in self.tolerances.items():
            if m not in SETTLE_METRICS:
                raise ValueError(f"tolerances: unknown metric {m!r}; one of {SETTLE_METRICS}")
            if not isinstance(t, (int, float)) or isinstance(t, bool) or not (math.isfinite(t) and t >= 0):
                raise ValueError(f"tolerances[{m!r}] must be a finite number >= 0, got {t!r}")
        if self.gap_column not in GAP_COLUMNS:
            raise ValueError(f"gap_column must be one of {GAP_COLUMNS}, got {self.gap_column!r}")

    def value(self, row: Mapping[str, Any], metric: str) -> float:
        """The value of a watched metric in a row; the gap is read from :attr:`gap_column`."""
        if metric == "gap_to_optimum":
            return float(row[self.gap_column])
        return settle_value(row, metric)

    @classmethod
    def of(cls, config: Any) -> SettleRule | None:
        """The rule of a run config (``settle_window`` and ``settle_*`` fields), None without one.

        ``gap_to_optimum`` is watched only where the features are normalised
        (``normalization != "none"``), on the loss ``settle_loss`` names: the epoch's mean
        training loss (``"epoch"``, column ``gap_to_optimum``) or the deterministic evaluation
        loss (``"eval"``, column ``eval_gap``).
        """
        window = int(getattr(config, "settle_window", 0) or 0)
        if window <= 0:
            return None
        tol = {m: float(getattr(config, f)) for m, f in TOLERANCE_FIELDS.items()}
        if getattr(config, "normalization", "none") == "none":
            del tol["gap_to_optimum"]
        gap = "eval_gap" if getattr(config, "settle_loss", "epoch") == "eval" else "gap_to_optimum"
        return cls(window, tol, gap)


def settle_value(row: Mapping[str, Any], metric: str) -> float:
    """The value of a watched metric in a metric row (``within_class_relative`` is derived)."""
    if metric == "within_class_relative":
        wcv, norm = float(row["within_class_variation"]), float(row["mean_norm"])
        return wcv / norm if norm > 0 else math.nan
    return float(row[metric])


def _window(rows: Sequence[Mapping[str, Any]], rule: SettleRule) -> list[Mapping[str, Any]] | None:
    """The rows of the window ending at the last row, or None while it is not full."""
    if not rows:
        return None
    last = int(rows[-1]["epoch"])
    if last < rule.window:
        return None
    start = last - max(rule.window, last // 2)
    window = [r for r in rows if int(r["epoch"]) >= start]
    return window if len(window) >= 2 else None


def _watched(window: Sequence[Mapping[str, Any]], rule: SettleRule) -> list[str]:
    """The rule's metrics that apply: ``gap_to_optimum`` only where the closed form exists.

    The gap is NaN in every row where the loss has no closed-form optimum (InfoNCE / WeiNCE,
    ``d < C - 1``); it is then not watched. Any other NaN keeps the run unsettled.
    """
    out = []
    for m in rule.tolerances:
        if m == "gap_to_optimum" and all(math.isnan(rule.value(r, m)) for r in window[1:]):
            continue  # no closed form (the first row's gap may be NaN: epoch 0 has no loss)
        out.append(m)
    return out


def window_changes(rows: Sequence[Mapping[str, Any]], rule: SettleRule) -> dict[str, float]:
    """The change (max - min) of every watched metric over the window ending at the last row.

    The window of a last row at epoch ``e`` is ``[e - w, e]`` with ``w = max(W, e // 2)``.

    Args:
        rows: the run's recorded rows so far, in epoch order (each with ``epoch`` and the metrics).
        rule: the convergence rule.

    Returns:
        ``{metric: change}`` for every metric of :data:`SETTLE_METRICS`: NaN while the window is
        not full (last epoch < W), for a metric the rule does not watch, and where a value in the
        window is NaN.
    """
    out = dict.fromkeys(SETTLE_METRICS, math.nan)
    window = _window(rows, rule)
    if window is None:
        return out
    for m in rule.tolerances:
        vals = [rule.value(r, m) for r in window]
        if any(math.isnan(v) for v in vals):
            continue
        out[m] = max(vals) - min(vals)
    return out


def settle_row(rows: Sequence[Mapping[str, Any]], rule: SettleRule) -> dict[str, Any]:
    """The :data:`SETTLE_COLUMNS` of the last row: whether the rule holds and the window's changes.

    The rule holds when the window is full and the change of every metric that applies is within
    its tolerance (a NaN change never is).
    """
    changes = window_changes(rows, rule)
    window = _window(rows, rule)
    ok = window is not None and all(changes[m] <= rule.tolerances[m] for m in _watched(window, rule))
    return {SETTLED: bool(ok), **{f"change_{m}": changes[m] for m in SETTLE_METRICS}}
