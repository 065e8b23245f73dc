"""Build the pictures of a report and print them: to stdout for the table format, to an SVG
file with ``--save-svg`` (never to stdout for JSON or CSV, which stay machine-readable)."""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tpcalc.choices import Schedule
from tpcalc.errors import TpcalcError
from tpcalc.terms import Report, Row
from tpcalc.units import ByteUnits

if TYPE_CHECKING:
    from tpcalc.calc.time.step import TimeOptions
    from tpcalc.reports.request import Layout, Workload

PIPED_WIDTH = 160  # as tpcalc.render: piped output has no terminal width
SHARE_DIGITS = 3  # shares are printed as 12.3%, so they agree to 0.05%
MAX_PASSES = 100_000  # F, B, W passes a timeline simulates and draws (p·m·v·3); beyond, a note
SRC_DUALPIPE_GAP = (
    "DualPipe: the table prints DeepSeek-V3 Table 2's closed form; the order simulated here "
    "(deepseek-ai/DualPipe dualpipe.py, F&B back to back, free communication) idles less"
)
SRC_ZB_GAP = (
    "ZB-H1: the closed form (p-1)(F+B-W) holds for W <= min(F, B) (Qi et al. 2023 §3.1 take "
    "F = B = W); beyond it the ramps idle (p-1)·max(F, B, F+B-W)"
)


def picture_width(out: TextIO) -> int:
    """The terminal's width, or 160 columns for piped output and SVG."""
    return shutil.get_terminal_size().columns if out.isatty() else PIPED_WIDTH


def emit_pictures(
    pictures: Sequence[Any], *, to_stdout: bool, out: TextIO, svg_path: Path | None, title: str,
    width: int,
) -> None:  # fmt: skip
    """Print ``pictures`` to ``out`` when ``to_stdout``; write them as SVG to ``svg_path``.

    Raises TpcalcError when the SVG file cannot be written.
    """
    from rich.console import Console

    if to_stdout:
        console = Console(file=out, width=width, soft_wrap=False)
        for pic in pictures:
            console.print(pic)
    if svg_path is not None:
        rec = Console(record=True, file=io.StringIO(), width=width, force_terminal=True)
        for pic in pictures:
            rec.print(pic)
        try:
            rec.save_svg(str(svg_path), title=title)
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise TpcalcError(f"--save-svg {svg_path}: cannot write it ({why})") from None


def memory_pictures(report: Report, units: ByteUnits, width: int) -> list[Any]:
    from tpcalc.pictures.bars import memory_bars, render_bars

    name = report.rows[0].inputs.get("model")
    title = f"Memory per rank against the card: {name} (one bar per t)"
    return [render_bars(memory_bars(report), title, units, width)]


def _too_many(p: int, m: int, v: int) -> str | None:
    passes = p * m * v * 3
    if passes > MAX_PASSES:
        return f"{passes:,} passes are more than a picture can show (at most {MAX_PASSES:,})"
    return None


def _timeline_from_row(row: Row, width: int) -> Any:
    from rich.text import Text

    from tpcalc.calc.pipeline.timeline import simulate
    from tpcalc.pictures.timeline import render_timeline

    i = row.inputs
    schedule = Schedule(i["schedule"])
    p, m, v = int(i["pp"]), int(i["microbatches"]), int(i["vpp"])  # type: ignore[arg-type]
    f, b, w = (float(row.value(k)) for k in
               ("forward_time_s", "backward_input_time_s", "backward_weight_time_s"))  # fmt: skip
    title = f"Pipeline timeline: {i['model']}, {schedule.value}, pp={p}, m={m}" + (
        f", v={v}" if v > 1 else ""
    )
    if (why := _too_many(p, m, v)) is not None:
        return Text(f"{title}: no timeline ({why})")
    try:
        tl = simulate(schedule, p, m, v, f, b, w)
    except TpcalcError as exc:
        return Text(f"{title}: no timeline ({exc})")
    share = float(row.value("bubble_share_ratio"))
    notes = [
        f"bubble / step {share:.1%} (the table, {schedule.value}'s closed form); "
        f"simulated idle {tl.idle_share:.1%}"
    ]
    if round(share, SHARE_DIGITS) != round(tl.idle_share, SHARE_DIGITS):
        notes.append(SRC_DUALPIPE_GAP if schedule is Schedule.dualpipe else SRC_ZB_GAP)
    return render_timeline(tl, title, notes, width)


def pipeline_pictures(report: Report, width: int) -> list[Any]:
    return [_timeline_from_row(row, width) for row in report.rows]


def layout_timeline(report: Report, run, p: int, width: int) -> Any:
    """The layout's pipeline, drawn with F = B = W = a third of one micro-batch's compute plus
    its in-stage exposed communication (TP, CP, EP), the split ``compute.stage_times`` starts
    from (Qi et al. 2023 §2), on the slowest stage."""
    from rich.text import Text

    from tpcalc.calc.pipeline.timeline import simulate
    from tpcalc.pictures.timeline import render_timeline
    from tpcalc.render import fmt_quantity
    from tpcalc.terms import Unit

    s = report.rows[-1]
    m = run.microbatches
    if s.inputs.get("time_model") == "roofline":  # the step model's own F, B, W
        f, b, w = (
            float(s.value(k))
            for k in (
                "stage_forward_time_s",
                "stage_backward_input_time_s",
                "stage_backward_weight_time_s",
            )
        )
        drawn = "the slowest stage's F, B, W from the step-time model"
    else:
        per_mb = (
            float(s.value("compute_time_s"))
            + sum(float(s.value(f"{d}_exposed_time_s")) for d in ("tp", "cp", "ep"))
        ) / m
        f = b = w = per_mb / 3
        drawn = (
            f"F = B = W = {fmt_quantity(f, Unit.seconds)} (compute + exposed TP/CP/EP "
            "per micro-batch, in thirds)"
        )
    title = f"Pipeline timeline: {run.schedule.value}, pp={p}, m={m}" + (
        f", v={run.vpp}" if run.vpp > 1 else ""
    )
    if (why := _too_many(p, m, run.vpp)) is not None:
        return Text(f"{title}: no timeline ({why})")
    try:
        tl = simulate(run.schedule, p, m, run.vpp, f, b, w)
    except TpcalcError as exc:
        return Text(f"{title}: no timeline ({exc})")
    idle = fmt_quantity(max(tl.idle_s), Unit.seconds)
    table = fmt_quantity(float(s.value("bubble_time_s")), Unit.seconds)
    notes = [
        f"drawn with {drawn}",
        f"idle per stage {idle}; the table's bubble {table}"
        + ("" if idle == table else " (its F, B, W: recompute runs before B)"),
    ]
    return render_timeline(tl, title, notes, width)


def layout_pictures(
    report: Report, workload: Workload, request: Layout, *, with_latency: bool, bars: bool,
    timeline: bool, group_map: bool, units: ByteUnits, width: int,
    time_options: TimeOptions | None = None,
) -> list[Any]:  # fmt: skip
    """The pictures of ``tpcalc layout``'s ``report``, priced from the request it was built
    from (``workload`` on ``request`` with ``time_options``' stage split, as
    ``reports.layout.layout_report`` priced it)."""
    from tpcalc.pictures.bars import layout_bars, render_bars
    from tpcalc.pictures.layout_map import render_map

    spec, hw = workload.spec, workload.hw
    layout = request.parallel(workload.node(request))
    run = workload.run(request, with_latency=with_latency)
    counts = None
    if time_options is not None:
        from tpcalc.calc.time.step import hand_split

        counts = hand_split(time_options, spec.num_hidden_layers, layout.pp, run.vpp)
    out: list[Any] = []
    if bars:
        title = (
            f"Memory per GPU against the card: {spec.name}, one bar per pipeline stage "
            "(its most loaded rank)"
        )
        block = time_options.recompute_layers if time_options is not None else None
        per_stage = layout_bars(spec, hw, layout, run, counts, block)
        out.append(render_bars(per_stage, title, units, width))
    if timeline:
        out.append(layout_timeline(report, run, layout.pp, width))
    if group_map:
        title = (
            f"Process groups on {layout.world} GPUs, {layout.gpus_per_node} per node: "
            f"[TP, CP, PP, DP] = {layout.tp} × {layout.cp} × {layout.pp} × {layout.dp}, "
            f"EP {layout.ep}"
        )
        out.append(render_map(layout, title))
    return out
