"""A pipeline timeline: one row per stage, a cell per slice of time, each F, B, W block labelled
with its micro-batch, idle cells left blank so the bubble shows.

The cells come from ``tpcalc.calc.pipeline.timeline.simulate``. When every event boundary is a
whole number of some quantum (equal or commensurate F, B, W, as in the seed's figures) and that
many cells fit the width, a cell is exactly one quantum and the idle cells are exactly the idle
time; otherwise a cell shows what runs at its midpoint and the idle-cell share is printed as
drawn, beside the simulated one.
"""

from __future__ import annotations

import textwrap
from fractions import Fraction

from msgspec import Struct

from tpcalc.calc.pipeline.timeline import Event, Kind, Timeline

STYLES = {
    Kind.forward: "bold white on blue",
    Kind.backward_input: "bold black on spring_green2",
    Kind.backward: "bold black on green",
    Kind.backward_weight: "bold black on yellow",
}
# Odd micro-batches a shade darker, so neighbouring blocks stay apart; odd chunks (interleaved)
# and DualPipe's reverse direction are underlined.
ALT_STYLES = {
    Kind.forward: "bold white on dark_blue",
    Kind.backward_input: "bold white on spring_green4",
    Kind.backward: "bold white on dark_green",
    Kind.backward_weight: "bold black on dark_orange",
}
IDLE = "·"
KIND_LETTER = {
    Kind.forward: "F",
    Kind.backward_input: "B",
    Kind.backward: "B",
    Kind.backward_weight: "W",
}
MAX_CELLS_PER_QUANTUM = 4
MAX_BANDS = 4  # a long exact timeline is cut into bands of the width, one under the other
QUANTUM_MAX_DENOMINATOR = 64  # F:B:W ratios with a denominator up to this count as commensurate
REL_TOL = 1e-9


class Cells(Struct, frozen=True):
    """The picture's grid: ``rows[stage][column]`` is the event drawn there, or None (idle)."""

    rows: tuple[tuple[Event | None, ...], ...]
    cell_s: float
    exact: bool  # every cell lies wholly inside one event or wholly idle

    @property
    def idle_share(self) -> float:
        cells = [c for row in self.rows for c in row]
        return sum(1 for c in cells if c is None) / len(cells)


def quantum_s(tl: Timeline) -> float | None:
    """The largest time every event start and end is a whole multiple of, or None."""
    durations = sorted({e.duration_s for e in tl.events if e.duration_s > 0})
    if not durations:
        return None
    base = durations[0]
    denominator = 1
    for d in (*durations, tl.makespan_s):
        ratio = Fraction(d / base).limit_denominator(QUANTUM_MAX_DENOMINATOR)
        if abs(float(ratio) * base - d) > REL_TOL * d:
            return None
        denominator = denominator * ratio.denominator // _gcd(denominator, ratio.denominator)
    q = base / denominator
    for e in tl.events:
        for t in (e.start_s, e.end_s):
            if abs(round(t / q) * q - t) > REL_TOL * tl.makespan_s:
                return None
    return q


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def timeline_cells(tl: Timeline, max_columns: int) -> Cells:
    """Cells of whole quanta (up to 4 cells each) when they fit in ``MAX_BANDS`` bands of
    ``max_columns``, else ``max_columns`` cells over the makespan, each showing the event at its
    midpoint."""
    q = quantum_s(tl)
    if q is not None:
        quanta = round(tl.makespan_s / q)
        if quanta <= max_columns * MAX_BANDS:
            per = max(1, min(MAX_CELLS_PER_QUANTUM, max_columns // quanta))
            return _grid(tl, quanta * per, q / per, exact=True)
    return _grid(tl, max_columns, tl.makespan_s / max_columns, exact=False)


def _grid(tl: Timeline, columns: int, cell_s: float, *, exact: bool) -> Cells:
    rows = []
    for stage in range(tl.p):
        row: list[Event | None] = [None] * columns
        for e in tl.stage_events(stage):
            first = round(e.start_s / cell_s)
            last = round(e.end_s / cell_s)
            for c in range(max(0, first), min(columns, last)):
                row[c] = e
        rows.append(tuple(row))
    return Cells(tuple(rows), cell_s, exact)


def _row_text(row: tuple[Event | None, ...], stage: int, label_w: int):
    from rich.text import Text

    line = Text(f"{f'stage {stage}':<{label_w}}")
    c = 0
    while c < len(row):
        e = row[c]
        if e is None:
            line.append(IDLE, style="dim")
            c += 1
            continue
        n = 1
        while c + n < len(row) and row[c + n] is e:
            n += 1
        label = str(e.microbatch)
        if len(label) > n:  # too narrow for the micro-batch: say at least what it is
            label = KIND_LETTER[e.kind][:n]
        text = label.center(n)
        style = (ALT_STYLES if e.microbatch % 2 else STYLES)[e.kind]
        style += " underline" if e.chunk % 2 else ""
        line.append(text, style=style)
        c += n
    return line


def render_timeline(tl: Timeline, title: str, notes: list[str], width: int):
    """A rich renderable: title, one labelled row per stage, a time axis, legend and notes."""
    from rich.console import Group
    from rich.text import Text

    from tpcalc.render import fmt_quantity
    from tpcalc.terms import Unit

    label_w = len(f"stage {tl.p - 1}") + 1
    columns = max(10, width - label_w - 1)
    cells = timeline_cells(tl, columns)
    lines = [Text(title, style="bold")]
    total = len(cells.rows[0])
    for band_start in range(0, total, columns):
        if band_start:
            at = fmt_quantity(band_start * cells.cell_s, Unit.seconds)
            lines.append(Text(" " * label_w + f"… from {at}", style="dim"))
        for stage, row in enumerate(cells.rows):
            lines.append(_row_text(row[band_start : band_start + columns], stage, label_w))
    span = fmt_quantity(tl.makespan_s, Unit.seconds)
    cell = fmt_quantity(cells.cell_s, Unit.seconds)
    axis = Text(" " * label_w + f"0 … {span}: one cell = {cell}" + ("" if cells.exact else
                " (rounded: cells show what runs at their midpoint)"), style="dim")  # fmt: skip
    lines.append(axis)
    legend = Text(" " * label_w)
    kinds = {e.kind for e in tl.events}
    names = {
        Kind.forward: "F forward",
        Kind.backward: "B backward (input + weight grads)",
        Kind.backward_input: "B input grads",
        Kind.backward_weight: "W weight grads",
    }
    for k in (Kind.forward, Kind.backward, Kind.backward_input, Kind.backward_weight):
        if k in kinds:
            legend.append("  ", style=STYLES[k])
            legend.append(f" {names[k]}  ")
    legend.append(f"{IDLE} idle", style="dim")
    if len({e.chunk for e in tl.events}) > 1:
        legend.append(
            "  (underlined: " + ("reverse direction" if tl.v == 1 else "odd chunks") + ")"
        )
    lines.append(legend)
    lines.append(Text(" " * label_w + f"idle cells {cells.idle_share:.1%}"))
    for note in notes:  # long notes wrap under themselves, not under the stage labels
        for part in textwrap.wrap(note, max(20, width - label_w)):
            lines.append(Text(" " * label_w + part))
    return Group(*lines)
