"""Compute time of a combined layout: FLOPs per rank per micro-batch, the stage times F, B, W,
and the model FLOPs of a step that MFU divides by.

Matmul FLOPs are 6 per active parameter per token (forward 2, backward 4: Kaplan et al. 2020
§2.1; Narayanan et al. 2021 §5.1); "active" drops the routed experts a token does not visit
(k of E). Attention scores add 12·b·s²·(n_h·d_h) per full-attention layer
(``flops.attention_score_flop``). A rank computes its pipeline stage's layers on s·b/(tp·cp)
of the tokens. Full recomputation adds one forward pass; selective recomputation adds the
attention-score forward (Korthikanti et al. 2022 §5). MFU = model FLOPs (no recompute) /
(world · peak · step time) (Chowdhery et al. 2022, PaLM, Appendix B).
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.params.counts import active_layer_params, lm_head_matmul_params
from tpcalc.calc.pipeline.schedule import StageTimes
from tpcalc.calc.tp.flops import (
    FLOP_PER_PARAM_TOKEN_BWD,
    FLOP_PER_PARAM_TOKEN_FWD,
    attention_score_flop,
)
from tpcalc.choices import Recompute
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

SRC_MFU = "Chowdhery et al. 2022 (PaLM) App. B: MFU = model FLOP/s / peak FLOP/s"
SRC_FLOP = "Kaplan et al. 2020 §2.1 (6N per token, active params); Narayanan et al. 2021 Eq. 3"
FLOP_PER_PARAM_TOKEN = FLOP_PER_PARAM_TOKEN_FWD + FLOP_PER_PARAM_TOKEN_BWD
# The weight-gradient half of the backward (W) and the input-gradient half (B) cost the same
# (Qi et al. 2023 §2: F = B = W for matmuls).
BWD_PARTS = 2


def mfu_peak(hw: HardwareSpec, dtype: Dtype) -> tuple[float, str, str]:
    """(peak FLOP/s, its dtype, its source) that MFU divides by: the FP8 peak for FP8 matmuls,
    the BF16 peak otherwise (PaLM App. B: MFU against the peak of the precision used)."""
    if dtype is Dtype.fp8:
        if hw.peak_fp8_flop_per_s is None:
            raise InputError(
                f"--dtype fp8: {hw.name} has no peak_fp8_flop_per_s in its config, so MFU has "
                "no FP8 peak to divide by; add one or use --dtype bf16"
            )
        return hw.peak_fp8_flop_per_s.value, "fp8", hw.peak_fp8_flop_per_s.source
    return hw.peak_bf16_flop_per_s.value, "bf16", hw.peak_bf16_flop_per_s.source


def active_matmul_params(spec: ModelSpec) -> int:
    """N of MFU: active layer params + LM head (no input embedding lookup, no MTP)."""
    layers = sum(active_layer_params(spec, i) for i in range(spec.num_hidden_layers))
    return layers + lm_head_matmul_params(spec)


def _attn_per_layer(spec: ModelSpec, seq: int, micro_batch: int) -> float:
    full = spec.full_attention_layers
    return attention_score_flop(spec, seq=seq, micro_batch=micro_batch) / full if full else 0.0


class RankFlop(Struct, frozen=True):
    """FLOP of one pipeline rank for one micro-batch, forward + backward."""

    pp_rank: int
    matmul_flop: float
    attention_flop: float
    recompute_flop: float

    @property
    def total(self) -> float:
        return self.matmul_flop + self.attention_flop + self.recompute_flop


def rank_flops(
    spec: ModelSpec,
    layout: ParallelLayout,
    *,
    seq: int,
    micro_batch: int,
    vpp: int,
    recompute: Recompute,
) -> list[RankFlop]:
    """Per pipeline rank: 6·active·s·b/(tp·cp) + attention/(tp·cp) + recompute (see module)."""
    # Here, not at the top: the step model imports this module for active_matmul_params alone,
    # and the memory model's imports would add to every command's start-up.
    from tpcalc.calc.pipeline.schedule import rank_layers

    shard = layout.tp * layout.cp
    tokens = seq * micro_batch
    attn_layer = _attn_per_layer(spec, seq, micro_batch)
    fwd_share = FLOP_PER_PARAM_TOKEN_FWD / FLOP_PER_PARAM_TOKEN
    out = []
    for r, layers in enumerate(rank_layers(spec.num_hidden_layers, layout.pp, vpp)):
        params = sum(active_layer_params(spec, i) for i in layers)
        head = lm_head_matmul_params(spec) if r == layout.pp - 1 else 0
        full = sum(1 for i in layers if spec.resolved_layer_types[i] != "linear_attention")
        matmul = FLOP_PER_PARAM_TOKEN * (params + head) * tokens / shard
        attn = attn_layer * full / shard
        if recompute is Recompute.full:
            # Megatron recomputes the transformer layers only, never the LM head
            # (transformer_block.py _checkpointed_forward wraps the layers)
            extra = (FLOP_PER_PARAM_TOKEN * params * tokens / shard + attn) * fwd_share
        elif recompute is Recompute.selective:
            extra = attn * fwd_share
        else:
            extra = 0.0
        out.append(RankFlop(r, matmul, attn, extra))
    return out


def stage_times(compute_s: float, exposed_s: float, recompute_share: float) -> StageTimes:
    """F, B, W of one micro-batch on the slowest stage, seconds.

    The 6N split is F = B = W = 2N (Qi et al. 2023 §2); recomputation runs before B; the
    exposed communication of the micro-batch (TP, CP, EP) stretches all three in proportion.
    """
    base = compute_s * (1 - recompute_share)
    third = base / (1 + BWD_PARTS)
    stretch = (compute_s + exposed_s) / compute_s if compute_s else 1.0
    recompute = compute_s * recompute_share
    return StageTimes(third * stretch, (third + recompute) * stretch, third * stretch)


def model_flop_per_step(
    spec: ModelSpec, layout: ParallelLayout, *, seq: int, micro_batch: int, microbatches: int
) -> float:
    """6·N_active·tokens + attention for every sequence of the step (no recompute): MFU's FLOPs."""
    sequences = micro_batch * microbatches * layout.dp
    dense = FLOP_PER_PARAM_TOKEN * active_matmul_params(spec) * seq * sequences
    attn = attention_score_flop(spec, seq=seq, micro_batch=1) * sequences
    return dense + attn
