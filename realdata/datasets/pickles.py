"""Dataset pickles read without running code from them.

A pickle is a program: each class or function it names (a *global*) is imported and called while
it loads, so ``pickle.load`` on a crafted file runs any command. The CIFAR files need only dicts,
lists, strings, numbers and numpy arrays, so :func:`load_data_pickle` builds those and refuses
every other global, before anything of the file is run. The globals it allows, and why:

==========================================================  =====================================
``numpy.ndarray``, ``numpy.dtype``                          the array type and its element type
``numpy[._]core.multiarray._reconstruct``                   an array, protocols 0-4 (``numpy.core``
                                                            in files written before numpy 2)
``numpy[._]core.numeric._frombuffer``                       a contiguous array, protocol 5
``numpy[._]core.multiarray.scalar``                         a numpy scalar
``_codecs.encode`` (latin-1 only)                           a Python 3 ``bytes`` at protocol <= 2
==========================================================  =====================================

Each is mapped to the function numpy itself pickles with (read off numpy's own ``__reduce__``), so
nothing is imported by name. ``encoding="latin1"`` reads the Python 2 byte strings of the official
files as ``str`` (numpy's advice for Python 2 pickles of arrays); a ``bytes`` dict key is decoded
the same way, so a file re-pickled after ``encoding="bytes"`` reads alike.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from realdata.datasets.base import CorruptDatasetError, dataset_message

__all__ = ["UnsafePickleError", "load_data_pickle"]


class UnsafePickleError(CorruptDatasetError, ValueError):
    """A dataset pickle names a class or function outside the allow-list (nothing was run)."""


class _Refused(pickle.UnpicklingError):
    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"{module}.{name}")
        self.what = f"{module}.{name}"


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as Python 3 pickles ``bytes`` at protocol <= 2, and nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise _Refused("_codecs", f"encode(..., {encoding!r})")
    return text.encode("latin-1")


_RECONSTRUCT = np.ndarray((0,), np.uint8).__reduce__()[0]
_FROMBUFFER = np.zeros(1).__reduce_ex__(5)[0]
_SCALAR = np.float64(0).__reduce__()[0]
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_bytes,
    **{(f"numpy.{core}.multiarray", "_reconstruct"): _RECONSTRUCT for core in ("core", "_core")},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _FROMBUFFER for core in ("core", "_core")},
    **{(f"numpy.{core}.multiarray", "scalar"): _SCALAR for core in ("core", "_core")},
}


class _DataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise _Refused(module, name) from None


def load_data_pickle(path: str | Path, *, layout: str, title: str) -> Any:
    """Unpickle a dataset file, building only dicts, lists, strings, numbers and numpy arrays.

    Args:
        path: the file.
        layout: the dataset's expected layout (for the error message).
        title: the dataset's name in messages (``"CIFAR-10"``).

    Returns:
        The unpickled object; a dict's ``bytes`` keys decoded as latin-1.

    Raises:
        UnsafePickleError: the file names another class or function (nothing of it was run).
        CorruptDatasetError: the file is not a readable pickle.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            obj = _DataUnpickler(fh, encoding="latin1").load()
    except _Refused as exc:
        raise UnsafePickleError(
            dataset_message(
                f"{title} file refers to {exc.what}, which is not allowed in a dataset pickle "
                "(only dicts, lists, strings, numbers and numpy arrays are read; nothing was run)",
                path,
                layout,
            )
        ) from None
    except Exception as exc:  # any failure of a malformed pickle: truncated, bad opcode, ...
        raise CorruptDatasetError(
            dataset_message(f"{title} file cannot be read ({exc!r})", path, layout)
        ) from exc
    if isinstance(obj, dict):
        obj = {k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in obj.items()}
    return obj
