"""Synthetic experiments: latent-class data, small encoders, Adam training, stacked runs, sweeps.

Modules (imports flow ``theory <- synthetic``):

* ``synthetic.config``: :class:`~synthetic.config.RunConfig`, the frozen, validated config of one
  run; its ``key()`` (hash of the resolved config) is the run's identity.
* ``synthetic.data``: seeded Gaussian-mixture latent-class data, named random streams, and the
  ``"label"`` / ``"noise"`` positive-pair constructions.
* ``synthetic.models``: free features, linear and MLP encoders with none/ball/sphere
  normalisation, and their stacked (leading run dimension) versions.
* ``synthetic.train``: ``train_run(config) -> DataFrame``, one row per recorded epoch with the
  collapse metrics of ``theory.collapse`` and the gap to the closed forms of ``theory.hcl``.
* ``synthetic.stacked``: ``train_stacked(configs)``, R runs in one tensor program, equal to R
  ``train_run`` calls; ``stack_groups`` partitions a sweep into stackable groups.
* ``synthetic.grids``: TOML sweep grids (``synthetic/grids/*.toml``), scales, overrides and their
  expansion into run configs.
* ``synthetic.sweep``: ``run_sweep``, resumable parallel execution (joblib or dask), each finished
  run stored atomically.
* ``synthetic.results``: the one table layout (config columns, ``run_key``, ``epoch``, metric
  columns), the atomic results store (``runs/<key>.csv``, ``table.csv``) and ``load_results``.
* ``synthetic.summary``: final-epoch metrics as mean ± std over seeds.
* ``synthetic.claims``: the judges of claims S1-S4 and R5.
* ``python -m synthetic``: the command line (``sweep``, ``summary``, ``claims``, ``grids``).
"""
