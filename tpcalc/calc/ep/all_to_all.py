"""Expert parallelism: experts per rank, all-to-all bytes, node-limited routing, expert memory.

An MoE layer's routed experts are split over ``ep`` ranks; each token is sent (dispatch) to the
ranks holding its top-k experts and the outputs are sent back (combine): "FFN 前后各一次
all-to-all" (seed 000 summary). Forward and backward each run one dispatch and one combine.
How many copies cross nodes is modelled in ``tpcalc.calc.ep.routing``; experts and their
memory per rank in ``tpcalc.calc.ep.memory``.
"""

from __future__ import annotations

from tpcalc.calc.ep.memory import memory_terms, require_moe
from tpcalc.calc.ep.routing import (
    SRC_A2A,
    SRC_NODE,
    a2a_terms,
    copies_per_token,
    max_nodes_per_token,
)
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    Link,
    bandwidth_bytes_per_s,
    latency_inputs,
    latency_source,
    nodes_spanned,
    ring_steps,
)
from tpcalc.calc.params.counts import mlp_params
from tpcalc.calc.tp.flops import FLOP_PER_PARAM_TOKEN_FWD
from tpcalc.choices import EpRouting, MoeDispatcher, StateRecipe
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Row, Scalar, Term, Unit, term
from tpcalc.units import Dtype

SRC_FLOP = "2 FLOP per weight per token (Kaplan et al. 2020 §2.1), k experts per token"
SRC_ALLGATHER = (
    "Megatron-Core MoEAllGatherTokenDispatcher: every rank all-gathers the group's tokens "
    "(dispatch) and reduce-scatters the outputs (combine); a ring sends (n-1) shards per rank "
    "and runs at its slowest hop (the inter-node link once the group leaves a node)"
)
SRC_CAPACITY = (
    "Megatron-LM --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity (GShard, "
    "Lepikhin et al. 2020 §2.2): each expert takes capacity_factor·T·k/E tokens, the rest are "
    "dropped, the buffers padded to capacity"
)


def routed_copies(k: int, capacity_factor: float | None) -> float:
    """Token copies a rank sends and receives per token: k, or capacity_factor·k when tokens are
    dropped/padded to the expert capacity (``SRC_CAPACITY``)."""
    if capacity_factor is None:
        return float(k)
    if capacity_factor <= 0:
        raise InputError(f"capacity_factor={capacity_factor} must be positive (e.g. 1.0)")
    return capacity_factor * k


# The four all-to-alls of one MoE layer, fwd + bwd: (key, label, which dtype they carry).
A2A_KINDS = (
    ("fwd_dispatch", "forward dispatch", "dispatch"),
    ("fwd_combine", "forward combine", "combine"),
    ("bwd_dispatch", "backward: output grads to experts", "dispatch"),
    ("bwd_combine", "backward: input grads back", "combine"),
)


def _routing_terms(
    spec: ModelSpec,
    ep: int,
    nodes: int,
    m: int | None,
    routing: EpRouting,
    ib: float,
    nv: float,
    stride: int,
    g: int,
) -> list[Term]:
    k = spec.num_experts_per_tok or 0
    return [
        term(
            "max_nodes_per_token",
            "nodes a token may reach (M)",
            m,
            Unit.count,
            formula="topk_group (node groups = nodes)",
            source=SRC_NODE,
            n_group=spec.n_group,
            topk_group=spec.topk_group,
        ),
        term(
            "ep_nodes",
            "nodes the EP group spans (N)",
            nodes,
            Unit.count,
            formula="nodes_spanned(ep, stride, gpus_per_node)",
            source="node-major rank numbering (links.py)",
            ep=ep,
            stride=stride,
            gpus_per_node=g,
        ),
        term(
            "ib_copies_per_token",
            "copies per token over IB",
            ib,
            Unit.count,
            formula="k(N-1)/N uniform; min(M,N,k)(N-1)/N node-limited",
            source=SRC_NODE,
            k=k,
            N=nodes,
            M=m,
            routing=routing.value,
        ),
        term(
            "nvlink_copies_per_token",
            "copies per token over NVLink",
            nv,
            Unit.count,
            formula="k(ep-1)/ep - ib_copies",
            source=SRC_NODE,
            k=k,
            ep=ep,
            ib_copies=ib,
        ),
        term(
            "cross_node_share_ratio",
            "share of a token's k copies sent over IB",
            ib / k,
            Unit.ratio,
            formula="ib_copies / k",
            source=SRC_NODE,
            ib_copies=ib,
            k=k,
        ),
    ]


def resolve_routing(spec: ModelSpec, routing: EpRouting | None) -> EpRouting:
    """Node-limited when the config names topk_group and n_group, else uniform."""
    m = max_nodes_per_token(spec)
    routing = routing or (EpRouting.node_limited if m is not None else EpRouting.uniform)
    if routing is EpRouting.node_limited and m is None:
        raise InputError(
            f"routing=node-limited needs topk_group and n_group in the config of {spec.name}; "
            "use routing=uniform"
        )
    return routing


def ep_row(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    ep: int,
    tokens: int,
    stride: int = 1,
    gpus_per_node: int | None = None,
    routing: EpRouting | None = None,
    dispatch_dtype: Dtype = Dtype.bf16,
    combine_dtype: Dtype = Dtype.bf16,
    recipe: StateRecipe = StateRecipe.zero16,
    with_latency: bool = False,
    etp: int = 1,
    dispatcher: MoeDispatcher = MoeDispatcher.alltoall,
    capacity_factor: float | None = None,
) -> Row:
    """Experts per rank, expert memory, all-to-all bytes and time, and compute, for one ep.

    ``tokens`` = tokens this rank holds per micro-batch (s·b, divided by cp and, with sequence
    parallelism, by tp). Per MoE layer: forward dispatch + combine, backward the same two
    shapes in reverse; the gradient sent to the experts uses ``dispatch_dtype`` (DeepSeek-V3
    §3.3 sends both in FP8), the one sent back ``combine_dtype``. The two links of an
    all-to-all run at once, so its time is the slower of IB and NVLink (+ latency).
    Sources: ``SRC_A2A``, ``SRC_NODE``, ``ep.memory.SRC_PARAMS``, ``SRC_FLOP``.
    """
    if ep < 1 or tokens < 1 or stride < 1:
        raise InputError(f"ep={ep}, tokens={tokens}, stride={stride} must be positive integers")
    _, k, f = require_moe(spec)
    g = gpus_per_node or hw.gpus_per_node.value
    m = max_nodes_per_token(spec)
    routing = resolve_routing(spec, routing)
    nodes = nodes_spanned(ep, stride, g)
    if dispatcher is MoeDispatcher.allgather:
        others = float(ep - 1)
        ib, nv = (others, 0.0) if nodes > 1 else (0.0, others)
    else:
        ib, nv = copies_per_token(k, ep, nodes, routing, m)
        scale = routed_copies(k, capacity_factor) / k
        ib, nv = ib * scale, nv * scale
    h, layers = spec.hidden_size, spec.moe_layers
    dtypes = {"dispatch": dispatch_dtype, "combine": combine_dtype}
    parts = [
        a2a_terms(key, label, tokens, h, dtypes[kind], ib, nv, hw, with_latency, ep, nodes)
        for key, label, kind in A2A_KINDS
    ]
    per_layer = sum(t.number for t, _ in parts)
    layer_time = sum(time for _, time in parts)
    fwd_a2a_time = parts[0][1] + parts[1][1]
    expert = mlp_params(spec, f)
    flop = tokens * routed_copies(k, capacity_factor) * FLOP_PER_PARAM_TOKEN_FWD * expert / etp
    achieved = hw.achieved_flop_per_s.value
    compute = flop / achieved
    terms: list[Term] = [
        *memory_terms(spec, ep, recipe, etp=etp),
        *_routing_terms(spec, ep, nodes, m, routing, ib, nv, stride, g),
        term(
            "a2a_message_bytes",
            "dispatch message (tokens × k copies)",
            tokens * k * h * dispatch_dtype.bytes,
            Unit.bytes,
            formula="tokens·k·h·dtype",
            source=SRC_A2A,
            tokens=tokens,
            k=k,
            h=h,
            dtype_bytes=dispatch_dtype.bytes,
        ),
        *(t for t, _ in parts),
        term(
            "send_bytes_per_layer",
            "all-to-all sent per MoE layer, fwd+bwd",
            per_layer,
            Unit.bytes,
            formula="2 dispatches + 2 combines",
            source=SRC_A2A,
        ),
        term(
            "send_bytes_per_micro_batch",
            "all-to-all sent per micro-batch",
            layers * per_layer,
            Unit.bytes,
            formula="L_moe·send_bytes_per_layer",
            source=SRC_A2A,
            L_moe=layers,
        ),
        term(
            "a2a_time_per_layer_s",
            "all-to-all time per MoE layer, fwd+bwd",
            layer_time,
            Unit.seconds,
            formula=f"sum of 4 × max(IB bytes/IB bw, NVLink bytes/NVLink bw) + {LATENCY_FORMULA}",
            source=f"{SRC_NODE}; {latency_source(hw, with_latency)}",
            ib_bw=bandwidth_bytes_per_s(hw, Link.inter_node),
            nvlink_bw=bandwidth_bytes_per_s(hw, Link.intra_node),
            **latency_inputs(
                hw, ring_steps(Collective.all_to_all, ep, nodes, len(A2A_KINDS)), with_latency
            ),
        ),
        term(
            "comm_time_s",
            "all-to-all time per micro-batch if not hidden",
            layers * layer_time,
            Unit.seconds,
            formula="L_moe·a2a_time_per_layer",
            source=SRC_NODE,
            L_moe=layers,
        ),
        term(
            "expert_flop_fwd_per_layer",
            "expert FLOP per rank per layer, forward",
            flop,
            Unit.flop,
            formula="tokens·k·2·expert_params",
            source=SRC_FLOP,
            tokens=tokens,
            k=k,
            expert_params=expert,
        ),
        term(
            "expert_time_fwd_s",
            "expert compute per layer, forward",
            compute,
            Unit.seconds,
            formula="expert_flop / achieved FLOP/s",
            source=SRC_FLOP,
            achieved_flop_per_s=achieved,
        ),
        term(
            "a2a_over_compute_ratio",
            "forward all-to-all / expert compute",
            fwd_a2a_time / compute,
            Unit.ratio,
            formula="(dispatch + combine time) / expert time",
            source="seed 000 summary: cross-node EP compute : communication ≈ 1 : 1",
        ),
    ]
    inputs: dict[str, Scalar] = {
        "model": spec.name,
        "ep": ep,
        "tokens": tokens,
        "stride": stride,
        "gpus_per_node": g,
        "routing": routing.value,
        "dispatch_dtype": dispatch_dtype.value,
        "combine_dtype": combine_dtype.value,
        "recipe": recipe.value,
        "latency": with_latency,
        "etp": etp,
        "dispatcher": dispatcher.value,
        "capacity_factor": "none" if capacity_factor is None else capacity_factor,
    }
    return Row(inputs=inputs, terms=tuple(terms))
