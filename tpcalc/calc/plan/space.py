"""The planner's search space: the values each dimension may take, and the divisibility rules
that turn combinations down, checked per dimension so that a rule is paid once per value.

The rules are ``calc.layout.groups.layout_problems``' (tp_problem, the CP and SP sequence rules,
``pipeline.check_pipeline``, the expert-grid rules), split so each rejection is counted under
the rule that fired first. ``tests/test_plan_engine.py`` checks that a combination passes here
exactly when ``layout_problems`` finds nothing wrong with it.

Domain choices, each stated because it decides what "enumerated" counts:
- tp: divisors of the GPU count, at most one node when TP stays inside a node (seed 000:
  "TP 只放机内"); cp and pp: divisors of the GPU count (dp = gpus / (tp·cp·pp) is then whole);
- ep: divisors of the GPU count up to the routed experts; etp: divisors of a node (MoE only);
- micro-batch: divisors of global batch / dp (dp · micro_batch · microbatches = global batch);
- schedule and vpp: with pp = 1 every schedule is 1F1B (no bubble, one stage), so only 1F1B is
  enumerated; interleaved takes vpp = 2 .. layers/pp (layers + the counted ends with
  Megatron-Core's accounted split, ``split_ends``);
- GPipe is left out while 1F1B is allowed: under the model it has 1F1B's step time exactly
  (``pipeline.bubble_time_s`` is the same (p−1)(F+B+W); no other part reads the schedule) and
  holds m ≥ p − r micro-batches in flight (``pipeline.in_flight_chunks``), so it is dominated;
- overlap options: each overlap flag only ever replaces a collective's time by
  ``step.exposed_s(comm, hidden, True, first) = first + max(0, comm − first − hidden, s·(comm −
  first)) ≤ comm`` (s, the SM share of the communication kernels, is below 1)
  (first ≤ comm in every use) and no memory depends on them, so "on" is never slower and is the
  only value searched unless a pin excludes it.
"""

from __future__ import annotations

import itertools

from msgspec import Struct

from tpcalc.calc.activations.paper import sp_seq_problem
from tpcalc.calc.cp.linear import gdn_cp_problem
from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.ep.overlap import setup_problem
from tpcalc.calc.plan.types import PlanRequest
from tpcalc.calc.time.ops import Shard, layer_ops
from tpcalc.calc.time.step import RECOMPUTE_MODULE_OPS, Overlap
from tpcalc.calc.tp.rules import tp_problem
from tpcalc.choices import Recompute, Schedule
from tpcalc.errors import InputError, divisors
from tpcalc.specs import ModelSpec
from tpcalc.units import Dtype

DUALPIPE_DIRECTIONS = 2  # pipeline.schedule: DualPipe feeds micro-batches from both ends
ZIGZAG_CHUNKS = 2  # zig-zag CP cuts the sequence into 2·cp chunks (layout_problems)
# Fine-grained recompute module sets searched: every subset when the model has at most this many
# applicable modules; beyond, each module alone, every pair and all of them together.
FULL_POWERSET_MODULES = 4
# Megatron-LM's ``moe`` module re-runs everything ``moe_act`` does (step.RECOMPUTE_MODULE_OPS).
REDUNDANT_MODULES = (("moe", "moe_act"),)


class RecomputeMode(Struct, frozen=True):
    """One recompute choice: the granularity and the Megatron recompute_modules list."""

    recompute: Recompute
    modules: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.modules:
            return f"{self.recompute.value}[{','.join(self.modules)}]"
        return self.recompute.value


class Shape(Struct, frozen=True):
    """The model-parallel sizes of one layout (dp = gpus / (tp·cp·pp))."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: int


class Variant(Struct, frozen=True):
    """A pipeline schedule with its virtual stages."""

    schedule: Schedule
    vpp: int


def _allowed(req: PlanRequest, dim: str, values: list) -> list:
    """``values`` kept by the pin and the bound of ``dim`` (a pin outside the domain is kept:
    the user asked for it, and the rules will say what is wrong with it)."""
    if dim in req.pins:
        values = list(req.pins[dim])
    if dim in req.bounds:
        values = [v for v in values if v <= req.bounds[dim]]
    return values


def applicable_modules(spec: ModelSpec) -> list[str]:
    """Recompute modules that re-run at least one op of this model's layers."""
    shard = Shard(seq=max(2, spec.seq_length), micro_batch=1, tp=1, cp=1, ep=1, etp=1, sp=False,
                  dtype=Dtype.bf16)  # fmt: skip
    names: set[str] = set()
    kinds = {(spec.resolved_layer_types[i], spec.is_moe_layer(i)): i
             for i in range(spec.num_hidden_layers)}  # fmt: skip
    for i in kinds.values():
        names |= {op.name.removesuffix("_fp8_cast") for op in layer_ops(spec, shard, i)}
    return [m for m, ops in RECOMPUTE_MODULE_OPS.items() if names & set(ops)]


def recompute_modes(req: PlanRequest) -> list[RecomputeMode]:
    """none, selective (core attention), full, and selective with each module set searched
    (module docstring); pins on ``recompute`` and ``recompute_modules`` restrict them."""
    modules = applicable_modules(req.spec)
    if "recompute_modules" in req.pins:
        sets = [tuple(s) for s in req.pins["recompute_modules"]]
    else:
        sizes = (
            range(1, len(modules) + 1)
            if len(modules) <= FULL_POWERSET_MODULES
            else (1, 2, len(modules))
        )
        sets = [c for n in sizes for c in itertools.combinations(modules, n)]
        sets = [s for s in sets if not any(a in s and b in s for a, b in REDUNDANT_MODULES)]
        sets = [()] + [s for s in sets if s != ("core_attn",)]  # core_attn alone = selective
    grains = _allowed(req, "recompute", [Recompute.none, Recompute.selective, Recompute.full])
    pinned = "recompute_modules" in req.pins
    out = []
    for g in grains:
        if g is Recompute.selective:
            out += [RecomputeMode(g, tuple(s)) for s in sets]
            continue
        if () in sets or not pinned:
            out.append(RecomputeMode(g))
        if g is Recompute.none and pinned:
            # modules replace selective's default core attention (Megatron recompute_modules;
            # step._recompute_names, activations saved_tensors): "none" with modules is
            # selective with them, the form the search takes (a run's --recompute none
            # --recompute-modules ..., as tpcalc validate reads a recipe's list)
            out += [RecomputeMode(Recompute.selective, tuple(s)) for s in sets if s]
    if not out:
        pinned_sets = " or ".join(",".join(s) or "none" for s in sets)
        raise InputError(
            f"pins recompute {'/'.join(g.value for g in grains)} and recompute_modules "
            f"{pinned_sets} leave no recompute mode: full recomputes whole layers (no modules); "
            "pin --recompute-modules none, or --recompute selective or none with modules"
        )
    return list(dict.fromkeys(out))


def overlap(req: PlanRequest) -> Overlap:
    """The overlap searched: on where allowed (never slower, module docstring). The EP
    all-to-all's is on only where the run's set-up lets Megatron-Core overlap it
    (``ep.overlap.setup_problem``); what each candidate's pipeline and recompute allow is
    decided per candidate (``step.ep_overlap_on``, ``bounds.StepBounds.ep_gaps``)."""

    def flag(dim: str) -> bool:
        return True in _allowed(req, dim, [True, False])

    mtp = req.spec.mtp_layers if req.memory.mtp else 0
    ep_a2a = flag("ep_overlap") and setup_problem(req.memory.moe_dispatcher, mtp) is None
    return Overlap(
        tp_comm=flag("tp_comm_overlap"), cp_ring=flag("cp_overlap"), ep_a2a=ep_a2a,
        pp_p2p=flag("pp_overlap"), dp_grad_reduce=flag("dp_overlap"),
        dp_param_gather=flag("dp_overlap"),
    )  # fmt: skip


class Domains(Struct, frozen=True):
    """The values each dimension takes for one request (before the rules)."""

    tp: list[int]
    cp: list[int]
    pp: list[int]
    ep: list[int]
    etp: list[int]
    zero: list[ZeroStage]
    sp: list[bool]
    schedules: list[Schedule]
    vpp: list[int] | None  # None: 2 .. layers/pp
    recompute: list[RecomputeMode]
    micro_batch_bound: int | None
    micro_batch_pin: list[int] | None


def domains(req: PlanRequest, gpus: int) -> Domains:
    """The values of every dimension for ``gpus`` GPUs after pins and bounds (module
    docstring)."""
    spec, node = req.spec, req.gpus_per_node or req.hw.gpus_per_node.value
    div = divisors(gpus)
    tp = [t for t in div if t <= node] if req.tp_within_node else div
    moe = spec.is_moe
    ep = [e for e in div if e <= (spec.n_routed_experts or 1)] if moe else [1]
    etp = [e for e in divisors(node) if e in div] if moe else [1]
    schedules = [s for s in Schedule]
    schedules = _allowed(req, "schedule", schedules)
    if Schedule.one_f_one_b in schedules and Schedule.gpipe in schedules:
        schedules.remove(Schedule.gpipe)  # dominated by 1F1B (module docstring)
    return Domains(
        tp=_allowed(req, "tp", tp), cp=_allowed(req, "cp", div), pp=_allowed(req, "pp", div),
        ep=_allowed(req, "ep", ep), etp=_allowed(req, "etp", etp),
        zero=[ZeroStage(z) for z in _allowed(req, "zero", [0, 1, 2, 3])],
        sp=_allowed(req, "sp", [True, False]), schedules=schedules,
        vpp=list(req.pins["vpp"]) if "vpp" in req.pins else None,
        recompute=recompute_modes(req), micro_batch_bound=req.bounds.get("micro_batch"),
        micro_batch_pin=list(req.pins["micro_batch"]) if "micro_batch" in req.pins else None,
    )  # fmt: skip


def split_ends(req: PlanRequest) -> int:
    """The ends (embedding, loss) the request counts as layers of the pipeline split
    (``TimeOptions.embedding_in_split`` / ``loss_in_split``; ``build_request`` admits the loss
    alone or both). Each candidate's layers are then split as ``pipeline.chunk_layer_counts``
    splits them, which is the accounted split exactly: with n = layers + ends slots over
    C = pp·vpp chunks of k each, the even split of layers = C·k − ends gives k − 1 to the chunks
    its remainder skips, the last one (loss) or the first and last (both)."""
    opts = req.time_options
    return int(opts.embedding_in_split) + int(opts.loss_in_split)


def variants(d: Domains, req: PlanRequest, pp: int) -> list[Variant]:
    """The (schedule, vpp) pairs for ``pp`` stages (module docstring)."""
    layers = req.spec.num_hidden_layers + split_ends(req)
    one_chunk = d.vpp is None or 1 in d.vpp  # a vpp pin without 1 leaves one chunk out
    out = []
    for s in d.schedules:
        if s is Schedule.interleaved:
            vs = d.vpp if d.vpp is not None else list(range(2, max(2, layers // pp) + 1))
            vs = [v for v in vs if v <= req.bounds.get("vpp", v)]
            out += [Variant(s, v) for v in vs if pp > 1 or "schedule" in req.pins]
        elif one_chunk and (pp > 1 or s is Schedule.one_f_one_b or "schedule" in req.pins):
            out.append(Variant(s, 1))
    return out


def micro_batches(d: Domains, per_dp: int) -> list[int]:
    """Micro-batch sizes that split a data-parallel rank's ``per_dp`` sequences evenly."""
    values = divisors(per_dp) if d.micro_batch_pin is None else d.micro_batch_pin
    if d.micro_batch_bound is not None:
        values = [b for b in values if b <= d.micro_batch_bound]
    return [b for b in values if per_dp % b == 0]


# ---- the rules, each a short name for the rejection counts ----


def tp_rule(spec: ModelSpec, tp: int) -> str | None:
    """``tp.rules.tp_problem``: t splits the heads, widths and KV heads."""
    return "divisibility: tp (heads, widths, KV heads)" if tp_problem(spec, tp) else None


def cp_rule(seq: int, tp: int, cp: int, sp: bool, flash: bool = True) -> str | None:
    """layout_problems' sequence rules, in its order; then CP's kernel: the ring exchanges K, V
    blocks of a flash kernel (Transformer Engine context parallelism), so eager attention,
    which materialises the scores, has none (the memory model refuses it the same way)."""
    if seq % cp:
        return "divisibility: seq by cp"
    if cp > 1 and seq % (ZIGZAG_CHUNKS * cp):
        return "divisibility: seq by 2·cp (zig-zag CP)"
    if sp and sp_seq_problem(seq, tp, cp) is not None:
        return "divisibility: seq/cp by tp (SP)"
    if cp > 1 and not flash:
        return "kernel: cp needs flash attention"
    return None


def gdn_cp_rule(spec: ModelSpec, tp: int, cp: int) -> str | None:
    """``layout_problems``' Gated DeltaNet rule: cp splits each TP rank's key and value heads
    (``cp.linear.gdn_cp_problem``)."""
    return "divisibility: Gated DeltaNet heads/tp by cp" if gdn_cp_problem(spec, tp, cp) else None


def ep_rule(spec: ModelSpec, s: Shape) -> str | None:
    """``layout_problems``' expert-grid rules (Megatron-Core: ep·etp ranks from dp·cp·tp)."""
    if s.ep == 1 and s.etp == 1:
        return None
    if (s.dp * s.cp * s.tp) % (s.ep * s.etp):
        return "divisibility: ep·etp in dp·cp·tp"
    if (spec.moe_intermediate_size or 0) % s.etp:
        return "divisibility: moe_intermediate_size by etp"
    if (spec.n_routed_experts or 0) % s.ep:
        return "divisibility: routed experts by ep"
    return None


# Interleaving needs two model chunks per rank or more (Narayanan et al. 2021 §2.2.2); with one
# the schedule is 1F1B, which the search has as its own variant (a vpp pin of 1 keeps it).
MIN_INTERLEAVED_VPP = 2


def pipeline_rule(
    layers: int, pp: int, v: Variant, allow_uneven: bool, ends: int = 0
) -> str | None:
    """``check_pipeline``'s rules that do not depend on the micro-batch count; with ``ends``
    (``split_ends``: the embedding and/or loss counted as layers) Megatron-Core's rules of the
    accounted split instead (``pipeline.accounted_split``)."""
    if ends:
        if (layers + ends) % pp:
            return "divisibility: layers + embedding/loss by pp"
        if (layers + ends) // pp % v.vpp:
            return "divisibility: (layers + embedding/loss)/pp by vpp"
    elif pp > layers:
        return "divisibility: pp above the layers"
    elif pp * v.vpp > layers:
        return "divisibility: pp·vpp above the layers"
    elif not allow_uneven and layers % (pp * v.vpp):
        return "divisibility: layers by pp·vpp"
    if v.schedule is Schedule.dualpipe and pp % DUALPIPE_DIRECTIONS:
        return "divisibility: DualPipe needs an even pp"
    if v.schedule is Schedule.interleaved and v.vpp < MIN_INTERLEAVED_VPP:
        return "schedule: interleaved needs vpp >= 2 (one chunk is 1F1B)"
    return None


def microbatch_rule(pp: int, m: int, v: Variant) -> str | None:
    """``check_pipeline``'s rule on the micro-batch count (DualPipe), and one the planner adds:
    the interleaved schedule runs micro-batches in groups of pp, so m must be a multiple of pp
    (Megatron-LM core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_
    interleaving: "number of microbatches is not divisible by pipeline-parallel size when using
    interleaved schedule"). ``layout`` prices such a run; the planner does not propose one."""
    if v.schedule is Schedule.dualpipe and (
        m % DUALPIPE_DIRECTIONS or m < DUALPIPE_DIRECTIONS * pp
    ):
        return "divisibility: DualPipe needs an even microbatches >= 2·pp"
    if v.schedule is Schedule.interleaved and m % pp:
        return INTERLEAVED_GROUPS
    return None


INTERLEAVED_GROUPS = "divisibility: interleaved needs microbatches a multiple of pp (Megatron)"


class ModeKeys:
    """Small int keys for sequences of recompute modes, by identity first: a cache key holding
    the tuple of 29 mode records hashes all of them on every lookup, which cost more than
    the bounds it guarded (profile of DeepSeek-V3). The search passes the same list or tuple
    object to every block, so after the first lookup a key is one dict get by id. Each object
    seen is kept referenced, so its id cannot be reused by another."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[object, int]] = {}
        self._ids: dict[tuple, int] = {}

    def __call__(self, modes: list[RecomputeMode] | tuple[RecomputeMode, ...]) -> int:
        got = self._by_id.get(id(modes))
        if got is None or got[0] is not modes:
            got = (modes, self._ids.setdefault(tuple(modes), len(self._ids)))
            self._by_id[id(modes)] = got
        return got[1]
