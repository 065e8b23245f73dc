"""A provable lower bound on a candidate's step time, cheap enough to take for every candidate.

``calc.time.step.step_time`` adds m · (F + B + W) of the slowest stage, the schedule's bubble
over the mean stage times, the exposed pipeline sends, the data-parallel tail and the optimizer.
A stage's F, B, W are the sums of its layers' work plus the embedding on the first stage and the
head on the last, and a layer's work depends on (tp, cp, ep, etp, SP, micro-batch, recompute)
only (``step._layer_work``: the shard and the tp, cp and ep groups, whose shape does not depend
on pp or dp). So the one-stage step (pp = 1) of the same shard has, as its stage's F, B, W, the
sums over all stages of any pipeline split, and

    step ≥ m · (F + B + W) / pp + bubble(schedule, pp, m, (F, B, W) / pp, vpp)

(slowest stage ≥ mean stage; the bubble is the step's own formula on the same means; the
sends, the tail and the optimizer are ≥ 0). Recomputation only adds work (``step._stage_work``:
a non-negative share of each layer's forward), and every bubble formula of
``pipeline.bubble_time_s`` grows with B at fixed F and W, so the bound at recompute none bounds
every recompute mode: the first, loosest tier.
"""

from __future__ import annotations

from dataclasses import replace

from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
from tpcalc.calc.pipeline.schedule import StageTimes, bubble_time_s
from tpcalc.calc.plan.space import RecomputeMode, Shape, Variant
from tpcalc.calc.time.step import TimeOptions, step_time
from tpcalc.choices import Recompute
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype


class StepBounds:
    """Lower bounds on step time from cached one-stage steps (module docstring)."""

    def __init__(
        self, spec: ModelSpec, hw: HardwareSpec, gpus_per_node: int, opts: TimeOptions,
        dtype: Dtype, seq: int, techniques: MemoryTechniques,
    ) -> None:  # fmt: skip
        self.spec, self.hw, self.node, self.opts = spec, hw, gpus_per_node, opts
        self.dtype, self.seq, self.tech = dtype, seq, techniques
        self._stage: dict[tuple, StageTimes] = {}
        self.one_stage_steps = 0

    def stage(self, shape: Shape, b: int, sp: bool, mode: RecomputeMode | None) -> StageTimes:
        """F, B (with recomputation), W of one micro-batch through the whole model."""
        sp = sp and shape.tp > 1
        key = (shape.tp, shape.cp, shape.ep, shape.etp, sp, b, mode)
        if key not in self._stage:
            mode = mode or RecomputeMode(Recompute.none)
            layout = ParallelLayout(
                gpus_per_node=self.node, tp=shape.tp, cp=shape.cp, pp=1,
                dp=shape.ep * shape.etp, ep=shape.ep, etp=shape.etp,
            )  # fmt: skip
            run = LayoutRun(
                seq=self.seq, microbatches=1, micro_batch=b, sp=sp, recompute=mode.recompute,
                dtype=self.dtype, memory=replace(self.tech, recompute_modules=mode.modules),
            )  # fmt: skip
            st = step_time(self.spec, self.hw, layout, run, self.opts)
            self.one_stage_steps += 1
            self._stage[key] = StageTimes(
                st.stage_forward_time_s, st.stage_backward_input_time_s,
                st.stage_backward_weight_time_s,
            )  # fmt: skip
        return self._stage[key]

    def lower(
        self, shape: Shape, v: Variant, b: int, m: int, sp: bool, mode: RecomputeMode | None
    ) -> float:
        """A lower bound on the step time (module docstring); ``mode`` None: any recompute."""
        t = self.stage(shape, b, sp, mode)
        p = shape.pp
        if p == 1:
            return m * t.full_s
        mean = StageTimes(t.forward_s / p, t.backward_input_s / p, t.backward_weight_s / p)
        return m * t.full_s / p + bubble_time_s(v.schedule, p, m, mean, v.vpp)
