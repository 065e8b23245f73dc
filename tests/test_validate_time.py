"""`tpcalc validate`: the step-time model against published, measured runs (issue 9).

The acceptance bar: over the shipped table, dense rows mean |error| <= 8% in tokens/s/GPU and no
dense row beyond 15%. Each card's one fitted constant comes from tools/fit_time.py on the rows
named in its config; the other rows are held out.
"""

from __future__ import annotations

import json

import pytest

from tpcalc.catalog import load_hardware
from tpcalc.choices import Recompute
from tpcalc.reports.validate_time import (
    case_of,
    layout_chunk_layers,
    load_runs,
    mean_abs,
    outcomes,
    recipe_options,
    validate_report,
)


@pytest.fixture(scope="module")
def done():
    results, _ = outcomes(load_runs())
    return [o for o in results if o.error is not None]


def test_dense_rows_meet_the_bar(done):
    dense = [o.error for o in done if o.case.kind == "dense"]
    assert len(dense) >= 30  # NeMo 24.07 and Megatron-Bridge rows on H100, B200, GB200
    assert mean_abs(dense) <= 0.08
    worst = max(done, key=lambda o: abs(o.error) if o.case.kind == "dense" else 0)
    assert abs(worst.error) <= 0.15, worst.case.id


def test_held_out_dense_rows_are_as_good_as_the_fitted_ones(done):
    fitted = {
        o.case.id
        for o in done
        if o.case.id in load_hardware(o.case.hardware).performance.fitted.compute_scale.source
    }
    held_out = [o.error for o in done if o.case.kind == "dense" and o.case.id not in fitted]
    assert fitted and len(held_out) >= 20
    assert mean_abs(held_out) <= 0.08


def test_every_row_reports_its_error_and_the_summary(cli):
    r = cli("validate", "--hardware", "h100-sxm", "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    for row in rows:
        if row["measured_tokens_per_s_per_gpu"]:
            expected = row["predicted_tokens_per_s_per_gpu"] / row["measured_tokens_per_s_per_gpu"]
            assert row["error"] == pytest.approx(expected - 1)
    report = validate_report(hardware="h100-sxm")
    assert any(n.startswith("h100-sxm dense:") for n in report.notes)


def test_the_readme_summary_is_what_validate_prints():
    """README, "Step time checked against published runs": the block under `$ tpcalc validate`
    is the command's summary, line for line."""
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ tpcalc validate\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block == list(validate_report().notes)


def test_flex_dispatcher_rows_dispatch_once_per_node():
    # Megatron-Bridge recipes with moe_token_dispatcher_type flex (DeepEP / HybridEP) get the
    # node-deduplicated dispatch; the NCCL alltoall dispatcher and unknown presets do not
    by_id = {r["id"]: r for r in load_runs()}
    flex = case_of(by_id["mbridge-26.04.01-deepseekv3-b200-256-mxfp8"])
    nccl = case_of(by_id["mbridge-26.04.01-qwen3-235b-a22b-b200-256-mxfp8"])
    unknown = case_of(by_id["mbridge-25.11-qwen3-235b-a22b-b200-64-fp8-mx"])
    assert flex.options.ep_node_dedup
    assert not nccl.options.ep_node_dedup
    assert not unknown.options.ep_node_dedup


def test_pipeline_layouts_of_the_recipes_are_parsed():
    # Megatron-Core's layout grammar: '|' ends a virtual stage, 't' is a decoder layer, (..)*n
    # and x*n repeat; Megatron-Bridge's DeepSeek-V3 layout for 16 stages puts 4 layers on each
    # stage but the last, which holds 1 layer, the MTP module and the loss
    assert layout_chunk_layers("Et*4|(t*4|)*14tmL", 16) == (4,) * 15 + (1,)
    assert layout_chunk_layers("Ettt|(tt|)*2,tL", 4) == (3, 2, 2, 1)
    # MTP on a stage of its own, a stage count that is not pp·vp, or no layout: not placed
    assert layout_chunk_layers("Ettt|(tt|)*29,m|L", 32) is None
    assert layout_chunk_layers("Et*4|(t*4|)*14tmL", 32) is None
    assert layout_chunk_layers(None, 4) is None
    by_id = {r["id"]: r for r in load_runs()}
    dsv3 = case_of(by_id["mbridge-26.04.01-deepseekv3-b200-256-mxfp8"])  # PP 8, VP 2
    assert dsv3.options.chunk_layers == (4,) * 15 + (1,)


def test_every_row_echoes_its_dispatch_and_stage_split(cli):
    r = cli("validate", "--hardware", "b200", "--format", "json")
    assert r.code == 0, r.err
    rows = {row["id"]: row for row in json.loads(r.out)}
    dsv3 = rows["mbridge-26.04.01-deepseekv3-b200-256-mxfp8"]
    assert (dsv3["ep_dispatch"], dsv3["stage_layers"]) == ("node-aware", "4×15+1")
    oss = rows["mbridge-26.04.01-gpt-oss-120b-b200-64-bf16"]
    assert (oss["ep_dispatch"], oss["stage_layers"]) == ("all-to-all", "even")
    # Megatron-Bridge's Qwen3-235B-A22B recipe counts the embedding and the loss as layers
    # (recipes/qwen/qwen3_moe.py qwen3_235b_a22b_pretrain_config @ 21d102f, lines 166-167):
    # 94 + 2 = 96 slots over PP8, 12 per stage, the first and last building 11 decoder layers
    qwen = rows["mbridge-26.04.01-qwen3-235b-a22b-b200-256-mxfp8"]
    assert qwen["stage_layers"] == "11+12×6+11"


def test_recipes_that_count_the_embedding_and_loss_are_read_from_runs_yaml():
    by_id = {r["id"]: r for r in load_runs()}
    # Llama 3.1 405B on 1,024 H100, Megatron-Bridge 25.11: the library recipe's recommended
    # kwargs (recipes/llama/llama3.py llama31_405b_pretrain_config @ 5776a6d, lines 413-414)
    row = by_id["mbridge-25.11-llama3-1-405b-h100-sxm-1024-fp8-cs"]
    assert "lines 413-414" in row["recipe"]["pipeline_split"]["source"]
    c = case_of(row)
    assert c.options.embedding_in_split and c.options.loss_in_split
    # a preset that describes another layout than the printed row gives no recipe options
    # (recipe_options), so its row keeps the even split (Qwen3-235B-A22B, 25.11, 256 GB200)
    other = by_id["mbridge-25.11-qwen3-235b-a22b-gb200-256-bf16"]
    assert other["recipe"]["disagrees_with_row"] and other["recipe"]["pipeline_split"]
    assert not case_of(other).options.embedding_in_split
    # the GPT-OSS recipe does not set them
    gpt = case_of(by_id["mbridge-26.04.01-gpt-oss-120b-b200-64-bf16"])
    assert not gpt.options.embedding_in_split and not gpt.options.loss_in_split


def _fit_time_tool():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "fit_time.py"
    spec = importlib.util.spec_from_file_location("fit_time", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_fit_time_gaps_count_what_the_moe_constant_acts_on():
    """tools/fit_time.py --gaps on the 26.04.01 Qwen3-30B-A3B GB200 row (runs.yaml): 8 GPUs, TP1
    PP1 EP8, global batch 512 x 4096 tokens, measured 26,112 tokens/s/GPU."""
    tool = _fit_time_tool()
    row = next(
        g for g in tool.gaps("gb200") if g.id == "mbridge-26.04.01-qwen3-30b-a3b-gb200-8-mxfp8"
    )
    # 512 · 4096 / 8 tokens per GPU per step at 26,112 tokens/s/GPU
    assert row.measured_step_s == pytest.approx(512 * 4096 / 8 / 26112, rel=1e-12)
    # 48 MoE layers on the one stage, 16 micro-batches (512 / (DP8 · mbs4)), forward and backward
    assert row.moe_layer_passes == 48 * 16 * 2
    # mbs4 · 4096 tokens, 8 copies each (top-8); 128 experts over EP8
    assert (row.routed_copies, row.local_experts, row.cuda_graphs) == (4 * 4096 * 8, 16, True)
    assert row.per_pass_s == pytest.approx(row.missing_s / (48 * 16 * 2))


def test_fit_time_what_ifs_price_sinks_unfused_and_list_every_moe_row():
    """docs/kernel-measurements.md §7's what-ifs: --gaps --unfused-sinks prices GPT-OSS's
    attention with its scores materialised (more work, a longer step, so less missing time) and
    leaves models without sinks as they were; --errors lists every computable MoE row."""
    tool = _fit_time_tool()
    fused = {g.id: g for g in tool.gaps("b200")}
    unfused = {g.id: g for g in tool.gaps("b200", unfused_sinks=True)}
    oss = "mbridge-26.04.01-gpt-oss-120b-b200-64-bf16"
    qwen = "mbridge-26.04.01-qwen3-30b-a3b-b200-8-mxfp8"
    assert unfused[oss].predicted_step_s > fused[oss].predicted_step_s
    assert unfused[qwen].predicted_step_s == fused[qwen].predicted_step_s
    card = load_hardware("b200").performance.fitted
    shipped = {"compute_scale": card.compute_scale.value}
    shipped["moe_layer_overhead_s"] = card.moe_layer_overhead_s.value
    errors = dict(tool.moe_errors("b200", shipped))
    # the shipped constants give what `tpcalc validate` prints for the row
    done = [o for o in outcomes(load_runs())[0] if o.error is not None]
    assert errors[oss] == pytest.approx(next(o.error for o in done if o.case.id == oss), rel=1e-12)
    b200_moe = {o.case.id for o in done if (o.case.hardware, o.case.kind) == ("b200", "moe")}
    assert set(errors) == b200_moe and len(b200_moe) == 11


def test_a_preset_differing_only_in_global_batch_lends_its_options():
    # Megatron-Bridge's performance launcher takes -gb/--global_batch_size from its command line
    # and keeps the preset's other options (scripts/performance/utils/overrides.py @ 5776a6d,
    # lines 223-224), so the 25.11 rows whose preset differs only there ran the preset's options
    by_id = {r["id"]: r for r in load_runs()}
    llama = by_id["mbridge-25.11-llama3-70b-gb200-64-fp8-cs"]
    assert set(llama["recipe"]["disagrees_with_row"]) == {"global_batch_size"}
    assert recipe_options(llama)["cpu_offloading_num_layers"] == 40
    dsv3 = case_of(by_id["mbridge-25.11-deepseekv3-w-o-mtp-gb200-256-bf16"])
    assert dsv3.options.ep_node_dedup and dsv3.options.chunk_layers == (4,) * 15 + (1,)
    # a preset with another layout (EP 8 for the row's EP 32, ...) lends nothing
    other = by_id["mbridge-25.11-qwen3-235b-a22b-gb200-256-bf16"]
    assert "expert_model_parallel_size" in other["recipe"]["disagrees_with_row"]
    assert recipe_options(other) == {}


def test_recipes_stating_selective_recompute_without_modules_recompute_the_core_attention():
    # NeMo 24.07's launcher config names Megatron-Core's recompute_granularity
    # activations_checkpoint_granularity; "selective" with no module list is Megatron-Core's
    # default recompute_modules ["core_attn"], tpcalc's selective recompute (Korthikanti §5)
    by_id = {r["id"]: r for r in load_runs()}
    nemotron = by_id["nemo-24.07-nemotron-340b-h100-128"]
    assert nemotron["recipe"]["fields"]["activations_checkpoint_granularity"] == "selective"
    assert case_of(nemotron).run.recompute is Recompute.selective
    # with a module list the modules say what is recomputed, not the granularity
    gpt_oss = by_id["mbridge-26.04.01-gpt-oss-120b-b200-64-bf16"]
    assert recipe_options(gpt_oss)["recompute_granularity"] == "selective"
    run = case_of(gpt_oss).run
    assert run.recompute is Recompute.none
    assert run.memory.recompute_modules == ("layernorm", "moe_act")
    # a recipe that states no recompute
    llama = case_of(by_id["mbridge-26.02.01-llama3-70b-h100-sxm-64-fp8"])
    assert llama.run.recompute is Recompute.none and llama.run.memory.recompute_modules == ()


@pytest.mark.parametrize("card", ["h100-sxm", "b200", "gb200"])
def test_each_cards_moe_fit_tokens_are_its_fit_rows(card):
    """configs/hardware/<card>.yaml fitted.moe_fit_tokens is what tools/fit_time.py finds in the
    MoE rows it fits moe_layer_overhead_s on: s·b/cp of the 26.04.01 rows (H100: micro-batch 1 at
    seq 4096 on all three; Blackwell: 1 and 4)."""
    fitted = load_hardware(card).performance.fitted
    assert fitted.moe_fit_tokens is not None
    got = (fitted.moe_fit_tokens.low, fitted.moe_fit_tokens.high)
    assert got == _fit_time_tool().fit_tokens(card)
    assert got == ((4096, 4096) if card == "h100-sxm" else (4096, 16384))
