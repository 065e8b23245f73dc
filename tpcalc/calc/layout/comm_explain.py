"""Label, formula and source of every ``DimCost`` and of each dimension's detail (the explain
layer beside ``comm.py``), and their conversion to the terms of one ``tpcalc layout`` row."""

from __future__ import annotations

from tpcalc.calc.cp.linear import SRC_GDN_CP
from tpcalc.calc.cp.ring_explain import ring_terms
from tpcalc.calc.dp.zero_explain import COMM_LABELS
from tpcalc.calc.ep import all_to_all_explain as ep_explain
from tpcalc.calc.layout import comm
from tpcalc.calc.layout.comm import CpDetail, DimCost, DpDetail, EpDetail, PpDetail, TpDetail
from tpcalc.calc.layout.groups import SRC_ORDER, Group
from tpcalc.calc.links.link import LATENCY_FORMULA, latency_inputs, latency_source
from tpcalc.calc.params.counts import SRC_EMBEDDING_SYNC
from tpcalc.explain import Explanation, terms
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Scalar, Term, Unit, term

SRC_TP = "Shoeybi et al. 2019 §3: 2 fwd + 2 bwd all-reduces per layer; seed 000: TP waits"
SRC_CP = "Liu et al. 2023 Ring Attention §3: transfer hidden when compute per block is longer"
SRC_PP = "Narayanan et al. 2021 §4.1: s·b·h/t per send with scatter/gather; counted exposed"
SRC_EDP = (
    "Megatron-Core parallel_state: the expert grid is expert-TP x EP x expert-DP over the same "
    "tp·cp·dp ranks (tpcalc.calc.layout.groups.expert_dp_group)"
)
SRC_DP = (
    "ZeRO §7.2 per stage, §5.2-5.3 (ZeRO-2/3 repeat per micro-batch); Li et al. 2020 (DDP) §3.2.3:"
    " overlap with the last backward"
)
SRC_EP = "GShard §2.2 all-to-alls; DeepSeek-V3 §3.2.1: DualPipe overlaps them with compute"
# The overlap rules of ``comm``'s docstring, cited by the hidden/overlap terms.
SRC_RULES = (comm.__doc__ or "").splitlines()[0]

# How each dimension's group is shaped and what its row's totals add up (for --explain).
GROUP_FORMULA = {"tp": "tp", "cp": "cp", "pp": "pp", "dp": "dp·cp", "ep": "ep"}
STRIDE_FORMULA = {"tp": "1", "cp": "tp", "pp": "tp·cp·dp", "dp": "tp", "ep": "etp"}
SEND_FORMULA = {
    "tp": "m · (blocks/2) · collectives/layer · 2(t-1)/t · M",
    "cp": "m · (full-attention layers · send_bytes_per_layer + Gated DeltaNet layers · "
    "gdn_a2a_bytes_per_layer) (cp row)",
    "pp": "sends per step · p2p bytes + embedding gradient all-reduce",
    "dp": "Σ ZeRO collectives of the dense (dp·cp) and expert (dp·cp·tp/(ep·etp)) parameters",
    "ep": "m · MoE layers · all-to-all bytes per layer (ep row)",
}
SEND_SOURCE = {
    "tp": SRC_TP, "cp": f"{SRC_CP}; {SRC_GDN_CP}", "pp": SRC_PP, "dp": SRC_DP, "ep": SRC_EP
}  # fmt: skip
EXPOSED_FORMULA = {
    "tp": "comm_time",
    "cp": "ring time · max(0, 1 − attention/transfer) + Gated DeltaNet all-to-all time",
    "pp": "comm_time",
    "dp": "max(0, comm_time − last backward)",
    "ep": "comm_time (DualPipe: max(0, comm_time − compute))",
}

TP_EXPLANATIONS = {
    "tp_message_bytes": Explanation(
        "TP message (s/cp)·b·h", Unit.bytes, "(s/cp)·b·h·dtype", SRC_TP
    ),
    "tp_collectives_per_layer": Explanation(
        "TP all-reduces per layer", Unit.count, "2 fwd + 2 bwd (+2 recomputed)", SRC_TP
    ),
    "tp_layers_on_rank": Explanation(
        "layers on the busiest stage", Unit.count, "max over PP ranks",
        "pipeline.chunk_layer_counts",
    ),
    "tp_blocks_on_rank": Explanation(
        "TP blocks on the busiest stage", Unit.count,
        "2 per layer (attention, MLP); 1 per MoE layer without a shared expert",
        "tpcalc.calc.tp.blocks.tp_blocks (Megatron-Core MoELayer: routed experts behind the token "
        "dispatcher, no TP collective)",
    ),
}  # fmt: skip
TP_INPUTS = {
    "seq": Explanation("s", Unit.count, "sequence length", SRC_TP),
    "cp": Explanation("cp", Unit.count, "context-parallel size", SRC_TP),
}
PP_EXPLANATIONS = {
    "pp_p2p_bytes": Explanation(
        "stage-to-stage send", Unit.bytes, "(s/cp)·b·h·dtype / t", SRC_PP
    ),
    "pp_sends_per_step": Explanation(
        "sends per step (middle rank)", Unit.count, "2·m (·v interleaved)", SRC_PP
    ),
    "pp_embedding_grad_bytes": Explanation(
        "embedding gradient all-reduce (end ranks)", Unit.bytes,
        "2(n−1)/n · V·h/t · grad bytes, n = 2, where the last stage holds a copy of the "
        "embedding (tied head or MTP)", SRC_EMBEDDING_SYNC,
    ),
}  # fmt: skip
PP_INPUTS = {
    "tp": Explanation("t", Unit.count, "tensor-parallel size", SRC_PP),
    "microbatches": Explanation("m", Unit.count, "micro-batches per step", SRC_PP),
    "vpp": Explanation("v", Unit.count, "model chunks per rank", SRC_PP),
}
DP_BACKWARD = Explanation(
    "backward of the last micro-batch (hides DP)", Unit.seconds,
    "4/6 of one micro-batch's compute", SRC_DP,
)  # fmt: skip
EP_TOKENS = Explanation("tokens dispatched per micro-batch", Unit.count, "s·b/(cp·tp)", SRC_EP)
EP_ETP = Explanation(
    "expert-TP gather + scatter per MoE layer", Unit.bytes,
    "2·(etp − 1)·T·k·h·(activation + router bytes)",
    "Megatron-Core MoEAlltoAllTokenDispatcher (token_dispatcher.py): all-gather of the token "
    "copies over the etp ranks before the experts, reduce-scatter in the probs' dtype after; "
    "the adjoints in the backward",
)  # fmt: skip
EP_INPUTS = {
    "seq": Explanation("s", Unit.count, "sequence length", SRC_EP),
    "micro_batch": Explanation("b", Unit.count, "micro-batch size", SRC_EP),
    "etp": Explanation("etp", Unit.count, "expert tensor-parallel size", SRC_EP),
}
DP_INPUTS = {
    "microbatches": Explanation(
        "m", Unit.count, "micro-batches per step (ZeRO-2/3 repeat their collectives)", SRC_DP
    ),
}
DP_SHARE_INPUTS = {
    "kind": Explanation("kind", Unit.text, "dense or expert parameters", SRC_DP),
    "params": Explanation("N", Unit.params, "parameters the group replicates", SRC_DP),
    "group_size": Explanation(
        "n", Unit.count, "dp·cp (dense) or dp·cp·tp/(ep·etp) (expert)", SRC_DP
    ),
    "nodes": Explanation(
        "nodes one group spans", Unit.count, "nodes_spanned(size, stride, gpus_per_node)", SRC_EDP
    ),
}
CP_INPUTS = {
    "seq": Explanation("s", Unit.count, "sequence length", SRC_CP),
    "cp": Explanation("cp", Unit.count, "context-parallel size", SRC_CP),
    "micro_batch": Explanation("b", Unit.count, "micro-batch size", SRC_CP),
    "with_latency": Explanation("latency", Unit.text, "--latency", LATENCY_FORMULA),
}
GROUP_INPUTS = {
    "dimension": Explanation("dimension", Unit.text, "tp, cp, pp, dp or ep", SRC_ORDER),
}
# The CP ring's rows quoted in the CP row (``ring_explain`` explains them).
CP_ROWS = ("kv_block_bytes", "ring_sends_per_layer_count", "kv_over_compute_ratio")
# The EP rows quoted in the EP row (``all_to_all_explain`` explains them).
EP_MEMORY_ROWS = ("experts_per_rank",)
EP_COMM_ROWS = ("cross_node_share_ratio",)


def tp_terms(d: TpDetail) -> tuple[Term, ...]:
    """The TP message, collectives per layer and layers of the busiest stage."""
    return terms(d, TP_EXPLANATIONS, symbols={"tp_message_bytes": {"s": d.seq, "cp": d.cp}})


GDN_CP_EXPLANATIONS = {
    "linear_layers": Explanation(
        "Gated DeltaNet layers on the busiest stage", Unit.count, "max over PP ranks",
        "pipeline.chunk_layer_counts",
    ),
    "gdn_a2a_bytes_per_layer": Explanation(
        "Gated DeltaNet all-to-alls per layer", Unit.bytes,
        "2 passes · (cp−1)/cp · (s/cp)·b · (in_proj out + norm out per token)·dtype", SRC_GDN_CP,
    ),
}  # fmt: skip


def cp_terms(d: CpDetail, spec: ModelSpec, hw: HardwareSpec) -> tuple[Term, ...]:
    """The K/V block, sends per layer and the transfer/attention ratio of the ring; a hybrid
    model's Gated DeltaNet layers and their all-to-alls."""
    ring = ring_terms(
        d.ring, spec, hw, seq=d.seq, cp=d.cp, micro_batch=d.micro_batch, dtype=d.dtype,
        link=d.link, with_latency=d.with_latency, only=CP_ROWS,
    )  # fmt: skip
    if not d.linear_layers:
        return ring
    return (*ring, *terms(d, GDN_CP_EXPLANATIONS))


def pp_terms(d: PpDetail) -> tuple[Term, ...]:
    """One stage-to-stage send and the sends per step."""
    symbols: dict[str, dict[str, Scalar]] = {
        "pp_p2p_bytes": {"t": d.tp},
        "pp_sends_per_step": {"m": d.microbatches, "v": d.vpp},
    }
    return terms(d, PP_EXPLANATIONS, symbols=symbols)


def dp_terms(d: DpDetail) -> tuple[Term, ...]:
    """Each ZeRO collective the dense and expert groups run (flattened here to
    ``dp_{kind}_{collective}_bytes``, parts of the row's bytes), then the hiding backward. The
    row's group and link are the dense parameters' (dp·cp); the experts' group (dp·cp·tp/(ep·etp)
    ranks, ep·etp apart) gets its own size, link and span."""
    out = []
    for share in d.shares:
        if share.kind == "expert":
            out += [
                term("dp_expert_group_size", "expert-DP group size", share.group_size,
                     Unit.count, formula="dp·cp·tp/(ep·etp)", source=SRC_EDP),
                term("dp_expert_link", "expert-DP link", share.link.value, Unit.text,
                     formula="slowest link the group crosses", source=SRC_EDP),
                term("dp_expert_nodes", "nodes one expert-DP group spans", share.nodes,
                     Unit.count, formula="nodes_spanned(size, ep·etp, gpus_per_node)",
                     source=SRC_EDP),
            ]  # fmt: skip
        for key, value in share.parts.by_collective():
            if not value:
                continue
            label, formula = COMM_LABELS[key]
            out.append(
                term(f"dp_{share.kind}_{key}_bytes", f"{share.kind}: {label}", value, Unit.bytes,
                     formula=formula, source=SRC_DP, part_of="send_bytes_per_step",
                     N=share.params, n=share.group_size, zero=int(d.zero),
                     m=d.microbatches)
            )  # fmt: skip
    return (*out, *terms(d, {"dp_backward_time_s": DP_BACKWARD}))


def ep_terms(d: EpDetail, spec: ModelSpec, hw: HardwareSpec) -> tuple[Term, ...]:
    """Experts per rank, the cross-node share of the all-to-alls, tokens per rank."""
    symbols: dict[str, dict[str, Scalar]] = {"ep_tokens_per_rank": {"s": d.seq, "b": d.micro_batch}}
    return (
        *ep_explain.memory_row_terms(d.comm.memory, spec, only=EP_MEMORY_ROWS),
        *ep_explain.ep_comm_terms(d.comm, spec, hw, only=EP_COMM_ROWS),
        *terms(d, {"ep_tokens_per_rank": EP_TOKENS}, symbols=symbols),
        *(_etp_terms(d) if d.etp > 1 else ()),
    )


def _etp_terms(d: EpDetail) -> tuple[Term, ...]:
    """The expert-TP gathers and scatters of one MoE layer, and the group they run over."""
    symbols: dict[str, dict[str, Scalar]] = {
        "etp_send_bytes_per_layer": {"etp": d.etp, "T": d.ep_tokens_per_rank}
    }
    return (
        *terms(d, {"etp_send_bytes_per_layer": EP_ETP}, symbols=symbols),
        term("etp_group_size", "expert-TP group size", d.etp, Unit.count,
             formula="--etp (adjacent ranks)", source=SRC_EDP),
        term("etp_link", "expert-TP link", d.etp_link.value, Unit.text,
             formula="slowest link the group crosses", source=SRC_EDP),
    )  # fmt: skip


def detail_terms(cost: DimCost, spec: ModelSpec, hw: HardwareSpec) -> tuple[Term, ...]:
    """The terms of a dimension's detail (none when it sends nothing)."""
    d = cost.detail
    if isinstance(d, TpDetail):
        return tp_terms(d)
    if isinstance(d, CpDetail):
        return cp_terms(d, spec, hw)
    if isinstance(d, PpDetail):
        return pp_terms(d)
    if isinstance(d, DpDetail):
        return dp_terms(d)
    if isinstance(d, EpDetail):
        return ep_terms(d, spec, hw)
    return ()


# The JSON key of each ``Group`` and ``DimCost`` field in a dimension's row.
GROUP_KEYS = {"size": "group_size", "stride": "stride", "nodes": "nodes_spanned", "link": "link"}
COST_KEYS = {"send_bytes": "send_bytes_per_step", "hidden_s": "hidden_time_s",
             "exposed_s": "exposed_time_s", "time_s": "comm_time_s"}  # fmt: skip


def group_explanations(dim: str) -> dict[str, Explanation]:
    """The explain table of a ``Group`` of dimension ``dim`` (``straddles`` feeds a warning)."""
    return {
        "size": Explanation("group size", Unit.count, GROUP_FORMULA[dim], SRC_ORDER),
        "stride": Explanation("rank distance", Unit.count, STRIDE_FORMULA[dim], SRC_ORDER),
        "nodes": Explanation(
            "nodes one group spans", Unit.count, "nodes_spanned(size, stride, gpus_per_node)",
            "tpcalc.calc.links.link.nodes_spanned",
        ),
        "link": Explanation(
            "link", Unit.text, "slowest link the group crosses",
            "tpcalc.calc.links.link.link_for_group",
        ),
        "straddles": Explanation(
            "straddles a node boundary", Unit.text, "span fits a node, members cross one",
            "tpcalc.calc.layout.groups.placement_warnings",
        ),
    }  # fmt: skip


def cost_explanations(
    dim: str, hw: HardwareSpec, with_latency: bool, timed_by: tuple[str, str] | None = None
) -> dict[str, Explanation]:
    """The explain table of a ``DimCost`` of dimension ``dim``: ``timed_by`` (formula, source)
    names the model that timed it when not ``comm``'s alpha-beta pricing."""
    time_formula, time_source = timed_by or (
        f"bytes / bandwidth + {LATENCY_FORMULA}",
        "alpha-beta model (links.py); " + latency_source(hw, with_latency),
    )
    return {
        "overlap": Explanation("overlap assumption", Unit.text, "named assumption", SRC_RULES),
        "send_bytes": Explanation(
            "sent per rank per step", Unit.bytes, SEND_FORMULA[dim], SEND_SOURCE[dim]
        ),
        "hidden_s": Explanation(
            "hidden behind compute", Unit.seconds, "comm_time − exposed_time", SRC_RULES,
            "comm_time_s",
        ),
        "exposed_s": Explanation(
            "exposed (adds to the step)", Unit.seconds, EXPOSED_FORMULA[dim], SEND_SOURCE[dim],
            "comm_time_s",
        ),
        "time_s": Explanation("time on the link", Unit.seconds, time_formula, time_source),
    }  # fmt: skip


def _term(key: str, ex: Explanation, value: Scalar, **inputs: Scalar) -> Term:
    return term(key, ex.label, value, ex.unit, formula=ex.formula, source=ex.source,
                part_of=ex.part_of, symbols=inputs)  # fmt: skip


def dimension_terms(
    group: Group,
    cost: DimCost,
    spec: ModelSpec,
    hw: HardwareSpec,
    with_latency: bool,
    timed_by: tuple[str, str] | None = None,
) -> tuple[Term, ...]:
    """One dimension's row: the group, its link, its detail, bytes and time, hidden and
    exposed parts. ``timed_by`` (formula, source) names the model that timed it when not
    ``comm``'s alpha-beta pricing."""
    g = group_explanations(group.dimension)
    c = cost_explanations(group.dimension, hw, with_latency, timed_by)
    link = group.link.value if group.size > 1 else "none"
    time_inputs = latency_inputs(hw, cost.latency, with_latency) if timed_by is None else {}
    return (
        _term("group_size", g["size"], group.size),
        _term("stride", g["stride"], group.stride),
        _term("nodes_spanned", g["nodes"], group.nodes),
        _term("link", g["link"], link),
        _term("overlap", c["overlap"], cost.overlap),
        *detail_terms(cost, spec, hw),
        _term("send_bytes_per_step", c["send_bytes"], cost.send_bytes),
        _term("hidden_time_s", c["hidden_s"], cost.hidden_s, comm_time_s=cost.time_s,
              exposed_time_s=cost.exposed_s),
        _term("exposed_time_s", c["exposed_s"], cost.exposed_s, overlap=cost.overlap),
        _term("comm_time_s", c["time_s"], cost.time_s, **time_inputs),
    )  # fmt: skip
