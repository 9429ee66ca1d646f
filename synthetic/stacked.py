"""Stacked training under its former names (kept for callers that predate :mod:`synthetic.plan`).

The engine (:mod:`synthetic.engine`) trains 1..R runs; :func:`synthetic.plan.plan` decides which
runs train together and whether a group is stacked. :func:`stack_groups` and
:func:`train_stacked` are that plan and that engine under the names the sweep used first.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from synthetic.config import RunConfig
from synthetic.plan import MAX_STACK, VARYING_FIELDS, plan, stack_key, train_group

__all__ = ["VARYING_FIELDS", "stack_key", "stackable", "stack_groups", "train_stacked"]


def stackable(configs: Sequence[RunConfig]) -> bool:
    """True if ``configs`` (a non-empty list of RunConfig) share one :func:`stack_key`."""
    if not isinstance(configs, (list, tuple)) or not configs:
        return False
    if not all(isinstance(c, RunConfig) for c in configs):
        return False
    k = stack_key(configs[0])
    return all(stack_key(c) == k for c in configs[1:])


def stack_groups(configs: Sequence[RunConfig], max_stack: int = MAX_STACK) -> list[list[RunConfig]]:
    """The groups of :func:`synthetic.plan.plan` as lists of configs."""
    return [list(g.configs) for g in plan(list(configs), max_stack=max_stack)]


def train_stacked(configs: Sequence[RunConfig], **kwargs) -> list[pd.DataFrame]:
    """Train one group of stackable configs in its planned mode; one table per config, in order.

    Raises:
        ValueError: empty list, a non-RunConfig, or configs that are not stackable.
    """
    if not isinstance(configs, (list, tuple)) or not configs:
        raise ValueError("configs must be a non-empty list of RunConfig")
    for c in configs:
        if not isinstance(c, RunConfig):
            raise ValueError(f"configs must hold RunConfig objects, got {type(c).__name__}")
    if not stackable(configs):
        from synthetic.engine import train_runs

        return train_runs(list(configs), **kwargs)  # raises, naming the differing field
    groups = plan(list(configs), max_stack=len(configs))
    tables: dict[str, pd.DataFrame] = {}
    for g in groups:
        for c, t in zip(g.configs, train_group(g, **kwargs), strict=True):
            tables[c.key()] = t
    return [tables[c.key()] for c in configs]
