"""A provable lower bound on a candidate's step time, cheap enough to take for every candidate.

``calc.time.step.step_time`` adds m · (F + B + W) of the slowest stage, the schedule's bubble
over the mean stage times, the exposed pipeline sends, the data-parallel tail and the optimizer.
A stage's F, B, W are the roofline times of its layers' ops (``time.ops.layer_ops``, timed by
``roofline.op_time_s``; the fitted MoE overhead in F and B), plus the embedding on the first
stage and the head (and MTP) on the last, plus the exposed part of its TP, CP and EP collectives
(W has none; each taken as step._layer_work takes it), plus in B the recomputed forward: all of
it (full) or the ops of the recompute modules (``step.RECOMPUTE_MODULE_OPS``; selective alone:
core attention). All of that but the collectives depends on the shard (tp, cp, ep, etp, SP,
micro-batch) and the recompute mode only, so the sums over all stages are computed once per
shard, without the collectives:
F°, B°, W° ≤ the step's summed F, B, W (W° equal). Then

    step ≥ m · max over stages of (its layers' and ends' F° + B° + W°)
           + bubble(schedule, pp, m, (F°, B°, W°) / pp, vpp) + rest

(stages split as ``step.stage_layers`` splits them), because every bubble formula of
``pipeline.bubble_time_s`` grows with F and B at a fixed W, and ``rest`` is the least the other
parts can be: the pipeline sends the schedule waits for, as many as the step counts
(``schedule.pp_send_count``), each at its transfer time without the TP all-gather the scatter/gather
trick adds (``step._pp_exposed``), the embedding group's gradient all-reduce where the last
stage holds a copy of the embedding (``step.embedding_sync_s``, exposed whole; ``_sync_s``),
and stage 0's data-parallel tail, which the step's tail (a
maximum over stages, ``step._tail``) is at least: its first gradient bucket (and first parameter
gather with a distributed optimizer), exposed whatever the overlap (``step._dp_exposed``), plus
its Adam step over the dense shard (``step._optimizer_s``).

The step is also at least as long as its busiest link is busy (``step._busiest_link_s``, link
contention), so each bound is the larger of the sum above and a stage's NIC traffic: its
data-parallel collectives over groups that cross nodes (once per step, or per micro-batch under
ZeRO-2/3, ``_net_dp``) and its MoE layers' all-to-alls in every micro-batch's forward and backward
where the EP group crosses nodes (``_net_ep``). Both are part of what that stage's NIC carries,
and the step's busiest link carries at least that. The stages taken (``nic_stages``): stage 0,
and for a MoE model the stage with the most MoE layers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.ep.overlap import pipeline_problem, recompute_problem
from tpcalc.calc.layout.groups import (
    Group,
    MemoryTechniques,
    ParallelLayout,
    expert_dp_group,
    place_groups,
)
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import nodes_spanned
from tpcalc.calc.params.counts import (
    declared_params,
    embedding_params,
    final_norm_params,
    last_stage_extra_params,
    layer_params,
    lm_head_params,
    routed_layer_params,
)
from tpcalc.calc.pipeline.schedule import DUALPIPE_DIRECTIONS, pp_send_count
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
from tpcalc.calc.time.roofline import (
    Rates,
    collective_time_s,
    dispatch_time_s,
    expert_tp_time_s,
    moe_layer_overhead,
    op_time_s,
    rates,
)
from tpcalc.calc.time.step import (
    A2A_PER_PASS,
    ADAM_BYTES_PER_PARAM,
    DDP_BUCKET_MIN_PARAMS,
    DDP_BUCKET_PARAMS_PER_DP_RANK,
    KV_TENSORS,
    RECOMPUTE_MODULE_OPS,
    TP_GEMMS,
    TimeOptions,
    attention_pass_s,
    cp_ring_s,
    embedding_sync_s,
    exposed_s,
    gdn_cp_a2a_s,
    scatter_gather,
    scores_of,
    stage_layers,
)
from tpcalc.calc.tp.blocks import tp_blocks
from tpcalc.calc.tp.rules import padded_vocab
from tpcalc.choices import Recompute, RouterDtype, Schedule
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype

# A MoE layer's dispatch and combine run in its forward and again in its backward (step._layer_work)
A2A_PASSES = 2


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


class GroupTerms(NamedTuple):
    """The parts of ``StepBounds.group``'s bound that need no stage split: micro-batch counts
    [M, 1, 1], bubble + sends [V, M, S, R], the constant of stage 0's tail [V, Z] and each
    parameter group's hinges (A, d_a, C, d_c), each [V, Z, M]; and the most traffic through
    the NIC of any of the shape's NIC stages (``StepBounds.nic_stages``, ``_link_floor``), its
    data-parallel part and its all-to-all part added, [V, Z, M, S] (the same for every
    recompute mode)."""

    m: np.ndarray
    rest: np.ndarray
    const: np.ndarray
    hinges: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    nic: np.ndarray


class GroupParts(NamedTuple):
    """``StepBounds.group_parts``: a shape's terms, its stage splits (slowest, stage 0's
    forward, stage 0's total, each [V, 1, M, S, R]) and the sizes of Z, M and S·R."""

    terms: GroupTerms
    splits: tuple[np.ndarray, np.ndarray, np.ndarray]
    n_z: int
    n_m: int
    n_sr: int


class StepBounds:
    """Lower bounds on step time from cached per-shard op sums (module docstring)."""

    def __init__(
        self, spec: ModelSpec, hw: HardwareSpec, gpus_per_node: int, opts: TimeOptions,
        dtype: Dtype, seq: int, techniques: MemoryTechniques,
    ) -> None:  # fmt: skip
        self.spec, self.hw, self.node, self.opts = spec, hw, gpus_per_node, opts
        self.dtype, self.seq, self.tech = dtype, seq, techniques
        self._work: dict[tuple, ShardWork] = {}
        self._rest: dict[tuple, tuple[float, float, float]] = {}
        self._dp_parts: dict[tuple, tuple[float, float, int]] = {}
        self._stage_dense_of: dict[tuple, int] = {}
        self._layer_dense: list[int] = []
        self._expert_rest: dict[tuple, tuple] = {}
        self._expert_groups: dict[Shape, Group] = {}
        self._a2as: dict[tuple, float] = {}
        self._etps: dict[tuple, float] = {}
        self._shards: dict[tuple, Shard] = {}
        self._stage_experts_of: dict[tuple, int] = {}
        self._nic_stages: dict[tuple[int, int], tuple[int, ...]] = {}
        self._nic_row: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._rows: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._layer_ops: dict[tuple, tuple] = {}
        self._ends: dict[tuple, tuple] = {}
        self._end_parts: dict[tuple, tuple] = {}
        self._syncs: dict[tuple, float] = {}
        self.r = rates(hw, dtype, efficiency_scale=opts.efficiency_scale)
        # the rates without the collectives' latency: bandwidth terms alone (``ring_floor``)
        self.r_bandwidth = replace(
            self.r, collective_base_latency_s=0.0, intra_step_latency_s=0.0,
            inter_step_latency_s=0.0,
        )  # fmt: skip
        kinds: dict[tuple[str, bool], list[int]] = {}
        for i in range(spec.num_hidden_layers):
            kinds.setdefault((spec.resolved_layer_types[i], spec.is_moe_layer(i)), []).append(i)
        self.kinds = [(v[0], len(v), k[1]) for k, v in kinds.items()]  # (first, count, moe)
        self.kind_counts = np.array([float(c) for _, c, _ in self.kinds])
        self.moe_kinds = np.array([1.0 if moe else 0.0 for _, _, moe in self.kinds])  # [K]
        self.kind_index = [0] * spec.num_hidden_layers
        for k, layers in enumerate(kinds.values()):
            for i in layers:
                self.kind_index[i] = k
        self._stage_counts: dict[tuple[int, int], np.ndarray] = {}
        self._stacked: dict[tuple, tuple] = {}
        self._links: dict[tuple, dict] = {}
        self._sends: dict[tuple, float] = {}
        self._counts: dict[tuple, np.ndarray] = {}
        self._stage_rows: dict[tuple[int, int], tuple[np.ndarray, int, int, list[int]]] = {}
        self.shards = 0
        self._mode_key = ModeKeys()
        self._floors: dict[tuple, tuple[np.ndarray, ...]] = {}
        self._bucket_times: dict[tuple, tuple[float, float]] = {}
        self._moe_ops: dict[tuple, tuple] = {}
        self._shard_links: dict[tuple, dict] = {}
        self._dense_kind: dict[tuple, tuple] = {}
        self._tp_passes: dict[tuple, float] = {}
        self._cp_rings: dict[tuple, float] = {}
        self._gdn_a2as: dict[tuple, float] = {}
        self._attn: dict[tuple, tuple[float, float]] = {}
        self._end_lead: dict[tuple, tuple[float, float, float]] = {}
        self._ep_gaps: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._refusals: dict[tuple, np.ndarray] = {}
        self._full: dict[int, np.ndarray] = {}

    def work(self, shape: Shape, b: int, sp: bool) -> ShardWork:
        sp = sp and shape.tp > 1
        key = (shape.tp, shape.cp, shape.ep, shape.etp, sp, b)
        if key in self._work:
            return self._work[key]
        shard = self._shard(shape.tp, shape.cp, shape.ep, shape.etp, sp, b)
        links = self._shard_links_of(shape.tp, shape.cp, shape.ep, shape.etp)
        fs, bs, ws, names = [], [], [], []
        for k, (first, _, moe) in enumerate(self.kinds):
            f, bk, w, by_name = self._kind_entry(shard, k, first, moe, links)
            fs.append(f)
            bs.append(bk)
            ws.append(w)
            names.append(by_name)
        # the ends read ep and etp only through the MTP modules' MoE layer
        ends_key = (shape.tp, shape.cp, sp, b) + ((shape.ep, shape.etp) if self.tech.mtp else ())
        ends = self._ends.get(ends_key)
        if ends is None:
            ends = self._ends[ends_key] = self._end_passes(shard)
        out = ShardWork(np.array(fs), np.array(bs), np.array(ws), tuple(names), *ends)
        self.shards += 1
        self._work[key] = out
        return out

    def _shard(self, tp: int, cp: int, ep: int, etp: int, sp: bool, b: int) -> Shard:
        """The micro-batch's cut for one rank, made once per (tp, cp, ep, etp, sp, b)."""
        key = (tp, cp, ep, etp, sp, b)
        got = self._shards.get(key)
        if got is None:
            opts = self.opts
            got = self._shards[key] = Shard(
                seq=self.seq, micro_batch=b, tp=tp, cp=cp, ep=ep, etp=etp, sp=sp,
                dtype=Dtype.bf16, gemm_dtype=self.dtype, causal=opts.causal,
                fused_sinks=opts.fused_sinks, **scores_of(self.spec, self.tech),
            )  # fmt: skip
        return got

    def _shard_links_of(self, tp: int, cp: int, ep: int, etp: int) -> dict:
        """The tp, cp, ep and etp groups of a shard, placed once."""
        lkey = (tp, cp, ep, etp)
        links = self._shard_links.get(lkey)
        if links is None:
            links = self._shard_links[lkey] = place_groups(
                ParallelLayout(gpus_per_node=self.node, tp=tp, cp=cp, ep=ep, etp=etp)
            )
        return links

    def _kind_entry(
        self, shard: Shard, k: int, first: int, moe: bool, links: dict
    ) -> tuple[float, float, float, dict[str, float]]:
        """One layer of kind ``k`` on ``shard`` (``work``): F, B and W with its exposed TP and
        EP collectives, and its forward per op name."""
        r, ov = self.r, self.opts.overlap
        # a dense kind reads nothing of ep and etp but its TP group's placement
        # (``_kind_ops``, ``_tp_pass``): its sums are shared by every ep and etp
        dkey = (
            shard.tp, shard.cp, shard.sp, shard.micro_batch, k, links["tp"].nodes,
            links["cp"].nodes,
        )  # fmt: skip
        dense = None if moe else self._dense_kind.get(dkey)
        if dense is not None:
            return dense
        kf, kb, kw, gemm_f, gemm_b, by_name = self._kind_ops(shard, first, moe)
        if moe:  # the card's fitted cost of a MoE layer, in F and in B (step)
            over = moe_layer_overhead(r, shard.tokens)
            kf += over
            kb += over
        # exposed TP and EP collectives, as step._layer_work exposes them
        tp_pass = self._tp_pass(shard, moe, links["tp"].nodes)
        first_chunk = tp_pass / shard.tp
        sms = r.comm_sm_share
        ep_f = ep_b = 0.0
        if moe and (shard.ep > 1 or shard.etp > 1):
            a2a = self._dispatch(shard, links["ep"].nodes)
            # set explicitly by the planner (space.overlap); where the step refuses it (ep 1
            # but for DualPipe, ``refused``), ``ep_gaps`` adds back what this hides
            ep_on = bool(ov.ep_a2a)
            ep_f = exposed_s(a2a, kb + kw, ep_on, sm_share=sms)
            ep_b = exposed_s(a2a, kf, ep_on, sm_share=sms)
        cp_f, cp_b = self._cp_exposed(shard, first, links["cp"].nodes)
        out = (
            kf + exposed_s(tp_pass, gemm_f, ov.tp_comm, first_chunk, sm_share=sms) + ep_f + cp_f,
            kb + exposed_s(tp_pass, gemm_b, ov.tp_comm, first_chunk, sm_share=sms) + ep_b + cp_b,
            kw,
            by_name,
        )
        if not moe:
            self._dense_kind[dkey] = out
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
        experts, own, _ = self._experts(shard)  # shared by shards with the same s·b/cp
        rest = self._layer_ops.get(key)
        if rest is None:
            ops = layer_ops(self.spec, shard, first)
            cut = len(ops) - len(experts)
            if ops[cut:] != experts:  # not the mixer followed by moe_ops: no sharing
                return _op_sums(ops, self.r)
            rest = self._layer_ops[key] = _op_sums(ops[:cut], self.r)
        names = dict(rest[5])
        for n, t in own[5].items():
            names[n] = names.get(n, 0.0) + t
        return (*(x + y for x, y in zip(rest[:5], own[:5], strict=True)), names)

    def _experts(self, shard: Shard) -> tuple[tuple, tuple, tuple[tuple[int, float], ...]]:
        """The routed-expert ops of a MoE layer (``time.ops.moe_ops``: it reads the tokens,
        tp, sp, ep and etp of the shard, and its dtypes, fixed per search, so shards with the
        same s·b/cp share them), their ``_op_sums`` and their ``_timed`` pairs, each op timed
        once."""
        mkey = (shard.tokens, shard.tp, shard.sp, shard.ep, shard.etp)
        got = self._moe_ops.get(mkey)
        if got is None:
            ops_e = moe_ops(self.spec, shard)
            timed = self._timed(ops_e)
            got = self._moe_ops[mkey] = (ops_e, _op_sums(ops_e, self.r, timed), timed)
        return got

    def _end_passes(
        self, shard: Shard
    ) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
        """The first stage's ends (embedding) and the last stage's (final norm, head, loss and
        the MTP modules) by pass. Only the routed-expert ops of an MTP module's MoE layer read
        ep and etp (``time.ops.mtp_ops``: its ops before ``moe_ops``', then ``moe_ops``', then
        the head's), so the op times of the rest are taken once per (tp, cp, sp, micro-batch)
        and of the experts once per ``_kind_ops`` key, and the sums are folded over the same
        op times in the same order as ``_passes`` over the whole tuple: the same floats."""
        spec, opts = self.spec, self.opts
        key = (shard.tp, shard.cp, shard.sp, shard.micro_batch)
        parts = self._end_parts.get(key)
        if parts is None:
            padded = padded_vocab(spec.vocab_size, shard.tp, opts.vocab_pad_multiple)
            head = head_ops(spec, shard, padded)
            mtp = mtp_ops(spec, shard, padded) if self.tech.mtp and spec.mtp_layers else ()
            experts = moe_ops(spec, shard) if mtp and spec.is_moe else ()
            cut = len(mtp) - len(head) - len(experts)
            split = bool(experts) and cut >= 0 and mtp[cut:] == (*experts, *head)
            pre = self._timed(mtp[:cut]) if split else ()
            parts = self._end_parts[key] = (
                self._passes(embedding_ops(spec, shard)), self._timed(head), pre, split
            )  # fmt: skip
        first, head_t, pre_t, split = parts
        if not self.tech.mtp or not spec.mtp_layers:
            return first, _fold((0.0, 0.0, 0.0), head_t)
        if not split:  # not the mixer, moe_ops and the head: time the whole tuple
            padded = padded_vocab(spec.vocab_size, shard.tp, opts.vocab_pad_multiple)
            last = head_ops(spec, shard, padded)
            for _ in range(spec.mtp_layers):
                last += mtp_ops(spec, shard, padded)
            return first, self._passes(last)
        experts_t = self._experts(shard)[2]
        # the first MTP module's ops before its experts follow the head whatever ep and etp:
        # that fold is taken once per (tp, cp, sp, micro-batch), the same additions in order
        lead = self._end_lead.get(key)
        if lead is None:
            lead = self._end_lead[key] = _fold(_fold((0.0, 0.0, 0.0), head_t), pre_t)
        acc = _fold(_fold(lead, experts_t), head_t)
        for _ in range(spec.mtp_layers - 1):
            acc = _fold(_fold(_fold(acc, pre_t), experts_t), head_t)
        return first, acc

    def _timed(self, ops: tuple) -> tuple[tuple[int, float], ...]:
        """Each op's pass (0 forward, 1 backward-input, 2 weight-gradient, as ``_passes``
        sorts them) and time."""
        out = []
        for op in ops:
            t = op_time_s(op, self.r)
            out.append((0 if op.phase is Pass.forward else
                        1 if op.phase is Pass.backward_input else 2, t))  # fmt: skip
        return tuple(out)

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

    def _cp_exposed(self, shard: Shard, first: int, nodes: int) -> tuple[float, float]:
        """A layer's exposed CP ring in F and in B (step._layer_work: (cp − 1) steps of the
        rank's K and V chunk, dK and dV too in B, each pass hidden under its attention); a
        Gated DeltaNet layer's all-to-alls, exposed in each pass (``step.gdn_cp_a2a_s``); 0 at
        cp = 1. Both read the shard's tokens, tp, dtype and cp and the group's nodes; the
        attention times its tp, cp, SP and micro-batch only (a MoE layer's experts do not
        change them)."""
        if shard.cp == 1:
            return 0.0, 0.0
        rkey = (shard.tokens, shard.tp, shard.dtype, shard.cp, nodes)
        if self.spec.resolved_layer_types[first] == "linear_attention":
            a2a = self._gdn_a2as.get(rkey)
            if a2a is None:
                a2a = gdn_cp_a2a_s(self.spec, shard, self.r, nodes, self.opts.comm_scale)
                self._gdn_a2as[rkey] = a2a
            return a2a, a2a
        ring = self._cp_rings.get(rkey)
        if ring is None:
            ring = cp_ring_s(self.spec, shard, self.r, nodes, self.opts.comm_scale)
            self._cp_rings[rkey] = ring
        akey = (shard.tp, shard.cp, shard.sp, shard.micro_batch, first)
        attn = self._attn.get(akey)
        if attn is None:
            ops = layer_ops(self.spec, shard, first)
            attn = self._attn[akey] = (
                attention_pass_s(ops, Pass.forward, self.r),
                attention_pass_s(ops, Pass.backward_input, self.r),
            )
        on, sms = self.opts.overlap.cp_ring, self.r.comm_sm_share
        return (
            exposed_s(ring, attn[0], on, sm_share=sms),
            exposed_s(KV_TENSORS * ring, attn[1], on, sm_share=sms),
        )

    def _tp_pass(self, shard: Shard, moe: bool, nodes: int) -> float:
        """One pass's TP collectives of a layer (step._layer_work)."""
        if shard.tp == 1:
            return 0.0
        key = (shard.tokens, shard.tp, shard.sp, moe, nodes)
        got = self._tp_passes.get(key)
        if got is None:
            got = self._tp_passes[key] = self._tp_pass_of(shard, moe, nodes)
        return got

    def _tp_pass_of(self, shard: Shard, moe: bool, nodes: int) -> float:
        """``_tp_pass``, taken (it reads the shard's tokens, tp and sp only)."""
        h_bytes = shard.tokens * self.spec.hidden_size * shard.dtype.bytes * self.opts.comm_scale
        blocks = tp_blocks(self.spec, moe)
        if shard.sp:
            one = collective_time_s(self.r, Collective.all_gather, h_bytes, shard.tp, nodes)
            one += collective_time_s(self.r, Collective.reduce_scatter, h_bytes, shard.tp, nodes)
        else:
            one = collective_time_s(self.r, Collective.all_reduce, h_bytes, shard.tp, nodes)
        return blocks * one

    def _dispatch(self, shard: Shard, ep_nodes: int) -> float:
        """A MoE layer's dispatcher communication in one pass, as step._layer_work exposes it:
        the all-to-alls (``_a2a``, at ep > 1) and the expert-TP collectives (``_etp``)."""
        a2a = self._a2a(shard, shard.ep, ep_nodes) if shard.ep > 1 else 0.0
        return a2a + self._etp(shard)

    def _etp(self, shard: Shard) -> float:
        """A MoE layer's expert-TP gather and scatter in one pass (``roofline.expert_tp_time_s``
        over the etp adjacent ranks, ``groups.expert_tp_group``), 0 at etp = 1."""
        if shard.etp == 1:
            return 0.0
        key = (shard.tokens, shard.tp, shard.dtype, shard.etp)
        got = self._etps.get(key)
        if got is None:
            spec, scale = self.spec, self.opts.comm_scale
            got = self._etps[key] = expert_tp_time_s(
                self.r, shard.tokens // shard.tp * (spec.num_experts_per_tok or 1),
                spec.hidden_size * shard.dtype.bytes * scale,
                spec.hidden_size * RouterDtype(self.tech.router_dtype).bytes * scale,
                shard.etp, nodes_spanned(shard.etp, 1, self.node),
            )  # fmt: skip
        return got

    def _a2a(self, shard: Shard, ep: int, nodes: int) -> float:
        """A MoE layer's dispatch and combine in one pass, as step._layer_work prices them
        (``roofline.dispatch_time_s``: every copy, or once per remote node with a node-aware
        dispatcher, ``opts.ep_node_dedup``). The key is all it reads of the shard and the
        group; the rest (model, options, rates) is fixed for this object."""
        key = (shard.tokens, shard.tp, shard.dtype, ep, nodes)
        got = self._a2as.get(key)
        if got is None:
            spec = self.spec
            token_bytes = spec.hidden_size * shard.dtype.bytes * self.opts.comm_scale
            got = self._a2as[key] = A2A_PER_PASS * dispatch_time_s(
                self.r, shard.tokens // shard.tp, spec.num_experts_per_tok or 1,
                spec.n_routed_experts or 1, token_bytes, ep, nodes,
                node_dedup=self.opts.ep_node_dedup,
            )  # fmt: skip
        return got

    def ring_floor(self, shape: Shape, per_dp: int) -> float:
        """A floor on the step of every candidate of ``shape`` that makes ``per_dp`` sequences
        per data-parallel rank (any variant, micro-batch, SP, recompute mode and ZeRO stage):
        the seconds its CP ring keeps the ring's link busy. The step is at least that
        (``step._busiest_link_s``, module docstring). Each layer with attention sends its K, V
        chunk cp − 1 times in the forward and dK, dV too in the backward (``step._layer_work``):
        (1 + KV_TENSORS) · ``cp_ring_s`` per micro-batch, over m micro-batches of b sequences,
        m · b = per_dp; the busiest pipeline rank holds at least the mean of those layers, L/pp.
        Taken without the sends' latency, which only adds, so one ring of all per_dp sequences'
        tokens is the same bytes; recomputation only adds sends too. 0 when cp = 1."""
        if shape.cp == 1:
            return 0.0
        nodes = self._shard_links_of(shape.tp, shape.cp, shape.ep, shape.etp)["cp"].nodes
        shard = self._shard(shape.tp, shape.cp, shape.ep, shape.etp, False, per_dp)
        sends = cp_ring_s(self.spec, shard, self.r_bandwidth, nodes, self.opts.comm_scale)
        return self.spec.full_attention_layers / shape.pp * (1 + KV_TENSORS) * sends

    def dp_link_floor(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, zeros: list[int],
    ) -> np.ndarray:  # fmt: skip
        """A floor on the step of every candidate of ``shape`` with any of the variants ``vs``,
        per (ZeRO stage, micro-batch) [Z, M] (any SP, recompute mode): the seconds stage 0's
        data-parallel collectives over groups that cross nodes keep its NIC busy, once per
        step or for each of the m = per_dp / b micro-batches under ZeRO-2/3 (``_net_dp``),
        at the fewest parameters stage 0 holds under any of ``vs`` (a group's NIC seconds
        never fall as its parameters grow: more bytes per bucket up to the bucket cap, then
        more buckets). The step is at least its busiest link's time
        (``step._busiest_link_s``), and every bound takes ``_net_dp`` (``terms``), so the
        least of this over the entries that fit is at most every bound of the group: a ZeRO-3
        group that gathers a stage's weights over the network for every micro-batch can be
        left unbounded on it (``search._Search._defer``)."""
        mm = np.array([per_dp // b for b in mbs], dtype=np.float64)
        distributed = [z >= 1 for z in zeros]
        once, each = np.zeros(len(zeros)), np.zeros(len(zeros))
        parts = [(min(self.stage_dense(shape, v) for v in vs), self.links(shape)["dp"])]
        if self.spec.is_moe:
            experts = min(self.stage_experts(shape, v) for v in vs)
            if experts:
                parts.append((experts, self._expert_group(shape)))
        for params, group in parts:
            if group.nodes > 1:
                o, e = self._nic_rows(params, group, shape.dp, zeros, distributed)
                once, each = once + o, each + e
        return once[:, None] + each[:, None] * mm[None, :]

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

    def stage_rows(self, pp: int, vpp: int) -> tuple[np.ndarray, int, int, list[int]]:
        """``stage_counts``' distinct rows (most stages of a split hold the same layers),
        the row of the first stage and of the last, and the rows of the stages between."""
        key = (pp, vpp)
        got = self._stage_rows.get(key)
        if got is None:
            rows, inv = np.unique(self.stage_counts(pp, vpp), axis=0, return_inverse=True)
            inv = inv.ravel()
            got = self._stage_rows[key] = (
                rows, int(inv[0]), int(inv[-1]), sorted({int(u) for u in inv[1:-1]}),
            )  # fmt: skip
        return got

    def stage_dense(self, shape: Shape, v: Variant, stage: int = 0) -> int:
        """Dense parameters one rank of ``stage`` holds, as ``step._stage_params`` counts them:
        its layers' over TP, the embedding and declared parts on the first stage, the final
        norm and head on the last, and there the MTP modules' dense part and the embedding's
        copy; under DualPipe, rank ``stage``'s two stages' (``step.dualpipe_ranks``)."""
        key = (shape.pp, v.vpp, shape.tp, stage, _split_key(v)[1])
        got = self._stage_dense_of.get(key)
        if got is None:
            got = self._stage_dense_of[key] = sum(
                self._one_stage_dense(shape, v, s) for s in _rank_stages(shape.pp, v, stage)
            )
        return got

    def _one_stage_dense(self, shape: Shape, v: Variant, stage: int) -> int:
        """``stage_dense`` of the stage alone."""
        spec = self.spec
        layers = stage_layers(spec.num_hidden_layers, shape.pp, v.vpp)[stage]
        if not self._layer_dense:  # each layer's dense parameters, counted once
            self._layer_dense = [
                layer_params(spec, i) - routed_layer_params(spec, i)
                for i in range(spec.num_hidden_layers)
            ]
        dense = sum(self._layer_dense[i] for i in layers)
        if stage == 0:
            dense += embedding_params(spec) + declared_params(spec)
        if stage == shape.pp - 1:
            dense += lm_head_params(spec) + final_norm_params(spec)
            dense += last_stage_extra_params(spec, shape.pp, v.schedule, mtp=self.tech.mtp)[0]
        return dense // shape.tp

    def nic_stages(self, pp: int, vpp: int) -> tuple[int, ...]:
        """The pipeline stages whose NIC traffic the link floor takes (``_link_floor``; the
        step is at least every stage's busiest link, ``step._busiest_link_s``): stage 0, and
        for a MoE model the stage with the most MoE layers where that is another (the first
        of them). DeepSeek-V3's first three layers are dense, so at PP16 its stage 0 holds no
        expert and stage 1 four MoE layers: stage 0 alone left their all-to-alls and ZeRO-3's
        per-micro-batch expert gathers out of the floor. And the last stage where it holds
        parameters beyond its layers and head (``last_stage_extra_params``: MTP modules, a
        copy of the embedding): DeepSeek-V3's MTP module makes it the stage whose ZeRO-3
        gathers keep the NIC busiest."""
        key = (pp, vpp)
        got = self._nic_stages.get(key)
        if got is None:
            stages = {0}
            if self.spec.is_moe and pp > 1:
                stages.add(int(np.argmax(self.stage_counts(pp, vpp) @ self.moe_kinds)))
            # asked of a schedule whose ends are on different ranks: under DualPipe the last
            # rank holds less, and a stage's traffic is a floor either way
            apart = Schedule.one_f_one_b
            if pp > 1 and any(last_stage_extra_params(self.spec, pp, apart, mtp=self.tech.mtp)):
                stages.add(pp - 1)
            got = self._nic_stages[key] = tuple(sorted(stages))
        return got

    def dp_tail(self, shape: Shape, v: Variant, distributed: bool) -> tuple[float, float, float]:
        """(constant, A, C) of stage 0's dense parameters over the data-parallel group: the
        first bucket of the gradient reduction and parameter gather, exposed whatever the
        overlap, plus the Adam step (constant), and what is left of each to hide (``group``)."""
        key = (shape.tp, shape.cp, shape.pp, shape.dp, v.vpp, _split_key(v)[1], distributed)
        if key in self._rest:
            return self._rest[key]
        params = self.stage_dense(shape, v)
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
        key = (shape, _split_key(v), distributed)
        got = self._expert_rest.get(key)
        if got is None:
            params = self.stage_experts(shape, v)
            if not params:
                got = (0.0, -math.inf, -math.inf, None)
            else:
                group = self._expert_group(shape)
                got = self._collectives(params, group.size, group.nodes, shape.dp, distributed)
            self._expert_rest[key] = got
        return got

    def stage_experts(self, shape: Shape, v: Variant, stage: int = 0) -> int:
        """Routed-expert parameters one rank of ``stage`` holds (``step._stage_params``;
        under DualPipe its two stages', ``step.dualpipe_ranks``)."""
        key = (shape.pp, v.vpp, shape.ep * shape.etp, stage, _split_key(v)[1])
        got = self._stage_experts_of.get(key)
        if got is None:
            got = 0
            for s in _rank_stages(shape.pp, v, stage):
                layers = stage_layers(self.spec.num_hidden_layers, shape.pp, v.vpp)[s]
                routed = sum(routed_layer_params(self.spec, i) for i in layers)
                if s == shape.pp - 1:
                    routed += last_stage_extra_params(
                        self.spec, shape.pp, v.schedule, mtp=self.tech.mtp
                    )[1]
                got += routed // (shape.ep * shape.etp)
            self._stage_experts_of[key] = got
        return got

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
        # one bucket's collectives: the same for every stage split whose bucket is the cap
        ckey = (bucket, size, nodes, distributed)
        got = self._bucket_times.get(ckey)
        if got is None:
            grad = bucket * opts.grad_reduce_dtype.bytes * opts.comm_scale
            if distributed:
                param = bucket * Dtype.bf16.bytes * opts.comm_scale
                got = (
                    collective_time_s(r, Collective.reduce_scatter, grad, size, nodes),
                    collective_time_s(r, Collective.all_gather, param, size, nodes),
                )
            else:
                got = (collective_time_s(r, Collective.all_reduce, grad, size, nodes), 0.0)
            self._bucket_times[ckey] = got
        one, gather = got
        if ov.dp_grad_reduce:
            const, a = const + one, buckets * one - one
        else:
            const += buckets * one
        if ov.dp_param_gather:
            const, c = const + gather, buckets * gather - gather
        else:
            const += buckets * gather
        return const, a, c, (one, gather, buckets) if distributed else None

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
        """One stage-to-stage send of a micro-batch's activation (``step._pp_exposed``; its
        count per schedule and micro-batch count is ``schedule.pp_send_count``)."""
        if shape.pp == 1:
            return 0.0
        key = (shape.tp, shape.cp, shape.pp, shape.dp, b, sp and shape.tp > 1)
        if key not in self._sends:
            tokens = self.seq * b // shape.cp
            sp_tokens = tokens // shape.tp if sp and shape.tp > 1 else tokens
            msg = sp_tokens * self.spec.hidden_size * Dtype.bf16.bytes * self.opts.comm_scale
            nodes = min(2, self.links(shape)["pp"].nodes)
            if scatter_gather(self.opts, sp, shape.tp):  # 1/t each; the TP all-gather not counted
                msg /= shape.tp
            one = collective_time_s(self.r, Collective.p2p, msg, 2, nodes)
            self._sends[key] = one
        return self._sends[key]

    def stacked(
        self, shape: Shape, b: int, sp: bool, modes: list[RecomputeMode] | tuple[RecomputeMode, ...]
    ) -> tuple:
        """``stage`` of every mode of one shard (tp, cp, ep, etp, sp, micro-batch), whatever
        its pp: per-kind totals [R, K] and forwards [K], the ends' sums (first, last), their
        forwards (first, last), summed F, B [R] and W; ``_stacked_rows`` puts them in rows."""
        sp = sp and shape.tp > 1
        return self._stacked_of(shape, b, sp, modes, self._mode_key(modes))

    def _stacked_of(
        self, shape: Shape, b: int, sp: bool,
        modes: list[RecomputeMode] | tuple[RecomputeMode, ...], token: int,
    ) -> tuple:  # fmt: skip
        """``stacked`` with sp already off at tp 1 and the modes' key (``ModeKeys``) taken."""
        key = (shape.tp, shape.cp, shape.ep, shape.etp, sp, b, token)
        got = self._stacked.get(key)
        if got is None:
            # ``stage`` of every mode at once: the recomputed forward of each mode and kind is
            # a selection of the kind's forward op times by name (one product per kind)
            wk = self.work(shape, b, sp)
            kf = wk.kind_f
            rec = np.empty((len(modes), len(kf)))
            for k, by_name in enumerate(wk.kind_forward_by_name):
                pick, full = self._recompute_rows(modes, tuple(by_name))  # [R, names], [R]
                rec[:, k] = pick @ np.fromiter(by_name.values(), float, len(by_name))
                rec[full, k] = kf[k]
            counts = self.kind_counts
            fe, le = wk.first_end, wk.last_end
            got = self._stacked[key] = (
                kf + wk.kind_b + wk.kind_w + rec,
                kf,
                fe[0] + fe[1] + fe[2],  # sum(fe): the same additions in order
                le[0] + le[1] + le[2],
                fe[0],
                le[0],
                float(counts @ kf) + fe[0] + le[0],
                (wk.kind_b + rec) @ counts + fe[1] + le[1],
                float(counts @ wk.kind_w) + fe[2] + le[2],
            )
        return got

    def prime(
        self, tp: int, cp: int, sp: bool, b: int, pairs: list[tuple[int, int]],
        modes: list[RecomputeMode] | tuple[RecomputeMode, ...],
    ) -> None:  # fmt: skip
        """``stacked`` of the shards (tp, cp, ep, etp, sp, b) of every (ep, etp) of ``pairs``
        at once, cached as ``_stacked_of`` caches them: the same floats, bit for bit
        (``test_bounds_prime_is_the_shard_by_shard_sums_bit_for_bit``). Only a MoE layer's
        routed experts (and the MTP end's) read ep and etp: the rest of a shard is taken once
        for all of them and the experts' sums go over the pairs as arrays, each element by the
        additions ``work`` and ``_stacked_of`` make one shard at a time, in the same order. The
        matrix products stay one per shard (a batched product may sum in another order).
        Whatever does not share (pairs whose TP groups are placed on different node counts,
        layer ops that are not the mixer followed by ``moe_ops``, experts whose op names or
        passes differ) is left to ``_stacked_of``, shard by shard."""
        sp = sp and tp > 1
        token = self._mode_key(modes)
        todo = [
            pq for pq in dict.fromkeys(pairs) if (tp, cp, *pq, sp, b, token) not in self._stacked
        ]
        if len(todo) < 2:  # nothing to share: ``_stacked_of`` when asked
            return
        rows = self._batch(tp, cp, sp, b, todo, modes)
        if rows is None:
            return
        for (ep, etp), row in zip(todo, rows, strict=True):
            self._stacked[(tp, cp, ep, etp, sp, b, token)] = row
        self.shards += len(todo)

    def _batch(
        self, tp: int, cp: int, sp: bool, b: int, pairs: list[tuple[int, int]],
        modes: list[RecomputeMode] | tuple[RecomputeMode, ...],
    ) -> list[tuple] | None:  # fmt: skip
        """``prime``'s rows (``_stacked_of``'s tuple per pair), or None when the pairs do not
        share what ``prime`` shares: each layer kind's F, B, W and recompute rows, the dense
        kinds once for every pair (``_kind_entry``), the MoE kinds over the pairs
        (``_batch_moe_kind``), then the ends (``_batch_rows``)."""
        shards = [self._shard(tp, cp, ep, etp, sp, b) for ep, etp in pairs]
        links = [self._shard_links_of(tp, cp, ep, etp) for ep, etp in pairs]
        if any(x[g].nodes != links[0][g].nodes for x in links for g in ("tp", "cp")):
            return None
        n_p, n_r, n_k = len(pairs), len(modes), len(self.kinds)
        kf, kb, kw = np.empty((n_p, n_k)), np.empty((n_p, n_k)), np.empty((n_p, n_k))
        rec = np.empty((n_p, n_r, n_k))
        for k, (first, _, moe) in enumerate(self.kinds):
            if not moe:  # the same for every pair (``_kind_entry``)
                f, bk, w, by_name = self._kind_entry(shards[0], k, first, False, links[0])
                kf[:, k], kb[:, k], kw[:, k] = f, bk, w
                pick, full = self._recompute_rows(modes, tuple(by_name))
                rec[:, :, k] = pick @ np.fromiter(by_name.values(), float, len(by_name))
                rec[:, full, k] = f
                continue
            got = self._batch_moe_kind(shards, pairs, links, first, modes)
            if got is None:
                return None
            kf[:, k], kb[:, k], kw[:, k], rec[:, :, k] = got
        return self._batch_rows(shards, kf, kb, kw, rec)

    def _batch_moe_kind(
        self, shards: list[Shard], pairs: list[tuple[int, int]], links: list[dict],
        first: int, modes: list[RecomputeMode] | tuple[RecomputeMode, ...],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:  # fmt: skip
        """One MoE layer kind over the pairs: F, B, W [P] and the recompute rows [P, R], as
        ``_kind_ops`` (the rest of the layer + the pair's experts) and ``_kind_entry`` (the
        overhead and the exposed TP and EP collectives) take them one shard at a time; None
        when the layer is not the mixer followed by ``moe_ops`` or the experts' op names
        differ between pairs."""
        r, ov, s0 = self.r, self.opts.overlap, shards[0]
        self._kind_ops(s0, first, True)  # caches the layer's ops before the experts
        rest = self._layer_ops.get((s0.tp, s0.cp, s0.sp, s0.micro_batch, first))
        if rest is None:
            return None
        owns = [self._experts(s)[1] for s in shards]
        keys = tuple(owns[0][5])
        if any(tuple(o[5]) != keys for o in owns):
            return None
        own = np.array([o[:5] for o in owns])  # [P, 5]: F, B, W, TP GEMMs' F and B
        over = moe_layer_overhead(r, s0.tokens)  # the pairs' shards share s, b and cp
        f = rest[0] + own[:, 0] + over
        bk = rest[1] + own[:, 1] + over
        w = rest[2] + own[:, 2]
        gemm_f, gemm_b = rest[3] + own[:, 3], rest[4] + own[:, 4]
        tp_pass = self._tp_pass(s0, True, links[0]["tp"].nodes)  # reads tokens, tp and sp only
        first_chunk, sms = tp_pass / s0.tp, r.comm_sm_share
        ep_f, ep_b = np.zeros(len(pairs)), np.zeros(len(pairs))
        multi = [i for i, (ep, etp) in enumerate(pairs) if ep > 1 or etp > 1]
        if multi:
            a2a = np.array([self._dispatch(shards[i], links[i]["ep"].nodes) for i in multi])
            ep_on = bool(ov.ep_a2a)  # as ``_kind_entry`` takes it
            ep_f[multi] = _exposed_arr(a2a, (bk + w)[multi], ep_on, sm_share=sms)
            ep_b[multi] = _exposed_arr(a2a, f[multi], ep_on, sm_share=sms)
        tp_f = _exposed_arr(tp_pass, gemm_f, ov.tp_comm, first_chunk, sm_share=sms)
        tp_b = _exposed_arr(tp_pass, gemm_b, ov.tp_comm, first_chunk, sm_share=sms)
        cp_f, cp_b = self._cp_exposed(s0, first, links[0]["cp"].nodes)
        kf = f + tp_f + ep_f + cp_f
        names, by = _merged_forward(rest[5], keys, owns)
        pick, full = self._recompute_rows(modes, tuple(names))
        rec = np.empty((len(pairs), len(modes)))
        for i in range(len(pairs)):
            rec[i] = pick @ by[i]
            rec[i, full] = kf[i]
        return kf, bk + tp_b + ep_b + cp_b, w, rec

    def _batch_rows(
        self, shards: list[Shard], kf: np.ndarray, kb: np.ndarray, kw: np.ndarray,
        rec: np.ndarray,
    ) -> list[tuple]:  # fmt: skip
        """Each pair's ``_stacked_of`` tuple from its kinds' sums and the stage ends."""
        fe, le = self._batch_ends(shards)
        counts = self.kind_counts
        total = (kf + kb + kw)[:, None, :] + rec
        fe_sum = fe[0] + fe[1] + fe[2]
        le_sum = le[0] + le[1] + le[2]
        out = []
        for i in range(len(shards)):
            out.append((
                total[i],
                kf[i],
                fe_sum,
                float(le_sum[i]),
                fe[0],
                float(le[0][i]),
                float(counts @ kf[i]) + fe[0] + float(le[0][i]),
                (kb[i] + rec[i]) @ counts + fe[1] + float(le[1][i]),
                float(counts @ kw[i]) + fe[2] + float(le[2][i]),
            ))  # fmt: skip
        return out

    def _batch_ends(
        self, shards: list[Shard]
    ) -> tuple[tuple[float, float, float], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``_end_passes`` of shards that differ in ep and etp only: the first stage's ends
        (the same for all) and the last stage's F, B, W, each [P]: the MTP modules' routed
        experts folded over the pairs as arrays (``_fold``'s additions, in its order)."""
        s0, n_p = shards[0], len(shards)
        first, last0 = self._end_passes(s0)
        key = (s0.tp, s0.cp, s0.sp, s0.micro_batch)
        spec = self.spec
        split = self._end_parts[key][3]
        if not self.tech.mtp or not spec.mtp_layers:  # no MTP: no ep or etp in the ends
            return first, (np.full(n_p, last0[0]), np.full(n_p, last0[1]), np.full(n_p, last0[2]))
        ets = [self._experts(s)[2] for s in shards]
        phases = [ph for ph, _ in ets[0]]
        if not split or any([ph for ph, _ in e] != phases for e in ets):
            lasts = np.array([self._end_passes(s)[1] for s in shards])  # shard by shard
            return first, (lasts[:, 0], lasts[:, 1], lasts[:, 2])
        _, head_t, pre_t, _ = self._end_parts[key]
        times = np.array([[t for _, t in e] for e in ets])  # [P, expert ops]
        lead = self._end_lead[key]
        acc = [np.full(n_p, lead[0]), np.full(n_p, lead[1]), np.full(n_p, lead[2])]

        def experts() -> None:
            for j, ph in enumerate(phases):
                acc[ph] = acc[ph] + times[:, j]

        def fold(timed: tuple[tuple[int, float], ...]) -> None:
            for ph, t in timed:
                acc[ph] = acc[ph] + t

        experts()
        fold(head_t)
        for _ in range(spec.mtp_layers - 1):
            fold(pre_t)
            experts()
            fold(head_t)
        return first, (acc[0], acc[1], acc[2])

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

    def group(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], distributed: list[bool], zeros: list[int],
        at: np.ndarray, splits: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:  # fmt: skip
        """The bound (module docstring) of the candidates ``at`` (flat indices into
        [V, Z, M, S, R]) of every variant of ``vs`` at once, taken only where asked (the
        candidates that fit): m·N + bubble + sends + constant + hidden for N at least the
        slowest stage (``splits``), the bubble over the summed F°, B°, W° / p (``_bubble``);
        the constant holds stage 0's Adam step and the first bucket of its gradient reduction
        and parameter gather (``dp_tail``; the routed experts' over their own group,
        ``expert_tail``), and ``_least_exposed`` what is left of them to hide under stage 0's
        backward and forward. ZeRO-0/1 (or no overlap) hide them over the drain, d = 1 +
        (p−1)/vpp passes; ZeRO-2 reduce-scatters every micro-batch's gradients under its own
        backward and ZeRO-3 also gathers before every forward and backward
        (``step._dp_exposed``): m·buckets·(collective) − the first bucket, under m passes.
        The terms read the variant through its vpp and schedule only, so each is taken once
        per vpp (or schedule) and shared; ``splits``, if given, are the stage splits already
        taken for the same inputs (``group_parts``)."""
        parts = self.group_parts(shape, vs, mbs, per_dp, sps, modes, distributed, zeros, splits)
        return self.group_at(parts, at)

    def group_parts(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], distributed: list[bool], zeros: list[int],
        splits: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> GroupParts:  # fmt: skip
        """What ``group`` reads of the shape (its terms and the stage splits, or ``splits``
        if already taken for the same inputs), taken once so that the bounds of its
        candidates can be taken a few at a time (``group_at``)."""
        t = self.terms(shape, vs, mbs, per_dp, sps, modes, distributed, zeros)
        if splits is None:
            splits = self.splits(shape, vs, mbs, sps, modes)
        return GroupParts(t, splits, len(zeros), len(mbs), len(sps) * len(modes))

    @staticmethod
    def compute_floors(
        splits: tuple[np.ndarray, np.ndarray, np.ndarray], m: np.ndarray
    ) -> np.ndarray:
        """A floor on ``group``'s bound of every candidate of each (variant, micro-batch,
        sp·mode) cell [V, M, S·R] whose stage splits are ``splits`` (``splits``,
        [V, 1, M, S, R]) at ``m`` micro-batches per step [M] (the floats ``sums`` takes):
        m · the slowest stage, whatever its ZeRO stage. ``_least_exposed`` is at least m·N
        at N ≥ the slowest stage (every hinge adds max(floor ≥ 0, ·)) and the constant and
        bubble + sends are ≥ 0, so every bound is at least this, float sums and products
        being monotone (``floor_cuts`` drops the same terms)."""
        slowest = splits[0][:, 0]
        return (m[None, :, None, None] * slowest).reshape(slowest.shape[0], len(m), -1)

    def group_at(self, parts: GroupParts, at: np.ndarray) -> np.ndarray:
        """``group``'s bound of the candidates ``at`` from ``group_parts``: every step is
        elementwise over the candidates, so a candidate's bound does not depend on which
        others are taken with it (the same floats as one call over all of them)."""
        t, n_z, n_m, n_sr = parts.terms, parts.n_z, parts.n_m, parts.n_sr
        # flat indices of each candidate into [V, Z, M], [V, Z], [V, M, S, R] and [M]
        vzm, sr = np.divmod(at, n_sr)
        vz, im = np.divmod(vzm, n_m)
        cell = (vz // n_z * n_m + im) * n_sr + sr
        hinges = [(a.ravel()[vzm], da.ravel()[vzm], c.ravel()[vzm], dc.ravel()[vzm])
                  for a, da, c, dc in t.hinges]  # fmt: skip
        slowest, f0, total0 = (x.ravel()[cell] for x in parts.splits)
        hidden = _least_exposed(t.m.ravel()[im], slowest, f0, total0, hinges, self.r.comm_sm_share)
        bound = hidden + t.const.ravel()[vz] + t.rest.ravel()[cell]
        return np.maximum(bound, t.nic.ravel()[_per_sp(vzm, sr, n_sr, t.nic.shape[-1])])

    def floors(self, parts: GroupParts, fit_z: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """A lower bound on ``group``'s bound of every ZeRO stage of each cell ``cells``
        (flat indices into [V, M, S, R]) that fits, with no term per stage, from the shape's
        ``group_parts``: ``group``'s terms
        with each hinge's offsets (A, C) the least and its passes (d) the most of any stage
        that fits some cell of the (variant, micro-batch), ``fit_z`` [V, Z, M], and the least
        constant of those. What a hinge leaves exposed, max(0, A − d·(N − stage 0's pass)),
        only grows with A and falls with d (N ≥ the slowest stage ≥ stage 0's passes), and a
        superset of stages only lowers the least."""
        t, n_m, n_sr = parts.terms, parts.n_m, parts.n_sr
        vm = cells // n_sr
        im = vm % n_m
        inf = math.inf
        hinges = [
            (
                np.where(fit_z, a, inf).min(axis=1).ravel()[vm],
                np.where(fit_z, da, -inf).max(axis=1).ravel()[vm],
                np.where(fit_z, c, inf).min(axis=1).ravel()[vm],
                np.where(fit_z, dc, -inf).max(axis=1).ravel()[vm],
            )
            for a, da, c, dc in t.hinges
        ]  # fmt: skip
        const = np.where(fit_z, t.const[:, :, None], inf).min(axis=1).ravel()[vm]
        slowest, f0, total0 = (x.ravel()[cells] for x in parts.splits)
        hidden = _least_exposed(t.m.ravel()[im], slowest, f0, total0, hinges, self.r.comm_sm_share)
        floor = hidden + const + t.rest.ravel()[cells]
        return np.maximum(floor, _link_floor(t, fit_z, cells, vm, n_sr))

    def floor_cuts(self, parts: GroupParts, fit_z: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """A lower bound on ``floors`` of the same cells in a few operations each: m · the
        slowest stage + the least constant + bubble and sends. ``_least_exposed`` is at least
        m · N at its least N (every hinge adds max(0, ·) ≥ 0), N is at least the slowest
        stage, and float products and sums are monotone, so each cut is at most its floor as
        ``floors`` takes it (checked in ``test_cut_staircase_is_the_staircase``)."""
        t, n_m, n_sr = parts.terms, parts.n_m, parts.n_sr
        vm = cells // n_sr
        const = np.where(fit_z, t.const[:, :, None], math.inf).min(axis=1).ravel()[vm]
        slowest = parts.splits[0].ravel()[cells]
        cut = t.m.ravel()[vm % n_m] * slowest + const + t.rest.ravel()[cells]
        return np.maximum(cut, _link_floor(t, fit_z, cells, vm, n_sr))

    def terms(
        self, shape: Shape, vs: list[Variant], mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode], distributed: list[bool], zeros: list[int],
    ) -> GroupTerms:  # fmt: skip
        """``group``'s terms that need no stage split (``GroupTerms``): bubble + sends, stage
        0's tail constant and hinges per parameter group, and the NIC floor."""
        f_on, bi_on, w, sends, m = self.sums(shape, mbs, per_dp, sps, modes)
        bubble = self._bubbles(shape, vs, modes, f_on, bi_on, w, self.ep_gaps(shape, mbs, sps))
        # the terms read the variant's vpp and whether it is DualPipe only: taken once per
        # (vpp, DualPipe) (rows in the order first seen), then every variant takes its row
        # (copies of the same floats)
        firsts: dict[tuple[int, bool], Variant] = {}
        for v in vs:
            firsts.setdefault(_split_key(v), v)
        uniq = list(firsts.values())
        row_of = {key: u for u, key in enumerate(firsts)}
        inv = np.array([row_of[_split_key(v)] for v in vs], dtype=np.int64)
        const = np.zeros((len(uniq), len(zeros)))
        mm = m[None, None, :, 0, 0]  # [1, 1, M]
        groups = []
        for expert in (False, True) if self.spec.is_moe else (False,):
            a, da, c, dc = self._hinges(shape, uniq, zeros, distributed, mm, expert, const)
            groups.append((a[inv], da[inv], c[inv], dc[inv]))  # each [V, Z, M]
        # the traffic of every vpp's NIC stages (any stage's is a floor on every variant):
        # the data-parallel part [U, Z, M] and the all-to-all part [U, M, S] added
        a2a = self._net_ep(shape, uniq, mbs, sps, m)

        def traffic(stage: int) -> np.ndarray:
            dp = self._net_dp(shape, uniq, zeros, distributed, mm, stage)[..., None]
            if a2a is None:
                return np.broadcast_to(dp, (*dp.shape[:-1], len(sps)))
            per_layer, layers = a2a
            return dp + (layers[:, stage, None, None] * per_layer[None])[:, None]

        first, *more = sorted({s for u in uniq for s in self.nic_stages(shape.pp, u.vpp)})
        nic = np.array(traffic(first))
        for s in more:
            np.maximum(nic, traffic(s), out=nic)
        rest = self._send_counts(shape.pp, vs, m) * sends + bubble
        syncs = np.array([self._sync_s(shape, v.schedule) for v in vs])
        if syncs.any():  # the embedding group's all-reduce, exposed whole (step)
            rest = rest + syncs[:, None, None, None]
        return GroupTerms(m, rest, const[inv], groups, nic[inv])

    def _sync_s(self, shape: Shape, schedule: Schedule) -> float:
        """``step.embedding_sync_s`` of the shape under ``schedule`` (0 at pp = 1, under
        DualPipe, or where the last stage holds no copy of the embedding)."""
        key = (shape.tp, shape.cp, shape.pp, shape.dp, schedule)
        got = self._syncs.get(key)
        if got is None:
            got = self._syncs[key] = embedding_sync_s(
                self.spec, self.r, self.opts, tp=shape.tp, pp=shape.pp, schedule=schedule,
                mtp=self.tech.mtp, pp_nodes=self.links(shape)["pp"].nodes,
            )  # fmt: skip
        return got

    def _send_counts(self, p: int, vs: list[Variant], m: np.ndarray) -> np.ndarray:
        """The sends each variant's schedule waits for at each micro-batch count of ``m``
        (``schedule.pp_send_count``), [V, M, 1, 1]; taken once per (p, variants, counts)."""
        ns = tuple(int(n) for n in m[:, 0, 0])
        key = (p, tuple((v.schedule, v.vpp) for v in vs), ns)
        got = self._counts.get(key)
        if got is None:
            overlap = self.opts.overlap.pp_p2p
            got = self._counts[key] = np.array(
                [[pp_send_count(v.schedule, p, n, v.vpp, overlap=overlap) for n in ns] for v in vs],
                dtype=np.float64,
            )[:, :, None, None]
        return got

    def _bubbles(
        self, shape: Shape, vs: list[Variant], modes: list[RecomputeMode], f_on: np.ndarray,
        bi_on: np.ndarray, w: np.ndarray, gaps: tuple[np.ndarray, np.ndarray] | None,
    ) -> np.ndarray:  # fmt: skip
        """Each variant's bubble [V, M, S, R] over the mean stage's F, B and F + B + W, per
        pattern of refused modes (``refused``: none, all, or the modes'), each taken once:
        with the all-to-all exposed where refused."""
        p = shape.pp
        wp = w / p
        means: dict[bytes | None, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
            None: (f_on / p, bi_on / p, (f_on + bi_on + w) / p)
        }
        bubble = np.empty((len(vs), *f_on.shape))
        seen: dict[Variant, int] = {}
        for i, v in enumerate(vs):
            if v in seen:
                bubble[i] = bubble[seen[v]]
                continue
            seen[v] = i
            refused = self._refused_where(gaps, shape, v, modes)
            pattern = None if refused is None else refused.tobytes()
            if pattern not in means and gaps is not None and refused is not None:
                # every layer's all-to-all, where refused
                at = refused[None, None, :]
                counts = self.kind_counts
                df, db = (gaps[0] @ counts)[..., None], (gaps[1] @ counts)[..., None]
                again = self._full_modes(modes)[None, None, :] * df  # the recomputed forward
                f = np.where(at, f_on + df, f_on)
                bi = np.where(at, bi_on + (db + again), bi_on)
                means[pattern] = (f / p, bi / p, (f + bi + w) / p)
            fp, bp, mean = means[pattern]
            bubble[i] = _bubble(v, p, fp, bp, wp, mean)
        return bubble

    def _hinges(
        self, shape: Shape, uniq: list[Variant], zeros: list[int], distributed: list[bool],
        mm: np.ndarray, expert: bool, const: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """One parameter group's hinges (A, d_a, C, d_c) [U, Z, M] for each vpp of ``uniq``
        and ZeRO stage, stage 0's tail constant added into ``const`` [U, Z] (``group``'s
        docstring: ZeRO-0/1 hide over the drain, ZeRO-2/3 per micro-batch)."""
        p, ov = shape.pp, self.opts.overlap
        n_u, n_z = len(uniq), len(zeros)
        a0, c0, d = (np.empty((n_u, n_z)) for _ in range(3))
        ga, gc = np.zeros((n_u, n_z), bool), np.zeros((n_u, n_z), bool)
        per_pass, one, gathers, gather = (np.zeros((n_u, n_z)) for _ in range(4))
        for i, v in enumerate(uniq):
            dv = 1 + (p - 1) / v.vpp
            key = (shape.tp, shape.cp, shape.pp, shape.dp, v.vpp, _split_key(v)[1], True)
            tails: dict[bool, tuple] = {}  # the tails read the stage only as ZeRO >= 1
            for j, (z, dist) in enumerate(zip(zeros, distributed, strict=True)):
                if dist not in tails:
                    if expert:
                        tails[dist] = self.expert_tail(shape, v, dist)
                    else:
                        tails[dist] = (*self.dp_tail(shape, v, dist), self._dp_parts.get(key))
                k, a0[i, j], c0[i, j], parts = tails[dist]
                const[i, j] += k
                d[i, j] = dv
                if z < 2 or parts is None:
                    continue
                o, g, buckets = parts
                if ov.dp_grad_reduce:  # ZeRO-2/3: per micro-batch (docstring)
                    ga[i, j], one[i, j] = True, o
                    per_pass[i, j] = buckets * (o + (g if z >= 3 else 0.0))
                if z >= 3 and ov.dp_param_gather:
                    gc[i, j], gathers[i, j], gather[i, j] = True, buckets * g, g
        a_z = np.where(ga[..., None], mm * per_pass[..., None] - one[..., None], a0[..., None])
        da = np.where(ga[..., None], mm, d[..., None])
        c_z = np.where(gc[..., None], mm * gathers[..., None] - gather[..., None], c0[..., None])
        dc = np.where(gc[..., None], mm, d[..., None])
        return a_z, da, c_z, dc

    def _net_dp(
        self, shape: Shape, uniq: list[Variant], zeros: list[int], distributed: list[bool],
        mm: np.ndarray, stage: int = 0,
    ) -> np.ndarray:  # fmt: skip
        """Seconds ``stage``'s data-parallel collectives keep its NIC busy in a step [U, Z, M]
        (``step._dp_exposed``'s totals of the groups that cross nodes: once per step, or per
        micro-batch under ZeRO-2/3), for each vpp of ``uniq``."""
        once = np.zeros((len(uniq), len(zeros)))  # per step
        each = np.zeros((len(uniq), len(zeros)))  # per micro-batch
        for i, v in enumerate(uniq):
            for params, group in self._dp_groups(shape, v, stage):
                if group.nodes > 1:
                    o, e = self._nic_rows(params, group, shape.dp, zeros, distributed)
                    once[i] += o
                    each[i] += e
        return once[:, :, None] + each[:, :, None] * mm[0, 0][None, None, :]

    def _nic_rows(
        self, params: int, group: Group, dp: int, zeros: list[int], distributed: list[bool]
    ) -> tuple[np.ndarray, np.ndarray]:
        """One parameter group's NIC seconds for each ZeRO stage [Z] (``_net_dp``): once per
        step and per micro-batch. Shared by every shape with the same parameters and group."""
        key = (params, group.size, group.nodes, dp, tuple(zeros), tuple(distributed))
        got = self._nic_row.get(key)
        if got is None:
            once, each = np.zeros(len(zeros)), np.zeros(len(zeros))
            per_dist = {
                dist: self._collectives(params, group.size, group.nodes, dp, dist)[3]
                for dist in set(distributed)
            }
            for j, (z, dist) in enumerate(zip(zeros, distributed, strict=True)):
                parts = per_dist[dist]
                if parts is None:
                    continue
                one, gather, buckets = parts
                if z >= 3:
                    each[j] = buckets * (one + 2 * gather)
                elif z == 2:
                    once[j] = buckets * gather
                    each[j] = buckets * one
                else:
                    once[j] = buckets * (one + gather)
            got = self._nic_row[key] = (once, each)
        return got

    def _dp_groups(self, shape: Shape, v: Variant, stage: int = 0) -> list[tuple[int, Group]]:
        """A stage's dense and routed-expert parameters with the group each is reduced over."""
        out = [(self.stage_dense(shape, v, stage), self.links(shape)["dp"])]
        experts = self.stage_experts(shape, v, stage) if self.spec.is_moe else 0
        if experts:
            out.append((experts, self._expert_group(shape)))
        return out

    def _expert_group(self, shape: Shape) -> Group:
        """The routed experts' data-parallel group; it reads the shape only, so it is placed
        once for every vpp and ZeRO stage."""
        group = self._expert_groups.get(shape)
        if group is None:
            group = self._expert_groups[shape] = expert_dp_group(
                ParallelLayout(
                    gpus_per_node=self.node, tp=shape.tp, cp=shape.cp, pp=shape.pp,
                    dp=shape.dp, ep=shape.ep, etp=shape.etp,
                )
            )  # fmt: skip
        return group

    def _net_ep(
        self, shape: Shape, uniq: list[Variant], mbs: list[int], sps: list[bool], m: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """What a stage's EP all-to-alls keep its NIC busy in a step: the dispatch and combine
        of each of its MoE layers in every micro-batch's forward and backward
        (``step._layer_work``; a recomputed forward's are left out), as seconds per MoE layer
        [M, S] and each vpp's MoE layers per stage [U, stages]; None where the EP group stays
        in a node (or there is none)."""
        if not self.spec.is_moe or shape.ep == 1:
            return None
        nodes = self._shard_links_of(shape.tp, shape.cp, shape.ep, shape.etp)["ep"].nodes
        if nodes <= 1:
            return None
        per_layer = np.zeros((len(mbs), len(sps)))
        for a, b in enumerate(mbs):
            for c, sp in enumerate(sps):
                shard = self._shard(shape.tp, shape.cp, shape.ep, shape.etp, sp and shape.tp > 1, b)
                per_layer[a, c] = m[a, 0, 0] * A2A_PASSES * self._a2a(shard, shape.ep, nodes)
        layers = np.array([self._rank_moe_layers(shape.pp, v) for v in uniq])
        return per_layer, layers

    def _rank_moe_layers(self, pp: int, v: Variant) -> np.ndarray:
        """MoE layers per micro-batch on each pipeline rank [pp]: its stage's, or for DualPipe
        the mean of its two stages' (``step.dualpipe_ranks``: half the micro-batches each)."""
        layers = self.stage_counts(pp, v.vpp) @ self.moe_kinds
        if v.schedule is Schedule.dualpipe and pp > 1:
            return _paired_ranks(layers)
        return layers

    def refused(self, shape: Shape, v: Variant, modes: list[RecomputeMode]) -> np.ndarray:
        """Which modes [R] run the EP all-to-all exposed on this variant though the search
        overlaps it: where Megatron-Core refuses the overlap (``step.ep_overlap_problem``: ep 1
        (its expert-TP collectives then stay exposed), pp > 1 without vpp, full recompute, the
        moe module; DualPipe overlaps by its own schedule). The run's set-up (dispatcher, MTP)
        is settled for the whole search (``space.overlap``)."""
        no_ep = shape.ep == 1
        key = (shape.pp, v.vpp, v.schedule, self._mode_key(modes), no_ep, "refused")
        got = self._refusals.get(key)
        if got is None:
            if v.schedule is Schedule.dualpipe or not self.opts.overlap.ep_a2a:
                got = np.zeros(len(modes), dtype=bool)
            elif no_ep or pipeline_problem(shape.pp, v.vpp) is not None:
                got = np.ones(len(modes), dtype=bool)
            else:
                got = np.array(
                    [recompute_problem(m.recompute is Recompute.full, m.modules, None) is not None
                     for m in modes], dtype=bool,
                )  # fmt: skip
            self._refusals[key] = got
        return got

    def _refused_where(
        self, gaps: tuple[np.ndarray, np.ndarray] | None, shape: Shape, v: Variant,
        modes: list[RecomputeMode],
    ) -> np.ndarray | None:  # fmt: skip
        """``refused`` where the overlap hides something (``ep_gaps`` not None) and some mode
        of the variant is refused, else None: the sums then stay as ``work`` took them."""
        if gaps is None:
            return None
        refused = self.refused(shape, v, modes)
        return refused if refused.any() else None

    def _full_modes(self, modes: list[RecomputeMode]) -> np.ndarray:
        """1.0 for each mode [R] that recomputes whole layers (full), else 0.0."""
        key = self._mode_key(modes)
        got = self._full.get(key)
        if got is None:
            got = np.array([m.recompute is Recompute.full for m in modes], dtype=np.float64)
            self._full[key] = got
        return got

    def _moe_passes(self, shard: Shard, first: int) -> tuple[float, float, float]:
        """``_kind_ops(shard, first, True)``'s F, B, W (the same additions), without its
        per-name forward: the rest of the layer's sums plus the experts' own."""
        experts, own, _ = self._experts(shard)
        rest = self._layer_ops.get((shard.tp, shard.cp, shard.sp, shard.micro_batch, first))
        if rest is None:  # not taken yet, or not shareable: as ``_kind_ops`` takes it
            f, b, w = self._kind_ops(shard, first, True)[:3]
            return f, b, w
        return rest[0] + own[0], rest[1] + own[1], rest[2] + own[2]

    def ep_gaps(
        self, shape: Shape, mbs: list[int], sps: list[bool]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """What the EP all-to-all adds to one layer of each kind, in F and in B [M, S, K],
        where the overlap is refused (``refused``): the part ``work`` takes as hidden, the
        all-to-all less its exposed part, over the same passes ``_kind_entry`` hides it under.
        None when the search hides none (EP overlap off, ep and etp 1)."""
        if not self.opts.overlap.ep_a2a or not self.spec.is_moe or shape.ep == shape.etp == 1:
            return None
        key = (shape.tp, shape.cp, shape.ep, shape.etp, tuple(mbs), tuple(sps))
        got = self._ep_gaps.get(key)
        if got is None:
            sms = self.r.comm_sm_share
            links = self._shard_links_of(shape.tp, shape.cp, shape.ep, shape.etp)
            df = np.zeros((len(mbs), len(sps), len(self.kinds)))
            db = np.zeros_like(df)
            for i, b in enumerate(mbs):
                for j, sp in enumerate(sps):
                    shard = self._shard(
                        shape.tp, shape.cp, shape.ep, shape.etp, sp and shape.tp > 1, b
                    )
                    a2a = self._dispatch(shard, links["ep"].nodes)
                    over = moe_layer_overhead(self.r, shard.tokens)
                    for k, (first, _, moe) in enumerate(self.kinds):
                        if moe:
                            kf, kb, kw = self._moe_passes(shard, first)
                            df[i, j, k] = a2a - exposed_s(a2a, kb + over + kw, True, sm_share=sms)
                            db[i, j, k] = a2a - exposed_s(a2a, kf + over, True, sm_share=sms)
            got = self._ep_gaps[key] = (df, db)
        return got

    def splits(
        self, shape: Shape, vs: list[Variant], mbs: list[int], sps: list[bool],
        modes: list[RecomputeMode],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """The slowest stage's F° + B° + W°, stage 0's F° and stage 0's total of every
        variant at once, each [V, 1, M, S, R]: the per-kind sums of every (micro-batch, sp,
        mode) times each vpp's layers per stage (``stage_counts``, as ``step.stage_layers``
        splits them), the ends on the first and last stage; a DualPipe rank's, the mean of
        its two stages (``_dualpipe_split``), rows shared by variants alike (``_split_key``)."""
        kind_on, kind_f_on, first, last, first_f = self.kind_arrays(shape, mbs, sps, modes)
        gaps = self.ep_gaps(shape, mbs, sps)
        n_v = len(vs)
        out = (
            np.empty((n_v, 1, *first.shape)),
            np.empty((n_v, 1, *first.shape)),
            np.empty((n_v, 1, *first.shape)),
        )
        done: dict[tuple[int, bool, bytes | None], int] = {}
        exposed: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        for i, v in enumerate(vs):
            refused = self._refused_where(gaps, shape, v, modes)
            pattern = None if refused is None else refused.tobytes()  # none, all, the modes'
            key = (*_split_key(v), pattern)
            if key in done:
                for x in out:
                    x[i] = x[done[key]]
                continue
            done[key] = i
            kind, kind_f = kind_on, kind_f_on
            if gaps is not None and refused is not None and pattern is not None:
                # the all-to-all exposed where refused, taken once per pattern
                if pattern not in exposed:
                    at = refused[None, None, :, None]
                    df, db = gaps[0][:, :, None, :], gaps[1][:, :, None, :]
                    # full recompute re-runs the forward, its all-to-all included (step._stage)
                    again = self._full_modes(modes)[None, None, :, None] * df
                    exposed[pattern] = (
                        np.where(at, kind_on + (df + db + again), kind_on),
                        np.where(at, kind_f_on + df, kind_f_on),
                    )
                kind, kind_f = exposed[pattern]
            counts = self.stage_counts(shape.pp, v.vpp)  # [stages, K]
            if v.schedule is Schedule.dualpipe and shape.pp > 1:
                last_f = self._stacked_rows(shape, mbs, sps, modes)[8]
                ends = (first, last, first_f, last_f)
                out[0][i, 0], out[1][i, 0], out[2][i, 0] = _dualpipe_split(
                    kind, kind_f, counts, ends
                )
                continue
            rows, at_first, at_last, middle = self.stage_rows(shape.pp, v.vpp)
            per = kind @ rows.T  # [M, S, R, distinct rows]: a stage's sums are its row's
            stage0 = out[2][i, 0]
            np.add(per[..., at_first], first, out=stage0)
            if shape.pp == 1:
                stage0 += last
            # the slowest stage: stage 0, the last, and each distinct row of the others (a
            # maximum is exact: the same value, bit for bit, in any order)
            slowest = out[0][i, 0]
            np.copyto(slowest, stage0)
            if shape.pp > 1:
                np.maximum(slowest, per[..., at_last] + last, out=slowest)
            for u in middle:
                np.maximum(slowest, per[..., u], out=slowest)
            out[1][i, 0] = kind_f @ counts[0] + first_f
        return out

    def kind_arrays(
        self, shape: Shape, mbs: list[int], sps: list[bool], modes: list[RecomputeMode]
    ) -> tuple[np.ndarray, ...]:
        """``stacked``'s per-kind totals and forwards [M, S, R, K] and ends [M, S, R] (first,
        last, first stage's forward) of every (micro-batch, sp)."""
        return self._stacked_rows(shape, mbs, sps, modes)[:5]

    def _stacked_rows(
        self, shape: Shape, mbs: list[int], sps: list[bool], modes: list[RecomputeMode]
    ) -> tuple[np.ndarray, ...]:
        """Every array of ``stacked`` over (micro-batch, sp): [M, S, ...]."""
        key = (shape, tuple(mbs), tuple(sps), self._mode_key(modes), "stacked")
        got = self._floors.get(key)
        if got is None:
            token = self._mode_key(modes)
            sps_on = [sp and shape.tp > 1 for sp in sps]
            rows = [self._stacked_of(shape, b, sp, modes, token) for b in mbs for sp in sps_on]
            n_m, n_s, n_r = len(mbs), len(sps), len(modes)
            total = np.array([x[0] for x in rows]).reshape(n_m, n_s, n_r, -1)
            kind_f = np.array([x[1] for x in rows]).reshape(n_m, n_s, 1, -1)
            # the ends and W: one number per shard, the same for every mode
            ends = np.array([x[2:7] + (x[8],) for x in rows]).reshape(n_m, n_s, 1, 6)
            first_f = ends[..., 2] + ends[..., 3] if shape.pp == 1 else ends[..., 2]
            each = (n_m, n_s, n_r)
            got = (
                total,
                np.broadcast_to(kind_f, total.shape),
                np.broadcast_to(ends[..., 0], each),
                np.broadcast_to(ends[..., 1], each),
                np.broadcast_to(first_f, each),
                np.broadcast_to(ends[..., 4], each),
                np.array([x[7] for x in rows]).reshape(each),
                np.broadcast_to(ends[..., 5], each),
                np.broadcast_to(ends[..., 3], each),  # the last stage's ends' forward
            )
            self._floors[key] = got
        return got

    def sums(
        self, shape: Shape, mbs: list[int], per_dp: int, sps: list[bool],
        modes: list[RecomputeMode],
    ) -> tuple[np.ndarray, ...]:  # fmt: skip
        """Summed F°, B°, W° [M, S, R], one pipeline send [M, S, 1] and the micro-batch counts
        [M, 1, 1] of a shape (``group``)."""
        key = (shape, tuple(mbs), tuple(sps), self._mode_key(modes))
        got = self._floors.get(key)
        if got is None:
            f, bi, w = self._stacked_rows(shape, mbs, sps, modes)[5:8]
            sends = np.array([[[self.pp_sends(shape, b, sp)] for sp in sps] for b in mbs])
            m = np.array([per_dp // b for b in mbs], dtype=np.float64)[:, None, None]
            got = (f, bi, w, sends, m)
            self._floors[key] = got
        return got


def _split_key(v: Variant) -> tuple[int, bool]:
    """What a group's terms and splits read of a variant: its vpp, and whether DualPipe pairs
    its stages (``_dualpipe_split``); variants alike in both share their rows."""
    return v.vpp, v.schedule is Schedule.dualpipe


def _rank_stages(p: int, v: Variant, rank: int) -> tuple[int, ...]:
    """The pipeline stages whose parameters rank ``rank`` holds: its own, and under DualPipe
    (p even, ``space.pipeline_rule``) also stage p−1−rank (``step.dualpipe_ranks``)."""
    if v.schedule is Schedule.dualpipe and p > 1:
        return (rank, p - 1 - rank)
    return (rank,)


def _dualpipe_split(
    kind: np.ndarray, kind_f: np.ndarray, counts: np.ndarray, ends: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``StepBounds.splits`` of a DualPipe variant: the slowest rank's F° + B° + W°, rank 0's F°
    and rank 0's total [M, S, R]. Rank r runs stages r and p−1−r, half the micro-batches each
    (``step.dualpipe_ranks``), so each rank's pass is the mean of its two stages' (``ends``:
    the first stage's and the last's totals, then their forwards)."""
    first, last, first_f, last_f = ends
    per = kind @ counts.T  # [M, S, R, stages]: each stage's layers
    per[..., 0] += first
    per[..., -1] += last
    ranks = _paired_ranks(per)
    half = 1 / DUALPIPE_DIRECTIONS
    f0 = kind_f @ counts[0] + first_f
    f_last = kind_f @ counts[-1] + last_f
    return ranks.max(axis=-1), f0 * half + f_last * half, ranks[..., 0]


def _paired_ranks(per_stage: np.ndarray) -> np.ndarray:
    """Per DualPipe rank, from per-stage values on the last axis: rank r runs stages r and
    p−1−r, half the micro-batches each (DeepSeek-V3 report §3.2.1), so it carries their mean."""
    half = 1 / DUALPIPE_DIRECTIONS
    return per_stage * half + per_stage[..., ::-1] * half


def _fold(
    acc: tuple[float, float, float], timed: tuple[tuple[int, float], ...]
) -> tuple[float, float, float]:
    """``StepBounds._passes`` continued over more ops (``_timed``): each pass's sum takes its
    ops' times one after another, in order."""
    sums = list(acc)
    for phase, t in timed:
        sums[phase] += t
    return sums[0], sums[1], sums[2]


def _op_sums(
    ops: tuple, r: Rates, timed: tuple[tuple[int, float], ...] | None = None
) -> tuple[float, float, float, float, float, dict[str, float]]:
    """Op times by pass: F, B, W, the TP GEMMs' F and B, and F per op name (``timed``: the
    ops' times already taken, ``StepBounds._timed``)."""
    kf = kb = kw = gemm_f = gemm_b = 0.0
    by_name: dict[str, float] = {}
    for i, op in enumerate(ops):
        t = op_time_s(op, r) if timed is None else timed[i][1]
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


def _merged_forward(
    rest_names: dict[str, float], keys: tuple[str, ...], owns: list[tuple]
) -> tuple[list[str], np.ndarray]:
    """The forward per op name of one MoE kind for each pair [P, names]: the rest's names,
    then the experts' new ones, each name's time rest + own (0.0 + own for a new name), as
    ``_kind_ops`` merges them."""
    at = {n: j for j, n in enumerate(keys)}
    names = list(rest_names) + [n for n in keys if n not in rest_names]
    vals = np.array([list(o[5].values()) for o in owns])  # [P, own names]
    by = np.empty((len(owns), len(names)))
    for j, n in enumerate(names):
        by[:, j] = rest_names.get(n, 0.0) + vals[:, at[n]] if n in at else rest_names[n]
    return names, by


def _least(
    m: np.ndarray, lo: np.ndarray, hinges: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> np.ndarray:
    """min over N >= lo of m·N + Σ max(floor, x − d·N) for hinges (x, d, floor), d > 0:
    convex and piecewise linear in N, so least at lo or at a hinge's break (x − floor)/d above
    it. A hinge whose x is −inf and whose floor is 0 everywhere (nothing left to hide) adds 0 at
    every N and its point is lo: it is left out, the same floats. Each N's sum is taken in
    place, in the same order."""
    hinges = [(x, d, fl) for x, d, fl in hinges if not (np.all(np.isneginf(x)) and not np.any(fl))]
    size = np.broadcast_shapes(m.shape, lo.shape, *(x.shape for x, _, _ in hinges),
                               *(d.shape for _, d, _ in hinges))  # fmt: skip
    tmp = np.empty(size)

    def at(n: np.ndarray) -> np.ndarray:
        h = np.multiply(m, n, out=np.empty(size))
        for x, d, fl in hinges:
            np.multiply(d, n, out=tmp)
            np.subtract(x, tmp, out=tmp)
            np.maximum(fl, tmp, out=tmp)
            np.add(h, tmp, out=h)
        return h

    best = at(lo)
    for x, d, fl in hinges:
        np.minimum(best, at(np.maximum(lo, (x - fl) / d)), out=best)
    return best


def _link_floor(
    t: GroupTerms, fit_z: np.ndarray, cells: np.ndarray, vm: np.ndarray, n_sr: int
) -> np.ndarray:
    """The least NIC traffic (``GroupTerms.nic``) of the cells ``cells`` (flat into
    [V, M, S, R], ``vm`` their (variant, micro-batch)) over every ZeRO stage that fits some
    cell of their (variant, micro-batch)."""
    least = np.where(fit_z[..., None], t.nic, math.inf).min(axis=1)  # [V, M, S]
    return least.ravel()[_per_sp(vm, cells % n_sr, n_sr, t.nic.shape[-1])]


def _per_sp(rows: np.ndarray, sr: np.ndarray, n_sr: int, n_s: int) -> np.ndarray:
    """Flat indices into [rows, S] of candidates at ``rows`` whose (sp, mode) index into
    [S, R] is ``sr``: ``GroupTerms.nic`` is the same for every recompute mode."""
    return rows * n_s + sr // (n_sr // n_s)


def _least_exposed(
    m: np.ndarray, slowest: np.ndarray, f0: np.ndarray, total0: np.ndarray,
    groups: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], sm_share: float,
) -> np.ndarray:  # fmt: skip
    """A lower bound on min over N ≥ ``slowest`` of m·N plus what each group's gradient
    reduction (A, hidden under stage 0's backward, at most N − its forward ``f0``, times d_a)
    and parameter gather (C, under its forward, at most N − its backward) leave exposed,
    groups (``group``: dense, experts) adding up as ``step._dp_exposed`` adds them. Each
    leaves at least the SM share s of what it hides (``step.exposed_s``): s·A, s·C.
    Each group's two also hide under passes adding up to at most N, so they leave at least
    max(s·(A + C), A + C − max(d_a, d_c)·N) (the joint term). The bound is the larger of the
    least with the terms apart and the least with the joint terms (each a lower bound on the
    step)."""
    apart, joint = [], []
    for a_z, da, c_z, dc in groups:
        fa, fc = sm_share * np.maximum(a_z, 0.0), sm_share * np.maximum(c_z, 0.0)
        apart += [(a_z + da * f0, da, fa), (c_z + dc * (total0 - f0), dc, fc)]
        joint.append((a_z + c_z, np.maximum(da, dc), fa + fc))  # x −inf unless both overlap
    return np.maximum(_least(m, slowest, apart), _least(m, slowest, joint))


def _exposed_arr(
    comm_s: float | np.ndarray,
    hidden_s: np.ndarray,
    overlapped: bool,
    first_s: float = 0.0,
    *,
    sm_share: float,
) -> np.ndarray:
    """``step.exposed_s`` over arrays of hidden times (and of collectives): the same
    operations, elementwise."""
    if not overlapped:
        return np.broadcast_to(np.asarray(comm_s, dtype=np.float64), hidden_s.shape)
    rest = comm_s - first_s
    return first_s + np.maximum(np.maximum(rest - hidden_s, sm_share * rest), 0.0)


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
