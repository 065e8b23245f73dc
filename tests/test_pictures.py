"""Pictures (issue 12 §5): memory bars add up to the table's total and mark the overflow; the
pipeline timeline's idle cells equal the printed bubble; the group map marks a group that leaves
its node; --save-svg writes the same pictures; JSON and CSV stay free of them."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path

import pytest

from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.pictures.bars import bar_cells, layout_bars, memory_bars
from tpcalc.pictures.layout_map import gpus_to_show, group_members, layout_map
from tpcalc.reports.layout import layout_report
from tpcalc.reports.memory import memory_report
from tpcalc.reports.request import Layout, Workload

BAR_CHARS = ("█", "░", "▒")
LAYOUT_70B = ["-m", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "2", "--microbatches", "8"]


@pytest.fixture(scope="module")
def qwen_memory():
    return memory_report(Workload.load("qwen3.8", "h100-sxm", seq=4096), "1,8")


def test_memory_bar_segments_sum_to_the_printed_total(qwen_memory):
    for bar, row in zip(memory_bars(qwen_memory), qwen_memory.rows, strict=True):
        total = row.value("total_bytes_per_rank")
        assert [name for name, _ in bar.segments] == [
            "weights", "gradients", "optimizer", "activations", "buffers",
        ]  # fmt: skip
        assert math.isclose(bar.segment_sum_bytes, total, rel_tol=1e-12)
        assert bar.total_bytes == total
        # overflow marked iff total > card (qwen3.8: 511.2 GB at t = 1, 63.95 GB at t = 8)
        assert bar.overflow is (total > row.value("card_bytes"))
    assert [b.overflow for b in memory_bars(qwen_memory)] == [True, False]


def test_bar_cells_follow_the_running_sum(qwen_memory):
    bar = memory_bars(qwen_memory)[1]
    cells = bar_cells(bar, bar.card_bytes, 100)
    assert sum(n for _, n in cells) == round(bar.total_bytes / bar.card_bytes * 100)
    assert all(n >= 0 for _, n in cells)


def test_memory_bars_cli(cli):
    r = cli("memory", "-m", "qwen3.8", "-s", "4096", "-t", "1,8", "--bars")
    assert r.code == 0, r.err
    lines = {ln.split()[0]: ln for ln in r.out.splitlines() if ln.strip().startswith("t=")}
    assert lines["t=1"].rstrip().endswith("OVER") and "▒" in lines["t=1"]
    assert lines["t=8"].rstrip().endswith("fits") and "▒" not in lines["t=8"]
    assert "511.2 GB / 80.00 GB" in lines["t=1"]  # the table's total, its printed precision


def test_layout_bars_sum_to_the_summary_row():
    work = Workload.load("llama3-70b", "h100-sxm")
    request = Layout(tp=8, pp=4, dp=2, microbatches=8)
    rep = layout_report(work, request)
    spec, hw = work.spec, work.hw
    lay, run = request.parallel(work.node(request)), work.run(request, with_latency=True)
    bars = layout_bars(spec, hw, lay, run)
    assert len(bars) == 4  # one per pipeline stage
    summary = rep.rows[-1]
    worst = bars[summary.value("worst_pp_rank")]
    assert worst.total_bytes == summary.value("memory_bytes_per_rank")
    for bar in bars:
        assert math.isclose(bar.segment_sum_bytes, bar.total_bytes, rel_tol=1e-12)
        assert bar.overflow is (bar.total_bytes > hw.memory_bytes.value)
    assert max(b.total_bytes for b in bars) == worst.total_bytes


def test_timeline_cli_prints_the_seed_bubble_beside_it(cli):
    r = cli("pipeline", "-m", "qwen3.8", "--pp", "8", "--microbatches", "32", "--timeline")
    assert r.code == 0, r.err
    # seed 000 §流水线并行: 1F1B bubble 17.9% of the step, in the table and under the picture
    assert "17.9%" in r.out.split("Pipeline timeline")[0]
    assert "idle cells 17.9%" in r.out
    assert "bubble / step 17.9%" in r.out
    assert sum(1 for ln in r.out.splitlines() if ln.startswith("stage ")) == 8


@pytest.mark.parametrize(
    ("schedule", "share"),
    [
        # seed 000 §流水线并行, p = 8, m = 32: 1F1B and GPipe (p-1)/(m+p-1) = 17.9%; interleaved
        # v = 4 divides the bubble by 4: 5.25/(96+5.25) = 5.2%; ZB-H1 a third of 1F1B's: 7/103
        (["--schedule", "1f1b"], "17.9%"),
        (["--schedule", "gpipe"], "17.9%"),
        (["--schedule", "interleaved", "--vpp", "4"], "5.2%"),
        (["--schedule", "zb-h1"], "6.8%"),
    ],
)
def test_seed_timelines_idle_cells_equal_the_table(cli, schedule, share):
    """At the piped width (160 columns) too: a long exact timeline is cut into bands."""
    r = cli("pipeline", "-m", "qwen3.8", "--pp", "8", "--microbatches", "32", *schedule,
            "--timeline")  # fmt: skip
    assert r.code == 0, r.err
    table, picture = r.out.split("Pipeline timeline")
    bubble_line = next(ln for ln in table.splitlines() if "bubble / step" in ln)
    assert bubble_line.split()[-2] == share
    assert f"idle cells {share}" in picture
    assert "rounded" not in picture


def test_dualpipe_timeline_says_its_closed_form_differs(cli):
    args = ["pipeline", "-m", "qwen3.8", "--pp", "8", "--schedule", "dualpipe", "--timeline"]
    r = cli(*args)
    assert r.code == 0, r.err
    assert "DualPipe: the table prints DeepSeek-V3 Table 2's closed form" in r.out


@pytest.mark.parametrize(
    ("tp", "node", "crossing"),
    [
        (4, 6, {1}),  # ranks 4..7 on 6-GPU nodes: GPUs 4, 5 on node 0, 6, 7 on node 1
        (16, 8, {0, 1}),  # every TP group of 16 spans two 8-GPU nodes
        (8, 8, set()),  # TP = node: no group leaves it
    ],
)
def test_map_marks_a_tp_group_that_leaves_its_node(tp, node, crossing):
    lay = ParallelLayout(gpus_per_node=node, tp=tp, dp=3 if node == 6 else 4)
    maps = {gm.dimension: gm for gm in layout_map(lay, gpus_to_show(lay))}
    assert set(maps["tp"].crossing) == crossing
    for gi in maps["tp"].crossing:  # marked only if its members sit on different nodes
        first = maps["tp"].group_of.index(gi)
        assert len({m // node for m in group_members(first, tp, 1)}) > 1


def test_map_cli_marks_the_straddling_group(cli):
    r = cli("layout", "-m", "llama3-70b", "--tp", "4", "--dp", "3", "--gpus-per-node", "6",
            "--map")  # fmt: skip
    assert r.code == 0, r.err
    tp_block = r.out.split("TP: groups of 4")[1].split("DP:")[0]
    node0, node1 = [ln for ln in tp_block.splitlines() if ln.startswith("  node")][:2]
    assert node0.split("│")[1].split() == ["0", "0", "0", "0", "1*", "1*"]
    assert node1.split("│")[1].split() == ["1*", "1*", "2", "2", "2", "2"]
    assert "some groups straddle" in tp_block


def test_big_world_shows_a_slice_and_the_shapes(cli):
    r = cli("layout", "-m", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--zero",
            "1", "--microbatches", "16", "--map")  # fmt: skip
    assert r.code == 0, r.err
    assert "GPUs 0..31 of 16384 (the first 4 nodes)" in r.out
    assert "PP: groups of 16, ranks 1024 apart, up to 16 nodes" in r.out


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["memory", "-m", "qwen3.8", "-t", "8"], "Memory per rank against the card"),
        (["pipeline", "--pp", "4", "--microbatches", "8"], "Pipeline timeline"),
        (["layout", *LAYOUT_70B], "Process groups on 64 GPUs"),
    ],
)
@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_save_svg_and_formats(cli, tmp_path, args, expect, fmt):
    svg = tmp_path / "p.svg"
    r = cli(*args, "-f", fmt, "--save-svg", str(svg))
    assert r.code == 0, r.err
    text = svg.read_text()
    assert text.lstrip().startswith("<svg") and "</svg>" in text
    # rich writes each text run as a <text> element, spaces as &#160;
    assert expect.split()[0] in text
    # no picture on stdout unless asked for (only --save-svg here), never in JSON or CSV
    assert expect not in r.out
    assert not any(c in r.out for c in BAR_CHARS)
    if fmt == "json":
        json.loads(r.out)


@pytest.mark.parametrize(
    "args",
    [
        ["memory", "-m", "qwen3.8", "-t", "8", "--bars"],
        ["pipeline", "--pp", "4", "--microbatches", "8", "--timeline"],
        ["layout", *LAYOUT_70B, "--map", "--bars", "--timeline"],
    ],
)
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_json_and_csv_never_print_pictures(cli, args, fmt):
    r = cli(*args, "-f", fmt)
    assert r.code == 0, r.err
    assert not any(c in r.out for c in BAR_CHARS) and "stage 0" not in r.out
    if fmt == "json":
        json.loads(r.out)


def test_save_svg_to_a_missing_directory_is_one_line(cli, tmp_path):
    r = cli("memory", "-t", "4", "--save-svg", str(tmp_path / "no" / "p.svg"))
    assert r.code == 2
    assert r.err.count("\n") == 1 and "'--save-svg'" in r.err and "No such file" in r.err
    assert "Traceback" not in r.err


@pytest.mark.parametrize("kind", ["fifo", "long name", "missing directory"])
def test_an_unwritable_svg_path_is_refused_before_anything_is_priced(cli, tmp_path, kind):
    # the path is checked first: no warning (qwen3.8 at t=8 replicates KV heads), no JSON on
    # stdout, one line on stderr; a FIFO would block the write, so it is refused, not opened
    if kind == "fifo":
        path = tmp_path / "pipe.svg"
        os.mkfifo(path)
    elif kind == "long name":
        path = tmp_path / ("9" * 300 + ".svg")
    else:
        path = tmp_path / "no" / "p.svg"
    r = cli("memory", "-t", "8", "--bars", "--save-svg", str(path), "-f", "json")
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1, r.err
    assert "Warning" not in r.err and "--save-svg" in r.err
    assert not (tmp_path / "no").exists()


def test_a_writable_svg_path_is_probed_without_leaving_a_file(cli, tmp_path):
    # the check opens the file once; when the command then fails on its inputs, no empty file
    # is left behind
    svg = tmp_path / "p.svg"
    r = cli("memory", "-t", "3", "--save-svg", str(svg))
    assert r.code == 1 and not svg.exists()


def _readme_svg_commands() -> list[tuple[list[str], str]]:
    root = Path(__file__).parents[1]
    out = []
    for line in (root / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("tpcalc ") and "--save-svg docs/" in line:
            args = shlex.split(line)[1:]
            out.append((args, args[args.index("--save-svg") + 1]))
    return out


def test_readme_has_one_picture_of_each_kind():
    names = sorted(path for _, path in _readme_svg_commands())
    assert names == ["docs/layout-map.svg", "docs/memory-bars.svg", "docs/pipeline-timeline.svg"]


@pytest.mark.parametrize(("args", "path"), _readme_svg_commands())
def test_committed_svgs_are_what_the_readme_commands_draw(cli, tmp_path, args, path):
    """The README's pictures are current: each command, run again, writes the committed file
    (regenerate with the command printed in the README beside the picture)."""
    fresh = tmp_path / "fresh.svg"
    args = [str(fresh) if a == path else a for a in args]
    r = cli(*args)
    assert r.code == 0, r.err
    committed = Path(__file__).parents[1] / path
    assert fresh.read_text() == committed.read_text(), f"regenerate {path}: tpcalc {' '.join(args)}"


def test_layout_bars_follow_a_hand_set_stage_split(cli):
    # --first/--last-stage-layers move layers between stages: the bars are the ranks the summary
    # row prices, so the tallest bar is still the printed memory per rank
    import json

    base = ["layout", "-m", "llama3-8b", "--pp", "4", "--dp", "2", "--microbatches", "8",
            "--first-stage-layers", "2", "--last-stage-layers", "2"]  # fmt: skip
    summary = json.loads(cli(*base, "-f", "json").out)[-1]
    work = Workload.load("llama3-8b", "h100-sxm")
    request = Layout(pp=4, dp=2, microbatches=8)
    lay, run = request.parallel(work.node(request)), work.run(request, with_latency=True)
    bars = layout_bars(work.spec, work.hw, lay, run, (2, 14, 14, 2))
    assert max(b.total_bytes for b in bars) == summary["memory_bytes_per_rank"]
    assert bars[summary["worst_pp_rank"]].total_bytes == summary["memory_bytes_per_rank"]
