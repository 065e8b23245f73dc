"""Time of one kernel: a roofline over achieved rates, and of one collective: bytes over the bus
bandwidth nccl-tests reports for its message size.

Roofline (Williams et al. 2009): time = max(FLOP / (peak · efficiency), bytes / (HBM bandwidth ·
efficiency)). A GEMM's efficiency falls as any of its dimensions shrinks (small or skinny GEMMs
fill fewer SMs and waves): eff(M, N, K) = eff_max · Π x / (x + x½) over its three dimensions,
with eff_max and x½ from public GEMM sweeps (the card's ``performance`` block). The fused
attention kernel runs at the FlashAttention papers' achieved fraction of peak, forward and
backward apart.

Collectives: nccl-tests defines bus bandwidth so that a ring collective's time is the bytes each
rank sends over it (NVIDIA nccl-tests doc/PERFORMANCE.md: busbw = algbw · 2(n−1)/n for
all-reduce, (n−1)/n for all-gather, reduce-scatter and all-to-all). Its curve against message
size M rises to a plateau; busbw(M) = busbw_max · M / (M + M½) is the α-β model with
α = M½ / busbw_max per byte-weighted step, fitted to the curve's half-bandwidth point.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import Link
from tpcalc.calc.time.ops import Op, OpKind
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec
from tpcalc.specs.performance import PerformanceSpec
from tpcalc.units import Dtype

GEMM_DIMS = 3


@dataclass(frozen=True, slots=True)
class Rates:
    """The achieved rates one rank computes and communicates at (from its card's config)."""

    gemm_peak_flop_per_s: float
    attention_peak_flop_per_s: float
    gemm_efficiency: float
    gemm_half_dim: float
    attention_fwd_efficiency: float
    attention_bwd_efficiency: float
    hbm_bytes_per_s: float
    compute_scale: float
    layer_overhead_s: float
    intra_busbw_bytes_per_s: float
    inter_busbw_bytes_per_s: float
    collective_half_bytes: float


def performance(hw: HardwareSpec) -> PerformanceSpec:
    """The card's ``performance`` block, or an error saying the step-time model needs one."""
    if hw.performance is None:
        raise InputError(
            f"{hw.name} has no 'performance' block in its config, so the per-operation step-time "
            "model cannot time it; add one (see configs/hardware/h100-sxm.yaml) or use "
            "--time-model fixed"
        )
    return hw.performance


def rates(hw: HardwareSpec, dtype: Dtype, *, efficiency_scale: float = 1.0) -> Rates:
    """Rates of ``hw`` for GEMMs in ``dtype`` (FP8 GEMMs use the FP8 peak and efficiency; the
    attention core and memory-bound kernels stay BF16, as Transformer Engine runs them)."""
    perf = performance(hw)
    bf16 = hw.peak_bf16_flop_per_s.value
    if dtype is Dtype.fp8:
        if hw.peak_fp8_flop_per_s is None:
            raise InputError(f"--dtype fp8: {hw.name} has no peak_fp8_flop_per_s; use bf16")
        gemm_peak, gemm_eff = hw.peak_fp8_flop_per_s.value, perf.gemm_fp8_efficiency.value
    else:
        gemm_peak, gemm_eff = bf16, perf.gemm_efficiency.value
    return Rates(
        gemm_peak_flop_per_s=gemm_peak,
        attention_peak_flop_per_s=bf16,
        gemm_efficiency=gemm_eff,
        gemm_half_dim=perf.gemm_half_dim.value,
        attention_fwd_efficiency=perf.attention_fwd_efficiency.value,
        attention_bwd_efficiency=perf.attention_bwd_efficiency.value,
        hbm_bytes_per_s=perf.hbm_bandwidth_bytes_per_s.value * perf.hbm_efficiency.value,
        compute_scale=perf.fitted.compute_scale.value * efficiency_scale,
        layer_overhead_s=perf.fitted.layer_overhead_s.value,
        intra_busbw_bytes_per_s=perf.intra_node_busbw_bytes_per_s.value,
        inter_busbw_bytes_per_s=perf.inter_node_busbw_bytes_per_s.value,
        collective_half_bytes=perf.collective_half_bytes.value,
    )


def gemm_efficiency(r: Rates, m: int, n: int, k: int) -> float:
    """eff_max · Π x/(x + x½) over M, N, K (module docstring), times the fitted scale."""
    shape = 1.0
    for x in (m, n, k):
        shape *= x / (x + r.gemm_half_dim)
    return r.gemm_efficiency * shape * r.compute_scale


def op_time_s(op: Op, r: Rates) -> float:
    """Roofline time of one op: the slower of its compute and its memory traffic."""
    memory = op.bytes / r.hbm_bytes_per_s
    if op.kind is OpKind.memory:
        return memory
    if op.kind is OpKind.gemm:
        rate = r.gemm_peak_flop_per_s * gemm_efficiency(r, op.m, op.n, op.k)
    else:
        eff = r.attention_fwd_efficiency if op.phase.value == "F" else r.attention_bwd_efficiency
        rate = r.attention_peak_flop_per_s * eff * r.compute_scale
    return max(op.flop / rate, memory)


def busbw_bytes_per_s(r: Rates, link: Link, message_bytes: float) -> float:
    """nccl-tests bus bandwidth for a message of ``message_bytes`` on ``link``."""
    peak = r.intra_busbw_bytes_per_s if link is Link.intra_node else r.inter_busbw_bytes_per_s
    return peak * message_bytes / (message_bytes + r.collective_half_bytes)


def collective_time_s(
    r: Rates, collective: Collective, message_bytes: float, group: int, link: Link
) -> float:
    """Bytes each rank sends in the ring collective / bus bandwidth at that message size."""
    sent = ring_factor(collective, group) * message_bytes
    if sent <= 0:
        return 0.0
    return sent / busbw_bytes_per_s(r, link, message_bytes)
