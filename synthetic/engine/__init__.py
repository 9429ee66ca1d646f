"""The training engine: one run or R stacked runs of the synthetic study, with Adam.

* :mod:`synthetic.engine.config` -- :class:`~synthetic.engine.config.RunConfig`, the frozen,
  validated config of one run; its ``key()`` is the run's identity;
* :mod:`synthetic.engine.data` -- seeded latent-class data, named random streams, positives;
* :mod:`synthetic.engine.models` -- free features, linear and MLP encoders, their stacked forms;
* :mod:`synthetic.engine.objective` -- one step's R losses (the theory losses on run-stacked input);
* :mod:`synthetic.engine.evaluation` -- the metric step (NC/DC metrics, ranks, collision);
* :mod:`synthetic.engine.adam` -- Adam on stacked parameters; run-wise once runs skip steps;
* :mod:`synthetic.engine.plan` -- which runs train together, stacked or one at a time;
* :mod:`synthetic.engine.train` -- ``train_runs`` (the one epoch loop), ``train_run`` (R = 1);
* :mod:`synthetic.engine.errors` -- ``RunFailed`` / ``NonFiniteRun``.
"""
