"""The simulated outputs as grids: the single-card reference and each scheme, with the cells
that differ from it highlighted (red in a terminal, marked * when piped)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpcalc.terms import Grid
from tpcalc.verify.schemes import SENTENCE_TOKENS, SchemeRun, compare


def _cells(a: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in np.asarray(a))


def output_grids(ref: np.ndarray, runs: Sequence[SchemeRun], cards: int) -> tuple[Grid, ...]:
    """The 5 x hidden output of one card, then of every scheme on ``cards`` cards."""
    reference = Grid(title="1 card (reference): output Y", cells=_cells(ref),
                     row_labels=SENTENCE_TOKENS)  # fmt: skip
    return (reference,) + tuple(
        Grid(
            title=f"{run.scheme.value}: output Y on {cards} cards (red, *: differs from 1 card)",
            cells=_cells(run.output),
            highlight=compare(run.output, ref).cells,
            row_labels=SENTENCE_TOKENS,
        )
        for run in runs
    )
