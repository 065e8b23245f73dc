"""The per-operation step-time model (tpcalc.calc.time): op shapes and FLOPs against their
formulas, the collective model against the measurements it is calibrated on, breakdowns that add
up, and the properties issue 9 asks for."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.time.explain import STEP_EXPLANATIONS
from tpcalc.calc.time.ops import (
    Pass,
    Shard,
    attention_core,
    gemm,
    layer_ops,
    linear_attention_ops,
)
from tpcalc.calc.time.roofline import (
    collective_time_s,
    dispatch_time_s,
    expected_remote_nodes,
    expert_tp_time_s,
    op_time_s,
    rates,
)
from tpcalc.calc.time.step import (
    RECOMPUTE_MODULE_OPS,
    STEP_PARTS,
    Overlap,
    StepTime,
    TimeOptions,
    stage_layers,
    step_time,
)
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute, Schedule
from tpcalc.errors import InputError
from tpcalc.explain import unexplained
from tpcalc.units import Dtype

H100 = load_hardware("h100-sxm")
LLAMA70 = load_model("llama3-70b")
QWEN_MOE = load_model("qwen3-30b-a3b")


def test_gemm_backward_is_two_gemms_of_the_forward_flop():
    # Narayanan et al. 2021 §5.1: forward 2·m·n·k, dX and dW the same each
    ops = gemm("x", 8192, 1024, 4096, Dtype.bf16)
    assert [o.phase for o in ops] == [Pass.forward, Pass.backward_input, Pass.backward_weight]
    assert all(o.flop == 2 * 8192 * 1024 * 4096 for o in ops)
    assert (ops[1].m, ops[1].n, ops[1].k) == (8192, 4096, 1024)  # dX = dY·Wᵀ
    assert (ops[2].m, ops[2].n, ops[2].k) == (1024, 4096, 8192)  # dW = Xᵀ·dY


def test_fp8_gemm_adds_its_cast_transpose_traffic():
    ops = gemm("x", 4096, 1024, 2048, Dtype.fp8)
    casts = [o for o in ops if o.name.endswith("_fp8_cast")]
    # read 2 B and write 1 B + 1 B transposed per element of X (forward) and dY (backward)
    assert [o.bytes for o in casts] == [4 * 4096 * 2048, 4 * 4096 * 1024]
    assert all(o.fp8 for o in ops if o.name == "x")


def test_causal_attention_flop_is_half_the_square_and_backward_is_2_5x():
    # FlashAttention-2 (Dao 2023): forward 4·b·h·s²·d, halved causal; backward 2.5 × forward
    shard = Shard(seq=8192, micro_batch=1)
    fwd, bwd = attention_core("a", shard, 64, 8, 128, 128)
    assert fwd.flop == 4 * 64 * 8192**2 * 128 / 2
    assert bwd.flop == pytest.approx(2.5 * fwd.flop)
    full = attention_core("a", replace(shard, causal=False), 64, 8, 128, 128)[0]
    assert full.flop == 2 * fwd.flop


# Transformer Engine context_parallel.py (AttnFuncWithCPAndKVP2P): with a causal mask and the
# zig-zag halves, ring step 0 is the rank's s/cp queries against its own s/cp keys under the mask
# ("diagonal"); the cp - 1 others are unmasked, s/cp queries against half a block of keys or half
# the queries against a whole block ("lower-triangle" / "upper-triangle"), each the same score
# blocks as the diagonal.
@pytest.mark.parametrize("cp", [2, 4, 16])
def test_cp_attention_is_a_causal_diagonal_and_unmasked_ring_steps(cp):
    shard = Shard(seq=8192, micro_batch=1, cp=cp)
    ops = [o for o in attention_core("a", shard, 64, 8, 128, 128) if o.name == "a"]
    fwd = [o for o in ops if o.phase is Pass.forward]
    diagonal, ring = fwd
    q = 8192 // cp
    assert (diagonal.causal, diagonal.m, diagonal.n) == (True, q, q)
    assert (ring.causal, ring.m, ring.n) == (False, q // 2, 8192 - q)
    assert diagonal.flop == 4 * 64 * q * q * 128 / 2
    assert ring.flop == (cp - 1) * diagonal.flop  # each ring step: q · q/2 unmasked scores
    # the rank's whole share of the causal square: s/cp queries against s keys, half masked
    whole = attention_core("a", Shard(seq=8192, micro_batch=1), 64, 8, 128, 128)[0]
    assert diagonal.flop + ring.flop == pytest.approx(whole.flop / cp)
    # a model without a mask runs every step over a whole block ("all" section): one kernel
    (nc,) = [o for o in attention_core("a", replace(shard, causal=False), 64, 8, 128, 128)
             if o.name == "a" and o.phase is Pass.forward]  # fmt: skip
    assert (nc.causal, nc.m) == (False, q) and nc.flop == 2 * whole.flop / cp


def test_the_unmasked_kernel_loses_less_at_short_blocks():
    # FA3 on H100, head dim 128: causal backward 316 TFLOP/s at S = 2k (tritonbench PR #1267),
    # unmasked 501 (FlashAttention-3 backward figure); at 8k 539 and 559
    # (docs/kernel-measurements.md §2.5). The card's curves give them within 6%.
    r = rates(H100, Dtype.bf16)
    peak = H100.peak_bf16_flop_per_s.value / 1e12
    from tpcalc.calc.time.roofline import attention_efficiency

    def tflops(s: int, causal: bool) -> float:
        return attention_efficiency(r, Pass.backward_input, s, 128, causal) / r.compute_scale * peak

    assert tflops(2048, True) == pytest.approx(316, rel=0.06)
    assert tflops(2048, False) == pytest.approx(501, rel=0.06)
    assert tflops(8192, True) == pytest.approx(539, rel=0.01)
    assert tflops(8192, False) == pytest.approx(559, rel=0.01)


def test_mla_attention_times_v_uses_v_head_dim():
    ds = load_model("deepseek-v3")
    fwd = next(o for o in layer_ops(ds, Shard(seq=4096, micro_batch=1), 5) if o.name == "core_attn")
    # Q·Kᵀ over nope + rope = 192, P·V over v_head_dim = 128 (DeepSeek-V3 §2.1.1)
    assert fwd.flop == 2 * 128 * 4096**2 * 0.5 * (192 + 128)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_mtp_projection_is_split_like_its_weight(tp):
    # Megatron-LM MultiTokenPredictionLayer.eh_proj is a ColumnParallelLinear(2h -> h): each TP
    # rank holds and computes h/t of its outputs. DeepSeek-V3: h = 7168, 4,096 tokens.
    from tpcalc.calc.time.ops import mtp_ops

    ds = load_model("deepseek-v3")
    shard = Shard(seq=4096, micro_batch=1, tp=tp, sp=tp > 1)
    fwd = next(o for o in mtp_ops(ds, shard, 129280) if o.name == "mtp_proj")
    assert fwd.flop == 2 * 4096 * (7168 // tp) * (2 * 7168)


def test_layer_gemm_flop_adds_up_to_6_n_per_token():
    # Kaplan et al. 2020: forward + backward GEMMs = 6 · matmul params per token
    shard = Shard(seq=8192, micro_batch=1)
    ops = layer_ops(LLAMA70, shard, 0)
    gemm_flop = sum(o.flop for o in ops if o.kind.value == "gemm")
    matmul_params = 8192 * (64 + 2 * 8) * 128 + 64 * 128 * 8192 + 3 * 8192 * 28672
    assert gemm_flop == 6 * matmul_params * 8192


def test_collective_model_reproduces_the_measured_half_bandwidth_point():
    # 8x H200 all-reduce busbw (ml-engineering network README): 220 GB/s at 16 MiB. The model
    # prices ring collectives at 362 GB/s plus NCCL latency; at 16 MiB an 8-rank reduce-scatter
    # + all-gather (= all-reduce) lands within 25% of the NVLS-measured curve's point
    r = rates(H100, Dtype.bf16)
    size = 16 * 2**20
    t = collective_time_s(r, Collective.all_reduce, size, 8, 1)
    busbw = 2 * 7 / 8 * size / t
    assert 165e9 < busbw < 275e9
    # a large message runs at the configured plateau
    big = 16 * 2**30
    t_big = collective_time_s(r, Collective.all_gather, big, 8, 1)
    assert 7 / 8 * big / t_big == pytest.approx(362e9, rel=0.01)


def test_cross_node_ring_uses_one_nic_per_member():
    r = rates(H100, Dtype.bf16)
    m = 1e9
    one = collective_time_s(r, Collective.reduce_scatter, m, 16, 16)  # one rank per node
    four = collective_time_s(r, Collective.reduce_scatter, m, 64, 16)  # four per node
    # bandwidth terms: (15/16)·m / 47 GB/s against (63/64)·m / (4 · 47 GB/s): 3.81x; the 64-rank
    # ring's 48 NVLink and 15 network steps of latency take it down a little
    bandwidth_ratio = (15 / 16) / (63 / 64) * 4
    assert 0.9 * bandwidth_ratio < one / four < bandwidth_ratio


def _delta_rule_s(hw_name: str, heads: int, phase: Pass) -> float:
    """FLA's chunk_gated_delta_rule on one [1, 8192, heads, 128] BF16 call, as tpcalc times
    it: Qwen3.8's Gated DeltaNet block with ``heads`` key and value heads, one rank."""
    spec = load_model("qwen3.8").model_copy(
        update={"linear_num_key_heads": heads, "linear_num_value_heads": heads}
    )
    ops = linear_attention_ops(spec, Shard(seq=8192, micro_batch=1))
    (op,) = [o for o in ops if o.name == "delta_rule" and o.phase is phase]
    return op_time_s(op, rates(load_hardware(hw_name), Dtype.bf16))


def test_the_delta_rule_is_timed_by_the_traffic_fla_was_measured_to_move():
    # MoonshotAI/FlashKDA BENCHMARK_GB200.md @ d2ff19a, "Fixed", fla_chunk_gdn mean: 1.2792 ms
    # at H = 96 (the calibration) and 0.8857 ms at H = 64 (not used by it)
    assert _delta_rule_s("gb200", 96, Pass.forward) * 1e3 == pytest.approx(1.2792, abs=5e-5)
    assert _delta_rule_s("gb200", 64, Pass.forward) * 1e3 == pytest.approx(0.8857, rel=0.05)
    # bound by HBM: H100's 3.35 TB/s against GB200's 8 TB/s, both at hbm_efficiency 0.90
    ratio = _delta_rule_s("h100-sxm", 96, Pass.forward) / _delta_rule_s("gb200", 96, Pass.forward)
    assert ratio == pytest.approx(8.0 / 3.35, rel=1e-9)
    # FLA's chunked backward re-runs the forward's states (BENCHMARK_TRAIN_RTX5090.md @ 96c4273,
    # fla_chunk_kda at H = 96: fwd+bwd 23.4677 ms, fwd 5.4185 ms)
    bwd = _delta_rule_s("gb200", 96, Pass.backward_input)
    assert bwd / _delta_rule_s("gb200", 96, Pass.forward) == pytest.approx(
        (23.4677 - 5.4185) / 5.4185, abs=5e-4
    )


def test_gemm_time_is_a_roofline():
    r = rates(H100, Dtype.bf16)
    big = gemm("x", 8192, 8192, 8192, Dtype.bf16)[0]
    # compute-bound: 2·8192³ FLOP at peak · 0.818 · K/(K + 240) · the fitted scale
    eff = 0.818 * 8192 / (8192 + 240) * H100.performance.fitted.compute_scale.value
    assert op_time_s(big, r) == pytest.approx(2 * 8192**3 / (989.5e12 * eff))
    skinny = gemm("x", 16, 8192, 8192, Dtype.bf16)[0]  # 16 tokens: memory-bound
    assert op_time_s(skinny, r) == pytest.approx(skinny.bytes / (3.35e12 * 0.9))


def test_stage_split_with_first_and_last_overrides():
    split = stage_layers(126, 16, first=7, last=7)
    assert [len(s) for s in split][:2] == [7, 8] and len(split[-1]) == 7
    assert sum(len(s) for s in split) == 126
    with pytest.raises(InputError, match="vpp 1"):
        stage_layers(126, 16, 2, first=7)


def test_stage_split_from_a_pipeline_layout():
    # DeepSeek-V3 on PP 8 VP 2 with Megatron-Bridge's layout "Et*4|(t*4|)*14tmL": stage c sits
    # on rank c mod 8, so rank 7 holds stages 7 (4 layers) and 15 (the last layer, MTP, loss)
    split = stage_layers(61, 8, 2, chunks=(4,) * 15 + (1,))
    assert split[0] == [0, 1, 2, 3, 32, 33, 34, 35]
    assert split[7] == [28, 29, 30, 31, 60]
    with pytest.raises(InputError, match="16 stages holding the model's 61 layers"):
        stage_layers(61, 8, 2, chunks=(4,) * 15 + (2,))


def llama405_step(**opts) -> StepTime:
    lay = ParallelLayout(tp=8, pp=16, dp=128, zero=ZeroStage.optimizer, gpus_per_node=8)
    run = LayoutRun(seq=8192, microbatches=16, vpp=4, schedule=Schedule.interleaved)
    return step_time(load_model("llama3-405b"), H100, lay, run, TimeOptions(**opts))


def test_llama405_breakdown_adds_up_and_every_field_is_explained():
    st = llama405_step()
    assert sum(st.parts_s.values()) == pytest.approx(st.step_time_s, rel=1e-12)
    assert set(STEP_PARTS) <= set(STEP_EXPLANATIONS)
    assert unexplained(StepTime, STEP_EXPLANATIONS) == []
    assert st.tokens_per_step == 8192 * 16 * 128
    assert 0.2 < st.mfu_ratio < 0.6  # the run measured 41% (Llama 3 paper Table 4)


LAYOUTS = st.sampled_from(
    [
        (
            LLAMA70,
            ParallelLayout(tp=4, pp=4, cp=2, dp=2, zero=ZeroStage.optimizer, gpus_per_node=8),
        ),
        (LLAMA70, ParallelLayout(tp=8, pp=2, dp=4, gpus_per_node=8)),
        (QWEN_MOE, ParallelLayout(pp=2, dp=8, ep=8, zero=ZeroStage.optimizer, gpus_per_node=8)),
        (QWEN_MOE, ParallelLayout(tp=2, dp=16, ep=16, zero=ZeroStage.optimizer, gpus_per_node=8)),
        # ZeRO-3 and the all-to-all across nodes: link-bound when the all-to-all is overlapped
        (
            load_model("deepseek-v3"),
            ParallelLayout(tp=4, dp=64, ep=128, zero=ZeroStage.parameters, gpus_per_node=8),
        ),
    ]
)
RUNS = st.builds(
    lambda m, rec, dtype: LayoutRun(
        seq=4096, microbatches=m, vpp=1, schedule=Schedule.one_f_one_b, recompute=rec, dtype=dtype
    ),
    st.sampled_from([4, 8, 16]),
    st.sampled_from(list(Recompute)),
    st.sampled_from([Dtype.bf16, Dtype.fp8]),
)
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(case=LAYOUTS, run=RUNS, scale=st.floats(1.01, 2.0))
def test_more_efficiency_never_makes_a_step_slower(case, run, scale):
    spec, lay = case
    base = step_time(spec, H100, lay, run, TimeOptions())
    faster = step_time(spec, H100, lay, run, TimeOptions(efficiency_scale=scale))
    assert faster.step_time_s <= base.step_time_s * (1 + 1e-12)


@PROPS
@given(case=LAYOUTS, run=RUNS, flags=st.tuples(*[st.booleans()] * 5))
def test_overlap_never_makes_a_step_slower_than_no_overlap(case, run, flags):
    spec, lay = case
    tp, cp, ep, pp, dp = flags
    some = Overlap(
        tp_comm=tp, cp_ring=cp, ep_a2a=ep, pp_p2p=pp, dp_grad_reduce=dp, dp_param_gather=dp
    )
    none = Overlap(tp_comm=False, cp_ring=False, ep_a2a=False, pp_p2p=False,
                   dp_grad_reduce=False, dp_param_gather=False)  # fmt: skip
    with_some = step_time(spec, H100, lay, run, TimeOptions(overlap=some))
    without = step_time(spec, H100, lay, run, TimeOptions(overlap=none))
    assert with_some.step_time_s <= without.step_time_s * (1 + 1e-12)


@PROPS
@given(case=LAYOUTS, run=RUNS, grow=st.floats(1.01, 4.0))
def test_step_time_never_drops_when_a_collective_gets_bigger(case, run, grow):
    spec, lay = case
    base = step_time(spec, H100, lay, run, TimeOptions())
    bigger = step_time(spec, H100, lay, run, TimeOptions(comm_scale=grow))
    assert bigger.step_time_s >= base.step_time_s * (1 - 1e-12)
    assert all(math.isfinite(v) and v >= 0 for v in bigger.parts_s.values())


def _with_comm_sms(hw, sms: float):
    """The card with its overlapped collectives holding ``sms`` SMs."""
    perf = hw.performance
    entry = perf.comm_kernel_sms.model_copy(update={"value": sms})
    return hw.model_copy(update={"performance": perf.model_copy(update={"comm_kernel_sms": entry})})


@PROPS
@given(case=LAYOUTS, run=RUNS, more=st.floats(1.0, 60.0))
def test_a_larger_sm_share_for_communication_never_makes_a_step_faster(case, run, more):
    # the compute beside an overlapped collective loses the SMs its kernels hold (step.exposed_s)
    spec, lay = case
    few = step_time(spec, _with_comm_sms(H100, 1.0), lay, run, TimeOptions())
    many = step_time(spec, _with_comm_sms(H100, 1.0 + more), lay, run, TimeOptions())
    assert many.step_time_s >= few.step_time_s * (1 - 1e-12)
    none = Overlap(tp_comm=False, cp_ring=False, ep_a2a=False, pp_p2p=False,
                   dp_grad_reduce=False, dp_param_gather=False)  # fmt: skip
    exposed = step_time(spec, _with_comm_sms(H100, 1.0 + more), lay, run, TimeOptions(overlap=none))
    assert many.step_time_s <= exposed.step_time_s * (1 + 1e-12)  # still never worse than none


def test_mtp_runs_on_the_last_stage_only_when_counted():
    # DeepSeek-V3 §2.2: one MTP module (projection, a layer, the shared head) on the last stage
    from tpcalc.calc.layout.groups import MemoryTechniques

    ds = load_model("deepseek-v3")
    lay = ParallelLayout(pp=16, dp=128, ep=64, zero=ZeroStage.optimizer, gpus_per_node=8)
    h800 = load_hardware("h800")

    def last_stage(mtp: bool):
        run = LayoutRun(seq=4096, microbatches=32, memory=MemoryTechniques(mtp=mtp))
        return step_time(ds, h800, lay, run).stages[-1]

    with_mtp, without = last_stage(True), last_stage(False)
    assert with_mtp.forward.total_s > without.forward.total_s
    first = step_time(ds, h800, lay, LayoutRun(seq=4096, microbatches=32)).stages[0]
    no_mtp_first = step_time(
        ds, h800, lay, LayoutRun(seq=4096, microbatches=32, memory=MemoryTechniques(mtp=False))
    ).stages[0]
    assert first.forward.total_s == no_mtp_first.forward.total_s


def test_the_attention_flops_convention_moves_mfu_not_the_step():
    causal = llama405_step(causal_model_flops=True)
    full = llama405_step(causal_model_flops=False)
    assert full.step_time_s == causal.step_time_s
    assert full.model_flop_per_step > causal.model_flop_per_step


def test_comm_flops_and_dp_share_the_step_models_compute(cli):
    """Issue 13 §5: one compute model everywhere. comm, flops and dp time one micro-batch with
    the per-operation roofline by default; --time-model fixed is the seeds' 400 TFLOP/s."""
    import json

    from tpcalc.calc.time.step import micro_batch_compute

    mb = micro_batch_compute(LLAMA70, H100, tp=8, seq=8192, micro_batch=1, sp=True)
    comm = json.loads(cli("comm", "-m", "llama3-70b", "-t", "8", "-f", "json").out)[0]
    flops = json.loads(cli("flops", "-m", "llama3-70b", "-t", "8", "-f", "json").out)[0]
    assert comm["compute_time_s"] == pytest.approx(mb.total_s)
    sp_mb = micro_batch_compute(LLAMA70, H100, tp=8, seq=8192, micro_batch=1, sp=True)
    assert flops["compute_time_s"] == pytest.approx(sp_mb.total_s)
    dp = json.loads(cli("dp", "-m", "llama3-70b", "--dp", "8", "-f", "json").out)[0]
    one = micro_batch_compute(LLAMA70, H100, tp=1, seq=8192, micro_batch=1, sp=False)
    assert dp["backward_time_s"] == pytest.approx(one.backward_s)
    fixed = json.loads(
        cli("comm", "-m", "llama3-70b", "-t", "8", "--params", "all", "--time-model", "fixed",
            "--no-sp", "-f", "json").out
    )[0]  # fmt: skip
    # seed 003 table 7-7: 6 · 70.55e9 · 8192 / (8 · 400 TFLOP/s) = 1.08 s
    assert fixed["compute_time_s"] == pytest.approx(1.08, abs=0.005)


def test_unfused_sink_attention_materialises_every_score():
    # Transformer Engine falls back to unfused attention for learnable sinks (TE issue #2318):
    # Q·Kᵀ and P·V over all s² scores, the window notwithstanding, and a softmax over them
    oss = load_model("gpt-oss-120b")
    shard = Shard(seq=4096, micro_batch=1, fused_sinks=False)
    ops = [o for o in layer_ops(oss, shard, 0) if o.name.startswith("core_attn")]
    qk = next(o for o in ops if o.name == "core_attn_qk" and o.phase is Pass.forward)
    assert qk.flop == 2 * 4096 * 4096 * 64 * 64  # 64 heads of d = 64, full square
    fused = [
        o for o in layer_ops(oss, replace(shard, fused_sinks=True), 0) if o.name == "core_attn"
    ]
    assert fused[0].flop == 2 * 64 * 4096 * 128 * (64 + 64)  # banded: 128 keys per query


def test_expected_remote_nodes_is_the_hypergeometric_count():
    # one expert of 128 on 2 nodes: the other node holds it half the time
    assert expected_remote_nodes(1, 128, 2) == pytest.approx(0.5)
    # 2 of 4 experts on 2 nodes: both on the home node in 1 of C(4,2) = 6 pairs
    assert expected_remote_nodes(2, 4, 2) == pytest.approx(5 / 6)
    # 8 of 256 experts over 4 nodes: each other node is missed with C(192,8)/C(256,8) = 0.0964
    assert expected_remote_nodes(8, 256, 4) == pytest.approx(3 * (1 - 0.0964), abs=3e-4)
    assert expected_remote_nodes(8, 256, 1) == 0.0


def test_node_aware_dispatch_crosses_the_network_once_per_node():
    # Qwen3-30B-A3B (128 experts, top 8) on EP16 over two H100 nodes, 4096 tokens of h = 2048
    r = rates(H100, Dtype.bf16)
    tokens, token_bytes = 4096, 2048 * 2
    nccl = dispatch_time_s(r, tokens, 8, 128, token_bytes, 16, 2, node_dedup=False)
    deep = dispatch_time_s(r, tokens, 8, 128, token_bytes, 16, 2, node_dedup=True)
    # NCCL: half of the 8 copies leave the node; DeepEP: a token leaves once when the other
    # node holds any of its 8 experts (1 - C(64,8)/C(128,8) = 0.9969), at 47 GB/s per NIC
    network = tokens * token_bytes * 0.9969 / 47e9
    assert deep - network == pytest.approx(nccl - 4 * tokens * token_bytes / 47e9, abs=2e-6)
    assert deep < nccl / 3.5  # 4x fewer network bytes, the same latency
    # inside one node there is nothing to deduplicate
    one = dispatch_time_s(r, tokens, 8, 128, token_bytes, 8, 1, node_dedup=True)
    assert one == dispatch_time_s(r, tokens, 8, 128, token_bytes, 8, 1, node_dedup=False)


def test_expert_tp_gathers_and_scatters_every_moe_pass():
    # Megatron-Core's all-to-all dispatcher at --expert-tensor-parallel-size 2 all-gathers the
    # T/t·k token copies over the two ranks that split each expert and reduce-scatters the
    # experts' outputs in the router's fp32 (token_dispatcher.py dispatch_postprocess,
    # combine_preprocess); the backward runs the adjoints. Qwen3-30B-A3B (48 MoE layers, top 8,
    # h = 2048) at DP8 ETP2 in one node, s = 4096, b = 1, m = 2: per pass one all-gather of
    # 2 × 32,768 bf16 tokens and one reduce-scatter of as many fp32 tokens, each rank sending
    # half of each, at H100's NVLink bus bandwidth plus NCCL's base latency and one ring step.
    layout = ParallelLayout(gpus_per_node=8, dp=8, etp=2)
    run = LayoutRun(seq=4096, micro_batch=1, microbatches=2, recompute=Recompute.selective)
    st = step_time(QWEN_MOE, H100, layout, run, TimeOptions())
    perf = H100.performance
    assert perf is not None
    gathered = 2 * 4096 * 8
    sent = gathered / 2 * 2048 * (2 + 4)
    latency = 2 * (perf.collective_base_latency_s.value + H100.intra_node_latency_s.value)
    one_pass = latency + sent / perf.intra_node_busbw_bytes_per_s.value
    assert st.ep_comm_time_s == pytest.approx(2 * 2 * 48 * one_pass, rel=1e-9)
    # exposed: Megatron-Core overlaps the dispatcher only with expert parallelism (ep > 1)
    assert st.ep_exposed_time_s == pytest.approx(st.ep_comm_time_s, rel=1e-9)
    assert step_time(QWEN_MOE, H100, replace(layout, etp=1), run, TimeOptions()).ep_comm_time_s == 0
    assert expert_tp_time_s(rates(H100, Dtype.bf16), 4096, 4096, 8192, 1, 1) == 0.0


def test_the_mtp_modules_moe_layer_pays_the_moe_layer_cost():
    # DeepSeek-V3's MTP module runs the last layer's FFN, an MoE layer (report §2.2), so the
    # card's fitted cost per MoE layer and pass (configs/hardware/b200.yaml) is paid once more in
    # the forward and once more in the backward of the last stage.
    from tpcalc.calc.layout.groups import MemoryTechniques

    ds = load_model("deepseek-v3")
    b200 = load_hardware("b200")
    lay = ParallelLayout(pp=16, dp=16, ep=8, zero=ZeroStage.optimizer, gpus_per_node=8)

    def last_stage(mtp: bool):
        run = LayoutRun(seq=4096, microbatches=32, memory=MemoryTechniques(mtp=mtp))
        return step_time(ds, b200, lay, run).stages[-1]

    with_mtp, without = last_stage(True), last_stage(False)
    per_layer = b200.performance.fitted.moe_layer_overhead_s.value
    for part in ("forward", "backward_input"):
        added = getattr(with_mtp, part).overhead_s - getattr(without, part).overhead_s
        assert added == pytest.approx(ds.mtp_layers * per_layer, rel=1e-12)


# configs/hardware/h100-sxm.yaml: the MoE constant c was fitted on runs of 4,096 tokens per
# rank (moe_fit_tokens). Past them it grows with the tokens (roofline.moe_layer_overhead), so a
# larger micro-batch pays it at the fitted rate per token, never less: Qwen3-30B-A3B (48 MoE
# layers) on 8 H100, one global batch of 16 sequences of 4,096 split 16 x 1, 8 x 2 and 4 x 4.
def test_the_moe_constant_grows_with_the_tokens_beyond_its_fitted_runs():
    from tpcalc.calc.time.roofline import moe_layer_overhead

    h100 = load_hardware("h100-sxm")
    fitted = h100.performance.fitted
    c, fit = fitted.moe_layer_overhead_s.value, fitted.moe_fit_tokens.high
    r = rates(h100, Dtype.bf16)
    assert moe_layer_overhead(r, fit // 2) == moe_layer_overhead(r, fit) == c
    assert moe_layer_overhead(r, 2 * fit) == 2 * c and moe_layer_overhead(r, 8 * fit) == 8 * c
    qwen = load_model("qwen3-30b-a3b")
    lay = ParallelLayout(dp=8, ep=8, gpus_per_node=8)
    over = [
        step_time(qwen, h100, lay, LayoutRun(seq=fit, micro_batch=b, microbatches=16 // b))
        .moe_overhead_time_s for b in (1, 2, 4)
    ]  # fmt: skip
    assert over[0] == pytest.approx(16 * 48 * 2 * c, rel=1e-12)
    assert over[1] == pytest.approx(over[0], rel=1e-12)
    assert over[2] == pytest.approx(over[0], rel=1e-12)


def test_the_moe_constant_and_where_it_starts_to_grow_are_echoed():
    # issue 9: every assumption of the step is echoed as a row input (table, JSON and CSV);
    # configs/hardware/h100-sxm.yaml: c fitted on runs of 4,096 tokens per rank
    from tpcalc.reports.layout import time_inputs

    h100 = load_hardware("h100-sxm")
    fitted = h100.performance.fitted
    got = time_inputs(h100, TimeOptions())
    assert got["moe_layer_overhead_s"] == fitted.moe_layer_overhead_s.value
    assert got["moe_fit_tokens_high"] == fitted.moe_fit_tokens.high == 4096
    bare = time_inputs(load_hardware("h800"), TimeOptions())  # no MoE constant fitted
    assert bare["moe_layer_overhead_s"] is None and bare["moe_fit_tokens_high"] is None


def test_zero_2_and_3_repeat_their_collectives_every_micro_batch():
    # Rajbhandari et al. 2020 §5.2, §7.2.2: ZeRO-2 reduce-scatters each micro-batch's
    # gradients; ZeRO-3 also gathers the parameters before each forward and each backward.
    # With RS and AG one step's collectives under ZeRO-1 (distributed optimizer):
    # ZeRO-1 = RS + AG, ZeRO-2 = m·RS + AG, ZeRO-3 = m·(RS + 2·AG).
    spec, hw = load_model("llama3-8b"), load_hardware("h100-sxm")
    m = 4
    run = LayoutRun(seq=4096, microbatches=m)

    def dp_s(zero: int) -> tuple[float, float]:
        lay = ParallelLayout(tp=1, dp=16, zero=ZeroStage(zero), gpus_per_node=8)
        st = step_time(spec, hw, lay, run)
        return st.dp_comm_time_s, st.step_time_s

    (z1, step1), (z2, step2), (z3, step3) = dp_s(1), dp_s(2), dp_s(3)
    rs = (z2 - z1) / (m - 1)
    ag = z1 - rs
    assert rs > 0 and ag > 0
    assert z3 == pytest.approx(m * (rs + 2 * ag), rel=1e-12)
    assert step1 <= step2 <= step3


def test_pipeline_layout_strings_are_read_or_refused_with_the_reason():
    from tpcalc.calc.time.pipeline_layout import layers_text, parse_pipeline_layout
    from tpcalc.errors import InputError

    # Megatron-Core grammar: '|' ends a virtual stage, 't' a decoder layer, (..)*n and x*n
    # repeat; commas are cosmetic. Megatron-Bridge's DeepSeek-V3 layout on 16 stages: 4 layers on
    # each stage but the last, which holds 1, the MTP module and the loss (61 layers)
    assert parse_pipeline_layout("Et*4|(t*4|)*14tmL", 16) == (4,) * 15 + (1,)
    assert parse_pipeline_layout("Ettt|((t|)*2)*1,tL", 4) == (3, 1, 1, 1)
    assert layers_text((4,) * 15 + (1,)) == "4×15+1"
    bad = {
        ("Et*4|(t*4|)*14tmL", 32): "16 stages; pp · vpp = 32",
        ("Ettt|(tt|)*29,m|L", 32): "on the last stage",
        ("t|EtL", 2): "must open the first stage",
        ("Et|(t)L", 2): "needs its ')' and a repeat count",
        ("Et|(tL", 2): "needs its ')' and a repeat count",
        ("Et|xL", 2): "unknown symbols x",
        ("((t*999)*999)*999", 1): "more than 100,000 symbols",
        (" , ", 1): "is empty",
    }
    for (text, stages), message in bad.items():
        with pytest.raises(InputError, match=re.escape(message)):
            parse_pipeline_layout(text, stages)


def test_routed_experts_fc2_bias_is_priced_unfused_where_the_model_has_one():
    """GPT-OSS's experts carry biases (mlp_bias): Megatron-Core adds fc2's after the grouped
    GEMM, weighted by each copy's fp32 routing probability (TEGroupedMLP._apply_bias): 28 bytes
    per output element forward, 36 backward (ops.EXPERT_BIAS_*_BYTES, counted kernel by kernel
    in its comment), over every token a rank's experts compute; Qwen3 has no expert bias."""
    from tpcalc.calc.time.ops import moe_ops, moe_tokens_per_expert

    gpt_oss, qwen = load_model("gpt-oss-120b"), load_model("qwen3-30b-a3b")
    shard = Shard(seq=4096, micro_batch=4, tp=1, cp=1, ep=8, etp=1, sp=False,
                  dtype=Dtype.bf16, gemm_dtype=Dtype.bf16)  # fmt: skip
    bias = [o for o in moe_ops(gpt_oss, shard) if o.name == "expert_bias"]
    # 8 ranks' 4096·4 tokens, 4 copies each, over 128 experts: 4,096 each, 16 local per rank
    assert moe_tokens_per_expert(gpt_oss, shard) == 4096
    outputs = 4096 * 16 * 2880
    assert {(o.phase, o.bytes) for o in bias} == {
        (Pass.forward, 28 * outputs), (Pass.backward_input, 36 * outputs)
    }  # fmt: skip
    assert not [o for o in moe_ops(qwen, shard) if o.name == "expert_bias"]
    assert "expert_bias" in RECOMPUTE_MODULE_OPS["moe"]


def deepseek_zero3_step(overlap: Overlap) -> StepTime:
    """DeepSeek-V3 on 256 H800, TP4 (inside a node) × DP64 × EP128, ZeRO-3: the all-to-all and
    the per-micro-batch parameter gathers and gradient reduce-scatters all cross nodes."""
    lay = ParallelLayout(tp=4, dp=64, ep=128, zero=ZeroStage.parameters, gpus_per_node=8)
    run = LayoutRun(seq=4096, microbatches=30, sp=True, dtype=Dtype.fp8)
    return step_time(
        load_model("deepseek-v3"), load_hardware("h800"), lay, run, TimeOptions(overlap=overlap)
    )


def test_collectives_sharing_a_nic_make_the_step_at_least_their_sum():
    # hidden under compute, the EP all-to-all and the ZeRO-3 traffic still share each GPU's
    # NIC: the step is at least their times added (step.py module docstring, link contention)
    st = deepseek_zero3_step(Overlap(tp_comm=True, ep_a2a=True))
    assert st.link_contention_time_s > 0
    network = st.ep_comm_time_s + st.dp_comm_time_s  # both groups span nodes; TP 4 does not
    assert st.step_time_s == pytest.approx(network, rel=1e-12)
    assert sum(st.parts_s.values()) == pytest.approx(st.step_time_s, rel=1e-12)
    # exposed, the collectives already add up in the step: nothing is left to contend
    none = Overlap(tp_comm=False, cp_ring=False, ep_a2a=False, pp_p2p=False,
                   dp_grad_reduce=False, dp_param_gather=False)  # fmt: skip
    exposed = deepseek_zero3_step(none)
    assert exposed.link_contention_time_s == 0
    assert exposed.step_time_s >= st.step_time_s
    # a run whose traffic fits beside its compute is not link-bound
    assert llama405_step().link_contention_time_s == 0


# --- overlapped collectives hold SMs (DeepSeek-V3 report §3.2.1: 20 SMs for communication) ---
def test_an_overlapped_collective_costs_the_sms_it_holds():
    from tpcalc.calc.time.step import exposed_s

    s = 0.15
    # fully hidden: 10 s beside 100 s of compute costs the compute s·10 s more
    assert exposed_s(10.0, 100.0, True, sm_share=s) == pytest.approx(1.5, rel=1e-12)
    # not hidden: what the compute cannot cover, which is more than s·10 here
    assert exposed_s(10.0, 4.0, True, sm_share=s) == pytest.approx(6.0, rel=1e-12)
    # the first chunk is exposed, the share applies to the rest: 1 + 0.15·9
    assert exposed_s(10.0, 100.0, True, 1.0, sm_share=s) == pytest.approx(2.35, rel=1e-12)
    # not overlapped: all of it, whatever the share
    assert exposed_s(10.0, 100.0, False, sm_share=s) == 10.0
    # never more than not overlapping, never less than free overlap
    for comm, hidden in ((10.0, 0.0), (10.0, 9.0), (10.0, 10.0), (3.0, 50.0)):
        got = exposed_s(comm, hidden, True, sm_share=s)
        assert max(0.0, comm - hidden) <= got <= comm


def test_the_sm_share_is_the_cards_comm_sms_over_its_sms():
    for name, sms in (("h100-sxm", 132), ("h800", 132), ("b200", 148), ("gb200", 148)):
        hw = load_hardware(name)
        assert hw.performance.sm_count.value == sms  # the card's config, each with a source
        r = rates(hw, Dtype.bf16)
        assert r.comm_sm_share == pytest.approx(20 / sms, rel=1e-12)


def test_carried_over_scales_are_h100s_fitted_value():
    # H800, H200 and A100 have no run in the validation table: their compute_scale is H100's,
    # carried over (each config says so); a refit of H100 must carry over with it.
    h100 = load_hardware("h100-sxm").performance.fitted.compute_scale.value
    for name in ("h800", "h200", "a100-80g"):
        scale = load_hardware(name).performance.fitted.compute_scale
        assert "carried over from h100-sxm" in scale.source
        assert scale.value == h100, name


def test_dualpipe_ranks_run_two_stages_half_the_micro_batches_each():
    # DeepSeek-V3 report §3.2.1 (Figure 5, Table 2): DualPipe feeds micro-batches from both
    # ends, so rank r runs stage r for half of them and stage p-1-r for the other half, and
    # holds both stages' parameters. The stages are those 1F1B prices one by one (both with
    # the all-to-all exposed: DualPipe hides it by default, 1F1B at pp > 1 cannot). Under 1F1B
    # the last stage holds its own V·h copy of the embedding for MTP; DualPipe's end ranks hold
    # both ends and share the first stage's (DeepSeek-V3: 129,280 × 7,168 at TP1).
    ds = load_model("deepseek-v3")
    h800 = load_hardware("h800")
    lay = ParallelLayout(pp=16, dp=128, ep=64, zero=ZeroStage.optimizer, gpus_per_node=8)
    opts = TimeOptions(overlap=Overlap(ep_a2a=False))
    one_by_one = step_time(ds, h800, lay, LayoutRun(seq=4096, microbatches=32), opts).stages
    run = LayoutRun(seq=4096, microbatches=32, schedule=Schedule.dualpipe)
    st = step_time(ds, h800, lay, run, opts)
    p = len(one_by_one)
    for r, rank in enumerate(st.stages):
        a, b = one_by_one[r], one_by_one[p - 1 - r]
        assert rank.total_s == pytest.approx((a.total_s + b.total_s) / 2, rel=1e-12)
        shared = 129_280 * 7_168 if r in (0, p - 1) else 0
        assert rank.dense_params == a.dense_params + b.dense_params - shared
        assert rank.expert_params == a.expert_params + b.expert_params
    # the last stage (3 layers, the MTP module, two LM heads and losses) is the slowest of
    # 1F1B; DualPipe shares it with stage 0 (embedding, 3 dense layers and 1 MoE layer), and
    # the slowest rank is the pair with the largest mean
    assert max(range(p), key=lambda i: one_by_one[i].total_s) == p - 1
    means = [(one_by_one[r].total_s + one_by_one[p - 1 - r].total_s) / 2 for r in range(p)]
    assert means[st.bottleneck_stage] == pytest.approx(max(means), rel=1e-12)
    neck = st.stage_forward_time_s + st.stage_backward_input_time_s
    assert neck + st.stage_backward_weight_time_s == pytest.approx(max(means), rel=1e-12)
    assert max(means) < one_by_one[-1].total_s
    # every micro-batch still runs every stage once: the pairs keep the pipeline's work
    assert sum(x.total_s for x in st.stages) == pytest.approx(
        sum(x.total_s for x in one_by_one), rel=1e-12
    )


def test_ops_under_dualpipe_list_both_stages_of_the_slowest_rank(cli):
    """``layout --ops`` under DualPipe lists the ops of the two stages the slowest rank runs,
    each row under its own stage. DeepSeek-V3 with its node-aware dispatcher: rank 0, stage 0's
    embedding and the last stage's LM head; with the all-to-all dispatcher (more bytes over
    IB) a pair of middle stages, four MoE layers each, is slower."""
    import json

    args = ("layout", "-m", "deepseek-v3", "--hardware", "h800", "--pp", "16", "--dp", "128",
            "--ep", "64", "--zero", "1", "--microbatches", "32", "--ops", "-f", "json",
            "--schedule", "dualpipe")  # fmt: skip
    dual = json.loads(cli(*args, "--moe-dispatcher", "flex").out)
    ops = {(row["stage"], row["op"]) for row in dual}
    assert {stage for stage, _ in ops} == {0, 15}
    assert (0, "embedding") in ops and (15, "lm_head") in ops and (0, "lm_head") not in ops
    middle = json.loads(cli(*args, "--moe-dispatcher", "alltoall").out)
    assert {row["stage"] for row in middle} == {2, 13}
    one = json.loads(cli(*args[:-1], "1f1b", "--moe-dispatcher", "flex").out)
    assert {row["stage"] for row in one} == {15}  # the last stage alone under 1F1B


def test_ops_give_shapes_and_flop_rates_only_to_gemms_and_attention(cli):
    """``layout --ops``: a GEMM's M, N, K, groups and achieved FLOP/s are its own (Llama 3 70B
    at TP8: the QKV projection is 8,192 tokens × (64 + 2·8)·128/8 = 1,280 columns × 8,192);
    elementwise memory-bound ops (norms, RoPE, residuals) have none, null in JSON and — in
    the table, not a 0 that reads as an empty GEMM."""
    import json

    rows = json.loads(cli("layout", "-m", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "2",
                          "--microbatches", "16", "--ops", "-f", "json").out)  # fmt: skip
    qkv = next(r for r in rows if r["op"] == "qkv_proj" and r["pass"] == "F")
    assert (qkv["m"], qkv["n"], qkv["k"], qkv["groups"]) == (8192, 1280, 8192, 1)
    assert qkv["achieved_flop_per_s"] == pytest.approx(qkv["flop"] / qkv["time_s"], rel=1e-12)
    memory = [r for r in rows if r["op"] in ("attn_norm", "rope", "attn_residual")]
    assert memory and all(r["bound"] == "memory" for r in memory)
    for r in memory:
        assert r["m"] is r["n"] is r["k"] is r["groups"] is r["achieved_flop_per_s"] is None
        assert r["achieved_bytes_per_s"] == pytest.approx(r["bytes"] / r["time_s"], rel=1e-12)


@pytest.mark.parametrize(
    ("model", "lay"),
    [
        # MTP on the last stage, its routed experts over EP, and the last stage's embedding copy
        ("deepseek-v3", ParallelLayout(tp=2, pp=4, dp=32, ep=8, gpus_per_node=8)),
        ("deepseek-v3", ParallelLayout(pp=1, dp=8, ep=8, gpus_per_node=8)),
        # a tied head (its own copy on the last stage) and a learned position table (declared)
        ("gpt3-175b", ParallelLayout(tp=8, pp=8, dp=2, gpus_per_node=8)),
        ("llama3-70b", ParallelLayout(tp=8, pp=4, dp=2, gpus_per_node=8)),
    ],
)
def test_stage_params_are_the_ones_memory_counts(model: str, lay: ParallelLayout):
    # The DP tail reduces and the optimizer updates what each pipeline rank holds: the step's
    # per-stage parameters (dense over TP, experts over EP·ETP) are layout.memory's
    # pp_rank_params (TP-split + TP-replicated dense, routed experts), a separate count.
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.calc.layout.memory import pp_rank_params

    spec = load_model(model)
    seq = 4096 if spec.is_moe else 2048
    for mtp in (True, False):
        run = LayoutRun(seq=seq, microbatches=8, memory=MemoryTechniques(mtp=mtp))
        stages = step_time(spec, H100, lay, run).stages
        ranks = pp_rank_params(spec, lay.pp, 1, Schedule.one_f_one_b, mtp=mtp)
        assert len(stages) == len(ranks) == lay.pp
        for stage, (split, replicated, experts) in zip(stages, ranks, strict=True):
            where = (model, mtp, stage.stage)
            assert stage.dense_params == (split + replicated) // lay.tp, where
            assert stage.expert_params == experts // (lay.ep * lay.etp), where


def test_the_embedding_group_all_reduces_the_last_stages_copy_once_a_step():
    # Megatron-Core finalize_model_grads: after the DP reduction the first and last pipeline
    # ranks all-reduce the shared word embedding's gradient (MTP's embedding on the last stage,
    # or a tied output layer), exposed whole. DeepSeek-V3 at TP1: 129,280 × 7,168 BF16
    # gradients over 2 ranks on 2 nodes (PP4 with DP64 places stages 64 ranks apart).
    from tpcalc.calc.layout.groups import MemoryTechniques

    ds, h800 = load_model("deepseek-v3"), load_hardware("h800")
    lay = ParallelLayout(pp=4, dp=64, ep=64, gpus_per_node=8)

    def step(mtp: bool, schedule: Schedule = Schedule.one_f_one_b) -> StepTime:
        run = LayoutRun(
            seq=4096, microbatches=8, schedule=schedule, memory=MemoryTechniques(mtp=mtp)
        )
        return step_time(ds, h800, lay, run)

    on, off = step(True), step(False)
    want = collective_time_s(
        rates(h800, Dtype.bf16), Collective.all_reduce, 129_280 * 7_168 * 2, 2, 2
    )
    assert 0.01 < want < 0.1  # 1.85 GB through one NIC: tens of milliseconds
    assert on.pp_comm_time_s - off.pp_comm_time_s == pytest.approx(want, rel=1e-12)
    assert on.pp_exposed_time_s - off.pp_exposed_time_s == pytest.approx(want, rel=1e-12)
    # DualPipe's end ranks hold both ends: one embedding, nothing to all-reduce
    dual_on, dual_off = step(True, Schedule.dualpipe), step(False, Schedule.dualpipe)
    assert dual_on.pp_comm_time_s == dual_off.pp_comm_time_s
    # a tied head keeps a copy on the last stage (GPT-3 175B at TP8: V·h/8 gradients), an
    # untied one none; PP4 with DP2 and TP8 places the stages on 4 nodes
    gpt3 = load_model("gpt3-175b")
    untied = gpt3.model_copy(update={"tie_word_embeddings": False})
    lay3 = ParallelLayout(tp=8, pp=4, dp=2, gpus_per_node=8)
    tied_s, untied_s = (
        step_time(spec, H100, lay3, LayoutRun(seq=2048, microbatches=8)).pp_comm_time_s
        for spec in (gpt3, untied)
    )
    want3 = collective_time_s(
        rates(H100, Dtype.bf16), Collective.all_reduce, 50_257 * 12_288 // 8 * 2, 2, 2
    )
    assert tied_s - untied_s == pytest.approx(want3, rel=1e-12)


def test_gated_deltanet_layers_pay_their_cp_all_to_alls_in_both_passes():
    """Under CP a Gated DeltaNet layer sends no K/V ring but two all-to-alls per pass
    (Megatron-Core: in_proj's output to the heads, the gated norm's output back; the backward
    their gradients): Qwen3.8's 48 such layers beside the ring of its 16 full-attention ones.
    The elements per token are counted here from Megatron-Core's in_proj sections."""
    from tpcalc.calc.time.step import cp_ring_s

    spec, hw = load_model("qwen3.8"), load_hardware("h800")
    tp, cp, m = 2, 2, 4
    layout = ParallelLayout(gpus_per_node=8, tp=tp, cp=cp, dp=2)
    run = LayoutRun(seq=4096, microbatches=m, recompute=Recompute.none)
    st = step_time(spec, hw, layout, run, TimeOptions())
    r = rates(hw, Dtype.bf16)
    nk, nv = spec.linear_num_key_heads // tp, spec.linear_num_value_heads // tp
    dk, dv = spec.linear_key_head_dim, spec.linear_value_head_dim
    tokens = 4096 // cp
    per_pass = sum(
        collective_time_s(r, Collective.all_to_all, tokens * n * 2, cp, 1)
        for n in (2 * nk * dk + 2 * nv * dv + 2 * nv, nv * dv)
    )
    gdn = spec.linear_attention_layers * 2 * per_pass
    ring = cp_ring_s(spec, Shard(seq=4096, micro_batch=1, tp=tp, cp=cp), r, 1, 1.0)
    full = spec.full_attention_layers * (1 + 2) * ring  # forward K,V; backward K,V and dK,dV
    assert st.cp_comm_time_s == pytest.approx(m * (gdn + full), rel=1e-9)
    assert st.cp_exposed_time_s >= m * gdn * (1 - 1e-9)  # nothing hides the all-to-alls


def test_the_causal_conv_is_one_pass_whatever_its_width():
    """flash-linear-attention's causal_conv1d (Megatron-Core's GatedDeltaNet) reads each tile's
    tokens and the W − 1 before them once: x -> y forward, x, dy -> dx backward, in the
    activation dtype, for the 2·key + value channels of one TP rank."""
    base = load_model("qwen3.8")
    shard = Shard(seq=4096, micro_batch=1, tp=2)
    channels = (2 * base.linear_num_key_heads * base.linear_key_head_dim
                + base.linear_num_value_heads * base.linear_value_head_dim) // 2  # fmt: skip
    for width in (base.linear_conv_kernel_dim, 2 * base.linear_conv_kernel_dim):
        spec = base.model_copy(update={"linear_conv_kernel_dim": width})
        conv = {o.phase: o.bytes for o in linear_attention_ops(spec, shard) if o.name == "conv1d"}
        assert conv[Pass.forward] == 2 * 4096 * channels * 2
        assert conv[Pass.backward_input] == 3 * 4096 * channels * 2


def test_the_delta_rules_inputs_are_normed_repeated_and_copied():
    """Megatron-Core's inputs to FLA's delta rule (_prepare_input_for_gated_delta_rule): q and k
    L2-normed (x -> y; x, dy -> dx), repeated from Qwen3.8's 8 key heads per TP2 rank to its 24
    value heads (the rows read plus written, each pass), v and z copied out of their views."""
    spec = load_model("qwen3.8")
    t, tp = 4096, 2
    nk, nv = spec.linear_num_key_heads // tp, spec.linear_num_value_heads // tp
    dk, dv = spec.linear_key_head_dim, spec.linear_value_head_dim

    def by_name(s):
        ops = linear_attention_ops(s, Shard(seq=t, micro_batch=1, tp=tp))
        return {(o.name, o.phase): o.bytes for o in ops}

    got = by_name(spec)
    assert got["qk_l2norm", Pass.forward] == 2 * t * 2 * nk * dk * 2
    assert got["qk_l2norm", Pass.backward_input] == 3 * t * 2 * nk * dk * 2
    assert got["qk_repeat", Pass.forward] == t * 2 * dk * (nk + nv) * 2
    assert got["qk_repeat", Pass.backward_input] == t * 2 * dk * (nk + nv) * 2
    assert got["vz_copy", Pass.forward] == 2 * t * 2 * nv * dv * 2
    as_many = spec.model_copy(update={"linear_num_key_heads": spec.linear_num_value_heads})
    assert not any(name == "qk_repeat" for name, _ in by_name(as_many))  # nothing to repeat
