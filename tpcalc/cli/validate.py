"""tpcalc validate: predicted step time against published, measured training runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tpcalc.cli.common import emit
from tpcalc.cli.options import FormatOpt
from tpcalc.render import Format

app = typer.Typer()


@app.command()
def validate(
    hardware: Annotated[
        str | None,
        typer.Option("--hardware", help="Only the rows measured on this card (e.g. h100-sxm)."),
    ] = None,
    runs: Annotated[
        Path | None,
        typer.Option(
            "--runs",
            help="A runs YAML in the shipped schema (default: tpcalc/validation/runs.yaml).",
        ),
    ] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Recompute every published training run in the validation table and compare the
    predicted tokens/s/GPU with the measured one; the notes give mean |error| and the worst
    row per card, dense vs MoE. Rows tpcalc cannot compute (no config, Mamba layers) are
    listed on stderr.

    Examples:

      tpcalc validate

      tpcalc validate --hardware h100-sxm --format csv > validation.csv
    """

    def build():
        from tpcalc.reports.validate_time import validate_report

        return validate_report(runs, hardware)

    emit(build, fmt)
