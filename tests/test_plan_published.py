"""The planner against published layouts (issue 11 §3), each row with its source.

The whole table (one plan per published run, minutes) is tools/plan_markdown.py's; here a
representative subset runs the real planner, and the checks' logic and the feasibility verdicts
(which need no planner) are tested on their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace

from tpcalc.calc.pipeline.schedule import exposed_sends
from tpcalc.choices import Schedule, StateRecipe
from tpcalc.reports.plan_published import (
    WITHIN_RATIO,
    Check,
    Pick,
    Published,
    check,
    choice,
    choice_text,
    completion_pins,
    engine_planner,
    gap_to,
    published_items,
)


def _item(run_id: str) -> Published:
    items, _ = published_items({run_id})
    assert len(items) == 1, run_id
    return items[0]


def _echo(ratio: float):
    """A stand-in planner whose only layout is the published one, ``ratio`` times as fast."""

    def planner(item: Published) -> Pick:
        c = item.case
        from tpcalc.calc.time.step import step_time
        from tpcalc.catalog import load_hardware, load_model

        st = step_time(load_model(c.model), load_hardware(c.hardware), c.layout, c.run, c.options)
        return Pick((choice(c.layout, c.run),), (st.step_time_s * ratio,), (st,), 10)

    return planner


def test_the_checks_read_rank_gap_and_speed():
    item = _item("nemo-24.07-gpt3-5b-h100-64")
    same = check(item, _echo(1.0))
    assert same.feasible and same.rank == 1 and same.gap_ratio == 0.0 and same.holds
    # A pick 10% faster than the published step: rank 2 (the pick is faster), still in the top k.
    faster = check(item, _echo(1 / 1.1))
    assert faster.rank == 2 and faster.gap_ratio == pytest.approx(0.1) and faster.holds
    # A pick slower than the published layout breaks check 3 (the planner missed it).
    slower = check(item, _echo(1.02))
    assert slower.rank == 1 and not slower.pick_as_fast and not slower.holds
    assert WITHIN_RATIO == 0.05  # issue 11 §3: "within 5% of the best predicted step time"


def test_a_published_layout_beyond_the_top_k_and_5_percent_fails_and_says_why():
    item = _item("nemo-24.07-gpt3-5b-h100-64")
    base = check(item, _echo(1.0))
    ten = tuple(base.published_step_s / 1.2 for _ in range(10))
    other = {**choice(item.case.layout, item.case.run), "TP": 2, "DP": 32}

    def planner(_: Published) -> Pick:
        return Pick((other,) * 10, ten, (base.published,) * 10, 10)

    ch = check(item, planner)
    assert ch.rank is None and ch.gap_ratio == pytest.approx(0.2) and not ch.holds
    assert "the pick changes TP 1 -> 2, DP 64 -> 32" in ch.why()


# NVIDIA NeMo performance summary, NeMo 24.07 (NVIDIA/NeMo docs/source/performance/
# performance_summary.md @ 8e3d65d), Nemotron-340B on 128 H100 (FP8): TP8 PP8 VP12 DP2 per the
# table. Its launcher config keeps Apex DistributedFusedAdam's state and gradient buffer in BF16
# (optim.dtype, optim.grad_sync_dtype; NeMo then stores no master copy): 2 + 2 + 4/2 B per
# parameter, where the Megatron default 2 + 2 + 12/2 would need 80.4 GB of the 80 GB card (no
# dropout masks: the same config trains without dropout, configs/models/nemotron4-340b.yaml).
def test_nemotron_340b_fits_with_its_launchers_bf16_optimizer_states():
    item = _item("nemo-24.07-nemotron-340b-h100-128")
    assert item.memory_case.run.recipe is StateRecipe.bf16_states
    ch = check(item, _echo(1.0))
    assert ch.feasible and ch.memory_bytes <= ch.capacity_bytes == 80e9
    zero16 = replace(
        item, memory_case=replace(
            item.memory_case, run=replace(item.memory_case.run, recipe=StateRecipe.zero16)
        ),
    )  # fmt: skip
    over = check(zero16, _echo(1.0))
    assert not over.feasible and "needs 80.4 GB per rank of 80 GB" in over.why()
    params = over.memory_bytes - ch.memory_bytes  # (2 + 2 + 12/2) - (2 + 2 + 4/2) = 4 B each
    assert params / 4 == pytest.approx(5.77e9, rel=1e-3)  # the rank's 5.77 B parameters


# Megatron-Bridge 25.11 performance summary, Qwen3-30B-A3B on 16 H100 (FP8-CS): TP1 PP2 VP24 EP8
# mbs 2, no recompute. Megatron-Core (core_v0.13.0 on; every Megatron-Bridge table runs a later
# one) weights each expert's output by its router probability inside the expert's activation,
# so the token combine keeps no expert output (validate_time.FRAMEWORK["moe_probs_in_act"]). With
# the combine-side weighting the published layout would need 85.1 GB of the 80 GB card (its loss
# priced as the recipe runs it, Transformer Engine's: recipe.loss): one [tokens·k, h] BF16 expert
# output per MoE layer and micro-batch in flight.
def test_a_megatron_bridge_moe_run_keeps_no_expert_output():
    from tpcalc.calc.pipeline.schedule import in_flight_chunks
    from tpcalc.catalog import load_model

    item = _item("mbridge-25.11-qwen3-30b-a3b-h100-sxm-16-fp8-cs")
    run = item.memory_case.run
    assert run.memory.moe_probs_in_act
    ch = check(item, _echo(1.0))
    assert ch.feasible and ch.memory_bytes <= ch.capacity_bytes == 80e9
    memory = replace(run.memory, moe_probs_in_act=False)
    combine = replace(item, memory_case=replace(item.memory_case, run=replace(run, memory=memory)))
    over = check(combine, _echo(1.0))
    assert not over.feasible and "needs 85.2 GB per rank of 80 GB" in over.why()
    spec, layout = load_model("qwen3-30b-a3b"), item.memory_case.layout
    # the last rank, the most loaded either way: its chunks in flight, one layer each (48 / 48)
    chunks = in_flight_chunks(run.schedule, layout.pp, run.microbatches, run.vpp, layout.pp - 1)
    assert spec.num_hidden_layers == layout.pp * run.vpp
    tokens = run.seq * run.micro_batch // (layout.tp * layout.cp)
    expert_output = tokens * spec.num_experts_per_tok * spec.hidden_size * 2  # BF16
    assert over.memory_bytes - ch.memory_bytes == chunks * expert_output


# Megatron-Bridge 25.11 performance summary, GPT-OSS-120B on 64 B200 (BF16): TP1 EP8 mbs 4. The
# recipe preset at the summary's own commit (gpt_oss_workload_base_configs.py @ 5776a6d,
# GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_BASE_CONFIG) sets EP64, so none of its options is applied
# (validate_time.recipe_options) and the layout is priced without its recompute modules
# [layernorm, moe_act]; the 26.04.01 preset for the printed EP8 sets the same modules. It fits
# with the loss its launcher runs, Transformer Engine's (recipe.loss: 2 B per logit); priced with
# tpcalc's default FP32 copy (4 B) it would not, and the why column says which options were left
# out.
def test_an_infeasible_layout_says_which_preset_options_were_left_out():
    from tpcalc.catalog import load_hardware, load_model

    item = _item("mbridge-25.11-gpt-oss-120b-b200-64-bf16")
    run = item.memory_case.run
    assert run.memory.recompute_modules == () and run.memory.loss_kernel == "te"
    fits_te = check(item, _echo(1.0))
    assert fits_te.feasible and "recipe preset" not in fits_te.why()
    fp32 = replace(run, memory=replace(run.memory, loss_kernel="fp32-copy"))
    over = check(replace(item, memory_case=replace(item.memory_case, run=fp32)), _echo(1.0))
    assert not over.feasible
    said = (
        "needs 181.2 GB per rank of 180 GB; the recipe preset sets expert_model_parallel_size 64 "
        "where the row prints 8, so its options are not applied, among them recompute_modules "
        "layernorm,moe_act"
    )
    assert said in over.why()
    # the FP32 copy holds 2 B more per logit of the one rank's micro-batch (PP1, TP1)
    tokens = run.seq * run.micro_batch
    vocab = load_model("gpt-oss-120b").vocab_size
    assert over.memory_bytes - fits_te.memory_bytes == 2 * tokens * vocab
    # with the preset's modules the printed layout fits the card under the FP32 copy too
    memory = replace(fp32.memory, recompute_modules=("layernorm", "moe_act"))
    kept = replace(item, memory_case=replace(item.memory_case, run=replace(fp32, memory=memory)))
    fits = check(kept, _echo(1.0))
    assert fits.feasible and fits.memory_bytes < load_hardware("b200").memory_bytes.value
    assert round(fits.memory_bytes / 1e9, 1) == 161.2  # README, printed to 0.1 GB
    # a row whose preset is applied says nothing of it
    assert _item("mbridge-26.04.01-gpt-oss-120b-b200-64-bf16").preset_note is None


# Megatron-Bridge 26.04.01 performance summary, Llama 3.1 405B on 256 GB200 (MXFP8): PP16 VP8 is
# 128 virtual stages for 126 decoder layers. The recipe counts the embedding and the loss as
# layers (recipes/llama/llama3.py llama31_405b_pretrain_config @ 21d102f, lines 1146-1147,
# recorded in runs.yaml), one slot per virtual stage, and so does the check: feasible at 175.3 GB
# of the 186 GB card (174.9 GB with BF16 weights; its MXFP8 primary weights, fp8_param_gather,
# keep both copies and their E8M0 scales, 1/16 B per weight more: tests/test_fp8_params.py).
# Without those two options the even split refuses the layout.
def test_llama31_405b_vp8_is_feasible_with_the_recipes_accounted_split():
    from msgspec.structs import replace

    item = _item("mbridge-26.04.01-llama3-1-405b-gb200-256-mxfp8")
    assert item.case.options.embedding_in_split and item.case.options.loss_in_split
    ch = check(item, _echo(1.0))
    assert ch.feasible, ch.why()
    assert ch.memory_bytes / 1e9 == pytest.approx(175.3, abs=0.05)
    even = replace(item.case.options, embedding_in_split=False, loss_in_split=False)
    item_even = replace(
        item, case=replace(item.case, options=even),
        memory_case=replace(item.memory_case, options=even),
    )  # fmt: skip
    ch_even = check(item_even, _echo(1.0))
    assert not ch_even.feasible
    assert "pp·vpp=128 model chunks but there are only num_hidden_layers=126" in ch_even.why()


# Megatron-Bridge 26.02.01, Llama 3 70B on 64 GB200 FP8 with Megatron FSDP (fsdp column 64) and
# 40 layers' activations offloaded to the host (recipe cpu_offloading_num_layers=40): priced
# with both, as the source states them.
def test_stated_memory_options_are_applied():
    item = _item("mbridge-26.02.01-llama3-70b-gb200-64-fp8")
    assert int(item.memory_case.layout.zero) == 3
    assert item.memory_case.run.memory.offload_layers == 40
    assert int(item.case.layout.zero) == 3  # tpcalc validate times it as ZeRO-3 too
    assert "Megatron FSDP (priced as ZeRO-3)" in item.unmodelled


# --- the real planner on a representative subset ------------------------------------------
# NeMo 24.07 performance summary (commit 8e3d65d), GPT3-5B on 64 H100, FP8, seq 2048, global
# batch 2048: TP1 PP1 DP64, micro-batch 4.
@pytest.mark.parametrize("run_id", ["nemo-24.07-gpt3-5b-h100-64"])
def test_published_choice_checks_hold(run_id):
    ch = check(_item(run_id), engine_planner())
    assert ch.feasible, ch.why()
    assert ch.in_top_or_close, ch.why()
    assert ch.pick_as_fast, ch.why()


def test_check_holds_means_all_three():
    ch: Check = check(_item("nemo-24.07-gpt3-5b-h100-64"), _echo(1.0))
    assert ch.holds == (ch.feasible and ch.in_top_or_close and ch.pick_as_fast)


# Megatron-Bridge 26.02.01, DeepSeek-V3 on 256 GB200 (MXFP8): the recipe places the layers by
# hand ("Et*4|(t*4|)*14tmL", recorded in runs.yaml), which the planner does not search. Where the
# published layout is predicted faster than the pick, the table says which options did it.
def test_a_published_layout_faster_than_the_pick_says_what_the_planner_does_not_search():
    item = _item("mbridge-26.02.01-deepseekv3-gb200-256-mxfp8")
    assert item.case.options.chunk_layers is not None
    base = check(item, _echo(1.0))
    slower = tuple(base.published_step_s * 1.003 for _ in range(10))

    def planner(_: Published) -> Pick:
        return Pick(
            (choice(item.case.layout, item.case.run),) * 10, slower, (base.published,) * 10, 10
        )

    ch = check(item, planner)
    assert not ch.pick_as_fast
    assert "predicted 0.3% faster than the pick" in ch.why()
    assert "options the planner does not search (a hand-set stage layout)" in ch.why()


# Megatron-Bridge 25.11, Llama 3 70B on 64 GB200 FP8 with Megatron FSDP and 40 layers'
# activations offloaded (the preset differs from the row only in the global batch, so its
# options apply): micro-batch 2 fits only with the offload. The planner is asked the same
# question, offload included, so it can take micro-batch 2 too and the three checks hold.
def test_the_planner_gets_the_stated_offload_and_finds_the_published_micro_batch():
    item = _item("mbridge-25.11-llama3-70b-gb200-64-fp8-cs")
    assert item.memory_case.run.memory.offload_layers == 40
    ch = check(item, engine_planner())
    assert ch.holds, ch.why()


# --- the planner held to the run's ZeRO stage and overlaps ---------------------------------
# NVIDIA's recipes fix the ZeRO stage (the distributed optimizer, or Megatron FSDP) and which
# communication runs under compute: where check 2 fails and the pick changes one of them, the
# checks ask the planner again with the run's settings pinned.
def _faster_with(item: Published, ratio: float, **changes) -> Pick:
    base = check(item, _echo(1.0))
    other = {**choice(item.case.layout, item.case.run, item.case.options), **changes}
    return Pick(
        (other,) * 10, tuple(base.published_step_s / ratio for _ in range(10)),
        (base.published,) * 10, 10,
    )  # fmt: skip


def test_the_planner_held_to_the_published_zero_stage_is_asked_and_said():
    item = _item("nemo-24.07-gpt3-5b-h100-64")  # published ZeRO-1 (distributed optimizer)
    asked = []

    def held(it: Published) -> Pick:
        asked.append(it)
        base = check(it, _echo(1.0))
        # held to ZeRO-1: one layout 3% faster, then the published one
        times = (base.published_step_s / 1.03, base.published_step_s)
        mine = choice(it.case.layout, it.case.run, it.case.options)
        return Pick((mine, mine), times, (base.published,) * 2, 10)

    ch = check(item, lambda it: _faster_with(it, 1.2, ZeRO=3), held)
    assert asked == [item] and not ch.holds and ch.held is not None
    assert ch.held_in_top_or_close and ch.holds_when_held
    assert (
        "held to ZeRO-1 (the recipe's distributed optimizer) and the run's overlaps (dp), the "
        "published layout ranks 2, +3.0% from that best: check 2 holds" in ch.why()
    )


def test_the_held_planner_is_not_asked_where_the_pick_keeps_the_stage_or_check_2_holds():
    item = _item("nemo-24.07-gpt3-5b-h100-64")

    def never(_: Published) -> Pick:
        raise AssertionError("the held planner was asked")

    same_stage = check(item, lambda it: _faster_with(it, 1.2, TP=2, DP=32), never)
    assert same_stage.held is None and not same_stage.holds_when_held
    close = check(item, lambda it: _faster_with(it, 1.04, ZeRO=3), never)
    assert close.in_top_or_close and close.held is None


def test_the_held_planner_is_asked_where_the_pick_turns_an_overlap_on():
    """Megatron-Bridge 26.04.01, Qwen3-30B-A3B on 8 GB200: EP8 with the all-to-all exposed (the
    recipe leaves moe_a2a_overlap off). A pick that differs only by overlapping it is asked
    again with the run's settings pinned, and the answer is said."""
    from tpcalc.reports.plan_published import published_settings

    item = _item("mbridge-26.04.01-qwen3-30b-a3b-gb200-8-mxfp8")
    assert published_settings(item) == {
        "zero": [1], "tp_comm_overlap": [False], "cp_overlap": [True], "ep_overlap": [False],
        "pp_overlap": [True], "dp_overlap": [True],
    }  # fmt: skip
    asked = []

    def held(it: Published) -> Pick:
        asked.append(it)
        base = check(it, _echo(1.0))
        mine = choice(it.case.layout, it.case.run, it.case.options)
        return Pick((mine,), (base.published_step_s,), (base.published,), 10)

    ch = check(item, lambda it: _faster_with(it, 1.25, overlap="ep,dp"), held)
    assert asked == [item] and ch.holds_when_held and not ch.holds
    assert "the pick changes EP overlap on" in ch.why()
    assert "held to ZeRO-1 (the recipe's distributed optimizer) and the run's overlaps (dp), " in (
        ch.why()
    )


def test_overlap_changes_are_named_only_for_dimensions_both_split():
    from tpcalc.reports.plan_published import overlap_changes

    mine = {"TP": 2, "CP": 1, "EP": 8, "PP": 1, "DP": 4, "overlap": "tp,dp"}
    theirs = {"TP": 1, "CP": 1, "EP": 8, "PP": 1, "DP": 8, "overlap": "ep,dp"}
    # TP overlap is no change (the pick has no TP); EP overlap is turned on
    assert overlap_changes(mine, theirs) == ["EP overlap on"]
    assert overlap_changes(theirs, mine) == ["EP overlap off"]
    assert overlap_changes({**mine, "overlap": "none"}, {**mine, "overlap": "none"}) == []


# NeMo 24.07 performance summary (NVIDIA/NeMo @ 8e3d65d), Llama 2 13B on 16 H100, FP8, seq 4096:
# TP1 PP4 VP10 DP4, micro-batch 1, distributed optimizer. Its interleaved fill and drain walk
# all 40 virtual stages, so it waits on 2(p·v − 1) = 78 sends a step
# (``schedule.exposed_sends``); the planner's free best has no pipeline (ZeRO-3 at PP1, no sends)
# and is more than 5% ahead, while held to the run's ZeRO-1 and overlaps the published layout is
# within 5% of the best: all three checks hold there.
def test_llama2_13b_holds_held_to_its_stage_as_its_sends_cost_time():
    item = _item("nemo-24.07-llama2-13b-h100-16")
    st = check(item, _echo(1.0)).published
    m = item.case.run.microbatches
    assert exposed_sends(Schedule.interleaved, 4, m, 10) == 78
    # each exposed send costs what each of the step's sends does: 2(m·v + p − 1) in all
    every = 2 * (m * 10 + 4 - 1)
    assert st.pp_exposed_time_s / 78 == pytest.approx(st.pp_comm_time_s / every, rel=1e-12)
    ch = check(item, engine_planner(), engine_planner(hold_published=True))
    assert not ch.holds and ch.pick.choices[0]["PP"] == 1
    assert ch.holds_when_held, ch.why()


# --- the MoE dispatcher ---------------------------------------------------------------------
# Megatron-Bridge 26.04.01, Qwen3-30B-A3B on 16 H100 (FP8): the recipe's dispatcher is flex
# (moe_token_dispatcher_type, HybridEP; recorded in runs.yaml), so `tpcalc validate` prices the
# published layout's dispatch node-aware across its two nodes (EP 16). The planner is asked the
# same question: every candidate timed node-aware too, its memory with the same dispatcher. The
# 26.02.01 run of the same model keeps NCCL's all-to-all, and so does its planner.
@pytest.mark.parametrize(
    ("run_id", "flex"),
    [("mbridge-26.04.01-qwen3-30b-a3b-h100-sxm-16-fp8", True),
     ("mbridge-26.02.01-qwen3-30b-a3b-h100-sxm-16-fp8", False)],
)  # fmt: skip
@pytest.mark.parametrize("hold_published", [False, True])
def test_the_planner_gets_the_rows_dispatcher(monkeypatch, run_id, flex, hold_published):
    from types import SimpleNamespace

    item = _item(run_id)
    assert item.case.options.ep_node_dedup is flex
    asked = []

    def fake_plan(request, progress=None):
        asked.append(request)
        return SimpleNamespace(top=())

    monkeypatch.setattr("tpcalc.calc.plan.search.plan", fake_plan)
    engine_planner(hold_published=hold_published)(item)
    (request,) = asked
    assert request.time_options.ep_node_dedup is flex
    assert request.memory.moe_dispatcher == ("flex" if flex else "alltoall")
    assert request.time_options.overlap == item.case.options.overlap


# --- the loss kernel each recipe runs (recipe.loss) ----------------------------------------
# Every Megatron-Bridge performance launcher sets cross_entropy_fusion_impl "te"
# (scripts/performance/utils/overrides.py _set_common_perf_overrides @ 5776a6d line 56;
# perf_recipes/_common.py _benchmark_common) with the fusion on: Transformer Engine's
# cross-entropy, 2 B per logit. NeMo 24.07 runs Megatron-Core's own (fused where the launcher
# config sets cross_entropy_loss_fusion, else unfused): 6 B. A row with no recipe keeps tpcalc's
# FP32 copy (4 B, seed 003 §7.3.4). The published layout is judged with it, and the planner is
# asked the question with it.
@pytest.mark.parametrize(
    ("run_id", "kernel"),
    [("mbridge-25.11-llama3-8b-h100-sxm-8-fp8-cs", "te"),
     ("mbridge-26.04.01-gpt-oss-120b-b200-64-bf16", "te"),
     ("nemo-24.07-llama3-8b-h100-8", "megatron"),
     ("nemo-24.07-gpt3-5b-h100-64", "megatron"),
     ("llama3-paper-405b-h100-16384-cp1", "fp32-copy")],
)  # fmt: skip
def test_the_recipes_loss_kernel_prices_the_layout_and_the_question(monkeypatch, run_id, kernel):
    from types import SimpleNamespace

    item = _item(run_id)
    assert item.memory_case.run.memory.loss_kernel == kernel
    asked = []

    def fake_plan(request, progress=None):
        asked.append(request)
        return SimpleNamespace(top=())

    monkeypatch.setattr("tpcalc.calc.plan.search.plan", fake_plan)
    engine_planner()(item)
    assert asked[0].memory.loss_kernel == kernel


def test_the_loss_kernel_moves_the_last_stage_by_its_bytes_per_logit():
    """Llama 3 8B on 8 H100 (Megatron-Bridge 25.11, TP1 PP1): Transformer Engine's loss holds
    2 B per logit where the FP32 copy holds 4 and Megatron-Core's 6, on its one stage."""
    from tpcalc.catalog import load_model

    item = _item("mbridge-25.11-llama3-8b-h100-sxm-8-fp8-cs")
    run = item.memory_case.run

    def with_kernel(kernel: str) -> float:
        memory = replace(run.memory, loss_kernel=kernel)
        changed = replace(item.memory_case, run=replace(run, memory=memory))
        return check(replace(item, memory_case=changed), _echo(1.0)).memory_bytes

    logits = run.seq * run.micro_batch * load_model("llama3-8b").vocab_size
    te, fp32, megatron = with_kernel("te"), with_kernel("fp32-copy"), with_kernel("megatron")
    assert check(item, _echo(1.0)).memory_bytes == te
    assert fp32 - te == 2 * logits and megatron - fp32 == 2 * logits


# --- held-out recipes (tpcalc/validation/heldout.yaml, never fitted) -----------------------
# Megatron-Bridge performance summary @ 4ab94dfad, 26.08, Qwen3-30B-A3B on 8 GB200, MXFP8, seq
# 4096, global batch 512: TP1 PP1 EP8, micro-batch 4, the layout of the 26.04.01 run of
# runs.yaml, now with the all-to-all overlapped (its perf_recipes function). Measured 39,936
# against 26,112 tokens/s/GPU: the option the planner turns on for the 26.04.01 question. With
# no expert output kept (Megatron-Core's probabilities in the activation) the planner's best is
# that layout at EP4, 0.4% ahead; the 26.08 layout ranks second.
HELDOUT = Path(__file__).resolve().parents[1] / "tpcalc" / "validation" / "heldout.yaml"


def test_a_newer_recipe_is_next_to_the_planners_pick_where_the_older_one_was_not():
    old = check(_item("mbridge-26.04.01-qwen3-30b-a3b-gb200-8-mxfp8"), engine_planner())
    (new_item,), _ = published_items({"mbridge-26.08-qwen3-30b-a3b-gb200-8-mxfp8"}, HELDOUT)
    new = check(new_item, engine_planner())
    assert not old.in_top_or_close and "ep" in str(old.pick.choices[0]["overlap"])
    assert new.holds and new.rank == 2, new.why()
    best, published = new.pick.choices[0], new.published_choice
    assert {k for k in best if best[k] != published.get(k)} == {"EP"}
    assert 0 < gap_to(new.pick, new.published_step_s) < 0.005
    assert new.best_step_s == pytest.approx(old.best_step_s, rel=1e-12)  # the same question


# Megatron-Bridge model card, Qwen3-30B-A3B on 16 H100 (BF16): EP16 DP16, micro-batch 1 (4,096
# tokens per rank, as the H100 MoE constant was fitted). The planner's best is that layout. Its
# picks took EP 1, ZeRO-3, full recompute and micro-batch 16 (+60.4%) while the constant shrank
# per token past its fitted runs; it now grows with the tokens (roofline.moe_layer_overhead).
def test_the_planner_keeps_expert_parallelism_where_the_moe_constant_stops_shrinking():
    (item,), _ = published_items({"mbcard-qwen3-30b-a3b-h100-sxm-16-bf16"}, HELDOUT)
    ch = check(item, engine_planner())
    assert ch.holds and ch.rank == 1, ch.why()
    assert ch.pick.choices[0]["EP"] == 16 and ch.pick.choices[0]["mbs"] == 1


# --- choices the source does not print -------------------------------------------------------
# The Llama 3 paper (arXiv 2407.21783v1, Table 4 and section 3.3.2) prints TP 8, CP 1, PP 16 on
# 8,192 and 16,384 H100 and says the schedule is an interleaved 1F1B variant, but not its virtual
# stages or micro-batch size (runs.yaml `unstated`). Priced at tpcalc's defaults (no interleaving)
# the checks compared the planner with a layout the run did not use; completed, they ask whether
# the printed dimensions are among the best.
def test_unstated_choices_are_searched_and_every_printed_one_pinned():
    item = _item("llama3-paper-405b-h100-16384-cp1")
    assert set(item.unstated) == {"vpp", "micro_batch", "recompute"}
    pins = completion_pins(item)
    assert pins["tp"] == [8] and pins["cp"] == [1] and pins["pp"] == [16] and pins["dp"] == [128]
    assert pins["ep"] == [1] and pins["zero"] == [1] and pins["schedule"] == ["interleaved"]
    assert not {"vpp", "micro_batch", "recompute", "recompute_modules"} & set(pins)
    # A row that prints everything is held to all of it.
    full = completion_pins(_item("nemo-24.07-gpt3-5b-h100-64"))
    assert full["micro_batch"] == [4] and full["vpp"] == [1] and full["recompute"] == ["none"]


def test_a_completed_layout_is_the_published_one_the_checks_read():
    item = _item("llama3-paper-405b-h100-8192-cp1")
    base = check(item, _echo(1.0))
    assert base.completed is None and base.published_choice["VP"] == 1  # validate's pricing
    done = Pick((dict(base.published_choice, VP=7),), (base.published_step_s * 0.8,),
                (base.published,), 10, (60e9,))  # fmt: skip
    ch = check(item, _echo(0.8), completer=lambda _: done)
    assert ch.completed is done and ch.published_step_s == done.step_times_s[0]
    assert ch.memory_bytes == 60e9 and ch.feasible and ch.holds
    assert "VP7*" in ch.published_text() and "mbs1*" in ch.published_text()
    assert "TP8 " in ch.published_text()  # printed: no mark
    # No completion fits: the published layout is infeasible, and the reason says what was searched.
    none = check(item, _echo(1.0), completer=lambda _: Pick((), (), (), 10))
    assert not none.feasible and "vpp, micro_batch, recompute searched" in (none.problem or "")
    assert none.published_text() == "no completion fits"


def test_the_llama3_paper_layout_completed_by_the_planner_holds():
    item = _item("llama3-paper-405b-h100-8192-cp1")
    ch = check(item, engine_planner(), completer=engine_planner(complete=True))
    assert ch.completed is not None and ch.holds, ch.why()
    got = ch.published_choice
    assert (got["TP"], got["CP"], got["PP"], got["DP"]) == (8, 1, 16, 64)
    assert isinstance(got["VP"], int) and got["VP"] > 1  # interleaved, as section 3.3.2 says


def test_an_unknown_unstated_dimension_is_a_config_error(tmp_path: Path):
    import yaml

    from tpcalc.errors import ConfigError
    from tpcalc.reports.validate_time import load_runs

    row = next(r for r in load_runs() if r["id"] == "llama3-paper-405b-h100-8192-cp1")
    row["unstated"]["choices"] = ["vpp", "virtual_stages"]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [row]}))
    with pytest.raises(ConfigError, match="unknown dimension 'virtual_stages'; valid: tp"):
        published_items(runs=path)


HELDOUT = Path(__file__).parents[1] / "tpcalc" / "validation" / "heldout.yaml"


def test_the_held_planner_keeps_to_what_the_runs_software_offered():
    # Megatron-LM of April 2021 (heldout.yaml, Narayanan et al. 2021 Table 1): no selective
    # recompute, SP, CP or ZeRO; its rows state that as `software.pins`, and the planner held to
    # the run's settings searches only those values, on top of its ZeRO stage and overlaps
    from tpcalc.reports.plan_published import published_settings

    items, _ = published_items({"megatron-lm-2021-gpt-1t-a100-3072"}, HELDOUT)
    (item,) = items
    pins = published_settings(item)
    assert pins["recompute"] == ["none", "full"] and pins["sp"] == [False]
    assert pins["zero"] == [0] and pins["cp"] == [1]
    ch = check(item, engine_planner(), engine_planner(hold_published=True))
    assert not ch.in_top_or_close and ch.held is not None
    for c in ch.held.choices:
        assert c["recompute"] in ("none", "full") and c["ZeRO"] == 0 and c["CP"] == 1
    assert "its software's options (recompute none or full" in ch.why()


def test_an_unknown_software_dimension_is_a_config_error(tmp_path: Path):
    import yaml

    from tpcalc.errors import ConfigError
    from tpcalc.reports.validate_time import load_runs

    row = next(r for r in load_runs(HELDOUT) if r["id"].startswith("megatron-lm-2021-gpt-1.7b"))
    row["software"]["pins"]["flash"] = [False]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [row]}))
    with pytest.raises(ConfigError, match="software: unknown dimension 'flash'; valid: tp"):
        published_items(runs=path)


def test_the_table_names_a_schedule_megatron_would_not_pick_for_the_virtual_stages():
    """The layout columns name DualPipe, ZB-H1 or GPipe (the planner searches them; Megatron's
    recipes run 1F1B, or interleaved with virtual stages, which the VP column already says)."""
    c = _item("mbridge-25.11-deepseekv3-w-mtp-b200-256-fp8-mx").case
    published = choice(c.layout, c.run, c.options)
    assert published["schedule"] == "1f1b" and "1f1b" not in choice_text(published)
    dual = {**published, "schedule": "dualpipe"}
    assert choice_text(dual) == choice_text(published) + " dualpipe"
    interleaved = {**published, "VP": 2, "schedule": "interleaved"}
    assert "interleaved" not in choice_text(interleaved)


def test_a_rows_stated_memory_techniques_price_the_published_layout():
    """The DeepSeek-V3 report states its memory options in words (§3.3.2 FP8 activations,
    §3.3.3 BF16 moments): the row's ``memory_techniques`` give them to the memory the checks
    price, as layouts.yaml prices the same run; an unknown option is a ConfigError."""
    from tpcalc.errors import ConfigError
    from tpcalc.reports.plan_published import published
    from tpcalc.reports.validate_time import heldout_path, load_runs

    (row,) = [r for r in load_runs(heldout_path()) if r["id"] == "deepseek-v3-report-h800-2048"]
    item = published(row)
    assert isinstance(item, Published)
    run = item.memory_case.run
    assert run.recipe is StateRecipe.bf16_moments
    assert run.memory.fp8_cache and run.memory.moe_probs_in_act
    assert item.case.run.recipe is not StateRecipe.bf16_moments  # time reads none of them
    bad = {**row, "memory_techniques": {"fp8_everything": True}}
    with pytest.raises(ConfigError, match="unknown option 'fp8_everything'; valid: fp8_cache"):
        published(bad)
    bad = {**row, "memory_techniques": {"state_recipe": "fp4-everything"}}
    with pytest.raises(ConfigError, match="state_recipe 'fp4-everything' is not one .*zero16"):
        published(bad)


def test_a_block_recompute_row_is_judged_and_shown_as_block_recompute():
    # Megatron-Bridge 25.11, Llama 3 8B on 8 H100 (FP8-CS): recompute_granularity full,
    # recompute_method block, recompute_num_layers 5 (runs.yaml recipe). Its memory is that of
    # 5 of its 32 layers input-only (``rank_memory(block_layers=5)``), between no recompute and
    # full recompute, and the table prints it as such.
    from tpcalc.calc.plan.inverse import worst_rank_bytes
    from tpcalc.catalog import load_model
    from tpcalc.choices import Recompute

    item = _item("mbridge-25.11-llama3-8b-h100-sxm-8-fp8-cs")
    m = item.memory_case
    assert item.case.options.recompute_layers == 5 and m.run.recompute is Recompute.none
    ch = check(item, _echo(1.0))
    spec = load_model("llama3-8b")
    full = worst_rank_bytes(spec, m.layout, replace(m.run, recompute=Recompute.full))
    assert full < ch.memory_bytes < worst_rank_bytes(spec, m.layout, m.run)
    assert ch.memory_bytes == worst_rank_bytes(spec, m.layout, m.run, block=5)
    assert "ZeRO3 full 5/chunk" in ch.published_text()
    assert not item.unmodelled
