"""Seed 003 (llm_internals §7.3, Llama 3 70B, H100 links): every printed figure."""

from __future__ import annotations

from tpcalc.calc.activations.paper import Logits, logits, paper_layer
from tpcalc.calc.params.counts import layer_params, total_params
from tpcalc.calc.params.states import model_states_bytes
from tpcalc.calc.tp.comm import TpComm, tp_comm
from tpcalc.calc.tp.flops import tp_flops
from tpcalc.calc.tp.rules import kv_split, max_t_without_replication
from tpcalc.calc.tp.weights import model_weights
from tpcalc.choices import ParamConvention, Recompute, StateRecipe
from tpcalc.figures.context import L_B, L_SEQ, L_T, h100, llama70b
from tpcalc.figures.model import Figure, gb, mb, num, pct, sec, shape
from tpcalc.units import GB, Dtype

HUNDRED_MILLION = 10**8  # 亿


def _compute_time_s() -> float:
    """Compute of one micro-batch per card, all parameters (seed 003 §7.3.5 counts them all)."""
    return tp_flops(llama70b(), h100(), t=L_T, seq=L_SEQ, micro_batch=L_B,
                    params=ParamConvention.all).compute_time_s  # fmt: skip


def _comm() -> TpComm:
    return tp_comm(llama70b(), h100(), t=L_T, seq=L_SEQ, micro_batch=L_B, with_latency=False,
                   compute_time_s=_compute_time_s())  # fmt: skip


def _shard(weight: str) -> list[int]:
    # seed 003 divides the unpadded vocabulary (128256 / 8 = 16032): pad multiple 1
    for w in model_weights(llama70b(), L_T, 1):
        if w.weight == weight:
            return [w.shard_rows, w.shard_cols]
    raise KeyError(weight)


def _unsplit() -> float:
    return paper_layer(llama70b(), seq=L_SEQ, micro_batch=L_B, t=L_T, sp=False,
                       recompute=Recompute.selective).unsplit_bytes_per_layer  # fmt: skip


def _logits() -> Logits:
    return logits(llama70b(), seq=L_SEQ, micro_batch=L_B, t=L_T)


def _heads() -> tuple[int, int]:
    spec = llama70b()
    return spec.num_attention_heads // L_T, kv_split(spec, L_T)[0]


def _formula_coefficient() -> float:
    """Elements per layer per card divided by (t-1)/t·s·b·h: the 8 of 8(t-1)/t·sbh."""
    spec = llama70b()
    elements = _comm().send_bytes_per_layer / Dtype.bf16.bytes
    return elements / ((L_T - 1) / L_T * L_SEQ * L_B * spec.hidden_size)


S = "seed 003"
FIGURES = [
    Figure("l-act-msg", "003", "§7.3.5", "one activation [s,b,h] in BF16", "134.2 MB",
           lambda: _comm().message_bytes, mb(1)),
    Figure("l-ar-card", "003", "§7.3.5", "bytes one card sends per all-reduce, t=8", "234.9 MB",
           lambda: _comm().send_bytes_per_allreduce, mb(1)),
    Figure("l-ar-layer", "003", "§7.3.5", "per layer, 4 all-reduces", "939.5 MB",
           lambda: _comm().send_bytes_per_layer, mb(1)),
    Figure("l-ar-step", "003", "§7.3.5", "80 layers, one micro-batch fwd+bwd", "75.2 GB",
           lambda: _comm().send_bytes_per_step, gb(1)),
    Figure("l-ar-formula", "003", "§7.3.5", "per layer per card per micro-batch",
           "8 (t-1)/t s b h elements", _formula_coefficient,
           lambda c: f"{c:g} (t-1)/t s b h elements"),
    Figure("l-nvlink-time", "003", "table 7-7", "75.2 GB over NVLink 450 GB/s", "0.17 s",
           lambda: _comm().nvlink.time_s, sec(2)),
    Figure("l-nvlink-share", "003", "table 7-7", "NVLink time / compute time", "15%",
           lambda: _comm().nvlink_share, pct(0)),
    Figure("l-ib-time", "003", "table 7-7", "75.2 GB over 50 GB/s", "1.50 s",
           lambda: _comm().ib.time_s, sec(2)),
    Figure("l-ib-share", "003", "table 7-7", "IB time / compute time", "139%",
           lambda: _comm().ib_share, pct(0)),
    Figure("l-bw-ratio", "003", "§7.3.5", "450 / 50", "9",
           lambda: h100().intra_node_bandwidth_bytes_per_s.value
           / h100().inter_node_bandwidth_bytes_per_s.value, num(0)),
    Figure("l-compute", "003", "table 7-7", "compute of one micro-batch per card (all params)",
           "1.08 s", lambda: _comm().compute_time_s, sec(2)),
    Figure("l-heads-per-card", "003", "§7.3.4", "64 Q / 8 KV heads at t=8",
           "8 query heads, 1 KV head", _heads, lambda v: f"{v[0]} query heads, {v[1]} KV head"),
    Figure("l-wq-shard", "003", "§7.3.4", "W_Q shard per card", "[8192, 1024]",
           lambda: _shard("W_Q"), shape),
    Figure("l-wk-shard", "003", "§7.3.4", "W_K (and W_V) shard per card", "[8192, 128]",
           lambda: _shard("W_K"), shape),
    Figure("l-attn-out", "003", "§7.3.4", "W_O shard, row split", "[s, 1024] x [1024, 8192]",
           lambda: _shard("W_O"), lambda v: f"[s, {v[0]}] x {shape(v)}"),
    Figure("l-gate-up-shard", "003", "§7.3.4", "SwiGLU gate and up shard per card",
           "[8192, 3584]", lambda: _shard("W_gate"), shape),
    Figure("l-down-shard", "003", "§7.3.4", "down projection shard per card", "[3584, 8192]",
           lambda: _shard("W_down"), shape),
    Figure("l-kv-max-t", "003", "§7.3.4", "largest t without KV replication", "8",
           lambda: max_t_without_replication(llama70b()), num(0)),
    Figure("l-vocab-shard", "003", "§7.3.4", "embedding shard per card, 128256 / 8",
           "[16032, 8192]", lambda: _shard("embedding"), shape),
    Figure("l-logits-bf16", "003", "§7.3.4", "LM-head logits [8192, 128256] in BF16", "2.10 GB",
           lambda: float(_logits().logits_bf16_bytes), gb(2)),
    Figure("l-logits-fp32", "003", "§7.3.4", "same in FP32 for cross-entropy", "4.20 GB",
           lambda: float(_logits().logits_fp32_bytes), gb(2)),
    Figure("l-layer-params", "003", "table 7-8", "parameters of one layer, and per card at t=8",
           "8.56 亿 / 8 = 1.07 亿", lambda: layer_params(llama70b(), 0),
           lambda n: f"{n / HUNDRED_MILLION:.2f} 亿 / {L_T} = {n / L_T / HUNDRED_MILLION:.2f} 亿"),
    Figure("l-unsplit-act-layer", "003", "§7.3.6", "activations TP does not split, 10sbh/layer",
           "0.67 GB", _unsplit, gb(2)),
    Figure("l-unsplit-act-model", "003", "§7.3.6", "same over 80 layers", "53.7 GB",
           lambda: _unsplit() * llama70b().num_hidden_layers, gb(1)),
    Figure("l-unsplit-act-sp", "003", "§7.3.6", "per layer with sequence parallelism, /8",
           "0.084 GB", lambda: _unsplit() / L_T, gb(3)),
    Figure("l-states", "003", "§7.3.7", "Llama 3 70B model states (16 B/param)", "1,128.9 GB",
           lambda: model_states_bytes(total_params(llama70b()), StateRecipe.zero16), gb(1)),
    Figure("l-states-tp8", "003", "§7.3.7", "per card after t=8", "141 GB",
           lambda: model_states_bytes(total_params(llama70b()), StateRecipe.zero16, shards=L_T),
           lambda v: f"{v / GB:.0f} GB"),
    Figure("l-sp-layer-time", "003", "§7.3.6",
           "Megatron 22B layer forward without/with SP (about 6%)", "7.7 ms -> 7.2 ms",
           cited="Korthikanti et al. 2022 (measured on a 22B model), quoted by seed 003 §7.3.6"),
]  # fmt: skip


def _hand():
    from tpcalc.verify.seed003 import seed003_example  # numpy: only when the figure is asked

    return seed003_example()


def _ints(v) -> str:
    return shape([int(x) for x in v.reshape(-1)])


FIGURES += [
    Figure("h-forward", "003", "§7.3.2", "X·W1 → ReLU → ·W2 on 1 card and on 2 cards agree",
           "[7, -2]", lambda: _hand(), lambda r: _ints(r.y_column_row)
           if (r.y_column_row == r.y_single).all() else "cards disagree"),
    Figure("h-card-partials", "003", "§7.3.2", "per-card partial sums before the all-reduce",
           "[4, 1] + [3, -3]", lambda: _hand(),
           lambda r: " + ".join(_ints(y) for y in r.card_y)),
    Figure("h-row-first-wrong", "003", "§7.3.2", "row-split first, ReLU on partial sums: wrong",
           "[2, 1, 1, 4] vs [2, 1, 0, 3]", lambda: _hand(),
           lambda r: f"{_ints(r.row_first_no_sync)} vs {_ints(r.h_single)}"),
    Figure("h-backward", "003", "§7.3.3", "dY=[1,-1]; per-card dX summed by f's all-reduce",
           "dX = [5, -1]", lambda: _hand(), lambda r: f"dX = {_ints(r.dx_tp)}"),
]  # fmt: skip
