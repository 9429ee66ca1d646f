"""Failure records: a run that failed is stored as ``<folder>/failures/<key>.json``, never as a result.

A record holds the run's config, its key, a one-line reason, the exception type, the epoch where
it happened (when the engine said: the ``epoch`` of :class:`synthetic.engine.errors.RunFailed`), a traceback summary,
the time and the host. A sweep does not retry a recorded failure unless asked
(``run_sweep(retry_failed=True)``, ``python -m synthetic sweep --retry-failed``); a run that then
succeeds has its failure record removed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from synthetic.store.folders import FAILURES_SUBDIR, as_folder, atomic_write_text
from synthetic.store.runs import check_key

__all__ = [
    "FAILURE_FORMAT",
    "describe_failure",
    "failure_line",
    "write_failure",
    "read_failures",
    "clear_failure",
]

FAILURE_FORMAT = "synthetic-failure/1"


#: Lines of the traceback kept in a failure record (its end: where the error was raised).
TRACEBACK_LINES = 30


def describe_failure(exc: BaseException, note: str = "") -> dict[str, Any]:
    """The failure info of an exception raised by a runner (call it inside the ``except``).

    Returns:
        ``{"exception", "reason", "epoch", "traceback"}``: the exception's type name, its message
        on one line (``note`` first, e.g. that a stack failed before), the epoch it carries
        (:class:`synthetic.engine.errors.RunFailed`) or None, and the last lines of the traceback.
    """
    message = " ".join(str(exc).split()) or type(exc).__name__
    reason = getattr(exc, "reason", None)
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    lines = "".join(tb).rstrip().splitlines()
    return {
        "exception": type(exc).__name__,
        "reason": (note + " " if note else "") + (" ".join(str(reason).split()) if reason else message),
        "epoch": getattr(exc, "epoch", None),
        "traceback": "\n".join(lines[-TRACEBACK_LINES:]),
    }


def failure_line(key: str, info: Mapping[str, Any]) -> str:
    """One line for a failure: ``"<key>: <Exception> at epoch <e>: <reason>"``."""
    epoch = info.get("epoch")
    at = f" at epoch {epoch}" if epoch is not None else ""
    return f"{key}: {info.get('exception', 'error')}{at}: {info.get('reason', '')}"


def write_failure(folder: str | os.PathLike, key: str, info: Mapping[str, Any]) -> Path:
    """Store the failure record ``<folder>/failures/<key>.json`` atomically.

    ``info`` should hold ``config`` (the run's config dict), ``reason`` (one line),
    ``exception`` (its type), ``epoch`` (or None) and ``traceback`` (a summary); ``run_key``,
    ``format``, ``time`` and ``host`` are added.
    """
    record = {
        "format": FAILURE_FORMAT,
        "run_key": check_key(key),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        **dict(info),
    }
    path = as_folder(folder) / FAILURES_SUBDIR / f"{key}.json"
    return atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")


def read_failures(folder: str | os.PathLike) -> dict[str, dict]:
    """The failure records of ``folder`` by run key (unreadable records count, with their error)."""
    d = as_folder(folder) / FAILURES_SUBDIR
    out: dict[str, dict] = {}
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.json")):
        if p.name.startswith("."):
            continue
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            rec = {"reason": f"unreadable failure record ({exc})"}
        rec["path"] = str(p)
        out[p.stem] = rec
    return out


def clear_failure(folder: str | os.PathLike, key: str) -> bool:
    """Remove the failure record of ``key`` (after the run succeeded); True if there was one."""
    path = as_folder(folder) / FAILURES_SUBDIR / f"{check_key(key)}.json"
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
