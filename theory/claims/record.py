"""The one record type of a verified claim, shared by every package that judges claims.

A *claim* is a statement of one of the two papers (or a numerical law derived from them) that the
project verifies by computation. Every verdict the project prints -- the theory checks of
``python -m theory``, the synthetic judges of ``python -m synthetic claims``, the real-data
judges and the report of ``python -m figures`` -- is a :class:`Claim`:

* ``id`` and ``statement``: from :data:`theory.claims.catalogue.CATALOGUE`, the single list of
  claim ids (T1-T8 and W-law are *checks* with PASS / FAIL; S1-S4, R1-R5 and W1-W5 are
  *experimental claims* with REPRODUCED / PARTLY / NOT REPRODUCED / UNDECIDED / NOT RUN; O1, O1b
  and O1c are *open problems*, searched by computation, with FOUND / NOT FOUND, or FAIL when one
  of their PASS / FAIL sub-checks, a control of the search, fails; O2, the open problem read from
  the synthetic runs, is UNDECIDED when none of its settings has settled);
* ``verdict``: a :class:`Verdict`;
* ``evidence``: numbers with their spread (:class:`Evidence`: seed standard deviation,
  confidence interval, tolerance);
* ``subchecks``: the individual checks or per-setting judgements (:class:`SubCheck`);
* ``setting``: where it was tested (data, encoder, normalisation, batch size, scale, ...);
* ``command``: the exact command line that reproduces it;
* ``criterion``: the rule the verdict applies, declared before the runs (never tuned after);
* ``figures``: ids of the figures that show it.

Records serialise losslessly to JSON (:func:`to_json` / :func:`from_json`); the table views are
in :mod:`theory.claims.table`.

Example::

    sub = SubCheck.tolerance("L*_SCL closed form vs exact NC batch", value=3e-16, tol=1e-12,
                             kind="error", instances=60)
    claim = Claim.from_subchecks("T4", [sub], command="python -m theory")
    print(claim.verdict)          # Verdict.PASS
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from theory.claims.catalogue import CATALOGUE, CHECK_IDS

__all__ = ["Verdict", "Evidence", "SubCheck", "Claim", "not_run", "to_json", "from_json"]


class Verdict(str, Enum):
    """Outcome of a claim or a sub-check.

    ``PASS`` / ``FAIL`` for checks (a numerical law either holds within its tolerance or not);
    ``REPRODUCED`` / ``PARTLY`` / ``NOT_REPRODUCED`` for experimental claims; ``UNDECIDED`` for an
    experimental claim (or one of its settings) whose runs have not settled within their budget (a
    snapshot decides nothing; the record says how far the runs got and carries the command that
    continues them); ``NOT_RUN`` when no result exists yet (the record then carries the command
    that produces one). ``FOUND`` / ``NOT_FOUND`` for an open problem (and its per-setting
    findings): the search found what the criterion declared (e.g. a configuration that beats NC
    by the declared margin), or did not within the searched range; neither is a failure.
    """

    PASS = "PASS"
    FAIL = "FAIL"
    REPRODUCED = "REPRODUCED"
    PARTLY = "PARTLY"
    NOT_REPRODUCED = "NOT REPRODUCED"
    UNDECIDED = "UNDECIDED"
    NOT_RUN = "NOT RUN"
    FOUND = "FOUND"
    NOT_FOUND = "NOT FOUND"

    def __str__(self) -> str:  # "NOT REPRODUCED", not "Verdict.NOT_REPRODUCED"
        return self.value

    @classmethod
    def parse(cls, value: Verdict | str) -> Verdict:
        """``Verdict`` from itself, its value (``"NOT RUN"``) or its name (``"NOT_RUN"``).

        Raises:
            ValueError: ``value`` names no verdict.
        """
        if isinstance(value, Verdict):
            return value
        if isinstance(value, str):
            key = value.strip().upper()
            for v in cls:
                if key in (v.value, v.name):
                    return v
        raise ValueError(f"verdict must be one of {[v.value for v in cls]}, got {value!r}")

    @property
    def ok(self) -> bool:
        """True for ``PASS`` and ``REPRODUCED``, and for the answers ``FOUND`` / ``NOT FOUND`` of an open problem."""
        return self in (Verdict.PASS, Verdict.REPRODUCED, Verdict.FOUND, Verdict.NOT_FOUND)


#: Kinds of spread an :class:`Evidence` can carry (``""``: a number without spread).
SPREADS = ("", "std", "se", "ci", "range", "tol")


def _finite_or_nan(name: str, value: Any) -> float:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real number, got {value!r}") from exc


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x == 0.0:
        return "0"
    a = abs(x)
    return f"{x:.3g}" if 1e-3 <= a < 1e4 else f"{x:.2e}"


@dataclass(frozen=True)
class Evidence:
    """One measured number with its spread.

    Args:
        label: what was measured, e.g. ``"etf_mean HSCL beta=5"``.
        value: the estimate (a mean over seeds, a point estimate, the worst violation, ...).
        spread: its spread, or ``None``; ``spread_kind`` says which.
        spread_kind: ``"std"`` (sample std over ``n`` seeds), ``"se"`` (standard error), ``"ci"``
            (half-width of a confidence interval at ``level``), ``"range"`` (half the max-min
            range), ``"tol"`` (the tolerance the value is compared with), or ``""``.
        n: number of seeds / instances / samples behind the value.
        level: confidence level of a ``"ci"`` spread, e.g. 0.99.
        unit: optional unit (``"%"``, ``"s"``).
    """

    label: str
    value: float
    spread: float | None = None
    spread_kind: str = ""
    n: int | None = None
    level: float | None = None
    unit: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"label must be a non-empty string, got {self.label!r}")
        object.__setattr__(self, "value", _finite_or_nan("value", self.value))
        if self.spread is not None:
            object.__setattr__(self, "spread", _finite_or_nan("spread", self.spread))
        if self.spread_kind not in SPREADS:
            raise ValueError(f"spread_kind must be one of {SPREADS}, got {self.spread_kind!r}")
        if (self.spread is None) != (self.spread_kind == ""):
            raise ValueError("spread and spread_kind must be given together")
        if self.spread_kind == "ci" and (self.level is None or not 0.0 < float(self.level) < 1.0):
            raise ValueError(f"a 'ci' spread needs a level in (0, 1), got {self.level!r}")
        if self.n is not None and (isinstance(self.n, bool) or int(self.n) != self.n or self.n < 0):
            raise ValueError(f"n must be a non-negative integer, got {self.n!r}")

    def text(self) -> str:
        """``"label = 0.171 ± 0.0015 (99% CI, n=4000)"``-style rendering."""
        out = f"{self.label} = {_fmt(self.value)}{self.unit}"
        extra = []
        if self.spread is not None:
            sign = "tol " if self.spread_kind == "tol" else "± "
            out += f" {sign}{_fmt(self.spread)}{self.unit}"
            if self.spread_kind == "ci":
                extra.append(f"{100 * float(self.level or 0):g}% CI")
            elif self.spread_kind in ("std", "se", "range"):
                extra.append(self.spread_kind)
        if self.n is not None:
            extra.append(f"n={self.n}")
        return out + (f" ({', '.join(extra)})" if extra else "")

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-ready)."""
        return {
            "label": self.label,
            "value": self.value,
            "spread": self.spread,
            "spread_kind": self.spread_kind,
            "n": self.n,
            "level": self.level,
            "unit": self.unit,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Evidence:
        """Inverse of :meth:`to_dict`."""
        optional = {k: d[k] for k in ("spread", "spread_kind", "n", "level", "unit") if k in d}
        return cls(d["label"], d["value"], **optional)


def _as_evidence(items: Iterable[Evidence | Mapping[str, Any]] | None) -> tuple[Evidence, ...]:
    out = []
    for e in items or ():
        out.append(e if isinstance(e, Evidence) else Evidence.from_dict(e))
    return tuple(out)


def _as_setting(setting: Mapping[str, Any] | None) -> dict[str, str]:
    if setting is None:
        return {}
    if not isinstance(setting, Mapping):
        raise ValueError(f"setting must be a mapping of field -> value, got {type(setting).__name__}")
    return {str(k): str(v) for k, v in setting.items()}


@dataclass(frozen=True)
class SubCheck:
    """One individual check or per-setting judgement inside a claim.

    Args:
        what: what was checked, in one line.
        verdict: its own :class:`Verdict`.
        evidence: the numbers behind it.
        instances: how many instances / runs it covers (0 when not meaningful).
        setting: the setting it was tested in (field -> value).
        note: free text (the worst instance, a caveat).
        severity: how close to failing, as violation / tolerance (> 1 fails; with a zero
            tolerance the raw violation, <= 0, when it passes and ``inf`` when it fails); ``None``
            when the sub-check is not a tolerance test. Used to pick the "worst" sub-check of a
            claim.
    """

    what: str
    verdict: Verdict
    evidence: tuple[Evidence, ...] = ()
    instances: int = 0
    setting: dict[str, str] = field(default_factory=dict)
    note: str = ""
    severity: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.what, str) or not self.what:
            raise ValueError(f"what must be a non-empty string, got {self.what!r}")
        object.__setattr__(self, "verdict", Verdict.parse(self.verdict))
        object.__setattr__(self, "evidence", _as_evidence(self.evidence))
        object.__setattr__(self, "setting", _as_setting(self.setting))
        if isinstance(self.instances, bool) or int(self.instances) != self.instances or self.instances < 0:
            raise ValueError(f"instances must be a non-negative integer, got {self.instances!r}")
        if self.severity is not None:
            object.__setattr__(self, "severity", _finite_or_nan("severity", self.severity))

    @classmethod
    def tolerance(
        cls,
        what: str,
        value: float,
        tol: float,
        *,
        kind: str = "error",
        instances: int = 0,
        note: str = "",
        setting: Mapping[str, Any] | None = None,
        evidence: Sequence[Evidence] = (),
        label: str = "",
    ) -> SubCheck:
        """A PASS / FAIL tolerance test.

        ``kind="error"``: passes when ``value <= tol`` (a maximal error); ``kind="gap"``: passes
        when ``value >= -tol`` (a minimal gap that must not be significantly negative). A
        non-finite ``value`` always fails. The value and tolerance become the first evidence,
        labelled ``label`` (default ``"max err"`` or ``"min gap"``); both are in the units of the
        quantity compared, so that the evidence reads as a measurement, not as a ratio.

        Raises:
            ValueError: unknown ``kind`` or a negative / NaN ``tol``.
        """
        if kind not in ("error", "gap"):
            raise ValueError(f"kind must be 'error' or 'gap', got {kind!r}")
        value = _finite_or_nan("value", value)
        tol = _finite_or_nan("tol", tol)
        if not tol >= 0.0:
            raise ValueError(f"tol must be >= 0, got {tol!r}")
        violation = value if kind == "error" else -value  # > tol fails
        if not math.isfinite(value):
            passed, severity = False, math.inf
        else:
            passed = violation <= tol
            # violation / tol; with tol = 0 the raw violation (<= 0, its margin) when it passes
            severity = violation / tol if tol > 0 else (violation if passed else math.inf)
        label = label or ("max err" if kind == "error" else "min gap")
        ev = (Evidence(label, value, tol, "tol"), *evidence)
        return cls(
            what, Verdict.PASS if passed else Verdict.FAIL, ev, instances, dict(setting or {}), note, severity
        )

    @property
    def passed(self) -> bool:
        """True for a PASS or REPRODUCED sub-check."""
        return self.verdict.ok

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-ready)."""
        return {
            "what": self.what,
            "verdict": self.verdict.value,
            "evidence": [e.to_dict() for e in self.evidence],
            "instances": self.instances,
            "setting": dict(self.setting),
            "note": self.note,
            "severity": self.severity,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SubCheck:
        """Inverse of :meth:`to_dict`."""
        return cls(
            d["what"],
            d["verdict"],
            d.get("evidence", ()),
            d.get("instances", 0),
            d.get("setting") or {},
            d.get("note", ""),
            d.get("severity"),
        )


_CHECK_VERDICTS = (Verdict.PASS, Verdict.FAIL, Verdict.NOT_RUN)


#: An open problem answered from training runs (O2) is UNDECIDED when none of its runs settled.
_OPEN_VERDICTS = (Verdict.FOUND, Verdict.NOT_FOUND, Verdict.FAIL, Verdict.UNDECIDED, Verdict.NOT_RUN)


_CLAIM_VERDICTS = (
    Verdict.REPRODUCED,
    Verdict.PARTLY,
    Verdict.NOT_REPRODUCED,
    Verdict.UNDECIDED,
    Verdict.NOT_RUN,
)


@dataclass(frozen=True)
class Claim:
    """The verified state of one claim (see the module docstring).

    Args:
        id: a :data:`CATALOGUE` id.
        verdict: PASS / FAIL / NOT RUN for checks; REPRODUCED / PARTLY / NOT REPRODUCED /
            UNDECIDED / NOT RUN for experimental claims; FOUND / NOT FOUND / FAIL / UNDECIDED /
            NOT RUN for open problems.
        evidence: headline numbers with spread.
        subchecks: the individual checks or per-setting judgements.
        setting: where it was tested (field -> value, e.g. ``{"data": "synthetic", "C": "10"}``).
        command: the exact command that reproduces it.
        criterion: the verdict rule, declared before the runs.
        figures: ids of the figures that show it.
        statement: defaults to the catalogue statement.
        notes: free text (what was tried when it does not reproduce, caveats).

    Raises:
        ValueError: unknown id, or a verdict of the wrong family for the id's kind.
    """

    id: str
    verdict: Verdict
    evidence: tuple[Evidence, ...] = ()
    subchecks: tuple[SubCheck, ...] = ()
    setting: dict[str, str] = field(default_factory=dict)
    command: str = ""
    criterion: str = ""
    figures: tuple[str, ...] = ()
    statement: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if self.id not in CATALOGUE:
            raise ValueError(f"id must be one of {list(CATALOGUE)}, got {self.id!r}")
        v = Verdict.parse(self.verdict)
        kind = CATALOGUE[self.id].kind
        allowed = {"check": _CHECK_VERDICTS, "open": _OPEN_VERDICTS}.get(kind, _CLAIM_VERDICTS)
        if v not in allowed:
            raise ValueError(
                f"verdict of {CATALOGUE[self.id].kind} {self.id} must be one of "
                f"{[a.value for a in allowed]}, got {v.value!r}"
            )
        object.__setattr__(self, "verdict", v)
        object.__setattr__(self, "evidence", _as_evidence(self.evidence))
        object.__setattr__(
            self,
            "subchecks",
            tuple(s if isinstance(s, SubCheck) else SubCheck.from_dict(s) for s in self.subchecks),
        )
        object.__setattr__(self, "setting", _as_setting(self.setting))
        object.__setattr__(self, "figures", tuple(str(f) for f in self.figures))
        if not self.statement:
            object.__setattr__(self, "statement", CATALOGUE[self.id].statement)

    @classmethod
    def from_subchecks(cls, claim_id: str, subchecks: Sequence[SubCheck], **kwargs: Any) -> Claim:
        """A check whose verdict is PASS iff every sub-check passes (NOT RUN without sub-checks).

        Raises:
            ValueError: ``claim_id`` is not a check id.
        """
        if claim_id not in CATALOGUE or CATALOGUE[claim_id].kind != "check":
            raise ValueError(f"claim_id must be a check id {list(CHECK_IDS)}, got {claim_id!r}")
        subs = tuple(subchecks)
        if not subs:
            verdict = Verdict.NOT_RUN
        else:
            verdict = Verdict.PASS if all(s.passed for s in subs) else Verdict.FAIL
        return cls(claim_id, verdict, subchecks=subs, **kwargs)

    @classmethod
    def from_findings(cls, claim_id: str, subchecks: Sequence[SubCheck], **kwargs: Any) -> Claim:
        """An open problem's record from its findings and controls.

        FAIL if a PASS / FAIL sub-check fails, else FOUND if any sub-check is FOUND, else NOT
        FOUND (NOT RUN without sub-checks).

        Raises:
            ValueError: ``claim_id`` is not an open-problem id.
        """
        if claim_id not in CATALOGUE or CATALOGUE[claim_id].kind != "open":
            opens = [k for k, e in CATALOGUE.items() if e.kind == "open"]
            raise ValueError(f"claim_id must be an open-problem id {opens}, got {claim_id!r}")
        subs = tuple(subchecks)
        if not subs:
            verdict = Verdict.NOT_RUN
        elif any(s.verdict == Verdict.FAIL for s in subs):
            verdict = Verdict.FAIL
        elif any(s.verdict == Verdict.FOUND for s in subs):
            verdict = Verdict.FOUND
        else:
            verdict = Verdict.NOT_FOUND
        return cls(claim_id, verdict, subchecks=subs, **kwargs)

    @property
    def kind(self) -> str:
        """``"check"``, ``"claim"`` or ``"open"`` (from the catalogue)."""
        return CATALOGUE[self.id].kind

    @property
    def instances(self) -> int:
        """Total instances over the sub-checks."""
        return sum(s.instances for s in self.subchecks)

    def worst(self) -> SubCheck | None:
        """The sub-check nearest to (or furthest past) its tolerance, else the first failing one."""
        graded = [s for s in self.subchecks if s.severity is not None]
        if graded:
            return max(graded, key=lambda s: s.severity if s.severity is not None else -math.inf)
        failing = [s for s in self.subchecks if not s.passed]
        return failing[0] if failing else (self.subchecks[0] if self.subchecks else None)

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-ready); :meth:`from_dict` inverts it exactly."""
        return {
            "id": self.id,
            "statement": self.statement,
            "verdict": self.verdict.value,
            "evidence": [e.to_dict() for e in self.evidence],
            "subchecks": [s.to_dict() for s in self.subchecks],
            "setting": dict(self.setting),
            "command": self.command,
            "criterion": self.criterion,
            "figures": list(self.figures),
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Claim:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a missing ``id`` / ``verdict`` or an invalid field.
        """
        if not isinstance(d, Mapping) or "id" not in d or "verdict" not in d:
            raise ValueError("a claim record needs at least 'id' and 'verdict'")
        return cls(
            d["id"],
            d["verdict"],
            d.get("evidence", ()),
            d.get("subchecks", ()),
            d.get("setting") or {},
            d.get("command", ""),
            d.get("criterion", ""),
            tuple(d.get("figures", ())),
            d.get("statement", ""),
            d.get("notes", ""),
        )


def not_run(
    claim_id: str,
    command: str,
    *,
    setting: Mapping[str, Any] | None = None,
    criterion: str = "",
    notes: str = "",
) -> Claim:
    """A NOT RUN record carrying the command that would produce the missing results."""
    return Claim(
        claim_id,
        Verdict.NOT_RUN,
        setting=dict(setting or {}),
        command=command,
        criterion=criterion,
        notes=notes,
    )


def to_json(claims: Iterable[Claim], *, indent: int | None = 2) -> str:
    """JSON array of :meth:`Claim.to_dict` records (NaN and inf written as strings)."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):  # JSON has no NaN / inf
            return str(x)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return json.dumps([clean(c.to_dict()) for c in claims], indent=indent, allow_nan=False)


_NUMERIC = ("value", "spread", "severity")


def from_json(text: str) -> list[Claim]:
    """Inverse of :func:`to_json`.

    Raises:
        ValueError: the text is not a JSON array of claim records.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"text is not valid JSON: {exc}") from exc
    if not isinstance(data, list):
        raise ValueError("text must hold a JSON array of claim records")

    def unclean(x: Any) -> Any:  # the non-finite numbers to_json wrote as strings
        if isinstance(x, dict):
            return {
                k: (float(v) if k in _NUMERIC and isinstance(v, str) else unclean(v)) for k, v in x.items()
            }
        if isinstance(x, list):
            return [unclean(v) for v in x]
        return x

    return [Claim.from_dict(unclean(d)) for d in data]
