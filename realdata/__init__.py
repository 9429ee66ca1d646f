"""Real-data experiments: datasets, encoders, training on one or several devices, evaluation, claims.

Imports flow ``theory <- synthetic <- realdata`` (the runs are stored in the synthetic results
store); inside, ``datasets <- inputs <- training``, ``evaluation`` (pure functions on features)
below ``training``, ``frozen`` above both, ``claims`` on top. Nothing heavy is imported here.

* :mod:`realdata.datasets` -- CIFAR-10/100, Tiny-ImageNet-200, STL-10 from local folders in their
  standard layouts and the bundled scikit-learn digits, as in-memory ``uint8`` tensors;
* :mod:`realdata.inputs` -- the hard-negative authors' single view, batched SimCLR views on the
  device, samplers, the run's seeded streams;
* :mod:`realdata.training` -- ``TrainConfig``, ResNets and heads, the objective (the theory
  losses, also under DDP), the step and the loop (``python -m realdata train``), checkpoints;
* :mod:`realdata.evaluation` -- features, NCM, linear probe, kNN, Recall@k, per-epoch metrics;
* :mod:`realdata.frozen` -- ``python -m realdata eval`` of a checkpoint, extreme-value diagnostics;
* :mod:`realdata.claims` -- the runs behind R1-R5 and W1-W4, declared verdict rules, records and
  the digits scale of the main job.

Papers: hard negatives and collapse (arXiv 2311.05139, Sec. 5), WeiNCE (arXiv 2606.00262, Sec. 5);
docs/realdata.md.
"""
