"""The claims report: ``report.md`` and a self-contained ``report.html``.

:mod:`figures.report.assemble` (one row per claim, the environment), :mod:`figures.report.summary`
(the claims grouped by outcome, the settings a run of claims shares), :mod:`figures.report.markdown`,
:mod:`figures.report.html`, :mod:`figures.report.write` (both files, atomically) and
:mod:`figures.report.commands` (the command that reproduces each claim).
"""
