"""Training a real-data run: config, encoders, the objective, the step, the loop, DDP, checkpoints.

* :mod:`realdata.training.config` -- ``TrainConfig`` (its key is the run's identity);
* :mod:`realdata.training.models` -- ResNets, the small CNN, the HCL head and WeiNCE projector;
* :mod:`realdata.training.objective` -- the loss of a step (the theory losses; DDP: a gather);
* :mod:`realdata.training.step`, :mod:`realdata.training.loop` -- one step; the training loop;
* :mod:`realdata.training.distributed` -- ``torchrun`` process groups and gathers;
* :mod:`realdata.training.checkpoint`, :mod:`realdata.training.store` -- verified checkpoints;
  the run's place in the results store.
"""
