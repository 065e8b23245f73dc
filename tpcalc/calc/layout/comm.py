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

Every function returns a frozen ``DimCost`` with a typed detail of the dimension; labels,
formulas and sources are in ``tpcalc.calc.layout.comm_explain``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from msgspec import Struct, field

from tpcalc.calc.cp.linear import GDN_CP_TENSORS, PASSES, gdn_cp_send_bytes_per_layer
from tpcalc.calc.cp.ring import CpRing, cp_ring, ring_latency_steps_per_layer
from tpcalc.calc.dp.zero import (
    ZeroCommParts,
    ZeroStage,
    zero_calls,
    zero_comm_parts,
    zero_latency_steps,
)
from tpcalc.calc.ep.all_to_all import A2A_KINDS, EpComm, ep_comm
from tpcalc.calc.layout.groups import Group, LayoutRun, ParallelLayout, expert_tp_group
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import LatencySteps, Link, ring_steps, steps_time_s
from tpcalc.calc.params.counts import EMBEDDING_GROUP_RANKS, last_stage_embedding_copy
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.calc.pipeline.schedule import p2p_bytes, p2p_sends_per_rank
from tpcalc.calc.tp.comm import FWD_COLLECTIVES_PER_LAYER, collectives_per_layer, message_bytes
from tpcalc.choices import MoeDispatcher, Recompute, RouterDtype, Schedule
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

# The overlap assumption of each dimension, echoed in its row (see the module docstring).
# An MoE layer's expert-TP gather and scatter run in its forward and, as adjoints, its backward.
EXPERT_TP_PASSES = 2

OVERLAP = {
    "tp": "exposed: every layer waits for it",
    "cp": "hidden up to the attention compute of each ring step",
    "pp": "exposed (conservative)",
    "dp": "hidden up to the last micro-batch's backward",
    "ep": "exposed",
    "ep-dualpipe": "hidden up to the step's compute (DualPipe)",
}


class TpDetail(Struct, frozen=True):
    """The TP message and how many collectives the busiest stage runs."""

    tp_message_bytes: float
    tp_collectives_per_layer: int
    tp_layers_on_rank: int
    seq: int
    cp: int
    tp_blocks_on_rank: int = 0  # attention + MLP blocks, 1 per MoE layer without shared expert


class CpDetail(Struct, frozen=True):
    """The ring of one micro-batch (``cp_ring``) and the inputs it was computed from; a hybrid
    model's Gated DeltaNet layers on the busiest stage and what each sends in its all-to-alls
    per micro-batch (``cp.linear``)."""

    ring: CpRing
    seq: int
    cp: int
    micro_batch: int
    dtype: Dtype
    link: Link
    with_latency: bool
    linear_layers: int = 0
    gdn_a2a_bytes_per_layer: float = 0.0


class PpDetail(Struct, frozen=True):
    """One stage-to-stage send and the sends of the middle rank per step; what an end rank
    sends in the embedding group's gradient all-reduce (``pp_cost``)."""

    pp_p2p_bytes: float
    pp_sends_per_step: int
    tp: int
    microbatches: int
    vpp: int
    pp_embedding_grad_bytes: float = 0.0


class DpShare(Struct, frozen=True):
    """The ZeRO collectives of one kind of parameter (dense or expert) over its DP group."""

    kind: str  # "dense" or "expert"
    params: int
    group_size: int
    parts: ZeroCommParts
    link: Link = Link.intra_node  # the slowest link the group crosses
    nodes: int = 1  # nodes one group spans


class DpDetail(Struct, frozen=True):
    """The ZeRO collectives of the dense and expert parameters, and the backward hiding them."""

    shares: tuple[DpShare, ...]
    dp_backward_time_s: float
    zero: ZeroStage
    microbatches: int


class EpDetail(Struct, frozen=True):
    """The all-to-alls of one MoE layer (``ep_comm``) and the tokens each rank dispatches."""

    comm: EpComm
    ep_tokens_per_rank: int
    seq: int
    micro_batch: int
    etp: int = 1
    etp_send_bytes_per_layer: float = 0.0  # expert-TP gathers and scatters, both passes
    etp_link: Link = Link.intra_node  # the slowest link an expert-TP group crosses


Detail = TpDetail | CpDetail | PpDetail | DpDetail | EpDetail


class DimCost(Struct, frozen=True):
    """One dimension's bytes, time and exposed time per step, and its typed detail."""

    send_bytes: float = 0.0
    time_s: float = 0.0
    exposed_s: float = 0.0
    overlap: str = "nothing to send"
    latency: LatencySteps = field(default_factory=LatencySteps)
    detail: Detail | None = None

    @property
    def hidden_s(self) -> float:
        """The part of the time hidden behind compute."""
        return self.time_s - self.exposed_s


class DimCosts(NamedTuple):
    """The cost of every dimension, in the rows' order (``summary.DIM_ORDER``)."""

    tp: DimCost
    cp: DimCost
    pp: DimCost
    dp: DimCost
    ep: DimCost

    def by_dimension(self) -> Iterator[tuple[str, DimCost]]:
        """(dimension name, cost) in the rows' order."""
        return zip(self._fields, self, strict=True)


def tp_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group,
    layers: int, blocks: int,
) -> DimCost:  # fmt: skip
    """TP all-reduces (or SP's reduce-scatter + all-gather, same bytes) of the worst stage:
    ``blocks`` attention and MLP blocks on its ``layers`` (``tp.blocks.tp_blocks``: a MoE layer
    without a shared expert has one), each block's share of the layer's collectives."""
    if layout.tp == 1:
        return DimCost()
    m = message_bytes(spec, seq=run.seq // layout.cp, micro_batch=run.micro_batch, dtype=run.dtype)
    n = sum(collectives_per_layer(run.recompute is Recompute.full))
    per_block = n // FWD_COLLECTIVES_PER_LAYER
    count = run.microbatches * blocks * per_block
    total = count * ring_factor(Collective.all_reduce, layout.tp) * m
    steps = ring_steps(Collective.all_reduce, layout.tp, group.nodes, count)
    time = steps_time_s(total, steps, hw, group.link, with_latency=run.with_latency)
    detail = TpDetail(m, n, layers, run.seq, layout.cp, blocks)
    return DimCost(total, time, time, OVERLAP["tp"], steps, detail)


def cp_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group,
    full_layers: int, linear_layers: int = 0,
) -> DimCost:  # fmt: skip
    """The K/V ring over the full-attention layers of the worst stage, and the all-to-alls of
    its Gated DeltaNet layers (``cp.linear``: on the critical path, exposed)."""
    if layout.cp == 1:
        return DimCost()
    ring = cp_ring(
        spec, hw, seq=run.seq, cp=layout.cp, micro_batch=run.micro_batch, tp=layout.tp,
        dtype=run.dtype, link=group.link, with_latency=run.with_latency,
    )  # fmt: skip
    total = run.microbatches * full_layers * float(ring.send_bytes_per_layer)
    ratio = ring.kv_over_compute_ratio
    steps = ring_latency_steps_per_layer(layout.cp, group.nodes).times(
        run.microbatches * full_layers
    )
    time = steps_time_s(total, steps, hw, group.link, with_latency=run.with_latency)
    exposed = time * max(0.0, 1 - 1 / ratio) if ratio > 0 else 0.0
    gdn = gdn_cp_send_bytes_per_layer(
        spec, tokens=run.seq // layout.cp * run.micro_batch, tp=layout.tp, cp=layout.cp,
        dtype=run.dtype,
    )  # fmt: skip
    a2a = run.microbatches * linear_layers * gdn
    if a2a:
        count = PASSES * GDN_CP_TENSORS * run.microbatches * linear_layers
        calls = ring_steps(Collective.all_to_all, layout.cp, group.nodes, count)
        a2a_s = steps_time_s(a2a, calls, hw, group.link, with_latency=run.with_latency)
        total, time, exposed, steps = total + a2a, time + a2a_s, exposed + a2a_s, steps + calls
    detail = CpDetail(
        ring, run.seq, layout.cp, run.micro_batch, run.dtype, group.link, run.with_latency,
        linear_layers, gdn,
    )  # fmt: skip
    return DimCost(total, time, exposed, OVERLAP["cp"], steps, detail)


def pp_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group
) -> DimCost:
    """Activations forward and gradients backward between stages, for every micro-batch; where
    the last stage holds its own copy of the embedding (a tied head, or MTP), the all-reduce of
    its V/t × h gradient with the first stage's once per step (``SRC_EMBEDDING_SYNC``)."""
    if layout.pp == 1:
        return DimCost()
    per_send = p2p_bytes(
        run.seq // layout.cp, run.micro_batch, spec.hidden_size, run.dtype, tp=layout.tp,
        scatter_gather=layout.tp > 1,
    )  # fmt: skip
    sends = p2p_sends_per_rank(run.schedule, layout.pp, run.microbatches, run.vpp)
    copy = last_stage_embedding_copy(spec, layout.pp, run.schedule, mtp=run.memory.mtp)
    ends = EMBEDDING_GROUP_RANKS
    embedding_grad = (
        ring_factor(Collective.all_reduce, ends)
        * (copy // layout.tp)
        * recipe_bytes(run.recipe).grad_bytes
    )
    total = per_send * sends + embedding_grad
    steps = ring_steps(Collective.p2p, layout.pp, group.nodes, sends)
    if embedding_grad:
        steps += ring_steps(Collective.all_reduce, ends, min(ends, group.nodes))
    time = steps_time_s(total, steps, hw, group.link, with_latency=run.with_latency)
    detail = PpDetail(per_send, sends, layout.tp, run.microbatches, run.vpp, embedding_grad)
    return DimCost(total, time, time, OVERLAP["pp"], steps, detail)


def dp_cost(
    hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, groups: tuple[Group, Group],
    params: tuple[int, int], backward_s: float,
) -> DimCost:  # fmt: skip
    """ZeRO/DP traffic of the dense params over dp·cp and of the experts over dp·cp/ep, with
    the collectives ZeRO-2 and ZeRO-3 repeat for every micro-batch (``dp.zero.zero_calls``)."""
    dense_group, expert_group = groups
    calls = zero_calls(layout.zero, run.microbatches)
    shares: list[DpShare] = []
    total = time = 0.0
    latency = LatencySteps()
    for kind, group, n in (("dense", dense_group, params[0]), ("expert", expert_group, params[1])):
        if group.size == 1 or n == 0:
            continue
        parts = zero_comm_parts(n, run.recipe, layout.zero, group.size, run.microbatches)
        shares.append(DpShare(kind, n, group.size, parts, group.link, group.nodes))
        sent = parts.total_bytes
        steps = zero_latency_steps(parts, group.size, group.nodes, calls)
        total += sent
        latency += steps
        time += steps_time_s(sent, steps, hw, group.link, with_latency=run.with_latency)
    detail = DpDetail(tuple(shares), backward_s, layout.zero, run.microbatches)
    return DimCost(total, time, max(0.0, time - backward_s), OVERLAP["dp"], latency, detail)


def ep_cost(
    spec: ModelSpec, hw: HardwareSpec, layout: ParallelLayout, run: LayoutRun, group: Group,
    moe_layers: int, compute_s: float,
) -> DimCost:  # fmt: skip
    """Dispatch and combine all-to-alls of the worst stage's MoE layers, every micro-batch,
    and with expert TP the gathers and scatters over the etp ranks (``etp_send_bytes``)."""
    if (layout.ep == 1 and layout.etp == 1) or moe_layers == 0:
        return DimCost()
    tokens = run.seq * run.micro_batch // (layout.cp * layout.tp)
    r = ep_comm(
        spec, hw, ep=layout.ep, tokens=tokens, stride=group.stride,
        gpus_per_node=layout.gpus_per_node, dispatch_dtype=run.dtype, combine_dtype=run.dtype,
        recipe=run.recipe, with_latency=run.with_latency, etp=layout.etp,
        dispatcher=MoeDispatcher(run.memory.moe_dispatcher),
        capacity_factor=run.memory.capacity_factor,
    )  # fmt: skip
    etp_bytes = etp_send_bytes(spec, run, layout.etp, tokens)
    total = run.microbatches * moe_layers * (r.send_bytes_per_layer + etp_bytes)
    time = run.microbatches * moe_layers * r.a2a_time_per_layer_s
    hidden_by = compute_s if run.schedule is Schedule.dualpipe else 0.0
    overlap = OVERLAP["ep-dualpipe" if hidden_by else "ep"]
    count = run.microbatches * moe_layers * len(A2A_KINDS)
    steps = ring_steps(Collective.all_to_all, layout.ep, group.nodes, count)
    etp_link = expert_tp_group(layout).link
    detail = EpDetail(r, tokens, run.seq, run.micro_batch, layout.etp, etp_bytes, etp_link)
    return DimCost(total, time, max(0.0, time - hidden_by), overlap, steps, detail)


def etp_send_bytes(spec: ModelSpec, run: LayoutRun, etp: int, tokens: int) -> float:
    """Bytes one rank sends per MoE layer and micro-batch over its expert-TP group
    (``time.roofline.expert_tp_time_s``): in the forward and the backward, an all-gather of the
    etp·T/t·k token copies in the activations' dtype and a reduce-scatter of as many in the
    router's, each rank sending (etp − 1)/etp of each: 2·(etp − 1)·T/t·k·h·(act + router bytes)."""
    if etp == 1:
        return 0.0
    copies = tokens * (spec.num_experts_per_tok or 1)
    per_token = spec.hidden_size * (Dtype.bf16.bytes + RouterDtype(run.memory.router_dtype).bytes)
    return EXPERT_TP_PASSES * (etp - 1) * copies * per_token
