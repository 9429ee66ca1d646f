"""Sweeps: grids of runs, executed resumably on processes or a cluster, each run stored as it ends.

* :mod:`synthetic.sweep.grids` -- TOML grids (``synthetic/grids/*.toml``), scales, expansion;
* :mod:`synthetic.sweep.run` -- ``run_sweep`` (resumable, locked, failures recorded);
* :mod:`synthetic.sweep.tasks` -- the ``Trainer`` (how a sweep trains) and one task in a worker;
* :mod:`synthetic.sweep.backends` -- local processes (joblib), dask, SLURM;
* :mod:`synthetic.sweep.progress` -- one progress bar across grids, or periodic lines;
* :mod:`synthetic.sweep.errors` -- an unreachable scheduler, an interrupted sweep.
"""
