"""The results store of the synthetic runs: atomic run files, each with a completion record.

Run files in a results folder (the whole folder: :mod:`synthetic.store.folders`)::

    <folder>/runs/<key>.csv     one finished run: one row per recorded epoch, config columns,
                                then ``run_key``, ``epoch``, metric columns (synthetic.store.schema)
    <folder>/runs/<key>.json    its completion record: {"format": "synthetic-run/1", "run_key",
                                "rows", "epochs" (the epochs its config records), "sha256" and
                                "bytes" of the CSV file, "config" (its config columns; records
                                written before this field existed have none)}
    <folder>/quarantine/        run files set aside (incomplete, corrupt, foreign), each beside a
                                ``<name>.why`` note; moved there, never deleted

A run's identity is the hash of its resolved config (``RunConfig.key()``), so the file name is
the key and a run can never be stored twice.

**Completeness.** A run file counts as stored only when :func:`check_run_file` verifies it: its
bytes hash to the sha256 of its completion record, and the record's epochs are the epochs its
config records (``synthetic.store.schema.expected_epochs``; :func:`write_run` refuses a frame with
others). A run file without a record (written before records existed, or by hand) is never
trusted on its own: it must end with a newline, every row must have the header's number of
fields and the same config values, its ``run_key`` column must equal its file name, its epochs
must be those its ``epochs`` / ``eval_every`` columns record, **and** its config columns must hash
to its name. Only a caller that knows the config class can check the last (``key_of``, passed by
the sweep); without it such a file is left out as "not verified". A sweep then adopts it (writes
its record, :func:`adopt_unrecorded`) or, when any check fails (a row edited to ``lr = 0.123``
under the key of ``lr = 0.001``), sets it aside. Anything else (a truncated, modified, empty,
garbage or unrelated CSV) is reported by file name, left out of every table, set aside by the
next sweep (:func:`quarantine`) and rerun.

**Missing runs.** A completion record whose run file is gone (deleted by hand, or a kill between
the two writes) is a *missing* run (:class:`MissingRun`, :attr:`StoreScan.missing`): readers name
it, with the config its record holds, so that a summary says which seeds are missing instead of
averaging fewer; the next sweep of its grid trains it again.

**Atomicity.** Every file is written to a temporary file in the same folder, flushed and
``fsync``-ed, then moved into place with :func:`os.replace`, and the folder is ``fsync``-ed. The
completion record is written before the run file, so a kill between the two leaves a record
without a run (a missing run) rather than an unverifiable run; a run file is never half-written. A kill
at any moment therefore leaves only complete runs plus, at worst, a leftover ``.*.tmp`` file that
every reader ignores (``synthetic.store.folders.remove_temp_files``).

Numbers are written as CSV with Python's shortest round-trip float representation and read back
with ``float_precision="round_trip"``, so a float64 survives the store bit for bit.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from synthetic.store.folders import (
    QUARANTINE_SUBDIR,
    RUNS_SUBDIR,
    as_folder,
    atomic_write_bytes,
    atomic_write_text,
    set_aside,
)
from synthetic.store.schema import (
    EPOCH,
    RUN_KEY,
    SETTLED,
    config_columns,
    expected_epochs,
    is_true,
    stopped_at,
)

__all__ = [
    "RUN_FORMAT",
    "RunCheck",
    "MissingRun",
    "StoreScan",
    "KeyOf",
    "check_key",
    "run_path",
    "record_path",
    "write_run",
    "check_run_file",
    "scan_store",
    "finished_keys",
    "quarantine",
    "adopt_unrecorded",
    "read_run",
    "to_csv",
    "parse_csv",
]

RUN_FORMAT = "synthetic-run/1"
_RUN_SUFFIX = ".csv"
_RECORD_SUFFIX = ".json"
_KEY_RE = re.compile(r"^[A-Za-z0-9_\-]{1,128}$")

#: ``config columns -> run key`` of a config class (``RunConfig.from_dict(c).key()``): what checks a
#: run file without a completion record (the store knows no config class).
KeyOf = Callable[[dict[str, Any]], str]


def check_key(key: str) -> str:
    """``key`` if it is a valid run key (1-128 characters from ``[A-Za-z0-9_-]``), else ValueError."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise ValueError(f"key must be 1-128 characters from [A-Za-z0-9_-] (a config hash), got {key!r}")
    return key


def run_path(folder: str | os.PathLike, key: str) -> Path:
    """Path of the file that holds the finished run ``key`` in the results ``folder``."""
    return as_folder(folder) / RUNS_SUBDIR / f"{check_key(key)}{_RUN_SUFFIX}"


def record_path(folder: str | os.PathLike, key: str) -> Path:
    """Path of the completion record of the run ``key``."""
    return as_folder(folder) / RUNS_SUBDIR / f"{check_key(key)}{_RECORD_SUFFIX}"


def to_csv(frame: pd.DataFrame) -> str:
    """The store's CSV text of a frame (shortest round-trip floats, Unix line ends)."""
    # float32 (and float16) columns are widened first: their float64 repr reads back exactly.
    narrow = [
        c for c in frame.columns if pd.api.types.is_float_dtype(frame[c]) and frame[c].dtype.itemsize < 8
    ]
    if narrow:
        frame = frame.astype({c: "float64" for c in narrow})
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


# pandas >= 3 parses floats round-trip by default and deprecates the option.
_READ_KW: dict[str, Any] = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def parse_csv(data: bytes | str) -> pd.DataFrame:
    """Parse the store's CSV (floats round-trip exactly); an empty input gives an empty frame."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        return pd.read_csv(io.StringIO(text), keep_default_na=True, **_READ_KW)
    except pd.errors.EmptyDataError:  # an empty file (e.g. an old empty table.csv): no rows
        return pd.DataFrame()


def _normalise_run_frame(frame: pd.DataFrame, key: str | None) -> tuple[pd.DataFrame, str]:
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
    if len(frame) == 0:
        raise ValueError("frame must have at least one row (one per epoch), got an empty frame")
    for col in (RUN_KEY, EPOCH):
        if col not in frame.columns:
            raise ValueError(f"frame must have a {col!r} column, got columns {list(frame.columns)}")
    keys = frame[RUN_KEY].astype(str).unique()
    if len(keys) != 1:
        raise ValueError(f"frame must hold exactly one run, got run_key values {list(keys)}")
    if key is None:
        key = str(keys[0])
    elif str(keys[0]) != key:
        raise ValueError(f"key {key!r} differs from the frame's run_key {keys[0]!r}")
    check_key(key)
    if frame[EPOCH].duplicated().any():
        raise ValueError(f"frame must have one row per epoch, got repeated epochs in run {key}")
    config = config_columns(frame)
    metrics = [c for c in frame.columns if c not in config and c not in (RUN_KEY, EPOCH)]
    out = frame[config + [RUN_KEY, EPOCH] + metrics].sort_values(EPOCH, kind="mergesort")
    out = out.reset_index(drop=True)
    # canonical config values: -0.0 is stored as 0.0 (it has the same run key)
    floats = [c for c in config if pd.api.types.is_float_dtype(out[c])]
    if floats:
        out[floats] = out[floats] + 0.0
    return out, key


def _schedule_of(frame: pd.DataFrame) -> list[int] | None:
    """Expected epochs from a run frame's ``epochs`` / ``eval_every`` config columns (None without)."""
    cols = config_columns(frame) if RUN_KEY in frame.columns else []
    if "epochs" not in cols or "eval_every" not in cols or len(frame) == 0:
        return None
    row = frame.iloc[0]
    try:
        return expected_epochs(
            {"epochs": int(row["epochs"]), "eval_every": int(row["eval_every"])}, stopped_at(frame)
        )
    except (TypeError, ValueError):
        return None


def write_run(
    folder: str | os.PathLike,
    frame: pd.DataFrame,
    *,
    key: str | None = None,
    expected: Iterable[int] | None = None,
) -> Path:
    """Store one finished run atomically as ``<folder>/runs/<key>.csv`` with its completion record.

    Args:
        folder: the results folder.
        frame: one row per epoch: config columns, ``run_key``, ``epoch``, metric columns
            (the output of ``synthetic.engine.train.train_run``). Columns before ``run_key`` are the
            config columns; the rows are written sorted by epoch.
        key: the run's config hash; defaults to the frame's (single) ``run_key`` value and must
            equal it when given.
        expected: the epochs a complete run records; default those of the frame's ``epochs`` /
            ``eval_every`` columns (``synthetic.store.schema.expected_epochs``), or the frame's own
            epochs when it has no such columns.

    Returns:
        The path written. Writing the same run twice replaces the file (same content for a
        deterministic run), so a run is never duplicated.

    Raises:
        ValueError: a malformed frame, or one whose epochs are not the expected ones (an
            incomplete run is never stored).
    """
    out, key = _normalise_run_frame(frame, key)
    epochs = [int(e) for e in out[EPOCH]]
    want = [int(e) for e in expected] if expected is not None else _schedule_of(out)
    if want is None:
        want = epochs
    if epochs != sorted(want):
        raise ValueError(
            f"run {key} is incomplete: it has epochs {_epochs_text(epochs)}, its config records "
            f"{_epochs_text(sorted(want))}; an incomplete run is not stored"
        )
    body = to_csv(out).encode("utf-8")
    record = {
        "format": RUN_FORMAT,
        "run_key": key,
        "rows": len(out),
        "epochs": epochs,
        "sha256": hashlib.sha256(body).hexdigest(),
        "bytes": len(body),
        "config": config_of(out),
    }
    # the record first: a kill between the two writes leaves a record without a run (ignored)
    atomic_write_text(record_path(folder, key), json.dumps(record, separators=(",", ":")) + "\n")
    return atomic_write_bytes(run_path(folder, key), body)


def _plain(value: Any) -> Any:
    """A cell as a JSON value: numpy scalars as Python scalars, NaN (an empty cell) as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # anything else as the text the CSV holds


def config_of(frame: pd.DataFrame) -> dict[str, Any]:
    """The config columns of a run frame's first row as a JSON-able dict (what ``key_of`` reads)."""
    row = frame.iloc[0]
    return {c: _plain(row[c]) for c in config_columns(frame)}


def _epochs_text(epochs: list[int]) -> str:
    if not epochs:
        return "none"
    if len(epochs) <= 6:
        return ", ".join(map(str, epochs))
    return f"{epochs[0]}..{epochs[-1]} ({len(epochs)} rows)"


@dataclasses.dataclass(frozen=True)
class RunCheck:
    """The verdict on one file of ``runs/``.

    Attributes:
        path: the run file; key: its name without ``.csv``; ok: a complete run;
        reason: why not (empty when ok); sha256: of the file's bytes (None if unreadable);
        recorded: it has a completion record (False: checked field by field).
    """

    path: Path
    key: str
    ok: bool
    reason: str = ""
    sha256: str | None = None
    recorded: bool = False

    def describe(self) -> str:
        """``"<path>: <reason>"``."""
        return f"{self.path}: {self.reason}" if self.reason else str(self.path)


def check_run_file(path: str | os.PathLike, key_of: KeyOf | None = None) -> RunCheck:
    """Verify one run file (see the module docstring); never raises for a bad file.

    Args:
        path: the run file.
        key_of: the run key of a dict of config columns; checks a file without a completion record
            (without it such a file is not ok: "not verified").
    """
    path = Path(path)
    key = path.name[: -len(_RUN_SUFFIX)] if path.name.endswith(_RUN_SUFFIX) else path.name

    def bad(reason: str, sha: str | None = None, recorded: bool = False) -> RunCheck:
        return RunCheck(path, key, False, reason, sha, recorded)

    if not _KEY_RE.match(key):
        return bad("not a run file: its name is not <run key>.csv")
    try:
        data = path.read_bytes()
    except OSError as exc:
        return bad(f"unreadable: {exc.strerror or exc}")
    sha = hashlib.sha256(data).hexdigest()
    rec_file = path.with_suffix(_RECORD_SUFFIX)
    if rec_file.is_file():
        try:
            record = json.loads(rec_file.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
                raise ValueError(f"format is not {RUN_FORMAT}")
            want_sha, want_bytes, rows = str(record["sha256"]), int(record["bytes"]), int(record["rows"])
            epochs = [int(e) for e in record["epochs"]]
            if record.get("run_key") != key:
                raise ValueError(f"it names run {record.get('run_key')!r}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return bad(f"its completion record {rec_file.name} is unreadable ({exc})", sha, True)
        if sha == want_sha:
            return RunCheck(path, key, True, "", sha, True)
        n_rows = max(data.count(b"\n") - 1, 0)
        if len(data) < want_bytes:
            last = ""
            if 0 < n_rows <= len(epochs):
                cut = (
                    "its last complete row" if data.endswith(b"\n") else "it is cut mid-line after the row of"
                )
                last = f"; {cut} epoch {epochs[n_rows - 1]}"
            return bad(
                f"incomplete: {len(data)} of {want_bytes} bytes, {n_rows} of {rows} complete rows "
                f"(epochs {_epochs_text(epochs)} expected){last}",
                sha,
                True,
            )
        return bad(f"corrupt: its sha256 differs from its completion record ({len(data)} bytes)", sha, True)
    reason = _check_unrecorded(data, key) or _check_unrecorded_key(data, key, key_of)
    return RunCheck(path, key, reason == "", reason, sha, False)


def _check_unrecorded_key(data: bytes, key: str, key_of: KeyOf | None) -> str:
    """'' when the config columns of a field-complete run file hash to its name ``key``."""
    if key_of is None:
        return (
            "not verified: no completion record, and its config columns are checked against its "
            "name only by a sweep (which then adopts it, or sets it aside and reruns it)"
        )
    config = config_of(parse_csv(data))
    try:
        got = key_of(config)
    except (ValueError, TypeError, KeyError) as exc:
        return f"no completion record, and its config columns are not a run config ({exc})"
    if got != key:
        return (
            f"corrupt or foreign: no completion record, and its config columns hash to run {got}, "
            f"not to its name {key}"
        )
    return ""


def _check_unrecorded(data: bytes, key: str) -> str:
    """Field-by-field check of a run file without a completion record; '' if complete."""
    if not data.strip():
        return "empty file"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not a run file: not UTF-8 text"
    if "\x00" in text:
        return "not a run file: binary data"
    try:
        header = next(csv.reader(io.StringIO(text.split("\n", 1)[0])), [])
    except csv.Error as exc:
        return f"not a run file: not a CSV ({exc})"
    if RUN_KEY not in header or EPOCH not in header:
        return f"not a run file: no {RUN_KEY!r} and {EPOCH!r} columns (columns {header[:6]})"
    if not text.endswith("\n"):
        return "incomplete: the last line is cut (no final newline)"
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        return f"corrupt: not a CSV ({exc})"
    body = rows[1:]
    if not body:
        return "incomplete: a header without rows"
    for i, r in enumerate(body, start=2):
        if len(r) != len(header):
            return f"incomplete or corrupt: line {i} has {len(r)} fields, the header {len(header)}"
    ki, ei = header.index(RUN_KEY), header.index(EPOCH)
    keys = {r[ki] for r in body}
    if keys != {key}:
        return f"not a run file of run {key}: its run_key column holds {sorted(keys)[:3]}"
    for i, r in enumerate(body[1:], start=3):
        differ = [
            h for h, a, b in zip(header[:ki], body[0][:ki], r[:ki], strict=True) if a != b and h != EPOCH
        ]
        if differ:
            c = header.index(differ[0])
            return (
                f"corrupt: its config differs between rows ({differ[0]} = {body[0][c]} on line 2, "
                f"{r[c]} on line {i})"
            )
    try:
        epochs = [int(r[ei]) for r in body]
    except ValueError:
        return "corrupt: a non-integer epoch"
    cols = header[:ki]
    if "epochs" not in cols or "eval_every" not in cols:
        return "no completion record, and no epochs / eval_every columns to check it against"
    try:
        first = body[0]
        stopped = None
        if SETTLED in header:  # a run its convergence rule stopped: complete up to that epoch
            final_row = max(body, key=lambda r: int(r[ei]))
            stopped = int(final_row[ei]) if is_true(final_row[header.index(SETTLED)]) else None
        want = expected_epochs(
            {
                "epochs": int(float(first[header.index("epochs")])),
                "eval_every": int(float(first[header.index("eval_every")])),
            },
            stopped,
        )
    except (ValueError, TypeError):
        return "corrupt: unreadable epochs / eval_every values"
    if sorted(epochs) != want or len(set(epochs)) != len(epochs):
        last = max(epochs) if epochs else "none"
        return (
            f"incomplete: {len(epochs)} of {len(want)} recorded epochs (last epoch {last}, "
            f"its config records {_epochs_text(want)})"
        )
    return ""


@dataclasses.dataclass(frozen=True)
class MissingRun:
    """A completion record whose run file is gone.

    Attributes:
        key: the run key; record: the record's path; config: the config columns the record holds
            (None for a record written before records held them).
    """

    key: str
    record: Path
    config: dict[str, Any] | None = None

    def describe(self) -> str:
        """``"<run file>: missing behind its completion record (seed S)"``."""
        seed = "" if not self.config or "seed" not in self.config else f" (seed {self.config['seed']})"
        return f"{self.record.with_suffix(_RUN_SUFFIX)}: missing behind its completion record{seed}"

    def as_dict(self) -> dict[str, Any]:
        """``{"run_key", "record", "config"}`` (what tables carry in ``attrs["missing"]``)."""
        return {"run_key": self.key, "record": str(self.record), "config": self.config}


@dataclasses.dataclass(frozen=True)
class StoreScan:
    """What a results folder holds: complete runs by key, the files that are not, the runs missing."""

    folder: Path
    ok: dict[str, RunCheck]
    bad: list[RunCheck]
    missing: list[MissingRun] = dataclasses.field(default_factory=list)

    @property
    def keys(self) -> set[str]:
        """Keys of the complete runs."""
        return set(self.ok)

    def excluded(self) -> list[str]:
        """``"<path>: <reason>"`` of every file left out."""
        return [c.describe() for c in self.bad]


def scan_store(folder: str | os.PathLike, key_of: KeyOf | None = None) -> StoreScan:
    """Check every ``runs/*.csv`` of ``folder`` and find the records without a run file.

    Temporary files and other names are ignored. ``key_of``: see :func:`check_run_file`.
    """
    base = as_folder(folder)
    runs = base / RUNS_SUBDIR
    ok: dict[str, RunCheck] = {}
    bad: list[RunCheck] = []
    missing: list[MissingRun] = []
    if runs.is_dir():
        for p in sorted(runs.iterdir()):
            if p.name.startswith(".") or not p.is_file():
                continue
            if p.name.endswith(_RUN_SUFFIX):
                c = check_run_file(p, key_of)
                (ok.__setitem__(c.key, c) if c.ok else bad.append(c))
            elif p.name.endswith(_RECORD_SUFFIX) and _KEY_RE.match(p.stem):
                if not p.with_suffix(_RUN_SUFFIX).exists():
                    missing.append(MissingRun(p.stem, p, _recorded_config(p)))
    return StoreScan(base, ok, bad, missing)


def _recorded_config(record: Path) -> dict[str, Any] | None:
    try:
        config = json.loads(record.read_text(encoding="utf-8")).get("config")
    except (OSError, ValueError, AttributeError):
        return None
    return dict(config) if isinstance(config, Mapping) else None


def finished_keys(folder: str | os.PathLike) -> set[str]:
    """Keys of the complete runs stored in ``folder`` (see :func:`check_run_file`)."""
    return scan_store(folder).keys


def quarantine(folder: str | os.PathLike, checks: Iterable[RunCheck]) -> list[Path]:
    """Move bad run files (and their completion records) to ``<folder>/quarantine/``.

    Each file becomes ``quarantine/<UTC time>-<name>`` beside a ``.why`` note holding the reason
    (:func:`synthetic.store.folders.set_aside`); nothing is deleted. Returns the new paths of the
    run files.
    """
    base = as_folder(folder)
    dest_dir = base / QUARANTINE_SUBDIR
    moved = []
    for c in checks:
        if c.ok:
            continue
        rec = c.path.with_suffix(_RECORD_SUFFIX)
        moved.append(set_aside(c.path, dest_dir, c.reason, with_files=[rec] if _KEY_RE.match(c.key) else []))
    return moved


def adopt_unrecorded(folder: str | os.PathLike, checks: Iterable[RunCheck]) -> list[str]:
    """Write completion records for verified run files that have none (older stores); return keys.

    ``checks`` are those of a :func:`scan_store` given ``key_of``: only a file whose config columns
    hash to its name is ok without a record, so nothing unverified is adopted.
    """
    done = []
    for c in checks:
        if not c.ok or c.recorded:
            continue
        data = c.path.read_bytes()
        if hashlib.sha256(data).hexdigest() != c.sha256:
            continue  # changed since it was checked: the next scan judges it
        frame = parse_csv(data)
        record = {
            "format": RUN_FORMAT,
            "run_key": c.key,
            "rows": len(frame),
            "epochs": [int(e) for e in frame[EPOCH]],
            "sha256": c.sha256,
            "bytes": len(data),
            "config": config_of(frame),
        }
        atomic_write_text(
            c.path.with_suffix(_RECORD_SUFFIX), json.dumps(record, separators=(",", ":")) + "\n"
        )
        done.append(c.key)
    return done


# --------------------------------------------------------------------------------------------
# Reading runs and tables


def read_run(folder: str | os.PathLike, key: str) -> pd.DataFrame:
    """Read the stored run ``key`` from ``folder``.

    Raises:
        FileNotFoundError: no such run (the message names the expected path).
        ValueError: the run file is incomplete or corrupt (the message names it and says why).
    """
    path = run_path(folder, key)
    if not path.is_file():
        raise FileNotFoundError(f"no stored run {key!r}: expected the file {path}")
    c = check_run_file(path)
    if not c.ok:
        raise ValueError(f"stored run {c.describe()}")
    return parse_csv(path.read_bytes())
