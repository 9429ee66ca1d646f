"""The main job's pipeline: the stages of ``python -m figures`` and what produces their data.

The pipeline asks the computing packages for results through their public functions (it runs the
theory checks, trains or reuses the synthetic grids and the digits scale); the figures and the
report themselves never train.

* :mod:`figures.pipeline.stages` -- the data stages (theory, synthetic, realdata, weince, pickup);
  :mod:`figures.pipeline.render` -- the render and report stages;
* :mod:`figures.pipeline.runner` -- runs the stages, overlapping independent ones;
* :mod:`figures.pipeline.context` -- what the stages share; :mod:`figures.pipeline.cache` --
  content-keyed stage caches; :mod:`figures.pipeline.progress` -- one progress line;
* :mod:`figures.pipeline.produce_theory`, :mod:`~figures.pipeline.produce_synthetic`,
  :mod:`~figures.pipeline.produce_realdata` -- the producers of tables and records;
* :mod:`figures.pipeline.children` -- child processes; :mod:`figures.pipeline.inputs` -- score
  files; :mod:`figures.pipeline.w5` -- the W5 judge of the noise floor.
"""
