"""Reports: the Python twin of every CLI command (load specs by name, sweep, call calculators).

``tpcalc comm ...`` is ``tpcalc.reports.tp.comm_report(...)`` plus rendering, so everything the
CLI prints can be had from a notebook as pydantic models.
"""
