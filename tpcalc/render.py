"""Render a Report as a rich table, JSON or CSV: the only module that formats numbers.

JSON and CSV carry raw base-unit values under unit-suffixed keys (one flat object per row,
inputs echoed). Tables choose a display prefix per column (GB or GiB, ms or s, TFLOP ...).
``--explain`` adds, for every term, its formula, its source and the numbers substituted in.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Sequence
from enum import Enum
from typing import Any, TextIO

from tpcalc.terms import Grid, Report, Row, Scalar, Term, Unit
from tpcalc.units import GB, MB, PFLOP, TB, TFLOP, ByteUnits, GiB, KiB, MiB, TiB


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


_DECIMAL_BYTES = ((TB, "TB"), (GB, "GB"), (MB, "MB"), (1, "B"))
_BINARY_BYTES = ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB"), (1, "B"))
_SECONDS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"))
_FLOP = ((PFLOP, "PFLOP"), (TFLOP, "TFLOP"), (10**9, "GFLOP"), (1, "FLOP"))
_FLOPS = ((PFLOP, "PFLOP/s"), (TFLOP, "TFLOP/s"), (10**9, "GFLOP/s"), (1, "FLOP/s"))
_PARAMS = ((10**9, "B params"), (10**6, "M params"), (1, "params"))


def _scales(unit: Unit, byte_units: ByteUnits) -> tuple[tuple[float, str], ...] | None:
    binary = byte_units is ByteUnits.GiB
    if unit is Unit.bytes:
        return _BINARY_BYTES if binary else _DECIMAL_BYTES
    if unit is Unit.bytes_per_s:
        table = _BINARY_BYTES if binary else _DECIMAL_BYTES
        return tuple((f, f"{name}/s") for f, name in table)
    return {
        Unit.seconds: _SECONDS,
        Unit.flop: _FLOP,
        Unit.flop_per_s: _FLOPS,
        Unit.params: _PARAMS,
    }.get(unit)


def _magnitude(value: int | float) -> float:
    """|value| as a float; an integer too large for a float is infinitely large for display."""
    try:
        return abs(float(value))
    except OverflowError:
        return math.inf


def pick_scale(values: Sequence[Scalar], unit: Unit, byte_units: ByteUnits) -> tuple[float, str]:
    """The largest prefix in which the column's largest magnitude is at least 1."""
    scales = _scales(unit, byte_units)
    if scales is None:
        return 1.0, {Unit.ratio: "", Unit.count: "", Unit.text: "", Unit.times: "×"}.get(
            unit, unit.value
        )
    nums = [_magnitude(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    biggest = max(nums, default=0.0)
    for factor, name in scales:
        if biggest >= factor:
            return factor, name
    return scales[-1]


def fmt_number(value: Scalar, factor: float = 1.0, digits: int = 4) -> str:
    """A number at ``digits`` significant digits, with thousands separators for big integers."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int) and factor == 1:
        return f"{value:,}"
    try:
        x = value / factor
    except OverflowError:  # an integer beyond float range (a 300-digit --seed): exact decimal
        from decimal import Decimal

        return f"{Decimal(value) / Decimal(factor):.{digits - 1}E}"
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if abs(x) < 1e-3:  # rounding residues (1e-16) and the like: scientific, not 20 zeros
        return f"{x:.{digits - 1}e}"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{x:,.{decimals}f}"


def fmt_quantity(value: Scalar, unit: Unit, byte_units: ByteUnits = ByteUnits.GB) -> str:
    """A single value with its own best prefix, e.g. '73.40 MB'."""
    if unit is Unit.ratio and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{fmt_number(value)} ({value:.1%})"
    factor, name = pick_scale([value], unit, byte_units)
    text = fmt_number(value, factor)
    return f"{text} {name}".rstrip()


def _varying_inputs(rows: Sequence[Row]) -> tuple[list[str], dict[str, Scalar]]:
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row.inputs if k not in keys)
    varying = [k for k in keys if len({repr(r.inputs.get(k)) for r in rows}) > 1]
    constant = {k: rows[0].inputs.get(k) for k in keys if k not in varying}
    return varying, constant


def _term_columns(rows: Sequence[Row]) -> list[Term]:
    seen: dict[str, Term] = {}
    for row in rows:
        for t in row.terms:
            seen.setdefault(t.key, t)
    return list(seen.values())


def _cell(t: Term | None, factor: float) -> str:
    if t is None:
        return "—"
    if t.unit is Unit.ratio and isinstance(t.value, float) and abs(t.value) < 100:
        return f"{t.value:.1%}"
    return fmt_number(t.value, factor)


NO_WRAP_CHARS = 24  # text inputs at most this long are kept on one line in a table
PIPED_WIDTH = 160  # columns of a table written to a pipe or file, unless COLUMNS says otherwise


def _console(out: TextIO):
    from rich.console import Console

    # Piped output has no terminal width; do not crush columns to 80 characters. A wider
    # COLUMNS the user exported (COLUMNS=250 tpcalc validate | less -S) widens it; a narrower
    # one (test runners and IDEs export 80) does not narrow it.
    if out.isatty():
        return Console(file=out, soft_wrap=True)
    asked = os.environ.get("COLUMNS", "")
    width = max(PIPED_WIDTH, int(asked)) if asked.isdigit() else PIPED_WIDTH
    return Console(file=out, soft_wrap=True, width=width)


def render_table(report: Report, byte_units: ByteUnits, out: TextIO, explain: bool) -> None:
    """A rich table. Sweeps with more terms than rows are transposed: one line per term, one
    column per row of the sweep (t=1, t=2, ...), so 20 terms stay readable. On a terminal too
    narrow for every column, the table is printed in parts that fit, each repeating the key
    columns (``_parts``), instead of crushing every column to a letter or two."""
    console = _console(out)
    rows = report.rows
    varying, constant = _varying_inputs(rows)
    caption = "  ".join(f"{k}={fmt_number(v)}" for k, v in constant.items())
    columns = _term_columns(rows)
    scales = {}
    for col in columns:
        values = [r.value(col.key) for r in rows if any(t.key == col.key for t in r.terms)]
        scales[col.key] = pick_scale(values, col.unit, byte_units)
    heads: list[tuple[str, dict[str, Any]]] = []
    body: list[list[str]] = []
    if len(columns) > len(rows) + len(varying):
        heads += [("quantity", {"justify": "left", "overflow": "fold"})]
        heads += [("unit", {"justify": "left"})]
        for row in rows:
            name = ", ".join(f"{k}={fmt_number(row.inputs.get(k))}" for k in varying)
            heads.append((name or "value", {"justify": "right", "overflow": "fold"}))
        for col in columns:
            factor, unit_name = scales[col.key]
            cells = [
                _cell(next((t for t in r.terms if t.key == col.key), None), factor) for r in rows
            ]
            body.append([col.label, unit_name, *cells])
        keys = 2
    else:
        for key in varying:
            text = all(isinstance(r.inputs.get(key), str) for r in rows)
            # a short name (an op, a card) is never broken: other columns give way first
            whole = text and max(len(str(r.inputs.get(key))) for r in rows) <= NO_WRAP_CHARS
            heads.append(
                (
                    key,
                    {"justify": "left" if text else "right", "overflow": "fold", "no_wrap": whole},
                )
            )
        for col in columns:
            name = scales[col.key][1]
            header = f"{col.label} ({name})" if name else col.label
            heads.append(
                (
                    header,
                    {"justify": "left" if col.unit is Unit.text else "right", "overflow": "fold"},
                )
            )
        for row in rows:
            present = {t.key: t for t in row.terms}
            cells = [fmt_number(row.inputs.get(k)) for k in varying]
            cells += [_cell(present.get(col.key), scales[col.key][0]) for col in columns]
            body.append(cells)
        keys = len(varying)
    room = console.width if out.isatty() else None
    parts = _parts(heads, body, keys, room)
    for i, part in enumerate(parts):
        title = report.title if i == 0 else None
        if len(parts) > 1:
            label = f"part {i + 1} of {len(parts)}"
            title = f"{report.title} ({label})" if title else f"({label})"
        last = i == len(parts) - 1
        table = _table(heads, body, part, title, caption if last else None, room)
        # a terminal's table keeps to its width (soft wrap would let it run past it)
        console.print(table, soft_wrap=False if room is not None else None)
    for grid in report.grids:
        console.print(render_grid(grid))
    for note in report.notes:
        console.print(note, markup=False, highlight=False)
    if explain:
        console.print(explain_text(report, byte_units), markup=False, highlight=False)


TABLE_EDGE_CHARS = 1  # a rich table's right border
CELL_EDGE_CHARS = 3  # each column's left border and one space of padding either side
KEYS_SHARE_DIVISOR = 2  # the repeated naming columns of a part take at most 1/2 of its width


def _least_width(head: str, style: dict[str, Any], cells: Sequence[str]) -> int:
    """The narrowest a column may be without breaking a word: the longest word of its header
    and cells (text wraps at spaces; a number is one word), or its widest cell where it must
    not wrap (``no_wrap``: a short name)."""
    words = list(cells) if style.get("no_wrap") else [w for c in cells for w in c.split()]
    return max([len(w) for w in words] + [len(w) for w in head.split()] + [1])


def _parts(
    heads: Sequence[tuple[str, dict[str, Any]]], body: Sequence[Sequence[str]], keys: int,
    room: int | None,
) -> list[list[int]]:  # fmt: skip
    """The columns of each table to print: all of them in one, unless ``room`` (a terminal's
    width) cannot hold them at their least widths (``_least_width``); then the first ``keys``
    columns (what names a row; no more than fit in half the room, the first always) in every
    part, and the others packed in order into parts that fit (a column wider than a part's
    room is printed alone with the keys)."""
    every = list(range(len(heads)))
    if room is None:
        return [every]
    width = [
        _least_width(h, style, [r[j] for r in body]) + CELL_EDGE_CHARS
        for j, (h, style) in enumerate(heads)
    ]
    if sum(width) + TABLE_EDGE_CHARS <= room:
        return [every]
    # repeat only as many of the naming columns as take at most half the room
    while keys > 1 and (sum(width[:keys]) + TABLE_EDGE_CHARS) * KEYS_SHARE_DIVISOR > room:
        keys -= 1
    base = sum(width[:keys]) + TABLE_EDGE_CHARS
    parts: list[list[int]] = []
    for j in every[keys:]:
        if parts and base + sum(width[c] for c in parts[-1][keys:]) + width[j] <= room:
            parts[-1].append(j)
        else:
            parts.append([*every[:keys], j])
    return parts or [every]


def _table(
    heads: Sequence[tuple[str, dict[str, Any]]], body: Sequence[Sequence[str]],
    part: Sequence[int], title: str | None, caption: str | None, room: int | None,
):  # fmt: skip
    """One table of the columns ``part``. On a terminal of ``room`` columns too narrow for
    the table as it comes, every column of single words (numbers, names) is set to its least
    width (``_least_width``), so only the columns whose text wraps at spaces give way."""
    from rich.table import Table

    cols = {j: [r[j] for r in body] for j in part}
    natural = sum(max([len(c) for c in cols[j]] + [len(heads[j][0])]) for j in part)
    tight = room is not None and natural + CELL_EDGE_CHARS * len(part) + TABLE_EDGE_CHARS > room
    table = Table(title=title, caption=caption or None, caption_justify="left")
    for j in part:
        name, style = heads[j]
        words = tight and not any(" " in c for c in cols[j])
        width = _least_width(name, style, cols[j]) if words else None
        table.add_column(name, width=width, **style)
    for row in body:
        table.add_row(*(row[j] for j in part))
    return table


def render_grid(grid: Grid):
    """A matrix as a rich table; highlighted cells in bold red with a * (for piped output)."""
    from rich.table import Table
    from rich.text import Text

    width = max((len(r) for r in grid.cells), default=0)
    table = Table(title=grid.title, show_header=True, title_justify="left")
    table.add_column("")
    for j in range(width):
        table.add_column(str(j), justify="right")
    marked = set(grid.highlight)
    for i, row in enumerate(grid.cells):
        label = grid.row_labels[i] if i < len(grid.row_labels) else str(i)
        cells = [
            Text(f"{fmt_number(v)}*", style="bold red") if (i, j) in marked else Text(fmt_number(v))
            for j, v in enumerate(row)
        ]
        table.add_row(label, *cells)
    return table


def explain_text(report: Report, byte_units: ByteUnits = ByteUnits.GB) -> str:
    """For each row and term: formula, source, the inputs substituted, the result."""
    lines: list[str] = []
    for row in report.rows:
        head = ", ".join(f"{k}={fmt_number(v)}" for k, v in row.inputs.items())
        lines.append(f"\n[{head}]")
        for t in row.terms:
            if not t.formula:
                continue
            lines.append(f"  {t.key} = {t.formula}")
            if t.inputs:
                subs = ", ".join(f"{k}={fmt_number(v)}" for k, v in t.inputs.items())
                lines.append(f"      with {subs}")
            lines.append(f"      = {fmt_quantity(t.value, t.unit, byte_units)}")
            if t.source:
                lines.append(f"      source: {t.source}")
    return "\n".join(lines)


# Units whose quantities are whole numbers: a byte count, a FLOP count, a parameter count, a
# count. The calculators reach some of them through float arithmetic (2(t-1)/t·M for a ring
# all-reduce, a float bandwidth factor), so 234,881,024 bytes arrives as 234881024.0. JSON and
# CSV write such a value as an integer when it is integral and exactly representable (below
# 2**53); a value with a fraction (t = 3: 2/3·M) stays a float. Times, rates and ratios stay
# floats. Decided here, at the output edge, because the float comes from several calculators'
# arithmetic (README "Output formats").
_WHOLE_UNITS = frozenset({Unit.bytes, Unit.flop, Unit.params, Unit.count})
_EXACT_FLOAT_INT = 2**53


def whole(value: Scalar, unit: Unit) -> Scalar:
    """``value`` as an int when its unit counts whole things and it is an exact integral float."""
    if (
        unit in _WHOLE_UNITS
        and isinstance(value, float)
        and value.is_integer()
        and abs(value) < _EXACT_FLOAT_INT
    ):
        return int(value)
    return value


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _row_record(row: Row) -> dict[str, Scalar]:
    rec: dict[str, Scalar] = dict(row.inputs)
    rec.update({t.key: whole(t.value, t.unit) for t in row.terms})
    return rec


def report_records(report: Report, explain: bool = False) -> list[dict[str, Any]]:
    """One flat record per row (inputs, then term values in base units): the JSON/CSV contract."""
    records = []
    for row in report.rows:
        rec = {k: _json_safe(v) for k, v in _row_record(row).items()}
        if explain:
            rec["explain"] = {
                t.key: {"formula": t.formula, "source": t.source, "inputs": t.inputs}
                for t in row.terms
                if t.formula
            }
        records.append(rec)
    return records


def render_json(report: Report, out: TextIO, explain: bool) -> None:
    json.dump(report_records(report, explain), out, indent=2, allow_nan=False)
    out.write("\n")


def _csv_cell(value: Any) -> Any:
    """Spreadsheet conventions: true/false for booleans, an empty cell for no value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def render_csv(report: Report, out: TextIO) -> None:
    records = [{k: _csv_cell(v) for k, v in rec.items()} for rec in report_records(report)]
    fields: list[str] = []
    for rec in records:
        fields.extend(k for k in rec if k not in fields)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    out.write(buf.getvalue())


def render(
    report: Report,
    fmt: Format,
    out: TextIO,
    *,
    byte_units: ByteUnits = ByteUnits.GB,
    explain: bool = False,
) -> None:
    """Write ``report`` to ``out`` in ``fmt``. Warnings are the caller's (they go to stderr)."""
    if fmt is Format.json:
        render_json(report, out, explain)
    elif fmt is Format.csv:
        render_csv(report, out)
    else:
        render_table(report, byte_units, out, explain)
