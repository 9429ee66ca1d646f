"""Input rules of ``theory.weince``: the array rule of the EVT tools and the loss's finiteness check.

Two rules (``docs/weince.md#inputs``):

* **EVT tools** (``gpd``, ``tails``, ``links``, ``noise_floor``, and :func:`tailfit.tail_fits`):
  numpy arrays, torch tensors (any device, any real dtype) and nested sequences are accepted and
  converted to float64 numpy (:func:`as_float64`); a non-finite value raises ``ValueError`` naming
  the argument; a meta tensor (shape only, no data) raises ``ValueError`` naming the argument;
  complex input is rejected.
* **Losses** (``weince_loss``, ``weince_label_loss``, ``WeiNCELoss``): torch tensors only;
  :func:`check_embeddings` is one fused check per call (a single host synchronisation for all the
  arguments together) that every row has a finite Euclidean norm, i.e. no NaN, no inf and no norm
  that overflows the dtype, which would turn the cosine normalisation into a silent zero row.

These helpers live here, in the package, until ``theory.validation`` offers the same rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__: list[str] = []


def _reject_meta(name: str, x: torch.Tensor) -> None:
    if x.is_meta:
        raise ValueError(
            f"{name} is a meta tensor (shape {tuple(x.shape)}, no data); pass a tensor with data"
        )


def as_float64(name: str, x: Any, *, ndim: int | None = None, flatten: bool = False) -> np.ndarray:
    """``x`` as a finite float64 numpy array (the EVT tools' input rule).

    Args:
        name: the argument's name, used in every message.
        x: a numpy array, a torch tensor (any device, detached and copied to the host), a number
            or a nested sequence of numbers.
        ndim: required number of dimensions (checked before flattening), or None.
        flatten: return ``x.reshape(-1)``.

    Returns:
        A float64 numpy array (a copy when ``x`` was a tensor or had another dtype).

    Raises:
        ValueError: a meta tensor, complex or non-numeric input, the wrong number of dimensions,
            an empty array, or a NaN / inf value, each naming ``name``.
    """
    if isinstance(x, torch.Tensor):
        _reject_meta(name, x)
        if x.is_complex():
            raise ValueError(f"{name} must be real, got dtype {x.dtype}")
        a = x.detach().to(device="cpu", dtype=torch.float64).numpy()
    else:
        if np.iscomplexobj(x):
            raise ValueError(f"{name} must be real, got a complex array")
        try:
            a = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a numeric array or tensor, got {type(x).__name__}") from exc
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} must be non-empty, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    return a.reshape(-1) if flatten else a


def as_index_array(name: str, x: Any) -> np.ndarray:
    """Integer indices (array, tensor or sequence) as a 1-D int64 numpy array.

    Raises:
        ValueError: a meta tensor or a non-integer dtype, naming ``name``.
    """
    if isinstance(x, torch.Tensor):
        _reject_meta(name, x)
        x = x.detach().cpu().numpy()
    a = np.asarray(x).reshape(-1)
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    return a.astype(np.int64, copy=False)


def as_mask(name: str, x: Any) -> np.ndarray:
    """A boolean mask (array, tensor or sequence) as a numpy bool array.

    Raises:
        ValueError: a meta tensor, naming ``name``.
    """
    if isinstance(x, torch.Tensor):
        _reject_meta(name, x)
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=bool)


def check_embeddings(**tensors: torch.Tensor) -> None:
    """One fused finiteness check of the loss inputs (``z1=..., z2=...`` or ``z=...``).

    Computes every row's Euclidean norm in at least float32 (the precision the loss normalises
    in) and synchronises once for all the arguments. A NaN or inf entry, or a row whose norm
    overflows, raises.

    Raises:
        ValueError: a meta tensor, or a non-finite row, naming the argument, e.g.
            ``"z1 must be finite: row 3 holds NaN or inf"``.
    """
    peaks = []
    for name, z in tensors.items():
        _reject_meta(name, z)
        zf = z.detach()
        if zf.dtype in (torch.float16, torch.bfloat16) or not zf.is_floating_point():
            zf = zf.float()
        peaks.append(torch.linalg.vector_norm(zf, dim=-1).amax())  # NaN and inf propagate
    ok = torch.isfinite(torch.stack(peaks)).tolist() if peaks else []
    for (name, z), good in zip(tensors.items(), ok, strict=True):
        if good:
            continue
        zf = z.detach().double()
        bad = ~torch.isfinite(zf).reshape(zf.shape[0], -1).all(dim=1) if zf.dim() else ~torch.isfinite(zf)
        if bool(bad.any()):
            row = int(torch.nonzero(bad.reshape(-1))[0])
            raise ValueError(f"{name} must be finite: row {row} holds NaN or inf")
        raise ValueError(
            f"{name} has a row whose norm overflows {z.dtype} (|{name}| too large to normalise); "
            "rescale the embeddings"
        )
