"""tpcalc dp | zero | pipeline: every format, seed figures through the CLI, one-line errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.golden import expected
from tpcalc.cli import app, dp, pipeline, zero

# Register the three commands if tpcalc/cli/__init__.py does not yet (idempotent afterwards).
_known = {info.typer_instance for info in app.registered_groups}
for _module in (dp, zero, pipeline):
    if _module.app not in _known:
        app.add_typer(_module.app)

SEED_DP = ["dp", "-m", "qwen3.8", "--hardware", "h800", "-s", "4096", "--link", "ib"]
SEED_ZERO = ["zero", "-m", "qwen3.8", "--hardware", "h800", "-s", "4096", "--dp", "8"]
SEED_PP = ["pipeline", "-m", "qwen3.8", "--hardware", "h800", "-s", "4096", "--pp", "8"]
COMMANDS = [
    SEED_DP + ["--dp", "8,64"],
    SEED_ZERO,
    SEED_PP + ["--microbatches", "32"],
    SEED_PP + ["--schedule", "interleaved", "--vpp", "4"],
    SEED_PP + ["--schedule", "zb-h1"],
    SEED_PP + ["--schedule", "dualpipe"],
    SEED_PP + ["--schedule", "gpipe"],
    ["zero", "-m", "llama3-70b", "--tp", "8", "--dp", "1,8", "--state-recipe", "megatron18"],
    ["pipeline", "-m", "deepseek-v3", "--pp", "16", "--schedule", "dualpipe", "--tp", "1"],
]


def json_rows(cli, *args: str) -> list[dict]:
    r = cli(*args, "--format", "json", "--no-latency")
    assert r.code == 0, r.err
    return json.loads(r.out)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:1] + a[-2:]))
@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_every_command_in_every_format(cli, args, fmt):
    r = cli(*args, "--format", fmt)
    assert r.code == 0, r.err
    assert "Traceback" not in r.err
    if fmt == "json":
        rows = json.loads(r.out)
        assert rows and all(row["model"] for row in rows)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(r.out)))
        assert rows and "model" in rows[0]
    else:
        assert args[1] != "-m" or args[2] in r.out


def test_dp_seed_figures(cli):
    # the seeds time the backward at 400 TFLOP/s: their convention, --time-model fixed
    by_n = {
        row["dp"]: row for row in json_rows(cli, *SEED_DP, "--dp", "8,64", "--time-model", "fixed")
    }
    # seed 000 summary: BF16 gradients 55.6 GB; ring 97.2 GB (8 cards), 109.4 GB (64 cards)
    assert expected("q-grad-bf16").matches(by_n[8]["grad_bytes"])
    assert expected("q-dp-ring-8").matches(by_n[8]["ring_send_bytes_per_rank"])
    assert expected("q-dp-ring-64").matches(by_n[64]["ring_send_bytes_per_rank"])
    # seed 000 §数据并行: 1.94 s over IB 50 GB/s vs a 1.05 s backward: cannot hide
    assert expected("q-dp-time-ib").matches(by_n[8]["comm_time_s"])
    assert expected("q-bwd-time").matches(by_n[8]["backward_time_s"])
    assert by_n[8]["hides_behind_backward"] is False


def test_dp_link_auto_crosses_nodes_only_beyond_a_node(cli):
    rows = json_rows(cli, "dp", "--hardware", "h800", "--dp", "8,16")
    assert [r["link"] for r in rows] == ["nvlink", "ib"]
    one_gpu_nodes = json_rows(cli, "dp", "--hardware", "h800", "--dp", "8", "--gpus-per-node", "1")
    assert one_gpu_nodes[0]["link"] == "ib"


def test_zero_seed_figures(cli):
    # the seed's activations are Korthikanti Table 2 (34·s·b·h·L), hence --activations paper
    rows = {row["zero"]: row for row in json_rows(cli, *SEED_ZERO, "--activations", "paper")}
    # seed 000 §ZeRO: 444.5 -> 152.8 -> 104.2 -> 55.6 GB per card on 8 cards
    for stage, fid in enumerate(("q-states-1", "q-zero1-8", "q-zero2-8", "q-zero3-8")):
        assert expected(fid).matches(rows[stage]["model_states_bytes"])
    # 145.9 GB sent per card (1.5x DP); 24.4 GB left; 45.6 GB of selective activations do not fit
    assert expected("q-zero3-comm").matches(rows[3]["comm_send_bytes_per_rank"])
    assert expected("q-zero3-vs-dp").matches(rows[3]["comm_vs_dp_ratio"])
    assert expected("q-free-for-act").matches(rows[3]["free_for_activations_bytes"])
    assert expected("q-act-selective").matches(rows[3]["activation_bytes"])
    assert rows[3]["activations_fit"] is False


def test_zero_exact_activations_by_default(cli):
    # the exact model (default) keeps more for Qwen3.8's Gated DeltaNet and SwiGLU layers
    exact = json_rows(cli, *SEED_ZERO, "--zero", "3")[0]
    paper = json_rows(cli, *SEED_ZERO, "--zero", "3", "--activations", "paper")[0]
    assert exact["activations"] == "exact" and paper["activations"] == "paper"
    assert exact["activation_bytes"] > paper["activation_bytes"]


def test_zero_llama_states_per_card_at_tp8(cli):
    row = json_rows(cli, "zero", "-m", "llama3-70b", "--tp", "8", "--dp", "1", "--zero", "0")[0]
    # seed 003 §7.3: 1,128.9 GB ÷ 8 ≈ 141 GB per card
    assert expected("l-states-tp8").matches(row["model_states_bytes"])


def test_zero_counts_the_collectives_each_micro_batch_repeats(cli):
    # seed 000's 145.9 GB is one micro-batch; with 4, ZeRO-3 gathers and reduces 4 times
    # (ZeRO §5.3) while ZeRO-1 still reduces once: 6x plain DP instead of 1.5x
    rows = {r["zero"]: r for r in json_rows(cli, *SEED_ZERO, "--microbatches", "4")}
    assert all(r["microbatches"] == 4 for r in rows.values())
    assert abs(rows[3]["comm_send_bytes_per_rank"] / 1e9 - 4 * 145.9) <= 4 * 0.05
    assert rows[3]["comm_vs_dp_ratio"] == pytest.approx(6.0)
    assert rows[1]["comm_vs_dp_ratio"] == pytest.approx(1.0)


def test_zero_csv_columns_are_the_same_for_every_stage(cli):
    r = cli(*SEED_ZERO, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert len(rows) == 4 and all(None not in row for row in rows)


def test_pipeline_seed_figures(cli):
    row = json_rows(cli, *SEED_PP, "--microbatches", "32")[0]
    # seed 000 §流水线并行: 8 layers per stage, 41.9 MB per micro-batch, 21.9% / 17.9% bubble
    assert row["layers_per_stage_max_count"] == 8
    assert abs(row["p2p_bytes_per_microbatch"] / 1e6 - 41.9) <= 0.05
    assert expected("q-pp-bubble").matches(row["bubble_ratio"])
    assert expected("q-pp-bubble-share").matches(row["bubble_share_ratio"])
    inter = json_rows(cli, *SEED_PP, "--schedule", "interleaved", "--vpp", "4")[0]
    assert expected("q-pp-interleaved").matches(inter["bubble_ratio"])  # interleaved v=4
    zb = json_rows(cli, *SEED_PP, "--schedule", "zb-h1")[0]
    assert abs(zb["bubble_vs_1f1b_ratio"] - 1 / 3) <= 0.005  # seed 000: ZB-H1 = 1/3 of 1F1B


def test_pipeline_explain_names_the_paper(cli):
    r = cli(*SEED_PP, "--schedule", "zb-h1", "--explain")
    assert r.code == 0 and "Zero Bubble Pipeline Parallelism" in r.out


def test_too_few_microbatches_is_a_warning(cli):
    r = cli(*SEED_PP, "--microbatches", "4")
    assert r.code == 0 and "never fills" in r.err


BAD = [
    (["pipeline", "--pp", "128"], 1, "pp=128 exceeds num_hidden_layers=64"),
    (["pipeline", "--pp", "6", "--no-uneven"], 1, "num_hidden_layers=64 is not divisible by pp=6"),
    (["pipeline", "--pp", "16", "--schedule", "interleaved", "--vpp", "8"], 1, "vpp=8 needs"),
    (["pipeline", "--vpp", "4"], 1, "vpp=4 applies only to the interleaved schedule"),
    (["pipeline", "--schedule", "interleaved"], 1, "needs vpp >= 2"),
    (["pipeline", "--pp", "7", "--schedule", "dualpipe"], 1, "DualPipe needs an even pp"),
    (["pipeline", "--microbatches", "0"], 1, "microbatches=0"),
    (["pipeline", "--pp", "0"], 1, "--pp must be a positive integer"),
    (["pipeline", "--pp", "x"], 1, "--pp 'x'"),
    (["zero", "--zero", "4"], 1, "ZeRO stage 4 does not exist"),
    (["zero", "--dp", "0"], 1, "--dp must be a positive integer"),
    (["dp", "--dp", "8", "--gpus-per-node", "0"], 1, "--gpus-per-node must be a positive"),
    (["dp", "--bucket-mib", "0"], 1, "--bucket-mib must be a positive integer"),
    (["dp", "-m", "llama3-70b", "--tp", "3"], 1, "use t in 1, 2, 4, 8"),
    (["dp", "--microbatches", "-1"], 1, "--microbatches must be a positive integer"),
    (["zero", "--microbatches", "0"], 1, "--microbatches must be a positive integer"),
    (["pipeline", "--schedule", "pipedream"], 2, "'pipedream' is not one of"),
    (["zero", "--state-recipe", "zero20"], 2, "'zero20' is not one of"),
]


@pytest.mark.parametrize(("args", "code", "text"), BAD, ids=lambda x: str(x))
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_bad_combinations_are_one_line(cli, args, code, text, fmt):
    r = cli(*args, "--format", fmt)
    assert r.code == code, (r.out, r.err)
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.err
    assert text in lines[0]


@pytest.mark.parametrize("name", ["dp", "zero", "pipeline"])
def test_help(cli, name):
    r = cli(name, "--help")
    assert r.code == 0 and "Usage:" in r.out and "Example" in r.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("dp", "--dp", "8,"), "--dp '8,': give an integer or a list like 8,64"),
        (("pipeline", "--pp", "8,,16"), "--pp '8,,16': give an integer or a list like 8,64"),
        (("cp", "--cp", "2,x"), "--cp '2,x': give an integer or a list like 8,64"),
        (("comm", "-t", "8,"), "--tp '8,': give an integer or a list like 1,2,4,8"),
        (("dp", "--dp", "0"), "--dp must be a positive integer, got 0"),
    ],
)
def test_one_list_parser_for_every_size_option(cli, args, message):
    # reports.inputs.int_list parses every size list: an empty entry is an error everywhere
    r = cli(*args)
    assert r.code == 1 and message in r.err and r.out == ""
