"""ZeRO stages 0-3: model states per rank, communication per rank, room left for activations.

Stage 1 partitions the optimizer states over the N data-parallel ranks, stage 2 also the
gradients, stage 3 also the parameters (Rajbhandari et al. 2020, "ZeRO", §5 and Figure 1; seed
000: 444.5 -> 152.8 -> 104.2 -> 55.6 GB on 8 cards). Stages 1 and 2 move what DP moves
(a reduce-scatter of gradients plus an all-gather of updated parameters); stage 3 gathers the
parameters again in the forward and the backward pass: 1.5x DP (ZeRO §7.2.2; seed 000 145.9 GB).

With gradient accumulation over m micro-batches, stages 0 and 1 reduce once per step (the
gradients accumulate in a full local buffer), while stage 2 keeps only its shard of the gradients
and so reduce-scatters after every micro-batch's backward, and stage 3 also gathers the
parameters before every micro-batch's forward and backward (ZeRO §5.2-5.3; DeepSpeed's stage 2/3
reduce at each backward). The step model times the same repetitions (``calc.time.step``).
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.dp.gradients import check_group
from tpcalc.calc.dp.stage import ZeroStage as ZeroStage  # re-exported: its home until now
from tpcalc.calc.dp.stage import zero_stage as zero_stage
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import LatencySteps, Link, link_nodes, ring_steps, steps_time_s
from tpcalc.calc.params.states import StateParts, check_params, recipe_bytes, state_parts
from tpcalc.choices import StateRecipe
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec

ZERO_MEM_SOURCE = "Rajbhandari et al. 2020 (ZeRO) §5.1-5.3, Figure 1; seed 000 summary"
ZERO_COMM_SOURCE = (
    "Rajbhandari et al. 2020 (ZeRO) §7.2, §5.2-5.3 (stages 2-3 per micro-batch); seed 000 summary"
    " (ZeRO-3 = 1.5x DP at m = 1)"
)


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


# The collective behind each part of ``ZeroCommParts`` (its ring steps set its latency).
COMM_COLLECTIVES = {
    "all_reduce_grads": Collective.all_reduce,
    "reduce_scatter_grads": Collective.reduce_scatter,
    "all_gather_params_update": Collective.all_gather,
    "all_gather_params_fwd": Collective.all_gather,
    "all_gather_params_bwd": Collective.all_gather,
}


class ZeroCommParts(Struct, frozen=True):
    """Bytes each rank sends per step by collective (ring convention); 0 for the collectives
    the stage does not run."""

    all_reduce_grads_bytes: float = 0.0
    reduce_scatter_grads_bytes: float = 0.0
    all_gather_params_update_bytes: float = 0.0
    all_gather_params_fwd_bytes: float = 0.0
    all_gather_params_bwd_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        """Every collective's bytes, summed."""
        return (
            self.all_reduce_grads_bytes
            + self.reduce_scatter_grads_bytes
            + self.all_gather_params_update_bytes
            + self.all_gather_params_fwd_bytes
            + self.all_gather_params_bwd_bytes
        )

    def by_collective(self) -> tuple[tuple[str, float], ...]:
        """(part name of ``COMM_COLLECTIVES``, bytes) for every collective, in that order."""
        return (
            ("all_reduce_grads", self.all_reduce_grads_bytes),
            ("reduce_scatter_grads", self.reduce_scatter_grads_bytes),
            ("all_gather_params_update", self.all_gather_params_update_bytes),
            ("all_gather_params_fwd", self.all_gather_params_fwd_bytes),
            ("all_gather_params_bwd", self.all_gather_params_bwd_bytes),
        )


def zero_calls(stage: ZeroStage, microbatches: int = 1) -> dict[str, int]:
    """How many times one step runs each collective of ``COMM_COLLECTIVES`` at ``stage`` with
    ``microbatches`` (m) micro-batches (module docstring): the gradient reduction m times from
    stage 2 on, the forward and backward parameter gathers m times at stage 3, the rest once."""
    if microbatches < 1:
        raise InputError(f"microbatches must be a positive integer, got {microbatches}")
    per_microbatch = {"reduce_scatter_grads"} if stage >= ZeroStage.gradients else set()
    if stage >= ZeroStage.parameters:
        per_microbatch |= {"all_gather_params_fwd", "all_gather_params_bwd"}
    return {key: microbatches if key in per_microbatch else 1 for key in COMM_COLLECTIVES}


def zero_latency_steps(
    parts: ZeroCommParts, n: int, nodes: int, calls: dict[str, int] | None = None
) -> LatencySteps:
    """Ring latency steps of the collectives a step runs (the non-zero ``parts``), each as many
    times as ``calls`` says (``zero_calls``; once each by default), over n ranks on ``nodes``
    nodes (NCCL ring model, ``links.ring_steps``)."""
    steps = LatencySteps()
    for key, value in parts.by_collective():
        if value:
            count = 1 if calls is None else calls[key]
            steps += ring_steps(COMM_COLLECTIVES[key], n, nodes, count)
    return steps


def zero_comm_parts(
    params: int, recipe: StateRecipe, stage: ZeroStage, n: int, microbatches: int = 1
) -> ZeroCommParts:
    """Bytes each rank sends per step, by collective (ring convention), at ``stage`` with
    ``microbatches`` (m) micro-batches per step.

    Stage 0: all-reduce of gradients 2(n-1)/n·Ψ·g. Stage 1: reduce-scatter of gradients
    (n-1)/n·Ψ·g + all-gather of the updated parameters (n-1)/n·Ψ·w. Stage 2: the same, the
    reduce-scatter m times. Stage 3: reduce-scatter of gradients + all-gather of parameters in
    forward and again in backward, each m times. Source: ZeRO §7.2 (m = 1); ``zero_calls``.
    """
    check_params(params)
    check_group(n)
    calls = zero_calls(stage, microbatches)
    rb = recipe_bytes(recipe)
    # weights: what the parameter all-gather moves (FP8 data only, not its transpose)
    grads, weights = params * rb.grad_bytes, params * rb.weight_gather_bytes
    rs = ring_factor(Collective.reduce_scatter, n)
    ag = ring_factor(Collective.all_gather, n)
    if stage is ZeroStage.none:
        return ZeroCommParts(all_reduce_grads_bytes=ring_factor(Collective.all_reduce, n) * grads)
    if stage is ZeroStage.parameters:
        return ZeroCommParts(
            reduce_scatter_grads_bytes=calls["reduce_scatter_grads"] * rs * grads,
            all_gather_params_fwd_bytes=calls["all_gather_params_fwd"] * ag * weights,
            all_gather_params_bwd_bytes=calls["all_gather_params_bwd"] * ag * weights,
        )
    return ZeroCommParts(reduce_scatter_grads_bytes=calls["reduce_scatter_grads"] * rs * grads,
                         all_gather_params_update_bytes=ag * weights)  # fmt: skip


def zero_comm_bytes(
    params: int, recipe: StateRecipe, stage: ZeroStage, n: int, microbatches: int = 1
) -> float:
    """Total bytes each rank sends per step at ``stage`` (``ZeroCommParts.total_bytes``)."""
    return zero_comm_parts(params, recipe, stage, n, microbatches).total_bytes


class ZeroStates(Struct, frozen=True):
    """Model states per rank at one ZeRO stage (parts of a total) and the room they leave on
    the card; ``activation_bytes`` (when given) checked against it."""

    stage: ZeroStage
    n: int
    recipe: StateRecipe
    parts: StateParts
    model_states_bytes: float
    memory_bytes: float
    states_over_memory_ratio: float
    free_for_activations_bytes: float
    activation_bytes: float | None
    activations_fit: bool | None


def zero_states(
    *,
    params: int,
    recipe: StateRecipe,
    stage: ZeroStage,
    n: int,
    hw: HardwareSpec,
    activation_bytes: float | None = None,
) -> ZeroStates:
    """Ψ(w/d_w + g/d_g + o/d_o) per rank (``zero_states_bytes``), its share of the card and
    the memory it leaves (seed 000: 45.6 GB of selective-recompute activations vs 24.4 GB)."""
    rb = recipe_bytes(recipe)
    divisors = state_divisors(stage, n)
    states = zero_states_bytes(params, recipe, stage, n)
    mem = hw.memory_bytes.value
    fit = None if activation_bytes is None else activation_bytes <= mem - states
    return ZeroStates(
        stage=stage,
        n=n,
        recipe=recipe,
        parts=state_parts(params, rb, divisors),
        model_states_bytes=states,
        memory_bytes=mem,
        states_over_memory_ratio=states / mem,
        free_for_activations_bytes=mem - states,
        activation_bytes=activation_bytes,
        activations_fit=fit,
    )


class ZeroComm(Struct, frozen=True):
    """Bytes each rank sends per step by collective (every collective in every row, 0 when the
    stage does not run it), their total, its time on ``link`` and the ratio to plain DP."""

    stage: ZeroStage
    n: int
    microbatches: int
    params: int
    grad_bytes_per_param: int
    weight_bytes_per_param: int
    all_reduce_grads_send_bytes: float
    reduce_scatter_grads_send_bytes: float
    all_gather_params_update_send_bytes: float
    all_gather_params_fwd_send_bytes: float
    all_gather_params_bwd_send_bytes: float
    comm_send_bytes_per_rank: float
    dp_send_bytes_per_rank: float
    link: Link
    nodes: int
    latency_steps: LatencySteps
    with_latency: bool
    comm_time_s: float
    comm_vs_dp_ratio: float


def zero_comm(
    params: int,
    recipe: StateRecipe,
    stage: ZeroStage,
    n: int,
    hw: HardwareSpec,
    link: Link,
    *,
    with_latency: bool = False,
    nodes: int | None = None,
    microbatches: int = 1,
) -> ZeroComm:
    """``zero_comm_parts``, their total, its alpha-beta time on ``link`` and the ratio to DP
    (whose all-reduce runs once per step whatever m).

    ``nodes`` = nodes the group spans (default ``links.link_nodes``) for the ring latency."""
    rb = recipe_bytes(recipe)
    parts = zero_comm_parts(params, recipe, stage, n, microbatches)
    comm = parts.total_bytes
    dp = zero_comm_bytes(params, recipe, ZeroStage.none, n)
    nodes = link_nodes(link, n) if nodes is None else nodes
    steps = zero_latency_steps(parts, n, nodes, zero_calls(stage, microbatches))
    return ZeroComm(
        stage=stage,
        n=n,
        microbatches=microbatches,
        params=params,
        grad_bytes_per_param=rb.grad_bytes,
        weight_bytes_per_param=rb.weight_gather_bytes,
        all_reduce_grads_send_bytes=parts.all_reduce_grads_bytes,
        reduce_scatter_grads_send_bytes=parts.reduce_scatter_grads_bytes,
        all_gather_params_update_send_bytes=parts.all_gather_params_update_bytes,
        all_gather_params_fwd_send_bytes=parts.all_gather_params_fwd_bytes,
        all_gather_params_bwd_send_bytes=parts.all_gather_params_bwd_bytes,
        comm_send_bytes_per_rank=comm,
        dp_send_bytes_per_rank=dp,
        link=link,
        nodes=nodes,
        latency_steps=steps,
        with_latency=with_latency,
        comm_time_s=steps_time_s(comm, steps, hw, link, with_latency=with_latency),
        comm_vs_dp_ratio=comm / dp if dp else 0.0,
    )
