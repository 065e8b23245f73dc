"""Combined layouts: seed 000's Llama 3 405B and DeepSeek-V3 layouts, checks, placement, sums."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.examples import DEEPSEEK_V3, LLAMA3_405B, matching_example
from tpcalc.calc.layout.groups import (
    LayoutRun,
    MemoryTechniques,
    ParallelLayout,
    expert_dp_group,
    group_link,
    layout_problems,
    place_groups,
)
from tpcalc.calc.layout.summary import DIM_ORDER
from tpcalc.calc.links.link import Link
from tpcalc.calc.params.counts import layer_params, total_params
from tpcalc.calc.pipeline.schedule import rank_layers
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Schedule, TimeModel
from tpcalc.errors import InputError
from tpcalc.reports.layout import parallel_layout_report as layout_report
from tpcalc.terms import Report


def rows_by_dim(report: Report) -> dict:
    return {r.inputs["dimension"]: r for r in report.rows}


def example_report(example, time_model=TimeModel.roofline, **run_kwargs) -> Report:
    spec, hw = load_model(example.model), load_hardware(example.hardware)
    run = LayoutRun(seq=example.seq, microbatches=example.microbatches, **run_kwargs)
    return layout_report(spec, hw, example.layout(hw.gpus_per_node.value), run,
                         cited=example.cited, time_model=time_model)  # fmt: skip


@pytest.fixture(scope="module")
def llama405():
    return example_report(LLAMA3_405B)


@pytest.fixture(scope="module")
def llama405_fixed():
    """The seeds' convention: compute at the card's achieved 400 TFLOP/s."""
    return example_report(LLAMA3_405B, time_model=TimeModel.fixed)


@pytest.fixture(scope="module")
def deepseek():
    return example_report(DEEPSEEK_V3, schedule=Schedule.dualpipe)


def test_llama405_4d_layout(llama405):
    # seed 000 summary: Llama 3 405B [TP, CP, PP, DP] = 8 × 1 × 16 × 128 on 16,384 H100
    rows = rows_by_dim(llama405)
    sizes = [rows[d].value("group_size") for d in ("tp", "cp", "pp", "dp")]
    assert sizes == [8, 1, 16, 128]
    assert rows["total"].inputs["world_size"] == 16_384
    assert rows["tp"].value("link") == "nvlink"  # TP = 8 innermost, inside one node
    assert rows["pp"].value("link") == "ib"
    assert rows["pp"].value("stride") == 8 * 1 * 128  # PP outermost


def test_llama405_mfu_cited_beside_the_estimate(llama405_fixed):
    # seed 000 summary: BF16 MFU 41% — a measurement, shown as cited, never computed
    total = rows_by_dim(llama405_fixed)["total"]
    cited = total.get("mfu_cited_ratio")
    assert abs(cited.value - 0.41) <= 0.005
    assert "measured" in cited.label and "Table 4" in cited.source
    est = total.value("mfu_estimate_ratio")
    # the estimate can never beat achieved/peak (400 / 989.5 TFLOP/s), the compute assumption
    assert 0 < est < 400 / 989.5


def test_llama405_stage_params_per_rank(llama405):
    # the busiest stages hold 8 of the 126 layers (uneven split: ends hold 7 + embedding/head)
    spec = load_model("llama3-405b")
    assert max(len(r) for r in rank_layers(126, 16)) == 8
    total = rows_by_dim(llama405)["total"]
    assert total.value("worst_pp_rank") not in (0, 15)  # a middle stage, 8 layers, no head
    # 8 identical layers split 8 ways by TP: one layer's parameters per rank, except the two
    # RMSNorm weights of each layer, whole on every TP rank (Megatron-Core
    # finalize_model_grads._allreduce_layernorm_grads): 8·(L - 2h)/8 + 8·2h = L + 7·2h
    norms = 2 * spec.hidden_size
    assert total.value("dense_params_per_rank") == layer_params(spec, 1) + 7 * norms


def test_deepseek_parallel_layout(deepseek):
    # seed 000 summary: DeepSeek-V3 PP 16 × EP 64 × ZeRO-1 DP on 2,048 H800, no TP
    rows = rows_by_dim(deepseek)
    assert rows["pp"].value("group_size") == 16 and rows["ep"].value("group_size") == 64
    assert rows["tp"].value("group_size") == 1 and rows["tp"].value("send_bytes_per_step") == 0
    assert rows["total"].inputs["world_size"] == 2048 and rows["total"].inputs["zero"] == 1
    assert rows["ep"].value("experts_per_rank") == 4  # seed 000: 4 per card per layer
    assert rows["ep"].value("link") == "ib"  # 64 ranks span 8 nodes
    # DualPipe hides the all-to-alls behind compute (DeepSeek-V3 §3.2.1)
    assert rows["ep"].value("exposed_time_s") < rows["ep"].value("comm_time_s")


def test_examples_are_found_by_model_and_sizes():
    lay = ParallelLayout(tp=8, cp=1, pp=16, dp=128, gpus_per_node=8)
    assert matching_example("llama3-405b", lay) is LLAMA3_405B
    assert matching_example("llama3-70b", lay) is None


def test_tp_larger_than_a_node_is_priced_on_the_inter_node_link(llama70b, h100):
    run = LayoutRun(seq=8192, microbatches=1)
    report = layout_report(llama70b, h100, ParallelLayout(tp=16, gpus_per_node=8), run,
                           time_model=TimeModel.fixed)  # fmt: skip
    tp = rows_by_dim(report)["tp"]
    assert tp.value("link") == "ib"
    # bandwidth only (latency off): bytes / 50 GB/s, not / 450 GB/s
    assert tp.value("comm_time_s") == pytest.approx(tp.value("send_bytes_per_step") / 50e9)
    assert any("crosses nodes" in w for w in report.warnings)


def test_straddling_groups_cross_nodes():
    # span 4 on 6-GPU nodes: groups at ranks 4..7 straddle nodes 0 and 1
    assert group_link(4, 1, 6) == (Link.inter_node, True)
    assert group_link(4, 1, 8) == (Link.intra_node, False)
    assert group_link(2, 8, 8) == (Link.inter_node, False)


def test_megatron_order_strides():
    g = place_groups(ParallelLayout(tp=2, cp=4, pp=3, dp=5, gpus_per_node=8))
    assert [g[d].stride for d in ("tp", "cp", "dp", "pp", "ep")] == [1, 2, 2, 40, 1]
    assert g["dp"].size == 20  # gradients are summed over dp·cp
    # Megatron-Core expert grid (parallel_state.py, order "tp-ep-dp-pp" over the expert ranks):
    # EP members sit etp apart, expert-DP members etp·ep apart
    lay = ParallelLayout(tp=2, dp=8, ep=4, etp=2, gpus_per_node=8)
    assert place_groups(lay)["ep"].stride == 2
    assert expert_dp_group(lay).stride == 8 and expert_dp_group(lay).size == 2


def test_one_gpu_memory_is_all_model_states_plus_activations(llama70b, h100):
    run = LayoutRun(seq=8192, microbatches=1)
    total = rows_by_dim(layout_report(llama70b, h100, ParallelLayout(gpus_per_node=8), run))
    total = total["total"]
    # seed 003: 1,128.9 GB of model states (16 B/param) when nothing is split
    assert abs(total.value("dense_states_bytes") / 1e9 - 1128.9) <= 0.05
    assert total.value("dense_params_per_rank") == total_params(llama70b)
    assert total.value("memory_fits") is False


BAD = [
    ({"tp": 8, "pp": 16, "dp": 128, "world_size": 8192}, r"world_size=8192 is not tp·cp·pp·dp"),
    ({"cp": 3}, r"seq=8192 is not divisible by cp=3"),
    ({"tp": 3}, r"tp: num_attention_heads=64 is not divisible by t=3"),
    ({"pp": 81}, r"pp=81 exceeds num_hidden_layers=80"),
    ({"ep": 2, "dp": 2}, r"ep=2 needs an MoE model"),
    ({"tp": 0}, r"tp=0: every size must be a positive integer"),
]


@pytest.mark.parametrize(("sizes", "message"), BAD)
def test_bad_layouts_give_one_line(llama70b, h100, sizes, message):
    lay = ParallelLayout(gpus_per_node=8, **sizes)
    with pytest.raises(InputError, match=message) as info:
        layout_report(llama70b, h100, lay, LayoutRun(seq=8192, microbatches=16))
    assert "\n" not in str(info.value)


def test_ep_errors_name_experts_and_dp(h800):
    ds = load_model("deepseek-v3")
    run = LayoutRun(seq=4096, microbatches=32)
    problems = layout_problems(ds, ParallelLayout(pp=16, dp=96, ep=96, gpus_per_node=8), run)
    assert problems == ["n_routed_experts=256 is not divisible by ep=96"]
    problems = layout_problems(ds, ParallelLayout(pp=16, dp=32, ep=64, gpus_per_node=8), run)
    assert problems[0].startswith("dp·cp·tp=32 is not divisible by ep·etp=64")


def test_every_problem_is_reported_at_once(llama70b):
    run = LayoutRun(seq=8192, microbatches=16)
    lay = ParallelLayout(tp=3, cp=3, gpus_per_node=8, world_size=10)
    assert len(layout_problems(llama70b, lay, run)) == 3


SIZES = st.sampled_from([1, 2, 4, 8])
SCHEDULES = st.sampled_from([Schedule.one_f_one_b, Schedule.gpipe, Schedule.zb_h1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2, 4, 8, 16]), cp=st.sampled_from([1, 2, 4]), pp=SIZES, dp=SIZES,
       zero=st.sampled_from(list(ZeroStage)), g=st.sampled_from([4, 8]),
       schedule=SCHEDULES, time_model=st.sampled_from(list(TimeModel)))  # fmt: skip
def test_every_layout_adds_up(llama70b, h100, tp, cp, pp, dp, zero, g, schedule, time_model):
    lay = ParallelLayout(tp=tp, cp=cp, pp=pp, dp=dp, zero=zero, gpus_per_node=g)
    report = layout_report(llama70b, h100, lay, LayoutRun(seq=8192, microbatches=8,
                           schedule=schedule), time_model=time_model)  # fmt: skip
    rows = rows_by_dim(report)
    for row in report.rows:
        assert row.check_breakdowns() == []
    total = rows["total"]
    for d in DIM_ORDER:  # the summary's parts are the dimension rows' values
        assert total.value(f"{d}_exposed_time_s") == rows[d].value("exposed_time_s")
        assert total.value(f"{d}_send_bytes_per_step") == rows[d].value("send_bytes_per_step")
    compute = "compute_time_s" if time_model is TimeModel.fixed else "gemm_time_s"
    assert total.value("step_time_s") >= total.value(compute)
    if tp > g:
        assert rows["tp"].value("link") == "ib"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ep=st.sampled_from([1, 8, 16, 32, 64]), zero=st.sampled_from(list(ZeroStage)))
def test_moe_layouts_add_up(h800, ep, zero):
    ds = load_model("deepseek-v3")
    lay = ParallelLayout(pp=16, dp=128, ep=ep, zero=zero, gpus_per_node=8)
    report = layout_report(ds, h800, lay, LayoutRun(seq=4096, microbatches=32))
    for row in report.rows:
        assert row.check_breakdowns() == []
    total = rows_by_dim(report)["total"]
    assert total.value("memory_bytes_per_rank") > 0


@pytest.mark.parametrize(
    ("zero", "bytes_ratio"), [(ZeroStage.optimizer, 1.0), (ZeroStage.parameters, 4.0)]
)
def test_dp_bytes_repeat_per_micro_batch_as_the_step_times_them(llama70b, h100, zero, bytes_ratio):
    # ZeRO-3 gathers and reduce-scatters for each of the m micro-batches (ZeRO §5.3), and the
    # step model times every one of them: at m = 4 the DP row's bytes and its time on the link
    # are both 4x those at m = 1. ZeRO-1 reduces once per step, whatever m.
    lay = ParallelLayout(tp=8, dp=4, zero=zero, gpus_per_node=8)

    def dp_row(m: int):
        return rows_by_dim(layout_report(llama70b, h100, lay, LayoutRun(seq=8192, microbatches=m)))

    one, four = dp_row(1), dp_row(4)
    sent = four["dp"].value("send_bytes_per_step") / one["dp"].value("send_bytes_per_step")
    assert sent == pytest.approx(bytes_ratio)
    timed = four["total"].value("dp_comm_time_s") / one["total"].value("dp_comm_time_s")
    assert timed == pytest.approx(bytes_ratio)


def test_pp_row_sends_the_embedding_gradient_where_the_last_stage_has_a_copy(h800):
    # Megatron-Core finalize_model_grads all-reduces the shared word embedding's gradient over
    # the first and last pipeline ranks (MTP's embedding on DeepSeek-V3's last stage): the PP
    # row adds 2(n−1)/n = 1 times V·h/t BF16 gradients to its sends, and prints them apart.
    ds = load_model("deepseek-v3")
    lay = ParallelLayout(pp=4, dp=64, ep=64, gpus_per_node=8)

    def pp_row(mtp: bool):
        run = LayoutRun(seq=4096, microbatches=8, memory=MemoryTechniques(mtp=mtp))
        return rows_by_dim(layout_report(ds, h800, lay, run))["pp"]

    on, off = pp_row(True), pp_row(False)
    grad = 129_280 * 7_168 * 2
    assert on.value("pp_embedding_grad_bytes") == grad
    assert off.value("pp_embedding_grad_bytes") == 0
    sends = on.value("pp_sends_per_step") * on.value("pp_p2p_bytes")
    assert on.value("send_bytes_per_step") == sends + grad
    assert off.value("send_bytes_per_step") == sends


def test_tp_bytes_count_one_block_per_moe_layer_without_a_shared_expert(h100):
    # Qwen3-30B-A3B's 48 layers are MoE with no shared expert: its routed experts take the
    # rank's SP tokens through the dispatcher, so a layer has one TP block (attention), not two,
    # in the bytes as in the step's time. TP2, SP, s = 4096, b = 1, m = 2: per block 2 forward +
    # 2 backward collectives / 2 = 2 all-reduce equivalents of (t-1)/t·2 × 4096·2048·2 B.
    spec = load_model("qwen3-30b-a3b")
    lay = ParallelLayout(tp=2, dp=4, ep=8, gpus_per_node=8)
    rows = rows_by_dim(layout_report(spec, h100, lay, LayoutRun(seq=4096, microbatches=2)))
    assert rows["tp"].value("tp_blocks_on_rank") == 48
    assert rows["tp"].value("send_bytes_per_step") == 2 * 48 * 2 * 1 * 4096 * 2048 * 2
    # a dense model keeps two blocks per layer
    dense = rows_by_dim(
        layout_report(load_model("llama3-8b"), h100, ParallelLayout(tp=2, dp=4, gpus_per_node=8),
                      LayoutRun(seq=4096, microbatches=2))
    )  # fmt: skip
    assert dense["tp"].value("tp_blocks_on_rank") == 2 * 32


def test_dp_row_names_the_expert_group_apart_from_the_dense_one(h800):
    # DeepSeek-V3 at TP4 CP2 DP2 on 8-GPU nodes: the dense gradients are summed over dp·cp = 4
    # ranks, 4 apart; the experts (EP1) over dp·cp·tp/(ep·etp) = 16 ranks, 2 nodes
    lay = ParallelLayout(tp=4, cp=2, dp=2, gpus_per_node=8)
    ds = load_model("deepseek-v3")
    row = rows_by_dim(layout_report(ds, h800, lay, LayoutRun(seq=4096, microbatches=1)))["dp"]
    assert row.value("group_size") == 4
    assert row.value("dp_expert_group_size") == 16
    assert row.value("dp_expert_nodes") == 2 and row.value("dp_expert_link") == "ib"
    dense = rows_by_dim(
        layout_report(load_model("llama3-8b"), h800, lay, LayoutRun(seq=4096, microbatches=1))
    )["dp"]  # fmt: skip
    assert "dp_expert_group_size" not in {t.key for t in dense.terms}


def test_expert_tp_traffic_is_in_the_ep_row_the_step_times(h100):
    # Qwen3-30B-A3B (48 MoE layers, top 8, h = 2048) at DP8 ETP2, s = 4096, b = 1, m = 2: per
    # MoE layer and pass each rank sends half of an all-gather of 2 × 32,768 bf16 token copies
    # and half of a reduce-scatter of as many fp32 ones (Megatron-Core's alltoall dispatcher):
    # 2 passes × 32,768 × 2048 × (2 + 4) B per layer, × 48 layers × 2 micro-batches.
    spec = load_model("qwen3-30b-a3b")
    lay = ParallelLayout(dp=8, etp=2, gpus_per_node=8)
    rows = rows_by_dim(layout_report(spec, h100, lay, LayoutRun(seq=4096, microbatches=2)))
    assert rows["ep"].value("etp_send_bytes_per_layer") == 2 * 32768 * 2048 * 6
    # the EP group is one rank here: the row names the expert-TP group the bytes cross
    assert rows["ep"].value("etp_group_size") == 2 and rows["ep"].value("etp_link") == "nvlink"
    assert rows["ep"].value("send_bytes_per_step") == 2 * 48 * 2 * 32768 * 2048 * 6
    assert rows["total"].value("ep_comm_time_s") > 0


@pytest.mark.parametrize(
    ("world", "message"),
    [
        # 63 and 16 are not multiples of tp·cp·pp = 32: no dp fits, so none is suggested
        (63, "world_size=63 is not a multiple of tp·cp·pp = 8·1·4 = 32, so no dp fits"),
        (16, "world_size=16 is not a multiple of tp·cp·pp = 8·1·4 = 32, so no dp fits"),
        # 64 = 32 · 2: the dp that fits is named, as an integer
        (64, "world_size=64 is not tp·cp·pp·dp = 8·1·4·1 = 32; change dp to 2 or the world size"),
        (0, "world_size=0: every size must be a positive integer"),
        (-32, "world_size=-32: every size must be a positive integer"),
    ],
)
def test_world_size_messages_never_suggest_an_impossible_dp(llama70b, world, message):
    lay = ParallelLayout(tp=8, pp=4, gpus_per_node=8, world_size=world)
    problems = layout_problems(llama70b, lay, LayoutRun(seq=8192, microbatches=16))
    assert len(problems) == 1 and problems[0].startswith(message)


def test_memory_over_card_is_a_term_not_a_formatted_warning(llama70b, h100):
    report = layout_report(llama70b, h100, ParallelLayout(gpus_per_node=8),
                           LayoutRun(seq=8192, microbatches=1))  # fmt: skip
    total = rows_by_dim(report)["total"]
    ratio = total.value("memory_over_card_times")
    assert ratio == pytest.approx(total.value("memory_bytes_per_rank") / 80e9)
    # seed 003: 1,128.9 GB of model states alone is 14.1 cards
    assert ratio > 1128.9 / 80
    assert any("more than the card's memory" in w for w in report.warnings)


# The last stage's loss holds the logits of one micro-batch, [s·b, V/tp] per rank, at the bytes
# per logit of its kernel (choices.LossKernel): one FP32 copy (seed 003 §7.3.4, 4 B); Megatron-
# Core's cross_entropy.py (.float() beside the BF16 logits the model holds, 2 + 4 B); Transformer
# Engine's cross_entropy.py (the BF16 logits saved, the gradient returned in them, 2 B).
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (4, 2)])
def test_the_loss_kernel_sets_the_bytes_per_logit_of_the_last_stage(tp, pp):
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.calc.layout.memory import rank_memory

    spec, seq, b = load_model("llama3-8b"), 8192, 2
    lay = ParallelLayout(gpus_per_node=8, tp=tp, pp=pp, dp=8 // (tp * pp) or 1)

    def ranks(kernel: str):
        run = LayoutRun(seq=seq, micro_batch=b, microbatches=4,
                        memory=MemoryTechniques(loss_kernel=kernel))  # fmt: skip
        return rank_memory(
            spec, lay, seq=seq, micro_batch=b, microbatches=4, vpp=1, schedule=run.schedule,
            recipe=run.recipe, sp=run.sp, recompute=run.recompute, techniques=run.memory,
        )  # fmt: skip

    one_byte = seq * b * spec.vocab_size / tp  # one byte per logit of the rank's vocab shard
    copy, megatron, te = (ranks(k) for k in ("fp32-copy", "megatron", "te"))
    assert copy[-1].buffer_bytes == 4 * one_byte  # the last stage holds the loss
    assert megatron[-1].buffer_bytes == 6 * one_byte
    assert te[-1].buffer_bytes == 2 * one_byte
    for r in range(pp - 1):  # no other stage holds logits
        assert copy[r].buffer_bytes == megatron[r].buffer_bytes == te[r].buffer_bytes == 0
    # Llama 3 8B at TP1, 8,192 tokens: 2.1 GB between the kernels, as README says
    if tp == 1:
        assert round(one_byte * 2 / b / 1e9, 1) == 2.1


@pytest.mark.parametrize("mtp", [False, True])
def test_each_mtp_module_holds_its_own_logits_on_the_last_stage(mtp):
    # Megatron-Core's GPTModel computes each MTP layer's logits and loss in the forward beside
    # the main ones, and every cross-entropy keeps its logits for the backward: DeepSeek-V3 (one
    # MTP module, V = 129,280) at TP1, 4,096 tokens, one FP32 copy each: 2 × 2.12 GB with MTP.
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.calc.layout.memory import buffer_bytes

    spec = load_model("deepseek-v3")
    lay = ParallelLayout(gpus_per_node=8, pp=16, dp=8, ep=8)
    tech = MemoryTechniques(mtp=mtp)
    last, other = (
        buffer_bytes(spec, lay, seq=4096, micro_batch=1, last=end, techniques=tech, act_bytes=2)
        for end in (True, False)
    )
    logits = 4096 * 129280 * 4
    assert last - other == (2 if mtp else 1) * logits


@pytest.mark.parametrize("probs_in_act", [False, True])
def test_an_moe_layout_over_the_card_names_the_expert_output_it_keeps(probs_in_act):
    """DeepSeek-V3 on 2,048 H800 (PP16 EP64 DualPipe, no recompute, no FP8 cache) is over the card
    either way; with the combine-side weighting (--no-moe-probs-in-act) it keeps every expert
    output, and the warning says what Megatron-Core 0.13+ keeps instead (--moe-probs-in-act, the
    default), only when that option is off."""
    from tpcalc.calc.layout.groups import MemoryTechniques

    lay = ParallelLayout(gpus_per_node=8, pp=16, dp=128, ep=64, zero=ZeroStage.optimizer)
    run = LayoutRun(seq=4096, microbatches=120, schedule=Schedule.dualpipe,
                    memory=MemoryTechniques(moe_probs_in_act=probs_in_act))  # fmt: skip
    report = layout_report(load_model("deepseek-v3"), load_hardware("h800"), lay, run)
    (over,) = [w for w in report.warnings if "more than the card's memory" in w]
    assert ("--moe-probs-in-act" in over) is not probs_in_act


def test_activation_source_names_the_model_used(llama70b, h100):
    from tpcalc.choices import ActivationModel

    lay = ParallelLayout(tp=8, pp=4, dp=2, gpus_per_node=8)
    for model, cited in (
        (ActivationModel.exact, "exact model"),
        (ActivationModel.paper, "Table 2"),
    ):
        run = LayoutRun(seq=8192, microbatches=8, activations=model)
        act = rows_by_dim(layout_report(llama70b, h100, lay, run))["total"].get("activation_bytes")
        assert cited in act.source and act.inputs["activations"] == model.value


@pytest.mark.parametrize(
    ("model", "sizes"),
    [("llama3-70b", {"tp": 8, "cp": 2, "pp": 4, "dp": 2}),
     ("deepseek-v3", {"pp": 16, "dp": 8, "ep": 8, "zero": ZeroStage.optimizer})],
)  # fmt: skip
def test_every_layout_term_has_a_formula_and_a_source(h100, model, sizes):
    lay = ParallelLayout(gpus_per_node=8, **sizes)
    report = layout_report(load_model(model), h100, lay, LayoutRun(seq=4096, microbatches=16))
    missing = [(r.inputs["dimension"], t.key) for r in report.rows for t in r.terms
               if not (t.formula and t.source)]  # fmt: skip
    assert missing == []


def test_mfu_divides_by_the_peak_of_the_dtype(h800):
    from tpcalc.units import Dtype

    ds = load_model("deepseek-v3")
    lay = ParallelLayout(pp=16, dp=128, ep=64, zero=ZeroStage.optimizer, gpus_per_node=8)
    totals = {}
    for dtype in (Dtype.bf16, Dtype.fp8):
        run = LayoutRun(seq=4096, microbatches=32, dtype=dtype)
        report = layout_report(ds, h800, lay, run, time_model=TimeModel.fixed)
        totals[dtype] = rows_by_dim(report)["total"]
    fp8, bf16 = totals[Dtype.fp8], totals[Dtype.bf16]
    # H800 config: dense FP8 1,979 TFLOP/s, BF16 989.5 TFLOP/s (the H100 SXM datasheet figures)
    assert fp8.value("peak_flop_per_s") == 1979e12 and bf16.value("peak_flop_per_s") == 989.5e12
    assert fp8.get("peak_flop_per_s").label == "peak FP8 per GPU"
    for row, peak in ((fp8, 1979e12), (bf16, 989.5e12)):  # PaLM App. B: FLOP / (N · peak · t)
        expected = row.value("model_flop_per_step") / (2048 * peak * row.value("step_time_s"))
        assert row.value("mfu_estimate_ratio") == pytest.approx(expected)


def test_fp8_mfu_without_an_fp8_peak_is_an_error(llama70b):
    from tpcalc.units import Dtype

    a100 = load_hardware("a100-80g")  # A100 has no FP8 tensor cores: peak_fp8_flop_per_s is null
    run = LayoutRun(seq=8192, microbatches=8, dtype=Dtype.fp8)
    with pytest.raises(InputError, match="a100-80g has no peak_fp8_flop_per_s"):
        layout_report(llama70b, a100, ParallelLayout(tp=8, pp=4, gpus_per_node=8), run)


def test_a_cited_mfu_needs_the_cited_hardware():
    from tpcalc.reports.layout import layout_report as run_layout
    from tpcalc.reports.request import Layout, Workload

    sizes = Layout(tp=8, pp=16, dp=128, zero=1, microbatches=16)
    on_h100 = rows_by_dim(run_layout(Workload.load("llama3-405b", "h100-sxm", seq=8192), sizes))
    on_h100 = on_h100["total"]
    # Llama 3 paper Table 4: 41% BF16 MFU, measured on 16,384 H100
    assert on_h100.value("mfu_cited_ratio") == 0.41
    on_h800 = rows_by_dim(run_layout(Workload.load("llama3-405b", "h800", seq=8192), sizes))
    on_h800 = on_h800["total"]
    assert "mfu_cited_ratio" not in {t.key for t in on_h800.terms}
    lay = ParallelLayout(tp=8, cp=1, pp=16, dp=128, gpus_per_node=8)
    assert matching_example("llama3-405b", lay, "h800") is None
    assert matching_example("llama3-405b", lay, "h100-sxm") is LLAMA3_405B


# Megatron-LM --decoder-first/last-pipeline-num-layers: the layers a stage holds, its
# parameters and its activations follow the split the step model times (issue 9 §3, "uneven
# stages are real"). Llama 3 8B config.json: 32 decoder layers, uniform, so every layer keeps
# the same activations; 1F1B: rank r holds p - r micro-batches (Narayanan et al. 2021 §2.2).
def test_a_hand_set_stage_split_places_memory_as_it_places_time():
    from tpcalc.calc.layout.memory import layer_activation_bytes, rank_memory
    from tpcalc.calc.layout.price import price_layout
    from tpcalc.calc.pipeline.schedule import stage_split
    from tpcalc.calc.time.step import TimeOptions

    llama = load_model("llama3-8b")
    h100 = load_hardware("h100-sxm")
    lay = ParallelLayout(pp=4, dp=2, gpus_per_node=8)
    run = LayoutRun(seq=8192, microbatches=8)
    assert stage_split(32, 4, first=2, last=2) == (2, 14, 14, 2)
    opts = TimeOptions(first_stage_layers=2, last_stage_layers=2)
    price = price_layout(llama, h100, lay, run, time_options=opts)
    per_layer = layer_activation_bytes(
        llama, lay, seq=8192, micro_batch=1, sp=run.sp, recompute=run.recompute
    )[0]
    ranks = rank_memory(
        llama, lay, seq=8192, micro_batch=1, microbatches=8, vpp=1, schedule=run.schedule,
        recipe=run.recipe, sp=run.sp, recompute=run.recompute, counts=(2, 14, 14, 2),
    )  # fmt: skip
    # the last stage also keeps its loss head, one micro-batch in flight: the final RMSNorm's
    # BF16 input and FP32 1/rms, and the output layer's BF16 input (t = 1, no SP)
    s, h = 8192, 4096
    head = 2 * s * h + 4 * s + 2 * s * h
    for r, layers in enumerate((2, 14, 14, 2)):
        expected = (4 - r) * layers * per_layer + (head if r == 3 else 0)
        assert ranks[r].activation_bytes == pytest.approx(expected)
    assert price.memory.memory_bytes_per_rank == max(m.total_bytes for m in ranks)
    even = price_layout(llama, h100, lay, run)
    assert even.memory.memory_bytes_per_rank != price.memory.memory_bytes_per_rank


def test_a_hand_set_split_may_hold_more_chunks_than_layers_minus_one():
    # Megatron-Core's pipeline layout may leave a stage without decoder layers (only E or L):
    # the even split's "a chunk needs a layer" rule does not apply, stage_split checks the sum.
    from tpcalc.calc.layout.price import price_layout
    from tpcalc.calc.time.step import TimeOptions

    llama = load_model("llama3-8b")
    lay = ParallelLayout(pp=4, dp=2, gpus_per_node=8)
    run = LayoutRun(seq=8192, microbatches=8)
    opts = TimeOptions(chunk_layers=(0, 16, 16, 0))
    price = price_layout(llama, load_hardware("h100-sxm"), lay, run, time_options=opts)
    assert price.memory.memory_bytes_per_rank > 0
    with pytest.raises(InputError, match="4 stages holding 31 layers"):
        price_layout(
            llama, load_hardware("h100-sxm"), lay, run,
            time_options=TimeOptions(chunk_layers=(0, 16, 15, 0)),
        )  # fmt: skip


# Megatron-Core account_for_embedding/loss_in_pipeline_split (transformer_block.py
# get_num_layers_to_build), as Megatron-Bridge's Llama 3.1 405B recipe sets them
# (recipes/llama/llama3.py llama31_405b_pretrain_config @ cfeddcd, lines 1132-1133): 126 layers
# + embedding + loss = 128 slots, one per virtual stage of PP16 x VP8, which is the Megatron-Core
# layout string 'E|(t|)*126L'; both spellings price the same layout to the byte and second.
def test_accounting_for_embedding_and_loss_prices_the_equivalent_layout_string(cli):
    import json
    import shlex

    base = shlex.split(
        "layout -m llama3-405b --hardware gb200 --tp 4 --pp 16 --vpp 8 --dp 4 --zero 1 "
        "--schedule interleaved --microbatches 384 --dtype fp8 --recompute none -f json"
    )
    flags = cli(
        *base, "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"
    )
    string = cli(*base, "--pipeline-layout", "E|(t|)*126L")
    even = cli(*base)
    assert flags.code == 0 and string.code == 0, flags.err + string.err
    a, b = json.loads(flags.out)[-1], json.loads(string.out)[-1]
    for key in ("memory_bytes_per_rank", "step_time_s", "memory_fits", "stage_layers"):
        assert a[key] == b[key], key
    assert a["stage_layers"] == "0+1×126+0"
    assert (a["embedding_in_split"], a["loss_in_split"]) == (True, True)
    assert (b["embedding_in_split"], b["loss_in_split"]) == (False, False)
    # 174.9 GB of the 186 GB card (printed to 0.1 GB in the published-check table)
    assert a["memory_bytes_per_rank"] / 1e9 == pytest.approx(174.9, abs=0.05)
    # the seeds' fixed-rate time model places and echoes the same split
    fixed = cli(
        *base, "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
        "--time-model", "fixed",
    )  # fmt: skip
    c = json.loads(fixed.out)[-1]
    assert (c["time_model"], c["stage_layers"], c["embedding_in_split"]) == (
        "fixed", "0+1×126+0", True,
    )  # fmt: skip
    assert c["memory_bytes_per_rank"] == a["memory_bytes_per_rank"]
    # the even split cannot place 126 layers on 128 virtual stages and says so
    assert even.code != 0 and "pp·vpp=128 model chunks" in even.err
    assert even.err.count("\n") == 1


def test_accounted_split_errors_say_what_would_be_valid(cli):
    import shlex

    base = shlex.split("layout -m llama3-405b --tp 8 --pp 16 --vpp 4 --dp 1 --schedule interleaved")
    r = cli(*base, "--microbatches", "16", "--account-for-embedding-in-pipeline-split")
    assert r.code != 0 and r.out == "" and r.err.count("\n") == 1
    assert "127 slots do not divide by pp=16; valid pp: 1, 127" in r.err
    r = cli(
        *base, "--microbatches", "16", "--account-for-loss-in-pipeline-split",
        "--first-stage-layers", "4",
    )  # fmt: skip
    assert r.code != 0 and "cannot be combined with --pipeline-layout" in r.err


def test_the_planner_refuses_a_hand_set_split_it_would_not_search():
    # the planner splits every candidate's layers evenly, which is Megatron-Core's accounted
    # split with the loss or both ends counted (calc/plan/space.split_ends) but not with the
    # embedding alone or a layout string: those are refused by name, not silently ignored
    from tpcalc.calc.plan.request import build_request
    from tpcalc.calc.time.step import TimeOptions

    spec, hw = load_model("llama3-8b"), load_hardware("h100-sxm")
    for opts, message in (
        (TimeOptions(embedding_in_split=True), "time_options embedding_in_split: the planner"),
        (TimeOptions(chunk_layers=(16, 16)), "time_options chunk_layers: the planner splits"),
    ):
        with pytest.raises(InputError, match=message):
            build_request(spec, hw, gpus=8, seq=4096, global_batch=16, time_options=opts)
    for ends in ({"loss_in_split": True}, {"embedding_in_split": True, "loss_in_split": True}):
        opts = TimeOptions(**ends)
        req = build_request(spec, hw, gpus=8, seq=4096, global_batch=16, time_options=opts)
        assert req.time_options == opts
