"""tpcalc hardware: the built-in accelerators and their links, one row each."""

from __future__ import annotations

import typer

from tpcalc.cli.common import emit
from tpcalc.cli.options import FormatOpt, UnitsOpt
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def hardware(units: UnitsOpt = ByteUnits.GB, fmt: FormatOpt = Format.table) -> None:
    """Built-in accelerators: memory, peak and achieved FLOP/s, NVLink and inter-node bandwidth.

    Example:

    \b
      tpcalc hardware --format csv
    """

    def build():
        from tpcalc.reports.catalog import hardware_report

        return hardware_report()

    emit(build, fmt, units=units)
