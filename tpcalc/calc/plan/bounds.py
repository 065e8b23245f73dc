"""A provable lower bound on a candidate's step time, cheap enough to take for every candidate.

``calc.time.step.step_time`` adds m · (F + B + W) of the slowest stage, the schedule's bubble
over the mean stage times, the exposed pipeline sends, the data-parallel tail and the optimizer.
A stage's F, B, W are the roofline times of its layers' ops (``time.ops.layer_ops``, timed by
``roofline.op_time_s``; the fitted MoE overhead in F and B), plus the embedding on the first
stage and the head (and MTP) on the last, plus the exposed part of its TP, CP and EP collectives
(W has none; the TP and EP ones are taken as step._layer_work takes them, the CP ring as
≥ 0), plus in B the recomputed forward: all of it (full) or the ops of the
recompute modules (``step.RECOMPUTE_MODULE_OPS``; selective alone: core attention). All of that
but the collectives depends on the shard (tp, cp, ep, etp, SP, micro-batch) and the recompute
mode only, so the sums over all stages are computed once per shard, without the collectives:
F°, B°, W° ≤ the step's summed F, B, W (W° equal). Then

    step ≥ m · max over stages of (its layers' and ends' F° + B° + W°)
           + bubble(schedule, pp, m, (F°, B°, W°) / pp, vpp) + rest

(stages split as ``step.stage_layers`` splits them), because every bubble formula of
``pipeline.bubble_time_s`` grows with F and B at a fixed W, and ``rest`` is the least the other
parts can be: the pipeline sends of the fill and drain, 2(p−1) of them (``step._pp_exposed``
exposes at least those), and stage 0's data-parallel tail, which the step's tail (a maximum over
stages, ``step._tail``) is at least: its first gradient bucket (and first parameter gather with
a distributed optimizer), exposed whatever the overlap (``step._dp_exposed``), plus its Adam step
over the dense shard (``step._optimizer_s``).
"""

from __future__ import annotations

import math

import numpy as np
from msgspec import Struct

from tpcalc.calc.layout.groups import (
    MemoryTechniques,
    ParallelLayout,
    expert_dp_group,
    place_groups,
)
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.params.counts import (
    embedding_params,
    final_norm_params,
    layer_params,
    lm_head_params,
    routed_layer_params,
    shared_expert_intermediate,
)
from tpcalc.calc.pipeline.schedule import DUALPIPE_DIRECTIONS, StageTimes, bubble_time_s
from tpcalc.calc.plan.space import ModeKeys, RecomputeMode, Shape, Variant
from tpcalc.calc.time.ops import (
    Pass,
    Shard,
    embedding_ops,
    head_ops,
    layer_ops,
    moe_ops,
    mtp_ops,
)
from tpcalc.calc.time.roofline import Rates, collective_time_s, op_time_s, rates
from tpcalc.calc.time.step import (
    A2A_PER_PASS,
    ADAM_BYTES_PER_PARAM,
    DDP_BUCKET_MIN_PARAMS,
    DDP_BUCKET_PARAMS_PER_DP_RANK,
    P2P_PASSES,
    RECOMPUTE_MODULE_OPS,
    TP_FWD_COLLECTIVES,
    TP_GEMMS,
    TimeOptions,
    stage_layers,
)
from tpcalc.calc.tp.rules import padded_vocab
from tpcalc.choices import Recompute, Schedule
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype


class ShardWork(Struct, frozen=True):
    """Seconds of one micro-batch on one rank, by pass: one layer of each kind (with its
    exposed TP and EP collectives), the first stage's ends (embedding) and the last stage's
    (final norm, head, loss, MTP), and each kind's forward per op name (recompute modes)."""

    kind_f: np.ndarray  # [K]
    kind_b: np.ndarray
    kind_w: np.ndarray
    kind_forward_by_name: tuple[dict[str, float], ...]
    first_end: tuple[float, float, float]  # F, B, W
    last_end: tuple[float, float, float]


class StageBound(Struct, frozen=True):
    """Per stage lower bounds for one shard and recompute mode: F°, B°, W° summed over all
    stages (for the bubble) and the full time of each stage (for the slowest)."""

    sums: StageTimes
    per_kind_s: np.ndarray  # [K]: F + B + W + recompute of one layer of each kind
    first_end_s: float
    last_end_s: float
    per_kind_f_s: np.ndarray  # [K]: F of one layer of each kind
    first_end_f_s: float
    last_end_f_s: float


class StepBounds:
    """Lower bounds on step time from cached per-shard op sums (module docstring)."""

    def __init__(
        self, spec: ModelSpec, hw: HardwareSpec, gpus_per_node: int, opts: TimeOptions,
        dtype: Dtype, seq: int, techniques: MemoryTechniques,
    ) -> None:  # fmt: skip
        self.spec, self.hw, self.node, self.opts = spec, hw, gpus_per_node, opts
        self.dtype, self.seq, self.tech = dtype, seq, techniques
        self._work: dict[tuple, ShardWork] = {}
        self._times: dict[tuple, StageBound] = {}
        self._rest: dict[tuple, tuple[float, float, float]] = {}
        self._dp_parts: dict[tuple, tuple[float, float, int]] = {}
        self._first_params: dict[tuple, int] = {}
        self._layer_dense: list[int] = []
        self._expert_rest: dict[tuple, tuple] = {}
        self._first_experts: dict[tuple, int] = {}
        self._rows: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._layer_ops: dict[tuple, tuple] = {}
        self._ends: dict[tuple, tuple] = {}
        self.r = rates(hw, dtype, efficiency_scale=opts.efficiency_scale)
        kinds: dict[tuple[str, bool], list[int]] = {}
        for i in range(spec.num_hidden_layers):
            kinds.setdefault((spec.resolved_layer_types[i], spec.is_moe_layer(i)), []).append(i)
        self.kinds = [(v[0], len(v), k[1]) for k, v in kinds.items()]  # (first, count, moe)
        self.kind_counts = np.array([float(c) for _, c, _ in self.kinds])
        self.kind_index = [0] * spec.num_hidden_layers
        for k, layers in enumerate(kinds.values()):
            for i in layers:
                self.kind_index[i] = k
        self._stage_counts: dict[tuple[int, int], np.ndarray] = {}
        self._stacked: dict[tuple, tuple[np.ndarray, ...]] = {}
        self._links: dict[tuple, dict] = {}
        self._sends: dict[tuple, float] = {}
        self.shards = 0
        self._mode_key = ModeKeys()
        self._pipe_arrays: dict[tuple, tuple[np.ndarray, ...]] = {}
        self._splits: dict[tuple, tuple] = {}
        self._floors: dict[tuple, tuple[np.ndarray, ...]] = {}

    def work(self, shape: Shape, b: int, sp: bool) -> ShardWork:
        sp = sp and shape.tp > 1
        key = (shape.tp, shape.cp, shape.ep, shape.etp, sp, b)
        if key in self._work:
            return self._work[key]
        spec, r, opts = self.spec, self.r, self.opts
        shard = Shard(
            seq=self.seq, micro_batch=b, tp=shape.tp, cp=shape.cp, ep=shape.ep, etp=shape.etp,
            sp=sp, dtype=Dtype.bf16, gemm_dtype=self.dtype, causal=opts.causal,
            fused_sinks=opts.fused_sinks,
        )  # fmt: skip
        links = place_groups(
            ParallelLayout(
                gpus_per_node=self.node, tp=shape.tp, cp=shape.cp, ep=shape.ep, etp=shape.etp
            )
        )
        ov = opts.overlap
        fs, bs, ws, names = [], [], [], []
        for first, _, moe in self.kinds:
            kf, kb, kw, gemm_f, gemm_b, by_name = self._kind_ops(shard, first, moe)
            if moe:  # the card's fitted fixed cost of a MoE layer, in F and in B (step)
                kf += r.moe_layer_overhead_s
                kb += r.moe_layer_overhead_s
            # exposed TP and EP collectives, as step._layer_work exposes them
            tp_pass = self._tp_pass(shard, moe, links["tp"].nodes)
            first_chunk = tp_pass / shape.tp
            ep_f = ep_b = 0.0
            if moe and shape.ep > 1:
                a2a = self._a2a(shard, shape.ep, links["ep"].nodes)
                ep_on = bool(ov.ep_a2a)  # set explicitly by the planner (space.overlap)
                ep_f, ep_b = _exposed(a2a, kb + kw, ep_on), _exposed(a2a, kf, ep_on)
            fs.append(kf + _exposed(tp_pass, gemm_f, ov.tp_comm, first_chunk) + ep_f)
            bs.append(kb + _exposed(tp_pass, gemm_b, ov.tp_comm, first_chunk) + ep_b)
            ws.append(kw)
            names.append(by_name)
        # the ends read ep and etp only through the MTP modules' MoE layer
        ends_key = (shape.tp, shape.cp, sp, b) + ((shape.ep, shape.etp) if self.tech.mtp else ())
        ends = self._ends.get(ends_key)
        if ends is None:
            padded = padded_vocab(spec.vocab_size, shape.tp, opts.vocab_pad_multiple)
            last = head_ops(spec, shard, padded)
            if self.tech.mtp:
                for _ in range(spec.mtp_layers):
                    last += mtp_ops(spec, shard, padded)
            ends = self._ends[ends_key] = (
                self._passes(embedding_ops(spec, shard)), self._passes(last)
            )  # fmt: skip
        out = ShardWork(np.array(fs), np.array(bs), np.array(ws), tuple(names), *ends)
        self.shards += 1
        self._work[key] = out
        return out

    def _kind_ops(
        self, shard: Shard, first: int, moe: bool
    ) -> tuple[float, float, float, float, float, dict[str, float]]:
        """One layer's op times by pass (F, B, W, the TP GEMMs' F and B, F per op name). Only
        the routed-expert ops read the shard's ep and etp (``time.ops.moe_ops``), so a dense
        layer's are shared by every ep and etp, and so is the rest of a MoE layer (its ops
        before ``moe_ops``' own, checked once per shard)."""
        key = (shard.tp, shard.cp, shard.sp, shard.micro_batch, first)
        if not moe:
            got = self._layer_ops.get(key)
            if got is None:
                got = self._layer_ops[key] = _op_sums(layer_ops(self.spec, shard, first), self.r)
            return got
        experts = moe_ops(self.spec, shard)
        rest = self._layer_ops.get(key)
        if rest is None:
            ops = layer_ops(self.spec, shard, first)
            cut = len(ops) - len(experts)
            if ops[cut:] != experts:  # not the mixer followed by moe_ops: no sharing
                return _op_sums(ops, self.r)
            rest = self._layer_ops[key] = _op_sums(ops[:cut], self.r)
        own = _op_sums(experts, self.r)
        names = dict(rest[5])
        for n, t in own[5].items():
            names[n] = names.get(n, 0.0) + t
        return (*(x + y for x, y in zip(rest[:5], own[:5], strict=True)), names)

    def _passes(self, ops: tuple) -> tuple[float, float, float]:
        f = b = w = 0.0
        for op in ops:
            t = op_time_s(op, self.r)
            if op.phase is Pass.forward:
                f += t
            elif op.phase is Pass.backward_input:
                b += t
            else:
                w += t
        return f, b, w

    def _tp_pass(self, shard: Shard, moe: bool, nodes: int) -> float:
        """One pass's TP collectives of a layer (step._layer_work)."""
        if shard.tp == 1:
            return 0.0
        h_bytes = shard.tokens * self.spec.hidden_size * shard.dtype.bytes * self.opts.comm_scale
        shared = shared_expert_intermediate(self.spec) if self.spec.is_moe else 0
        blocks = 1 if moe and not shared else TP_FWD_COLLECTIVES
        if shard.sp:
            one = collective_time_s(self.r, Collective.all_gather, h_bytes, shard.tp, nodes)
            one += collective_time_s(self.r, Collective.reduce_scatter, h_bytes, shard.tp, nodes)
        else:
            one = collective_time_s(self.r, Collective.all_reduce, h_bytes, shard.tp, nodes)
        return blocks * one

    def _a2a(self, shard: Shard, ep: int, nodes: int) -> float:
        """A MoE layer's dispatch and combine all-to-all in one pass (step._layer_work)."""
        routed = shard.tokens // shard.tp * (self.spec.num_experts_per_tok or 1)
        msg = routed * self.spec.hidden_size * shard.dtype.bytes * self.opts.comm_scale
        return A2A_PER_PASS * collective_time_s(self.r, Collective.all_to_all, msg, ep, nodes)

    def stage(self, shape: Shape, b: int, sp: bool, mode: RecomputeMode) -> StageBound:
        """F°, B° (with the recomputed forward), W° summed over the model, and per layer kind."""
        key = (shape.tp, shape.cp, shape.ep, shape.etp, sp and shape.tp > 1, b, mode)
        if key in self._times:
            return self._times[key]
        wk = self.work(shape, b, sp)
        if mode.recompute is Recompute.full:
            rec = wk.kind_f
        else:
            default = ("core_attn",) if mode.recompute is Recompute.selective else ()
            names = {n for m in (mode.modules or default) for n in RECOMPUTE_MODULE_OPS[m]}
            rec = np.array([sum(d.get(n, 0.0) for n in names) for d in wk.kind_forward_by_name])
        counts = self.kind_counts
        fe, le = wk.first_end, wk.last_end
        sums = StageTimes(
            float(counts @ wk.kind_f) + fe[0] + le[0],
            float(counts @ (wk.kind_b + rec)) + fe[1] + le[1],
            float(counts @ wk.kind_w) + fe[2] + le[2],
        )
        out = StageBound(
            sums, wk.kind_f + wk.kind_b + wk.kind_w + rec, sum(fe), sum(le), wk.kind_f, fe[0],
            le[0],
        )  # fmt: skip
        self._times[key] = out
        return out

    def stage_counts(self, pp: int, vpp: int) -> np.ndarray:
        """Layers of each kind on each pipeline stage, as step.stage_layers splits them."""
        key = (pp, vpp)
        if key not in self._stage_counts:
            out = np.zeros((pp, len(self.kinds)))
            for r, layers in enumerate(stage_layers(self.spec.num_hidden_layers, pp, vpp)):
                for i in layers:
                    out[r, self.kind_index[i]] += 1
            self._stage_counts[key] = out
        return self._stage_counts[key]

    def slowest(self, shape: Shape, v: Variant, t: StageBound) -> float:
        """A lower bound on the slowest stage's F + B + W: each stage's own layers and ends."""
        per = self.stage_counts(shape.pp, v.vpp) @ t.per_kind_s
        per[0] += t.first_end_s
        per[-1] += t.last_end_s
        return float(per.max())

    def first_stage_dense(self, shape: Shape, v: Variant) -> int:
        """Dense parameters one rank of stage 0 holds, as ``step._stage_params`` counts them."""
        key = (shape.pp, v.vpp, shape.tp)
        if key not in self._first_params:
            spec = self.spec
            layers = stage_layers(spec.num_hidden_layers, shape.pp, v.vpp)[0]
            if not self._layer_dense:  # each layer's dense parameters, counted once
                self._layer_dense = [
                    layer_params(spec, i) - routed_layer_params(spec, i)
                    for i in range(spec.num_hidden_layers)
                ]
            dense = sum(self._layer_dense[i] for i in layers)
            dense += embedding_params(spec)
            if shape.pp == 1:
                dense += lm_head_params(spec) + final_norm_params(spec)
            self._first_params[key] = dense // shape.tp
        return self._first_params[key]

    def rest(
        self, shape: Shape, v: Variant, b: int, sp: bool, distributed: bool
    ) -> tuple[float, float, float]:
        """(constant, A, C): the step is at least m·N + constant + max(0, A − d·N) +
        max(0, C − d·N) for the slowest stage's time N and d = 1 + (p−1)/vpp (module
        docstring): the constant holds the least pipeline sends, stage 0's Adam step and the
        first bucket of its gradient reduction and parameter gather; A and C are what remains
        of each to hide under stage 0's backward and forward (at most N each) over the drain."""
        const, a, c = self.dp_tail(shape, v, distributed)
        return const + self.pp_sends(shape, b, sp), a, c

    def dp_tail(self, shape: Shape, v: Variant, distributed: bool) -> tuple[float, float, float]:
        """``rest`` without the pipeline sends (it does not depend on the micro-batch)."""
        key = (shape.tp, shape.cp, shape.pp, shape.dp, v.vpp, distributed)
        if key in self._rest:
            return self._rest[key]
        params = self.first_stage_dense(shape, v)
        group = self.links(shape)["dp"]
        const, a, c, parts = self._collectives(params, group.size, group.nodes, shape.dp,
                                               distributed)  # fmt: skip
        shard = shape.dp * shape.cp if distributed else 1
        const += params / shard * ADAM_BYTES_PER_PARAM / self.r.hbm_bytes_per_s
        self._rest[key] = (const, a, c)
        if distributed and parts is not None:
            self._dp_parts[key] = parts
        return const, a, c

    def expert_tail(
        self, shape: Shape, v: Variant, distributed: bool
    ) -> tuple[float, float, float, tuple[float, float, int] | None]:
        """``dp_tail`` of stage 0's routed-expert parameters over their own data-parallel group
        (``step._dp_exposed`` adds both groups' exposed time; the Adam step of the experts is
        left out, at least 0): (constant, A, C, the per-bucket collectives or None)."""
        key = (shape, v.vpp, distributed)
        got = self._expert_rest.get(key)
        if got is None:
            params = self.first_stage_experts(shape, v)
            if not params:
                got = (0.0, -math.inf, -math.inf, None)
            else:
                layout = ParallelLayout(
                    gpus_per_node=self.node, tp=shape.tp, cp=shape.cp, pp=shape.pp,
                    dp=shape.dp, ep=shape.ep, etp=shape.etp,
                )  # fmt: skip
                group = expert_dp_group(layout)
                got = self._collectives(params, group.size, group.nodes, shape.dp, distributed)
            self._expert_rest[key] = got
        return got

    def first_stage_experts(self, shape: Shape, v: Variant) -> int:
        """Routed-expert parameters one rank of stage 0 holds (``step._stage_params``)."""
        key = (shape.pp, v.vpp, shape.ep * shape.etp)
        if key not in self._first_experts:
            layers = stage_layers(self.spec.num_hidden_layers, shape.pp, v.vpp)[0]
            routed = sum(routed_layer_params(self.spec, i) for i in layers)
            self._first_experts[key] = routed // (shape.ep * shape.etp)
        return self._first_experts[key]

    def _collectives(
        self, params: int, size: int, nodes: int, dp: int, distributed: bool
    ) -> tuple[float, float, float, tuple[float, float, int] | None]:
        """One group's gradient reduction and parameter gather as ``step._dp_exposed`` times
        them: (what is exposed whatever the overlap, A and C left to hide under the backward
        and forward passes, (one bucket's reduction, one bucket's gather, buckets) or None)."""
        r, opts, ov = self.r, self.opts, self.opts.overlap
        const = 0.0
        a = c = -math.inf
        if not params or size <= 1:
            return const, a, c, None
        cap = max(DDP_BUCKET_MIN_PARAMS, DDP_BUCKET_PARAMS_PER_DP_RANK * dp)
        bucket = min(params, cap)
        buckets = math.ceil(params / bucket)
        grad = bucket * opts.grad_reduce_dtype.bytes * opts.comm_scale
        gather = 0.0
        if distributed:
            one = collective_time_s(r, Collective.reduce_scatter, grad, size, nodes)
            param = bucket * Dtype.bf16.bytes * opts.comm_scale
            gather = collective_time_s(r, Collective.all_gather, param, size, nodes)
        else:
            one = collective_time_s(r, Collective.all_reduce, grad, size, nodes)
        if ov.dp_grad_reduce:
            const, a = const + one, buckets * one - one
        else:
            const += buckets * one
        if ov.dp_param_gather:
            const, c = const + gather, buckets * gather - gather
        else:
            const += buckets * gather
        return const, a, c, (one, gather, buckets) if distributed else None

    def sharded_terms(
        self, shape: Shape, v: Variant, zero: int, m: np.ndarray, a: float, c: float,
        expert: tuple[float, float, int] | None | bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """(A, D_a, C, D_c) of ``block``'s hidden terms for one ZeRO stage: what stage 0's
        collectives leave to hide and the passes they hide under. ZeRO-2 reduce-scatters every
        micro-batch's gradients under its own backward, ZeRO-3 also gathers before every forward
        and backward (``step._dp_exposed``): m·buckets·(collective) − first bucket under m
        passes. Stages 0-1, or no overlap, keep ZeRO-1's terms under the drain (the exact time
        of a higher stage is never less). ``expert``: the expert group's per-bucket collectives
        (``expert_tail``) in place of the dense group's (False)."""
        d = 1 + (shape.pp - 1) / v.vpp
        ov = self.opts.overlap
        key = (shape.tp, shape.cp, shape.pp, shape.dp, v.vpp, True)
        if expert is False:
            parts = self._dp_parts.get(key) if zero >= 2 else None
        else:
            parts = expert if zero >= 2 and not isinstance(expert, bool) else None
        full = np.ones_like(m)
        a_z, da, c_z, dc = a * full, d * full, c * full, d * full
        if parts is None:
            return a_z, da, c_z, dc
        one, gather, buckets = parts
        if ov.dp_grad_reduce:
            per_pass = buckets * (one + (gather if zero >= 3 else 0.0))
            a_z, da = m * per_pass - one, m
        if zero >= 3 and ov.dp_param_gather:
            c_z, dc = m * buckets * gather - gather, m
        return a_z, da, c_z, dc

    def links(self, shape: Shape) -> dict:
        """The pp and dp groups (they do not depend on ep, etp)."""
        key = (shape.tp, shape.cp, shape.pp, shape.dp)
        if key not in self._links:
            self._links[key] = place_groups(
                ParallelLayout(
                    gpus_per_node=self.node, tp=shape.tp, cp=shape.cp, pp=shape.pp, dp=shape.dp
                )
            )
        return self._links[key]

    def pp_sends(self, shape: Shape, b: int, sp: bool) -> float:
        """The pipeline sends of the fill and drain, 2(p−1) of them (step._pp_exposed)."""
        if shape.pp == 1:
            return 0.0
        key = (shape.tp, shape.cp, shape.pp, shape.dp, b, sp and shape.tp > 1)
        if key not in self._sends:
            tokens = self.seq * b // shape.cp
            sp_tokens = tokens // shape.tp if sp and shape.tp > 1 else tokens
            msg = sp_tokens * self.spec.hidden_size * Dtype.bf16.bytes * self.opts.comm_scale
            nodes = min(2, self.links(shape)["pp"].nodes)
            one = collective_time_s(self.r, Collective.p2p, msg, 2, nodes)
            self._sends[key] = P2P_PASSES * (shape.pp - 1) * one
        return self._sends[key]

    def with_rest(
        self, shape: Shape, v: Variant, b: int, m: int, sp: bool, distributed: bool,
        slowest: np.ndarray, first_f: np.ndarray, first_bwd: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """min over N ≥ ``slowest`` of m·N + rest (``rest``), where stage 0's backward is at
        most N − its least forward ``first_f`` and its forward at most N − its least backward
        ``first_bwd``: a convex piecewise-linear function of N, least at ``slowest`` or at a
        break point above it."""
        const, a, c = self.rest(shape, v, b, sp, distributed)
        d = 1 + (shape.pp - 1) / v.vpp
        a2, c2 = a + d * first_f, c + d * first_bwd  # arrays; -inf stays -inf

        n = np.stack([slowest, np.maximum(slowest, a2 / d), np.maximum(slowest, c2 / d)])
        h = m * n + np.maximum(0.0, a2 - d * n) + np.maximum(0.0, c2 - d * n)
        return h.min(axis=0) + const

    def stacked(
        self, shape: Shape, b: int, sp: bool, modes: list[RecomputeMode] | tuple[RecomputeMode, ...]
    ) -> tuple[np.ndarray, ...]:
        """``stage`` of every mode as arrays: per-kind totals and forwards [R, K], ends [R],
        summed F, B, W [R]."""
        key = (shape.tp, shape.cp, shape.ep, shape.etp, sp and shape.tp > 1, b,
               self._mode_key(modes), shape.pp == 1)  # fmt: skip
        if key not in self._stacked:
            # ``stage`` of every mode at once: the recomputed forward of each mode and kind is
            # a selection of the kinds' forward op times by name (one product)
            wk = self.work(shape, b, sp)
            names = tuple(sorted({n for d in wk.kind_forward_by_name for n in d}))
            by_name = np.array([[d.get(n, 0.0) for d in wk.kind_forward_by_name] for n in names])
            pick, full = self._recompute_rows(modes, names)  # [R, names], [R]
            rec = pick @ by_name.reshape(len(names), len(wk.kind_f))  # [R, K]
            rec[full] = wk.kind_f
            counts = self.kind_counts
            fe, le = wk.first_end, wk.last_end
            r = len(modes)
            one = np.ones(r)
            self._stacked[key] = (
                wk.kind_f + wk.kind_b + wk.kind_w + rec,
                np.broadcast_to(wk.kind_f, rec.shape),
                one * sum(fe),
                one * sum(le),
                one * (fe[0] + (le[0] if shape.pp == 1 else 0.0)),
                one * (float(counts @ wk.kind_f) + fe[0] + le[0]),
                (wk.kind_b + rec) @ counts + fe[1] + le[1],
                one * (float(counts @ wk.kind_w) + fe[2] + le[2]),
            )
        return self._stacked[key]

    def _recompute_rows(
        self, modes: list[RecomputeMode] | tuple[RecomputeMode, ...], names: tuple[str, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Which op names each mode recomputes ([R, names], 0 or 1) and which modes recompute
        whole layers ([R]): ``stage``'s selection as arrays."""
        key = (self._mode_key(modes), names)
        got = self._rows.get(key)
        if got is None:
            pick = np.zeros((len(modes), len(names)))
            full = np.zeros(len(modes), dtype=bool)
            for i, mode in enumerate(modes):
                if mode.recompute is Recompute.full:
                    full[i] = True
                    continue
                default = ("core_attn",) if mode.recompute is Recompute.selective else ()
                chosen = {n for m in (mode.modules or default) for n in RECOMPUTE_MODULE_OPS[m]}
                pick[i] = [n in chosen for n in names]
            got = self._rows[key] = (pick, full)
        return got

    def pipe_arrays(
        self, shape: Shape, vpp: int, mbs: list[int], sps: list[bool], modes: list[RecomputeMode]
    ) -> tuple[np.ndarray, ...]:
        """What the bound of a block takes from its shard and stage split, for every
        (micro-batch, sp, mode) at once, each [M, S, R]: the slowest stage's F + B + W, stage
        0's F and total, the summed F, B, W; and the least pipeline sends [M, S, 1]. It does
        not depend on the schedule or ZeRO, so blocks that differ only in those share it (and
        ``stage_split`` is shared across dp too)."""
        token = self._mode_key(modes)
        key = (shape.tp, shape.cp, shape.pp, shape.dp, shape.ep, shape.etp, vpp, tuple(mbs),
               tuple(sps), token)  # fmt: skip
        got = self._pipe_arrays.get(key)
        if got is not None:
            return got
        r = len(modes)
        out = tuple(np.empty((len(mbs), len(sps), r)) for _ in range(6)) + (
            np.empty((len(mbs), len(sps), 1)),
        )
        for i, b in enumerate(mbs):
            for j, sp in enumerate(sps):
                for x, arr in zip(out[:6], self.stage_split(shape, vpp, b, sp, modes), strict=True):
                    x[i, j] = arr
                out[6][i, j] = self.pp_sends(shape, b, sp)
        self._pipe_arrays[key] = out
        return out

    def stage_split(
        self, shape: Shape, vpp: int, b: int, sp: bool, modes: list[RecomputeMode]
    ) -> tuple[np.ndarray, ...]:
        """``pipe_arrays`` of one (micro-batch, sp) but the sends, each [R]: shared by every dp
        and schedule with this shard and stage split."""
        key = (shape.tp, shape.cp, shape.pp, shape.ep, shape.etp, vpp, b, sp and shape.tp > 1,
               self._mode_key(modes))  # fmt: skip
        got = self._splits.get(key)
        if got is None:
            counts = self.stage_counts(shape.pp, vpp)
            kind, kind_f, first, last, first_f, f, bi, w = self.stacked(shape, b, sp, modes)
            per = kind @ counts.T  # [R, stages]
            per[:, 0] += first
            per[:, -1] += last
            f0 = kind_f @ counts[0] + first_f
            got = (per.max(axis=1), f0, per[:, 0], f, bi, w)
            self._splits[key] = got
        return got

    def floor(
        self, shape: Shape, v: Variant, mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], distributed: list[bool], zeros: list[int],
    ) -> np.ndarray:  # fmt: skip
        """A lower bound on ``block`` [Z, M, S, R] that needs no stage split: ``block``'s terms
        with the mean stage F° + B° + W° over p in place of the slowest stage (the stages'
        sums add up to F° + B° + W°, so the slowest is at least the mean) and stage 0's
        forward and backward taken as 0 in what the drain hides (the hidden terms only grow
        with them). It needs only the summed op times of each (micro-batch, sp, mode), shared
        by every pp, dp, schedule and vpp of the shard, so a whole block is ranked, and
        skipped, before its own bounds are built."""
        f, bi, w, sends, m = self.sums(shape, mbs, per_dp, sps, modes)
        zero = np.zeros_like(f)
        mean = (f + bi + w) / shape.pp
        return self._assemble(shape, v, m, mean, zero, zero, f, bi, w, sends, distributed, zeros)

    def floors(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], distributed: list[bool], zeros: list[int],
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Two cheaper lower bounds than ``floor`` for every variant of ``vs`` at once: per
        cell [V, M, S, R], ``floor`` without the hidden terms and with the least constant of
        any ZeRO stage; per (variant, ZeRO stage, micro-batch) [V, Z, M], ``floor`` at the
        least mean stage, sends and bubble of any (sp, mode) (``floor`` grows with each). A
        candidate's bound is at least both (``sharded_terms`` and ``_bubble`` taken over
        arrays of variants)."""
        f, bi, w, sends, m = self.sums(shape, mbs, per_dp, sps, modes)
        p, n_v, n_z = shape.pp, len(vs), len(zeros)
        fp, bp, wp = f / p, bi / p, w / p
        mean = (f + bi + w) / p
        bubble = np.empty((n_v, *f.shape))
        seen: dict[Variant, int] = {}
        for i, v in enumerate(vs):
            if v in seen:
                bubble[i] = bubble[seen[v]]
            else:
                bubble[i] = _bubble(v, p, fp, bp, wp, mean)
                seen[v] = i
        ov = self.opts.overlap
        const = np.zeros((n_v, n_z))
        mm = m[None, None, :, 0, 0]  # [1, 1, M]
        groups = []
        for expert in (False, True):
            a0, c0, d = (np.empty((n_v, n_z)) for _ in range(3))
            ga, gc = np.zeros((n_v, n_z), bool), np.zeros((n_v, n_z), bool)
            per_pass, one, gathers, gather = (np.zeros((n_v, n_z)) for _ in range(4))
            for i, v in enumerate(vs):
                dv = 1 + (p - 1) / v.vpp
                key = (shape.tp, shape.cp, shape.pp, shape.dp, v.vpp, True)
                for j, (z, dist) in enumerate(zip(zeros, distributed, strict=True)):
                    if expert:
                        k, a0[i, j], c0[i, j], parts = self.expert_tail(shape, v, dist)
                    else:
                        k, a0[i, j], c0[i, j] = self.dp_tail(shape, v, dist)
                        parts = self._dp_parts.get(key)
                    const[i, j] += k
                    d[i, j] = dv
                    if z < 2 or parts is None:
                        continue
                    o, g, buckets = parts
                    if ov.dp_grad_reduce:  # as sharded_terms
                        ga[i, j], one[i, j] = True, o
                        per_pass[i, j] = buckets * (o + (g if z >= 3 else 0.0))
                    if z >= 3 and ov.dp_param_gather:
                        gc[i, j], gathers[i, j], gather[i, j] = True, buckets * g, g
            a_z = np.where(ga[..., None], mm * per_pass[..., None] - one[..., None], a0[..., None])
            da = np.where(ga[..., None], mm, d[..., None])
            c_z = np.where(
                gc[..., None], mm * gathers[..., None] - gather[..., None], c0[..., None]
            )
            dc = np.where(gc[..., None], mm, d[..., None])  # each [V, Z, M]
            groups.append((a_z, da, c_z, dc))
        # per cell: the mean stage, bubble, sends and the least constant of any stage
        rest = sends + bubble  # [V, M, S, R]
        cells = m * mean + rest + const.min(axis=1)[:, None, None, None]
        # per (variant, stage, micro-batch): the hidden terms at the least mean of any cell,
        # stage 0's passes taken as 0 (the hidden terms only grow with them)
        x = np.broadcast_to(mean.min(axis=(1, 2))[None, None, :], groups[0][0].shape)
        zero = np.zeros_like(x)
        best = _least_exposed(np.broadcast_to(mm, x.shape), x, zero, zero, groups)
        coarse = best + const[:, :, None] + rest.min(axis=(2, 3))[:, None, :]
        return cells, coarse

    def sums(
        self, shape: Shape, mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode],
    ) -> tuple[np.ndarray, ...]:  # fmt: skip
        """Summed F°, B°, W° [M, S, R], the least pipeline sends [M, S, 1] and the micro-batch
        counts [M, 1, 1] of a shape (``floor``)."""
        key = (shape, tuple(mbs), tuple(sps), self._mode_key(modes))
        got = self._floors.get(key)
        if got is None:
            r = len(modes)
            f, bi, w = (np.empty((len(mbs), len(sps), r)) for _ in range(3))
            sends = np.empty((len(mbs), len(sps), 1))
            for i, b in enumerate(mbs):
                for j, sp in enumerate(sps):
                    *_, f[i, j], bi[i, j], w[i, j] = self.stacked(shape, b, sp, modes)
                    sends[i, j] = self.pp_sends(shape, b, sp)
            m = np.array([per_dp // b for b in mbs], dtype=np.float64)[:, None, None]
            got = (f, bi, w, sends, m)
            self._floors[key] = got
        return got

    def block(
        self, shape: Shape, v: Variant, mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], distributed: list[bool], zeros: list[int] | None = None,
    ) -> np.ndarray:  # fmt: skip
        """``lower`` of every (zero, micro-batch, sp, mode) of a block: [Z, M, S, R], in one
        numpy pass over the block (the same terms ``lower`` adds, broadcast)."""
        slowest, f0, total0, f, bi, w, sends = self.pipe_arrays(shape, v.vpp, mbs, sps, modes)
        m = np.array([per_dp // b for b in mbs], dtype=np.float64)[:, None, None]  # [M, 1, 1]
        stage = zeros if zeros is not None else [int(dist) for dist in distributed]
        return self._assemble(shape, v, m, slowest, f0, total0, f, bi, w, sends, distributed, stage)

    def _assemble(
        self, shape: Shape, v: Variant, m: np.ndarray, slowest: np.ndarray, f0: np.ndarray,
        total0: np.ndarray, f: np.ndarray, bi: np.ndarray, w: np.ndarray, sends: np.ndarray,
        distributed: list[bool], stage: list[int],
    ) -> np.ndarray:  # fmt: skip
        """``block`` from its stage arrays [M, S, R]: [Z, M, S, R]."""
        p = shape.pp
        bubble = _bubble(v, p, f / p, bi / p, w / p, (f + bi + w) / p)  # [M, S, R]
        tails = [self.dp_tail(shape, v, dist) for dist in distributed]
        experts = [self.expert_tail(shape, v, dist) for dist in distributed]
        zs = (len(distributed), 1, 1, 1)
        const = np.array([t[0] + e[0] for t, e in zip(tails, experts, strict=True)]).reshape(zs)
        hinges = []
        for group in (False, True):
            terms = [
                self.sharded_terms(
                    shape,
                    v,
                    z,
                    m,
                    *((e[1], e[2], e[3]) if group else (t[1], t[2])),
                )
                for z, t, e in zip(stage, tails, experts, strict=True)
            ]
            a_z, da, c_z, dc = (np.stack([t[i] for t in terms]) for i in range(4))  # [Z, M, 1, 1]
            hinges.append((a_z, da, c_z, dc))
        return (
            _least_exposed(m, slowest, f0, total0, hinges)
            + const + sends + bubble
        )  # fmt: skip

    def lower(
        self, shape: Shape, v: Variant, b: int, m: int, sp: bool, mode: RecomputeMode,
        distributed: bool,
    ) -> float:  # fmt: skip
        """A lower bound on the step time (module docstring); ``distributed``: ZeRO >= 1."""
        t = self.stage(shape, b, sp, mode)
        p = shape.pp
        s = t.sums
        mean = StageTimes(s.forward_s / p, s.backward_input_s / p, s.backward_weight_s / p)
        bubble = bubble_time_s(v.schedule, p, m, mean, v.vpp) if p > 1 else 0.0
        counts = self.stage_counts(p, v.vpp)
        f0 = float(counts[0] @ t.per_kind_f_s) + t.first_end_f_s
        total0 = float(counts[0] @ t.per_kind_s) + t.first_end_s
        if p == 1:
            f0, total0 = f0 + t.last_end_f_s, total0 + t.last_end_s
        slowest = np.array([self.slowest(shape, v, t)])
        rest = self.with_rest(
            shape, v, b, m, sp, distributed, slowest, np.array([f0]), np.array([total0 - f0])
        )
        return float(rest[0]) + bubble


def _op_sums(ops: tuple, r: Rates) -> tuple[float, float, float, float, float, dict[str, float]]:
    """Op times by pass: F, B, W, the TP GEMMs' F and B, and F per op name."""
    kf = kb = kw = gemm_f = gemm_b = 0.0
    by_name: dict[str, float] = {}
    for op in ops:
        t = op_time_s(op, r)
        if op.phase is Pass.forward:
            kf += t
            gemm_f += t if op.name in TP_GEMMS else 0.0
            name = op.name.removesuffix("_fp8_cast")
            by_name[name] = by_name.get(name, 0.0) + t
        elif op.phase is Pass.backward_input:
            kb += t
            gemm_b += t if op.name in TP_GEMMS else 0.0
        else:
            kw += t
    return kf, kb, kw, gemm_f, gemm_b, by_name


def _least(
    m: np.ndarray, lo: np.ndarray, hinges: list[tuple[np.ndarray, np.ndarray]]
) -> np.ndarray:
    """min over N >= lo of m·N + Σ max(0, x − d·N) for hinges (x, d), d > 0: convex and
    piecewise linear in N, so least at lo or at a hinge x/d above it."""

    def at(n: np.ndarray) -> np.ndarray:
        h = m * n
        for x, d in hinges:
            h = h + np.maximum(0.0, x - d * n)
        return h

    best = at(lo)
    for x, d in hinges:
        best = np.minimum(best, at(np.maximum(lo, x / d)))
    return best


def _least_exposed(
    m: np.ndarray, slowest: np.ndarray, f0: np.ndarray, total0: np.ndarray,
    groups: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
) -> np.ndarray:  # fmt: skip
    """A lower bound on min over N ≥ ``slowest`` of m·N plus what each group's gradient
    reduction (A, hidden under stage 0's backward, at most N − its forward ``f0``, times d_a)
    and parameter gather (C, under its forward, at most N − its backward) leave exposed,
    groups (``sharded_terms``: dense, experts) adding up as ``step._dp_exposed`` adds them.
    Each group's two also hide under passes adding up to at most N, so they leave at least
    A + C − max(d_a, d_c)·N (the joint term). The bound is the larger of the least with the
    terms apart and the least with the joint terms (each a lower bound on the step)."""
    apart, joint = [], []
    for a_z, da, c_z, dc in groups:
        apart += [(a_z + da * f0, da), (c_z + dc * (total0 - f0), dc)]
        joint.append((a_z + c_z, np.maximum(da, dc)))  # -inf when either is not overlapped
    return np.maximum(_least(m, slowest, apart), _least(m, slowest, joint))


def _exposed(comm_s: float, hidden_s: float, overlapped: bool, first_s: float = 0.0) -> float:
    """``step._exposed``: all of a collective, or (overlapped) its first chunk plus what the
    compute it runs under cannot cover."""
    if not overlapped:
        return comm_s
    return first_s + max(0.0, comm_s - first_s - hidden_s)


def _bubble(
    v: Variant, p: int, f: np.ndarray, b: np.ndarray, w: np.ndarray, full: np.ndarray
) -> np.ndarray:
    """``pipeline.bubble_time_s`` over arrays of mean stage times (same formulas)."""
    if p == 1:
        return np.zeros_like(f)
    if v.schedule in (Schedule.gpipe, Schedule.one_f_one_b):
        return (p - 1) * full
    if v.schedule is Schedule.interleaved:
        return (p - 1) * full / v.vpp
    if v.schedule is Schedule.zb_h1:
        return (p - 1) * np.maximum(0.0, f + b - w)
    half = p / DUALPIPE_DIRECTIONS - 1
    return np.maximum(0.0, half * (full + (b + w) - 3 * w))
