"""The Figure record, printed-precision formatters, and evaluation."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from msgspec import Struct

from tpcalc.render import fmt_number
from tpcalc.units import GB, MB, MS, TFLOP


class Figure(Struct, frozen=True):
    """One printed figure. ``compute`` returns a value; ``show`` renders it like the document."""

    id: str
    seed: str
    section: str
    meaning: str
    printed: str
    compute: Callable[[], Any] | None = None
    show: Callable[[Any], str] = str
    cited: str = ""  # for measurements: who measured it (never "computed")

    @property
    def is_cited(self) -> bool:
        return self.compute is None


class Evaluated(Struct, frozen=True):
    figure: Figure
    value: Any
    shown: str
    match: bool


def evaluate(fig: Figure) -> Evaluated:
    """Compute and render a figure; cited figures match by definition (they are not computed)."""
    if fig.compute is None:
        return Evaluated(fig, None, fig.printed, True)
    value = fig.compute()
    shown = fig.show(value)
    return Evaluated(fig, value, shown, shown == fig.printed)


# ---- formatters at the printed precision, through render's one number formatter ----
def fixed(x: float, decimals: int) -> str:
    """``x`` with ``decimals`` decimals and thousands separators (1,128.9): render's
    ``fmt_number`` at the significant digits that leave that many decimals at x's magnitude."""
    magnitude = math.floor(math.log10(abs(x))) if x else 0
    return fmt_number(float(x), digits=decimals + 1 + magnitude)


def gb(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{fixed(v / GB, decimals)} GB"


def mb(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{fixed(v / MB, decimals)} MB"


def ms(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{fixed(v / MS, decimals)} ms"


def sec(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{fixed(v, decimals)} s"


def pct(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{fixed(v * 100, decimals)}%"


def num(decimals: int = 0) -> Callable[[float], str]:
    return lambda v: fixed(v, decimals)


def tflop(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{fixed(v / TFLOP, decimals)} TFLOP"


def fraction(max_denominator: int = 10) -> Callable[[float], str]:
    return lambda v: str(Fraction(v).limit_denominator(max_denominator))


def shape(v: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(x) for x in v) + "]"
