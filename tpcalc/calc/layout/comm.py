"""Communication of a combined layout, one dimension at a time, per rank per optimizer step.

Each function prices one dimension on the link its group crosses (``layout.place_groups``) and
says how much of that time is exposed, under a named overlap assumption:
- TP: 4 collectives per layer per micro-batch (Shoeybi et al. 2019 §3), on the critical path
  (seed 000: "每层都要等");
- CP: the K/V ring hides behind the attention of the same ring step (Liu et al. 2023 §3);
- PP: one activation and one gradient per micro-batch per chunk, exposed (conservative);
- DP/ZeRO: gradients sync once per step and hide behind the last micro-batch's backward
  (Li et al. 2020 DDP buckets; seed 000 compares 1.94 s with 1.05 s);
- EP: 4 all-to-alls per MoE layer per micro-batch, exposed, except DualPipe, which hides them
  behind the other direction's compute (DeepSeek-V3 §3.2.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpcalc.calc.cp.ring import ring_latency_steps_per_layer
from tpcalc.calc.cp.ring_explain import cp_row
from tpcalc.calc.dp.zero import COMM_LABELS, zero_comm_parts, zero_latency_steps
from tpcalc.calc.ep import all_to_all_explain as ep_explain
from tpcalc.calc.ep.all_to_all import A2A_KINDS, ep_comm
from tpcalc.calc.layout.groups import SRC_ORDER, Group, LayoutRun, ParallelLayout
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    LatencySteps,
    latency_inputs,
    latency_source,
    ring_steps,
    steps_time_s,
)
from tpcalc.calc.pipeline.schedule import p2p_bytes, p2p_sends_per_rank
from tpcalc.calc.tp.comm import collectives_per_layer, message_bytes
from tpcalc.choices import MoeDispatcher, Recompute, Schedule
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Row, Scalar, Term, Unit, term

SRC_TP = "Shoeybi et al. 2019 §3: 2 fwd + 2 bwd all-reduces per layer; seed 000: TP waits"
SRC_CP = "Liu et al. 2023 Ring Attention §3: transfer hidden when compute per block is longer"
SRC_PP = "Narayanan et al. 2021 §4.1: s·b·h/t per send with scatter/gather; counted exposed"
SRC_DP = "ZeRO §7.2 per stage; Li et al. 2020 (DDP) §3.2.3: overlap with the last backward"
SRC_EP = "GShard §2.2 all-to-alls; DeepSeek-V3 §3.2.1: DualPipe overlaps them with compute"

# How each dimension's group is shaped and what its row's totals add up (for --explain).
GROUP_FORMULA = {"tp": "tp", "cp": "cp", "pp": "pp", "dp": "dp·cp", "ep": "ep"}
STRIDE_FORMULA = {"tp": "1", "cp": "tp", "pp": "tp·cp·dp", "dp": "tp", "ep": "etp"}
SEND_FORMULA = {
    "tp": "m · layers · collectives/layer · 2(t-1)/t · M",
    "cp": "m · full-attention layers · send_bytes_per_layer (cp row)",
    "pp": "sends per step · p2p bytes",
    "dp": "Σ ZeRO collectives of the dense (dp·cp) and expert (dp·cp/ep) parameters",
    "ep": "m · MoE layers · all-to-all bytes per layer (ep row)",
}
SEND_SOURCE = {"tp": SRC_TP, "cp": SRC_CP, "pp": SRC_PP, "dp": SRC_DP, "ep": SRC_EP}
EXPOSED_FORMULA = {
    "tp": "comm_time",
    "cp": "comm_time · max(0, 1 − attention/transfer)",
    "pp": "comm_time",
    "dp": "max(0, comm_time − last backward)",
    "ep": "comm_time (DualPipe: max(0, comm_time − compute))",
}

# The overlap assumption of each dimension, echoed in its row (see the module docstring).
OVERLAP = {
    "tp": "exposed: every layer waits for it",
    "cp": "hidden up to the attention compute of each ring step",
    "pp": "exposed (conservative)",
    "dp": "hidden up to the last micro-batch's backward",
    "ep": "exposed",
    "ep-dualpipe": "hidden up to the step's compute (DualPipe)",
}


@dataclass
class DimCost:
    """One dimension's bytes, time and exposed time per step, plus its detail terms."""

    send_bytes: float = 0.0
    time_s: float = 0.0
    exposed_s: float = 0.0
    details: list[Term] = field(default_factory=list)
    overlap: str = "nothing to send"
    latency: LatencySteps = field(default_factory=LatencySteps)


def tp_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group,
    layers: int,
) -> DimCost:  # fmt: skip
    """TP all-reduces (or SP's reduce-scatter + all-gather, same bytes) of the worst stage."""
    if layout.tp == 1:
        return DimCost()
    m = message_bytes(spec, seq=run.seq // layout.cp, micro_batch=run.micro_batch, dtype=run.dtype)
    n = sum(collectives_per_layer(run.recompute is Recompute.full))
    per_layer = n * ring_factor(Collective.all_reduce, layout.tp) * m
    total = run.microbatches * layers * per_layer
    count = run.microbatches * layers * n
    steps = ring_steps(Collective.all_reduce, layout.tp, group.nodes, count)
    time = steps_time_s(total, steps, hw, group.link, with_latency=run.with_latency)
    details = [
        term("tp_message_bytes", "TP message (s/cp)·b·h", m, Unit.bytes,
             formula="(s/cp)·b·h·dtype", source=SRC_TP, s=run.seq, cp=layout.cp),
        term("tp_collectives_per_layer", "TP all-reduces per layer", n, Unit.count,
             formula="2 fwd + 2 bwd (+2 recomputed)", source=SRC_TP),
        term("tp_layers_on_rank", "layers on the busiest stage", layers, Unit.count,
             formula="max over PP ranks", source="pipeline.chunk_layer_counts"),
    ]  # fmt: skip
    return DimCost(total, time, time, details, OVERLAP["tp"], steps)


def cp_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group,
    full_layers: int,
) -> DimCost:  # fmt: skip
    """The K/V ring over the full-attention layers of the worst stage."""
    if layout.cp == 1:
        return DimCost()
    row = cp_row(
        spec, hw, seq=run.seq, cp=layout.cp, micro_batch=run.micro_batch, tp=layout.tp,
        dtype=run.dtype, link=group.link, with_latency=run.with_latency,
    )  # fmt: skip
    per_layer = float(row.value("send_bytes_per_layer"))
    total = run.microbatches * full_layers * per_layer
    ratio = float(row.value("kv_over_compute_ratio"))
    steps = ring_latency_steps_per_layer(layout.cp, group.nodes).times(
        run.microbatches * full_layers
    )
    time = steps_time_s(total, steps, hw, group.link, with_latency=run.with_latency)
    exposed = time * max(0.0, 1 - 1 / ratio) if ratio > 0 else 0.0
    details = [row.get("kv_block_bytes"), row.get("ring_sends_per_layer_count"),
               row.get("kv_over_compute_ratio")]  # fmt: skip
    return DimCost(total, time, exposed, details, OVERLAP["cp"], steps)


def pp_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group
) -> DimCost:
    """Activations forward and gradients backward between stages, for every micro-batch."""
    if layout.pp == 1:
        return DimCost()
    per_send = p2p_bytes(
        run.seq // layout.cp, run.micro_batch, spec.hidden_size, run.dtype, tp=layout.tp,
        scatter_gather=layout.tp > 1,
    )  # fmt: skip
    sends = p2p_sends_per_rank(run.schedule, layout.pp, run.microbatches, run.vpp)
    total = per_send * sends
    steps = ring_steps(Collective.p2p, layout.pp, group.nodes, sends)
    time = steps_time_s(total, steps, hw, group.link, with_latency=run.with_latency)
    details = [
        term("pp_p2p_bytes", "stage-to-stage send", per_send, Unit.bytes,
             formula="(s/cp)·b·h·dtype / t", source=SRC_PP, t=layout.tp),
        term("pp_sends_per_step", "sends per step (middle rank)", sends, Unit.count,
             formula="2·m (·v interleaved)", source=SRC_PP, m=run.microbatches, v=run.vpp),
    ]  # fmt: skip
    return DimCost(total, time, time, details, OVERLAP["pp"], steps)


def dp_cost(
    hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, groups: tuple[Group, Group],
    params: tuple[int, int], backward_s: float,
) -> DimCost:  # fmt: skip
    """ZeRO/DP traffic of the dense params over dp·cp and of the experts over dp·cp/ep."""
    dense_group, expert_group = groups
    details: list[Term] = []
    total = time = 0.0
    latency = LatencySteps()
    for kind, group, n in (("dense", dense_group, params[0]), ("expert", expert_group, params[1])):
        if group.size == 1 or n == 0:
            continue
        parts = {
            k: v for k, v in zero_comm_parts(n, run.recipe, layout.zero, group.size).items() if v
        }
        for key, value in parts.items():
            label, formula = COMM_LABELS[key]
            details.append(
                term(f"dp_{kind}_{key}_bytes", f"{kind}: {label}", value, Unit.bytes,
                     formula=formula, source=SRC_DP, part_of="send_bytes_per_step",
                     N=n, n=group.size, zero=int(layout.zero))
            )  # fmt: skip
        sent = sum(parts.values())
        steps = zero_latency_steps(parts, group.size, group.nodes)
        total += sent
        latency += steps
        time += steps_time_s(sent, steps, hw, group.link, with_latency=run.with_latency)
    details.append(
        term("dp_backward_time_s", "backward of the last micro-batch (hides DP)", backward_s,
             Unit.seconds, formula="4/6 of one micro-batch's compute", source=SRC_DP)
    )  # fmt: skip
    return DimCost(total, time, max(0.0, time - backward_s), details, OVERLAP["dp"], latency)


def ep_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group,
    moe_layers: int, compute_s: float,
) -> DimCost:  # fmt: skip
    """Dispatch and combine all-to-alls of the worst stage's MoE layers, every micro-batch."""
    if layout.ep == 1 or moe_layers == 0:
        return DimCost()
    tokens = run.seq * run.micro_batch // (layout.cp * layout.tp)
    r = ep_comm(
        spec, hw, ep=layout.ep, tokens=tokens, stride=group.stride,
        gpus_per_node=layout.gpus_per_node, dispatch_dtype=run.dtype, combine_dtype=run.dtype,
        recipe=run.recipe, with_latency=run.with_latency, etp=layout.etp,
        dispatcher=MoeDispatcher(run.memory.moe_dispatcher),
        capacity_factor=run.memory.capacity_factor,
    )  # fmt: skip
    total = run.microbatches * moe_layers * r.send_bytes_per_layer
    time = run.microbatches * moe_layers * r.a2a_time_per_layer_s
    hidden_by = compute_s if run.schedule is Schedule.dualpipe else 0.0
    details = [
        *ep_explain.memory_row_terms(r.memory, spec, only=("experts_per_rank",)),
        *ep_explain.ep_comm_terms(r, spec, hw, only=("cross_node_share_ratio",)),
        term("ep_tokens_per_rank", "tokens dispatched per micro-batch", tokens, Unit.count,
             formula="s·b/(cp·tp)", source=SRC_EP, s=run.seq, b=run.micro_batch),
    ]  # fmt: skip
    overlap = OVERLAP["ep-dualpipe" if hidden_by else "ep"]
    count = run.microbatches * moe_layers * len(A2A_KINDS)
    steps = ring_steps(Collective.all_to_all, layout.ep, group.nodes, count)
    return DimCost(total, time, max(0.0, time - hidden_by), details, overlap, steps)


def dimension_row(
    group: Group,
    cost: DimCost,
    inputs: dict[str, Scalar],
    hw: HardwareSpec,
    with_latency: bool,
    timed_by: tuple[str, str] | None = None,
) -> Row:
    """One row per dimension: the group, its link, bytes and time, hidden and exposed parts.
    ``timed_by`` (formula, source) names the model that timed it when not this module's."""
    link = group.link.value if group.size > 1 else "none"
    hidden = cost.time_s - cost.exposed_s
    terms = [
        term("group_size", "group size", group.size, Unit.count,
             formula=GROUP_FORMULA[group.dimension], source=SRC_ORDER),
        term("stride", "rank distance", group.stride, Unit.count,
             formula=STRIDE_FORMULA[group.dimension], source=SRC_ORDER),
        term("nodes_spanned", "nodes one group spans", group.nodes, Unit.count,
             formula="nodes_spanned(size, stride, gpus_per_node)",
             source="tpcalc.calc.links.link.nodes_spanned"),
        term("link", "link", link, Unit.text, formula="slowest link the group crosses",
             source="tpcalc.calc.links.link.link_for_group"),
        term("overlap", "overlap assumption", cost.overlap, Unit.text,
             formula="named assumption", source=__doc__.splitlines()[0]),
        *cost.details,
        term("send_bytes_per_step", "sent per rank per step", cost.send_bytes, Unit.bytes,
             formula=SEND_FORMULA[group.dimension], source=SEND_SOURCE[group.dimension]),
        term("hidden_time_s", "hidden behind compute", hidden, Unit.seconds,
             formula="comm_time − exposed_time", source=__doc__.splitlines()[0],
             part_of="comm_time_s", comm_time_s=cost.time_s, exposed_time_s=cost.exposed_s),
        term("exposed_time_s", "exposed (adds to the step)", cost.exposed_s, Unit.seconds,
             formula=EXPOSED_FORMULA[group.dimension], source=SEND_SOURCE[group.dimension],
             part_of="comm_time_s", overlap=cost.overlap),
        term("comm_time_s", "time on the link", cost.time_s, Unit.seconds,
             formula=f"bytes / bandwidth + {LATENCY_FORMULA}",
             source="alpha-beta model (links.py); " + latency_source(hw, with_latency),
             **latency_inputs(hw, cost.latency, with_latency))
        if timed_by is None
        else term("comm_time_s", "time on the link", cost.time_s, Unit.seconds,
                  formula=timed_by[0], source=timed_by[1]),
    ]  # fmt: skip
    return Row(inputs={**inputs, "dimension": group.dimension}, terms=tuple(terms))
