"""What every command does after parsing: build a report, print warnings, render, exit.

Only the CLI layer exits. Domain errors (``TpcalcError``) become one line on stderr and exit 1;
stdout then stays empty, so ``--format json`` output is valid JSON or nothing. Any other exception
is a bug and is left to ``tpcalc.cli.main`` (one "internal error" line, exit 3).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from tpcalc.errors import TpcalcError
from tpcalc.render import Format, render
from tpcalc.terms import Report
from tpcalc.units import ByteUnits


def error(message: str) -> None:
    """One line on stderr, whatever the message holds (the contract: one line per error)."""
    sys.stderr.write(f"Error: {' '.join(message.split())}\n")


@contextmanager
def input_errors() -> Iterator[None]:
    """Inside: a domain error (``TpcalcError``) becomes one line on stderr and exit 1, the
    CLI contract; anything else propagates (a bug, ``tpcalc.cli.main``'s to report)."""
    try:
        yield
    except TpcalcError as exc:
        error(str(exc))
        raise typer.Exit(1) from None


def warn(message: str) -> None:
    sys.stderr.write(f"Warning: {message}\n")


def emit(
    build: Callable[[], Report],
    fmt: Format,
    *,
    units: ByteUnits = ByteUnits.GB,
    explain: bool = False,
) -> Report:
    """Run ``build``; on success render to stdout and warnings to stderr; on error exit 1."""
    with input_errors():
        report = build()
    # Anything else is a bug, not the user's input: it reaches tpcalc.cli.main, which prints one
    # "internal error" line and exits 3 (design.md, "CLI contract"; issue 8 §5).
    overflowed = [
        t.key
        for row in report.rows
        for t in row.terms
        if isinstance(t.value, float) and not math.isfinite(t.value)
    ]
    if overflowed:
        error(f"the inputs are too large to compute {overflowed[0]} (result is not finite)")
        raise typer.Exit(1)
    for w in report.warnings:
        warn(w)
    render(report, fmt, sys.stdout, byte_units=units, explain=explain)
    return report
