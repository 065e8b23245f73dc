"""Seed 000 (the TP lesson, Qwen3.8, H800 links): every printed figure, incl. the evolution map."""

from __future__ import annotations

from tpcalc.calc.activations.paper import paper_activations
from tpcalc.calc.cp.causal import CausalSplit, causal_work_per_rank
from tpcalc.calc.cp.shapes import kv_block_bytes
from tpcalc.calc.dp.gradients import (
    DDP_BUCKET_BYTES,
    gradient_bytes,
    naive_gather_bytes,
    ring_all_reduce_bytes,
)
from tpcalc.calc.dp.zero import ZeroStage, zero_comm_bytes, zero_states_bytes
from tpcalc.calc.ep.memory import experts_per_rank
from tpcalc.calc.ep.routing import max_nodes_per_token
from tpcalc.calc.links.collectives import BytesConvention, Collective, send_bytes_per_rank
from tpcalc.calc.params.counts import routed_expert_params, total_params
from tpcalc.calc.params.states import model_states_bytes
from tpcalc.calc.pipeline.schedule import (
    EQUAL_TIMES,
    bubble_ratio,
    bubble_share,
    bubble_time_s,
    p2p_bytes,
    rank_layer_counts,
)
from tpcalc.calc.tp.comm import TpComm, tp_comm
from tpcalc.calc.tp.flops import TpFlops, tp_flops
from tpcalc.calc.tp.rules import kv_split
from tpcalc.choices import ParamConvention, Recompute, Schedule, StateRecipe
from tpcalc.errors import divide
from tpcalc.figures import context as c
from tpcalc.figures.context import deepseek, h800, qwen
from tpcalc.figures.model import Figure, fraction, gb, mb, ms, num, pct, sec, tflop
from tpcalc.units import HOURS_PER_YEAR, Dtype, MiB

R16 = StateRecipe.zero16


def _grads() -> int:
    return gradient_bytes(total_params(qwen()), Dtype.bf16)


def _zero(stage: int) -> float:
    return zero_states_bytes(total_params(qwen()), R16, ZeroStage(stage), c.Q_DP_SMALL)


def _tp() -> TpComm:
    return tp_comm(qwen(), h800(), t=c.Q_T, seq=c.Q_SEQ, with_latency=False,
                   compute_time_s=_flops(c.Q_T).compute_time_s)  # fmt: skip


def _flops(t: int) -> TpFlops:
    return tp_flops(qwen(), h800(), t=t, seq=c.Q_SEQ, micro_batch=1,
                    params=ParamConvention.matmul)  # fmt: skip


def _act(t: int, sp: bool) -> float:
    return paper_activations(qwen(), seq=c.Q_SEQ, micro_batch=1, t=t, sp=sp,
                             recompute=Recompute.selective).activation_bytes  # fmt: skip


def _ib() -> float:
    return h800().inter_node_bandwidth_bytes_per_s.value


def _allgather_vs_allreduce() -> float:
    """Message-size convention: gather the intermediate vs all-reduce the output (3.4)."""
    spec, tokens, dt = qwen(), c.Q_SEQ, Dtype.bf16.bytes
    gather = send_bytes_per_rank(Collective.all_gather, tokens * spec.intermediate_size * dt,
                                 c.Q_T, BytesConvention.message)  # fmt: skip
    reduce = send_bytes_per_rank(Collective.all_reduce, tokens * spec.hidden_size * dt,
                                 c.Q_T, BytesConvention.message)  # fmt: skip
    return gather / reduce


def _cp_block() -> int:
    return kv_block_bytes(qwen(), seq=c.Q_CP_SEQ, cp=c.Q_CP, micro_batch=1, dtype=Dtype.bf16)


def _cp_steps() -> int:
    return c.Q_CP - 1  # ring attention: each rank receives the other cp-1 blocks per layer


def _msg() -> tuple[int, int, float]:
    """(tokens, h, bytes per element) of the computed message M = s·h·bytes."""
    tokens, h = c.Q_SEQ, qwen().hidden_size
    return tokens, h, _tp().message_bytes / (tokens * h)


def _ratio_text(v: list[int]) -> str:
    return " : ".join(str(x) for x in v)


FIGURES = [
    Figure("q-grad-bf16", "000", "summary", "BF16 gradients of the whole model", "55.6 GB",
           _grads, gb(1)),
    Figure("q-dp-ring-8", "000", "summary", "ring all-reduce, bytes each card sends, 8 cards",
           "97.2 GB", lambda: ring_all_reduce_bytes(_grads(), c.Q_DP_SMALL), gb(1)),
    Figure("q-dp-ring-64", "000", "map", "same, 64 cards", "109.4 GB",
           lambda: ring_all_reduce_bytes(_grads(), c.Q_DP_LARGE), gb(1)),
    Figure("q-dp-naive-8", "000", "map", "naive gather to card 0, bytes it receives, 8 cards",
           "388.9 GB", lambda: naive_gather_bytes(_grads(), c.Q_DP_SMALL), gb(1)),
    Figure("q-dp-naive-64", "000", "map", "same, 64 cards", "3,500 GB",
           lambda: naive_gather_bytes(_grads(), c.Q_DP_LARGE), gb(0)),
    Figure("q-states-1", "000", "map", "model states on one card (16 B/param)", "444.5 GB",
           lambda: model_states_bytes(total_params(qwen()), R16), gb(1)),
    Figure("q-states-ratio", "000", "map", "444.5 GB / 80 GB", "5.6",
           lambda: model_states_bytes(total_params(qwen()), R16) / h800().memory_bytes.value,
           num(1)),
    Figure("q-zero1-8", "000", "map", "ZeRO-1 per card, 8 cards", "152.8 GB",
           lambda: _zero(1), gb(1)),
    Figure("q-zero2-8", "000", "map", "ZeRO-2 per card, 8 cards", "104.2 GB",
           lambda: _zero(2), gb(1)),
    Figure("q-zero3-8", "000", "summary", "ZeRO-3 per card, 8 cards", "55.6 GB",
           lambda: _zero(3), gb(1)),
    Figure("q-zero3-comm", "000", "summary", "ZeRO-3 bytes each card sends per step",
           "145.9 GB", lambda: zero_comm_bytes(total_params(qwen()), R16, ZeroStage(3),
                                               c.Q_DP_SMALL), gb(1)),
    Figure("q-zero3-vs-dp", "000", "summary", "ZeRO-3 comm / DP comm", "1.5",
           lambda: zero_comm_bytes(total_params(qwen()), R16, ZeroStage(3), c.Q_DP_SMALL)
           / zero_comm_bytes(total_params(qwen()), R16, ZeroStage(0), c.Q_DP_SMALL), num(1)),
    Figure("q-free-for-act", "000", "opening", "80 GB card minus ZeRO-3 model states", "24.4 GB",
           lambda: h800().memory_bytes.value - _zero(3), gb(1)),
    Figure("q-act-selective", "000", "opening", "selective-recompute activations, s=4096, 64 "
           "layers, one card", "45.6 GB", lambda: _act(1, False), gb(1)),
    Figure("q-act-selective-tp8-sp", "000", "回报", "same with t=8 and sequence parallelism",
           "5.7 GB", lambda: _act(c.Q_T, True), gb(1)),
    Figure("q-dp-time-ib", "000", "map", "97.2 GB over IB 50 GB/s", "1.94 s",
           lambda: ring_all_reduce_bytes(_grads(), c.Q_DP_SMALL) / _ib(), sec(2)),
    Figure("q-bwd-time", "000", "map", "backward of 4,096 tokens on one card (matmul params)",
           "1.05 s", lambda: _flops(1).backward_time_s, sec(2)),
    Figure("q-ddp-bucket", "000", "map", "default DDP gradient bucket", "25 MiB",
           lambda: DDP_BUCKET_BYTES, lambda v: f"{v / MiB:.0f} MiB"),
    Figure("q-tp-msg", "000", "代价", "one TP all-reduce message, 4096 tokens",
           "4,096 x 5,120 x 2 bytes", _msg,
           lambda i: f"{i[0]:,} x {i[1]:,} x {i[2]:g} bytes"),
    Figure("q-tp-ar-card", "000", "代价", "bytes one card sends per ring all-reduce, t=8",
           "73.4 MB", lambda: _tp().send_bytes_per_allreduce, mb(1)),
    Figure("q-tp-step", "000", "代价", "TP bytes per card, fwd+bwd of 4096 tokens, t=8",
           "18.8 GB", lambda: _tp().send_bytes_per_step, gb(1)),
    Figure("q-tp-flop-rank", "000", "代价", "per-card compute for those tokens (matmul params)",
           "79 TFLOP", lambda: _flops(c.Q_T).flop_per_rank, tflop(0)),
    Figure("q-tp-nvlink", "000", "代价", "18.8 GB over NVLink 160 GB/s", "117 ms",
           lambda: _tp().nvlink.time_s, ms(0)),
    Figure("q-tp-ib", "000", "代价", "18.8 GB over IB 50 GB/s", "376 ms",
           lambda: _tp().ib.time_s, ms(0)),
    Figure("q-nvlink-vs-ib", "000", "代价", "160 / 50", "3.2",
           lambda: h800().intra_node_bandwidth_bytes_per_s.value / _ib(), num(1)),
    Figure("q-ffn-per-card", "000", "shapes", "FFN intermediate per card, 17408 / 8", "2176",
           lambda: divide(qwen().intermediate_size, c.Q_T, what="intermediate_size", by="t"),
           str),
    Figure("q-toy-ffn-per-card", "000", "shapes", "verification bench: 16 / 2 cards", "8",
           lambda: divide(c.TOY_INTERMEDIATE, c.TOY_CARDS, what="intermediate", by="cards"),
           str),
    Figure("q-heads-per-card", "000", "GQA", "24 query heads / t=8", "3",
           lambda: divide(qwen().num_attention_heads, c.Q_T, what="heads", by="t"), str),
    Figure("q-kv-replication-8", "000", "GQA", "4 KV heads at t=8: ranks per KV head", "2",
           lambda: kv_split(qwen(), 8)[1], str),
    Figure("q-kv-replication-4", "000", "GQA", "t=4: one KV head per card", "1",
           lambda: kv_split(qwen(), 4)[1], str),
    Figure("q-allgather-vs-ar", "000", "误解之二", "all-gather the 17,408 intermediate vs "
           "all-reduce the 5,120 output (message sizes; in ring bytes per rank it is 1.7)",
           "3.4", _allgather_vs_allreduce, num(1)),
    Figure("q-pp-layers-per-stage", "000", "summary", "64 layers / p=8", "8",
           lambda: rank_layer_counts(qwen().num_hidden_layers, c.Q_PP)[0], str),
    Figure("q-pp-p2p", "000", "summary", "activation between stages per micro-batch (41.9 MB)",
           "0.0 GB", lambda: p2p_bytes(c.Q_SEQ, 1, qwen().hidden_size, Dtype.bf16,
                                       scatter_gather=False), gb(1)),
    Figure("q-pp-bubble", "000", "summary", "bubble (p-1)/m, p=8, m=32", "21.9%",
           lambda: bubble_ratio(Schedule.one_f_one_b, c.Q_PP, c.Q_MICROBATCHES, EQUAL_TIMES),
           pct(1)),
    Figure("q-pp-bubble-share", "000", "map", "bubble share of the step (p-1)/(m+p-1)", "17.9%",
           lambda: bubble_share(Schedule.one_f_one_b, c.Q_PP, c.Q_MICROBATCHES, EQUAL_TIMES),
           pct(1)),
    Figure("q-pp-interleaved", "000", "map", "interleaved, v=4: (p-1)/(m v)", "5.5%",
           lambda: bubble_ratio(Schedule.interleaved, c.Q_PP, c.Q_MICROBATCHES, EQUAL_TIMES,
                                v=c.Q_VPP), pct(1)),
    Figure("q-zb-h1", "000", "map", "ZB-H1 bubble relative to 1F1B when F=B=W", "1/3",
           lambda: bubble_time_s(Schedule.zb_h1, c.Q_PP, c.Q_MICROBATCHES, EQUAL_TIMES)
           / bubble_time_s(Schedule.one_f_one_b, c.Q_PP, c.Q_MICROBATCHES, EQUAL_TIMES),
           fraction()),
    Figure("q-cp-block", "000", "summary", "one K,V block per ring step, s=131,072, 8 cards",
           "0.1 GB", _cp_block, gb(1)),
    Figure("q-cp-steps", "000", "summary", "ring steps per full-attention layer, 8 cards", "7",
           _cp_steps, str),
    Figure("q-cp-layer", "000", "map", "K,V bytes per card per full-attention layer", "0.5 GB",
           lambda: _cp_block() * _cp_steps(), gb(1)),
    Figure("q-cp-causal-load", "000", "map", "causal work of 4 cards, 16 chunks, contiguous",
           "10 : 26 : 42 : 58",
           lambda: causal_work_per_rank(c.Q_CP_CHUNKS, c.Q_CP_RANKS, CausalSplit.contiguous),
           _ratio_text),
    Figure("q-ep-experts-per-card", "000", "summary", "DeepSeek-V3 256 routed experts / 64",
           "4", lambda: experts_per_rank(deepseek(), c.Q_EP), str),
    Figure("q-ep-routed-params", "000", "map", "DeepSeek-V3 routed-expert parameters", "654B",
           lambda: routed_expert_params(deepseek()), lambda v: f"{v / 1e9:.0f}B"),
    Figure("q-ep-max-nodes", "000", "summary", "each token routed to at most 4 nodes", "4",
           lambda: max_nodes_per_token(deepseek()), str),
    Figure("q-ds-one-card-years", "000", "map", "2,664K H800 GPU hours on one card", "304",
           lambda: c.DS_GPU_HOURS / HOURS_PER_YEAR, num(0)),
    Figure("q-llama405-4d", "000", "map", "Llama 3 405B [TP, CP, PP, DP] on 16,384 H100, "
           "BF16 MFU 41%", "8 x 1 x 16 x 128",
           cited="Llama 3 paper (Dubey et al. 2024) Table 4; 'tpcalc layout' prices it"),
    Figure("q-ds-parallel", "000", "map", "DeepSeek-V3 training layout, no TP",
           "PP 16 x EP 64 x ZeRO-1 DP",
           cited="DeepSeek-V3 report §3.2; 'tpcalc layout' prices it"),
]  # fmt: skip
