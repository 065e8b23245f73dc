"""Label, formula and source of every ``EpComm`` and ``ExpertMemory`` field (the explain layer
beside ``all_to_all.py``, ``memory.py`` and ``routing.py``), and the conversion to the ``Term``
rows ``tpcalc ep`` prints (and ``tpcalc layout`` quotes)."""

from __future__ import annotations

from msgspec.structs import replace

from tpcalc.calc.ep.all_to_all import A2A_KINDS, SRC_FLOP, EpComm
from tpcalc.calc.ep.memory import SRC_EP, SRC_PARAMS, ExpertMemory
from tpcalc.calc.ep.routing import SRC_A2A, SRC_NODE
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    Link,
    bandwidth_bytes_per_s,
    latency_inputs,
    latency_source,
    ring_steps,
)
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.choices import StateRecipe
from tpcalc.explain import ACHIEVED_FLOP_PER_S, Explanation, terms
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Scalar, Term, Unit

SRC_ETP = f"{SRC_EP}; Megatron-Core expert tensor parallel splits each expert by etp"
SRC_COMPUTE_RATIO = "seed 000 summary: cross-node EP compute : communication ≈ 1 : 1"
LAYER_TOTAL = "send_bytes_per_layer"
# The label of each all-to-all of A2A_KINDS.
A2A_LABELS = {
    "fwd_dispatch": "forward dispatch",
    "fwd_combine": "forward combine",
    "bwd_dispatch": "backward: output grads to experts",
    "bwd_combine": "backward: input grads back",
}


def memory_explanations(recipe: StateRecipe) -> dict[str, Explanation]:
    """The rows of ``ExpertMemory``, in display order (the recipe names its source)."""
    src = recipe_bytes(recipe).source
    return {
        "experts_per_rank": Explanation(
            "routed experts per rank per layer", Unit.count, "n_routed_experts / ep", SRC_EP
        ),
        "moe_layers": Explanation(
            "MoE layers", Unit.count, "num_hidden_layers - first_k_dense_replace", "model config"
        ),
        "routed_expert_params": Explanation(
            "routed-expert parameters", Unit.params, "L_moe·E·expert_params", SRC_PARAMS
        ),
        "routed_expert_params_per_rank": Explanation(
            "routed-expert parameters per rank", Unit.params, "routed_expert_params / (ep·etp)",
            SRC_ETP,
        ),
        "expert_weights_bytes_per_rank": Explanation(
            "expert weights per rank", Unit.bytes, "params_per_rank·weight_bytes", src
        ),
        "expert_states_bytes_per_rank": Explanation(
            "expert model states per rank (before ZeRO)", Unit.bytes,
            "params_per_rank·bytes_per_param", src,
        ),
    }  # fmt: skip


# The inputs ``ExpertMemory`` carries for the formulas above, explained so that every field
# has its text.
MEMORY_INPUTS: dict[str, Explanation] = {
    "ep": Explanation("ep", Unit.count, "expert-parallel size", SRC_EP),
    "etp": Explanation("etp", Unit.count, "expert tensor-parallel size", SRC_ETP),
    "n_routed_experts": Explanation("E", Unit.count, "n_routed_experts (model config)", SRC_EP),
    "expert_params": Explanation(
        "expert parameters", Unit.params, "3·h·moe_intermediate_size (gate, up, down)", SRC_PARAMS
    ),
    "weight_bytes_per_param": Explanation(
        "weight bytes per parameter", Unit.bytes, "bytes(weight dtype)", "the state recipe"
    ),
    "state_bytes_per_param": Explanation(
        "state bytes per parameter", Unit.bytes, "weight + grad + optimizer", "the state recipe"
    ),
}  # fmt: skip


def a2a_explanations(name: str) -> dict[str, Explanation]:
    """The explain table of one ``AllToAll`` (``name`` from A2A_KINDS); only ``send_bytes``
    is a row, keyed ``{name}_bytes_per_layer`` and part of the layer's total."""
    label = A2A_LABELS[name]
    return {
        "send_bytes": Explanation(
            f"{label} sent per layer", Unit.bytes, "tokens·(ib_copies + nvlink_copies)·h·dtype",
            SRC_A2A, LAYER_TOTAL,
        ),
        "dtype_bytes": Explanation(
            f"{label} dtype", Unit.bytes, "--dtype (dispatch) or --combine-dtype (combine)",
            "DeepSeek-V3 report §3.3 (FP8 dispatch, BF16 combine)",
        ),
        "ib_send_bytes": Explanation(
            f"{label} over IB", Unit.bytes, "tokens·ib_copies·h·dtype", SRC_NODE
        ),
        "nvlink_send_bytes": Explanation(
            f"{label} over NVLink", Unit.bytes, "tokens·nvlink_copies·h·dtype", SRC_NODE
        ),
        "time_s": Explanation(
            f"{label} time", Unit.seconds,
            f"max(IB bytes/IB bw, NVLink bytes/NVLink bw) + {LATENCY_FORMULA}", SRC_NODE,
        ),
    }  # fmt: skip


def explanations(hw: HardwareSpec, with_latency: bool) -> dict[str, Explanation]:
    """The rows of ``EpComm`` after the memory ones, in display order; the four all-to-alls
    (``a2a_explanations``) print after ``a2a_message_bytes``."""
    return {
        "max_nodes_per_token": Explanation(
            "nodes a token may reach (M)", Unit.count, "topk_group (node groups = nodes)",
            SRC_NODE,
        ),
        "ep_nodes": Explanation(
            "nodes the EP group spans (N)", Unit.count, "nodes_spanned(ep, stride, gpus_per_node)",
            "node-major rank numbering (links.py)",
        ),
        "ib_copies_per_token": Explanation(
            "copies per token over IB", Unit.count,
            "k(N-1)/N uniform; min(M,N,k)(N-1)/N node-limited", SRC_NODE,
        ),
        "nvlink_copies_per_token": Explanation(
            "copies per token over NVLink", Unit.count, "k(ep-1)/ep - ib_copies", SRC_NODE
        ),
        "cross_node_share_ratio": Explanation(
            "share of a token's k copies sent over IB", Unit.ratio, "ib_copies / k", SRC_NODE
        ),
        "a2a_message_bytes": Explanation(
            "dispatch message (tokens × k copies)", Unit.bytes, "tokens·k·h·dtype", SRC_A2A
        ),
        "send_bytes_per_layer": Explanation(
            "all-to-all sent per MoE layer, fwd+bwd", Unit.bytes, "2 dispatches + 2 combines",
            SRC_A2A,
        ),
        "send_bytes_per_micro_batch": Explanation(
            "all-to-all sent per micro-batch", Unit.bytes, "L_moe·send_bytes_per_layer", SRC_A2A
        ),
        "a2a_time_per_layer_s": Explanation(
            "all-to-all time per MoE layer, fwd+bwd", Unit.seconds,
            f"sum of 4 × max(IB bytes/IB bw, NVLink bytes/NVLink bw) + {LATENCY_FORMULA}",
            f"{SRC_NODE}; {latency_source(hw, with_latency)}",
        ),
        "comm_time_s": Explanation(
            "all-to-all time per micro-batch if not hidden", Unit.seconds,
            "L_moe·a2a_time_per_layer", SRC_NODE,
        ),
        "expert_flop_fwd_per_layer": Explanation(
            "expert FLOP per rank per layer, forward", Unit.flop, "tokens·k·2·expert_params",
            SRC_FLOP,
        ),
        "expert_time_fwd_s": Explanation(
            "expert compute per layer, forward", Unit.seconds, "expert_flop / achieved FLOP/s",
            SRC_FLOP,
        ),
        "a2a_over_compute_ratio": Explanation(
            "forward all-to-all / expert compute", Unit.ratio,
            "(dispatch + combine time) / expert time", SRC_COMPUTE_RATIO,
        ),
    }  # fmt: skip


# The inputs ``EpComm`` carries for the formulas above, explained so that every field has its
# text.
INPUTS: dict[str, Explanation] = {
    "ep": Explanation("ep", Unit.count, "expert-parallel size", SRC_EP),
    "etp": Explanation("etp", Unit.count, "expert tensor-parallel size", SRC_ETP),
    "tokens": Explanation("tokens per rank", Unit.count, "s·b/(cp·tp)", SRC_A2A),
    "stride": Explanation("EP rank stride", Unit.count, "etp (TP innermost)", SRC_NODE),
    "gpus_per_node": Explanation("GPUs per node", Unit.count, "hardware config", SRC_NODE),
    "with_latency": Explanation("latency", Unit.text, "--latency", LATENCY_FORMULA),
    "k": Explanation("k", Unit.count, "num_experts_per_tok (model config)", SRC_A2A),
    "hidden_size": Explanation("h", Unit.count, "hidden_size (model config)", SRC_A2A),
    "moe_layers": Explanation(
        "MoE layers", Unit.count, "num_hidden_layers - first_k_dense_replace", "model config"
    ),
    "expert_params": Explanation(
        "expert parameters", Unit.params, "3·h·moe_intermediate_size (gate, up, down)", SRC_PARAMS
    ),
    "achieved_flop_per_s": ACHIEVED_FLOP_PER_S,
}  # fmt: skip


def memory_symbols(mem: ExpertMemory, spec: ModelSpec) -> dict[str, dict[str, Scalar]]:
    """The numbers substituted into each ``ExpertMemory`` formula (shown by --explain)."""
    recipe = mem.recipe.value
    return {
        "experts_per_rank": {"n_routed_experts": mem.n_routed_experts, "ep": mem.ep},
        "moe_layers": {
            "num_hidden_layers": spec.num_hidden_layers,
            "first_k_dense_replace": spec.first_k_dense_replace,
        },
        "routed_expert_params": {
            "L_moe": mem.moe_layers, "E": mem.n_routed_experts, "expert_params": mem.expert_params
        },
        "routed_expert_params_per_rank": {"ep": mem.ep, "etp": mem.etp},
        "expert_weights_bytes_per_rank": {
            "weight_bytes": mem.weight_bytes_per_param, "recipe": recipe
        },
        "expert_states_bytes_per_rank": {
            "bytes_per_param": mem.state_bytes_per_param, "recipe": recipe
        },
    }  # fmt: skip


def symbols(r: EpComm, spec: ModelSpec, hw: HardwareSpec) -> dict[str, dict[str, Scalar]]:
    """The numbers substituted into each ``EpComm`` formula (shown by --explain)."""
    ib = r.ib_copies_per_token
    steps = ring_steps(Collective.all_to_all, r.ep, r.ep_nodes, len(A2A_KINDS))
    return {
        "max_nodes_per_token": {"n_group": spec.n_group, "topk_group": spec.topk_group},
        "ep_nodes": {"ep": r.ep, "stride": r.stride, "gpus_per_node": r.gpus_per_node},
        "ib_copies_per_token": {
            "k": r.k, "N": r.ep_nodes, "M": r.max_nodes_per_token, "routing": r.routing.value
        },
        "nvlink_copies_per_token": {"k": r.k, "ep": r.ep, "ib_copies": ib},
        "cross_node_share_ratio": {"ib_copies": ib, "k": r.k},
        "a2a_message_bytes": {
            "tokens": r.tokens, "k": r.k, "h": r.hidden_size,
            "dtype_bytes": r.dispatch_dtype.bytes,
        },
        "send_bytes_per_micro_batch": {"L_moe": r.moe_layers},
        "a2a_time_per_layer_s": {
            "ib_bw": bandwidth_bytes_per_s(hw, Link.inter_node),
            "nvlink_bw": bandwidth_bytes_per_s(hw, Link.intra_node),
            **latency_inputs(hw, steps, r.with_latency),
        },
        "comm_time_s": {"L_moe": r.moe_layers},
        "expert_flop_fwd_per_layer": {
            "tokens": r.tokens, "k": r.k, "expert_params": r.expert_params
        },
        "expert_time_fwd_s": {"achieved_flop_per_s": r.achieved_flop_per_s},
    }  # fmt: skip


def memory_row_terms(
    mem: ExpertMemory, spec: ModelSpec, *, only: tuple[str, ...] | None = None
) -> tuple[Term, ...]:
    """The expert-memory rows of ``tpcalc ep`` in display order (``only``: just these)."""
    table = memory_explanations(mem.recipe)
    table = table if only is None else {k: table[k] for k in only}
    return terms(mem, table, symbols=memory_symbols(mem, spec))


def ep_comm_terms(
    r: EpComm, spec: ModelSpec, hw: HardwareSpec, *, only: tuple[str, ...]
) -> tuple[Term, ...]:
    """The rows ``only`` of ``r`` (``tpcalc layout`` quotes a few in its EP row)."""
    table = explanations(hw, r.with_latency)
    return terms(r, {k: table[k] for k in only}, symbols=symbols(r, spec, hw))


def a2a_terms(r: EpComm) -> tuple[Term, ...]:
    """The four all-to-alls' bytes as rows ``{name}_bytes_per_layer`` (flattened here, at the
    output edge), each part of ``send_bytes_per_layer``."""
    out = []
    for (name, _), a in zip(A2A_KINDS, r.all_to_alls, strict=True):
        sym: dict[str, Scalar] = {
            "tokens": r.tokens, "ib_copies": r.ib_copies_per_token,
            "nvlink_copies": r.nvlink_copies_per_token, "h": r.hidden_size,
            "dtype_bytes": a.dtype_bytes,
        }  # fmt: skip
        ex = {"send_bytes": a2a_explanations(name)["send_bytes"]}
        (t,) = terms(a, ex, symbols={"send_bytes": sym})
        out.append(replace(t, key=f"{name}_bytes_per_layer"))
    return tuple(out)


def ep_terms(r: EpComm, spec: ModelSpec, hw: HardwareSpec) -> tuple[Term, ...]:
    """The rows of ``tpcalc ep`` for one ep, in display order: expert memory, routing, the
    four all-to-alls and their total and time, and expert compute."""
    table, sym = explanations(hw, r.with_latency), symbols(r, spec, hw)
    keys = list(table)
    split = keys.index("a2a_message_bytes") + 1
    before = {k: table[k] for k in keys[:split]}
    after = {k: table[k] for k in keys[split:]}
    return (
        *memory_row_terms(r.memory, spec),
        *terms(r, before, symbols=sym),
        *a2a_terms(r),
        *terms(r, after, symbols=sym),
    )
