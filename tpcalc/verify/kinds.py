"""The bench's choices as enums, in a module without numpy (the CLI imports it at start-up)."""

from __future__ import annotations

from enum import Enum


class Activation(str, Enum):
    """The FFN's element-wise non-linearity f in Y = f(X·A)·B."""

    relu = "relu"
    gelu = "gelu"
    silu = "silu"


class Scheme(str, Enum):
    """How the FFN's two matrices are split over the cards (seed 000's bench, seed 003 §7.3.2)."""

    naive = "naive"
    column_row = "column-row"
    row_first_no_sync = "row-first-no-sync"
    row_first = "row-first"
    column_column = "column-column"


class Example(str, Enum):
    """Worked examples reproduced exactly."""

    seed003 = "seed003"  # seed 003 §7.3.2–7.3.3, two cards, integers
