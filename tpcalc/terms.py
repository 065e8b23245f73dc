"""The result model every calculator returns: named terms in base units, traceable to a source.

A ``Term`` is one number with its unit, the formula that produced it, the source of that formula
and the values substituted into it. A ``Row`` is one line of a report (one t, one seq, ...): the
inputs it echoes plus its terms. Calculators build terms; only ``tpcalc.render`` formats them.

Breakdowns: a term whose ``part_of`` names another term's key is one of the parts that add up to
that total; ``Row.check_breakdowns`` (and a property test) verify that they do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from typing import Any

from msgspec import Struct, field

Scalar = int | float | str | bool | None


class Unit(str, Enum):
    """The base unit of a term. The renderer picks the display prefix; the JSON keeps the base."""

    bytes = "bytes"
    seconds = "s"
    flop = "FLOP"
    flop_per_s = "FLOP/s"
    bytes_per_s = "bytes/s"
    count = "count"  # type: ignore[assignment]  # shadows str.count; the member is the unit
    ratio = "ratio"  # a share, shown as a percentage (NVLink time / compute = 15%)
    times = "times"  # a multiple, shown as 3.4× (all-gather bytes / all-reduce bytes)
    params = "params"
    text = "text"


def _number(value: Scalar) -> float:
    """A term's value as a number (breakdowns only add numeric terms)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


class Term(Struct, frozen=True, kw_only=True):
    """One named result: ``key`` carries the unit suffix (``send_bytes_per_rank``, ``time_s``)."""

    key: str
    label: str
    value: Scalar
    unit: Unit
    formula: str = ""
    source: str = ""
    inputs: dict[str, Scalar] = field(default_factory=dict)
    part_of: str | None = None

    @property
    def number(self) -> float:
        """The value as a number; a TypeError for text and booleans."""
        return _number(self.value)


def term(
    key: str,
    label: str,
    value: Scalar,
    unit: Unit,
    *,
    formula: str = "",
    source: str = "",
    part_of: str | None = None,
    symbols: Mapping[str, Scalar] | None = None,
    **inputs: Scalar,
) -> Term:
    """Build a Term; keyword arguments beyond the named ones, and ``symbols``, are the numbers
    substituted into the formula."""
    return Term(
        key=key,
        label=label,
        value=value,
        unit=unit,
        formula=formula,
        source=source,
        inputs={**(symbols or {}), **inputs},
        part_of=part_of,
    )


class Row(Struct, frozen=True, kw_only=True):
    """One report line: the inputs it was computed from, then its terms, in display order."""

    inputs: dict[str, Scalar]
    terms: tuple[Term, ...]

    def get(self, key: str) -> Term:
        for t in self.terms:
            if t.key == key:
                return t
        raise KeyError(f"no term {key!r} in row; have {[t.key for t in self.terms]}")

    def value(self, key: str) -> Any:
        return self.get(key).value

    def flat(self) -> dict[str, Scalar]:
        """Inputs then term values, one flat mapping (the JSON/CSV contract)."""
        out: dict[str, Scalar] = dict(self.inputs)
        out.update({t.key: t.value for t in self.terms})
        return out

    def check_breakdowns(self, rel_tol: float = 1e-9) -> list[str]:
        """Return a message for every total whose parts do not add up to it (empty when fine)."""
        problems = []
        for total in self.terms:
            parts = [t.value for t in self.terms if t.part_of == total.key]
            if not parts:
                continue
            s = sum(_number(p) for p in parts)
            if not math.isclose(s, _number(total.value), rel_tol=rel_tol, abs_tol=1e-9):
                problems.append(f"{total.key}: parts sum to {s}, total is {total.value}")
        return problems


class Grid(Struct, frozen=True, kw_only=True):
    """A small matrix shown under a table (e.g. a simulated output), some cells highlighted.

    Tables print it with the highlighted cells in red; JSON/CSV leave it out (the rows carry
    the same facts as values).
    """

    title: str
    cells: tuple[tuple[float, ...], ...]
    highlight: tuple[tuple[int, int], ...] = ()
    row_labels: tuple[str, ...] = ()


class Report(Struct, frozen=True, kw_only=True):
    """What a command prints: a title, rows, and warnings that go to stderr."""

    title: str
    rows: tuple[Row, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    grids: tuple[Grid, ...] = ()
