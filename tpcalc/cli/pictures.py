"""Draw a command's pictures after its table: to stdout for the table format, to --save-svg."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpcalc.cli.common import input_errors
from tpcalc.render import Format


def draw(
    build: Callable[[int], list[Any]],
    fmt: Format,
    *,
    asked: bool,
    svg_path: Path | None,
    title: str,
) -> None:
    """Build the pictures at the output's width; print them when ``asked`` and the format is a
    table; save them when ``svg_path`` is given. A TpcalcError is one line on stderr, exit 1."""
    from tpcalc.pictures.show import emit_pictures, picture_width

    to_stdout = asked and fmt is Format.table
    if not to_stdout and svg_path is None:
        return
    width = picture_width(sys.stdout)
    with input_errors():
        pictures = build(width)
        emit_pictures(
            pictures, to_stdout=to_stdout, out=sys.stdout, svg_path=svg_path, title=title,
            width=width,
        )  # fmt: skip
