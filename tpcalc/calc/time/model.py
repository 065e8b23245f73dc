"""The step-time model a command uses (kept apart so the CLI can name it without importing
the calculators)."""

from __future__ import annotations

from enum import Enum


class TimeModel(str, Enum):
    """How a layout's step is timed."""

    roofline = "roofline"  # per-operation roofline + overlap (tpcalc.calc.time.step)
    fixed = "fixed"  # the seeds' convention: the card's achieved FLOP/s, comm as layout.comm
