"""Real-data experiments: datasets, encoders, training on one or several devices, evaluation, claims.

Modules (import what you need; nothing heavy is imported here). Data and models:

* :mod:`realdata.datasets`: CIFAR-10/100, Tiny-ImageNet-200, STL-10 from local folders in their
  standard layouts and the bundled scikit-learn digits, as one in-memory
  :class:`~realdata.datasets.ImageDataset` of ``uint8`` tensors; registry ``DATASETS``.
* :mod:`realdata.views`: the hard-negative authors' single normalised view and label positives.
* :mod:`realdata.augment`: batched two-view SimCLR augmentation on the device (WeiNCE recipe).
* :mod:`realdata.samplers`: shuffled ``drop_last`` batches and class-balanced batches.
* :mod:`realdata.models`: ResNet-18/50 (CIFAR or standard stem), a small CNN for digits, the
  HCL head and the WeiNCE projector; ``build_model`` returns ``(h, z)`` models.

Training (``python -m realdata train``; docs/realdata.md):

* :mod:`realdata.config`: the frozen, validated :class:`~realdata.config.TrainConfig`; its key is the
  run's identity.
* :mod:`realdata.losses`: the one adapter to ``theory``'s losses, with the DDP kernels that evaluate
  each rank's anchors against the gathered global batch.
* :mod:`realdata.metrics`: the one adapter to ``theory.collapse`` (streaming class-mean bank, every
  collapse metric, NCM, the closed-form optimum).
* :mod:`realdata.pipeline`, :mod:`realdata.step`, :mod:`realdata.train`: seeded streams, batch plans
  and views on the device; one training step; the loop with evaluations, checkpoints, failures.
* :mod:`realdata.distributed`: the ``torchrun`` process group and differentiable gathers.
* :mod:`realdata.checkpoint`, :mod:`realdata.store`: verified atomic checkpoints; the adapter to the
  synthetic results store.

Evaluation and claims:

* :mod:`realdata.evaluate` (:mod:`realdata.probe`, :mod:`realdata.knn`): feature extraction, NCM,
  linear probe, weighted kNN and Recall@k; :mod:`realdata.frozen`: ``python -m realdata eval``.
* :mod:`realdata.diagnostics`: POT scores and link candidates of a trained encoder (``theory.weince``).
* :mod:`realdata.grids`, :mod:`realdata.judges`, :mod:`realdata.records`, :mod:`realdata.claims`:
  the runs behind each claim, the declared verdict rules, the records and tables, the claim commands
  and the digits scale of the main job (:func:`realdata.claims.run_digits`).

Papers: hard negatives and collapse (arXiv 2311.05139, Sec. 5), WeiNCE (arXiv 2606.00262, Sec. 5).
"""
