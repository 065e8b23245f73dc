"""Options that ask for pictures (issue 12 §5), shared by memory, pipeline and layout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
    ),
]
