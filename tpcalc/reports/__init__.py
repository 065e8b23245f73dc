"""Reports: the Python twin of every CLI command (take the request, sweep, call calculators).

``tpcalc comm ...`` is ``tpcalc.reports.tp.comm_report(Workload.load(...), tp)`` plus
rendering, so everything the CLI prints can be had from a notebook as pydantic models. The
request (``Workload``: what is trained on which card; ``Layout``: how it is split) is
``tpcalc.reports.request``.
"""
