"""The figures: one pure function per figure, tidy tables in, a matplotlib Figure out.

``fig_*.py`` (one module per figure or per pair of SCL / UCL variants) never train and read no
files; :mod:`figures.plots.spec` says what a figure needs, :mod:`figures.plots.registry` lists
them in gallery order, :mod:`figures.plots.style` holds the theme and shared plotting helpers and
:mod:`figures.plots.frames` the table helpers.
"""
