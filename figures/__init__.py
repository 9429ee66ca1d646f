"""Figures and the claims report of the project (``python -m figures``, the main job).

* :mod:`figures.pipeline` -- the stages of the main job: it asks theory, synthetic and realdata
  for results through their public functions, caches them, renders and reports;
* :mod:`figures.plots` -- one pure function per figure (``fig_*.py``): tidy tables in, a
  matplotlib Figure out; the registry, the shared look and the table helpers;
* :mod:`figures.report` -- ``report.md`` and the self-contained ``report.html``.
"""
