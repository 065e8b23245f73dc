"""Label, formula and source of every ``LayoutMemory`` field (the explain layer beside
``memory.py``), and the conversion to the memory rows of ``tpcalc layout``'s total."""

from __future__ import annotations

from tpcalc.calc.activations.exact.layer import SRC_HEAD, SRC_MTP_INPUT, SRC_RECOMPUTE_WORKING
from tpcalc.calc.layout.memory import (
    RANK_TOTAL_FORMULA,
    SRC_ACT,
    SRC_BLOCK_RECOMPUTE,
    SRC_BUFFERS,
    SRC_OFFLOAD,
    SRC_STATES,
    LayoutMemory,
)
from tpcalc.calc.params.counts import SRC_TP_REPLICATED
from tpcalc.choices import ActivationModel
from tpcalc.explain import Explanation, terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Term, Unit

TOTAL = "memory_bytes_per_rank"
SRC_LAYOUT = "tpcalc.calc.layout.groups.ParallelLayout"
# The offload rows print only when layers are offloaded.
OFFLOAD_ROWS = ("offload_transfer_bytes_per_step", "offload_transfer_time_s")

# The inputs ``LayoutMemory`` carries for its formulas, explained so that every field has text.
INPUTS: dict[str, Explanation] = {
    "tp": Explanation("tp", Unit.count, "tensor-parallel size", SRC_LAYOUT),
    "ep": Explanation("ep", Unit.count, "expert-parallel size", SRC_LAYOUT),
    "etp": Explanation("etp", Unit.count, "expert tensor-parallel size", SRC_LAYOUT),
    "zero": Explanation("ZeRO stage", Unit.count, "--zero", SRC_STATES),
    "grad_group": Explanation("dense ZeRO group", Unit.count, "dp·cp", SRC_STATES),
    "expert_dp": Explanation(
        "expert ZeRO group", Unit.count, "dp·cp·tp/(ep·etp)", SRC_STATES
    ),
    "in_flight": Explanation(
        "micro-batches in flight", Unit.count, "in_flight_chunks(schedule, p, m, v, rank)",
        SRC_ACT[ActivationModel.exact],
    ),
    "host_bandwidth_bytes_per_s": Explanation(
        "host bandwidth", Unit.bytes_per_s, "hardware config (0 if none)", SRC_OFFLOAD
    ),
    "block_recompute_layers": Explanation(
        "block-recomputed layers per chunk", Unit.count, "--recompute-layers (0 if unset)",
        SRC_BLOCK_RECOMPUTE,
    ),
}  # fmt: skip


def _activation_source(activations: ActivationModel) -> str:
    """``SRC_ACT``, and under the exact model the last stage's loss heads and MTP inputs."""
    if activations is ActivationModel.exact:
        heads = f"loss heads: {SRC_HEAD}; MTP module inputs: {SRC_MTP_INPUT}"
        return f"{SRC_ACT[activations]}; {heads}"
    return SRC_ACT[activations]


def explanations(
    hw: HardwareSpec, activations: ActivationModel, block: bool = False
) -> dict[str, Explanation]:
    """The rows of ``LayoutMemory`` in display order; the activation row names the model it
    comes from (``SRC_ACT``) and, with ``block``, block recompute (``SRC_BLOCK_RECOMPUTE``);
    the card and host link their config's sources."""
    host = hw.host_bandwidth_bytes_per_s
    host_src = f"{SRC_OFFLOAD}; {host.source}" if host is not None else SRC_OFFLOAD
    return {
        "worst_pp_rank": Explanation(
            "most loaded pipeline rank", Unit.count,
            "argmax over PP ranks of states + activations", SRC_STATES,
        ),
        "dense_params_per_rank": Explanation(
            "dense parameters per rank", Unit.params,
            "stage TP-split params / tp + TP-replicated params",
            f"{SRC_STATES}; {SRC_TP_REPLICATED}",
        ),
        "expert_params_per_rank": Explanation(
            "expert parameters per rank", Unit.params, "stage routed params / (ep·etp)",
            SRC_STATES,
        ),
        "dense_states_bytes": Explanation(
            "dense model states (ZeRO over dp·cp)", Unit.bytes,
            "zero_states(dense, stage, dp·cp)", SRC_STATES, TOTAL,
        ),
        "expert_states_bytes": Explanation(
            "expert model states (ZeRO over dp·cp·tp/(ep·etp))", Unit.bytes,
            "zero_states(expert, stage, dp·cp·tp/(ep·etp))", SRC_STATES, TOTAL,
        ),
        "activation_bytes": Explanation(
            "activations in flight", Unit.bytes,
            "in_flight · layers/v · per-layer bytes (+ on the last stage: MTP modules with "
            "their inputs, and (1 + MTP) loss heads) − offloaded"
            + ("; the first N layers of each chunk at full recompute" if block else ""),
            f"{_activation_source(activations)}; {SRC_BLOCK_RECOMPUTE}"
            if block
            else _activation_source(activations),
            TOTAL,
        ),
        "recompute_working_bytes": Explanation(
            "recompute working set (backward)", Unit.bytes,
            "max over the rank's layers of the largest recompute site's tensors (full: the "
            "layer's saved tensors less its input; 0 without recompute)",
            SRC_RECOMPUTE_WORKING, TOTAL,
        ),
        "buffer_bytes": Explanation(
            "buffers (logits, MoE dispatch)", Unit.bytes,
            "last stage: (1 + MTP modules)·B·s·b·V/(cp·tp), B bytes per logit of the loss kernel "
            "(4 for one FP32 copy, 6 Megatron-Core's, 2 Transformer Engine's); MoE: 2·T·k·h·2 "
            "(one layer's alltoall)",
            SRC_BUFFERS, TOTAL,
        ),
        "states_bytes": Explanation(
            "model states", Unit.bytes, "dense + expert states", SRC_STATES
        ),
        "tp_replicated_params_per_rank": Explanation(
            "TP-replicated params per rank (norms, router)", Unit.params,
            "whole on every TP rank", SRC_TP_REPLICATED,
        ),
        "offloaded_activation_bytes": Explanation(
            "activations offloaded to host", Unit.bytes,
            "offloaded share · the decoder layers' activations (no MTP module or loss head)",
            SRC_OFFLOAD,
        ),
        "offload_transfer_bytes_per_step": Explanation(
            "offload traffic per step (out + back)", Unit.bytes,
            "2 · m · offloaded share · one micro-batch's activations", SRC_OFFLOAD,
        ),
        "offload_transfer_time_s": Explanation(
            "offload transfer time per step", Unit.seconds,
            "bytes / host bandwidth (overlapped with compute when shorter)", host_src,
        ),
        TOTAL: Explanation(
            "memory per rank", Unit.bytes, RANK_TOTAL_FORMULA, SRC_STATES
        ),
        "card_memory_bytes": Explanation(
            "card memory", Unit.bytes, "hardware config", hw.memory_bytes.source
        ),
        "memory_free_bytes": Explanation(
            "left on the card", Unit.bytes, "card - memory per rank", SRC_STATES
        ),
        "memory_over_card_times": Explanation(
            "memory per rank / card", Unit.times, "memory per rank / card", SRC_STATES
        ),
        "memory_fits": Explanation(
            "fits on the card", Unit.text, "memory per rank <= card", SRC_STATES
        ),
    }  # fmt: skip


def symbols(m: LayoutMemory, activations: ActivationModel) -> dict[str, dict[str, Scalar]]:
    """The numbers substituted into each formula (shown by --explain)."""
    return {
        "dense_params_per_rank": {"tp": m.tp},
        "expert_params_per_rank": {"ep": m.ep, "etp": m.etp},
        "dense_states_bytes": {"zero": m.zero, "n": m.grad_group},
        "expert_states_bytes": {"zero": m.zero, "n": m.expert_dp},
        "activation_bytes": {
            "in_flight": m.in_flight,
            "activations": activations.value,
            **({"N": m.block_recompute_layers} if m.block_recompute_layers else {}),
        },
        "offload_transfer_time_s": {"host_bandwidth_bytes_per_s": m.host_bandwidth_bytes_per_s},
        "memory_over_card_times": {
            "memory_bytes_per_rank": m.memory_bytes_per_rank,
            "card_memory_bytes": m.card_memory_bytes,
        },
    }


def layout_memory_terms(
    m: LayoutMemory, hw: HardwareSpec, activations: ActivationModel
) -> tuple[Term, ...]:
    """The memory rows of ``tpcalc layout``'s total, in display order (the offload traffic
    only when layers are offloaded)."""
    table = explanations(hw, activations, block=bool(m.block_recompute_layers))
    if not m.offload_transfer_bytes_per_step:
        table = {k: v for k, v in table.items() if k not in OFFLOAD_ROWS}
    return terms(m, table, symbols=symbols(m, activations))
