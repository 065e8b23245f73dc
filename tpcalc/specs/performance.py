"""PerformanceSpec: what one accelerator kind achieves, kernel by kernel, each number sourced.

The step-time model (``tpcalc.calc.time``) times every operation a rank runs by a roofline,
max(FLOP / (peak · efficiency), bytes / (HBM bandwidth · efficiency)), and every collective by
the bus bandwidth nccl-tests reports for its message size. The efficiencies below come from
public kernel-level measurements (GEMM sweeps, the FlashAttention papers, nccl-tests); the
``fitted`` block holds the at most three end-to-end constants ``tools/fit_time.py`` fits to
measured training runs, with the rows it used in their source.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SourcedShare(BaseModel):
    """An efficiency: achieved / peak, in (0, 1]."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    value: float = Field(gt=0, le=1, allow_inf_nan=False)
    source: str


class SourcedPositive(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    value: float = Field(gt=0, allow_inf_nan=False)
    source: str


class SourcedNonNegative(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    value: float = Field(ge=0, allow_inf_nan=False)
    source: str


class TokenRange(BaseModel):
    """The least and the most tokens per micro-batch on one rank (s·b/cp) among some runs."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    low: int = Field(gt=0)
    high: int = Field(gt=0)
    source: str


class FittedConstants(BaseModel):
    """End-to-end constants fitted to measured runs (tools/fit_time.py names the rows)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # Multiplies every GEMM and attention efficiency: sustained clocks under training load, and
    # what single-kernel benchmarks do not see (kernel gaps, SMs lent to overlapped
    # communication, FP8 scaling bookkeeping).
    compute_scale: SourcedShare
    # Seconds per MoE layer, forward and backward pass, at the fitted runs' micro-batches: what
    # a dropless MoE layer costs beyond its kernels' roofline (router top-k, the host sync on
    # tokens per expert before the grouped GEMM and the all-to-all splits, kernel launch gaps
    # between many small kernels, and work that scales with the tokens).
    moe_layer_overhead_s: SourcedNonNegative | None = None
    # The tokens per micro-batch on one rank of the MoE runs moe_layer_overhead_s was fitted on:
    # past the most of them the constant grows with the tokens (roofline.moe_layer_overhead),
    # below them it stays per pass; ``tpcalc plan`` says when its best layout is outside them.
    moe_fit_tokens: TokenRange | None = None


class PerformanceSpec(BaseModel):
    """Achieved rates of one accelerator kind; every value has a ``source:``."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    hbm_bandwidth_bytes_per_s: SourcedPositive
    hbm_efficiency: SourcedShare
    # GEMMs: achieved / dense peak as the reduction dimension K grows without bound, and the K
    # that halves it: eff = eff_max · K/(K + K½). Skinny M or N is left to the memory roofline.
    gemm_efficiency: SourcedShare
    gemm_half_k: SourcedPositive
    gemm_fp8_efficiency: SourcedShare
    gemm_fp8_half_k: SourcedPositive
    # Fused attention (FlashAttention-style), achieved / BF16 peak for long sequences, and the
    # sequence block length that halves it: eff = eff_max · S/(S + S½), forward and backward.
    attention_fwd_efficiency: SourcedShare
    attention_fwd_half_seq: SourcedPositive
    attention_bwd_efficiency: SourcedShare
    attention_bwd_half_seq: SourcedPositive
    # The same kernel without a mask (every score block computed): a non-causal model, and the
    # off-diagonal steps of a causal context-parallel ring, which see whole blocks of keys.
    # Short causal sequences lose more (diagonal tiles, rows of uneven length), so the curves
    # differ (docs/kernel-measurements.md §2.5).
    attention_fwd_noncausal_efficiency: SourcedShare
    attention_fwd_noncausal_half_seq: SourcedPositive
    attention_bwd_noncausal_efficiency: SourcedShare
    attention_bwd_noncausal_half_seq: SourcedPositive
    # Head dim that halves the attention kernel's efficiency: eff ∝ d/(d + d½), the values
    # above being measured at d = 128.
    attention_half_head_dim: SourcedPositive
    # nccl-tests bus bandwidth of large messages, per GPU, inside a node and across nodes, and
    # the fixed cost of one collective call (the per-ring-step latencies are the card's
    # intra_node_latency_s / inter_node_latency_s).
    intra_node_busbw_bytes_per_s: SourcedPositive
    inter_node_busbw_bytes_per_s: SourcedPositive
    collective_base_latency_s: SourcedNonNegative
    # Streaming multiprocessors of the card, and how many of them the kernels of a collective
    # overlapped with compute hold while it runs (NCCL runs a channel per thread block, one SM
    # each): the compute it hides under runs on the rest, so hiding it is never free.
    sm_count: SourcedPositive
    comm_kernel_sms: SourcedPositive
    fitted: FittedConstants
