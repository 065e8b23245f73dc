"""What one rank runs for one micro-batch: every GEMM, attention core and memory-bound kernel,
with its real shape after TP, SP, CP and EP.

Each operation is an ``Op`` in one pass: forward, backward for the input (B) or backward for the
weights (W), as zero-bubble schedules need them apart (Qi et al. 2023 §2). A GEMM Y[M,N] =
X[M,K]·W[K,N] costs 2·M·N·K FLOP forward, and its backward is two GEMMs of the same FLOP:
dX = dY·Wᵀ (B) and dW = Xᵀ·dY (W) (Narayanan et al. 2021 §5.1). The attention core is fused
(FlashAttention, Dao 2023): forward 2 matmuls, backward 5 (it recomputes the scores), so the
backward costs (3·d_qk + 2·d_v)/(d_qk + d_v) = 2.5 times the forward (Dao 2023 §3.1); a causal
mask skips half the score blocks. Memory-bound kernels (norms, activations, RoPE, residual
adds, permutes, the loss) are counted in the bytes they read and write.

Shapes follow Megatron-Core: a TP GEMM sees all T = s·b/cp tokens of its CP chunk and 1/t of
the weight (Shoeybi et al. 2019 §3); with sequence parallelism the norms and residual adds see
T/t tokens (Korthikanti et al. 2022 §4.2.2); an MoE layer dispatches its T/t tokens to
experts over EP (Megatron-Core MoE token dispatcher, alltoall).
"""

from __future__ import annotations

from enum import Enum

from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.params.counts import deltanet_in_proj_width
from tpcalc.specs import ModelSpec
from tpcalc.units import Dtype

GEMM_FLOP_PER_MAC = 2  # one multiply-add is 2 FLOP
# FlashAttention backward matmuls: S = Q·Kᵀ again, dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q:
# three over d_qk, two over d_v (Dao 2023 Algorithm 2).
ATTN_BWD_QK_MATMULS = 3
ATTN_BWD_V_MATMULS = 2
CAUSAL_SHARE = 0.5  # a causal mask skips the upper triangle of score blocks (Dao 2023 §3.1)
CP_CHUNKS_PER_RANK = 2  # zig-zag: each CP rank holds chunks i and 2·cp−1−i (Megatron-Core CP)
# Merging two partial attention outputs by their log-sum-exp: read both (fp32) and write one
# (Transformer Engine attention.py, flash_attn_fwd_out_correction), per ring step after the
# first; the backward accumulates dQ, dK, dV the same way.
CP_MERGE_BYTES = 3 * 4
GDN_CHUNK = 64  # chunk length of the chunked delta rule (Yang et al. 2024, Gated DeltaNet §3.3)
# The chunked gated delta rule as Megatron-Core runs it (megatron/core/ssm/gated_delta_net.py:
# flash-linear-attention's Triton chunk_gated_delta_rule) is bound by its HBM traffic, not by
# its multiply-adds (docs/kernel-measurements.md §2.6). Its forward moves this many bytes per
# token and value head at d_k = d_v = 128: FLA's forward of one [1, 8192, 96, 128] BF16 call took
# 1.2792 ms on GB200 (MoonshotAI/FlashKDA BENCHMARK_GB200.md @ d2ff19a, "Fixed",
# fla_chunk_gdn), 1.2792 ms × 7.2 TB/s (gb200.yaml: 8 TB/s × hbm_efficiency 0.90) / (8192 · 96).
GDN_FWD_BYTES_PER_TOKEN_HEAD = 11_711.4
GDN_MEASURED_HEAD_DIM = 128  # d_k = d_v of that measurement
# Its backward against its forward, FLA's Triton chunked KDA (the same WY pipeline, per-channel
# gates) on [1, 8192, 96, 128]: fwd+bwd 23.4677 ms, fwd 5.4185 ms (MoonshotAI/FlashKDA
# BENCHMARK_TRAIN_RTX5090.md @ 96c4273, fla_chunk_kda); no public GDN backward timing was found
GDN_BWD_OVER_FWD = (23.4677 - 5.4185) / 5.4185
MTP_PRE_NORM_INPUTS = 2  # the embedding and the hidden state, normed and concatenated (2h)
# Elements read + written per element, forward / backward (each backward reads the saved
# input(s) and the output gradient and writes the input gradient(s)):
NORM_RW = (2, 3)  # RMSNorm/LayerNorm: x -> y; x, dy -> dx
RESIDUAL_RW = (3, 3)  # a + b -> y; the gradient is summed where the branches meet
ACT_GATED_RW = (3, 5)  # SwiGLU per output element: gate, up -> y; gate, up, dy -> dgate, dup
ACT_PLAIN_RW = (2, 3)  # GeLU, fused with its bias (Megatron bias_gelu_fusion): x -> y; x, dy -> dx
# Squared ReLU (Nemotron, So et al. 2021 "Primer"), unfused in Megatron-Core: relu then square
# forward (x -> r -> y), and their two backward kernels.
ACT_RELU2_RW = (4, 6)
ROPE_RW = (2, 2)  # q, k rotated in place; the backward rotates the gradient back
# Materialised softmax: scores -> probabilities; probabilities, their gradient -> dscores
UNFUSED_SOFTMAX_RW = (2, 3)
# Dropout (PyTorch native_dropout: reads x, writes the output and a one-byte bool mask;
# native_dropout_backward reads the gradient and the mask, writes the gradient), bytes per
# element besides the activation dtype's: the mask, once each way.
DROPOUT_MASK_BYTES = 1
DROPOUT_RW = (2, 2)
# The kernels of materialised attention (``unfused_attention``), named <core>_<part>: selective
# recompute of the core re-runs every one of them.
UNFUSED_PARTS = ("qk", "softmax", "dropout", "pv")
GATE_RW = (3, 4)  # sigmoid output gate: o, g -> y; o, g, dy -> do, dg
# Gated DeltaNet's short causal depthwise conv with fused SiLU, one tiled pass (flash-linear-
# attention fla/modules/convolution.py causal_conv1d, which Megatron-Core's GatedDeltaNet calls:
# each tile reads its tokens and the W − 1 before them): x -> y; x, dy -> dx (the W-tap weight
# gradient is a reduction into W values per channel)
CONV_RW = (2, 3)
# Megatron-Core's inputs to the delta rule (gated_delta_net/common.py
# _prepare_input_for_gated_delta_rule @ d98e8a6): q and k L2-normed by FLA's l2norm (a norm:
# NORM_RW), repeated from the key heads to the value heads where there are more value heads
# (repeat_interleave: reads the key-head rows, writes the value-head rows; its backward sums
# back), v and the output gate made contiguous out of their split views (a copy each way)
REPEAT_RW = (1, 1)  # per element read or written: key-head rows in, value-head rows out
COPY_RW = (2, 2)  # x -> y; dy -> dx
PERMUTE_RW = (2, 2)  # MoE token permute / unpermute: a gather and its scatter
# The routed experts' fc2 bias (models with mlp_bias: GPT-OSS), added unfused after the grouped
# GEMM, weighted by each copy's routing probability (Megatron-Core TEGroupedMLP._apply_bias,
# core_r0.15.0/0.16.0 megatron/core/transformer/moe/experts.py: fc2 has skip_bias_add=True, then
# per expert cat(t + b·p).to(dtype), with p fp32). Bytes per output element, forward: b·p
# writes fp32; t + b·p reads bf16 t and fp32 b·p, writes fp32; cat copies fp32; the cast reads
# fp32 and writes bf16. Backward (autograd): the cast's gradient to fp32, its cast back for t,
# and the two broadcast reductions of b·p's gradient (g·p summed over tokens for b, g·b summed
# over the hidden for p), each a product written and read.
FP32, BF16 = 4, 2
EXPERT_BIAS_FWD_BYTES = FP32 + (BF16 + FP32 + FP32) + (FP32 + FP32) + (FP32 + BF16)
EXPERT_BIAS_BWD_BYTES = (BF16 + FP32) + (FP32 + BF16) + 2 * (FP32 + FP32 + FP32)
EMBED_RW = (1, 3)  # lookup writes T·h; the backward scatter-adds dy into the table
# FP8 GEMMs (Transformer Engine on Hopper) take FP8 operands in the TN layout: the input is cast
# and transposed by one fused kernel before the forward (read 2 B, write 1 B + 1 B transposed per
# element), and the output gradient likewise before the backward (TE cast_transpose; Micikevicius
# et al. 2022, "FP8 formats for deep learning" §4, per-tensor scaling).
FP8_CAST_TRANSPOSE_BYTES = 4
# Vocab-parallel cross entropy in fp32 (Megatron-LM core/tensor_parallel/cross_entropy.py):
# forward reads the logits, writes exp(logits - max) and reads it for the sum; backward reads
# the softmax and writes the gradient of the logits.
CE_FWD_BYTES_PER_LOGIT = 12
CE_BWD_BYTES_PER_LOGIT = 8


class OpKind(str, Enum):
    gemm = "gemm"
    attention = "attention"
    memory = "memory"


class Pass(str, Enum):
    forward = "F"
    backward_input = "B"
    backward_weight = "W"


class Op(Struct, frozen=True):
    """One kernel of one pass. A grouped GEMM has ``groups`` GEMMs of shape [m, n, k] each."""

    name: str
    kind: OpKind
    phase: Pass
    flop: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    groups: int = 1
    fp8: bool = False  # a GEMM with FP8 operands (FP8 peak and efficiency)
    causal: bool = True  # an attention kernel with a causal mask (False: every block computed)


class Shard(Struct, frozen=True):
    """How one micro-batch is cut for one rank: its tokens and its slice of each weight."""

    seq: int
    micro_batch: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sp: bool = True
    dtype: Dtype = Dtype.bf16  # activations and communication
    gemm_dtype: Dtype = Dtype.bf16  # the transformer layers' GEMM operands (fp8 with TE)
    causal: bool = True
    # A fused attention kernel for learnable softmax sinks (cuDNN / FlashAttention with sinks);
    # False: the unfused fallback Transformer Engine takes without one (TE issue #2318).
    fused_sinks: bool = True
    # The scores materialised by every attention layer (choices.AttentionKernel eager: Megatron's
    # own attention, the only one before FlashAttention), and dropout on its probabilities
    materialised_scores: bool = False
    attention_dropout: bool = False
    # Hidden dropout (the run trains with dropout): Megatron-Core's bias-dropout-add after the
    # attention and the MLP, and the embedding's dropout, each with its one-byte mask
    hidden_dropout: bool = False

    @property
    def tokens(self) -> int:
        """T = s·b/cp: the tokens every TP GEMM of this rank multiplies."""
        return self.seq * self.micro_batch // self.cp

    @property
    def sp_tokens(self) -> int:
        """Tokens of norms and residual adds: T/t with sequence parallelism, else T."""
        return self.tokens // self.tp if self.sp else self.tokens


def gemm(name: str, m: int, n: int, k: int, dtype: Dtype, groups: int = 1) -> tuple[Op, ...]:
    """Y[m,n] = X[m,k]·W[k,n] forward, dX = dY·Wᵀ (B), dW = Xᵀ·dY (W); 2·m·n·k FLOP each.
    FP8 adds the cast-transpose of X (forward) and of dY (backward)."""
    flop = GEMM_FLOP_PER_MAC * m * n * k * groups
    size = dtype.bytes * groups
    fp8 = dtype is Dtype.fp8

    def op(phase: Pass, a: int, b: int, c: int) -> Op:
        traffic = (a * c + c * b + a * b) * size
        return Op(name, OpKind.gemm, phase, flop, traffic, a, b, c, groups, fp8)

    ops = (
        op(Pass.forward, m, n, k),
        op(Pass.backward_input, m, k, n),
        op(Pass.backward_weight, n, k, m),
    )
    if not fp8:
        return ops
    cast = FP8_CAST_TRANSPOSE_BYTES * groups
    return ops + (
        Op(f"{name}_fp8_cast", OpKind.memory, Pass.forward, 0.0, cast * m * k),
        Op(f"{name}_fp8_cast", OpKind.memory, Pass.backward_input, 0.0, cast * m * n),
    )


def elementwise(name: str, elements: float, rw: tuple[int, int], dtype: Dtype) -> tuple[Op, ...]:
    """A memory-bound kernel over ``elements``: forward and backward bytes from ``rw``."""
    fwd, bwd = rw
    return (
        Op(name, OpKind.memory, Pass.forward, 0.0, fwd * elements * dtype.bytes),
        Op(name, OpKind.memory, Pass.backward_input, 0.0, bwd * elements * dtype.bytes),
    )


def dropout(name: str, elements: float, dtype: Dtype) -> tuple[Op, ...]:
    """Dropout over ``elements`` (PyTorch native_dropout: reads x, writes the output and a
    one-byte bool mask; native_dropout_backward reads the gradient and the mask, writes the
    input gradient)."""
    fwd, bwd = (rw * dtype.bytes + DROPOUT_MASK_BYTES for rw in DROPOUT_RW)
    return (
        Op(name, OpKind.memory, Pass.forward, 0.0, fwd * elements),
        Op(name, OpKind.memory, Pass.backward_input, 0.0, bwd * elements),
    )


def residual(name: str, shard: Shard, elements: float) -> tuple[Op, ...]:
    """A residual add over ``elements`` (``RESIDUAL_RW``); when the run trains with dropout,
    Megatron-Core's fused bias-dropout-add (megatron/core/fusions/fused_bias_dropout.py:
    residual + dropout(x + bias)) also writes the one-byte mask forward and reads it backward."""
    ops = elementwise(name, elements, RESIDUAL_RW, shard.dtype)
    if not shard.hidden_dropout:
        return ops
    return tuple(replace(o, bytes=o.bytes + DROPOUT_MASK_BYTES * elements) for o in ops)


def attention_core(
    name: str,
    shard: Shard,
    heads: int,
    kv_heads: int,
    d_qk: int,
    d_v: int,
    window: int | None = None,
) -> tuple[Op, ...]:
    """Fused attention of this rank's heads: its s/cp queries against all s keys, causal blocks
    skipped; forward 2 and backward 5 matmuls (Dao 2023). A banded layer (``window``) lets each
    query see its last ``window`` keys only, so the kernel does q_len · window score blocks
    (FlashAttention-2 window_size; Beltagy et al. 2020).

    Under CP the ring runs cp kernel calls per pass, one per step (Transformer Engine
    context_parallel.py, AttnFuncWithCPAndKVP2P; Liu et al. 2023 Ring Attention). With a causal
    mask and the zig-zag halves, step 0 is the rank's s/cp queries against its own s/cp keys
    under the mask (the "diagonal" section), and each of the cp − 1 others is unmasked: all s/cp
    queries against the first half of a block of keys ("lower-triangle") or the second half of
    the queries against a whole block ("upper-triangle"), s/(2·cp) on the short side. So the
    diagonal is timed on the causal kernel's curve at s/cp, the rest on the unmasked kernel's
    at s/(2·cp) (``roofline.attention_efficiency``); each ring step does the same score blocks.
    Without a mask every step is a whole block (the "all" section). After each step the partial
    outputs are merged by their log-sum-exp (an fp32 read of both and a write)."""
    b, q_len, kv_len = shard.micro_batch, shard.seq // shard.cp, shard.seq
    io = b * (q_len * heads * (2 * d_qk + 2 * d_v) + kv_len * kv_heads * (d_qk + d_v))
    per_score = GEMM_FLOP_PER_MAC * b * heads  # 2·b·h FLOP per (query, key) pair and feature
    if window is not None and window < kv_len:
        block = min(q_len // CP_CHUNKS_PER_RANK if shard.cp > 1 else q_len, window)
        ops = _fused(name, shard, per_score * q_len * window, io, (block, kv_len), d_qk, d_v, heads)
    elif shard.cp == 1 or not shard.causal:
        mask = CAUSAL_SHARE if shard.causal else 1.0
        scores = per_score * q_len * kv_len * mask
        ops = _fused(name, shard, scores, io, (q_len, kv_len), d_qk, d_v, heads, shard.causal)
    else:
        diagonal = per_score * q_len * q_len * CAUSAL_SHARE
        ring = per_score * q_len * (kv_len - q_len) * CAUSAL_SHARE  # (cp − 1) unmasked half blocks
        share = diagonal / (diagonal + ring)
        half = q_len // CP_CHUNKS_PER_RANK
        ops = _fused(name, shard, diagonal, io * share, (q_len, q_len), d_qk, d_v, heads)
        ops += _fused(
            name, shard, ring, io * (1 - share), (half, kv_len - q_len), d_qk, d_v, heads, False
        )
    if shard.cp == 1:
        return ops
    merged = (shard.cp - 1) * b * q_len * heads * d_v * CP_MERGE_BYTES
    return ops + (
        Op("cp_merge", OpKind.memory, Pass.forward, 0.0, merged),
        Op("cp_merge", OpKind.memory, Pass.backward_input, 0.0, merged),
    )


def _fused(
    name: str, shard: Shard, scores: float, io: float, blocks: tuple[int, int],
    d_qk: int, d_v: int, heads: int, causal: bool = True,
) -> tuple[Op, ...]:  # fmt: skip
    """One fused attention kernel's forward and backward over ``scores`` (2·score blocks
    computed): Q·Kᵀ over d_qk and P·V over d_v forward, three and two of them backward (Dao 2023
    Algorithms 1 and 2); ``blocks`` = (queries, keys) of one call, the queries setting the
    efficiency (``Op.m``)."""
    fwd = scores * (d_qk + d_v)
    bwd = scores * (ATTN_BWD_QK_MATMULS * d_qk + ATTN_BWD_V_MATMULS * d_v)
    size = shard.dtype.bytes
    q, kv = blocks
    return (
        Op(name, OpKind.attention, Pass.forward, fwd, io * size, q, kv, d_qk, heads, causal=causal),
        Op(name, OpKind.attention, Pass.backward_input, bwd, 2 * io * size, q, kv, d_qk, heads,
           causal=causal),
    )  # fmt: skip


def unfused_attention(
    name: str, shard: Shard, heads: int, d_qk: int, d_v: int | None = None
) -> tuple[Op, ...]:
    """Attention with the scores materialised (Megatron's own attention, Korthikanti et al. 2022
    §4.1: QKᵀ, a fused scale-mask-softmax, dropout on the probabilities, then ·V; Transformer
    Engine's UnfusedDotProductAttention, which it falls back to for a learnable softmax sink:
    NVIDIA/TransformerEngine issue #2318): Q·Kᵀ and P·V as batched GEMMs over every score,
    masked or not, a softmax that reads and writes each score (its backward: probabilities and
    their gradient in, score gradient out) and, when the run trains with dropout, the dropout of
    the probabilities with its one-byte mask."""
    b, q_len, kv_len = shard.micro_batch, shard.seq // shard.cp, shard.seq
    groups = b * heads
    scores = groups * q_len * kv_len
    dt = shard.dtype
    qk, softmax, drop, pv = (f"{name}_{part}" for part in UNFUSED_PARTS)
    dropout_ops = dropout(drop, scores, dt) if shard.attention_dropout else ()
    return (
        *gemm(qk, q_len, kv_len, d_qk, dt, groups),
        *elementwise(softmax, scores, UNFUSED_SOFTMAX_RW, dt),
        *dropout_ops,
        *gemm(pv, q_len, d_qk if d_v is None else d_v, kv_len, dt, groups),
    )


def _heads(spec: ModelSpec, shard: Shard) -> tuple[int, int]:
    """(query heads, KV heads) on one TP rank; KV heads are replicated when t > n_kv."""
    return spec.num_attention_heads // shard.tp, max(1, spec.kv_heads // shard.tp)


def attention_ops(spec: ModelSpec, shard: Shard, banded: bool = False) -> tuple[Op, ...]:
    """An attention block (MHA/GQA, optional q/k norm and output gate; Qwen3.5 gated
    attention; banded with the model's sliding window): norm, QKV, RoPE, core, gate, out-proj,
    residual add."""
    if spec.is_mla:
        return mla_ops(spec, shard)
    t_all, t_sp, h, dt = shard.tokens, shard.sp_tokens, spec.hidden_size, shard.dtype
    nq, nkv = _heads(spec, shard)
    d = spec.head_dim_resolved
    gate = 2 if spec.attn_output_gate else 1
    ops = [*elementwise("attn_norm", t_sp * h, NORM_RW, dt)]
    ops += gemm("qkv_proj", t_all, (nq * gate + 2 * nkv) * d, h, shard.gemm_dtype)
    if spec.uses_qk_norm:
        ops += elementwise("qk_norm", t_all * (nq + nkv) * d, NORM_RW, dt)
    if spec.uses_rope:
        ops += elementwise("rope", t_all * (nq + nkv) * d, ROPE_RW, dt)
    window = spec.sliding_window if banded else None
    if shard.materialised_scores or (spec.attention_sinks and not shard.fused_sinks):
        ops += unfused_attention("core_attn", shard, nq, d)
    else:
        ops += attention_core("core_attn", shard, nq, nkv, d, d, window)
    if spec.attn_output_gate:
        ops += elementwise("attn_gate", t_all * nq * d, GATE_RW, dt)
    ops += gemm("out_proj", t_all, h, nq * d, shard.gemm_dtype)
    ops += residual("attn_residual", shard, t_sp * h)
    return tuple(ops)


def mla_ops(spec: ModelSpec, shard: Shard) -> tuple[Op, ...]:
    """Multi-head latent attention (DeepSeek-V3 report §2.1.1; Megatron-Core MLASelfAttention):
    the down-projections are replicated on every TP rank, the up-projections split by heads; the
    core multiplies q·k over nope+rope and attention·V over ``v_head_dim``."""
    t_all, t_sp, h, dt = shard.tokens, shard.sp_tokens, spec.hidden_size, shard.dtype
    nq = spec.num_attention_heads // shard.tp
    nope, rope, v = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0, spec.v_head_dim or 0
    kv_rank, q_rank = spec.kv_lora_rank or 0, spec.q_lora_rank
    ops = [*elementwise("attn_norm", t_sp * h, NORM_RW, dt)]
    if q_rank:
        ops += gemm("q_down_proj", t_all, q_rank, h, shard.gemm_dtype)
        ops += elementwise("q_norm", t_all * q_rank, NORM_RW, dt)
        ops += gemm("q_up_proj", t_all, nq * (nope + rope), q_rank, shard.gemm_dtype)
    else:
        ops += gemm("q_proj", t_all, nq * (nope + rope), h, shard.gemm_dtype)
    ops += gemm("kv_down_proj", t_all, kv_rank + rope, h, shard.gemm_dtype)
    ops += elementwise("kv_norm", t_all * kv_rank, NORM_RW, dt)
    ops += gemm("kv_up_proj", t_all, nq * (nope + v), kv_rank, shard.gemm_dtype)
    ops += elementwise("rope", t_all * (nq + 1) * rope, ROPE_RW, dt)
    if shard.materialised_scores:
        ops += unfused_attention("core_attn", shard, nq, nope + rope, v)
    else:
        ops += attention_core("core_attn", shard, nq, nq, nope + rope, v)
    ops += gemm("out_proj", t_all, h, nq * v, shard.gemm_dtype)
    ops += residual("attn_residual", shard, t_sp * h)
    return tuple(ops)


def gdn_macs_per_token_head(dk: int, dv: int) -> int:
    """Multiply-adds of the chunked delta rule per token and value head, chunk C (Gated
    DeltaNet §3.3, the WY form): the intra-chunk Q·Kᵀ and its product with V and with the
    state, C·(d_k + d_v), plus reading and updating the d_k×d_v state, 2·d_k·d_v."""
    return GDN_CHUNK * (dk + dv) + 2 * dk * dv


def gdn_fwd_bytes_per_token_head(dk: int, dv: int) -> float:
    """HBM bytes the chunked gated delta rule's forward moves per token and value head:
    ``GDN_FWD_BYTES_PER_TOKEN_HEAD`` at the measured d_k = d_v = 128, in proportion to
    ``gdn_macs_per_token_head`` at other head sizes (the chunk's q, k, v, w, u rows grow with
    d, its d_k×d_v states with d²: an assumption, no other head size was measured)."""
    d = GDN_MEASURED_HEAD_DIM
    return (
        GDN_FWD_BYTES_PER_TOKEN_HEAD
        * gdn_macs_per_token_head(dk, dv)
        / gdn_macs_per_token_head(d, d)
    )


def linear_attention_ops(spec: ModelSpec, shard: Shard) -> tuple[Op, ...]:
    """A Gated DeltaNet block (Yang et al. 2024, arXiv 2412.06464; Qwen3.5): input projections,
    depthwise causal conv, the chunked delta rule, gated RMSNorm, out-proj.

    The chunked delta rule's FLOP are 2 · ``gdn_macs_per_token_head`` per token and value head
    forward, twice that backward; it is timed by the HBM traffic FLA's kernels were measured to
    move (``gdn_fwd_bytes_per_token_head``, the backward ``GDN_BWD_OVER_FWD`` times it), far
    above what its FLOP take on tensor cores."""
    t_all, t_sp, h, dt = shard.tokens, shard.sp_tokens, spec.hidden_size, shard.dtype
    nk = (spec.linear_num_key_heads or 0) // shard.tp
    nv = (spec.linear_num_value_heads or 0) // shard.tp
    dk, dv = spec.linear_key_head_dim or 0, spec.linear_value_head_dim or 0
    conv = 2 * nk * dk + nv * dv
    ops = [*elementwise("attn_norm", t_sp * h, NORM_RW, dt)]
    ops += gemm("in_proj", t_all, deltanet_in_proj_width(spec, shard.tp), h, shard.gemm_dtype)
    ops += elementwise("conv1d", t_all * conv, CONV_RW, dt)
    ops += elementwise("qk_l2norm", t_all * 2 * nk * dk, NORM_RW, dt)
    if nv > nk:
        ops += elementwise("qk_repeat", t_all * 2 * dk * (nk + nv), REPEAT_RW, dt)
    ops += elementwise("vz_copy", t_all * 2 * nv * dv, COPY_RW, dt)
    macs = t_all * nv * gdn_macs_per_token_head(dk, dv)
    fwd = GEMM_FLOP_PER_MAC * macs
    io = t_all * nv * gdn_fwd_bytes_per_token_head(dk, dv)
    ops += [
        Op("delta_rule", OpKind.attention, Pass.forward, fwd, io, t_all, dv, dk, nv),
        Op("delta_rule", OpKind.attention, Pass.backward_input, 2 * fwd, GDN_BWD_OVER_FWD * io,
           t_all, dv, dk, nv),
    ]  # fmt: skip
    ops += elementwise("gated_norm", t_all * nv * dv, GATE_RW, dt)
    ops += gemm("out_proj", t_all, h, nv * dv, shard.gemm_dtype)
    ops += residual("attn_residual", shard, t_sp * h)
    return tuple(ops)


def _mlp(
    prefix: str, spec: ModelSpec, shard: Shard, tokens: int, width: int, groups: int = 1
) -> tuple[Op, ...]:
    """One MLP on ``tokens`` (per group): fc1 (gate+up fused for SwiGLU), activation, fc2."""
    h, dt, gt = spec.hidden_size, shard.dtype, shard.gemm_dtype
    up = 2 * width if spec.gated_mlp else width
    if spec.gated_mlp:
        act = ACT_GATED_RW
    else:
        act = ACT_RELU2_RW if spec.hidden_act == "relu2" else ACT_PLAIN_RW
    return (
        *gemm(f"{prefix}fc1", tokens, up, h, gt, groups),
        *elementwise(f"{prefix}act", tokens * width * groups, act, dt),
        *gemm(f"{prefix}fc2", tokens, h, width, gt, groups),
    )


def dense_mlp_ops(spec: ModelSpec, shard: Shard) -> tuple[Op, ...]:
    """A dense MLP block split column-then-row over TP (Shoeybi et al. 2019 §3)."""
    t_sp, h, dt = shard.sp_tokens, spec.hidden_size, shard.dtype
    return (
        *elementwise("mlp_norm", t_sp * h, NORM_RW, dt),
        *_mlp("", spec, shard, shard.tokens, spec.intermediate_size // shard.tp),
        *residual("mlp_residual", shard, t_sp * h),
    )


def moe_tokens_per_expert(spec: ModelSpec, shard: Shard) -> int:
    """Tokens one local expert multiplies, balanced routing: the T/t tokens of each of the ep
    ranks, k copies each, spread over E experts, gathered over ETP (Megatron-Core MoE)."""
    k, experts = spec.num_experts_per_tok or 1, spec.n_routed_experts or 1
    local = shard.tokens // shard.tp
    return max(1, local * k * shard.ep * shard.etp // experts)


def moe_ops(spec: ModelSpec, shard: Shard) -> tuple[Op, ...]:
    """An MoE block (DeepSeek-V3 report §2.1.2; Megatron-Core MoELayer): router, permute, the
    local experts as grouped GEMMs, unpermute, and the TP-split shared expert."""
    from tpcalc.calc.params.counts import shared_expert_intermediate

    t_sp, h, dt = shard.sp_tokens, spec.hidden_size, shard.dtype
    experts = spec.n_routed_experts or 1
    k = spec.num_experts_per_tok or 1
    routed = shard.tokens // shard.tp * k
    local = experts // shard.ep
    width = (spec.moe_intermediate_size or 0) // shard.etp
    ops = [*elementwise("mlp_norm", t_sp * h, NORM_RW, dt)]
    ops += gemm("router", shard.tokens // shard.tp, experts, h, dt)
    ops += elementwise("permute", routed * h, PERMUTE_RW, dt)
    per_expert = moe_tokens_per_expert(spec, shard)
    ops += _mlp("expert_", spec, shard, per_expert, width, local)
    if spec.mlp_bias:
        outputs = per_expert * local * h
        ops += (
            Op("expert_bias", OpKind.memory, Pass.forward, 0.0, EXPERT_BIAS_FWD_BYTES * outputs),
            Op("expert_bias", OpKind.memory, Pass.backward_input, 0.0,
               EXPERT_BIAS_BWD_BYTES * outputs),
        )  # fmt: skip
    ops += elementwise("unpermute", routed * h, PERMUTE_RW, dt)
    shared = shared_expert_intermediate(spec)
    if shared:
        ops += _mlp("shared_", spec, shard, shard.tokens, shared // shard.tp)
    ops += residual("mlp_residual", shard, t_sp * h)
    return tuple(ops)


def layer_ops(spec: ModelSpec, shard: Shard, i: int) -> tuple[Op, ...]:
    """Every op of decoder layer i for one micro-batch on one rank."""
    kind = spec.resolved_layer_types[i]
    if kind == "linear_attention":
        mixer = linear_attention_ops(spec, shard)
    else:
        mixer = attention_ops(spec, shard, banded=kind == "sliding_attention")
    ffn = moe_ops(spec, shard) if spec.is_moe_layer(i) else dense_mlp_ops(spec, shard)
    return mixer + ffn


def embedding_ops(spec: ModelSpec, shard: Shard) -> tuple[Op, ...]:
    """The input embedding of the first stage: a lookup (vocab-parallel, summed over TP); with
    learned positions, the position table's lookup and its add to the token embedding; when the
    run trains with dropout, the embedding dropout (Megatron-Core LanguageModelEmbedding.forward:
    word_embeddings + position_embeddings, then embedding_dropout)."""
    elements, dt = shard.sp_tokens * spec.hidden_size, shard.dtype
    ops = elementwise("embedding", elements, EMBED_RW, dt)
    if spec.learned_positions:
        ops += elementwise("position_embedding", elements, EMBED_RW, dt)
        ops += elementwise("position_add", elements, RESIDUAL_RW, dt)
    if shard.hidden_dropout:
        ops += dropout("embedding_dropout", elements, dt)
    return ops


def mtp_ops(spec: ModelSpec, shard: Shard, padded_vocab: int) -> tuple[Op, ...]:
    """One multi-token-prediction module on the last stage (DeepSeek-V3 report §2.2): the two
    pre-norms, the 2h→h projection, one full-attention layer with the last layer's FFN, and
    the shared LM head and loss once more. The projection is Megatron-LM's eh_proj, a
    ColumnParallelLinear: each TP rank computes h/t of its outputs (``tp.weights``)."""
    h, dt = spec.hidden_size, shard.dtype
    last = spec.num_hidden_layers - 1
    ffn = moe_ops(spec, shard) if spec.is_moe_layer(last) else dense_mlp_ops(spec, shard)
    return (
        *elementwise("mtp_norms", MTP_PRE_NORM_INPUTS * shard.sp_tokens * h, NORM_RW, dt),
        *gemm("mtp_proj", shard.tokens, h // shard.tp, MTP_PRE_NORM_INPUTS * h, shard.gemm_dtype),
        *attention_ops(spec, shard),
        *ffn,
        *head_ops(spec, shard, padded_vocab),
    )


def head_ops(spec: ModelSpec, shard: Shard, padded_vocab: int) -> tuple[Op, ...]:
    """The last stage: final norm, the LM head GEMM over the vocab shard, the fp32 loss."""
    t_all, h, dt = shard.tokens, spec.hidden_size, shard.dtype
    logits = t_all * padded_vocab // shard.tp
    return (
        *elementwise("final_norm", shard.sp_tokens * h, NORM_RW, dt),
        *gemm("lm_head", t_all, padded_vocab // shard.tp, h, dt),
        Op("cross_entropy", OpKind.memory, Pass.forward, 0.0, CE_FWD_BYTES_PER_LOGIT * logits),
        Op("loss_grad", OpKind.memory, Pass.backward_input, 0.0, CE_BWD_BYTES_PER_LOGIT * logits),
    )
