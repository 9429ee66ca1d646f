"""Readers of the WeiNCE diagnostic inputs stored under the results folder (numpy / pandas)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

__all__ = ["read_scores", "read_candidates"]


def read_scores(path: str | os.PathLike) -> np.ndarray:
    """Scores from a CSV with a ``score`` column.

    Raises:
        ValueError: the file has no ``score`` column or no finite score (the message names it).
    """
    t = pd.read_csv(path)
    if "score" not in t.columns:
        raise ValueError(f"{path}: expected a CSV with a 'score' column, got columns {list(t.columns)}")
    s = pd.to_numeric(t["score"], errors="coerce").to_numpy(dtype=float)
    s = s[np.isfinite(s)]
    if s.size == 0:
        raise ValueError(f"{path}: the 'score' column has no finite value")
    return s


def read_candidates(path: str | os.PathLike) -> list[np.ndarray]:
    """Candidate similarity arrays from an ``.npz`` file (each ``(M, C)``, positive in column 0).

    Raises:
        ValueError: no 2-D array in the file (the message names it).
    """
    with np.load(path) as z:
        arrs = [np.asarray(z[k], dtype=np.float64) for k in z.files]
    arrs = [a for a in arrs if a.ndim == 2 and a.shape[1] >= 2]
    if not arrs:
        raise ValueError(f"{path}: expected arrays of shape (M, C >= 2), positive in column 0")
    return arrs
