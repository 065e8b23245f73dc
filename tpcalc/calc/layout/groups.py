"""Combined layouts: check a [TP, CP, PP, DP] (+ EP, ZeRO) split, place its groups on GPUs.

Ranks follow Megatron-LM's order (``megatron/core/parallel_state.py``, order "tp-cp-ep-dp-pp"):
rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank)), so TP is innermost and PP outermost.
Expert parallelism reuses the data-parallel ranks: an EP group is ``ep`` consecutive ranks of the
cp·dp block (stride tp), and expert weights are replicated over the remaining dp·cp/ep ranks
(Megatron-Core MoE: expert-data-parallel = tp·cp·dp / (etp·ep); the expert tensor-parallel size
etp is its own option, 1 by default as in the Megatron-Bridge MoE recipes). GPUs are
numbered node-major, so a group whose members are more than a node apart crosses the inter-node
link and is priced on it (seed 000: "TP 只放机内").

``tpcalc.calc.layout.price.price_layout`` prices a layout; this module holds the checks and
the placement.
"""

from __future__ import annotations

from msgspec import Struct, field
from msgspec.structs import force_setattr, replace

from tpcalc.calc.cp.linear import gdn_cp_problem, gdn_cps
from tpcalc.calc.dp.stage import ZeroStage
from tpcalc.calc.links.link import Link, link_for_group, nodes_spanned
from tpcalc.calc.pipeline.schedule import check_pipeline
from tpcalc.calc.tp.rules import tp_problem
from tpcalc.choices import (
    ActivationModel,
    AttentionKernel,
    LossKernel,
    Recompute,
    Schedule,
    StateRecipe,
)
from tpcalc.errors import InputError, TpcalcError
from tpcalc.specs import ModelSpec
from tpcalc.terms import Scalar
from tpcalc.units import Dtype

SRC_ORDER = (
    "Megatron-LM parallel_state.py rank order tp-cp-ep-dp-pp (TP innermost); seed 000: Llama 3 "
    "[TP, CP, PP, DP] with TP = 8 innermost"
)
DIMENSIONS = ("tp", "cp", "pp", "dp", "ep", "etp")


class ParallelLayout(Struct, frozen=True, kw_only=True):
    """Sizes of every dimension; world size = tp·cp·pp·dp (EP is carved out of cp·dp).

    ``gpus_per_node`` usually comes from the hardware config (``HardwareSpec.gpus_per_node``).
    """

    gpus_per_node: int
    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    zero: ZeroStage = ZeroStage.none
    etp: int = 1  # expert tensor parallel (Megatron --expert-tensor-parallel-size)
    world_size: int | None = None

    @property
    def product(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def world(self) -> int:
        return self.world_size if self.world_size is not None else self.product

    @property
    def grad_group(self) -> int:
        """Ranks that hold the same dense weights and sum their gradients: dp·cp."""
        return self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same experts: dp·cp·tp/(ep·etp) (Megatron-Core parallel_state:
        the expert grid is expert-tp x ep x expert-dp over the same tp·cp·dp ranks)."""
        return self.grad_group * self.tp // (self.ep * self.etp)


class Group(Struct, frozen=True):
    """One process group kind: its size, the rank distance between members, the link it uses."""

    dimension: str
    size: int
    stride: int
    link: Link
    nodes: int
    straddles: bool  # fits in a node by span, but some groups cross a node boundary

    @property
    def span(self) -> int:
        return self.size * self.stride


def group_link(size: int, stride: int, gpus_per_node: int) -> tuple[Link, bool]:
    """The slowest link any group of this shape crosses, and whether it is the straddling case.

    ``links.link_for_group`` prices a span that does not tile the node on the inter-node link;
    "straddles" marks the case where the span fits in a node but only some groups cross.
    """
    link = link_for_group(size, stride, gpus_per_node)
    return link, link is Link.inter_node and size * stride <= gpus_per_node


def place_groups(layout: ParallelLayout) -> dict[str, Group]:
    """Every dimension's group shape under the Megatron order (see the module docstring)."""
    tp, cp, dp = layout.tp, layout.cp, layout.dp
    shapes = {
        "tp": (tp, 1),
        "cp": (layout.cp, tp),
        "dp": (layout.grad_group, tp),  # gradients are summed over dp·cp ranks
        "pp": (layout.pp, tp * cp * dp),
        "ep": (layout.ep, layout.etp),  # expert grid etp-ep-edp over the tp·cp·dp ranks
    }
    g = layout.gpus_per_node
    out = {}
    for dim, (size, stride) in shapes.items():
        link, straddles = group_link(size, stride, g)
        out[dim] = Group(dim, size, stride, link, nodes_spanned(size, stride, g), straddles)
    return out


def expert_tp_group(layout: ParallelLayout) -> Group:
    """Ranks that split the same experts by expert tensor parallelism: etp adjacent ranks (the
    expert grid's innermost dimension, ``place_groups``)."""
    link, straddles = group_link(layout.etp, 1, layout.gpus_per_node)
    return Group(
        "etp", layout.etp, 1, link, nodes_spanned(layout.etp, 1, layout.gpus_per_node), straddles
    )


def expert_dp_group(layout: ParallelLayout) -> Group:
    """Ranks holding the same experts: dp·cp·tp/(ep·etp) of them, etp·ep apart."""
    size, stride = layout.expert_dp, layout.etp * layout.ep
    link, straddles = group_link(size, stride, layout.gpus_per_node)
    return Group(
        "edp", size, stride, link, nodes_spanned(size, stride, layout.gpus_per_node), straddles
    )


class MemoryTechniques(Struct, frozen=True, kw_only=True):
    """The memory techniques a run uses; each default is what today's Megatron-Core does unless
    told otherwise (sources in ``tpcalc.calc.activations.exact.techniques`` and
    ``tpcalc.calc.layout.memory``)."""

    recompute_modules: tuple[str, ...] = ()  # Megatron recompute_modules
    fp8_cache: bool = False  # DeepSeek-V3 §3.3: FP8 Linear inputs and SwiGLU input
    # Transformer Engine FP8 keeps each Linear's FP8 input; None: on when the run's dtype is FP8
    fp8_linear_inputs: bool | None = None
    moe_probs_in_act: bool = True  # Megatron-Core activation_func_with_probs (core_v0.13.0+)
    mtp: bool = True  # count the MTP module (last stage) when the model has one
    offload_layers: int = 0  # Megatron --cpu-offloading-num-layers: layers kept on the host
    moe_dispatcher: str = "alltoall"  # Megatron-Core --moe-token-dispatcher-type
    capacity_factor: float | None = None  # --moe-expert-capacity-factor (off: no dropping)
    router_dtype: str = "fp32"  # --moe-router-dtype
    # dropout masks kept for backward; None: the model's (its config's tpcalc.dropout, else on
    # for GPT-style models, off for Llama-style: ActivationOptions.resolved_dropout)
    dropout: bool | None = None
    # the attention kernel (choices.AttentionKernel): "flash" never stores the scores; "eager"
    # (Megatron's own attention before FlashAttention) materialises them, in memory and in time
    attention: str = AttentionKernel.flash.value
    # the last stage's cross-entropy kernel (choices.LossKernel): the bytes per logit it holds
    loss_kernel: str = LossKernel.fp32_copy.value

    def echo(self) -> dict[str, Scalar]:
        return {
            "recompute_modules": ",".join(self.recompute_modules) or "none",
            "fp8_cache": self.fp8_cache, "fp8_linear_inputs": bool(self.fp8_linear_inputs),
            "moe_probs_in_act": self.moe_probs_in_act, "mtp": self.mtp,
            "offload_layers": self.offload_layers,
            "moe_dispatcher": self.moe_dispatcher, "router_dtype": self.router_dtype,
            "capacity_factor": "none" if self.capacity_factor is None else self.capacity_factor,
            "dropout": "model" if self.dropout is None else self.dropout,
            "attention": self.attention, "loss_kernel": self.loss_kernel,
        }  # fmt: skip


class LayoutRun(Struct, frozen=True, kw_only=True):
    """What runs on the layout: the workload and every modelling choice, echoed in the rows."""

    seq: int
    microbatches: int
    micro_batch: int = 1
    vpp: int = 1
    schedule: Schedule = Schedule.one_f_one_b
    recipe: StateRecipe = StateRecipe.zero16
    sp: bool = True
    recompute: Recompute = Recompute.selective
    dtype: Dtype = Dtype.bf16
    with_latency: bool = False
    activations: ActivationModel = ActivationModel.exact
    memory: MemoryTechniques = field(default_factory=lambda: MemoryTechniques())

    def __post_init__(self) -> None:
        # An FP8 run keeps its Linear inputs in FP8 unless the techniques say otherwise.
        force_setattr(self, "memory", resolve_fp8_inputs(self.memory, self.dtype))


def resolve_fp8_inputs(memory: MemoryTechniques, dtype: Dtype) -> MemoryTechniques:
    """``memory`` with ``fp8_linear_inputs`` decided: an unset value follows the GEMM dtype
    (Transformer Engine FP8 recipes save each Linear's FP8 input; see
    ``tpcalc.calc.activations.exact.techniques``)."""
    if memory.fp8_linear_inputs is not None:
        return memory
    return replace(memory, fp8_linear_inputs=dtype is Dtype.fp8)


def layout_problems(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, *, allow_uneven: bool = True,
    by_hand: bool = False,
) -> list[str]:  # fmt: skip
    """Every reason ``layout`` cannot run ``spec`` with ``run``, one line each (empty if none);
    ``by_hand``: the stages' layers are set by hand (``pipeline.stage_split`` checks them)."""
    problems: list[str] = []
    sizes = {d: getattr(layout, d) for d in DIMENSIONS}
    sizes["gpus_per_node"] = layout.gpus_per_node
    if layout.world_size is not None:
        sizes["world_size"] = layout.world_size
    bad = [f"{k}={v}" for k, v in sizes.items() if v < 1]
    if bad:
        return [f"{', '.join(bad)}: every size must be a positive integer"]
    if layout.world != layout.product:
        problems.append(_world_problem(layout))
    if (why := tp_problem(spec, layout.tp)) is not None:
        problems.append(f"tp: {why}")
    seq = run.seq
    if seq % layout.cp:
        problems.append(f"seq={seq} is not divisible by cp={layout.cp}")
    elif layout.cp > 1 and seq % (2 * layout.cp):
        problems.append(
            f"seq={seq} is not divisible by 2·cp={2 * layout.cp}: zig-zag CP splits the "
            "sequence into 2·cp chunks"
        )
    elif run.sp:
        # the activation model's module, only here: a layout alone does not need it
        from tpcalc.calc.activations.paper import sp_seq_problem

        if (why := sp_seq_problem(seq, layout.tp, layout.cp)) is not None:
            problems.append(why)
    if layout.cp > 1 and run.memory.attention != AttentionKernel.flash.value:
        problems.append(
            f"cp={layout.cp} needs a flash attention kernel (Transformer Engine's CP ring "
            f"passes K, V blocks between flash kernels; {run.memory.attention} attention has "
            "none): use --attention flash or --cp 1"
        )
    if (why := gdn_cp_problem(spec, layout.tp, layout.cp)) is not None:
        valid = ", ".join(map(str, gdn_cps(spec, layout.tp)))
        problems.append(f"{why}; use a cp in {valid} at tp={layout.tp}")
    try:
        check_pipeline(
            spec.num_hidden_layers, layout.pp, run.microbatches, run.vpp, run.schedule,
            allow_uneven=allow_uneven, by_hand=by_hand,
        )  # fmt: skip
    except TpcalcError as exc:
        problems.append(str(exc))
    problems += _ep_problems(spec, layout)
    return problems


def _world_problem(layout: ParallelLayout) -> str:
    """A world size that is not tp·cp·pp·dp: suggest the dp that fits, when one does."""
    model = layout.tp * layout.cp * layout.pp
    sizes = f"{layout.tp}·{layout.cp}·{layout.pp}"
    if layout.world % model:
        return (
            f"world_size={layout.world} is not a multiple of tp·cp·pp = {sizes} = {model}, so "
            "no dp fits; change the world size or tp, cp, pp"
        )
    return (
        f"world_size={layout.world} is not tp·cp·pp·dp = {sizes}·{layout.dp} = "
        f"{layout.product}; change dp to {layout.world // model} or the world size"
    )


def _ep_problems(spec: ModelSpec, layout: ParallelLayout) -> list[str]:
    if layout.ep == 1 and layout.etp == 1:
        return []
    if not spec.is_moe:
        what = f"ep={layout.ep}" if layout.etp == 1 else f"ep={layout.ep}, etp={layout.etp}"
        return [f"{what} needs an MoE model; {spec.name} has no routed experts"]
    out = []
    if (layout.grad_group * layout.tp) % (layout.ep * layout.etp):
        out.append(
            f"dp·cp·tp={layout.grad_group * layout.tp} is not divisible by ep·etp="
            f"{layout.ep * layout.etp}: expert-parallel ranks are taken from the data-, "
            "context- and tensor-parallel ranks (Megatron-Core expert grid)"
        )
    if (spec.moe_intermediate_size or 0) % layout.etp:
        out.append(
            f"moe_intermediate_size={spec.moe_intermediate_size} is not divisible by "
            f"etp={layout.etp}"
        )
    if (spec.n_routed_experts or 0) % layout.ep:
        out.append(f"n_routed_experts={spec.n_routed_experts} is not divisible by ep={layout.ep}")
    return out


def check_layout(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, *, allow_uneven: bool = True,
    by_hand: bool = False,
) -> None:  # fmt: skip
    """Raise one InputError listing every problem of ``layout_problems`` ('; '-joined)."""
    problems = layout_problems(spec, layout, run, allow_uneven=allow_uneven, by_hand=by_hand)
    if problems:
        raise InputError("; ".join(problems))


def placement_warnings(groups: dict[str, Group], gpus_per_node: int) -> list[str]:
    """Groups that cross nodes where the seeds advise against it, and straddling groups."""
    out = []
    tp = groups["tp"]
    if tp.size > 1 and tp.link is Link.inter_node:
        out.append(
            f"TP group of {tp.size} crosses nodes ({gpus_per_node} GPUs per node): every layer "
            "waits on the inter-node link (seed 000: keep TP inside a node)"
        )
    for g in groups.values():
        if g.straddles:
            out.append(
                f"{g.dimension.upper()} groups of span {g.span} do not tile {gpus_per_node}-GPU "
                "nodes: some straddle two nodes and are priced on the inter-node link"
            )
    return out
