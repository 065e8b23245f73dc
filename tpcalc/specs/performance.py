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

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float = Field(gt=0, le=1, allow_inf_nan=False)
    source: str


class SourcedPositive(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float = Field(gt=0, allow_inf_nan=False)
    source: str


class SourcedNonNegative(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float = Field(ge=0, allow_inf_nan=False)
    source: str


class FittedConstants(BaseModel):
    """End-to-end constants fitted to measured runs (tools/fit_time.py names the rows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Multiplies every compute efficiency: sustained clocks under training load, and what the
    # per-kernel measurements do not see (kernel gaps, stream contention).
    compute_scale: SourcedShare
    # Fixed time per transformer layer per micro-batch and pass: kernel launches and the
    # host-side work a measured step includes and a roofline does not.
    layer_overhead_s: SourcedNonNegative


class PerformanceSpec(BaseModel):
    """Achieved rates of one accelerator kind; every value has a ``source:``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hbm_bandwidth_bytes_per_s: SourcedPositive
    hbm_efficiency: SourcedShare
    # Large BF16 / FP8 GEMMs: achieved / dense peak.
    gemm_efficiency: SourcedShare
    gemm_fp8_efficiency: SourcedShare
    # A GEMM dimension of this size halves the efficiency along it: eff = max · Π x/(x + x½).
    gemm_half_dim: SourcedPositive
    # Fused attention (FlashAttention-style), forward and backward, achieved / BF16 peak.
    attention_fwd_efficiency: SourcedShare
    attention_bwd_efficiency: SourcedShare
    # nccl-tests bus bandwidth of large messages, per GPU, and the message size that halves it.
    intra_node_busbw_bytes_per_s: SourcedPositive
    inter_node_busbw_bytes_per_s: SourcedPositive
    collective_half_bytes: SourcedPositive
    fitted: FittedConstants
