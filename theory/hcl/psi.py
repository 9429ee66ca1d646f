"""The psi family of the hard-negative paper: one implementation, in torch and as numpy functions.

Notation (docs/hcl.md#the-psi-family): ``t`` ``(..., K)`` the score differences ``z.z^-_r - z.z^+`` of the
``K`` (``num_negatives``) negatives of one (anchor, positive) pair; psi is applied to ``t / tau``:

* ``"mean"`` (the authors' form): ``log(1 + (1/K) sum_r exp(t_r / tau))``;
* ``"sum"``: ``log(1 + sum_r exp(t_r / tau))``;
* ``"triplet"``: ``(1/K) sum_r max(0, t_r / tau + margin)``.

:func:`apply_psi` is the single implementation (torch); :class:`Psi` wraps an admissible psi_k
(convex, coordinate-wise non-decreasing) as a numpy function for the Harris checks:
:func:`make_psi` gives the three forms above (through :func:`apply_psi`), :func:`random_psi` a
random admissible one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import logsumexp

from theory.options import HCL_TAU, MARGIN, PSI_FORMS
from theory.validation import as_float_tensor, integer, one_of, real

__all__ = ["apply_psi", "Psi", "make_psi", "random_psi"]

_check_k = functools.partial(integer, "num_negatives", lo=1)
_check_tau = functools.partial(real, "tau", lo=0.0, lo_open=True)
_check_margin = functools.partial(real, "margin", lo=0.0)


def apply_psi(t: Any, psi: str = "mean", *, tau: float = HCL_TAU, margin: float = MARGIN) -> torch.Tensor:
    """The psi family applied to ``t / tau``, over the last axis (docs/hcl.md#the-psi-family).

    * ``"mean"``: ``log(1 + (1/K) sum_r exp(t_r / tau))`` (the authors' form);
    * ``"sum"``: ``log(1 + sum_r exp(t_r / tau))``;
    * ``"triplet"``: ``(1/K) sum_r max(0, t_r / tau + margin)``.

    Log-sum-exp throughout (finite for any finite ``t`` and ``tau > 0``). Jiang et al., arXiv
    2311.05139 (the general loss class).

    Args:
        t: differences ``S[i, n_r] - S[i, j]`` ``(..., K)``.
        psi: one of :data:`theory.options.PSI_FORMS`.
        tau: temperature ``> 0``.
        margin: triplet margin ``>= 0``.

    Returns:
        psi of each row of ``t``.

    Shape:
        ``(..., K)`` -> ``(...)``.

    Raises:
        ValueError: unknown ``psi``, ``tau <= 0``, ``margin < 0`` or ``t`` without a last axis.
    """
    one_of("psi", psi, PSI_FORMS)
    tau = real("tau", tau, lo=0.0, lo_open=True)
    margin = real("margin", margin, lo=0.0, allow_inf=True)
    tt = as_float_tensor(t, "t")
    if tt.dim() < 1 or tt.shape[-1] < 1:
        raise ValueError(f"t must have a non-empty last axis (..., K), got shape {tuple(tt.shape)}")
    return _apply_psi(tt, psi, tau, margin)


def _apply_psi(t: torch.Tensor, psi: str, tau: float, margin: float) -> torch.Tensor:
    """:func:`apply_psi` on validated arguments."""
    if psi == "triplet":
        return torch.relu(t / tau + margin).mean(dim=-1)
    lse = torch.logsumexp(t / tau, dim=-1)
    if psi == "mean":
        lse = lse - math.log(t.shape[-1])
    return F.softplus(lse)


@dataclass(frozen=True)
class Psi:
    """An admissible psi_k (convex, coordinate-wise non-decreasing), evaluated in numpy.

    Attributes:
        name: a readable description (``"mean"``, ``"softplus-combo"``, ...).
        k: number of arguments.
        fn: ``t`` ``(..., k)`` float64 -> ``(...)``.
    """

    name: str
    k: int
    fn: Callable[[np.ndarray], np.ndarray] = field(repr=False, compare=False)

    def __call__(self, t: Any) -> np.ndarray:
        """``psi_k(t)`` of every row of ``t`` ``(..., k)``."""
        t = np.asarray(t, dtype=np.float64)
        if t.shape[-1:] != (self.k,):
            raise ValueError(f"t must have last dimension k={self.k}, got shape {t.shape}")
        return self.fn(t)


def make_psi(psi: str = "mean", k: int = 1, *, tau: float = HCL_TAU, margin: float = MARGIN) -> Psi:
    """The psi forms of :func:`apply_psi` as numpy functions (docs/hcl.md#the-psi-family).

    ``mean``: ``log(1 + mean_i exp(t_i/tau))``; ``sum``: ``log(1 + sum_i exp(t_i/tau))``;
    ``triplet``: ``mean_i max(0, t_i/tau + margin)``. Log-sum-exp throughout.

    Raises:
        ValueError: unknown ``psi``, ``k < 1``, ``tau <= 0`` or ``margin < 0``.
    """
    psi = one_of("psi", psi, PSI_FORMS)
    k = _check_k(k)
    tau = _check_tau(tau)
    margin = _check_margin(margin)

    def fn(t: Any) -> np.ndarray:  # the one psi implementation, apply_psi, on numpy input
        t = torch.as_tensor(np.asarray(t, dtype=np.float64))
        return apply_psi(t, psi, tau=tau, margin=margin).numpy()

    return Psi(f"{psi}(tau={tau:g}" + (f", margin={margin:g})" if psi == "triplet" else ")"), k, fn)


def random_psi(k: int, rng: np.random.Generator) -> Psi:
    """A random admissible psi_k: convex and coordinate-wise non-decreasing.

    One of (chosen at random):

    * ``sum_j w_j softplus(a_j . t + b_j)`` with ``a_j >= 0``, ``w_j >= 0`` (smooth);
    * ``max_j (a_j . t + b_j)`` with ``a_j >= 0`` (piecewise linear, not strictly convex);
    * ``log sum_j exp(a_j . t + b_j)`` with ``a_j >= 0``;
    * ``sum_i max(0, c_i t_i + m_i)^p`` with ``c_i >= 0``, ``p >= 1`` (a generalised hinge).

    Shapes: ``t`` ``(..., k)`` -> ``(...)``.
    """
    k = _check_k(k)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    kind = int(rng.integers(4))
    J = int(rng.integers(1, 5))
    a = rng.exponential(1.0, size=(J, k)) * (rng.random((J, k)) < 0.8)
    b = rng.normal(0.0, 1.0, size=J)
    if kind == 0:
        w = rng.exponential(1.0, size=J)
        return Psi("softplus-combo", k, lambda t: np.logaddexp(0.0, t @ a.T + b) @ w)
    if kind == 1:
        return Psi("max-affine", k, lambda t: np.max(t @ a.T + b, axis=-1))
    if kind == 2:
        return Psi("lse-affine", k, lambda t: logsumexp(t @ a.T + b, axis=-1))
    c = rng.exponential(1.0, size=k)
    m = rng.normal(0.5, 0.5, size=k)
    p = float(rng.choice([1.0, 1.5, 2.0]))
    return Psi("power-hinge", k, lambda t: (np.maximum(t * c + m, 0.0) ** p).sum(axis=-1))
