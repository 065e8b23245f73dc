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

from collections.abc import Sequence
from functools import cache

from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.paper import paper_layer
from tpcalc.calc.dp.zero import zero_states_bytes
from tpcalc.calc.ep.all_to_all import routed_copies
from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
from tpcalc.calc.params.counts import (
    declared_params,
    embedding_params,
    final_norm_params,
    last_stage_embedding_copy,
    layer_params,
    lm_head_params,
    mtp_params,
    routed_layer_params,
    tp_replicated_layer_params,
    tp_replicated_mtp_params,
)
from tpcalc.calc.pipeline.schedule import (
    chunk_layer_counts,
    in_flight_chunks,
    rank_chunks,
    rank_layers,
    rank_params,
)
from tpcalc.choices import (
    ActivationModel,
    AttentionKernel,
    LossKernel,
    Recompute,
    RouterDtype,
    Schedule,
    StateRecipe,
)  # fmt: skip
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

LOGITS_FP32_BYTES = Dtype.fp32.bytes  # the loss's FP32 logits (seed 003 §7.3.4)
DISPATCH_BUFFERS = 2  # alltoall dispatcher: permuted send buffer + received tokens
OFFLOAD_DIRECTIONS = 2  # device -> host after the forward, host -> device before the backward

SRC_STATES = (
    "ZeRO §5 over dp·cp (dense) and dp·cp·tp/(ep·etp) (experts); Megatron-Core MoE expert-DP"
)
SRC_BUFFERS = (
    "seed 003 §7.3.4 (fp32 logits, V/tp with the vocab-parallel cross-entropy), the bytes per "
    "logit of each loss kernel (choices.LossKernel: Megatron-Core "
    "tensor_parallel/cross_entropy.py, Transformer Engine pytorch/cross_entropy.py); Megatron-Core "
    "MoEAlltoAllTokenDispatcher permute/all-to-all buffers, MoEAllGatherTokenDispatcher "
    "gathered tokens of the tp·ep group"
)
SRC_OFFLOAD = (
    "Megatron-Core --cpu-offloading-num-layers: the activations of that many decoder layers per "
    "rank wait in host memory between forward and backward (the offload context wraps "
    "TransformerBlock's layers, transformer_block.py; the MTP modules and loss heads stay)"
)
# What a rank's memory adds up to (``RankMemory.total_bytes``), for every report that prints it.
RANK_TOTAL_FORMULA = "states + activations + recompute working set + buffers"
SRC_BLOCK_RECOMPUTE = (
    "Megatron-Core TransformerBlock._checkpointed_forward, recompute_method 'block': the first "
    "recompute_num_layers layers of each model chunk are checkpointed one by one, the rest keep "
    "their activations; NeMo docs, Activation Recomputation: with virtual pipelining the count "
    "is per virtual stage"
)
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


def rank_activation_bytes(
    schedule: Schedule, p: int, m: int, v: int, per_layer: list[float], *, last_extra: float = 0.0,
    counts: Sequence[int] | None = None,
) -> list[float]:  # fmt: skip
    """Activations each pipeline rank holds at its peak: in-flight chunks / v × the sum of its
    layers' per-layer bytes (``layer_activation_bytes``; in-flight chunks per schedule from
    ``pipeline.in_flight_chunks``: GPipe m, 1F1B p − rank, ...). ``last_extra`` is one
    micro-batch's activations of what the last chunk runs after the layers (MTP modules, loss
    heads). ``counts``:
    the layers of each chunk when set by hand (``pipeline.stage_split``), else even.

    DualPipe: rank r runs stage r for the micro-batches fed from rank 0 and stage p−1−r for
    those fed from rank p−1. Each direction is a 1F1B pipeline, so rank r holds p − r of the
    first and r + 1 of the second: p + 1 micro-batches in all, DeepSeek-V3 report §3.2.1
    Table 2 ("Activation: PP+1"), each on its own stage's layers.
    """
    chunks = counts if counts is not None else chunk_layer_counts(len(per_layer), p * v)
    bounds = [sum(chunks[:c]) for c in range(len(chunks) + 1)]
    chunk_bytes = [sum(per_layer[bounds[c] : bounds[c + 1]]) for c in range(len(chunks))]
    chunk_bytes[-1] += last_extra
    if schedule is Schedule.dualpipe:
        return [(p - r) * chunk_bytes[r] + (r + 1) * chunk_bytes[p - 1 - r] for r in range(p)]
    return [
        in_flight_chunks(schedule, p, m, v, r)
        / v
        * sum(chunk_bytes[c] for c in rank_chunks(p, v, r))
        for r in range(p)
    ]


@cache
def layer_param_counts(
    spec: ModelSpec,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Each decoder layer's routed-expert, TP-replicated and total parameters
    (``params.counts``), counted once per model: ``pp_rank_params`` sums them for every
    pipeline split a report or the planner asks for."""
    n = range(spec.num_hidden_layers)
    return (
        tuple(routed_layer_params(spec, i) for i in n),
        tuple(tp_replicated_layer_params(spec, i) for i in n),
        tuple(layer_params(spec, i) for i in n),
    )


def pp_rank_params(
    spec: ModelSpec, p: int, v: int, schedule: Schedule, *, mtp: bool = True,
    counts: Sequence[int] | None = None,
) -> list[tuple[int, int, int]]:  # fmt: skip
    """(TP-split dense, TP-replicated, routed-expert) parameters of each pipeline rank before
    any TP/EP split; MTP (last stage, DeepSeek-V3 §3.2) only when ``mtp``; the last stage's
    copy of the embedding where the ends are on different ranks
    (``params.counts.last_stage_embedding_copy``); the config's declared parts (a learned
    position table, a vision tower) on the first stage, whole on every TP rank (Megatron-Core
    LanguageModelEmbedding.position_embeddings is a plain torch Embedding; the declared parts
    are not sharded); ``counts``: the layers of each chunk when set by hand, else even."""
    routed, replicated, total = layer_param_counts(spec)
    n_mtp = spec.mtp_layers if mtp else 0
    copy = last_stage_embedding_copy(spec, p, schedule, mtp=mtp)
    experts = rank_params(
        routed, p, v, embedding_params=0, lm_head_params=0, other_params=n_mtp * routed[-1],
        schedule=schedule, counts=counts,
    )  # fmt: skip
    declared = declared_params(spec)
    whole = rank_params(
        replicated, p, v, embedding_params=declared, lm_head_params=0,
        other_params=final_norm_params(spec) + (tp_replicated_mtp_params(spec) if mtp else 0),
        schedule=schedule, counts=counts,
    )  # fmt: skip
    everything = rank_params(
        total, p, v, embedding_params=embedding_params(spec) + declared,
        lm_head_params=lm_head_params(spec),
        other_params=final_norm_params(spec) + (mtp_params(spec) if mtp else 0) + copy,
        schedule=schedule, counts=counts,
    )  # fmt: skip
    return [(a - e - r, r, e) for a, r, e in zip(everything, whole, experts, strict=True)]


class RankMemory(Struct, frozen=True):
    """Memory of one pipeline rank, bytes, and what it is made of."""

    pp_rank: int
    dense_params: int
    expert_params: int
    dense_states_bytes: float
    expert_states_bytes: float
    activation_bytes: float
    in_flight: int
    buffer_bytes: float = 0.0
    block_recompute_layers: int = 0  # layers per chunk at full recompute (--recompute-layers)
    # one layer's recompute rebuilt in backward (transient, ``rank_working_bytes``)
    recompute_working_bytes: float = 0.0
    replicated_params: int = 0
    offload_bytes: float = 0.0
    offload_transfer_bytes_per_step: float = 0.0  # to host in forward and back in backward

    @property
    def states_bytes(self) -> float:
        return self.dense_states_bytes + self.expert_states_bytes

    @property
    def peak_activation_bytes(self) -> float:
        """The activations kept in flight and, in backward, one layer's recompute rebuilt."""
        return self.activation_bytes + self.recompute_working_bytes

    @property
    def total_bytes(self) -> float:
        return self.states_bytes + self.peak_activation_bytes + self.buffer_bytes


def activation_options(
    layout: ParallelLayout, *, sp: bool, recompute: Recompute, techniques: MemoryTechniques
) -> ActivationOptions:
    """The exact model's options for one rank of ``layout`` with the run's techniques."""
    return ActivationOptions(
        t=layout.tp, cp=layout.cp, sequence_parallel=sp, recompute=recompute,
        recompute_modules=techniques.recompute_modules, fp8_cache=techniques.fp8_cache,
        fp8_linear_inputs=bool(techniques.fp8_linear_inputs),
        moe_probs_in_act=techniques.moe_probs_in_act,
        router_dtype=RouterDtype(techniques.router_dtype),
        capacity_factor=techniques.capacity_factor, dropout=techniques.dropout,
        attention=AttentionKernel(techniques.attention),
    )  # fmt: skip


def layer_activation_bytes(
    spec: ModelSpec, layout: ParallelLayout, *, seq: int, micro_batch: int, sp: bool,
    recompute: Recompute, model: ActivationModel = ActivationModel.exact,
    techniques: MemoryTechniques | None = None,
) -> list[float]:  # fmt: skip
    """Activations of each decoder layer on one rank for one micro-batch.

    ``paper``: Korthikanti et al. 2022 Table 2 on s/cp tokens, the same for every layer.
    ``exact``: the per-tensor model (``tpcalc.calc.activations.exact``) for each layer's kind
    (full / linear attention / MLA, dense / MoE), sharded by tp, SP and cp, after the run's
    memory techniques (``tpcalc.calc.activations.exact.techniques``).
    """
    if model is ActivationModel.paper:
        layer = paper_layer(
            spec, seq=seq // layout.cp, micro_batch=micro_batch, t=layout.tp, sp=sp,
            recompute=recompute,
        )  # fmt: skip
        return [float(layer.activation_bytes_per_layer)] * spec.num_hidden_layers
    from tpcalc.calc.activations.exact.summary import exact_activations

    options = activation_options(
        layout, sp=sp, recompute=recompute, techniques=techniques or MemoryTechniques()
    )
    return exact_activations(spec, seq, micro_batch, options).bytes_per_layer(spec)


def last_stage_extra_bytes(
    spec: ModelSpec, layout: ParallelLayout, *, seq: int, micro_batch: int, sp: bool,
    mtp_layers: int, model: ActivationModel = ActivationModel.exact,
    techniques: MemoryTechniques | None = None,
) -> float:  # fmt: skip
    """What the last chunk keeps for one micro-batch beyond its decoder layers' and the MTP
    transformer layers' activations: (1 + MTP modules) loss heads
    (``activations.exact.layer.head_tensors``: the final norm's input and statistics, the
    output layer's input) and each MTP module's input side (``mtp_input_tensors``: its two
    norms and eh_proj's input). ``paper``: 0 (Korthikanti et al. 2022 Table 2 counts the
    decoder layers only)."""
    if model is ActivationModel.paper:
        return 0.0
    from tpcalc.calc.activations.exact.layer import head_tensors, mtp_input_tensors

    options = activation_options(
        layout, sp=sp, recompute=Recompute.none, techniques=techniques or MemoryTechniques()
    )
    head = sum(r.bytes for r in head_tensors(spec, seq, micro_batch, options))
    mtp_input = sum(r.bytes for r in mtp_input_tensors(spec, seq, micro_batch, options))
    return float((1 + mtp_layers) * head + mtp_layers * mtp_input)


def layer_working_bytes(
    spec: ModelSpec, layout: ParallelLayout, *, seq: int, micro_batch: int, sp: bool,
    recompute: Recompute, model: ActivationModel = ActivationModel.exact,
    techniques: MemoryTechniques | None = None,
) -> list[float]:  # fmt: skip
    """What recomputing each decoder layer holds at once in backward beyond what it keeps
    (``activations.exact.layer.recompute_working_bytes``: the largest recompute site's
    rebuilt tensors), one micro-batch; a rank adds its largest (``rank_working_bytes``).
    ``paper``: 0 (Korthikanti et al. 2022 Table 2 counts what is kept)."""
    if model is ActivationModel.paper:
        return [0.0] * spec.num_hidden_layers
    from tpcalc.calc.activations.exact.layer import layer_kind, recompute_working_bytes

    options = activation_options(
        layout, sp=sp, recompute=recompute, techniques=techniques or MemoryTechniques()
    )
    by_kind: dict[str, float] = {}
    out = []
    for i in range(spec.num_hidden_layers):
        kind = layer_kind(spec, i)
        if kind not in by_kind:
            by_kind[kind] = float(recompute_working_bytes(spec, i, seq, micro_batch, options))
        out.append(by_kind[kind])
    return out


def block_recompute_layers(
    per_layer: list[float], full: list[float], block: int, counts: Sequence[int]
) -> list[float]:
    """Per decoder layer under block recompute (``SRC_BLOCK_RECOMPUTE``): ``full`` (the layer
    at full recompute) for the first ``block`` layers of each model chunk of ``counts``
    layers, ``per_layer`` (the run's recompute) for the rest."""
    out, start = list(per_layer), 0
    for n in counts:
        out[start : start + min(block, n)] = full[start : start + min(block, n)]
        start += n
    return out


def rank_working_bytes(
    schedule: Schedule, p: int, v: int, per_layer: list[float], *, mtp_layers: int = 0,
    counts: Sequence[int] | None = None, mtp_working: float | None = None,
) -> list[float]:  # fmt: skip
    """Each pipeline rank's recompute working set (``SRC_RECOMPUTE_WORKING``): the largest of
    ``layer_working_bytes`` over the layers it runs, one layer rebuilt at a time (the MTP
    module's layer, on the last chunk, is the last layer's kind, ``mtp_working`` when it
    recomputes otherwise than that layer); 0 on a rank with none.
    DualPipe ranks run chunks r and p·v−1−r (``fit.MemoryScreen._ranks``)."""
    chunks = counts if counts is not None else chunk_layer_counts(len(per_layer), p * v)
    bounds = [sum(chunks[:c]) for c in range(len(chunks) + 1)]
    per_chunk = [per_layer[bounds[c] : bounds[c + 1]] for c in range(len(chunks))]
    if mtp_layers:
        per_chunk[-1] = [*per_chunk[-1], per_layer[-1] if mtp_working is None else mtp_working]
    out = []
    for r in range(p):
        held = {r, len(chunks) - 1 - r} if schedule is Schedule.dualpipe else rank_chunks(p, v, r)
        out.append(max((w for c in held for w in per_chunk[c]), default=0.0))
    return out


def logit_bytes(kernel: LossKernel, act_bytes: int) -> int:
    """Bytes per logit the last stage's loss holds at its peak (``choices.LossKernel``): one
    FP32 copy; Megatron-Core's, the 16-bit logits beside their FP32 copy; Transformer
    Engine's, the 16-bit logits alone, their gradient written back into them."""
    return {
        LossKernel.fp32_copy: LOGITS_FP32_BYTES,
        LossKernel.megatron: act_bytes + LOGITS_FP32_BYTES,
        LossKernel.te: act_bytes,
    }[kernel]


def buffer_bytes(
    spec: ModelSpec, layout: ParallelLayout, *, seq: int, micro_batch: int, last: bool,
    techniques: MemoryTechniques, act_bytes: int,
) -> float:  # fmt: skip
    """Transient buffers outside the saved activations: on the last stage the logits of one
    micro-batch, V/tp per rank, at the bytes per logit its loss kernel holds (``logit_bytes``;
    seed 003 §7.3.4: one FP32 copy), once for the model's loss and once for each MTP module's
    (``techniques.mtp``: Megatron-Core's GPTModel computes every MTP layer's logits and loss in
    the forward, beside the main ones, and each cross-entropy keeps its logits for the
    backward), and on MoE ranks one layer's dispatch buffers
    (``SRC_BUFFERS``): the alltoall dispatcher sends and receives T·k copies (2·T·k·h, or the
    padded capacity cf·T·k), the allgather dispatcher holds the tokens of its tp·ep group
    (T·tp·ep·h). T = s·b/(cp·tp) tokens routed from this rank."""
    tokens = seq * micro_batch // layout.cp
    out = 0.0
    if last:
        per_logit = logit_bytes(LossKernel(techniques.loss_kernel), act_bytes)
        losses = 1 + (spec.mtp_layers if techniques.mtp else 0)
        out += losses * per_logit * tokens * spec.vocab_size / layout.tp
    if spec.is_moe:
        own = tokens // layout.tp
        if techniques.moe_dispatcher == "allgather":
            out += own * layout.tp * layout.ep * spec.hidden_size * act_bytes
        else:
            copies = routed_copies(spec.num_experts_per_tok or 0, techniques.capacity_factor)
            out += DISPATCH_BUFFERS * own * copies * spec.hidden_size * act_bytes
    return out


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
    techniques: MemoryTechniques | None = None,
    counts: Sequence[int] | None = None,
    block_layers: int | None = None,
) -> list[RankMemory]:
    """Memory of every pipeline rank (sources: module docstring); ``counts``: the decoder
    layers of each virtual stage when set by hand (``pipeline.stage_split``), else even;
    ``block_layers``: block recompute of that many layers per chunk (``--recompute-layers``,
    ``block_recompute_layers``; the MTP module keeps the run's recompute)."""
    tech = techniques or MemoryTechniques()

    def per_layer_of(mode: Recompute, t: MemoryTechniques) -> tuple[list[float], list[float]]:
        """Each layer's activations and recompute working set under ``mode`` and ``t``."""
        return (
            layer_activation_bytes(
                spec, layout, seq=seq, micro_batch=micro_batch, sp=sp, recompute=mode,
                model=activations, techniques=t,
            ),
            layer_working_bytes(
                spec, layout, seq=seq, micro_batch=micro_batch, sp=sp, recompute=mode,
                model=activations, techniques=t,
            ),
        )  # fmt: skip

    per_layer, per_working = per_layer_of(recompute, tech)
    mtp_layers = spec.mtp_layers if tech.mtp else 0
    mtp_bytes, mtp_working = per_layer[-1], per_working[-1]
    block = (block_layers or 0) if recompute is not Recompute.full else 0
    if block:
        # the block's layers recompute all of each layer, its modules aside
        full, full_working = per_layer_of(Recompute.full, replace(tech, recompute_modules=()))
        split = counts or chunk_layer_counts(spec.num_hidden_layers, layout.pp * vpp)
        per_layer = block_recompute_layers(per_layer, full, block, split)
        per_working = block_recompute_layers(per_working, full_working, block, split)
    extra = last_stage_extra_bytes(
        spec, layout, seq=seq, micro_batch=micro_batch, sp=sp, mtp_layers=mtp_layers,
        model=activations, techniques=tech,
    )  # fmt: skip
    act = rank_activation_bytes(
        schedule, layout.pp, microbatches, vpp, per_layer,
        last_extra=mtp_layers * mtp_bytes + extra, counts=counts,
    )  # fmt: skip
    # what offloading draws on: the decoder layers alone (``offloaded``)
    layer_act = (
        rank_activation_bytes(schedule, layout.pp, microbatches, vpp, per_layer, counts=counts)
        if tech.offload_layers else act
    )  # fmt: skip
    working = rank_working_bytes(
        schedule, layout.pp, vpp, per_working, mtp_layers=mtp_layers, counts=counts,
        mtp_working=mtp_working,
    )  # fmt: skip
    out = []
    ranks = pp_rank_params(spec, layout.pp, vpp, schedule, mtp=tech.mtp, counts=counts)
    layers = rank_layers(spec.num_hidden_layers, layout.pp, vpp, counts)
    for r, (dense, whole, expert) in enumerate(ranks):
        d = -(-dense // layout.tp) + whole
        e = -(-expert // (layout.etp * layout.ep))
        chunks = in_flight_chunks(schedule, layout.pp, microbatches, vpp, r)
        holds_last = _holds_last_stage(schedule, layout.pp, vpp, r)
        rank_act = act[r]
        offload, transfer = offloaded(
            tech.offload_layers, layers[r], layer_act[r], per_layer, microbatches
        )
        out.append(
            RankMemory(
                pp_rank=r,
                dense_params=d,
                expert_params=e,
                dense_states_bytes=zero_states_bytes(d, recipe, layout.zero, layout.grad_group),
                expert_states_bytes=zero_states_bytes(e, recipe, layout.zero, layout.expert_dp),
                activation_bytes=rank_act - offload,
                recompute_working_bytes=working[r],
                in_flight=chunks,
                block_recompute_layers=block,
                buffer_bytes=buffer_bytes(
                    spec,
                    layout,
                    seq=seq,
                    micro_batch=micro_batch,
                    last=holds_last,
                    techniques=tech,
                    act_bytes=Dtype.bf16.bytes,
                ),  # fmt: skip
                replicated_params=whole,
                offload_bytes=offload,
                offload_transfer_bytes_per_step=transfer,
            )
        )
    return out


def offloaded(
    offload_layers: int, held: Sequence[int], layer_act: float, per_layer: Sequence[float],
    microbatches: int,
) -> tuple[float, float]:  # fmt: skip
    """A rank's activations offloaded to the host and the host traffic per step (``SRC_OFFLOAD``):
    the share min(N, L)/L of its L decoder layers ``held`` times their in-flight activations
    ``layer_act``, out after each forward and back before each backward, m times a step.
    Offloading covers the decoder layers alone: Megatron-Core enters its CPU-offload context
    around each TransformerBlock layer (transformer_block.py, cpu_offloading_num_layers), and
    the MTP modules and the loss heads run outside that block (Megatron Bridge docs, "CPU
    Offloading": "offloading at the transformer layer level")."""
    if not offload_layers or not held:
        return 0.0, 0.0
    share = min(offload_layers, len(held)) / len(held)
    one_mb = sum(per_layer[i] for i in held)
    return layer_act * share, OFFLOAD_DIRECTIONS * microbatches * share * one_mb


def run_memory(
    spec: ModelSpec, layout: ParallelLayout, run: LayoutRun, *,
    counts: Sequence[int] | None = None, block_layers: int | None = None,
) -> list[RankMemory]:  # fmt: skip
    """``rank_memory`` of ``run`` on ``layout``: its sequence, batch split, schedule, state
    recipe, SP, recompute, activation model and memory techniques."""
    return rank_memory(
        spec, layout, seq=run.seq, micro_batch=run.micro_batch, microbatches=run.microbatches,
        vpp=run.vpp, schedule=run.schedule, recipe=run.recipe, sp=run.sp,
        recompute=run.recompute, activations=run.activations, techniques=run.memory,
        counts=counts, block_layers=block_layers,
    )  # fmt: skip


def _holds_last_stage(schedule: Schedule, p: int, v: int, r: int) -> bool:
    """Whether rank r runs the last chunk (DualPipe: ranks 0 and p-1 both do)."""
    if schedule is Schedule.dualpipe:
        return r in (0, p - 1)
    return (p * v - 1) in rank_chunks(p, v, r)


class LayoutMemory(Struct, frozen=True):
    """The most loaded rank's memory as parts of a total, against the card.

    Field names are the keys ``tpcalc layout`` prints; labels, formulas and sources are in
    ``tpcalc.calc.layout.memory_explain``."""

    # inputs the formulas substitute
    tp: int
    ep: int
    etp: int
    zero: int
    grad_group: int  # dp·cp: the ranks ZeRO shards dense states over
    expert_dp: int  # dp·cp·tp/(ep·etp): ... and expert states over
    in_flight: int
    host_bandwidth_bytes_per_s: float  # 0 when the card names none
    block_recompute_layers: int  # 0 without --recompute-layers
    # the result
    worst_pp_rank: int
    dense_params_per_rank: int
    expert_params_per_rank: int
    dense_states_bytes: float
    expert_states_bytes: float
    activation_bytes: float
    recompute_working_bytes: float
    buffer_bytes: float
    states_bytes: float
    tp_replicated_params_per_rank: int
    offloaded_activation_bytes: float
    offload_transfer_bytes_per_step: float
    offload_transfer_time_s: float
    memory_bytes_per_rank: float
    card_memory_bytes: float
    memory_free_bytes: float
    memory_over_card_times: float
    memory_fits: bool


def layout_memory(worst: RankMemory, layout: ParallelLayout, hw: HardwareSpec) -> LayoutMemory:
    """``worst`` (the most loaded rank of ``rank_memory``) against the card: total = states +
    activations + recompute working set + buffers, free = card − total; offloaded activations
    cross the host link twice per step (``SRC_OFFLOAD``)."""
    transfer = worst.offload_transfer_bytes_per_step
    host = hw.host_bandwidth_bytes_per_s
    if transfer and host is None:
        raise InputError(
            f"--offload-layers: {hw.name} has no host_bandwidth_bytes_per_s in its config; add "
            "one (PCIe or NVLink-C2C, one direction) or use --offload-layers 0"
        )
    host_bw = host.value if host is not None else 0.0
    card = hw.memory_bytes.value
    total = worst.total_bytes
    return LayoutMemory(
        tp=layout.tp,
        ep=layout.ep,
        etp=layout.etp,
        zero=int(layout.zero),
        grad_group=layout.grad_group,
        expert_dp=layout.expert_dp,
        in_flight=worst.in_flight,
        host_bandwidth_bytes_per_s=host_bw,
        block_recompute_layers=worst.block_recompute_layers,
        worst_pp_rank=worst.pp_rank,
        dense_params_per_rank=worst.dense_params,
        expert_params_per_rank=worst.expert_params,
        dense_states_bytes=worst.dense_states_bytes,
        expert_states_bytes=worst.expert_states_bytes,
        activation_bytes=worst.activation_bytes,
        recompute_working_bytes=worst.recompute_working_bytes,
        buffer_bytes=worst.buffer_bytes,
        states_bytes=worst.states_bytes,
        tp_replicated_params_per_rank=worst.replicated_params,
        offloaded_activation_bytes=worst.offload_bytes,
        offload_transfer_bytes_per_step=transfer,
        offload_transfer_time_s=transfer / host_bw if transfer else 0.0,
        memory_bytes_per_rank=total,
        card_memory_bytes=card,
        memory_free_bytes=card - total,
        memory_over_card_times=total / card,
        memory_fits=total <= card,
    )
