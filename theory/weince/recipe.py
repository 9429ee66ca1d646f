"""State of the released WeiNCE recipe: the batch-EMA Weibull slope beta_t and its auxiliary terms.

Erol et al., ICML 2026 (arXiv 2606.00262), the code as released by the authors; spec/weince.md §2.8.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from theory.validation import as_float_tensor, integer, real
from theory.weince._fast import _np_ok
from theory.weince.tailfit import _DEN_FLOOR

__all__ = ["WeibullBetaState"]


@dataclass
class WeibullBetaState:
    """State and settings of the released recipe's auxiliary terms (spec/weince.md §2.8).

    ``beta`` is the EMA buffer beta_t (initialised to ``weib_beta = 4.0``), updated once per call
    of :func:`weince_loss` with ``recipe="released"``: a batch-global Weibull slope ``beta_hat``
    from the ``k = min(K, max(min_tail_points, int(tail_frac K)))`` smallest shortfalls of all
    ``K = A (A - 2)`` negative entries (each unordered pair twice); OLS of
    ``log(r/(k+1))`` on ``log delta_(r)`` after burn-in ``max(1, k // 20)``; if ``R^2 >= r2_min``
    and ``beta_hat > 0``: ``beta <- momentum beta + (1 - momentum) clip(beta_hat, beta_min,
    beta_max)``. ``auto=False`` keeps ``beta`` fixed (the authors' ``auto_weib_beta=False``).

    The auxiliary loss terms are ``weib_weight * CE_Weibit-top-M(beta_t)`` and
    ``pl_weight * CE_PL-top-M`` over the positive and the ``M`` hardest negatives
    (``M = min(top_m, 2N - 2)``; the authors' ``min(top_m, 2N - 1)`` on a -1e9-filled row only adds
    a term ``< exp(-20 beta)`` for tiny batches).
    """

    beta: float = 4.0
    momentum: float = 0.9
    r2_min: float = 0.85
    beta_min: float = 0.5
    beta_max: float = 16.0
    tail_frac: float = 0.05
    min_tail_points: int = 1024
    eps: float = 1e-6
    auto: bool = True
    weib_weight: float = 0.5
    weib_top_m: int = 50
    pl_weight: float = 0.5
    pl_top_m: int = 50
    last_beta_hat: float = field(default=float("nan"))
    last_r2: float = field(default=float("nan"))
    steps: int = 0

    def __post_init__(self) -> None:
        real("beta", self.beta, lo=0.0, lo_open=True)
        real("momentum", self.momentum, lo=0.0, hi=1.0)
        real("r2_min", self.r2_min, lo=0.0, hi=1.0)
        real("beta_min", self.beta_min, lo=0.0, lo_open=True)
        if real("beta_max", self.beta_max) < self.beta_min:
            raise ValueError(f"beta_max must be >= beta_min={self.beta_min}, got {self.beta_max}")
        real("tail_frac", self.tail_frac, lo=0.0, hi=1.0)
        integer("min_tail_points", self.min_tail_points, lo=1)
        real("eps", self.eps, lo=0.0, lo_open=True, hi=0.5)
        real("weib_weight", self.weib_weight, lo=0.0)
        real("pl_weight", self.pl_weight, lo=0.0)
        integer("weib_top_m", self.weib_top_m, lo=1)
        integer("pl_top_m", self.pl_top_m, lo=1)

    @torch.no_grad()
    def update(self, neg: torch.Tensor) -> float:
        """Update the EMA from the ``(A, K)`` negative similarities of one batch; return beta_t."""
        self.steps += 1
        if not self.auto:
            return self.beta
        flat = as_float_tensor(neg.detach(), "neg").reshape(-1)
        Kn = flat.numel()
        k = min(Kn, max(self.min_tail_points, int(self.tail_frac * Kn)))
        burn = max(1, k // 20)
        if k - burn < 2:
            return self.beta
        if _np_ok(flat):  # numpy partition + sort: same values as torch.topk, faster
            a = flat.contiguous().numpy()
            top = np.sort(np.partition(a, Kn - k)[Kn - k:])[::-1].astype(np.float64)
        else:
            top = torch.topk(flat, k, largest=True, sorted=True).values.cpu().double().numpy()
        x = np.log(np.maximum(1.0 - top, self.eps))[burn:]
        y = np.log(np.maximum(np.arange(1, k + 1, dtype=np.float64) / (k + 1), self.eps))[burn:]
        xc, yc = x - x.mean(), y - y.mean()
        sxx = float(xc @ xc)
        slope = float(xc @ yc) / max(sxx, _DEN_FLOOR)
        sse = float(((yc - slope * xc) ** 2).sum())
        sst = float(yc @ yc)
        r2 = min(max(1.0 - sse / sst, 0.0), 1.0) if sst > 0 else 0.0
        beta_hat = max(slope, 0.0)
        self.last_beta_hat, self.last_r2 = beta_hat, r2
        if r2 >= self.r2_min and beta_hat > 0:
            clipped = min(max(beta_hat, self.beta_min), self.beta_max)
            self.beta = self.momentum * self.beta + (1.0 - self.momentum) * clipped
        return self.beta
