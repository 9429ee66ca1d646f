"""Per-anchor tail "AIC" fits of negative similarities (the WeiNCE gate, one anchor at a time).

Erol et al., ICML 2026 (arXiv 2606.00262), the gate's tail fits; ``docs/weince.md#tail-aic-fits``. The fits are
those of :func:`theory.weince.tailfit.tail_fits`, the implementation the loss's gate uses on the
CPU, so the diagnostics and the loss agree without the diagnostics depending on the loss. The
tail-size rule and ``eps`` come from a :class:`theory.weince.config.GateConfig`. Input rule of the
EVT tools (``docs/weince.md#inputs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from theory.validation import integer
from theory.weince._inputs import as_float64
from theory.weince.config import DEFAULT_GATE, GateConfig
from theory.weince.tailfit import _tail_fits, tail_size

__all__ = ["TailAICFit", "tail_aic_fit", "tail_aic_fits"]


@dataclass(frozen=True)
class TailAICFit:
    """One anchor's tail fits (``docs/weince.md#tail-aic-fits``).

    ``slope_W`` (the anchor-wise Weibull slope beta_hat_i, unused by the gate), ``slope_G``,
    ``sse_W``, ``sse_G`` (floored, with the +1e6 sanity penalties), ``aic_W = n log(SSE_W/n) + 4``,
    ``aic_G``, ``dAIC = aic_G - aic_W`` (0 when ``n_eff < 2``), ``r2_W`` (clipped to [0, 1]),
    ``rho = max(1 - hardest negative, eps)``.
    """

    k_tail: int
    burn: int
    n_eff: int
    rho: float
    slope_W: float
    slope_G: float
    sse_W: float
    sse_G: float
    aic_W: float
    aic_G: float
    dAIC: float
    r2_W: float


def _check_gate(gate: Any) -> GateConfig:
    if not isinstance(gate, GateConfig):
        raise ValueError(f"gate must be a GateConfig, got {type(gate).__name__}")
    return gate


def _fit_row(s: np.ndarray, k_tail: int | None, gate: GateConfig) -> TailAICFit:
    K = s.size
    k = tail_size(K, gate.tail_frac, gate.min_tail) if k_tail is None else integer("k_tail", k_tail, lo=1)
    if k > K:
        raise ValueError(f"k_tail must be <= K={K}, got {k}")
    T = np.sort(s)[::-1][:k]
    eps = gate.eps
    rho = max(1.0 - float(T[0]), eps)
    fits = _tail_fits(np.ascontiguousarray(T[None, :]), eps)  # the loss's own implementation
    n, burn = fits.n_eff, fits.burn
    nan = float("nan")
    if n < 2:
        return TailAICFit(k, burn, n, rho, nan, nan, nan, nan, nan, nan, 0.0, nan)
    slope_W, slope_G = (float(v) for v in fits.slope[0])
    sse_W, sse_G = (float(v) for v in fits.sse[0])
    r2 = min(max(1.0 - float(fits.sse_raw[0, 0]) / max(float(fits.syy[0]), 1e-12), 0.0), 1.0)
    aic_W = n * math.log(sse_W / n) + 4.0
    aic_G = n * math.log(sse_G / n) + 4.0
    return TailAICFit(k, burn, n, rho, slope_W, slope_G, sse_W, sse_G, aic_W, aic_G, float(fits.dAIC[0]), r2)


def tail_aic_fit(neg: Any, *, k_tail: int | None = None, gate: GateConfig = DEFAULT_GATE) -> TailAICFit:
    """The Weibull-vs-Gumbel-fast least-squares "AIC" of one anchor's negative tail.

    A readable per-anchor view of the gate's steps 1-6 (``docs/weince.md#the-gate``): it calls the
    tail fits the loss's gate uses on this single row and unpacks the result.
    ``x = log max(1 - T, eps)`` of the ``k_tail`` largest negatives ``T`` (descending),
    within-tail ECDF ``F_k = max(k/(k_tail+1), eps)``, burn-in ``max(1, k_tail // 20)``; OLS of
    ``y_W = log F`` and ``y_G = log(-log F)`` on ``x``; ``dAIC = n_eff log(SSE_G / SSE_W)``.

    Args:
        neg: negative similarities of one anchor (flattened); array or tensor.
        k_tail: tail size; default ``tail_size(K, gate.tail_frac, gate.min_tail)``.
        gate: supplies the tail-size rule (``tail_frac``, ``min_tail``) and ``eps``.

    Returns:
        :class:`TailAICFit`.

    Shape:
        ``neg`` ``(K,)`` -> scalars.

    Raises:
        ValueError: non-finite or empty ``neg``, ``k_tail`` outside ``[1, K]``, a ``gate`` that is
            not a :class:`GateConfig`.
    """
    return _fit_row(as_float64("neg", neg, flatten=True), k_tail, _check_gate(gate))


def tail_aic_fits(
    neg_rows: Any, *, k_tail: int | None = None, gate: GateConfig = DEFAULT_GATE
) -> pd.DataFrame:
    """:func:`tail_aic_fit` for every row of ``neg_rows``: one DataFrame row per anchor.

    Args:
        neg_rows: ``(A, K)`` negative similarities; array or tensor.
        k_tail: tail size, or None for the rule.
        gate: as :func:`tail_aic_fit`.

    Returns:
        Columns: the fields of :class:`TailAICFit`.

    Raises:
        ValueError: as :func:`tail_aic_fit`, or ``neg_rows`` not 2-D.
    """
    arr = as_float64("neg_rows", neg_rows, ndim=2)
    gate = _check_gate(gate)
    return pd.DataFrame([_fit_row(r, k_tail, gate).__dict__ for r in arr])
