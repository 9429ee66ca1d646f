"""Figures and the claims report of the project (``python -m figures``, the main job).

One module per figure (``figures/fig_*.py``), each a pure function from tidy result tables to a
matplotlib Figure (:mod:`figures.registry`); one look (:mod:`figures.style`); the stages of the
main job (:mod:`figures.stages`), its cache (:mod:`figures.cache`) and the report
(:mod:`figures.report`). Every import of the computing packages is in :mod:`figures.sources`.
"""
