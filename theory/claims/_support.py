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
    label: str = "",
) -> None:
    """Append one tolerance sub-check of ``claim`` (``kind`` ``"gap"`` or ``"error"``).

    ``value`` and ``tol`` are in the units of the quantity compared (``label`` names it); a test
    against a tolerance that varies per instance passes the instance nearest its own tolerance
    (:func:`_rounding_worst`, :func:`_mc_worst`), so the verdict and the severity are those of the
    ratio while the evidence shows the error and the tolerance themselves.
    """
    out.append(
        (
            claim,
            SubCheck.tolerance(what, value, tol, kind=kind, instances=int(instances), note=note, label=label),
        )
    )


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


def _rounding_worst(pairs: Iterable[tuple[float, str]]) -> tuple[float, float, str]:
    """The (x, "v") pair nearest its rounding tolerance: ``(|x - v|, half a unit in v's last digit, v)``.

    Nearest means the largest ``|x - v| / half-unit``; ``|x - v| <= half-unit`` holds for every
    pair iff it holds for this one.
    """
    best: tuple[float, float, str] | None = None
    for x, v in pairs:
        dec = len(v.split(".")[1]) if "." in v else 0
        err, half = abs(x - float(v)), 0.5 * 10.0**-dec
        if best is None or err / half > best[0] / best[1]:
            best = (err, half, v)
    if best is None:
        raise ValueError("pairs must not be empty")
    return best


def _mc_worst(cases: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """The (|difference|, tolerance) pair with the largest ratio, over Monte Carlo cases.

    Each case is ``(|estimate - reference|, z standard errors)``; the check holds for every case
    iff it holds for the returned one.
    """

    def ratio(diff: float, tol: float) -> float:
        return diff / tol if tol > 0 else (0.0 if diff == 0 else math.inf)

    best: tuple[float, float] | None = None
    for diff, tol in cases:
        if best is None or ratio(diff, tol) > ratio(*best):
            best = (float(diff), float(tol))
    if best is None:
        raise ValueError("cases must not be empty")
    return best


def _mc_interval(values: Sequence[float] | np.ndarray, z: float = 4.0) -> tuple[float, float]:
    """Mean and ``z`` standard errors of Monte Carlo ``values``."""
    v = np.asarray(values, dtype=np.float64)
    se = v.std(ddof=1) / math.sqrt(v.size)
    return float(v.mean()), float(z * se)
