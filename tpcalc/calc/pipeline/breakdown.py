"""The pipeline breakdown of one model on one layout: the terms ``tpcalc pipeline`` prints.

Formulas and their sources live in ``tpcalc.calc.pipeline.schedule``; this module feeds them a
model (layers, parameters per stage from ``tpcalc.calc.params.counts``) and a card (achieved
FLOP/s, links).
"""

from __future__ import annotations

from collections.abc import Sequence

from tpcalc.calc.dp.gradients import (
    BACKWARD_INPUT_FLOP_PER_PARAM_TOKEN,
    BACKWARD_WEIGHT_FLOP_PER_PARAM_TOKEN,
    FORWARD_FLOP_PER_PARAM_TOKEN,
)
from tpcalc.calc.layout.memory import rank_activation_bytes, rank_layers
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    Link,
    latency_inputs,
    latency_source,
    link_nodes,
    ring_steps,
    steps_time_s,
)
from tpcalc.calc.params.counts import (
    active_layer_params,
    declared_params,
    embedding_params,
    final_norm_params,
    layer_params,
    lm_head_matmul_params,
    lm_head_params,
    mtp_params,
)
from tpcalc.calc.pipeline import schedule as pp
from tpcalc.calc.pipeline.schedule import StageTimes
from tpcalc.choices import Schedule
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Term, Unit, term
from tpcalc.units import Dtype

SRC_TIMES = (
    "F = 2·N_stage·s·b/(t·achieved), B = W = F (Qi et al. 2023 §2: matmul B and W cost as F)"
)


def stage_params(spec: ModelSpec, p: int, v: int, schedule: Schedule) -> tuple[int, ...]:
    """Parameters each rank stores: its layers; embedding and declared parts (vision tower) on
    the first stage; final norm, LM head and MTP on the last (DeepSeek-V3 §3.2 puts MTP there)."""
    layers = [layer_params(spec, i) for i in range(spec.num_hidden_layers)]
    return pp.rank_params(
        layers, p, v,
        embedding_params=embedding_params(spec) + declared_params(spec),
        lm_head_params=lm_head_params(spec),
        other_params=final_norm_params(spec) + mtp_params(spec),
        schedule=schedule,
    )  # fmt: skip


def stage_matmul_params(spec: ModelSpec, p: int, v: int) -> tuple[int, ...]:
    """Parameters each token multiplies on each rank: its layers (active experts only), + the LM
    head matrix (V·h even when tied) and final norm on the last stage; the lookup-only embedding
    is left out (seed 000's matmul parameters)."""
    layers = [active_layer_params(spec, i) for i in range(spec.num_hidden_layers)]
    return pp.rank_params(
        layers, p, v, embedding_params=0, lm_head_params=lm_head_matmul_params(spec),
        other_params=final_norm_params(spec),
    )  # fmt: skip


def flop_stage_times(
    spec: ModelSpec, hw: HardwareSpec, *, p: int, v: int, tokens: int, tp: int
) -> StageTimes:
    """F, B, W of the slowest rank for one micro-batch of ``tokens`` tokens, from 2·N FLOP each."""
    n = max(stage_matmul_params(spec, p, v))
    rate = tp * hw.achieved_flop_per_s.value
    return StageTimes(
        FORWARD_FLOP_PER_PARAM_TOKEN * n * tokens / rate,
        BACKWARD_INPUT_FLOP_PER_PARAM_TOKEN * n * tokens / rate,
        BACKWARD_WEIGHT_FLOP_PER_PARAM_TOKEN * n * tokens / rate,
    )


def pipeline_terms(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    p: int,
    m: int,
    v: int = 1,
    schedule: Schedule = Schedule.one_f_one_b,
    seq: int,
    micro_batch: int,
    tp: int = 1,
    dtype: Dtype = Dtype.bf16,
    scatter_gather: bool = True,
    link: Link,
    allow_uneven: bool = True,
    times: StageTimes | None = None,
    layer_act_bytes: float | Sequence[float] | None = None,
    with_latency: bool = False,
    nodes: int | None = None,
) -> tuple[Term, ...]:
    """Layers and parameters per stage, p2p bytes and time, bubble, in-flight activations.

    ``times`` defaults to ``flop_stage_times``; ``layer_act_bytes`` is each layer's activations
    for one micro-batch on one rank (``layout.memory.layer_activation_bytes``; one number = the
    same for every layer), used for the most loaded stage. ``nodes`` = nodes the pipeline group
    spans (default ``links.link_nodes``): each send pays α_inter when they are more than one,
    else α_intra. Raises a TpcalcError for an impossible split (see ``pipeline.check_pipeline``).
    """
    L = spec.num_hidden_layers
    pp.check_pipeline(L, p, m, v, schedule, allow_uneven=allow_uneven)
    layers = pp.rank_layer_counts(L, p, v)
    params = stage_params(spec, p, v, schedule)
    t = times or flop_stage_times(spec, hw, p=p, v=v, tokens=seq * micro_batch, tp=tp)
    msg = pp.p2p_bytes(
        seq, micro_batch, spec.hidden_size, dtype, tp=tp, scatter_gather=scatter_gather
    )
    sends = pp.p2p_sends_per_rank(schedule, p, m, v)
    steps = ring_steps(Collective.p2p, p, link_nodes(link, p) if nodes is None else nodes, sends)
    p2p_s = steps_time_s(sends * msg, steps, hw, link, with_latency=with_latency)
    bubble = pp.bubble_time_s(schedule, p, m, t, v)
    ref = pp.bubble_time_s(Schedule.one_f_one_b, p, m, t)
    sched_src = {
        Schedule.gpipe: pp.SRC_GPIPE,
        Schedule.one_f_one_b: pp.SRC_GPIPE,
        Schedule.interleaved: pp.SRC_INTERLEAVED,
        Schedule.zb_h1: pp.SRC_ZB,
        Schedule.dualpipe: pp.SRC_DUALPIPE,
    }[schedule]
    fb = dict(p=p, m=m, v=v, F=t.forward_s, B=t.backward_input_s, W=t.backward_weight_s)
    flop_in = {} if times else dict(
        N_stage=max(stage_matmul_params(spec, p, v)), s=seq, b=micro_batch, t=tp,
        achieved=hw.achieved_flop_per_s.value,
    )  # fmt: skip
    copies = pp.DUALPIPE_PARAM_COPIES if schedule is Schedule.dualpipe else 1
    out = [
        term("stage_layers", "layers per stage", ",".join(map(str, layers)), Unit.text,
             formula="L over p·v chunks", source=pp.SRC_SPLIT, L=L, p=p, v=v),
        term("layers_per_stage_max_count", "layers, most loaded stage", max(layers), Unit.count,
             formula="max over stages", source=pp.SRC_SPLIT, L=L, p=p, v=v),
        term("stage_params_max", "parameters, most loaded stage", max(params), Unit.params,
             formula="layers + embedding (first) + LM head (last)" + (" ×2" if copies > 1 else ""),
             source=pp.SRC_DUALPIPE if copies > 1 else pp.SRC_SPLIT, p=p, v=v),
        term("param_copies_count", "parameter copies", copies, Unit.count,
             formula="2 for DualPipe, else 1", source=pp.SRC_DUALPIPE),
        term("p2p_bytes_per_microbatch", "stage-to-stage, per micro-batch", msg, Unit.bytes,
             formula="s·b·h·dtype" + ("/t" if scatter_gather and tp > 1 else ""), source=pp.SRC_P2P,
             s=seq, b=micro_batch, h=spec.hidden_size, dtype_bytes=dtype.bytes,
             t=tp if scatter_gather else 1),
        term("p2p_send_bytes_per_rank", "p2p sent per rank per step", sends * msg, Unit.bytes,
             formula="2·m·(v) × message (activations forward, gradients back)", source=pp.SRC_P2P,
             m=m, v=v, message=msg),
        term("p2p_time_s", f"p2p time on {link.value}", p2p_s, Unit.seconds,
             formula=f"bytes / bandwidth + {LATENCY_FORMULA}",
             source=f"{hw.name} {link.value}: alpha-beta model; "
             + latency_source(hw, with_latency),
             bytes=sends * msg, **latency_inputs(hw, steps, with_latency)),
        term("forward_time_s", "F (one micro-batch, one stage)", t.forward_s, Unit.seconds,
             formula="given" if times else "2·N_stage·s·b/(t·achieved)", source=SRC_TIMES,
             symbols=flop_in),
        term("backward_input_time_s", "B (grad w.r.t. inputs)", t.backward_input_s, Unit.seconds,
             formula="given" if times else "2·N_stage·s·b/(t·achieved)", source=SRC_TIMES,
             symbols=flop_in),
        term("backward_weight_time_s", "W (grad w.r.t. weights)", t.backward_weight_s, Unit.seconds,
             formula="given" if times else "2·N_stage·s·b/(t·achieved)", source=SRC_TIMES,
             symbols=flop_in),
        term("compute_time_s", "useful compute per step", m * t.full_s, Unit.seconds,
             formula="m·(F+B+W)", source=pp.SRC_GPIPE, part_of="step_time_s", symbols=fb),
        term("bubble_time_s", "bubble per step", bubble, Unit.seconds,
             formula=bubble_formula(schedule), source=sched_src, part_of="step_time_s", symbols=fb),
        term("step_time_s", "step (compute + bubble)", m * t.full_s + bubble, Unit.seconds,
             formula="m·(F+B+W) + bubble", source=pp.SRC_GPIPE),
        term("bubble_ratio", "bubble / compute", pp.bubble_ratio(schedule, p, m, t, v), Unit.ratio,
             formula="bubble / (m·(F+B+W))", source=sched_src, symbols=fb),
        term("bubble_share_ratio", "bubble / step", pp.bubble_share(schedule, p, m, t, v),
             Unit.ratio, formula="bubble / (bubble + m·(F+B+W))", source=sched_src, symbols=fb),
        term("bubble_vs_1f1b_ratio", "bubble / 1F1B's", bubble / ref if ref else 0.0, Unit.ratio,
             formula="bubble / ((p-1)(F+B+W))", source=sched_src, symbols=fb),
    ]  # fmt: skip
    out += memory_terms(schedule, p, m, v, L, layer_act_bytes)
    return tuple(out)


def bubble_formula(schedule: Schedule) -> str:
    """The bubble formula of a schedule, as text for --explain (sources in pipeline.py)."""
    return {
        Schedule.gpipe: "(p-1)(F+B+W)",
        Schedule.one_f_one_b: "(p-1)(F+B+W)",
        Schedule.interleaved: "(p-1)(F+B+W)/v",
        Schedule.zb_h1: "(p-1)(F+B-W)",
        Schedule.dualpipe: "(p/2-1)(F&B + (B+W) - 3W), F&B = F+B+W",
    }[schedule]


def memory_terms(
    schedule: Schedule,
    p: int,
    m: int,
    v: int,
    num_layers: int,
    layer_act_bytes: float | Sequence[float] | None,
) -> list[Term]:
    """Micro-batches in flight on the worst rank and, given per-layer bytes, the activations of
    the most loaded rank (``layout.memory.rank_activation_bytes``)."""
    chunks = max(pp.in_flight_chunks(schedule, p, m, v, r) for r in range(p))
    out = [
        term("in_flight_microbatches", "micro-batches in flight (worst rank)",
             chunks // v if chunks % v == 0 else chunks / v,
             Unit.count, formula="in-flight chunks / v", source=pp.SRC_INFLIGHT,
             p=p, m=m, v=v, chunks=chunks),
    ]  # fmt: skip
    if layer_act_bytes is not None:
        per_layer = (
            [float(layer_act_bytes)] * num_layers
            if isinstance(layer_act_bytes, int | float)
            else list(layer_act_bytes)
        )
        loads = rank_activation_bytes(schedule, p, m, v, per_layer)
        rank = max(range(p), key=lambda r: loads[r])
        mine = [per_layer[i] for i in rank_layers(num_layers, p, v)[rank]]
        out.append(
            term("stage_activation_bytes", "activations, most loaded stage", loads[rank],
                 Unit.bytes, formula="in-flight chunks / v × Σ per-layer bytes of its layers",
                 source=pp.SRC_INFLIGHT, rank=rank, layers=len(mine),
                 in_flight=pp.in_flight_chunks(schedule, p, m, v, rank),
                 per_layer_min=min(mine), per_layer_max=max(mine))
        )  # fmt: skip
    return out
