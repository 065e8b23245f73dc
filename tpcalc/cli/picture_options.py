"""Options that ask for pictures (issue 12 §5), shared by memory, pipeline and layout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def writable_svg_path(path: Path | None) -> Path | None:
    """--save-svg checked before anything is priced, so a path that cannot be written is the
    only line on stderr and nothing reaches stdout: the file is opened for appending once (and
    removed again if this created it), and an existing file must be a regular file (a FIFO or a
    device would block or swallow the write)."""
    if path is None:
        return None
    where = "give a file in a writable directory, e.g. --save-svg layout.svg"
    try:
        existed = path.exists()
        if existed and not path.is_file():
            raise typer.BadParameter(f"{path} exists and is not a regular file; {where}")
        with path.open("a"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise typer.BadParameter(f"cannot write {path} ({why}); {where}") from None
    return path


BarsOpt = Annotated[
    bool,
    typer.Option(
        "--bars",
        help="Draw a stacked bar per rank (weights, gradients, optimizer, activations, buffers) "
        "against the card, the overflow in red. Table format only; see --save-svg.",
    ),
]
TimelineOpt = Annotated[
    bool,
    typer.Option(
        "--timeline",
        help="Draw the pipeline schedule: one row per stage, F/B/W blocks labelled with their "
        "micro-batch, idle cells dotted, to scale. Table format only; see --save-svg.",
    ),
]
MapOpt = Annotated[
    bool,
    typer.Option(
        "--map",
        help="Draw which GPUs form each TP/CP/EP/DP/PP group and the node each is on; a group "
        "that leaves its node is red with a '*'. Table format only; see --save-svg.",
    ),
]
SaveSvgOpt = Annotated[
    Path | None,
    typer.Option(
        "--save-svg",
        help="Write the pictures as SVG to this file (those asked for; with none asked for, all "
        "of this command's). Works with every --format; JSON and CSV never get pictures on "
        "stdout.",
        dir_okay=False,
        callback=writable_svg_path,
    ),
]
