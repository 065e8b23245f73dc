"""tpcalc validate: tpcalc against published training runs, each with its source.

Default: predicted step time (tokens/s/GPU) against measured runs; ``--memory``: do the
published layouts fit their cards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tpcalc.cli.common import emit
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
    hardware: Annotated[
        str | None,
        typer.Option("--hardware", help="Only the runs measured on this card (e.g. h100-sxm)."),
    ] = None,
    runs: Annotated[
        Path | None,
        typer.Option(
            "--runs",
            help="A runs YAML in the shipped schema (default: tpcalc/validation/runs.yaml).",
        ),
    ] = None,
    held_out: Annotated[
        bool,
        typer.Option(
            "--held-out",
            help="The held-out runs shipped with tpcalc (tpcalc/validation/heldout.yaml: "
            "published runs no fitted constant saw) instead of the validation table.",
        ),
    ] = False,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Check tpcalc against published training runs, each with its source.

    By default every measured run of the validation table (NVIDIA NeMo and Megatron-Bridge
    performance summaries, the Llama 3 paper) is recomputed with the step-time model and its
    predicted tokens/s/GPU compared with the measured one; the notes give mean |error| and the
    worst row per card, dense vs MoE, and which rows fitted each card's constant. Runs tpcalc
    cannot compute (no config, Mamba layers) are listed on stderr. --memory lists the published
    layouts' per-rank memory against the card instead.

    Examples:

    \b
      tpcalc validate

    \b
      tpcalc validate --hardware h100-sxm --format csv > validation.csv

    \b
      tpcalc validate --held-out --hardware a100-80g

    \b
      tpcalc validate --memory
    """

    def build():
        if memory:
            from tpcalc.reports.validate_memory import validate_memory_report

            return validate_memory_report()
        from tpcalc.errors import InputError
        from tpcalc.reports.validate_time import heldout_path, validate_report

        if held_out and runs is not None:
            raise InputError("--held-out and --runs name two runs files: give one")
        return validate_report(heldout_path() if held_out else runs, hardware)

    emit(build, fmt, units=units, explain=explain)
