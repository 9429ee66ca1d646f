"""The catalogue: every claim id the project verifies, exactly once, with its statement.

:data:`CATALOGUE` maps each id (T1-T8 and W-law: checks; O1, O1b, O1c and O2: open problems
answered by computation; S1-S4, R1-R5, W1-W5 and R1s-R3s, the synthetic analogues of R1-R3 of the
project's own design: experimental claims) to a :class:`CatalogueEntry`: the statement verified (a
paraphrase of the papers), the paper, the kind and the package that judges it. docs/claims.md
gives each one's source and status.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CatalogueEntry", "CATALOGUE", "CHECK_IDS", "CLAIM_IDS", "OPEN_IDS", "ALL_IDS", "statement"]


@dataclass(frozen=True)
class CatalogueEntry:
    """A claim id's fixed description: the statement verified and where it comes from."""

    id: str
    statement: str
    paper: str  #: "hcl" (arXiv 2311.05139) or "weince" (arXiv 2606.00262)
    kind: str  #: "check" (PASS/FAIL), "open" (FOUND/NOT FOUND/FAIL) or "claim" (REPRODUCED/PARTLY/...)
    package: str  #: the package that judges it: "theory", "synthetic" or "realdata"


def _entries(*rows: tuple[str, str, str, str, str]) -> dict[str, CatalogueEntry]:
    return {r[0]: CatalogueEntry(*r) for r in rows}


#: Every claim id the project verifies, exactly once, in report order. Statements paraphrase the
#: papers (docs/claims.md gives each one's source and status).
CATALOGUE: dict[str, CatalogueEntry] = _entries(
    ("T1", "Harris: L_HSCL >= L_SCL for every f, psi, eta", "hcl", "check", "theory"),
    ("T2", "Harris: L_HUCL >= L_UCL for every f, psi, eta", "hcl", "check", "theory"),
    ("T3", "exponential tilt: loss non-decreasing in beta", "hcl", "check", "theory"),
    ("T4", "SCL minimised by NC, value L*_SCL", "hcl", "check", "theory"),
    ("T5", "HSCL minimised by NC, same value L*_SCL", "hcl", "check", "theory"),
    ("T6", "UCL minimised by NC, binomial value L*_UCL", "hcl", "check", "theory"),
    ("T7", "HUCL at NC: q(beta) formula, above L*_UCL", "hcl", "check", "theory"),
    ("T8", "batched losses: Harris per batch, NC batch = L*", "hcl", "check", "theory"),
    ("W-law", "Weibull top-1: P(j) = q_j^-b / sum q_k^-b", "weince", "check", "theory"),
    ("O1", "HUCL: a free-embedding configuration beats NC at some beta <= 100", "hcl", "open", "theory"),
    ("O1b", "HUCL: NC becomes a saddle on the sphere at some beta <= 100", "hcl", "open", "theory"),
    ("O1c", "HUCL: the bracket [lower bound, best found] closes (tight bound)", "hcl", "open", "theory"),
    (
        "S1",
        "With ball or sphere normalisation, SCL and HSCL reach NC for every beta",
        "hcl",
        "claim",
        "synthetic",
    ),
    (
        "S2",
        "UCL reaches NC with label positives, not with additive-noise positives",
        "hcl",
        "claim",
        "synthetic",
    ),
    ("S3", "HUCL does not reach NC; its ETF deviation grows with beta", "hcl", "claim", "synthetic"),
    (
        "S4",
        "Without normalisation, random and hard negatives end in Dimensional Collapse, not NC",
        "hcl",
        "claim",
        "synthetic",
    ),
    (
        "R1",
        "CIFAR-100: beta = 5 and 10 raise NCM accuracy by over 40 points over SCL/UCL",
        "hcl",
        "claim",
        "realdata",
    ),
    (
        "R2",
        "Supervised: more hardness brings the representation closer to NC; SCL ends in DC",
        "hcl",
        "claim",
        "realdata",
    ),
    (
        "R3",
        "Unsupervised: beta = 5 is best; larger beta gives worse NC and more DC",
        "hcl",
        "claim",
        "realdata",
    ),
    (
        "R1s",
        "Synthetic analogue of R1 (project's design): hard negatives raise held-out NCM accuracy",
        "hcl",
        "claim",
        "synthetic",
    ),
    (
        "R2s",
        "Synthetic analogue of R2 (project's design): hardness brings means closer to NC; SCL in DC",
        "hcl",
        "claim",
        "synthetic",
    ),
    (
        "R3s",
        "Synthetic analogue of R3 (project's design): UCL/HUCL best at interior beta, large beta worse",
        "hcl",
        "claim",
        "synthetic",
    ),
    (
        "R4",
        "Near-NC initialisation: SCL/HSCL keep NC; HUCL at beta 10, 30 drifts away into DC",
        "hcl",
        "claim",
        "synthetic",
    ),
    (
        "R5",
        "NC is reached for batch sizes 64-512; batch size 32 hinders NC with many classes",
        "hcl",
        "claim",
        "synthetic",
    ),
    (
        "O2",
        "Dimensional Collapse avoided without NC: where, among the settled synthetic settings",
        "hcl",
        "open",
        "synthetic",
    ),
    (
        "W1",
        "POT fits to negative-similarity tails of trained encoders give GPD shape xi < 0",
        "weince",
        "claim",
        "realdata",
    ),
    (
        "W2",
        "Likelihood link selection in the T_lambda family gives lambda-hat clearly > 0",
        "weince",
        "claim",
        "realdata",
    ),
    (
        "W3",
        "WeiNCE beats InfoNCE in frozen-feature evaluation (CIFAR-100, ResNet-18)",
        "weince",
        "claim",
        "realdata",
    ),
    (
        "W4",
        "WeiNCE adds no trainable parameters and negligible step-time overhead",
        "weince",
        "claim",
        "realdata",
    ),
    (
        "W5",
        "Synthetic noise floor: softmax keeps a bias floor, the Weibit MSE is about c/n",
        "weince",
        "claim",
        "theory",
    ),
)


CHECK_IDS: tuple[str, ...] = tuple(k for k, e in CATALOGUE.items() if e.kind == "check")


CLAIM_IDS: tuple[str, ...] = tuple(k for k, e in CATALOGUE.items() if e.kind == "claim")


#: The open problems ``python -m theory`` answers (O1, O1b, O1c); O2, read from the synthetic runs,
#: is judged by ``python -m synthetic claims`` (its package is "synthetic").
OPEN_IDS: tuple[str, ...] = tuple(
    k for k, e in CATALOGUE.items() if e.kind == "open" and e.package == "theory"
)


ALL_IDS: tuple[str, ...] = tuple(CATALOGUE)


def statement(claim_id: str) -> str:
    """The catalogue statement of ``claim_id``.

    Raises:
        ValueError: unknown id.
    """
    if claim_id not in CATALOGUE:
        raise ValueError(f"claim_id must be one of {list(CATALOGUE)}, got {claim_id!r}")
    return CATALOGUE[claim_id].statement
