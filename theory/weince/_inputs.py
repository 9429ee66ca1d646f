"""Input rules of ``theory.weince``: the array rule of the EVT tools and the loss's finiteness check.

Two rules (``docs/weince.md#inputs``):

* **EVT tools** (``gpd``, ``tails``, ``links``, ``noise_floor``, and :func:`tailfit.tail_fits`):
  numpy arrays, torch tensors (any device, any real dtype) and nested sequences are accepted and
  converted to float64 numpy (:func:`as_float64`); a non-finite value raises ``ValueError`` naming
  the argument; a meta tensor (shape only, no data) raises ``ValueError`` naming the argument;
  complex input is rejected.
* **Losses** (``weince_loss``, ``weince_label_loss``, ``WeiNCELoss``): the project's input rule
  (:func:`theory.validation.as_tensor`: tensors, numpy arrays, sequences); :func:`check_rows`
  is one fused check per call (a single host synchronisation for all the
  arguments together, on the diagonal of the loss's own Gram matrix) that no row holds NaN or inf
  and no row's norm overflows the dtype, which would turn the cosine normalisation into a silent
  zero row.

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
            f"{name} is a meta tensor (shape {tuple(x.shape)}, no data); pass a tensor with data "
            "(only the losses with check_inputs=False accept meta tensors)"
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


def reject_meta(**tensors: torch.Tensor) -> None:
    """Raise ``ValueError`` naming the first meta tensor (shape only, no data) among ``tensors``."""
    for name, z in tensors.items():
        _reject_meta(name, z)


def check_rows(S: torch.Tensor, parts: list[tuple[str, torch.Tensor]], *, normalized: bool) -> None:
    """The losses' fused finiteness check, on the diagonal of their Gram matrix ``S``.

    The rows of ``S`` are the rows of the ``parts`` stacked in order (``[("z1", z1), ("z2", z2)]``
    or ``[("z", z)]``). A NaN or inf entry makes its row's ``S_ii`` NaN; a row whose norm
    overflows is normalised to zero (``S_ii = 0``) or overflows ``S_ii`` itself. So the fast path
    reads one flag from the device, ``all(isfinite(S_ii) & S_ii > 1/2)`` (``isfinite`` only when
    ``normalized`` is False); only when it fails are the rows inspected, and a row that is merely
    zero or tiny (a cosine of 0 with everything, as before) is accepted.

    Raises:
        ValueError: naming the argument and the row, e.g.
            ``"z1 must be finite: row 3 holds NaN or inf"`` or
            ``"z2 has a row whose norm overflows torch.float32 (row 0) ..."``.
    """
    if S.device.type == "cpu":  # the same flag in numpy (four torch calls cost more than the test)
        dn = np.diagonal(S.detach().numpy())
        if bool((np.isfinite(dn) & (dn > 0.5)).all() if normalized else np.isfinite(dn).all()):
            return
    else:
        d = torch.diagonal(S)
        ok = torch.isfinite(d) & (d > 0.5) if normalized else torch.isfinite(d)
        if bool(ok.all()):  # the one host synchronisation
            return
    for name, z in parts:
        zf = z.detach()
        if zf.dtype in (torch.float16, torch.bfloat16) or not zf.is_floating_point():
            zf = zf.float()  # the precision the loss normalises in
        bad = ~torch.isfinite(zf).all(dim=1)
        if bool(bad.any()):
            raise ValueError(f"{name} must be finite: row {int(torch.nonzero(bad)[0])} holds NaN or inf")
        norm = torch.linalg.vector_norm(zf, dim=1)
        over = ~torch.isfinite(norm if normalized else norm * norm)
        if bool(over.any()):
            raise ValueError(
                f"{name} has a row whose norm overflows {zf.dtype} (row {int(torch.nonzero(over)[0])}); "
                "rescale the embeddings"
            )
