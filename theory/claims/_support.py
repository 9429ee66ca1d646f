"""What every theory check shares: the check-function type, the sub-check helper, exact NC batches.

A check function (:data:`CheckFn`) appends ``(claim id, SubCheck)`` pairs to its first argument
(:meth:`theory.claims.record.SubCheck.tolerance`: a ``"gap"`` must be ``>= -tol``, an ``"error"``
``<= tol``); :func:`_add` appends one. The remaining helpers build exact Neural-Collapse batches and
random unit-ball points, evaluate a loss in float64, and bound rounding and Monte Carlo errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from theory.claims.record import SubCheck
from theory.geometry import simplex_etf
from theory.hcl.losses import contrastive_loss

#: A check function: appends ``(claim id, SubCheck)`` pairs to its first argument.
CheckFn = Callable[[list[tuple[str, SubCheck]], bool, int], None]


def _add(
    out: list[tuple[str, SubCheck]],
    claim: str,
    what: str,
    instances: int,
    kind: str,
    value: float,
    tol: float,
    note: str = "",
) -> None:
    """Append one tolerance sub-check of ``claim`` (``kind`` ``"gap"`` or ``"error"``)."""
    out.append((claim, SubCheck.tolerance(what, value, tol, kind=kind, instances=int(instances), note=note)))


def _nc_batch(
    counts: Sequence[int] | np.ndarray, C: int | None = None, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """An exact NC batch: ``counts[c]`` copies of the ETF vertex ``v_c`` (ETF of ``C`` classes)."""
    counts = [int(c) for c in counts]
    C = C or len(counts)
    v = simplex_etf(C, C - 1, dtype=dtype)
    labels = torch.tensor(np.repeat(np.arange(len(counts)), counts), dtype=torch.long)
    return v[labels], labels


def _random_ball(rng: np.random.Generator, n: int, d: int) -> torch.Tensor:
    """``n`` points uniform in the unit ball of R^d (float64)."""
    z = rng.normal(size=(n, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    z *= rng.uniform(0, 1, size=(n, 1)) ** (1.0 / d)
    return torch.from_numpy(z)


def _loss(z: torch.Tensor, labels: torch.Tensor, **kw: Any) -> float:
    """The batch loss as a Python float."""
    return float(contrastive_loss(z, labels, **kw))


def _rounding_err(pairs: Iterable[tuple[float, str]]) -> float:
    """Max |x - v| / (half a unit in the last printed digit of v), over (x, "v") pairs."""
    worst = 0.0
    for x, v in pairs:
        dec = len(v.split(".")[1]) if "." in v else 0
        worst = max(worst, abs(x - float(v)) / (0.5 * 10.0**-dec))
    return worst


def _mc_interval(values: Sequence[float] | np.ndarray, z: float = 4.0) -> tuple[float, float]:
    """Mean and ``z`` standard errors of Monte Carlo ``values``."""
    v = np.asarray(values, dtype=np.float64)
    se = v.std(ddof=1) / math.sqrt(v.size)
    return float(v.mean()), float(z * se)
