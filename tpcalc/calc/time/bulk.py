"""``step.step_time`` of many layouts of one model, card and options, sharing the work they
have in common (the planner's exact tier, ``calc.plan.search``).

A stage's work (``step._stage_work``) reads the micro-batch's shard, the rates, the TP, CP and
EP groups, the EP overlap, the recompute choice, vpp and whether the stage holds the ends; its
layers only through their kinds in order. So:

- within one layout, stages whose layers have the same kinds in the same order and the same
  ends are computed once (Llama 3 405B at pp = 126: 3 distinct stages of 126);
- across layouts, the stages of every (layout but ZeRO, run but the micro-batch count and the
  schedule, EP overlap) are kept: the planner times ZeRO stages, schedules and recompute modes
  of the same shard one after another;
- the per-micro-batch hardware FLOP of the details (``step._hardware_flop``) goes with them,
  and the bubble (``step._bubble_s``) with them per schedule and micro-batch count;
- the data-parallel tail of each distinct stage is computed once per layout (``_stage_tail``).

Every number is what ``step_time`` returns for the same inputs, bit for bit: the same functions
run on the same inputs, only fewer times (tests/test_plan_engine.py compares them).
"""

from __future__ import annotations

from typing import NamedTuple

from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.calc.pipeline.schedule import rank_layers
from tpcalc.calc.time.step import (
    OpTime,
    StageWork,
    StepTime,
    TimeOptions,
    _bubble_s,
    _context,
    _Ctx,
    _hardware_flop,
    _stage_tail,
    _stage_work,
    _step_of_stages,
    split_of,
)
from tpcalc.calc.tp.rules import padded_vocab
from tpcalc.specs import HardwareSpec, ModelSpec


class _Stages(NamedTuple):
    """The stages of one (layout but ZeRO, run but the micro-batch count and schedule)."""

    stages: tuple[StageWork, ...]
    details: tuple[list[OpTime], ...]
    hardware_flop: float  # step._hardware_flop(details)
    templates: tuple[StageWork, ...]  # the distinct stages' work
    template_of: tuple[int, ...]  # each stage's index in templates


class StepCache:
    """``step_time(spec, hw, layout, run, opts)`` for any layout and run (module docstring)."""

    def __init__(self, spec: ModelSpec, hw: HardwareSpec, opts: TimeOptions) -> None:
        self.spec, self.hw, self.opts = spec, hw, opts
        kinds: dict[tuple[str, bool], int] = {}
        self._kind = [
            kinds.setdefault((spec.resolved_layer_types[i], spec.is_moe_layer(i)), len(kinds))
            for i in range(spec.num_hidden_layers)
        ]
        self._stages: dict[tuple, _Stages] = {}
        self._bubbles: dict[tuple, float] = {}

    def step_time(self, layout: ParallelLayout, run: LayoutRun) -> StepTime:
        ctx = _context(self.spec, self.hw, layout, run, self.opts)
        key = (
            layout.gpus_per_node, layout.tp, layout.cp, layout.pp, layout.dp, layout.ep,
            layout.etp, layout.world_size, run.seq, run.micro_batch, run.vpp, run.sp,
            run.recompute, run.dtype, run.memory, ctx.ep_overlap,
        )  # fmt: skip
        got = self._stages.get(key)
        if got is None:
            got = self._stages[key] = self._build(ctx, layout, run)
        # the data-parallel tail reads a stage's work, not its index (step._stage_tail)
        each = [_stage_tail(ctx, t, run.vpp) for t in got.templates]
        bkey = (key, run.schedule, run.microbatches)
        bubble = self._bubbles.get(bkey)
        if bubble is None:
            bubble = self._bubbles[bkey] = _bubble_s(got.stages, run, layout.pp)
        return _step_of_stages(
            ctx, run, got.stages, got.details, costs=[each[i] for i in got.template_of],
            bubble_s=bubble, hardware_flop=got.hardware_flop, template_of=got.template_of,
        )  # fmt: skip

    def _build(self, ctx: _Ctx, layout: ParallelLayout, run: LayoutRun) -> _Stages:
        spec, opts = self.spec, self.opts
        padded = padded_vocab(spec.vocab_size, layout.tp, opts.vocab_pad_multiple)
        n = spec.num_hidden_layers
        split = rank_layers(n, layout.pp, run.vpp, split_of(opts, n, layout.pp, run.vpp))
        # a stage's work reads its index only as first, last and StageWork.stage
        same: dict[tuple, int] = {}
        templates: list[tuple[StageWork, list[OpTime]]] = []
        stages, details, index = [], [], []
        for s, layers in enumerate(split):
            kinds = (s == 0, s == layout.pp - 1, tuple(self._kind[i] for i in layers))
            t = same.get(kinds)
            if t is None:
                t = same[kinds] = len(templates)
                templates.append(_stage_work(ctx, s, layers, run, padded))
                st = templates[t][0]
            else:
                w = templates[t][0]
                st = StageWork(
                    s, w.layers, w.forward, w.backward_input, w.backward_weight, w.recompute,
                    w.dense_params, w.expert_params,
                )  # fmt: skip
            stages.append(st)
            details.append(templates[t][1])
            index.append(t)
        return _Stages(
            tuple(stages), tuple(details), _hardware_flop(tuple(details)),
            tuple(w for w, _ in templates), tuple(index),
        )  # fmt: skip
