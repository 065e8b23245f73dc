"""tpcalc cp | ep | layout: every format, seed figures through the CLI, one-line errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.golden import expected
from tpcalc.cli import app, cp, ep, layout

# Register the three commands if tpcalc/cli/__init__.py does not yet (idempotent afterwards).
_known = {info.typer_instance for info in app.registered_groups}
for _module in (cp, ep, layout):
    if _module.app not in _known:
        app.add_typer(_module.app)

SEED_CP = ["cp", "-m", "qwen3.8", "--hardware", "h800", "-s", "131072", "--cp", "8"]
SEED_EP = ["ep", "-m", "deepseek-v3", "--hardware", "h800", "--ep", "64"]
LLAMA_405 = ["layout", "-m", "llama3-405b", "--tp", "8", "--cp", "1", "--pp", "16", "--dp", "128",
             "--zero", "1", "--microbatches", "16"]  # fmt: skip
DS_V3 = ["layout", "-m", "deepseek-v3", "--hardware", "h800", "--pp", "16", "--dp", "128",
         "--ep", "64", "--zero", "1", "--schedule", "dualpipe"]  # fmt: skip
COMMANDS = [
    SEED_CP,
    ["cp", "-s", "131072", "--cp", "2,4,8", "--chunks", "16"],
    ["cp", "-m", "llama3-405b", "-s", "131072", "--tp", "8", "--cp", "16", "--link", "ib"],
    SEED_EP,
    ["ep", "--ep", "8,64", "--routing", "uniform", "--dtype", "fp8", "--combine-dtype", "bf16"],
    LLAMA_405,
    DS_V3,
    ["layout", "-m", "llama3-70b", "--tp", "16", "--dp", "4"],
    ["layout", "-m", "qwen3.8", "--tp", "4", "--cp", "4", "-s", "131072", "--pp", "4"],
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
        assert rows and all(row["model"] == args[2] for row in rows if args[1] == "-m")
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(r.out)))
        assert rows and "model" in rows[0]
    else:
        assert args[1] != "-m" or args[2] in r.out


@pytest.mark.parametrize("command", ["cp", "ep", "layout"])
def test_explain_prints_formulas_and_sources(cli, command):
    r = cli(command, "--explain")
    assert r.code == 0, r.err
    assert "source:" in r.out and "with " in r.out


def test_cp_seed_figures(cli):
    (row,) = json_rows(cli, *SEED_CP)
    # seed 000 summary: 0.1 GB block per step (67.1 MB), 7 steps, 0.5 GB per layer (469.8 MB)
    assert expected("q-cp-block").matches(row["kv_block_bytes"])
    assert abs(row["kv_block_bytes"] / 1e6 - 67.1) <= 0.05
    assert row["ring_steps"] == 7
    assert abs(row["fwd_kv_bytes_per_layer"] / 1e6 - 469.8) <= 0.05
    assert row["full_attention_layers"] == 16
    assert row["ulysses_max_cp"] == 4


def test_cp_says_what_gated_deltanet_layers_send_and_when_they_cannot(cli):
    """Qwen3.8's 48 Gated DeltaNet layers pass no ring (the seed's 16 ring layers stand) but
    all-to-all under Megatron-Core's CP, which needs whole heads per CP rank: 16 key heads
    split over cp 8, not over cp 32."""
    ok = cli(*SEED_CP)
    assert ok.code == 0, ok.err
    assert "the 48 Gated DeltaNet layers pass no ring" in ok.out and "Warning" not in ok.err
    bad = cli(*SEED_CP[:-1], "32")
    assert bad.code == 0
    assert "cp=32: linear_num_key_heads/tp = 16 is not divisible by cp=32" in bad.err


def test_cp_causal_load(cli):
    (row,) = json_rows(cli, *SEED_CP[:-2], "--cp", "4", "--chunks", "16")
    # seed 000 summary: 16 chunks on 4 cards → 10 : 26 : 42 : 58; zig-zag → 34 each
    assert row["causal_work_contiguous"] == "10 : 26 : 42 : 58"
    assert row["causal_work_zigzag"] == "34 : 34 : 34 : 34"


def test_ep_seed_figures(cli):
    (row,) = json_rows(cli, *SEED_EP)
    # seed 000 summary: 256 / 64 = 4 experts per card; 654B routed params; at most 4 nodes
    assert row["experts_per_rank"] == 4
    assert abs(row["routed_expert_params"] / 1e9 - 654) <= 0.5
    assert row["max_nodes_per_token"] == 4
    assert row["routing"] == "node-limited"


def test_layout_llama405_shows_cited_mfu_and_a_note(cli):
    r = cli(*LLAMA_405, "--format", "json")
    assert r.code == 0, r.err
    rows = {row["dimension"]: row for row in json.loads(r.out)}
    # seed 000 summary: [TP, CP, PP, DP] = 8 × 1 × 16 × 128 on 16,384 H100, BF16 MFU 41%
    assert [rows[d]["group_size"] for d in ("tp", "cp", "pp", "dp")] == [8, 1, 16, 128]
    assert rows["total"]["world_size"] == 16_384
    assert abs(rows["total"]["mfu_cited_ratio"] - 0.41) <= 0.005
    assert 0 < rows["total"]["mfu_ratio"] < 1
    table = cli(*LLAMA_405)
    assert "published layout llama3-405b-16k" in table.out
    assert "41.0%" in table.out  # the cited MFU, printed beside the estimate


def test_layout_deepseek(cli):
    rows = {row["dimension"]: row for row in json_rows(cli, *DS_V3)}
    # seed 000 summary: DeepSeek-V3 PP 16 × EP 64 × ZeRO-1 DP, no TP
    assert rows["pp"]["group_size"] == 16 and rows["ep"]["group_size"] == 64
    assert rows["tp"]["group_size"] == 1 and rows["total"]["zero"] == 1
    assert rows["ep"]["experts_per_rank"] == 4


def test_layout_json_parts_add_up(cli):
    rows = {row["dimension"]: row for row in json_rows(cli, *LLAMA_405, "--time-model", "fixed")}
    total = rows["total"]
    parts = ["compute_time_s", "bubble_time_s"] + [f"{d}_exposed_time_s" for d in rows if
                                                  d != "total"]  # fmt: skip
    assert sum(total[p] for p in parts) == pytest.approx(total["step_time_s"])
    # the per-operation model (default): its parts add up too, every assumption echoed
    total = {row["dimension"]: row for row in json_rows(cli, *LLAMA_405)}["total"]
    parts = ["gemm_time_s", "attention_time_s", "memory_bound_time_s", "recompute_time_s",
             "bubble_time_s", "optimizer_time_s"] + [
        f"{d}_exposed_time_s" for d in ("tp", "cp", "ep", "pp", "dp")]  # fmt: skip
    assert sum(total[p] for p in parts) == pytest.approx(total["step_time_s"])
    assert total["time_model"] == "roofline" and total["tp_comm_overlap"] is False
    assert total["recompute_working_bytes"] > 0  # the default selective recompute rebuilds
    assert total["memory_bytes_per_rank"] == pytest.approx(
        total["dense_states_bytes"]
        + total["expert_states_bytes"]
        + total["activation_bytes"]
        + total["recompute_working_bytes"]
        + total["buffer_bytes"]
    )


BAD = [
    (["cp", "-s", "4097", "--cp", "8"], "seq=4097 is not divisible by cp=8"),
    (["cp", "--cp", "0"], "--cp must be a positive integer"),
    (["cp", "-s", "4096", "--cp", "4", "--chunks", "12"], "chunks=12 is not divisible by 2·cp=8"),
    (["ep", "--ep", "3"], "n_routed_experts=256 is not divisible by ep=3"),
    (["ep", "-m", "llama3-70b", "--ep", "8"], "has no routed experts"),
    (["ep", "--ep", "8", "--cp", "3"], "seq·micro_batch=4096 is not divisible by cp·tp=3"),
    (["layout", "--tp", "8", "--pp", "2", "--dp", "3", "--world-size", "64"],
     "world_size=64 is not tp·cp·pp·dp"),
    (["layout", "-m", "llama3-70b", "--cp", "3"], "seq=8192 is not divisible by cp=3"),
    (["layout", "-m", "qwen3.8", "--tp", "8", "--cp", "4", "-s", "131072"],
     "linear_num_key_heads/tp = 2 is not divisible by cp=4"),
    (["layout", "-m", "deepseek-v3", "--pp", "16", "--dp", "6", "--ep", "6"],
     "n_routed_experts=256 is not divisible by ep=6"),
    (["layout", "-m", "llama3-70b", "--pp", "7", "--no-uneven"],
     "num_hidden_layers=80 is not divisible by pp=7"),
    (["layout", "--zero", "4"], "ZeRO stage 4 does not exist"),
    (["layout", "--gpus-per-node", "0"], "--gpus-per-node must be a positive integer"),
    (["layout", "-m", "deepseek-v3", "--pp", "4", "--pipeline-layout", "Et*4|(t*4|)*14tmL"],
     "16 stages; pp · vpp = 4 are needed"),
    (["layout", "-m", "deepseek-v3", "--pp", "2", "--pipeline-layout", "Et*30|(t*31"],
     "every group '(...)' needs its ')'"),
    (["layout", "-m", "deepseek-v3", "--pp", "2", "--pipeline-layout", "t*30|Et*31L"],
     "the embedding 'E' must open"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"), BAD, ids=lambda a: " ".join(a) if isinstance(a, list) else ""
)
def test_bad_combinations_exit_1_with_one_line(cli, args, message):
    r = cli(*args)
    assert r.code == 1, (r.out, r.err)
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert message in lines[0]


def test_help_for_every_command(cli):
    for command in ("cp", "ep", "layout"):
        r = cli(command, "--help")
        assert r.code == 0 and "Examples:" in r.out


# Every command that takes -t rejects a t the model cannot split (shards_rules.require_tp), and
# a sequence that sequence parallelism cannot split t ways (activations.sp_seq_problem).
BAD_T = [
    (["ep", "--ep", "8", "-m", "deepseek-v3", "-t", "256"],
     "num_attention_heads=128 is not divisible by t=256"),
    (["cp", "--cp", "4", "-t", "3", "-m", "qwen3.8"],
     "intermediate_size=17408 is not divisible by t=3"),
    (["pipeline", "--pp", "4", "-t", "3", "-m", "qwen3.8"], "is not divisible by t=3"),
    (["dp", "--dp", "8", "-t", "3", "-m", "qwen3.8"], "is not divisible by t=3"),
    (["zero", "--dp", "8", "-t", "3", "-m", "qwen3.8"], "is not divisible by t=3"),
    (["layout", "-t", "3", "-m", "qwen3.8", "--no-sp"], "is not divisible by t=3"),
    (["pipeline", "--pp", "4", "-t", "8", "-s", "4097", "--sp", "-m", "qwen3.8"],
     "seq/cp=4097 is not divisible by t=8: sequence parallelism"),
    (["layout", "-t", "8", "-s", "4097", "--sp", "-m", "qwen3.8"],
     "seq/cp=4097 is not divisible by t=8: sequence parallelism"),
    (["memory", "-t", "8", "-s", "4097", "--sp", "-m", "qwen3.8", "--activations", "paper"],
     "seq/cp=4097 is not divisible by t=8: sequence parallelism"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"), BAD_T, ids=lambda a: " ".join(a) if isinstance(a, list) else ""
)
def test_every_command_rejects_a_t_the_model_cannot_split(cli, args, message):
    r = cli(*args)
    assert r.code == 1, (r.out, r.err)
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]


def test_pipeline_without_sp_accepts_any_seq(cli):
    r = cli(
        "pipeline", "--pp", "4", "-t", "8", "-s", "4097", "--no-sp", "-m", "qwen3.8", "-f", "json"
    )
    assert r.code == 0, r.err


# The Megatron-Bridge 26.04.01 DeepSeek-V3 GB200 row of tpcalc/validation/runs.yaml (256 GPUs,
# TP1 PP4 VP4 EP64, mbs 1, GBS 4096, MXFP8; recipe: flex dispatcher with HybridEP, pipeline
# layout "Et*4|(t*4|)*14tmL", recompute_modules mlp), as `tpcalc layout` options.
DSV3_GB200 = ["layout", "-m", "deepseek-v3", "--hardware", "gb200", "--gpus-per-node", "64",
              "--pp", "4", "--vpp", "4", "--dp", "64", "--ep", "64", "--zero", "1",
              "--schedule", "interleaved", "--microbatches", "64", "--dtype", "fp8",
              "--recompute", "none", "--recompute-modules", "mlp"]  # fmt: skip


def test_layout_takes_a_recipes_dispatcher_and_pipeline_layout(cli):
    """--moe-dispatcher flex and --pipeline-layout reach the step time as in tpcalc validate:
    the same row priced both ways gives the same tokens/s/GPU, and each is echoed."""
    from tpcalc.reports.validate_time import load_runs, outcomes

    row = next(r for r in load_runs() if r["id"] == "mbridge-26.04.01-deepseekv3-gb200-256-mxfp8")
    (validated,), _ = outcomes([row])
    args = [*DSV3_GB200, "--moe-dispatcher", "flex", "--pipeline-layout", "Et*4|(t*4|)*14tmL"]
    r = cli(*args, "--format", "json")  # validate prices link latency: so does this
    assert r.code == 0, r.err
    total = {row["dimension"]: row for row in json.loads(r.out)}["total"]
    assert total["tokens_per_s_per_gpu"] == pytest.approx(
        validated.step.tokens_per_s_per_gpu, rel=1e-12
    )
    assert (total["ep_dispatch"], total["stage_layers"]) == ("node-aware", "4×15+1")
    # the NCCL dispatcher sends all 8 copies of a token, k·(N−1)/N of them off the node, the
    # node-aware one a token once per remote node (roofline.dispatch_time_s): on 8-GPU nodes
    # the EP group spans 8 nodes and the flex dispatch takes less time
    eight = [a if a != "64" or i != DSV3_GB200.index("--gpus-per-node") + 1 else "8"
             for i, a in enumerate(DSV3_GB200)]  # fmt: skip
    nccl = {row["dimension"]: row for row in json_rows(cli, *eight)}
    flex = {row["dimension"]: row for row in json_rows(cli, *eight, "--moe-dispatcher", "flex")}
    assert (nccl["total"]["ep_dispatch"], nccl["total"]["stage_layers"]) == ("all-to-all", "even")
    assert flex["ep"]["comm_time_s"] < nccl["ep"]["comm_time_s"]
