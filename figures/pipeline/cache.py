"""Cache of stage results under the results folder, keyed by scale and a hash of the sources.

A stage whose results depend only on code (the theory checks and the theory producers) stores
them under ``<results>/cache/figures/<stage>/<scale>-<key>/``: claim records as ``claims.json``
(the ``theory.claims`` JSON format) and tidy tables as ``<name>.csv``. The key is the SHA-256 of
the relative paths and contents of the source files that compute them (every ``.py`` of the
``theory`` package and the figures adapter), plus the scale, the seed and :data:`FORMAT`: any
change of the code, scale or seed gives a new folder, so a stale result is never reused, and a
warm run reuses everything.

**Completeness.** Every cached file ``<name>`` has a completeness record ``<name>.record.json``
(:data:`RECORD_FORMAT`: its ``sha256``, ``bytes`` and ``rows``; the idea of the results store's
completion records, ``synthetic.store.runs``). The record is written first, then the file, each
through ``synthetic.store.folders.atomic_write`` (a temporary file renamed into place), so a kill
leaves at worst a record without its file: a miss. A file is a hit only when its bytes hash to
its record and it parses back to the recorded number of rows (and, for claim records, as
``theory.claims`` JSON). Anything else (a truncated, empty, garbage or edited file, a file without
a record) is named, set aside in the entry's ``quarantine/`` folder with a ``.why`` note
(``synthetic.store.folders.set_aside``), counted as a miss and recomputed in the same run; the
stage's line names it (:meth:`StageCache.describe`). ``--refresh`` recomputes every entry.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from synthetic.store.folders import QUARANTINE_SUBDIR, atomic_write_bytes, set_aside

__all__ = ["FORMAT", "RECORD_FORMAT", "source_key", "frame_digest", "StageCache"]

#: Bumped when the layout of the cached files changes (2: every file has a completeness record).
FORMAT = "figures-cache-2"

#: Format of the completeness record ``<name>.record.json`` of a cached file.
RECORD_FORMAT = "figures-cache-entry/1"
_RECORD_SUFFIX = ".record.json"

# pandas >= 3 reads floats round-trip by default and deprecates the option.
_READ_KW = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}

T = TypeVar("T")


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

    Attributes:
        folder: the entry folder; hits, misses: the names looked up; set_aside:
            ``"<name> (<reason>)"`` of every bad file moved to ``folder/quarantine/``.
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
        self.set_aside: list[str] = []

    @property
    def quarantine(self) -> Path:
        """``<folder>/quarantine``: where bad cached files are moved."""
        return self.folder / QUARANTINE_SUBDIR

    def _record(self, name: str, hit: bool) -> None:
        (self.hits if hit else self.misses).append(name)

    @staticmethod
    def _check_name(name: str) -> str:
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise ValueError(f"name must be a file name without '/', got {name!r}")
        if name.endswith(_RECORD_SUFFIX) or name == QUARANTINE_SUBDIR:
            raise ValueError(
                f"name must not end with {_RECORD_SUFFIX!r} or be {QUARANTINE_SUBDIR!r}, got {name!r}"
            )
        return name

    def _write(self, file: str, body: bytes, rows: int) -> Path:
        record = {
            "format": RECORD_FORMAT,
            "file": file,
            "rows": rows,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
        # the record first: a kill between the two writes leaves a record without its file (a miss)
        atomic_write_bytes(self.folder / (file + _RECORD_SUFFIX), (json.dumps(record) + "\n").encode())
        return atomic_write_bytes(self.folder / file, body)

    def _problem(self, file: str, data: bytes) -> tuple[str, int]:
        """(why ``data`` is not the complete recorded file, or "", the recorded rows)."""
        rec = self.folder / (file + _RECORD_SUFFIX)
        if not rec.is_file():
            return f"no completeness record {rec.name}: it cannot be checked", 0
        try:
            record = json.loads(rec.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
                raise ValueError(f"format is not {RECORD_FORMAT}")
            want_bytes, want_sha, rows = int(record["bytes"]), str(record["sha256"]), int(record["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"its completeness record {rec.name} is unreadable ({exc})", 0
        if hashlib.sha256(data).hexdigest() == want_sha:
            return "", rows
        if not data:
            return f"empty: 0 of {want_bytes} bytes", rows
        if len(data) < want_bytes:
            cut = "" if data.endswith(b"\n") else ", cut mid-line"
            return f"truncated: {len(data)} of {want_bytes} bytes{cut}", rows
        return f"corrupt: its sha256 differs from its completeness record ({len(data)} bytes)", rows

    def _reject(self, file: str, reason: str) -> None:
        path = self.folder / file
        try:
            set_aside(path, self.quarantine, reason, with_files=[self.folder / (file + _RECORD_SUFFIX)])
        except OSError as exc:
            raise OSError(
                f"the cached file {path} is bad ({reason}) and cannot be set aside "
                f"({exc.strerror or exc}): delete it, or run again with --refresh"
            ) from None
        self.set_aside.append(f"{file} ({reason})")

    def _lookup(self, file: str, parse: Callable[[bytes, int], T]) -> T | None:
        """The parsed cached file, or None (disabled, absent, or bad: then set aside)."""
        path = self.folder / file
        if not self.enabled or not path.is_file():
            self._record(file, False)
            return None
        try:
            data = path.read_bytes()
        except OSError as exc:
            reason = f"unreadable: {exc.strerror or exc}"
        else:
            reason, rows = self._problem(file, data)
            if not reason:
                try:
                    value = parse(data, rows)
                except (ValueError, TypeError, KeyError) as exc:  # a verified file that does not parse
                    reason = f"does not parse back ({type(exc).__name__}: {exc})"
                else:
                    self._record(file, True)
                    return value
        self._reject(file, reason)
        self._record(file, False)
        return None

    def read_text(self, name: str, parse: Callable[[str], Any] | None = None) -> Any:
        """The cached text file ``name`` (or ``parse(text)``), or None: absent, or bad and set aside.

        Args:
            name: the file name.
            parse: applied to the text; a file it rejects (raises) is bad like a corrupt one.
        """
        name = self._check_name(name)

        def _parse(data: bytes, rows: int) -> Any:
            text = data.decode("utf-8")
            if text.count("\n") != rows:
                raise ValueError(f"{text.count(chr(10))} lines, its record says {rows}")
            return parse(text) if parse is not None else text

        return self._lookup(name, _parse)

    def write_text(self, name: str, text: str) -> Path:
        """Store the text file ``name`` atomically, with its completeness record."""
        body = text.encode("utf-8")
        return self._write(self._check_name(name), body, text.count("\n"))

    def read_table(self, name: str) -> pd.DataFrame | None:
        """The cached table ``name`` (``<name>.csv``), or None: absent, or bad and set aside."""
        file = self._check_name(name) + ".csv"

        def _parse(data: bytes, rows: int) -> pd.DataFrame:
            try:
                t = pd.read_csv(io.BytesIO(data), **_READ_KW)
            except pd.errors.EmptyDataError:
                if rows:
                    raise
                return pd.DataFrame()
            if len(t) != rows:
                raise ValueError(f"{len(t)} rows, its record says {rows}")
            return t

        return self._lookup(file, _parse)

    def write_table(self, name: str, table: pd.DataFrame) -> Path:
        """Store ``table`` as ``<name>.csv`` atomically (shortest round-trip floats), with its record."""
        body = table.to_csv(index=False).encode("utf-8")
        return self._write(self._check_name(name) + ".csv", body, len(table))

    @property
    def all_hits(self) -> bool:
        """True when every lookup so far was a hit."""
        return bool(self.hits) and not self.misses

    def describe(self) -> str:
        """``"cached"``, ``"computed"`` or ``"partly cached"``, and the bad files set aside, in one line."""
        if not self.hits and not self.misses:
            return "nothing looked up"
        if not self.misses:
            what = "cached"
        elif not self.hits:
            what = "computed"
        else:
            what = f"partly cached ({len(self.hits)} of {len(self.hits) + len(self.misses)})"
        if self.set_aside:
            what += (
                f"; set aside {len(self.set_aside)} bad cached file(s) in {self.quarantine} and "
                f"recomputed them: {'; '.join(self.set_aside)}"
            )
        return what
