"""The explain layer: label, unit, formula text and source for each field of a typed result.

Calculators return frozen records (``msgspec.Struct``) in base units and never carry
presentation. Beside each calculator module sits a table ``{field name: Explanation}`` (e.g.
``calc/time/explain.py`` beside ``calc/time/step.py``), so a formula and its text are reviewed
together. ``terms`` turns a result and its table into the ``Term`` rows ``tpcalc.render``
prints (table, JSON, CSV, --explain); ``unexplained`` lets a test check that every field has
its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from msgspec import Struct
from msgspec.structs import fields

from tpcalc.terms import Scalar, Term, Unit


class Explanation(Struct, frozen=True):
    """How one result field is shown and justified."""

    label: str
    unit: Unit
    formula: str
    source: str
    part_of: str | None = None


# The card's fixed achieved rate (the seeds' convention, ``achieved_flop_per_s`` in a hardware
# config), as every compute-time table that reads it shows it.
ACHIEVED_FLOP_PER_S = Explanation(
    "achieved", Unit.flop_per_s, "hardware config", "the card's achieved_flop_per_s"
)


def terms(
    result: object,
    explanations: Mapping[str, Explanation],
    *,
    symbols: Mapping[str, Mapping[str, Scalar]] | None = None,
    key_prefix: str = "",
) -> tuple[Term, ...]:
    """One Term per explained field of ``result``, in the table's order.

    ``symbols`` gives, per field, the numbers substituted into its formula (shown by
    --explain); ``key_prefix`` namespaces the JSON keys when one row holds several results.
    """
    symbols = symbols or {}
    out = []
    for name, ex in explanations.items():
        value = getattr(result, name)
        if isinstance(value, Enum):  # a choice (e.g. the link a group crosses) shows its value
            value = value.value
        part_of = f"{key_prefix}{ex.part_of}" if ex.part_of else None
        out.append(
            Term(
                key=f"{key_prefix}{name}",
                label=ex.label,
                value=value,
                unit=ex.unit,
                formula=ex.formula,
                source=ex.source,
                inputs=dict(symbols.get(name, {})),
                part_of=part_of,
            )
        )
    return tuple(out)


def unexplained(result_type: type, explanations: Mapping[str, Explanation]) -> list[str]:
    """Scalar fields of the record ``result_type`` (a ``msgspec.Struct``) without an explanation."""
    if not (isinstance(result_type, type) and issubclass(result_type, Struct)):
        raise TypeError(f"{result_type!r} is not a record (msgspec.Struct)")
    scalar = (int, float, str, bool)
    return [
        f.name
        for f in fields(result_type)
        if f.type in {t.__name__ for t in scalar} or f.type in scalar
        if f.name not in explanations
    ]
