"""Per-rank memory of a combined layout: model states with ZeRO plus in-flight activations.

Parameters per pipeline rank come from ``pipeline.rank_params`` (embedding on the first stage, LM
head, final norm and MTP on the last; DualPipe ranks hold two stages). Dense parameters are split
by tp and their states by ZeRO over the dp·cp ranks that replicate them; routed experts are
split by ep·tp (Megatron-Core's default expert TP = TP) and their states by ZeRO over the
dp·cp/ep expert-data-parallel ranks. Activations per layer come from the model the run names
(``ActivationModel``): ``exact`` (default), the tensors autograd saves for each layer's kind
(``tpcalc.calc.activations.exact``), or ``paper``, Korthikanti et al. 2022 Table 2; both on s/cp
tokens per rank, times the micro-batches in flight on that rank (``pipeline``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpcalc.calc.activations.paper import ActivationModel, Recompute, paper_layer_terms
from tpcalc.calc.dp.zero import zero_states_bytes
from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.params.counts import (
    embedding_params,
    final_norm_params,
    layer_params,
    lm_head_params,
    mtp_params,
    routed_layer_params,
)
from tpcalc.calc.params.states import StateRecipe
from tpcalc.calc.pipeline.schedule import (
    Schedule,
    chunk_layer_counts,
    in_flight_chunks,
    rank_chunks,
    rank_params,
)
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Term, Unit, term

SRC_STATES = "ZeRO §5 over dp·cp (dense) and dp·cp/ep (experts); Megatron-Core MoE expert-DP"
SRC_INFLIGHT = (
    "in-flight micro-batches per schedule (tpcalc.calc.pipeline.schedule.in_flight_chunks)"
)
SRC_ACT = {
    ActivationModel.paper: f"Korthikanti et al. 2022 Table 2 with s/cp tokens; {SRC_INFLIGHT}",
    ActivationModel.exact: (
        "exact model: tensors autograd saves per layer kind (tpcalc.calc.activations.exact, "
        f"validated against PyTorch) with s/cp tokens; {SRC_INFLIGHT}"
    ),
}


def rank_layers(num_layers: int, p: int, v: int = 1) -> list[list[int]]:
    """Decoder layer indices held by each of the p ranks (its v chunks, in order)."""
    counts = chunk_layer_counts(num_layers, p * v)
    starts = [sum(counts[:c]) for c in range(len(counts))]
    return [
        [i for c in rank_chunks(p, v, r) for i in range(starts[c], starts[c] + counts[c])]
        for r in range(p)
    ]


def rank_activation_bytes(
    schedule: Schedule, p: int, m: int, v: int, per_layer: list[float]
) -> list[float]:
    """Activations each pipeline rank holds at its peak: in-flight chunks / v × the sum of its
    layers' per-layer bytes (``layer_activation_bytes``; in-flight chunks per schedule from
    ``pipeline.in_flight_chunks``: GPipe m, 1F1B p − rank, ...)."""
    layers = rank_layers(len(per_layer), p, v)
    return [
        in_flight_chunks(schedule, p, m, v, r) / v * sum(per_layer[i] for i in layers[r])
        for r in range(p)
    ]


def pp_rank_params(spec: ModelSpec, p: int, v: int, schedule: Schedule) -> list[tuple[int, int]]:
    """(dense, routed-expert) parameters of each pipeline rank before any TP/EP split."""
    n = spec.num_hidden_layers
    routed = [routed_layer_params(spec, i) for i in range(n)]
    total = [layer_params(spec, i) for i in range(n)]
    mtp_routed = spec.mtp_layers * routed[-1]
    experts = rank_params(
        routed, p, v, embedding_params=0, lm_head_params=0, other_params=mtp_routed,
        schedule=schedule,
    )  # fmt: skip
    everything = rank_params(
        total, p, v, embedding_params=embedding_params(spec), lm_head_params=lm_head_params(spec),
        other_params=final_norm_params(spec) + mtp_params(spec), schedule=schedule,
    )  # fmt: skip
    return [(a - e, e) for a, e in zip(everything, experts, strict=True)]


@dataclass(frozen=True)
class RankMemory:
    """Memory of one pipeline rank, bytes, and what it is made of."""

    pp_rank: int
    dense_params: int
    expert_params: int
    dense_states_bytes: float
    expert_states_bytes: float
    activation_bytes: float
    in_flight: int

    @property
    def total_bytes(self) -> float:
        return self.dense_states_bytes + self.expert_states_bytes + self.activation_bytes


def layer_activation_bytes(
    spec: ModelSpec, layout: ParallelLayout, *, seq: int, micro_batch: int, sp: bool,
    recompute: Recompute, model: ActivationModel = ActivationModel.exact,
) -> list[float]:  # fmt: skip
    """Activations of each decoder layer on one rank for one micro-batch.

    ``paper``: Korthikanti et al. 2022 Table 2 on s/cp tokens, the same for every layer.
    ``exact``: the per-tensor model (``tpcalc.calc.activations.exact``) for each layer's kind
    (full / linear attention / MLA, dense / MoE), sharded by tp, SP and cp.
    """
    if model is ActivationModel.paper:
        terms = paper_layer_terms(
            spec, seq=seq // layout.cp, micro_batch=micro_batch, t=layout.tp, sp=sp,
            recompute=recompute,
        )  # fmt: skip
        return [float(terms[-1].value)] * spec.num_hidden_layers  # type: ignore[arg-type]
    from tpcalc.calc.activations.exact.layer import layer_kind
    from tpcalc.calc.activations.exact.options import ActivationOptions
    from tpcalc.calc.activations.exact.summary import exact_activation_terms

    options = ActivationOptions(t=layout.tp, cp=layout.cp, sequence_parallel=sp,
                                recompute=recompute)  # fmt: skip
    values = {
        t.key: float(t.value) for t in exact_activation_terms(spec, seq, micro_batch, options)
    }
    kinds = [layer_kind(spec, i) for i in range(spec.num_hidden_layers)]
    return [values[f"exact_{k.replace('+', '_')}_bytes_per_layer"] for k in kinds]


def rank_memory(
    spec: ModelSpec,
    layout: ParallelLayout,
    *,
    seq: int,
    micro_batch: int,
    microbatches: int,
    vpp: int,
    schedule: Schedule,
    recipe: StateRecipe,
    sp: bool,
    recompute: Recompute,
    activations: ActivationModel = ActivationModel.exact,
) -> list[RankMemory]:
    """Memory of every pipeline rank (sources: module docstring)."""
    per_layer = layer_activation_bytes(
        spec,
        layout,
        seq=seq,
        micro_batch=micro_batch,
        sp=sp,
        recompute=recompute,
        model=activations,
    )
    act = rank_activation_bytes(schedule, layout.pp, microbatches, vpp, per_layer)
    out = []
    for r, (dense, expert) in enumerate(pp_rank_params(spec, layout.pp, vpp, schedule)):
        d = -(-dense // layout.tp)
        e = -(-expert // (layout.tp * layout.ep))
        chunks = in_flight_chunks(schedule, layout.pp, microbatches, vpp, r)
        out.append(
            RankMemory(
                pp_rank=r,
                dense_params=d,
                expert_params=e,
                dense_states_bytes=zero_states_bytes(d, recipe, layout.zero, layout.grad_group),
                expert_states_bytes=zero_states_bytes(e, recipe, layout.zero, layout.expert_dp),
                activation_bytes=act[r],
                in_flight=chunks,
            )
        )
    return out


def memory_terms(
    worst: RankMemory, layout: ParallelLayout, hw: HardwareSpec, activations: ActivationModel
) -> list[Term]:
    """The most loaded rank's memory as parts of a total, against the card; the activation
    term names the model it comes from (``SRC_ACT``)."""
    card = hw.memory_bytes.value
    total = "memory_bytes_per_rank"
    return [
        term("worst_pp_rank", "most loaded pipeline rank", worst.pp_rank, Unit.count,
             formula="argmax over PP ranks of states + activations", source=SRC_STATES),
        term("dense_params_per_rank", "dense parameters per rank", worst.dense_params,
             Unit.params, formula="stage dense params / tp", source=SRC_STATES, tp=layout.tp),
        term("expert_params_per_rank", "expert parameters per rank", worst.expert_params,
             Unit.params, formula="stage routed params / (ep·tp)", source=SRC_STATES,
             ep=layout.ep, tp=layout.tp),
        term("dense_states_bytes", "dense model states (ZeRO over dp·cp)",
             worst.dense_states_bytes, Unit.bytes, formula="zero_states(dense, stage, dp·cp)",
             source=SRC_STATES, part_of=total, zero=int(layout.zero), n=layout.grad_group),
        term("expert_states_bytes", "expert model states (ZeRO over dp·cp/ep)",
             worst.expert_states_bytes, Unit.bytes,
             formula="zero_states(expert, stage, dp·cp/ep)", source=SRC_STATES, part_of=total,
             zero=int(layout.zero), n=layout.expert_dp),
        term("activation_bytes", "activations in flight", worst.activation_bytes, Unit.bytes,
             formula="in_flight · layers/v · per-layer bytes", source=SRC_ACT[activations],
             part_of=total, in_flight=worst.in_flight, activations=activations.value),
        term(total, "memory per rank", worst.total_bytes, Unit.bytes,
             formula="states + activations", source=SRC_STATES),
        term("card_memory_bytes", "card memory", card, Unit.bytes, formula="hardware config",
             source=hw.memory_bytes.source),
        term("memory_free_bytes", "left on the card", card - worst.total_bytes, Unit.bytes,
             formula="card - memory per rank", source=SRC_STATES),
        term("memory_over_card_times", "memory per rank / card", worst.total_bytes / card,
             Unit.times, formula="memory per rank / card", source=SRC_STATES,
             memory_bytes_per_rank=worst.total_bytes, card_memory_bytes=card),
        term("memory_fits", "fits on the card", worst.total_bytes <= card, Unit.text,
             formula="memory per rank <= card", source=SRC_STATES),
    ]  # fmt: skip
