"""Stacked memory bars: one bar per rank, weights / gradients / optimizer / activations / buffers
against the card, the part beyond the card marked.

The segments are read from what the calculators return (``memory`` report rows; for a layout,
``tpcalc.calc.layout.memory.rank_memory`` split into its three model-state parts with ZeRO's
divisors), so they add up to the total the table prints.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.terms import Report, Row
from tpcalc.units import ByteUnits

# (segment, key in a memory report row); logits are the buffer the loss keeps (seed 003 §7.3.4).
MEMORY_SEGMENTS = (
    ("weights", "weights_bytes"),
    ("gradients", "grads_bytes"),
    ("optimizer", "optimizer_bytes"),
    ("activations", "activation_bytes_per_rank"),
    ("buffers", "logits_fp32_bytes_per_rank"),
)
STYLES = {
    "weights": "blue",
    "gradients": "magenta",
    "optimizer": "yellow",
    "activations": "green",
    "buffers": "cyan",
}
FULL, FREE, OVER = "█", "░", "▒"


class MemoryBar(Struct, frozen=True):
    """One rank's memory, bytes per segment in display order, and the card it must fit."""

    label: str
    segments: tuple[tuple[str, float], ...]
    total_bytes: float
    card_bytes: float

    @property
    def overflow(self) -> bool:
        return self.total_bytes > self.card_bytes

    @property
    def segment_sum_bytes(self) -> float:
        return sum(b for _, b in self.segments)


def memory_bars(report: Report) -> tuple[MemoryBar, ...]:
    """One bar per row of a ``tpcalc memory`` report (one per t)."""
    return tuple(_memory_bar(row) for row in report.rows)


def _memory_bar(row: Row) -> MemoryBar:
    segments = tuple((name, float(row.value(key))) for name, key in MEMORY_SEGMENTS)
    return MemoryBar(
        label=f"t={row.inputs['t']}",
        segments=segments,
        total_bytes=float(row.value("total_bytes_per_rank")),
        card_bytes=float(row.value("card_bytes")),
    )


def layout_bars(spec, hw, layout, run, counts=None, block=None) -> tuple[MemoryBar, ...]:
    """One bar per pipeline stage (its most loaded rank): ZeRO-split weights, gradients and
    optimizer of its dense and expert parameters, plus its in-flight activations; totals are
    ``RankMemory.total_bytes``, the number the layout's summary row prints for the worst stage.
    ``counts``: the layers of each virtual stage when the split is set by hand; ``block``: block
    recompute of that many layers per chunk (``--recompute-layers``)."""
    from tpcalc.calc.dp.zero import state_divisors
    from tpcalc.calc.layout.memory import run_memory
    from tpcalc.calc.params.states import recipe_bytes

    mem = run_memory(spec, layout, run, counts=counts, block_layers=block)
    rb = recipe_bytes(run.recipe)
    dense_d = state_divisors(layout.zero, layout.grad_group)
    expert_d = state_divisors(layout.zero, layout.expert_dp)
    per_param = (rb.weight_bytes, rb.grad_bytes, rb.optimizer_bytes)
    bars = []
    for m in mem:
        parts = [
            m.dense_params * b / dd + m.expert_params * b / de
            for b, dd, de in zip(per_param, dense_d, expert_d, strict=True)
        ]
        segments = (
            ("weights", parts[0]),
            ("gradients", parts[1]),
            ("optimizer", parts[2]),
            ("activations", m.peak_activation_bytes),  # with the recompute working set
            ("buffers", m.buffer_bytes),
        )
        bars.append(MemoryBar(f"stage {m.pp_rank}", segments, m.total_bytes, hw.memory_bytes.value))
    return tuple(bars)


def bar_cells(bar: MemoryBar, scale_bytes: float, width: int) -> list[tuple[str, int]]:
    """(segment, cells) along a bar ``width`` cells long for ``scale_bytes``; segment edges are
    rounded on the running sum, so the cells add up to round(total / scale · width)."""
    out, acc, drawn = [], 0.0, 0
    for name, b in bar.segments:
        acc += b
        edge = round(acc / scale_bytes * width)
        out.append((name, edge - drawn))
        drawn = edge
    return out


def render_bars(bars: tuple[MemoryBar, ...], title: str, byte_units: ByteUnits, width: int):
    """A rich renderable: each bar to scale against the largest of the totals and the card; a
    '│' marks the card; cells beyond it are hatched red ('▒') and the row says OVER."""
    from rich.console import Group
    from rich.text import Text

    from tpcalc.render import fmt_quantity
    from tpcalc.terms import Unit

    label_w = max(len(b.label) for b in bars)
    scale = max(max(b.total_bytes for b in bars), max(b.card_bytes for b in bars))
    tail_w = 34
    cells_w = max(20, width - label_w - tail_w - 4)
    lines = [Text(title, style="bold")]
    for bar in bars:
        card_at = round(bar.card_bytes / scale * cells_w)
        line = Text(f"{bar.label:>{label_w}} ")
        pos = 0
        for name, n in bar_cells(bar, scale, cells_w):
            for _ in range(n):
                over = pos >= card_at
                line.append(
                    OVER if over else FULL,
                    style=f"bold red on {STYLES[name]}" if over else STYLES[name],
                )
                pos += 1
                if pos == card_at and pos < cells_w:
                    line.append("│", style="bold")
        if pos < card_at:
            line.append(FREE * (card_at - pos), style="dim")
            line.append("│", style="bold")
            pos = card_at
        line.append(" " * (cells_w - pos + 1))
        total = fmt_quantity(bar.total_bytes, Unit.bytes, byte_units)
        card = fmt_quantity(bar.card_bytes, Unit.bytes, byte_units)
        verdict = Text(" OVER", style="bold red") if bar.overflow else Text(" fits", style="green")
        line.append(f"{total} / {card}")
        line.append(verdict)
        lines.append(line)
    legend = Text(" " * (label_w + 1))
    for name, style in STYLES.items():
        if any(name == s for b in bars for s, _ in b.segments):
            legend.append(FULL, style=style)
            legend.append(f" {name}  ")
    legend.append(f"{FREE} free  │ card  ")
    legend.append(OVER, style="bold red")
    legend.append(" over the card")
    lines.append(legend)
    return Group(*lines)
