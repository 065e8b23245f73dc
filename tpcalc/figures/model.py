"""The Figure record, printed-precision formatters, and evaluation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from tpcalc.units import GB, MB, MS, TFLOP


@dataclass(frozen=True)
class Figure:
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


@dataclass(frozen=True)
class Evaluated:
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


# ---- formatters at the printed precision ----
def gb(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{v / GB:,.{decimals}f} GB"


def mb(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{v / MB:,.{decimals}f} MB"


def ms(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{v / MS:,.{decimals}f} ms"


def sec(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{v:,.{decimals}f} s"


def pct(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{v * 100:.{decimals}f}%"


def num(decimals: int = 0) -> Callable[[float], str]:
    return lambda v: f"{v:,.{decimals}f}"


def tflop(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{v / TFLOP:,.{decimals}f} TFLOP"


def fraction(max_denominator: int = 10) -> Callable[[float], str]:
    return lambda v: str(Fraction(v).limit_denominator(max_denominator))


def shape(v: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(x) for x in v) + "]"
