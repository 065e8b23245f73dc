"""tpcalc validate: tpcalc against published training runs (``--memory``: do they fit)."""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.cli.common import emit, error
from tpcalc.cli.options import ExplainOpt, FormatOpt, UnitsOpt
from tpcalc.render import Format
from tpcalc.units import ByteUnits

app = typer.Typer()


@app.command()
def validate(
    memory: Annotated[
        bool,
        typer.Option(
            "--memory",
            help="Per-rank memory of every published layout (tpcalc/validation/layouts.yaml) "
            "by part against the card, with a fits column.",
        ),
    ] = False,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Check tpcalc against published training runs, each with its source.

    Examples:

      tpcalc validate --memory

      tpcalc validate --memory -f json
    """
    if not memory:
        error("choose what to validate: --memory")
        raise typer.Exit(2)

    def build():
        from tpcalc.reports.validate_memory import validate_memory_report

        return validate_memory_report()

    emit(build, fmt, units=units, explain=explain)
