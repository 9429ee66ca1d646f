"""State of the released WeiNCE recipe: the batch-EMA Weibull slope beta_t and its auxiliary terms.

Erol et al., ICML 2026 (arXiv 2606.00262), the authors' released training script;
``docs/weince.md#core-and-released-recipes`` and ``docs/weince.md#the-batch-beta-ema``.

:class:`WeibullBetaState` is a small ``nn.Module`` whose buffers hold the EMA, so that it moves
with ``.to(device)``, is saved in ``state_dict()`` and a checkpoint resumes exactly. Its settings
are a frozen :class:`theory.weince.config.ReleasedConfig`. The update runs on the buffers' device
with torch operations only (no host synchronisation).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from theory.weince._fast import _np_ok
from theory.weince.config import DEFAULT_RELEASED, ReleasedConfig
from theory.weince.tailfit import _DEN_FLOOR

__all__ = ["WeibullBetaState"]

#: The authors skip the batch-beta fit when the batch has fewer negative entries than this
#: (``A (A - 2) < 10``, i.e. ``N = 2``) and keep beta_t at its current value.
MIN_BETA_ENTRIES = 10


def _global_top_np(srt: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest entries of a matrix whose rows are sorted ascending, descending, float64.

    Exact and cheaper than a partition of all entries: take the ``m`` largest of every row
    (``U``, ``m`` about four times the per-row share of ``k``); if no row's first left-out entry
    exceeds the ``k``-th largest of ``U``, the ``k`` largest of ``U`` are those of the matrix.
    Otherwise fall back to a partition of every entry.
    """
    A, K = srt.shape
    m = min(K, max(16, 4 * -(-k // A)))
    U = srt[:, K - m :].ravel()
    if U.size >= k:
        top = np.partition(U, U.size - k)[U.size - k :]
        if m == K or srt[:, K - m - 1].max() <= top.min():
            return np.sort(top)[::-1].astype(np.float64)
    flat = srt.ravel()
    return np.sort(np.partition(flat, flat.size - k)[flat.size - k :])[::-1].astype(np.float64)


@functools.lru_cache(maxsize=16)
def _rank_response(k: int, burn: int, eps: float, device: torch.device) -> torch.Tensor:
    """``log max(r / (k + 1), eps)`` for ranks ``r > burn``, centred, float64 on ``device``."""
    y = np.log(np.maximum(np.arange(1, k + 1, dtype=np.float64) / (k + 1), eps))[burn:]
    return torch.from_numpy(y - y.mean()).to(device)


class WeibullBetaState(nn.Module):
    """The released recipe's settings and its batch-EMA ``beta_t`` (buffers).

    ``beta_t`` starts at ``config.beta_init`` (4.0) and, with ``config.auto_beta``, is updated
    once per loss call (``docs/weince.md#the-batch-beta-ema``): from all ``K_all = A (A - 2)``
    negative entries of the batch (each unordered pair twice), the
    ``k = min(K_all, max(beta_min_tail, int(beta_tail_frac K_all)))`` smallest shortfalls
    ``delta = max(1 - s, eps)``; OLS of ``log max(r/(k+1), eps)`` on ``log delta_(r)`` after the
    burn-in ``max(1, k // 20)``; ``beta_hat = max(slope, 0)``, ``R^2`` clipped to ``[0, 1]``; if
    ``R^2 >= r2_min`` and ``beta_hat > 0``:
    ``beta_t <- momentum beta_t + (1 - momentum) clip(beta_hat, beta_min, beta_max)``. With fewer
    than 10 negative entries (``N = 2``) the fit is skipped and ``beta_t`` kept, as the authors do.

    Args:
        config: the recipe's settings (weights and ``M`` of the two auxiliary terms, the EMA).

    Attributes:
        config: the :class:`ReleasedConfig`.
        beta: 0-d float64 buffer, ``beta_t``.
        beta_hat: 0-d float64 buffer, the last batch fit's slope (NaN before the first fit).
        r2: 0-d float64 buffer, the last batch fit's ``R^2`` (NaN before the first fit).
        steps: 0-d int64 buffer, the number of updates (calls), fitted or skipped.
    """

    beta: torch.Tensor
    beta_hat: torch.Tensor
    r2: torch.Tensor
    steps: torch.Tensor

    def __init__(self, config: ReleasedConfig = DEFAULT_RELEASED) -> None:
        super().__init__()
        if not isinstance(config, ReleasedConfig):
            raise ValueError(f"config must be a ReleasedConfig, got {type(config).__name__}")
        self.config = config
        self.register_buffer("beta", torch.tensor(config.beta_init, dtype=torch.float64))
        self.register_buffer("beta_hat", torch.tensor(float("nan"), dtype=torch.float64))
        self.register_buffer("r2", torch.tensor(float("nan"), dtype=torch.float64))
        self.register_buffer("steps", torch.tensor(0, dtype=torch.int64))

    def extra_repr(self) -> str:  # noqa: D102
        return repr(self.config)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> WeibullBetaState:
        """Move the buffers like any module, but keep the EMA in float64 under a dtype cast.

        ``module.half()`` or ``.to(torch.bfloat16)`` would otherwise round ``beta_t`` (the statistics
        of WeiNCE stay in float32 or better); the device still follows ``fn``.
        """
        kept = {name: self._buffers[name] for name in ("beta", "beta_hat", "r2")}
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        for name, old in kept.items():
            new = self._buffers[name]
            if old is not None and new is not None and new.dtype != torch.float64:
                self._buffers[name] = old.to(device=new.device)
        return self

    def _skip(self, Kn: int, device: torch.device) -> bool:
        """Count the step (moving the state to ``device``); True when the fit is skipped."""
        if self.beta.device != device:
            self.to(device)
        self.steps.add_(1)
        return not self.config.auto_beta or Kn < MIN_BETA_ENTRIES

    def _fit_size(self, Kn: int) -> tuple[int, int]:
        k = min(Kn, max(self.config.beta_min_tail, int(self.config.beta_tail_frac * Kn)))
        return k, max(1, k // 20)

    @torch.no_grad()
    def _update_sorted(self, srt: np.ndarray, eps: float) -> torch.Tensor:
        """:meth:`update` from a CPU batch's negatives with every row sorted ascending (fast path)."""
        if self._skip(srt.size, torch.device("cpu")):
            return self.beta
        k, burn = self._fit_size(srt.size)
        return self._ema(torch.from_numpy(_global_top_np(srt, k)), k, burn, eps)

    @torch.no_grad()
    def update(self, neg: torch.Tensor, eps: float) -> torch.Tensor:
        """Update the EMA from one batch's negative similarities and return ``beta_t``.

        The state moves to ``neg``'s device first if it is elsewhere.

        Args:
            neg: the batch's negative similarities (detached inside), any shape, e.g. ``(A, A - 2)``.
            eps: the shortfall clamp (the gate's ``eps``).

        Returns:
            The 0-d float64 buffer ``beta`` (``beta_t`` after this update).
        """
        flat = neg.detach().reshape(-1)
        Kn = flat.numel()
        if self._skip(Kn, flat.device):
            return self.beta
        k, burn = self._fit_size(Kn)
        if _np_ok(flat):  # numpy partition + sort: the same values as torch.topk, faster
            a = flat.contiguous().numpy()
            top = torch.from_numpy(np.sort(np.partition(a, Kn - k)[Kn - k :])[::-1].astype(np.float64))
        else:
            top = torch.topk(flat, k, largest=True, sorted=True).values.double()
        return self._ema(top, k, burn, eps)

    def _ema(self, top: torch.Tensor, k: int, burn: int, eps: float) -> torch.Tensor:
        """The fit on the ``k`` largest similarities ``top`` (descending float64) and the EMA step."""
        cfg = self.config
        x = torch.log(torch.clamp(torch.rsub(top[burn:], 1.0), min=eps))
        xc = x - x.mean()
        yc = _rank_response(k, burn, eps, x.device)
        sxx = xc @ xc
        slope = (xc @ yc) / torch.clamp(sxx, min=_DEN_FLOOR)
        resid = yc - slope * xc
        sse, sst = resid @ resid, yc @ yc  # sst > 0: the ranks are distinct
        r2 = torch.clamp(1.0 - sse / sst, 0.0, 1.0)
        beta_hat = F.relu(slope)
        self.beta_hat.copy_(beta_hat)
        self.r2.copy_(r2)
        trusted = (r2 >= cfg.r2_min) & (beta_hat > 0)
        ema = cfg.momentum * self.beta + (1.0 - cfg.momentum) * torch.clamp(
            beta_hat, cfg.beta_min, cfg.beta_max
        )
        self.beta.copy_(torch.where(trusted, ema, self.beta))
        return self.beta
