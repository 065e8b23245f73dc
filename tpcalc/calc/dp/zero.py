"""ZeRO stages 0-3: model states per rank, communication per rank, room left for activations.

Stage 1 partitions the optimizer states over the N data-parallel ranks, stage 2 also the
gradients, stage 3 also the parameters (Rajbhandari et al. 2020, "ZeRO", §5 and Figure 1; seed
000: 444.5 -> 152.8 -> 104.2 -> 55.6 GB on 8 cards). Stages 1 and 2 move what DP moves
(a reduce-scatter of gradients plus an all-gather of updated parameters); stage 3 gathers the
parameters again in the forward and the backward pass: 1.5x DP (ZeRO §7.2.2; seed 000 145.9 GB).
"""

from __future__ import annotations

from enum import IntEnum

from tpcalc.calc.dp.gradients import check_group
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    LatencySteps,
    Link,
    latency_inputs,
    latency_source,
    link_nodes,
    ring_steps,
    steps_time_s,
)
from tpcalc.calc.params.states import check_params, recipe_bytes, state_part_terms
from tpcalc.choices import StateRecipe
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Term, Unit, term

ZERO_MEM_SOURCE = "Rajbhandari et al. 2020 (ZeRO) §5.1-5.3, Figure 1; seed 000 summary"
ZERO_COMM_SOURCE = "Rajbhandari et al. 2020 (ZeRO) §7.2; seed 000 summary (ZeRO-3 = 1.5x DP)"


class ZeroStage(IntEnum):
    """What is partitioned over the data-parallel ranks (cumulative)."""

    none = 0  # plain data parallelism: every rank keeps everything
    optimizer = 1  # P_os
    gradients = 2  # P_os+g
    parameters = 3  # P_os+g+p


def zero_stage(value: int) -> ZeroStage:
    """The ZeroStage for 0..3, or an InputError naming the valid stages (ZeRO §5)."""
    try:
        return ZeroStage(value)
    except ValueError:
        raise InputError(f"ZeRO stage {value} does not exist; use 0, 1, 2 or 3") from None


def state_divisors(stage: ZeroStage, n: int) -> tuple[int, int, int]:
    """Divisors of (weights, gradients, optimizer) at ``stage`` over n ranks (ZeRO §5)."""
    check_group(n)
    return (
        n if stage >= ZeroStage.parameters else 1,
        n if stage >= ZeroStage.gradients else 1,
        n if stage >= ZeroStage.optimizer else 1,
    )


def zero_states_bytes(params: int, recipe: StateRecipe, stage: ZeroStage, n: int) -> float:
    """Model states per rank at ``stage`` over n data-parallel ranks, bytes.

    Ψ(w/d_w + g/d_g + o/d_o) with the divisors of ``state_divisors``. Source: ZeRO §5 (stage 1:
    (2+2+12/N)Ψ, stage 2: (2+14/N)Ψ, stage 3: 16Ψ/N with the 16-byte recipe); Megatron's
    distributed optimizer is stage 1 of the 18-byte recipe, 6 + 12/d bytes/param.
    """
    check_params(params)
    rb = recipe_bytes(recipe)
    dw, dg, do = state_divisors(stage, n)
    return params * (rb.weight_bytes / dw + rb.grad_bytes / dg + rb.optimizer_bytes / do)


COMM_LABELS = {
    "all_reduce_grads": ("all-reduce gradients", "2(n-1)/n × N × grad_bytes"),
    "reduce_scatter_grads": ("reduce-scatter gradients", "(n-1)/n × N × grad_bytes"),
    "all_gather_params_update": ("all-gather updated params", "(n-1)/n × N × weight_bytes"),
    "all_gather_params_fwd": ("all-gather params (forward)", "(n-1)/n × N × weight_bytes"),
    "all_gather_params_bwd": ("all-gather params (backward)", "(n-1)/n × N × weight_bytes"),
}


# The collective behind each part of ``zero_comm_parts`` (its ring steps set its latency).
COMM_COLLECTIVES = {
    "all_reduce_grads": Collective.all_reduce,
    "reduce_scatter_grads": Collective.reduce_scatter,
    "all_gather_params_update": Collective.all_gather,
    "all_gather_params_fwd": Collective.all_gather,
    "all_gather_params_bwd": Collective.all_gather,
}


def zero_latency_steps(parts: dict[str, float], n: int, nodes: int) -> LatencySteps:
    """Ring latency steps of the collectives a step runs (the non-zero ``parts``), one each,
    over n ranks on ``nodes`` nodes (NCCL ring model, ``links.ring_steps``)."""
    steps = LatencySteps()
    for key, value in parts.items():
        if value:
            steps += ring_steps(COMM_COLLECTIVES[key], n, nodes)
    return steps


def zero_comm_parts(params: int, recipe: StateRecipe, stage: ZeroStage, n: int) -> dict[str, float]:
    """Bytes each rank sends per step, by collective (ring convention), at ``stage``.

    Stage 0: all-reduce of gradients 2(n-1)/n·Ψ·g. Stages 1-2: reduce-scatter of gradients
    (n-1)/n·Ψ·g + all-gather of the updated parameters (n-1)/n·Ψ·w. Stage 3: reduce-scatter of
    gradients + all-gather of parameters in forward and again in backward. Source: ZeRO §7.2.
    """
    check_params(params)
    check_group(n)
    rb = recipe_bytes(recipe)
    grads, weights = params * rb.grad_bytes, params * rb.weight_bytes
    rs = ring_factor(Collective.reduce_scatter, n)
    ag = ring_factor(Collective.all_gather, n)
    parts = dict.fromkeys(COMM_LABELS, 0.0)  # every key in every row: stable JSON/CSV columns
    if stage is ZeroStage.none:
        parts["all_reduce_grads"] = ring_factor(Collective.all_reduce, n) * grads
    else:
        parts["reduce_scatter_grads"] = rs * grads
    if stage in (ZeroStage.optimizer, ZeroStage.gradients):
        parts["all_gather_params_update"] = ag * weights
    if stage is ZeroStage.parameters:
        parts["all_gather_params_fwd"] = ag * weights
        parts["all_gather_params_bwd"] = ag * weights
    return parts


def zero_comm_bytes(params: int, recipe: StateRecipe, stage: ZeroStage, n: int) -> float:
    """Total bytes each rank sends per step at ``stage`` (sum of ``zero_comm_parts``)."""
    return sum(zero_comm_parts(params, recipe, stage, n).values())


def zero_terms(
    *,
    params: int,
    recipe: StateRecipe,
    stage: ZeroStage,
    n: int,
    hw: HardwareSpec,
    link: Link,
    activation_bytes: float | None = None,
    with_latency: bool = False,
    nodes: int | None = None,
) -> tuple[Term, ...]:
    """Model states per rank (a breakdown), the room left on the card, comm per rank and time.

    ``params`` are the parameters this rank's data-parallel group replicates (the whole model
    without TP/PP; a model-parallel shard otherwise). ``activation_bytes``, when given, is checked
    against the room left (seed 000: 45.6 GB of selective-recompute activations vs 24.4 GB).
    """
    rb = recipe_bytes(recipe)
    dw, dg, do = state_divisors(stage, n)
    total = "model_states_bytes"
    states = zero_states_bytes(params, recipe, stage, n)
    mem = hw.memory_bytes.value
    src = ZERO_MEM_SOURCE + f"; recipe {recipe.value}: {rb.source}"
    out = [
        *state_part_terms(params, rb, (dw, dg, do), source=src, total=total),
        term(
            total,
            "model states per rank",
            states,
            Unit.bytes,
            formula="weights + grads + optimizer",
            source=src,
            N=params,
            n=n,
            stage=int(stage),
        ),
        term(
            "states_over_memory_ratio",
            "model states / card memory",
            states / mem,
            Unit.ratio,
            formula="model_states / memory",
            source="seed 000 summary (444.5 GB = 5.6 × 80 GB)",
            model_states=states,
            memory=mem,
        ),
        term(
            "free_for_activations_bytes",
            "left for activations",
            mem - states,
            Unit.bytes,
            formula="memory - model_states",
            source="seed 000 summary (80 - 55.6 = 24.4 GB)",
            memory=mem,
            model_states=states,
        ),
    ]
    if activation_bytes is not None:
        out.append(
            term(
                "activation_bytes",
                "activations (given)",
                activation_bytes,
                Unit.bytes,
                formula="the caller's activations per rank",
                source="e.g. Korthikanti et al. 2022 Table 2 (tpcalc.calc.activations.paper)",
            )
        )
        out.append(
            term(
                "activations_fit",
                "activations fit",
                activation_bytes <= mem - states,
                Unit.text,
                formula="activations <= memory - model_states",
                source="seed 000 summary (45.6 GB does not fit in 24.4 GB)",
                activations=activation_bytes,
                memory=mem,
                model_states=states,
            )
        )
    out.extend(
        comm_terms(params, recipe, stage, n, hw, link, with_latency=with_latency, nodes=nodes)
    )
    return tuple(out)


def comm_terms(
    params: int,
    recipe: StateRecipe,
    stage: ZeroStage,
    n: int,
    hw: HardwareSpec,
    link: Link,
    *,
    with_latency: bool = False,
    nodes: int | None = None,
) -> list[Term]:
    """Per-collective bytes per rank, their total, its time on ``link`` and the ratio to DP.

    ``nodes`` = nodes the group spans (default ``links.link_nodes``) for the ring latency."""
    rb = recipe_bytes(recipe)
    parts = zero_comm_parts(params, recipe, stage, n)
    total = "comm_send_bytes_per_rank"
    out = []
    for key, value in parts.items():
        label, formula = COMM_LABELS[key]
        out.append(
            term(
                f"{key}_send_bytes",
                label,
                value,
                Unit.bytes,
                formula=formula,
                source=ZERO_COMM_SOURCE,
                part_of=total,
                n=n,
                N=params,
                grad_bytes=rb.grad_bytes,
                weight_bytes=rb.weight_bytes,
            )
        )
    comm = sum(parts.values())
    dp = zero_comm_bytes(params, recipe, ZeroStage.none, n)
    nodes = link_nodes(link, n) if nodes is None else nodes
    steps = zero_latency_steps(parts, n, nodes)
    time_s = steps_time_s(comm, steps, hw, link, with_latency=with_latency)
    out += [
        term(total, "sent per rank per step", comm, Unit.bytes, formula="sum of the collectives",
             source=ZERO_COMM_SOURCE, stage=int(stage), n=n),
        term("comm_time_s", f"comm time on {link.value}", time_s, Unit.seconds,
             formula=f"bytes / bandwidth + {LATENCY_FORMULA}",
             source=f"{hw.name} {link.value}: alpha-beta model (seed 003 table 7-7); "
             + latency_source(hw, with_latency),
             bytes=comm, nodes=nodes, **latency_inputs(hw, steps, with_latency)),
        term("comm_vs_dp_ratio", "comm / plain DP", comm / dp if dp else 0.0, Unit.ratio,
             formula="comm / comm(stage 0)", source=ZERO_COMM_SOURCE, comm=comm, dp_comm=dp),
    ]  # fmt: skip
    return out
