"""The ZeRO stage enum on its own, so a layout (``calc.layout.groups.ParallelLayout``) and the
step model can name a stage without importing the ZeRO memory and communication model
(``calc.dp.zero``, which re-exports both names)."""

from __future__ import annotations

from enum import IntEnum

from tpcalc.errors import InputError


class ZeroStage(IntEnum):
    """What is partitioned over the data-parallel ranks (cumulative)."""

    none = 0  # plain data parallelism: every rank keeps everything
    optimizer = 1  # P_os
    gradients = 2  # P_os+g
    parameters = 3  # P_os+g+p


def zero_stage(value: int) -> ZeroStage:
    """The ZeroStage for 0..3, or an InputError naming the valid stages (ZeRO §5)."""
    try:
        return ZeroStage(value)
    except ValueError:
        raise InputError(f"ZeRO stage {value} does not exist; use 0, 1, 2 or 3") from None
