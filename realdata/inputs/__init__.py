"""How images become model inputs: label views, SimCLR augmentation, samplers, seeded streams.

* :mod:`realdata.inputs.views` -- the hard-negative authors' normalised single view, label positives;
* :mod:`realdata.inputs.augment`, :mod:`realdata.inputs.color` -- batched SimCLR views on the device;
* :mod:`realdata.inputs.samplers` -- shuffled ``drop_last`` and class-balanced batches;
* :mod:`realdata.inputs.pipeline` -- a run's seeded streams, its epoch batches, ``Views``.
"""
