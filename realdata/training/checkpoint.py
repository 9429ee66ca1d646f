"""Training checkpoints written atomically, verified on reading, and named when corrupt.

File format (version 1)::

    8 bytes   magic  b"RDCKPT01"
    32 bytes  sha256 of the payload
    8 bytes   payload length (little-endian unsigned)
    payload   torch.save of a dict

The payload of a training checkpoint holds ``format``, ``config_key``, ``config`` (the resolved
config as a dict), ``epoch`` (epochs completed), ``model`` / ``optimizer`` state dicts (``scheduler``
when the run has one), ``generators`` (the states of the batch-order, views and negatives
generators; the views generator once per rank), ``torch_rng`` (the global CPU state and, on CUDA,
every device's state), ``objective`` (WeiNCE's EMA state), the result ``rows`` and ``gate`` rows
recorded so far. A file is written to a temporary name in the same folder, flushed, ``fsync``-ed
and renamed, so a crash leaves the previous checkpoint or the new one, never a mixture.

:func:`load_checkpoint` raises :class:`CorruptCheckpointError` naming the file and what is wrong
(not a checkpoint, truncated, checksum mismatch, unreadable payload, another run's key). The
payload is unpickled only after its checksum matched, and by torch's weights-only unpickler
(``weights_only=True``): tensors, numbers, strings, ``None`` and plain containers, never a class
or function named by the file, so loading a checkpoint runs no code from it. :func:`save_checkpoint`
refuses a payload that unpickler could not read back, naming the entry.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from synthetic.store.folders import atomic_write_bytes

__all__ = ["MAGIC", "FORMAT", "CorruptCheckpointError", "save_checkpoint", "load_checkpoint"]

MAGIC = b"RDCKPT01"
FORMAT = "realdata-checkpoint-v1"
_HEADER = len(MAGIC) + 32 + 8
# what torch.load(weights_only=True) reads back without an allow-list (exact types: a numpy
# float64 is a float subclass but is pickled by its class, which that unpickler refuses)
_LEAVES = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.Size)
_SEQUENCES = (list, tuple, set)
_MAPPINGS = (dict, OrderedDict)


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file is not a complete, intact checkpoint (the message names the file)."""


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (a dict, see the module docstring) atomically to ``path``.

    Returns:
        The path written.
    """
    if not isinstance(payload, dict):
        raise ValueError(f"payload must be a dict, got {type(payload).__name__}")
    _check_plain(payload, "payload")
    buf = io.BytesIO()
    torch.save({"format": FORMAT, **payload}, buf)
    blob = buf.getvalue()
    head = MAGIC + hashlib.sha256(blob).digest() + struct.pack("<Q", len(blob))
    return atomic_write_bytes(path, head + blob)


def load_checkpoint(
    path: str | os.PathLike, *, expect_key: str | None = None, map_location: Any = "cpu"
) -> dict[str, Any]:
    """Read and verify a checkpoint.

    Args:
        path: the file.
        expect_key: if given, the run key the checkpoint must belong to.
        map_location: passed to :func:`torch.load`.

    Returns:
        The payload dict.

    Raises:
        FileNotFoundError: no such file.
        CorruptCheckpointError: see the module docstring.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no checkpoint at {p}")
    data = p.read_bytes()
    if len(data) < _HEADER or data[: len(MAGIC)] != MAGIC:
        raise CorruptCheckpointError(f"{p}: not a realdata checkpoint (missing header {MAGIC!r})")
    digest = data[len(MAGIC) : len(MAGIC) + 32]
    (n,) = struct.unpack("<Q", data[len(MAGIC) + 32 : _HEADER])
    blob = data[_HEADER:]
    if len(blob) != n:
        raise CorruptCheckpointError(
            f"{p}: truncated or partial checkpoint ({len(blob)} of {n} payload bytes)"
        )
    if hashlib.sha256(blob).digest() != digest:
        raise CorruptCheckpointError(f"{p}: checksum mismatch (the file was modified or damaged)")
    try:
        payload = torch.load(io.BytesIO(blob), map_location=map_location, weights_only=True)
    except Exception as exc:  # a payload with the right checksum that torch cannot read
        raise CorruptCheckpointError(f"{p}: unreadable payload ({exc!r})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CorruptCheckpointError(
            f"{p}: unknown payload format {getattr(payload, 'get', lambda k: None)('format')!r}"
        )
    if expect_key is not None and payload.get("config_key") != expect_key:
        raise CorruptCheckpointError(
            f"{p}: belongs to run {payload.get('config_key')!r}, expected run {expect_key!r}"
        )
    return payload


def _check_plain(obj: Any, where: str) -> None:
    """Raise ValueError naming the first entry of ``obj`` that weights-only loading would refuse."""
    kind = type(obj)
    if kind in _LEAVES or isinstance(obj, torch.Tensor):
        return
    if kind in _MAPPINGS:
        for k, v in obj.items():
            _check_plain(k, f"{where} key {k!r}")
            _check_plain(v, f"{where}[{k!r}]")
        return
    if kind in _SEQUENCES:
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
        return
    raise ValueError(
        f"{where}: {kind.__name__} cannot be stored in a checkpoint (tensors, Python numbers, str, "
        "None, dict, list and tuple only: the weights-only loader refuses other classes)"
    )
