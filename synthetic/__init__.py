"""Synthetic experiments: latent-class data, small encoders, Adam training, stacked runs, sweeps.

Imports flow ``theory <- synthetic``; inside, ``store <- engine <- sweep``, and ``claims`` reads
the store. Subpackages, one concern each:

* :mod:`synthetic.engine` -- the training engine: ``RunConfig``, data, encoders, the objective,
  the metric step, stacking plans, ``train_runs`` / ``train_run``;
* :mod:`synthetic.store` -- the results store: atomic run files with completion records,
  ``table.csv``, failure records, the lock, reading results back, seed summaries (used by the
  real-data runs too; it knows no config class);
* :mod:`synthetic.sweep` -- TOML grids (``synthetic/grids/*.toml``) and resumable sweeps on local
  processes, dask or SLURM;
* :mod:`synthetic.claims` -- the claims S1-S4, R1s-R3s, R4, R5 and the open problem O2 judged from the stored runs with the
  criteria declared in the grid files;
* ``python -m synthetic`` -- the command line (``sweep``, ``summary``, ``claims``, ``grids``).
"""
