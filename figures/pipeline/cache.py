"""Cache of stage results under the results folder, keyed by scale and a hash of the sources.

A stage whose results depend only on code (the theory checks and the theory producers) stores
them under ``<results>/cache/figures/<stage>/<scale>-<key>/``: claim records as ``claims.json``
(the ``theory.claims`` JSON format) and tidy tables as ``<name>.csv``. The key is the SHA-256 of
the relative paths and contents of the source files that compute them (every ``.py`` of the
``theory`` package and the figures adapter), plus the scale, the seed and :data:`FORMAT`: any
change of the code, scale or seed gives a new folder, so a stale result is never reused, and a
warm run reuses everything. Every file is written to a temporary file and renamed into place; a
table that cannot be read back is treated as absent and recomputed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from synthetic.store.folders import atomic_write_bytes

__all__ = ["FORMAT", "source_key", "frame_digest", "StageCache"]

#: Bumped when the layout of the cached files changes.
FORMAT = "figures-cache-1"

# pandas >= 3 reads floats round-trip by default and deprecates the option.
_READ_KW = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def source_key(paths: Sequence[os.PathLike | str], *extra: str) -> str:
    """SHA-256 (hex) of the files' names and contents and the ``extra`` strings.

    Args:
        paths: source files (read as bytes, in the given order; their names enter the hash
            relative to their common parent so that moving the checkout keeps the key).
        *extra: further strings (scale, seed, format version).

    Raises:
        ValueError: a path that is not a file.
    """
    files = [Path(p) for p in paths]
    common = Path(os.path.commonpath([str(p.resolve().parent) for p in files])) if files else Path("/")
    h = hashlib.sha256()
    for p in files:
        if not p.is_file():
            raise ValueError(f"paths must be files, got {p}")
        h.update(str(p.resolve().relative_to(common)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    for e in extra:
        h.update(str(e).encode())
        h.update(b"\0")
    return h.hexdigest()


def frame_digest(frame: pd.DataFrame) -> str:
    """SHA-256 (hex) of a table's column names, dtypes and values (row order matters).

    Used to tell whether a figure's input changed since its files were written (a warm run then
    reuses the files instead of rendering again).
    """
    h = hashlib.sha256()
    h.update(repr([(str(c), str(t)) for c, t in frame.dtypes.items()]).encode())
    try:
        h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    except TypeError:  # unhashable cells (lists, dicts): fall back to the CSV text
        h.update(frame.to_csv(index=False).encode("utf-8"))
    return h.hexdigest()


class StageCache:
    """The cache folder of one stage at one scale and source key.

    Args:
        root: the cache root (``<results>/cache/figures``).
        stage: the stage name (a folder name).
        scale: the scale.
        key: the source key (:func:`source_key`).
        enabled: False makes every lookup miss (``--refresh``) while still writing.
    """

    def __init__(
        self, root: os.PathLike | str, stage: str, scale: str, key: str, *, enabled: bool = True
    ) -> None:
        for name, v in (("stage", stage), ("scale", scale), ("key", key)):
            if not isinstance(v, str) or not v or "/" in v or v.startswith("."):
                raise ValueError(f"{name} must be a non-empty name without '/', got {v!r}")
        self.folder = Path(root) / stage / f"{scale}-{key[:16]}"
        self.enabled = enabled
        self.hits: list[str] = []
        self.misses: list[str] = []

    def _record(self, name: str, hit: bool) -> None:
        (self.hits if hit else self.misses).append(name)

    def read_text(self, name: str) -> str | None:
        """The cached text file ``name`` or None."""
        p = self.folder / name
        if not self.enabled or not p.is_file():
            self._record(name, False)
            return None
        self._record(name, True)
        return p.read_text(encoding="utf-8")

    def write_text(self, name: str, text: str) -> Path:
        """Store the text file ``name`` atomically."""
        return atomic_write_bytes(self.folder / name, text.encode("utf-8"))

    def read_table(self, name: str) -> pd.DataFrame | None:
        """The cached table ``name`` (``<name>.csv``) or None (absent or unreadable)."""
        p = self.folder / f"{name}.csv"
        if not self.enabled or not p.is_file():
            self._record(name, False)
            return None
        try:
            t = pd.read_csv(p, **_READ_KW)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError):
            self._record(name, False)
            return None
        self._record(name, True)
        return t

    def write_table(self, name: str, table: pd.DataFrame) -> Path:
        """Store ``table`` as ``<name>.csv`` atomically (shortest round-trip floats)."""
        return atomic_write_bytes(self.folder / f"{name}.csv", table.to_csv(index=False).encode("utf-8"))

    @property
    def all_hits(self) -> bool:
        """True when every lookup so far was a hit."""
        return bool(self.hits) and not self.misses

    def describe(self) -> str:
        """``"cached"``, ``"computed"`` or ``"partly cached"`` for the lookups so far."""
        if not self.hits and not self.misses:
            return "nothing looked up"
        if not self.misses:
            return "cached"
        if not self.hits:
            return "computed"
        return f"partly cached ({len(self.hits)} of {len(self.hits) + len(self.misses)})"
