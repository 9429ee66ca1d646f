"""Slow, obviously-correct references shared by several test modules (Python loops and floats)."""

from __future__ import annotations

import math


# ---------------------------------------------------------------------------------------------
# slow references


def psi_ref(t, psi, tau=1.0, margin=1.0):
    """psi of theory.hcl.psi.apply_psi, written with Python floats."""
    K = len(t)
    if psi == "mean":
        return math.log(1 + sum(math.exp(x / tau) for x in t) / K)
    if psi == "sum":
        return math.log(1 + sum(math.exp(x / tau) for x in t))
    return sum(max(0.0, x / tau + margin) for x in t) / K
