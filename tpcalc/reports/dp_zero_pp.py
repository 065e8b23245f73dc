"""Data-parallel, ZeRO and pipeline reports: the Python twins of ``tpcalc dp|zero|pipeline``."""

from __future__ import annotations

import itertools

from tpcalc.calc.activations.paper import require_sp_seq
from tpcalc.calc.dp.gradients_explain import dp_terms
from tpcalc.calc.dp.zero import ZeroStage, zero_stage
from tpcalc.calc.dp.zero_explain import zero_terms
from tpcalc.calc.layout.groups import MemoryTechniques, ParallelLayout
from tpcalc.calc.layout.memory import layer_activation_bytes
from tpcalc.calc.params.counts import params_for, total_params
from tpcalc.calc.params.states import recipe_bytes
from tpcalc.calc.pipeline.breakdown_explain import pipeline_terms
from tpcalc.choices import (
    DDP_BUCKET_MIB,
    ActivationModel,
    LinkChoice,
    ParamConvention,
    Recompute,
    Schedule,
    StateRecipe,
    TimeModel,
)
from tpcalc.reports.inputs import (
    Inputs,
    int_list,
    node_size,
    pick_link,
    pick_nodes,
    positive,
    resolve,
)
from tpcalc.reports.tp import tp_warnings
from tpcalc.terms import Report, Row, Scalar
from tpcalc.units import Dtype, MiB


def _common(inputs: Inputs, gpus_per_node: int | None) -> tuple[int, dict[str, Scalar]]:
    g = node_size(gpus_per_node, inputs.hw.gpus_per_node.value)
    return g, {"model": inputs.spec.name, "hardware": inputs.hw.name, "gpus_per_node": g}


def dp_report(
    model: str,
    hardware: str,
    *,
    dp: str | int | list[int] | None = None,
    tp: int = 1,
    seq: int | None = None,
    micro_batch: int = 1,
    microbatches: int = 1,
    recipe: StateRecipe = StateRecipe.zero16,
    bucket_mib: int = DDP_BUCKET_MIB,
    params: ParamConvention = ParamConvention.matmul,
    gpus_per_node: int | None = None,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
    time_model: TimeModel = TimeModel.roofline,
) -> Report:
    """One row per DP size: gradient all-reduce per rank, link time, buckets, backward overlap.
    The backward it hides behind is timed by the per-operation roofline (``TimeModel.fixed``:
    4·N·tokens at the card's achieved FLOP/s, the seeds' convention).

    The DP group's ranks are ``tp`` apart (TP innermost), so it crosses nodes once dp·tp exceeds
    the GPUs per node. Tokens per rank per step = seq × micro_batch × microbatches.
    """
    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    g, base = _common(inputs, gpus_per_node)
    warnings = tp_warnings(inputs)
    grad_dtype = recipe_bytes(recipe).grad_dtype
    m = positive(microbatches, "--microbatches")
    tokens = inputs.seq * inputs.micro_batch * m
    backward_s = None
    if time_model is TimeModel.roofline:
        from tpcalc.calc.time.step import micro_batch_compute

        mb = micro_batch_compute(
            inputs.spec, inputs.hw, tp=tp, seq=inputs.seq, micro_batch=inputs.micro_batch,
            sp=tp > 1,
        )  # fmt: skip
        backward_s = mb.backward_s * m
    rows = []
    for n in int_list(dp, "--dp", [8]):
        lk = pick_link(link, n, tp, g)
        terms = dp_terms(
            params=total_params(inputs.spec) // tp,
            flop_params=params_for(inputs.spec, params) // tp,
            tokens=tokens, n=n, hw=inputs.hw, link=lk, grad_dtype=grad_dtype,
            bucket_bytes=positive(bucket_mib, "--bucket-mib") * MiB, with_latency=with_latency,
            nodes=pick_nodes(link, n, tp, g), backward_time_s=backward_s,
        )  # fmt: skip
        echo = {**base, "time_model": time_model.value, "dp": n, "tp": tp, "seq": inputs.seq,
                "micro_batch": inputs.micro_batch,
                "microbatches": m, "tokens": tokens, "state_recipe": recipe.value,
                "grad_dtype": grad_dtype.value, "link": lk.value, "bucket_mib": bucket_mib,
                "params_convention": params.value, "latency": with_latency}  # fmt: skip
        rows.append(Row(inputs=echo, terms=terms))
    return Report(
        title=f"Data-parallel gradient all-reduce per rank per step: {inputs.spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(f"gradients = all parameters{' / tp' if tp > 1 else ''}; backward = 4·N·tokens "
               f"with N '{params.value}'; buckets overlap the backward, the last cannot",),
    )  # fmt: skip


def zero_report(
    model: str,
    hardware: str,
    *,
    dp: str | int | list[int] | None = None,
    zero: int | None = None,
    tp: str | int | list[int] | None = 1,
    seq: int | None = None,
    micro_batch: int = 1,
    recipe: StateRecipe = StateRecipe.zero16,
    sp: bool = True,
    recompute: Recompute = Recompute.selective,
    gpus_per_node: int | None = None,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
    activations: ActivationModel = ActivationModel.exact,
    memory: MemoryTechniques | None = None,
) -> Report:
    """One row per (t, dp, stage): model states per rank, room for activations, comm per rank.

    ``zero=None`` lists all four stages. Parameters per rank are the model's / t (seed 003 §7.3:
    1,128.9 ÷ 8 ≈ 141 GB); activations are one micro-batch over all layers at that t, from the
    exact model or Korthikanti Table 2 (``activations``; seed 000's 45.6 GB is the paper one).
    """
    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    g, base = _common(inputs, gpus_per_node)
    warnings = tp_warnings(inputs)
    stages = list(ZeroStage) if zero is None else [zero_stage(zero)]
    spec, rows = inputs.spec, []
    for t, n, stage in itertools.product(inputs.tps, int_list(dp, "--dp", [8]), stages):
        one_rank = ParallelLayout(gpus_per_node=g, tp=t)
        per_layer = layer_activation_bytes(
            spec, one_rank, seq=inputs.seq, micro_batch=inputs.micro_batch, sp=sp,
            recompute=recompute, model=activations, techniques=memory,
        )  # fmt: skip
        lk = pick_link(link, n, t, g)
        terms = zero_terms(
            params=total_params(spec) // t, recipe=recipe, stage=stage, n=n, hw=inputs.hw,
            link=lk, activation_bytes=sum(per_layer), with_latency=with_latency,
            nodes=pick_nodes(link, n, t, g),
        )  # fmt: skip
        echo = {**base, "dp": n, "zero": int(stage), "tp": t, "state_recipe": recipe.value,
                "seq": inputs.seq, "micro_batch": inputs.micro_batch, "sp": sp,
                "recompute": recompute.value, "activations": activations.value,
                "link": lk.value, "latency": with_latency,
                **(memory or MemoryTechniques()).echo()}  # fmt: skip
        rows.append(Row(inputs=echo, terms=terms))
    return Report(
        title=f"ZeRO model states and communication per rank: {spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(f"recipe {recipe.value}: {recipe_bytes(recipe).source}",),
    )


def pipeline_report(
    model: str,
    hardware: str,
    *,
    pp: str | int | list[int] | None = None,
    microbatches: int = 32,
    vpp: int = 1,
    schedule: Schedule = Schedule.one_f_one_b,
    tp: int = 1,
    dp: int = 1,
    seq: int | None = None,
    micro_batch: int = 1,
    dtype: Dtype = Dtype.bf16,
    sp: bool = True,
    recompute: Recompute = Recompute.selective,
    activations: ActivationModel = ActivationModel.exact,
    allow_uneven: bool = True,
    scatter_gather: bool = True,
    gpus_per_node: int | None = None,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
    memory: MemoryTechniques | None = None,
) -> Report:
    """One row per pipeline size: layers and params per stage, p2p, bubble, in-flight memory.

    The pipeline group's ranks are tp·dp apart (PP outermost), so it usually crosses nodes.
    """
    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    g, base = _common(inputs, gpus_per_node)
    dp = positive(dp, "--dp")
    warnings = tp_warnings(inputs)
    if sp:
        require_sp_seq(inputs.seq, tp)
    spec, rows = inputs.spec, []
    per_layer = layer_activation_bytes(
        spec, ParallelLayout(tp=tp, gpus_per_node=g), seq=inputs.seq,
        micro_batch=inputs.micro_batch, sp=sp, recompute=recompute, model=activations,
        techniques=memory,
    )  # fmt: skip
    for p in int_list(pp, "--pp", [8]):
        lk = pick_link(link, p, tp * dp, g)
        terms = pipeline_terms(
            spec, inputs.hw, p=p, m=microbatches, v=vpp, schedule=schedule, seq=inputs.seq,
            micro_batch=inputs.micro_batch, tp=tp, dtype=dtype, scatter_gather=scatter_gather,
            link=lk, allow_uneven=allow_uneven, layer_act_bytes=per_layer,
            with_latency=with_latency, nodes=pick_nodes(link, p, tp * dp, g),
        )  # fmt: skip
        echo = {**base, "pp": p, "microbatches": microbatches, "vpp": vpp,
                "schedule": schedule.value, "tp": tp, "dp": dp, "seq": inputs.seq,
                "micro_batch": inputs.micro_batch, "dtype": dtype.value, "sp": sp,
                "recompute": recompute.value, "activations": activations.value,
                "uneven_allowed": allow_uneven,
                "scatter_gather": scatter_gather, "link": lk.value,
                "latency": with_latency, **(memory or MemoryTechniques()).echo()}  # fmt: skip
        rows.append(Row(inputs=echo, terms=terms))
    if schedule is not Schedule.gpipe and microbatches < max(int_list(pp, "--pp", [8])):
        warnings.append(
            f"microbatches={microbatches} < pp: the pipeline never fills; most of the step is idle"
        )
    return Report(
        title=f"Pipeline stages, bubble and stage-to-stage traffic: {spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(
            "F, B, W from 2·N_stage·tokens FLOP each at the achieved FLOP/s of the card; "
            f"activations per layer: {activations.value} model",
        ),
    )
