"""The synthetic claims S1-S4, R1s-R3s, R4, R5 and the open problem O2: criteria, judges, records.

* :mod:`synthetic.claims.criteria` -- the claim grids, their declared criteria, the commands;
* :mod:`synthetic.claims.rows` -- run summaries, seed aggregates, NC / DC of a setting;
* :mod:`synthetic.claims.judges` -- one verdict rule per claim;
* :mod:`synthetic.claims.judges_analogue` -- those of R1s-R3s, the synthetic analogues of R1-R3;
* :mod:`synthetic.claims.records` -- the ``theory.claims`` records and their table views.
"""
