"""The real-data claims R1-R5 and W1-W4: their runs, declared verdict rules, records, commands.

* :mod:`realdata.claims.grids` -- the runs behind each claim, at each scale;
* :mod:`realdata.claims.judges` -- the verdict rules, declared before the runs;
* :mod:`realdata.claims.records` -- the records and tables from whatever is stored;
* :mod:`realdata.claims.run` -- running a claim group, and the digits scale of the main job.
"""
