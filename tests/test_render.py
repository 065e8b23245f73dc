"""Rendering: display prefixes, scientific notation for residues, grids with marked cells."""

from __future__ import annotations

import io

from tpcalc.render import Format, fmt_number, fmt_quantity, pick_scale, render
from tpcalc.terms import Grid, Report, Row, Unit, term
from tpcalc.units import ByteUnits


def test_prefix_per_column():
    assert pick_scale([73.4e6, 18.79e9], Unit.bytes, ByteUnits.GB) == (1e9, "GB")
    assert pick_scale([2**31], Unit.bytes, ByteUnits.GiB) == (2**30, "GiB")
    assert pick_scale([0.1174], Unit.seconds, ByteUnits.GB) == (1e-3, "ms")


def test_numbers():
    assert fmt_number(18.79e9, 1e9) == "18.79"
    assert fmt_number(2.22e-16) == "2.220e-16"
    assert fmt_number(1234567) == "1,234,567"
    assert fmt_quantity(73.4e6, Unit.bytes) == "73.40 MB"


def _report() -> Report:
    row = Row(inputs={"t": 2}, terms=(term("x_bytes", "x", 1e9, Unit.bytes),))
    grid = Grid(title="Y", cells=((1.0, 2.0), (3.0, 4.0)), highlight=((1, 0),))
    return Report(title="r", rows=(row,), grids=(grid,))


def test_grid_marks_highlighted_cells_in_tables_only():
    out = io.StringIO()
    render(_report(), Format.table, out)
    text = out.getvalue()
    assert "3.000*" in text and "4.000*" not in text and "1.000*" not in text
    js = io.StringIO()
    render(_report(), Format.json, js)
    assert "3.0" not in js.getvalue()


def test_verify_table_marks_naive_cells_not_column_row(cli):
    r = cli("verify", "--cards", "2")
    naive = r.out.split("naive: output Y")[1].split("column-row: output Y")[0]
    column_row = r.out.split("column-row: output Y")[1].split("row-first-no-sync: output Y")[0]
    assert "*" in naive.split("\n", 1)[1]
    assert "*" not in column_row.split("\n", 1)[1]
