"""Rendering: display prefixes, scientific notation for residues, grids with marked cells."""

from __future__ import annotations

import csv
import io
import json
import re

from tpcalc.render import Format, fmt_number, fmt_quantity, pick_scale, render, whole
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


def _counts_report() -> Report:
    # 2(t-1)/t · M for t = 8, M = 134,217,728 bytes (seed 003 §7.3.5): 234,881,024 bytes, reached
    # through float arithmetic; for t = 3 the same formula has a fraction.
    m = 134_217_728
    rows = tuple(
        Row(
            inputs={"t": t, "sp": t == 8},
            terms=(
                term("send_bytes", "sent", 2 * (t - 1) / t * m, Unit.bytes),
                term("time_s", "time", 2.0, Unit.seconds),
                term("flop", "FLOPs", 6.0e12, Unit.flop),
                term("fits", "fits", t == 8, Unit.text),
            ),
        )
        for t in (8, 3)
    )
    return Report(title="r", rows=rows)


def test_json_writes_integral_counts_as_integers_and_keeps_fractions_and_times_float():
    out = io.StringIO()
    render(_counts_report(), Format.json, out)
    t8, t3 = json.loads(out.getvalue())
    assert t8["send_bytes"] == 234_881_024 and isinstance(t8["send_bytes"], int)
    assert isinstance(t8["flop"], int) and t8["flop"] == 6 * 10**12
    assert isinstance(t8["time_s"], float)  # seconds stay floats even when integral
    assert isinstance(t3["send_bytes"], float)  # 4/3 · M has a fraction
    assert '"send_bytes": 234881024,' in out.getvalue()


def test_csv_writes_integers_without_a_decimal_point_and_booleans_as_true_false():
    out = io.StringIO()
    render(_counts_report(), Format.csv, out)
    header, t8, t3 = list(csv.reader(io.StringIO(out.getvalue())))
    row = dict(zip(header, t8, strict=True))
    assert row["send_bytes"] == "234881024" and row["flop"] == "6000000000000"
    assert row["sp"] == "true" and row["fits"] == "true"
    assert dict(zip(header, t3, strict=True))["sp"] == "false"
    assert row["time_s"] == "2.0"


def test_whole_leaves_huge_and_fractional_values_alone():
    assert whole(2.0**53, Unit.bytes) == 2.0**53  # beyond exact float integers: not converted
    assert whole(1.5, Unit.bytes) == 1.5
    assert whole(3.0, Unit.ratio) == 3.0 and isinstance(whole(3.0, Unit.ratio), float)


def test_integers_beyond_float_range_format_without_overflow():
    # issue 12: `tpcalc verify --seed 999...9` (300 digits) raised OverflowError in fmt_number.
    big = 10**400  # beyond the largest float, about 1.8e308
    assert fmt_number(big) == f"{big:,}"
    assert fmt_number(big, 1e9) == "1.000E+391"
    assert pick_scale([big], Unit.bytes, ByteUnits.GB) == (1e12, "TB")


def test_a_short_name_is_never_broken_in_a_piped_table(cli):
    """The operations table is wider than a pipe's 160 columns (render.PIPED_WIDTH): its long
    headers wrap, but every op name stays on one line (render.NO_WRAP_CHARS)."""
    args = ("layout", "-m", "llama3-8b", "--tp", "2", "--dp", "4", "--ops")
    names = {row["op"] for row in json.loads(cli(*args, "-f", "json").out)}
    assert "attn_residual" in names and max(map(len, names)) > 8
    cells = {c.strip() for line in cli(*args).out.splitlines() for c in line.split("│")[1:2]}
    assert names <= cells, names - cells


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal (rich takes its width from COLUMNS)."""

    def isatty(self) -> bool:
        return True


def _wide_report() -> Report:
    """Sixteen ops, fourteen measured columns (more rows than columns: not transposed), wider
    than an 80-column terminal."""
    rows = tuple(
        Row(
            inputs={"op": name, "pass": "F"},
            terms=tuple(
                term(f"q{j}_s", f"quantity number {j}", 1.25 * (j + 1) * (i + 1), Unit.seconds)
                for j in range(14)
            ),
        )
        for i, name in enumerate(("attn_residual", *(f"op_{i}" for i in range(15))))
    )
    return Report(title="ops", rows=rows)


def test_a_table_too_wide_for_the_terminal_is_printed_in_parts_that_fit(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = _Terminal()
    render(_wide_report(), Format.table, out)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # a terminal gets colour codes
    lines = text.splitlines()
    assert max(len(x) for x in lines) <= 80
    parts = [x for x in lines if "(part " in x]
    assert len(parts) >= 2 and "ops (part 1 of" in parts[0]
    # every part names its rows: each op appears once per part, unbroken
    assert text.count("attn_residual") == len(parts)
    # every column is printed once, its header words whole (not crushed to a letter or two)
    assert text.count("quantity") == text.count("number") == 14


def test_a_table_that_fits_or_is_piped_is_one_table(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    wide = _Terminal()
    render(_wide_report(), Format.table, wide)
    assert "(part " not in wide.getvalue()
    monkeypatch.setenv("COLUMNS", "80")
    piped = io.StringIO()  # a pipe or file: one table at the piped width (PIPED_WIDTH)
    render(_wide_report(), Format.table, piped)
    assert "(part " not in piped.getvalue()


def test_a_wrapping_text_column_gives_way_before_the_table_is_split(monkeypatch):
    # a planner-like table: a long layout text (wraps at spaces) and six numbers fit 80 columns
    # as one table, the layout wrapped and every number whole
    monkeypatch.setenv("COLUMNS", "80")
    rows = tuple(
        Row(
            inputs={
                "rank": i + 1,
                "layout": f"TP{i + 1} CP1 PP2 DP32 mbs1 m8 ZeRO-2 selective+layernorm dualpipe",
            },
            terms=tuple(term(f"t{j}_s", f"time {j}", 2.989 + j, Unit.seconds) for j in range(6)),
        )  # fmt: skip
        for i in range(8)
    )
    out = _Terminal()
    render(Report(title="plan", rows=rows), Format.table, out)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    assert "(part " not in text and max(len(x) for x in text.splitlines()) <= 80
    assert "selective+layernorm" in text and all(f"{2.989 + j:.3f}" in text for j in range(6))


def test_parts_repeat_only_the_naming_columns_that_fit_in_half_the_terminal(monkeypatch):
    # four 20-character naming inputs would take the whole 80 columns: only the first repeats
    monkeypatch.setenv("COLUMNS", "80")
    rows = tuple(
        Row(
            inputs={name: f"{name}-{i}".ljust(20, "x") for name in ("id", "model", "card", "kind")},
            terms=tuple(term(f"t{j}_s", f"time {j}", 1.5 + j, Unit.seconds) for j in range(12)),
        )
        for i in range(16)
    )
    out = _Terminal()
    render(Report(title="runs", rows=rows), Format.table, out)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    parts = text.count("(part ")
    assert parts >= 2 and max(len(x) for x in text.splitlines()) <= 80
    assert text.count("id-15") == parts and text.count("kind-15") == 1
