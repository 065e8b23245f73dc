"""Expert parallelism: experts per rank, all-to-all bytes, node-limited routing, expert memory.

An MoE layer's routed experts are split over ``ep`` ranks; each token is sent (dispatch) to the
ranks holding its top-k experts and the outputs are sent back (combine): "FFN 前后各一次
all-to-all" (seed 000 summary). Forward and backward each run one dispatch and one combine.
How many copies cross nodes is modelled in ``tpcalc.calc.ep.routing``; experts and their
memory per rank in ``tpcalc.calc.ep.memory``.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.activations.exact.options import check_capacity_factor
from tpcalc.calc.ep.memory import ExpertMemory, expert_memory, require_moe
from tpcalc.calc.ep.routing import AllToAll, all_to_all, copies_per_token, max_nodes_per_token
from tpcalc.calc.links.link import nodes_spanned
from tpcalc.calc.params.counts import mlp_params
from tpcalc.calc.tp.flops import FLOP_PER_PARAM_TOKEN_FWD
from tpcalc.choices import EpRouting, MoeDispatcher, StateRecipe
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec, ModelSpec
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
    check_capacity_factor(capacity_factor)
    if capacity_factor is None:
        return float(k)
    return capacity_factor * k


# The four all-to-alls of one MoE layer, fwd + bwd: (name, which dtype they carry).
A2A_KINDS = (
    ("fwd_dispatch", "dispatch"),
    ("fwd_combine", "combine"),
    ("bwd_dispatch", "dispatch"),
    ("bwd_combine", "combine"),
)


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


class EpComm(Struct, frozen=True):
    """Experts and expert memory per rank, the four all-to-alls of an MoE layer and their
    time, and the forward expert compute they compare with, for one ep.

    Labels, formulas and sources: ``tpcalc.calc.ep.all_to_all_explain``."""

    memory: ExpertMemory
    ep: int
    etp: int
    tokens: int
    stride: int
    gpus_per_node: int
    routing: EpRouting
    dispatcher: MoeDispatcher
    capacity_factor: float | None
    with_latency: bool
    k: int
    hidden_size: int
    moe_layers: int
    max_nodes_per_token: int | None
    ep_nodes: int
    ib_copies_per_token: float
    nvlink_copies_per_token: float
    cross_node_share_ratio: float
    dispatch_dtype: Dtype
    combine_dtype: Dtype
    a2a_message_bytes: int
    all_to_alls: tuple[AllToAll, ...]  # in A2A_KINDS order
    send_bytes_per_layer: float
    send_bytes_per_micro_batch: float
    a2a_time_per_layer_s: float
    comm_time_s: float
    expert_params: int
    expert_flop_fwd_per_layer: float
    achieved_flop_per_s: float
    expert_time_fwd_s: float
    a2a_over_compute_ratio: float


def ep_comm(
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
) -> EpComm:
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
    h, L_moe = spec.hidden_size, spec.moe_layers
    dtypes = {"dispatch": dispatch_dtype, "combine": combine_dtype}
    a2as = tuple(
        all_to_all(tokens, h, dtypes[kind], ib, nv, hw, with_latency, ep, nodes)
        for _, kind in A2A_KINDS
    )
    per_layer = sum(a.send_bytes for a in a2as)
    layer_time = sum(a.time_s for a in a2as)
    fwd_dispatch, fwd_combine = a2as[0], a2as[1]
    expert = mlp_params(spec, f)
    flop = tokens * routed_copies(k, capacity_factor) * FLOP_PER_PARAM_TOKEN_FWD * expert / etp
    achieved = hw.achieved_flop_per_s.value
    compute = flop / achieved
    return EpComm(
        memory=expert_memory(spec, ep, recipe, etp=etp),
        ep=ep,
        etp=etp,
        tokens=tokens,
        stride=stride,
        gpus_per_node=g,
        routing=routing,
        dispatcher=dispatcher,
        capacity_factor=capacity_factor,
        with_latency=with_latency,
        k=k,
        hidden_size=h,
        moe_layers=L_moe,
        max_nodes_per_token=m,
        ep_nodes=nodes,
        ib_copies_per_token=ib,
        nvlink_copies_per_token=nv,
        cross_node_share_ratio=ib / k,
        dispatch_dtype=dispatch_dtype,
        combine_dtype=combine_dtype,
        a2a_message_bytes=tokens * k * h * dispatch_dtype.bytes,
        all_to_alls=a2as,
        send_bytes_per_layer=per_layer,
        send_bytes_per_micro_batch=L_moe * per_layer,
        a2a_time_per_layer_s=layer_time,
        comm_time_s=L_moe * layer_time,
        expert_params=expert,
        expert_flop_fwd_per_layer=flop,
        achieved_flop_per_s=achieved,
        expert_time_fwd_s=compute,
        a2a_over_compute_ratio=(fwd_dispatch.time_s + fwd_combine.time_s) / compute,
    )
