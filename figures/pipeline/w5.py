"""The one claim the figures package judges itself: W5, the WeiNCE noise floor.

:func:`w5_claim` judges claim W5 (Erol et al., arXiv 2606.00262: on a synthetic design with a
Weibull winner law the softmax estimator of a log-odds keeps a bias floor while the Weibit
estimator's mean squared error follows the Fisher rate c/n) from the noise-floor table, with the
criterion declared here (:data:`W5_RATIO_TOL`, :data:`W5_FLOOR_TOL`) before any run and never
tuned to the results. No producer package judges W5 (theory computes the simulation only); every
other record comes from its producer (theory, synthetic, realdata) unchanged.
"""

from __future__ import annotations

import pandas as pd

from figures.report.commands import command_for
from theory import claims

__all__ = ["W5_RATIO_TOL", "W5_FLOOR_TOL", "w5_claim"]

#: Declared criterion of W5 (before any run): per n, the Weibit MSE over c/n within
#: [1/W5_RATIO_TOL, W5_RATIO_TOL]; at the largest n, the softmax MSE within W5_FLOOR_TOL
#: (relative) of the bias^2 floor plus its Godambe variance term, and above the Weibit MSE.
W5_RATIO_TOL = 1.25
W5_FLOOR_TOL = 0.25


def w5_claim(table: pd.DataFrame, *, scale: str = "default", results: str = "results") -> claims.Claim:
    """Judge W5 (noise floor) from :func:`noise_floor_table` with the declared criterion.

    REPRODUCED when both parts hold (the Weibit MSE tracks c/n at every n; the softmax MSE
    levels off at its floor above the Weibit MSE), PARTLY when one holds, NOT REPRODUCED when
    neither; NOT RUN for an empty table.

    Args:
        table: the noise-floor table.
        scale: the main job's scale (named in the record and its command).
        results: the results folder (passed to :func:`figures.report.commands.command_for`; the W5
            command does not name it: the simulation reads nothing from it).

    Raises:
        ValueError: missing columns.
    """
    need = ("n", "mse_softmax", "mse_weibit", "theory_weibit", "bias2_floor", "theory_softmax", "reps")
    if not isinstance(table, pd.DataFrame) or any(c not in table.columns for c in need):
        raise ValueError(f"table must be a DataFrame with the columns {list(need)}")
    cmd = command_for("W5", results=results, scale=scale)
    if len(table) == 0:
        return claims.not_run("W5", cmd)
    t = table.sort_values("n")
    ratio = t["mse_weibit"] / t["theory_weibit"]
    weibit_ok = bool(((ratio <= W5_RATIO_TOL) & (ratio >= 1 / W5_RATIO_TOL)).all())
    big = t.iloc[-1]
    floor_rel = abs(big["mse_softmax"] / big["theory_softmax"] - 1)
    softmax_ok = bool(floor_rel <= W5_FLOOR_TOL and big["mse_softmax"] > big["mse_weibit"])
    V = claims.Verdict
    verdict = (
        V.REPRODUCED
        if weibit_ok and softmax_ok
        else V.PARTLY
        if weibit_ok or softmax_ok
        else V.NOT_REPRODUCED
    )
    reps = int(t["reps"].iloc[0])
    ev = [
        claims.Evidence("Weibit MSE / (c/n), min over n", float(ratio.min()), n=reps),
        claims.Evidence("Weibit MSE / (c/n), max over n", float(ratio.max()), n=reps),
        claims.Evidence("c (Fisher constant)", float(t["c"].iloc[0])) if "c" in t.columns else None,
        claims.Evidence(
            f"softmax MSE at n={int(big['n'])}",
            float(big["mse_softmax"]),
            float(big.get("se_mse_softmax", float("nan"))),
            "se",
            n=reps,
        ),
        claims.Evidence("softmax bias² floor (theory)", float(big["bias2_floor"])),
        claims.Evidence(
            f"Weibit MSE at n={int(big['n'])}",
            float(big["mse_weibit"]),
            float(big.get("se_mse_weibit", float("nan"))),
            "se",
            n=reps,
        ),
    ]
    subs = [
        claims.SubCheck(
            f"Weibit MSE tracks c/n at n={int(r['n'])}",
            V.REPRODUCED
            if 1 / W5_RATIO_TOL <= r["mse_weibit"] / r["theory_weibit"] <= W5_RATIO_TOL
            else V.NOT_REPRODUCED,
            (claims.Evidence("MSE / (c/n)", float(r["mse_weibit"] / r["theory_weibit"]), n=reps),),
            instances=reps,
        )
        for _, r in t.iterrows()
    ]
    subs.append(
        claims.SubCheck(
            f"softmax MSE at n={int(big['n'])} at its floor and above the Weibit MSE",
            V.REPRODUCED if softmax_ok else V.NOT_REPRODUCED,
            (claims.Evidence("softmax MSE / (floor + Godambe/n) − 1", float(floor_rel)),),
            instances=reps,
        )
    )
    return claims.Claim(
        "W5",
        verdict,
        tuple(e for e in ev if e is not None),
        tuple(subs),
        setting={
            "data": "synthetic multinomial winners, 4 candidates, β* = 0.8",
            "n": "100 ... 10 000",
            "replications": str(reps),
            "scale": scale,
        },
        command=cmd,
        criterion=(
            f"Weibit MSE/(c/n) in [{1 / W5_RATIO_TOL:.2f}, {W5_RATIO_TOL:.2f}] at every n, and at the "
            f"largest n the softmax MSE within {100 * W5_FLOOR_TOL:g} % of bias² floor + Godambe "
            "variance/n and above the Weibit MSE"
        ),
        figures=("noise_floor",),
    )
