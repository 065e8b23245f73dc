"""The planner's engine (issue 11): its screens agree with the exact model, its bounds never
exceed the exact step time, branch-and-bound returns what exhaustive evaluation returns, and
the best answer behaves under pins and relaxed constraints.

Every expected figure here is computed by the exact functions ``tpcalc layout`` uses
(``rank_memory``, ``step_time``, ``layout_problems``, ``reports.layout.layout_report``); the
planner must reproduce them, so tolerances are rounding only.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from msgspec.structs import replace

from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout, layout_problems
from tpcalc.calc.layout.memory import layer_activation_bytes, layer_working_bytes, rank_memory
from tpcalc.calc.plan import search as S
from tpcalc.calc.plan.request import build_request
from tpcalc.calc.plan.space import INTERLEAVED_GROUPS, RecomputeMode, Shape, Variant
from tpcalc.calc.time.step import TimeOptions, stage_layers
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute, Schedule
from tpcalc.errors import InputError
from tpcalc.units import Dtype

# Small cases: every candidate can be timed exactly in a test.
SMALL = dict(gpus=16, seq=4096, global_batch=32)
REL = 1e-9  # the same functions on the same inputs: only float summation order may differ


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


def _request(model: str, hw, **kw):
    args = {**SMALL, **kw}
    return build_request(load_model(model), hw, **args)


def _search(req):
    s = S._Search(req, req.gpus)
    s.enumerate()
    picks, mems, lbs = s.picks()
    return s, picks, mems, lbs


def _pick(row) -> S._Pick:
    return S._Pick(*(int(x) for x in row))


@pytest.fixture(scope="module")
def small(h100):
    """Llama 3 8B on 16 H100: every candidate, screened."""
    req = _request("llama3-8b", h100, pins={"recompute": ("none", "selective", "full")})
    return (req, *_search(req))


@pytest.fixture(scope="module")
def moe(h100):
    """Qwen3 30B-A3B (MoE) on 16 H100 with EP."""
    req = _request("qwen3-30b-a3b", h100, pins={"recompute": ("selective",), "sp": (True,)})
    return (req, *_search(req))


# ---- the screens against the exact model ----


@pytest.mark.parametrize("model", ["llama3-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt3-5b"])
def test_activation_pieces_match_layer_activation_bytes(model):
    """The cached inventory (affine in b, modules as masks) gives layer_activation_bytes'
    figures exactly, for every recompute mode and micro-batch tried."""
    spec = load_model(model)
    req = build_request(spec, load_hardware("h100-sxm"), gpus=8, seq=4096, global_batch=8)
    s = S._Search(req, 8)
    kinds = s.screen.kind_of
    rng = random.Random(11)
    modes = s.d.recompute
    for tp, cp, sp, b in itertools.product((1, 2, 8), (1, 2), (True, False), (1, 3, 4)):
        if tp == 1 and sp:
            continue
        for mode in rng.sample(modes, min(4, len(modes))):
            lay = ParallelLayout(gpus_per_node=8, tp=tp, cp=cp)
            want = layer_activation_bytes(
                spec, lay, seq=4096, micro_batch=b, sp=sp, recompute=mode.recompute,
                techniques=MemoryTechniques(recompute_modules=mode.modules),
            )  # fmt: skip
            got = s.screen.kind_bytes(tp, cp, sp, mode, b)
            assert [got[k] for k in kinds] == want, (tp, cp, sp, b, mode)


@pytest.mark.parametrize("model", ["llama3-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt3-5b"])
def test_recompute_working_sets_match_layer_working_bytes(model):
    """The screen's recompute working set per kind (from the inventory: plain less kept for
    full and selective, each module's dropped tensors for modules) is layer_working_bytes'
    figure exactly, for every recompute mode of the search and the micro-batches tried."""
    spec = load_model(model)
    req = build_request(spec, load_hardware("h100-sxm"), gpus=8, seq=4096, global_batch=8)
    s = S._Search(req, 8)
    kinds = s.screen.kind_of
    modes = tuple(s.d.recompute)
    for tp, cp, sp, b in itertools.product((1, 8), (1, 2), (True, False), (1, 3)):
        if tp == 1 and sp:
            continue
        got = s.screen.mode_working(tp, cp, (sp,), modes, b)[0]  # [R, K]
        for r, mode in enumerate(modes):
            want = layer_working_bytes(
                spec, ParallelLayout(gpus_per_node=8, tp=tp, cp=cp), seq=4096, micro_batch=b,
                sp=sp, recompute=mode.recompute,
                techniques=MemoryTechniques(recompute_modules=mode.modules),
            )  # fmt: skip
            assert [got[r, k] for k in kinds] == want, (tp, cp, sp, b, mode)
    assert s.screen.mode_working(8, 1, (True,), modes, 1).any()  # some mode rebuilds


def _check_memory(req, s, picks, mems, n: int) -> None:
    rng = random.Random(5)
    for j in rng.sample(range(len(picks)), min(n, len(picks))):
        layout, run = s.layout_run(_pick(picks[j]))
        mem = rank_memory(
            req.spec, layout, seq=run.seq, micro_batch=run.micro_batch,
            microbatches=run.microbatches, vpp=run.vpp, schedule=run.schedule, recipe=run.recipe,
            sp=run.sp, recompute=run.recompute, activations=run.activations,
            techniques=run.memory,
        )  # fmt: skip
        assert mems[j] == pytest.approx(max(m.total_bytes for m in mem), rel=REL), (layout, run)


def test_memory_screen_matches_rank_memory(small, moe):
    for req, s, picks, mems, _ in (small, moe):
        _check_memory(req, s, picks, mems, 150)


@pytest.mark.parametrize(("model", "dropout"), [("gpt3-5b", False), ("llama3-8b", True)])
def test_memory_screen_follows_the_dropout_option(h100, model, dropout):
    """``--dropout/--no-dropout`` against each model's default (GPT-3 keeps masks, Llama does
    not): the screen's memory equals rank_memory with the same techniques, and the switch moves
    the memory of the same candidate the way the masks say."""
    req = _request(model, h100, pins={"recompute": ("none",)},
                   memory=MemoryTechniques(dropout=dropout))  # fmt: skip
    s, picks, mems, _ = _search(req)
    assert all(s.layout_run(_pick(p))[1].memory.dropout is dropout for p in picks[:5])
    _check_memory(req, s, picks, mems, 40)
    layout, run = s.layout_run(_pick(picks[0]))
    args = {"seq": run.seq, "micro_batch": run.micro_batch, "microbatches": run.microbatches,
            "vpp": run.vpp, "schedule": run.schedule, "recipe": run.recipe, "sp": run.sp,
            "recompute": run.recompute}  # fmt: skip
    on = rank_memory(req.spec, layout, **args, techniques=replace(run.memory, dropout=True))
    off = rank_memory(req.spec, layout, **args, techniques=replace(run.memory, dropout=False))
    assert max(m.activation_bytes for m in on) > max(m.activation_bytes for m in off)


def test_memory_screen_dualpipe_mtp_offload():
    """DeepSeek-V3 (MLA, MoE, MTP): every entry of screened blocks with DualPipe, interleaved
    and offloaded layers against rank_memory, fitting or not."""
    from tpcalc.calc.dp.zero import ZeroStage

    spec = load_model("deepseek-v3")
    for offload in (0, 1):
        req = build_request(
            spec, load_hardware("h800"), gpus=256, seq=4096, global_batch=512,
            memory=MemoryTechniques(offload_layers=offload),
        )  # fmt: skip
        s = S._Search(req, req.gpus)
        modes = [RecomputeMode(Recompute.selective, ("layernorm", "mla_up_proj")),
                 RecomputeMode(Recompute.full), RecomputeMode(Recompute.none)]  # fmt: skip
        zeros = list(ZeroStage)
        shape = S.Shape(tp=2, cp=1, pp=8, dp=16, ep=16, etp=1)
        for v in (Variant(Schedule.dualpipe, 1), Variant(Schedule.interleaved, 2),
                  Variant(Schedule.zb_h1, 1)):  # fmt: skip
            mbs, per_dp = [1, 2], 32
            mem = s.screen.block(shape, v, mbs, per_dp, [True, False], modes, zeros)
            for (z, i, j, r), got in np.ndenumerate(mem):
                layout = ParallelLayout(gpus_per_node=8, tp=2, pp=8, dp=16, ep=16, zero=zeros[z])
                want = rank_memory(
                    spec, layout, seq=4096, micro_batch=mbs[i], microbatches=per_dp // mbs[i],
                    vpp=v.vpp, schedule=v.schedule, recipe=req.recipe, sp=[True, False][j],
                    recompute=modes[r].recompute, techniques=s.screen.techniques(modes[r]),
                )  # fmt: skip
                assert got == pytest.approx(max(m.total_bytes for m in want), rel=REL)


@pytest.mark.parametrize("model", ["deepseek-v3", "llama3-8b"])
def test_memory_screen_group_is_block_bit_for_bit(model):
    """``MemoryScreen.group`` (every variant at once, the most loaded rank taken as a running
    maximum over the ranks no other rank dominates) equals ``block`` (one variant, the maximum
    over every rank) exactly, element by element: the screen's verdicts and the reported
    memory cannot depend on which of the two a search used."""
    from tpcalc.calc.dp.zero import ZeroStage

    spec, hw = load_model(model), load_hardware("h800")
    req = build_request(spec, hw, gpus=256, seq=4096, global_batch=512)
    s = S._Search(req, req.gpus)
    modes = [RecomputeMode(Recompute.none), RecomputeMode(Recompute.selective),
             RecomputeMode(Recompute.selective, ("layernorm",)),
             RecomputeMode(Recompute.full)]  # fmt: skip
    zeros, sps, mbs, per_dp = list(ZeroStage), [True, False], [1, 2, 4], 32
    ep = 16 if spec.is_moe else 1
    vs = [Variant(Schedule.one_f_one_b, 1), Variant(Schedule.interleaved, 2),
          Variant(Schedule.zb_h1, 1), Variant(Schedule.dualpipe, 1)]  # fmt: skip
    for tp, pp in ((1, 4), (2, 8), (4, 2)):
        shape = S.Shape(tp=tp, cp=1, pp=pp, dp=256 // (tp * pp), ep=ep, etp=1)
        got = s.screen.group(shape, vs, mbs, per_dp, sps, modes, zeros)
        for i, v in enumerate(vs):
            want = s.screen.block(shape, v, mbs, per_dp, sps, modes, zeros)
            assert np.array_equal(got[i], want), (shape, v)


@pytest.mark.parametrize("mtp", [True, False])
def test_bounds_ends_are_the_whole_tuple_bit_for_bit(mtp):
    """The bounds' stage ends (``StepBounds._end_passes``: the op times of the head and the MTP
    module's non-expert ops taken once per (tp, cp, sp, micro-batch), its routed experts' per
    (ep, etp)) equal ``_passes`` over the whole tuple of ops as ``time.ops`` builds it, for
    every (ep, etp) of a DeepSeek-V3 (MoE MTP module) search, exactly."""
    from tpcalc.calc.time.ops import Shard, embedding_ops, head_ops, mtp_ops
    from tpcalc.calc.tp.rules import padded_vocab

    spec = load_model("deepseek-v3")
    req = build_request(
        spec, load_hardware("h800"), gpus=256, seq=4096, global_batch=512,
        memory=MemoryTechniques(mtp=mtp),
    )  # fmt: skip
    bounds = S._Search(req, req.gpus).bounds
    opts = bounds.opts
    seen = set()
    for tp, ep, etp, b, sp in itertools.product((1, 2), (1, 8, 32), (1, 2), (1, 2), (True, False)):
        shape = S.Shape(tp=tp, cp=1, pp=4, dp=256 // (4 * tp), ep=ep, etp=etp)
        work = bounds.work(shape, b, sp)
        shard = Shard(
            seq=4096, micro_batch=b, tp=tp, cp=1, ep=ep, etp=etp, sp=sp and tp > 1,
            dtype=Dtype.bf16, gemm_dtype=bounds.dtype, causal=opts.causal,
            fused_sinks=opts.fused_sinks,
        )  # fmt: skip
        padded = padded_vocab(spec.vocab_size, tp, opts.vocab_pad_multiple)
        last = head_ops(spec, shard, padded)
        for _ in range(spec.mtp_layers if mtp else 0):
            last += mtp_ops(spec, shard, padded)
        assert work.first_end == bounds._passes(embedding_ops(spec, shard))
        assert work.last_end == bounds._passes(last), shape
        seen.add(work.last_end)
    # at most one sum per (tp, micro-batch, sp) without MTP; with it, the routed experts'
    # share also differs with ep and etp
    per_shard = 2 * 2 * 2
    assert len(seen) > per_shard if mtp else len(seen) <= per_shard


# ---- the rules against layout_problems ----


def test_rules_agree_with_layout_problems(h100):
    """A combination passes the planner's rules exactly when layout_problems finds nothing
    (besides the planner's own interleaved rule, which layout does not check)."""
    for model in ("llama3-8b", "qwen3-30b-a3b"):
        req = _request(model, h100, gpus=32, global_batch=64)
        s = S._Search(req, req.gpus)
        s.enumerate()
        ok = {(b.shape, b.variant, mb, sp) for b in s.blocks for mb in b.mbs for sp in b.sps}
        rng = random.Random(3)
        spec = req.spec
        d = s.d
        checked = 0
        for _ in range(600):
            tp, cp, pp = rng.choice(d.tp), rng.choice(d.cp), rng.choice(d.pp)
            if s.gpus % (tp * cp * pp):
                continue
            dp = s.gpus // (tp * cp * pp)
            if req.global_batch % dp:
                continue
            per_dp = req.global_batch // dp
            mb = rng.choice(S.space.micro_batches(d, per_dp))
            v = rng.choice(S.space.variants(d, req, pp) or [Variant(Schedule.one_f_one_b, 1)])
            ep, etp = rng.choice(d.ep), rng.choice(d.etp)
            sp = rng.choice(d.sp) if tp > 1 else False
            shape = S.Shape(tp, cp, pp, dp, ep, etp)
            layout = ParallelLayout(gpus_per_node=8, tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp)
            run = LayoutRun(
                seq=req.seq, microbatches=per_dp // mb, micro_batch=mb, vpp=v.vpp,
                schedule=v.schedule, sp=sp,
            )  # fmt: skip
            problems = layout_problems(spec, layout, run)
            planner_only = S.space.microbatch_rule(pp, per_dp // mb, v) == INTERLEAVED_GROUPS
            rule_ok = _passes_rules(s, shape, v, mb, sp, per_dp)
            assert rule_ok == (not problems and not planner_only), (layout, run, problems)
            if (shape, v, mb, sp) in ok:  # a screened block passed every rule
                assert rule_ok
            checked += 1
        assert checked > 80


def _passes_rules(s, shape, v, mb, sp, per_dp) -> bool:
    sp_ = S.space
    spec, req = s.req.spec, s.req
    return not (
        sp_.tp_rule(spec, shape.tp)
        or sp_.ep_rule(spec, shape)
        or sp_.cp_rule(req.seq, shape.tp, shape.cp, sp)
        or sp_.pipeline_rule(spec.num_hidden_layers, shape.pp, v, req.allow_uneven)
        or sp_.microbatch_rule(shape.pp, per_dp // mb, v)
    )


def test_rejections_add_up(small, moe):
    """Enumerated − feasible = Σ rejections, with feasible counted from the screened blocks
    and the enumeration counted independently here as the product of the domains."""
    for req, s, *_ in (small, moe):
        assert s.enumerated - s.feasible == sum(s.rejections.values())
        fits = sum(int((b.memory <= s.capacity).sum()) for b in s.blocks)
        assert s.feasible == fits
        d = s.d
        total = 0
        for tp, cp, pp in itertools.product(d.tp, d.cp, d.pp):
            if s.gpus % (tp * cp * pp):
                continue
            dp = s.gpus // (tp * cp * pp)
            per_dp = req.global_batch // dp if req.global_batch % dp == 0 else 0
            mbs = S.space.micro_batches(d, per_dp) if per_dp else []
            sps = d.sp if tp > 1 else [False]
            n = len(S.space.variants(d, req, pp)) * max(1, len(mbs)) * len(sps)
            total += n * len(d.ep) * len(d.etp) * len(d.zero) * len(d.recompute)
        assert s.enumerated == total
        assert s.rejections["memory"] > 0


# ---- bounds and branch-and-bound ----


def test_bounds_never_exceed_exact(small, moe):
    for _, s, picks, _, lbs in (small, moe):
        rng = random.Random(8)
        for j in rng.sample(range(len(picks)), min(200, len(picks))):
            t = s.exact(_pick(picks[j])).step_time_s
            assert lbs[j] <= t, (s.layout_run(_pick(picks[j])), lbs[j], t)


EXHAUSTIVE = {
    "llama3-8b": {"recompute": ("none", "selective"), "recompute_modules": ((),),
                  "zero": (0, 1, 2, 3), "pp": (1, 2, 4), "micro_batch": (1, 2), "vpp": (1, 2, 4)},
    "qwen3-30b-a3b": {"recompute": ("selective",), "recompute_modules": ((),), "sp": (True,),
                      "ep": (1, 4, 8), "etp": (1, 2), "pp": (1, 2), "micro_batch": (1, 2),
                      "zero": (1,), "vpp": (1, 2)},
}  # fmt: skip


@pytest.mark.parametrize("eager", [S.EAGER_BOUNDS, 0])
@pytest.mark.parametrize("model", list(EXHAUSTIVE))
def test_branch_and_bound_equals_exhaustive(model, h100, eager, monkeypatch):
    """On a space small enough to time every candidate, branch-and-bound's top 10 are the
    exhaustive top 10 and no candidate beats a Pareto point at its memory or less; with every
    group's bounds taken up front (small groups) and taken only when listed (eager 0)."""
    monkeypatch.setattr(S, "EAGER_BOUNDS", eager)
    req = _request(model, h100, pins=EXHAUSTIVE[model])
    s, picks, mems, lbs = _search(req)
    assert 50 < len(picks) < 2500
    k = 10
    ranked = S._best_first(s, picks, lbs, k)
    exact = np.array([s.exact(_pick(r)).step_time_s for r in picks])
    want = np.sort(exact)[:k]
    got = np.array([t for t, _ in ranked])
    assert got == pytest.approx(want, rel=REL)
    # the front: each point is the fastest at its memory or less, and nothing beats it
    front = S._pareto(s, picks, mems, lbs)
    for j in front:
        assert not np.any((mems <= mems[j]) & (exact < exact[j] * (1 - REL)))
    # the same searches building blocks' bounds only where their floors allow, on a fresh
    # search whose deferred groups are bounded as the searches need them: the same top 10
    # and the same front
    lazy = S._Search(req, req.gpus)
    lazy.enumerate()
    lazy.prepare()
    top, built = S._settled(lazy, k)
    assert [t for t, _ in top] == pytest.approx(want, rel=REL)
    assert [p for _, p in top] == [_pick(picks[j]) for _, j in ranked]
    assert lazy.expanded.sum() < len(lazy.blocks)  # the floors skipped some blocks
    assert built == [_pick(picks[j]) for j in front]


def test_floors_never_exceed_bounds(small, moe):
    """A block's floor (the least bound of its cells over ZeRO stages) is at most every bound
    of its cells."""
    for _, s, picks, _, lbs in (small, moe):
        cell = {}
        for row, lb in zip(picks, lbs, strict=True):
            key = (int(row[0]), int(row[2]), int(row[3]), int(row[4]))
            cell[key] = min(cell.get(key, np.inf), lb)
        got = {}
        for b, f in zip(s.cell_block, s.cell_floor, strict=True):
            got.setdefault(int(b), []).append(f)
        # dominated cells are left out (search._staircase), never all of a block's
        assert len(s.cell_floor) <= len(cell)
        assert set(got) == {k[0] for k in cell}
        for b, fs in got.items():
            assert min(fs) == s.floors[b]
            assert s.floors[b] <= min(v for k, v in cell.items() if k[0] == b)
        assert np.all(s.cell_floor > 0)


def test_kept_cells_cover_every_pick(small, moe):
    """Every pick that fits has a kept cell of its block with memory and floor at most its
    own (search._staircase leaves out only dominated cells), so the Pareto front lists a block
    whenever one of its picks is under a budget with a bound at most a time; and some cells
    were left out."""
    for _, s, picks, mems, lbs in (small, moe):
        by_block: dict[int, list[tuple[float, float]]] = {}
        for b, m, f in zip(s.cell_block, s.cell_mem, s.cell_floor, strict=True):
            by_block.setdefault(int(b), []).append((m, f))
        for row, m, lb in zip(picks, mems, lbs, strict=True):
            kept = by_block[int(row[0])]
            assert any(cm <= m and cf <= lb for cm, cf in kept), (row, m, lb)
    small_s = small[1]
    cells = {(int(r[0]), int(r[2]), int(r[3]), int(r[4])) for r in small[2]}
    assert len(small_s.cell_floor) < len(cells)


def test_least_is_the_plain_sums_bit_for_bit():
    """bounds._least (in place, hinges with nothing anywhere left out) gives the floats of the
    plain formula min over {lo, (x − floor)/d above lo} of m·N + Σ max(floor, x − d·N), term by
    term; the floors are the SM share of what each hinge hides (zero for some)."""
    from tpcalc.calc.plan.bounds import _least

    rng = np.random.default_rng(11)
    n = 500
    m, lo = rng.uniform(1, 64, n), rng.uniform(0.1, 2.0, n)
    partial = rng.uniform(0, 50, n)
    partial[::3] = -np.inf  # some candidates have nothing to hide in this hinge
    floor = rng.uniform(0, 8, n)
    hinges = [
        (rng.uniform(0, 50, n), rng.uniform(1, 4, n), np.zeros(n)),
        (partial, rng.uniform(1, 4, n), np.where(np.isneginf(partial), 0.0, floor)),
        (np.full(n, -np.inf), rng.uniform(1, 4, n), np.zeros(n)),  # nothing anywhere: left out
        (np.full(n, -np.inf), rng.uniform(1, 4, n), floor),  # a floor alone: kept
    ]

    def at(x_n):
        h = m * x_n
        for x, d, fl in hinges:
            h = h + np.maximum(fl, x - d * x_n)
        return h

    want = at(lo)
    for x, d, fl in hinges:
        want = np.minimum(want, at(np.maximum(lo, (x - fl) / d)))
    assert np.array_equal(_least(m, lo, hinges), want)
    # a floor never lowers the least, and every candidate pays at least the floors' sum
    plain = _least(m, lo, [(x, d, np.zeros(n)) for x, d, _ in hinges])
    assert np.all(_least(m, lo, hinges) >= plain)
    least = m * lo + sum(fl for _, _, fl in hinges)  # summed in another order: a few ulps
    assert np.all(_least(m, lo, hinges) >= least * (1 - 1e-12))


def test_staircase_keeps_the_undominated_cells_in_order():
    """Per variant: a cell stays when its floor is below the floor of every cell before it by
    memory (ties in memory: in order), cells where nothing fits (inf) go; the order is kept."""
    inf = np.inf
    mem = np.array([[5.0, 3.0, 4.0, 3.0], [1.0, 2.0, 1.0, inf]])
    floor = np.array([[1.0, 4.0, 2.0, 4.0], [3.0, 1.0, 3.0, inf]])
    vi, m, f = S._staircase(mem, floor)
    # variant 0: (3, 4) kept once (the first of two), (4, 2) and (5, 1) kept;
    # variant 1: (1, 3) kept once, (2, 1) kept, the cell that does not fit left out
    assert vi.tolist() == [0, 0, 0, 1, 1]
    assert m.tolist() == [5.0, 3.0, 4.0, 1.0, 2.0]
    assert f.tolist() == [1.0, 4.0, 2.0, 3.0, 1.0]


# ---- the public result ----


@pytest.fixture(scope="module")
def best8b():
    from tpcalc.reports.plan import plan

    return plan("llama3-8b", "h100-sxm", top_k=5, **SMALL)


def test_result_counts_and_candidates(best8b):
    r = best8b
    assert r.enumerated - r.feasible == sum(n for _, n in r.rejections)
    assert 0 < len(r.top) <= 5
    times = [c.step_time_s for c in r.top]
    assert times == sorted(times)
    assert all(c.fits for c in r.top)
    assert r.why_best.startswith("the best spends less on ")
    w = r.why
    a, b = r.top[0].step.parts_s, r.top[1].step.parts_s
    assert w.step_gain_s == pytest.approx(r.top[1].step_time_s - r.top[0].step_time_s)
    assert w.gained_s == pytest.approx(b[w.gained_part] - a[w.gained_part])
    assert w.gained_s == pytest.approx(max(b[k] - a[k] for k in a))
    mems = [c.memory_bytes for c in r.pareto]
    assert mems == sorted(mems)
    assert r.pareto[-1].step_time_s == r.top[0].step_time_s  # the fastest ends the front
    assert [c.step_time_s for c in r.pareto] == sorted((c.step_time_s for c in r.pareto),
                                                        reverse=True)  # fmt: skip


def test_reported_candidates_match_tpcalc_layout(best8b):
    """Each reported layout, priced by the Python twin of `tpcalc layout`, gives the same step
    time and memory per rank."""
    from tpcalc.reports.layout import layout_report
    from tpcalc.reports.request import Layout, Workload

    for c in (*best8b.top, *best8b.pareto[:3]):
        report = layout_report(
            Workload.of_run("llama3-8b", "h100-sxm", c.run), Layout.of(c.layout, c.run),
            with_latency=c.run.with_latency, time_options=c.options,
        )  # fmt: skip
        terms = {t.key: t for t in report.rows[-1].terms}
        assert terms["step_time_s"].number == pytest.approx(c.step_time_s, rel=REL)
        assert terms["memory_bytes_per_rank"].number == pytest.approx(c.memory_bytes, rel=REL)
        assert terms["mfu_ratio"].number == pytest.approx(c.mfu_ratio, rel=REL)


def _pins_of(c) -> dict:
    lay, run = c.layout, c.run
    return {
        "tp": (lay.tp,), "cp": (lay.cp,), "pp": (lay.pp,), "ep": (lay.ep,),
        "micro_batch": (run.micro_batch,), "schedule": (run.schedule.value,),
        "vpp": (run.vpp,), "zero": (int(lay.zero),), "sp": (run.sp,),
        "recompute": (run.recompute.value,),
    }  # fmt: skip


@pytest.mark.parametrize("dim", ["tp", "cp", "pp", "micro_batch", "schedule", "zero", "recompute"])
def test_pinning_own_choice_keeps_the_best(best8b, dim):
    from tpcalc.reports.plan import plan

    best = best8b.best
    pin = {dim: _pins_of(best)[dim]}
    again = plan("llama3-8b", "h100-sxm", top_k=1, pins=pin, **SMALL)
    assert again.best.step_time_s == pytest.approx(best.step_time_s, rel=REL)


def test_relaxing_never_makes_the_best_worse():
    from tpcalc.reports.plan import plan

    args = dict(top_k=1, **SMALL)
    free = plan("llama3-8b", "h100-sxm", **args).best.step_time_s
    pinned = plan("llama3-8b", "h100-sxm", pins={"tp": (2,), "pp": (2,)}, **args)
    assert free <= pinned.best.step_time_s * (1 + REL)
    tight = plan("llama3-8b", "h100-sxm", memory_headroom=0.6, **args).best.step_time_s
    loose = plan("llama3-8b", "h100-sxm", memory_headroom=0.1, **args).best.step_time_s
    assert loose <= tight * (1 + REL)
    few = plan("llama3-8b", "h100-sxm", pins={"recompute": ("full",)}, **args)
    more = plan("llama3-8b", "h100-sxm", pins={"recompute": ("full", "none")}, **args)
    assert more.best.step_time_s <= few.best.step_time_s * (1 + REL)
    assert more.best.step_time_s < few.best.step_time_s  # full recompute costs time here


def test_objective_memory_ranks_by_memory():
    from tpcalc.reports.plan import plan

    r = plan("llama3-8b", "h100-sxm", top_k=3, objective="memory", **SMALL)
    mems = [c.memory_bytes for c in r.top]
    assert mems == sorted(mems)
    fastest = plan("llama3-8b", "h100-sxm", top_k=1, **SMALL).best
    assert r.top[0].memory_bytes <= fastest.memory_bytes


def test_objective_gpus_finds_the_fewest():
    """The fewest GPUs whose best step meets the target (inverse.min_gpus over the planner's
    best per count): every count tried below it misses, and so does one node fewer."""
    from tpcalc.reports.plan import plan

    at16 = plan("llama3-8b", "h100-sxm", top_k=1, **SMALL).best.step_time_s
    target = at16 * 1.01
    r = plan("llama3-8b", "h100-sxm", top_k=1, objective="gpus", target_step_time_s=target,
             **SMALL)  # fmt: skip
    assert r.fewest is not None and r.gpus == r.fewest.gpus and r.gpus <= 16
    assert r.best.step_time_s <= target
    for probe in r.fewest.probes:
        if probe.gpus < r.gpus:
            assert probe.step_time_s is None or probe.step_time_s > target
    node = 8  # h100-sxm gpus_per_node
    if r.gpus > node:
        below = plan("llama3-8b", "h100-sxm", top_k=1, **{**SMALL, "gpus": r.gpus - node})
        assert below.best is None or below.best.step_time_s > target


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"pins": {"tp": (0,)}}, "pin tp"),
        ({"pins": {"schedule": ("zigzag",)}}, "pin schedule"),
        ({"pins": {"recompute_modules": ("bogus",)}}, "recompute_modules"),
        ({"memory_headroom": 1.5}, "memory_headroom"),
        ({"objective": "gpus"}, "target_step_time_s"),
        ({"global_batch": None, "global_batch_tokens": 4097}, "global_batch_tokens"),
        ({"bounds": {"tpx": 2}}, "bound tpx"),
        ({"time_options": TimeOptions(recompute_layers=2)}, "recompute_layers"),
        ({"time_options": TimeOptions(ep_node_dedup=True),
          "memory": MemoryTechniques(moe_dispatcher="allgather")}, "ep_node_dedup"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field(h100, kw, field):
    with pytest.raises(InputError, match=field):
        _request("llama3-8b", h100, **kw)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        # request.MAX_GPUS = 2**20, MAX_GLOBAL_BATCH = 2**16, MAX_TOP_K = 100
        ({"gpus": 2**20 + 1}, "gpus must be between 1 and 1,048,576 (GPUs), got 1,048,577"),
        ({"global_batch": 2**16 + 1},
         "global_batch must be between 1 and 65,536 (sequences), got 65,537"),
        ({"global_batch": None, "global_batch_tokens": (2**16 + 1) * 4096},
         "global_batch must be between 1 and 65,536 (sequences), got 65,537"),
        ({"top_k": 101}, "top_k must be between 1 and 100 (layouts), got 101"),
    ],
)  # fmt: skip
def test_engine_bounds_the_sizes(h100, kw, message):
    """tpcalc.plan is bounded like the CLI: one InputError naming the field and the range."""
    with pytest.raises(InputError) as err:
        _request("llama3-8b", h100, **kw)
    assert str(err.value) == message


def test_the_request_has_one_moe_dispatcher_for_memory_and_time(h100):
    """Every candidate is timed and sized with the same dispatcher, as `tpcalc layout
    --moe-dispatcher` sets both: flex memory times the dispatch node-aware, and a node-aware
    dispatch over alltoall memory (the same bytes) is flex."""
    plain = _request("qwen3-30b-a3b", h100)
    assert (plain.memory.moe_dispatcher, plain.time_options.ep_node_dedup) == ("alltoall", False)
    flex = _request("qwen3-30b-a3b", h100, memory=MemoryTechniques(moe_dispatcher="flex"))
    assert (flex.memory.moe_dispatcher, flex.time_options.ep_node_dedup) == ("flex", True)
    dedup = _request("qwen3-30b-a3b", h100, time_options=TimeOptions(ep_node_dedup=True))
    assert (dedup.memory.moe_dispatcher, dedup.time_options.ep_node_dedup) == ("flex", True)
    gather = _request("qwen3-30b-a3b", h100, memory=MemoryTechniques(moe_dispatcher="allgather"))
    assert (gather.memory.moe_dispatcher, gather.time_options.ep_node_dedup) == ("allgather", False)


def test_largest_sizes_are_accepted(h100):
    req = _request("llama3-8b", h100, gpus=2**20, global_batch=2**16, top_k=100)
    assert (req.gpus, req.global_batch, req.top_k) == (2**20, 2**16, 100)


def test_dp_pin_filters(h100):
    req = _request("llama3-8b", h100, pins={"dp": (4,)})
    s = S._Search(req, req.gpus)
    s.enumerate()
    assert s.blocks and {b.shape.dp for b in s.blocks} == {4}


def test_tokens_become_sequences(h100):
    req = _request("llama3-8b", h100, global_batch=None, global_batch_tokens=32 * 4096)
    assert req.global_batch == 32


def test_public_api_is_lazy():
    import subprocess
    import sys

    code = (
        "import sys, tpcalc; print('tpcalc.calc.plan.search' in sys.modules, callable(tpcalc.plan))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_recompute_modes_cover_the_modules():
    """Every applicable module appears in some searched mode; none, selective and full too."""
    from tpcalc.calc.plan.space import applicable_modules, recompute_modes

    for model in ("llama3-8b", "deepseek-v3"):
        req = build_request(load_model(model), load_hardware("h100-sxm"), gpus=8, seq=4096,
                            global_batch=8)  # fmt: skip
        modes = recompute_modes(req)
        grains = {m.recompute for m in modes if not m.modules}
        assert grains == {Recompute.none, Recompute.selective, Recompute.full}
        seen = {x for m in modes for x in m.modules}
        assert seen == set(applicable_modules(req.spec))
        assert len(modes) == len(set(modes))
        assert RecomputeMode(Recompute.selective, ("core_attn",)) not in modes


def test_overlap_searched_on_unless_pinned(h100):
    req = _request("llama3-8b", h100, pins={"tp_comm_overlap": (False,)})
    ov = S.space.overlap(req)
    assert ov.tp_comm is False and ov.dp_grad_reduce is True
    assert replace(ov, tp_comm=True) == S.space.overlap(_request("llama3-8b", h100))


def test_progress_callback_sees_every_phase_in_order_and_same_result(best8b):
    """``progress`` is told each phase (fractions in [0, 1], non-decreasing within a phase) and
    does not change the result."""
    from tpcalc.reports.plan import plan

    calls: list[tuple[str, float]] = []
    r = plan("llama3-8b", "h100-sxm", top_k=5, progress=lambda p, x: calls.append((p, x)), **SMALL)
    phases = list(dict.fromkeys(p for p, _ in calls))
    assert phases == ["screen", "bounds", "top", "pareto"]
    for phase in phases:
        xs = [x for p, x in calls if p == phase]
        assert xs == sorted(xs) and xs[0] >= 0.0 and xs[-1] <= 1.0
    assert [c.step_time_s for c in r.top] == [c.step_time_s for c in best8b.top]
    assert [c.memory_bytes for c in r.pareto] == [c.memory_bytes for c in best8b.pareto]


def test_dense_layer_ops_do_not_read_the_expert_grid():
    """StepBounds._kind_ops shares a dense layer's op times across ep and etp, and the ends'
    without MTP: their ops must not change with them."""
    from tpcalc.calc.time.ops import Shard, embedding_ops, head_ops, layer_ops

    spec = load_model("deepseek-v3")
    dense = next(i for i in range(spec.num_hidden_layers) if not spec.is_moe_layer(i))

    def ops(ep: int, etp: int) -> tuple:
        shard = Shard(seq=4096, micro_batch=2, tp=2, cp=1, ep=ep, etp=etp, sp=True,
                      dtype=Dtype.bf16)  # fmt: skip
        return (layer_ops(spec, shard, dense), embedding_ops(spec, shard),
                head_ops(spec, shard, spec.vocab_size))  # fmt: skip

    assert ops(1, 1) == ops(8, 1) == ops(32, 2)


def test_step_cache_is_step_time_bit_for_bit(small, moe):
    """``time.bulk.StepCache`` (the planner's exact tier) returns ``step_time``'s StepTime,
    every field equal, for sampled candidates, after other layouts filled its cache."""
    from tpcalc.calc.time.step import step_time

    for req, s, picks, _, _ in (small, moe):
        rng = random.Random(11)
        for j in rng.sample(range(len(picks)), min(150, len(picks))):
            layout, run = s.layout_run(_pick(picks[j]))
            assert s.steps.step_time(layout, run) == step_time(
                req.spec, req.hw, layout, run, s.opts
            )


@pytest.mark.parametrize(
    ("schedule", "pp", "vpp", "mtp"),
    [(Schedule.dualpipe, 8, 1, True), (Schedule.interleaved, 4, 2, False),
     (Schedule.one_f_one_b, 16, 1, True), (Schedule.zb_h1, 2, 1, False)],
)  # fmt: skip
def test_step_cache_deep_pipelines_and_layer_kinds(h100, schedule, pp, vpp, mtp):
    """DeepSeek-V3 (3 dense layers, then MoE; MTP on the last stage): stages sharing their
    layer kinds are computed once, ZeRO stages and micro-batch counts reuse them, and every
    StepTime equals ``step_time``'s."""
    from tpcalc.calc.time.bulk import StepCache
    from tpcalc.calc.time.step import Overlap, step_time

    spec = load_model("deepseek-v3")
    opts = TimeOptions(overlap=Overlap(ep_a2a=True, tp_comm=True))
    cache = StepCache(spec, h100, opts)
    for zero, m, recompute in itertools.product((0, 1, 3), (pp, 4 * pp), ("selective", "full")):
        layout = ParallelLayout(gpus_per_node=8, tp=2, pp=pp, dp=8, ep=8, zero=zero)
        run = LayoutRun(
            seq=4096, microbatches=m, schedule=schedule, vpp=vpp, recompute=Recompute(recompute),
            memory=MemoryTechniques(mtp=mtp),
        )  # fmt: skip
        assert cache.step_time(layout, run) == step_time(spec, h100, layout, run, opts)


@pytest.mark.parametrize("model", ["deepseek-v3", "llama3-405b", "gpt3-175b"])
def test_pp_rank_params_add_up_to_the_model(model):
    """``pp_rank_params`` (the per-layer counts taken once per model, ``layer_param_counts``,
    and shared by the planner's screen) puts every parameter on exactly one rank in every
    split, and the last stage's copy of the embedding beside it where the ends are apart:
    summed over the ranks, the model's total (``params.counts.total_params``, the MTP
    module only when asked), and routed experts as ``routed_expert_params`` counts them;
    twice under DualPipe, whose ranks each hold two stages (DeepSeek-V3 report §3.2.1, Table 2:
    "2×" parameters)."""
    from tpcalc.calc.layout.memory import pp_rank_params
    from tpcalc.calc.params.counts import mtp_params, routed_expert_params, total_params

    spec = load_model(model)
    for mtp in (True, False):
        want = total_params(spec) - (0 if mtp else mtp_params(spec))
        for p, v, sched in [(1, 1, Schedule.one_f_one_b), (4, 2, Schedule.interleaved),
                            (8, 1, Schedule.dualpipe), (16, 3, Schedule.interleaved)]:  # fmt: skip
            copies = 2 if sched is Schedule.dualpipe else 1
            # ends on different ranks: the last stage builds its own V·h embedding for MTP, or
            # for an output layer tied to it (Megatron-Core GPTModel, LanguageModule)
            apart = p > 1 and sched is not Schedule.dualpipe
            copy = spec.vocab_size * spec.hidden_size
            extra = copy if apart and ((mtp and spec.mtp_layers) or spec.tie_word_embeddings) else 0
            ranks = pp_rank_params(spec, p, v, sched, mtp=mtp)
            assert len(ranks) == p
            assert sum(d + r + e for d, r, e in ranks) == copies * want + extra, (mtp, p, v, sched)
            experts = sum(e for _, _, e in ranks)
            assert experts >= copies * routed_expert_params(spec)
            if not mtp:
                assert experts == copies * routed_expert_params(spec)


# the search forks its second worker on Linux only (search._Search._split)
LINUX_ONLY = pytest.mark.skipif(
    __import__("platform").system() != "Linux", reason="forks on Linux only"
)


def _result_fields(r) -> tuple:
    return (r.top, r.pareto, r.enumerated, r.feasible, r.timed_exactly, r.rejections,
            r.why_best, r.why)  # fmt: skip


def _forks(monkeypatch) -> list[int]:
    """Count the forks the search makes (the real fork still runs)."""
    import os

    calls: list[int] = []  # the child's pid, per fork
    real = os.fork

    def fork() -> int:
        pid = real()
        if pid:
            calls.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return calls


@LINUX_ONLY
@pytest.mark.parametrize(("drop_above", "eager"), [
    (math.inf, S.EAGER_BOUNDS), (0.0, S.EAGER_BOUNDS), (0.0, 0),
])  # fmt: skip
def test_two_workers_give_the_one_process_search_bit_for_bit(h100, monkeypatch, drop_above, eager):
    """Forced to fork (threshold 1 shape), the search deals its units (tp, cp) to a child and
    puts them back in order: the cells, blocks and the whole result are those of the search in
    one process, bit for bit, whether the child sends its groups' slab memory or drops it
    (``DROP_ABOVE_BYTES``) and this process restores what it reads, for groups bounded as they
    are enumerated and for groups bounded block by block when listed (``EAGER_BOUNDS`` 0:
    ``_block_bounds`` reads a dropped group's memory)."""
    monkeypatch.setattr(S, "DROP_ABOVE_BYTES", drop_above)
    monkeypatch.setattr(S, "EAGER_BOUNDS", eager)
    req = _request("llama3-8b", h100, gpus=64, global_batch=128, top_k=5)
    monkeypatch.setattr(S, "WORKERS", 1)
    one = S._Search(req, req.gpus)
    one.enumerate()
    one.prepare()
    alone = S.plan(req)
    monkeypatch.setattr(S, "WORKERS", 2)
    monkeypatch.setattr(S, "FORK_MIN_SHAPES", 1)
    monkeypatch.setattr(S, "_cores", lambda: 2)
    forks = _forks(monkeypatch)
    two = S._Search(req, req.gpus)
    two.enumerate()
    two.prepare()
    assert len(forks) == 1
    dropped = sum(grp.values is None for grp in two.groups)
    assert (dropped > 0) == (drop_above == 0.0)
    for name in ("cell_block", "cell_mem", "cell_floor", "floors"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name
    assert [(b.shape, b.variant, b.mbs) for b in one.blocks] == [
        (b.shape, b.variant, b.mbs) for b in two.blocks
    ]
    assert (one.rejections, one.enumerated, one.fitting) == (
        two.rejections, two.enumerated, two.fitting,
    )  # fmt: skip
    assert _result_fields(S.plan(req)) == _result_fields(alone)
    assert len(forks) == 2


def test_a_dropped_group_is_restored_bit_for_bit(h800):
    """A group whose slabs' memory a child dropped (search._Group.drop) gets it back from the
    screen (search._Search.restore) with the same floats, and its blocks read the same
    memory: DeepSeek-V3 on 256 H800, every group of one unit (tp 2, cp 1)."""
    req = _request("deepseek-v3", h800, gpus=256, seq=4096, global_batch=1024, top_k=5)
    search = S._Search(req, 256)
    chunk = search._chunk(2, 1)
    assert chunk.groups
    for grp in chunk.groups:
        kept, mem = grp.slabs().copy(), grp.mem()
        grp.drop()
        grp.memory.clear()
        with pytest.raises(ValueError, match="dropped"):
            grp.mem()
        search.restore(grp)
        assert np.array_equal(grp.slabs(), kept)
        assert np.array_equal(grp.mem(), mem)


def test_entries_read_the_slabs_as_mem_of(h800):
    """``_Group.entries`` (what ``expand`` lists) is ``mem_of`` at the same indices, inf in
    the slabs the screen left out: DeepSeek-V3 on 256 H800, every group of unit (tp 2, cp 1),
    every (variant, zero, micro-batch) and three (sp, mode) cells of each."""
    req = _request("deepseek-v3", h800, gpus=256, seq=4096, global_batch=1024, top_k=5)
    search = S._Search(req, 256)
    left_out = 0
    for grp in search._chunk(2, 1).groups:
        for v in range(len(grp.variants)):
            mem = grp.mem_of(v)  # [Z, M, S, R]
            n_z, n_m = mem.shape[:2]
            flat = mem.reshape(n_z, n_m, -1)
            z, m = (a.ravel() for a in np.indices((n_z, n_m)))
            for sr in (0, flat.shape[2] // 2, flat.shape[2] - 1):
                at = np.full(len(z), sr)
                assert np.array_equal(grp.entries(v, z, m, at), flat[z, m, sr])
            left_out += int((~grp.live[v]).sum())
    assert left_out > 0  # some slabs are left out, and read as inf


def test_a_unit_visited_again_screens_the_same(h800):
    """The screen keeps the activations of the last few units (``fit.ACT_CACHE_BYTES``): a
    group screened again after other units gives the same slabs bit for bit, as a screen
    that never saw those units."""
    req = _request("deepseek-v3", h800, gpus=256, seq=4096, global_batch=1024, top_k=5)
    first = S._Search(req, 256)
    groups = first._chunk(2, 1).groups
    first._chunk(4, 1)  # other units in between
    fresh = S._Search(req, 256)
    for grp in groups[:: max(1, len(groups) // 8)]:
        args = (grp.shape, grp.variants, grp.mbs, grp.per_dp, grp.sps, grp.allowed)
        again, mine = first._slabs(*args), fresh._slabs(*args)
        assert np.array_equal(again[0], mine[0]) and np.array_equal(again[1], mine[1])
        assert again[2] == mine[2]
        assert np.array_equal(again[1], grp.slabs())


@LINUX_ONLY
def test_a_failed_child_leaves_the_result_unchanged(h100, monkeypatch):
    """If the child cannot send its chunks, the search runs them itself: same result."""
    req = _request("llama3-8b", h100, gpus=64, global_batch=128, top_k=5)
    monkeypatch.setattr(S, "WORKERS", 1)
    alone = S.plan(req)
    monkeypatch.setattr(S, "WORKERS", 2)
    monkeypatch.setattr(S, "FORK_MIN_SHAPES", 1)
    monkeypatch.setattr(S, "_cores", lambda: 2)

    def broken(pipe, chunks):
        raise RuntimeError("the child fails")

    monkeypatch.setattr(S, "_send", broken)
    forks = _forks(monkeypatch)
    assert _result_fields(S.plan(req)) == _result_fields(alone)
    assert len(forks) == 1


def test_a_small_search_runs_in_one_process(h100, monkeypatch):
    """Llama 3 8B on 64 H100 (benchmarks/plan.py's small case) has fewer shapes than
    FORK_MIN_SHAPES: it never forks."""
    import os

    def no_fork() -> int:
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)
    req = _request("llama3-8b", h100, gpus=64, seq=8192, global_batch=256, top_k=5)
    assert S.plan(req).best is not None


@LINUX_ONLY
def test_an_error_in_the_parent_still_reaps_the_child(h100, monkeypatch):
    """An error in this process's share propagates, and the child is waited for (no zombie)."""
    import os

    req = _request("llama3-8b", h100, gpus=64, global_batch=128, top_k=5)
    monkeypatch.setattr(S, "WORKERS", 2)
    monkeypatch.setattr(S, "FORK_MIN_SHAPES", 1)
    monkeypatch.setattr(S, "_cores", lambda: 2)
    forks = _forks(monkeypatch)
    real = S._Search._chunk
    parent = os.getpid()

    def failing(self, tp, cp):
        if os.getpid() == parent:
            raise RuntimeError("the parent fails")
        return real(self, tp, cp)

    monkeypatch.setattr(S._Search, "_chunk", failing)
    with pytest.raises(RuntimeError, match="the parent fails"):
        S.plan(req)
    assert len(forks) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forks[0], os.WNOHANG)  # already reaped


def test_bounds_splits_slowest_is_the_stage_max_bit_for_bit():
    """``StepBounds.splits`` takes the slowest stage as a running maximum over a few stages
    and as one reduce over many (``FEW_STAGES``; pp 2 and 4, 8 and 16 here): the same floats
    as the maximum over the stage axis of the per-kind sums times each stage's layer counts,
    plus the ends on the first and last stage (what it took before); a DualPipe rank's, the
    mean of its two stages (step.dualpipe_ranks)."""
    from tpcalc.calc.plan import space

    spec = load_model("deepseek-v3")
    req = build_request(spec, load_hardware("h800"), gpus=256, seq=4096, global_batch=512)
    s = S._Search(req, req.gpus)
    bounds, modes = s.bounds, s.d.recompute
    mbs, sps = [1, 2], [True, False]
    slowest_stages = set()
    dualpipe = 0
    for tp, pp, ep, etp in ((1, 4, 8, 1), (2, 8, 16, 1), (4, 16, 4, 2), (8, 2, 32, 1)):
        shape = Shape(tp=tp, cp=1, pp=pp, dp=256 // (tp * pp), ep=ep, etp=etp)
        vs = space.variants(s.d, req, pp)
        slowest, f0, total0 = bounds.splits(shape, vs, mbs, sps, modes)
        kind_on, kind_f_on, first, last, first_f = bounds.kind_arrays(shape, mbs, sps, modes)
        df, db = bounds.ep_gaps(shape, mbs, sps)  # the EP overlap is searched (DeepSeek)
        for i, v in enumerate(vs):
            # where Megatron-Core refuses the overlap, each MoE layer's all-to-all exposed
            at = bounds.refused(shape, v, modes)[None, None, :, None]
            # ... and once more in the forward that full recompute re-runs
            full = np.array([m.recompute is Recompute.full for m in modes])[None, None, :, None]
            again = full * df[:, :, None, :]
            kind = np.where(at, kind_on + ((df + db)[:, :, None, :] + again), kind_on)
            kind_f = np.where(at, kind_f_on + df[:, :, None, :], kind_f_on)
            counts = bounds.stage_counts(pp, v.vpp)
            per = kind @ counts.T  # [M, S, R, stages]
            per[..., 0] += first
            per[..., -1] += last
            stage0_f = kind_f @ counts[0] + first_f
            if v.schedule is Schedule.dualpipe:  # rank r runs stages r and p-1-r, half each
                last_f = bounds._stacked_rows(shape, mbs, sps, modes)[8]
                ranks = (per + per[..., ::-1]) / 2
                assert np.array_equal(slowest[i, 0], ranks.max(axis=-1)), (shape, v)
                assert np.array_equal(total0[i, 0], ranks[..., 0]), (shape, v)
                last_stage_f = kind_f @ counts[-1] + last_f
                assert np.array_equal(f0[i, 0], (stage0_f + last_stage_f) / 2), (shape, v)
                dualpipe += 1
                continue
            assert np.array_equal(slowest[i, 0], per.max(axis=-1)), (shape, v)
            assert np.array_equal(total0[i, 0], per[..., 0]), (shape, v)
            assert np.array_equal(f0[i, 0], stage0_f), (shape, v)
            slowest_stages.update(np.unique(per.argmax(axis=-1)).tolist())
    assert len(slowest_stages) > 1  # the slowest stage is not always the same one
    assert dualpipe == 4  # one DualPipe variant per shape


def test_bounds_terms_per_variant_are_its_own_bit_for_bit():
    """``StepBounds.terms`` takes the ZeRO tails once per vpp and gives every variant its
    vpp's row: each variant's terms are those of a call with that variant alone."""
    from tpcalc.calc.plan import space

    spec = load_model("deepseek-v3")
    req = build_request(spec, load_hardware("h800"), gpus=256, seq=4096, global_batch=512)
    s = S._Search(req, req.gpus)
    bounds, modes = s.bounds, s.d.recompute
    zeros = [int(z) for z in s.timed_zeros]
    distributed = [z >= 1 for z in zeros]
    mbs, sps, per_dp = [1, 2], [True, False], 512 // 16
    consts = set()
    for tp, pp, ep in ((1, 4, 8), (2, 8, 16)):
        shape = Shape(tp=tp, cp=1, pp=pp, dp=256 // (tp * pp), ep=ep, etp=1)
        vs = space.variants(s.d, req, pp)
        assert len({v.vpp for v in vs}) < len(vs)  # variants share a vpp
        got = bounds.terms(shape, vs, mbs, per_dp, sps, modes, distributed, zeros)
        for i, v in enumerate(vs):
            alone = bounds.terms(shape, [v], mbs, per_dp, sps, modes, distributed, zeros)
            assert np.array_equal(got.const[i], alone.const[0]), (shape, v)
            assert np.array_equal(got.rest[i], alone.rest[0]), (shape, v)
            for both, one in zip(got.hinges, alone.hinges, strict=True):
                for x, y in zip(both, one, strict=True):
                    assert np.array_equal(x[i], y[0]), (shape, v)
            consts.add(tuple(got.const[i].tolist()))
    assert len(consts) > 2  # the rows differ with the vpp (and the shape)


@pytest.mark.parametrize(
    ("model", "mtp"), [("deepseek-v3", True), ("deepseek-v3", False), ("qwen3-30b-a3b", False)]
)
def test_bounds_prime_is_the_shard_by_shard_sums_bit_for_bit(model, mtp):
    """``StepBounds.prime`` (one pass per (tp, cp, sp, micro-batch) over every (ep, etp), the
    routed experts' sums as arrays over the pairs) caches for each shard exactly the arrays and
    numbers ``_stacked_of`` builds one shard at a time (``work``), for every recompute mode:
    the same bytes, with and without the MTP module's MoE layer, at tp 1 (no TP collectives)
    and tp > 1, and with ep 1 among the pairs (no all-to-all)."""
    req = build_request(
        load_model(model), load_hardware("h800"), gpus=256, seq=4096, global_batch=512,
        memory=MemoryTechniques(mtp=mtp),
    )  # fmt: skip
    fast, slow = S._Search(req, req.gpus).bounds, S._Search(req, req.gpus).bounds
    d = S._Search(req, req.gpus).d
    modes = d.recompute
    pairs = [(ep, etp) for ep in d.ep for etp in d.etp][::-1]  # not in the domain's order
    checked = set()
    for tp, cp, sp, b in itertools.product((1, 2, 8), (1, 2), (True, False), (1, 2)):
        fast.prime(tp, cp, sp, b, pairs, modes)
        for ep, etp in pairs:
            got = fast.stacked(S.Shape(tp, cp, 1, 1, ep, etp), b, sp, modes)
            want = slow.stacked(S.Shape(tp, cp, 1, 1, ep, etp), b, sp, modes)
            assert len(got) == len(want)
            for x, y in zip(got, want, strict=True):
                x, y = np.asarray(x), np.asarray(y)
                assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes())
            checked.add((tp, cp, ep, etp, sp and tp > 1, b))
    # every shard came from prime's pass, none from work (slow took each one by one)
    assert fast.shards == slow.shards == len(checked) and not fast._work
    assert len(pairs) > 2 * len(d.etp) and (1, 1) in pairs


@pytest.mark.parametrize(
    ("model", "pins"),
    [("qwen3-30b-a3b", {}), ("llama3-8b", {"recompute": ("none", "selective", "full")})],
)
def test_cut_staircase_is_the_staircase(h100, monkeypatch, model, pins):
    """A large group's staircase taken with the floors of only the cells it may keep
    (``_Search._cut_staircase``) is ``_staircase`` over every cell's floor
    (``StepBounds.floors``): the same cells, memory and floors, bit for bit. Every group is
    made large (``EAGER_BOUNDS`` 0) so that each goes through the cuts; the cuts never exceed
    the floors (``StepBounds.floor_cuts``), and some cells are left out without a floor."""
    from tpcalc.calc.plan.bounds import StepBounds

    monkeypatch.setattr(S, "EAGER_BOUNDS", 0)
    seen, taken = [], []
    cut_staircase, floors = S._Search._cut_staircase, StepBounds.floors

    def record(self, parts, least, fit_z):
        got = cut_staircase(self, parts, least, fit_z)
        seen.append((self.bounds, parts, least, fit_z, got))
        return got

    def counted(self, parts, fit_z, cells):
        taken.append(len(cells))
        return floors(self, parts, fit_z, cells)

    monkeypatch.setattr(S._Search, "_cut_staircase", record)
    monkeypatch.setattr(StepBounds, "floors", counted)
    s = S._Search(_request(model, h100, gpus=32, global_batch=64, pins=pins), 32)
    s.enumerate()
    n_taken, cells = sum(taken), 0
    for bounds, parts, least, fit_z, got in seen:
        n_v = least.shape[0]
        mem = least.reshape(n_v, -1)
        where = np.flatnonzero(np.isfinite(mem))
        every = np.full(mem.shape, np.inf)
        every.ravel()[where] = floors(bounds, parts, fit_z, where)
        assert np.all(bounds.floor_cuts(parts, fit_z, where) <= every.ravel()[where])
        want = S._staircase(mem, every * (1 - 2 * S.BOUND_MARGIN))
        for x, y in zip(got, want, strict=True):
            assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes())
        cells += len(where)
    assert seen and n_taken < cells  # some cells were left out without their floor


def test_cut_staircase_takes_a_second_round_of_floors():
    """``_Search._cut_staircase`` by hand: cells by memory A, B, C, D with cuts 1, 5, 7, 12
    and floors 10, 6, 7, 12. The cuts' staircase asks A's floor only; B and C have cuts
    below A's floor (10), so their floors are taken too; D's cut (12) is at least 10, so D is
    left out without one. The staircase is then A (10) and B (6, below 10); C (7, not below
    6) and D go, as ``_staircase`` over every floor gives."""
    from types import SimpleNamespace

    mem = np.array([[1.0, 3.0, 2.0, 4.0, np.inf]])  # A, C, B, D and a cell that does not fit
    cuts = np.array([[1.0, 7.0, 5.0, 12.0, np.inf]])
    floors = np.array([[10.0, 7.0, 6.0, 12.0, np.inf]])
    asked = []

    def floor_of(parts, fit_z, cells):
        asked.append(sorted(cells.tolist()))
        return floors.ravel()[cells]

    fake = SimpleNamespace(
        bounds=SimpleNamespace(floor_cuts=lambda p, f, cells: cuts.ravel()[cells], floors=floor_of)
    )
    got = S._Search._cut_staircase(fake, None, mem, None)
    scale = 1 - 2 * S.BOUND_MARGIN
    assert asked == [[0], [1, 2]]
    assert got[0].tolist() == [0, 0] and got[1].tolist() == [1.0, 2.0]
    assert got[2].tolist() == [10.0 * scale, 6.0 * scale]
    want = S._staircase(mem, floors * scale)
    assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))


# ---- a node-aware dispatcher (Megatron-Core flex: DeepEP / HybridEP) ----


@pytest.mark.parametrize("batched", [True, False])
def test_bounds_never_exceed_step_time_with_a_node_aware_dispatcher(h100, batched, monkeypatch):
    """Qwen3 30B-A3B on 16 H100 (two nodes), ``ep_node_dedup`` on and the EP all-to-all
    exposed: every bound of every candidate is at most ``step_time`` under the same options,
    whether the bounds are taken over the (ep, etp) pairs at once (``StepBounds.prime``) or
    shard by shard (``StepBounds.work``). The bounds price the dispatch as step._layer_work
    does (``roofline.dispatch_time_s``); the plain all-to-all of every copy is the larger once
    EP spans nodes (EP 16 here)."""
    from tpcalc.calc.layout.groups import place_groups
    from tpcalc.calc.plan.bounds import StepBounds
    from tpcalc.calc.time.step import step_time

    if not batched:
        monkeypatch.setattr(StepBounds, "prime", lambda self, *a: None)
    req = _request(
        "qwen3-30b-a3b", h100, time_options=TimeOptions(ep_node_dedup=True),
        pins={"recompute": ("selective",), "sp": (True,), "ep_overlap": (False,), "ep": (8, 16)},
    )  # fmt: skip
    s, picks, _, lbs = _search(req)
    assert s.opts.ep_node_dedup and s.bounds.opts.ep_node_dedup
    # shards taken one by one are cached in ``_work``; ``prime``'s are counted in ``shards`` only
    assert (len(s.bounds._work) < s.bounds.shards) == batched
    across = 0
    for j, row in enumerate(picks):
        layout, run = s.layout_run(_pick(row))
        across += place_groups(layout)["ep"].nodes > 1
        t = step_time(req.spec, req.hw, layout, run, s.opts).step_time_s
        assert lbs[j] <= t, (layout, run, lbs[j], t)
    assert across > 0  # some candidates send the dispatch over the network


def test_bounds_carry_the_nic_floor_of_link_bound_candidates():
    """Where the EP all-to-all and ZeRO-3's per-micro-batch traffic share each GPU's NIC
    (DeepSeek-V3 on 256 H800, TP4 inside a node, EP128 and DP64 across nodes), the step is at
    least their times added (step.py, link contention); stage 0's share of that traffic
    (``bounds._net_dp`` + ``_net_ep``) keeps each bound at most its step and, with one stage,
    within the margin of it. (ZeRO-3 only: ZeRO-2's gradient reduce-scatters and the all-to-all
    together take less NIC time than the step's other parts, so its layout here has no link
    contention to carry; ETP 1 only: at ETP 2 the expert-DP group is one rank, so no expert
    traffic crosses nodes.)"""
    req = build_request(
        load_model("deepseek-v3"), load_hardware("h800"), gpus=256, seq=4096, global_batch=960,
        dtype="fp8", pins={"tp": (4,), "cp": (1,), "pp": (1,), "zero": (3,), "ep": (128,),
                           "etp": (1,), "micro_batch": (1,), "recompute": ("none",)},
    )  # fmt: skip
    s, picks, _, lbs = _search(req)
    assert len(picks) >= 1
    for j in range(len(picks)):
        st = s.exact(_pick(picks[j]))
        assert st.link_contention_time_s > 0
        assert lbs[j] <= st.step_time_s
        assert lbs[j] >= st.step_time_s * (1 - 1e-6)


def test_nic_floor_takes_the_stage_with_the_most_moe_layers():
    """DeepSeek-V3's first three layers are dense, so at PP16 stage 0 holds no MoE layer and
    stage 1 four: under ZeRO-3 each micro-batch re-gathers and reduces stage 1's experts over
    a group that crosses nodes, and the step is at least that stage's NIC time
    (step._busiest_link_s takes every stage). Stage 0's traffic alone bounded these layouts at
    0.23 of their step (and DeepSeek-V3 on 2,048 H800 timed 1,087 layouts exactly, 770 of them
    ZeRO-3 bounded below 0.7 of their step; 248 with the stage of most MoE layers)."""
    req = build_request(
        load_model("deepseek-v3"), load_hardware("h800"), gpus=256, seq=4096, global_batch=960,
        pins={"tp": (4,), "cp": (1,), "pp": (16,), "zero": (3,), "ep": (1,), "etp": (8,),
              "micro_batch": (1,), "recompute": ("full",), "schedule": ("1f1b",)},
    )  # fmt: skip
    s, picks, _, lbs = _search(req)
    stages = s.bounds.nic_stages(16, 1)
    # stage 0, the stage of most MoE layers, and the last (its MTP module: 11.6B parameters
    # more, gathered for every micro-batch under ZeRO-3)
    assert stages[0] == 0 and stages[-1] == 15 and len(stages) == 3
    moe = [req.spec.is_moe_layer(i) for i in range(req.spec.num_hidden_layers)]
    split = stage_layers(req.spec.num_hidden_layers, 16, 1)
    counts = [sum(moe[i] for i in layers) for layers in split]
    assert counts[stages[1]] == max(counts) > counts[0]
    assert len(picks)
    for j in range(len(picks)):
        st = s.exact(_pick(picks[j]))
        assert lbs[j] <= st.step_time_s
        assert lbs[j] >= 0.9 * st.step_time_s, (lbs[j], st.step_time_s)


def test_bounds_price_the_cp_ring_as_the_step_does(small):
    """The CP ring's exposed part (``step._layer_work``: (cp − 1) K,V steps hidden under the
    attention, dK,dV too in the backward) is in each layer kind's bound: with it left at 0 the
    bounds of CP candidates fell as low as 0.49 of the exact step on Llama 3 8B at cp 16 and the
    DeepSeek-V3/256 search timed 8,211 layouts exactly (492 with it)."""
    _, s, picks, _, lbs = small
    ratios = _cp_bound_ratios(s, picks, lbs, seed=5, n=120)
    assert ratios[len(ratios) // 2] > 0.9999  # the median CP candidate's bound is its step


def _cp_bound_ratios(s, picks, lbs, *, seed: int, n: int) -> list[float]:
    """Bound / exact step of up to ``n`` sampled candidates with cp > 1, sorted; each bound
    at most its step."""
    rng = random.Random(seed)
    cp_rows = [j for j in range(len(picks)) if s.layout_run(_pick(picks[j]))[0].cp > 1]
    assert cp_rows
    ratios = []
    for j in rng.sample(cp_rows, min(n, len(cp_rows))):
        t = s.exact(_pick(picks[j])).step_time_s
        assert lbs[j] <= t
        ratios.append(lbs[j] / t)
    return sorted(ratios)


# ---- groups bounded only when a search may need them (search._Search._defer) ----


def _floors_against_steps(s, picks, floor_of, binds, seed):
    """Each of 600 sampled candidates' ``floor_of(search, block, layout, run)`` against its
    exact step: never above it, and above 0 where ``binds(search, block, layout)``; returns the
    floor / step ratios of those."""
    rng = random.Random(seed)
    ratios = []
    for j in rng.sample(range(len(picks)), 600):
        p = _pick(picks[j])
        blk = s.blocks[p.block]
        layout, run = s.layout_run(p)
        floor = floor_of(s, blk, layout, run)
        step = s.exact(p).step_time_s
        assert floor <= step, (layout, run, floor, step)
        if binds(s, blk, layout):
            assert floor > 0
            ratios.append(floor / step)
    return ratios


def test_ring_floor_never_exceeds_the_step(h100):
    """``StepBounds.ring_floor``, the seconds a shape's CP ring keeps its link busy, is at most
    the exact step of every candidate of the shape (the step is at least its busiest link's
    time, step._busiest_link_s), and near it where the ring dominates, so it can defer."""
    s, picks, _, _ = _search(_request("llama3-8b", h100, gpus=128, global_batch=128))
    ratios = _floors_against_steps(
        s, picks,
        lambda s, blk, layout, run: s.bounds.ring_floor(blk.shape, blk.per_dp),
        lambda s, blk, layout: blk.shape.cp > 1,
        seed=3,
    )  # fmt: skip
    assert ratios and max(ratios) > 0.5


def test_dp_link_floor_never_exceeds_the_step(h100):
    """``StepBounds.dp_link_floor``, the seconds stage 0's data-parallel collectives keep its
    NIC busy, is at most the exact step of every candidate (the step is at least its busiest
    link's time, step._busiest_link_s), and near it where ZeRO-3 gathers every micro-batch's
    weights over the network, so it can defer."""
    s, picks, _, _ = _search(_request("llama3-70b", h100, gpus=128, global_batch=128))
    ratios = _floors_against_steps(
        s, picks,
        lambda s, blk, layout, run: s.bounds.dp_link_floor(
            blk.shape, [blk.variant], [run.micro_batch], blk.per_dp, [int(layout.zero)]
        )[0, 0],
        lambda s, blk, layout: layout.zero == 3 and s.bounds.links(blk.shape)["dp"].nodes > 1,
        seed=7,
    )  # fmt: skip
    assert ratios and max(ratios) > 0.5


def _deferred_then_settled(
    req, monkeypatch, ring: float, dp: float, compute: float = math.inf
):  # fmt: skip
    """The groups a search defers at these thresholds (in ideal steps), their floors, and
    those still deferred after the top k and the front (``_settled``), once the result, forked
    or not, is checked to be the one with every group bounded up front."""
    monkeypatch.setattr(S, "WORKERS", 1)
    monkeypatch.setattr(S, "DEFER_IDEAL_STEPS", math.inf)
    monkeypatch.setattr(S, "DEFER_DP_IDEAL_STEPS", math.inf)
    monkeypatch.setattr(S, "DEFER_COMPUTE_IDEAL_STEPS", math.inf)
    upfront = S.plan(req)
    monkeypatch.setattr(S, "DEFER_IDEAL_STEPS", ring)
    monkeypatch.setattr(S, "DEFER_DP_IDEAL_STEPS", dp)
    monkeypatch.setattr(S, "DEFER_COMPUTE_IDEAL_STEPS", compute)
    s = S._Search(req, req.gpus)
    s.enumerate()
    s.prepare()
    deferred = [g for g in s.groups if g.deferred is not None]
    floors = [g.deferred for g in deferred]
    S._settled(s, req.top_k)
    left = [g for g in deferred if g.deferred is not None]
    same = ("top", "pareto", "enumerated", "feasible", "rejections", "why_best", "why")
    for workers in (1, 2):
        monkeypatch.setattr(S, "WORKERS", workers)
        monkeypatch.setattr(S, "FORK_MIN_SHAPES", 1)
        monkeypatch.setattr(S, "_cores", lambda: 2)
        got = S.plan(req)
        for name in same:
            assert getattr(got, name) == getattr(upfront, name), (workers, name)
    return s, deferred, floors, left


@LINUX_ONLY
def test_deferred_groups_change_no_result(h100, monkeypatch):
    """Llama 3 8B on 128 H100 defers 10 groups of high cp (DEFER_IDEAL_STEPS 4): the top 5 and
    the front, up to 3 times the best step, bound 6 of them again (``_settled``: cells under a
    Pareto budget whose time their floor does not pass) and never the other 4, and the result,
    forked or not, is the one with every group bounded up front."""
    req = _request("llama3-8b", h100, gpus=128, global_batch=128, top_k=5)
    _, deferred, _, left = _deferred_then_settled(req, monkeypatch, ring=4.0, dp=math.inf)
    assert 0 < len(left) < len(deferred)
    assert all(g.shape.cp > 1 for g in deferred)


@LINUX_ONLY
def test_groups_deferred_on_their_dp_traffic_change_no_result(h100, monkeypatch):
    """With the data-parallel floor's threshold at 2 ideal steps (the ring's off), Llama 3 70B
    on 128 H100 defers 6 groups, all on their NIC traffic; the top 5 and the front bound 5 of
    them again and never the sixth, and the result, forked or not, is the one with every
    group bounded up front."""
    req = _request("llama3-70b", h100, gpus=128, global_batch=128, top_k=5)
    s, deferred, floors, left = _deferred_then_settled(req, monkeypatch, ring=math.inf, dp=2.0)
    assert len(deferred) == 6
    assert all(floor > s.defer_dp_above * (1 - 1e-6) for floor in floors)
    assert len(left) == 1


def _compute_floor(s, blk, p: S._Pick) -> float:
    """``StepBounds.compute_floors`` of one candidate's cell: its block's splits at its
    micro-batch, sp and recompute mode."""
    b, sp, mode = blk.mbs[p.m], blk.sps[p.s], s.d.recompute[p.r]
    splits = s.bounds.splits(blk.shape, [blk.variant], [b], [sp], [mode])
    m = np.array([blk.per_dp // b], dtype=np.float64)
    return float(S.StepBounds.compute_floors(splits, m)[0, 0, 0])


def test_compute_floor_never_exceeds_the_bound_or_the_step(h100):
    """``StepBounds.compute_floors`` (m · the slowest stage's F° + B° + W°) is at most the
    bound of every candidate of its cell (``StepBounds.group``) and so its exact step, for
    sampled Qwen3 30B-A3B candidates on 16 H100 (MoE layers, pipeline stages, recompute
    modes), and close to the step where compute dominates, so it can defer."""
    s, picks, _, lbs = _search(
        _request("qwen3-30b-a3b", h100, pins={"recompute": ("none", "selective", "full")})
    )
    rng = random.Random(11)
    ratios = []
    for j in rng.sample(range(len(picks)), 300):
        p = _pick(picks[j])
        floor = _compute_floor(s, s.blocks[p.block], p)
        step = s.exact(p).step_time_s
        assert floor <= lbs[j] / (1 - S.BOUND_MARGIN) <= step * (1 + 1e-12), (p, floor, lbs[j])
        ratios.append(floor / step)
    assert min(ratios) > 0 and max(ratios) > 0.6


@LINUX_ONLY
def test_groups_deferred_on_their_compute_change_no_result(h100, monkeypatch):
    """With the compute floor's threshold at 2 ideal steps (the others off), Llama 3 70B on
    128 H100 (best step 1.8 ideal steps) defers 28 of its 99 groups on their slowest stage's
    compute alone; the top 5 and the front (up to 3 times the best step, so its low-memory end
    needs some again: cells under a budget whose floor does not pass its time) bound 13 of
    them again and never the other 15, and the result, forked or not, is the one with every
    group bounded up front."""
    req = _request("llama3-70b", h100, gpus=128, global_batch=128, top_k=5)
    s, deferred, floors, left = _deferred_then_settled(
        req, monkeypatch, ring=math.inf, dp=math.inf, compute=2.0
    )
    assert len(deferred) == 28 and all(g.stair is not None for g in left)
    assert all(floor > s.defer_compute_above * (1 - 1e-6) for floor in floors)
    assert len(left) == 15


def test_listing_every_pick_bounds_the_deferred_groups(h100):
    """``picks`` (the memory objective, --all) lists every candidate that fits, those of
    deferred groups too, and a search that lists every one defers nothing."""
    req = _request("llama3-8b", h100, gpus=128, global_batch=128)
    s = S._Search(req, req.gpus)
    s.enumerate()
    assert any(g.deferred is not None for g in s.groups)
    picks, _, _ = s.picks()
    assert all(g.deferred is None for g in s.groups)
    every = S._Search(replace(req, include_all=True), req.gpus)
    every.enumerate()
    assert all(g.deferred is None for g in every.groups)
    assert np.array_equal(picks, every.picks()[0])


@pytest.mark.parametrize("within", [1.1, math.inf])
def test_pareto_front_ends_within_its_cap(h100, within):
    """The front holds the points of the whole front up to ``pareto_within`` times the best
    step, found the same way by branch-and-bound and exhaustively (``_pareto``)."""
    req = _request("llama3-8b", h100, pins=EXHAUSTIVE["llama3-8b"], pareto_within=within)
    s, picks, mems, lbs = _search(req)
    capped = [_pick(picks[j]) for j in S._pareto(s, picks, mems, lbs)]
    s.req = replace(req, pareto_within=math.inf)  # the same candidates, the whole front
    whole = S._pareto(s, picks, mems, lbs)
    times = {j: s.exact(_pick(picks[j])).step_time_s for j in whole}
    best = min(times.values())
    want = [_pick(picks[j]) for j in whole if times[j] <= within * best]
    assert capped == want
    lazy = S._Search(req, req.gpus)
    lazy.enumerate()
    lazy.prepare()
    assert S._pareto_built(lazy) == want
    if within < math.inf:
        assert len(want) < len(whole)


def test_pareto_within_is_checked(h100):
    for bad in (0.5, -1.0, math.nan):
        with pytest.raises(InputError, match="pareto_within"):
            _request("llama3-8b", h100, pareto_within=bad)


COPY_CASES = {
    # DeepSeek-V3 (MTP): 1,024 H800, PP16, TP1-2; GPT-3 5B (a tied head): 64 H800, PP2-4
    "deepseek-v3": dict(gpus=1024, global_batch=2048, pins={"pp": (16,), "tp": (1, 2)}),
    "gpt3-5b": dict(gpus=64, global_batch=256, pins={"pp": (2, 4), "sp": (True,)}),
}


@pytest.mark.parametrize("model", list(COPY_CASES))
def test_bounds_take_the_last_stages_copy_and_dualpipe_ranks(model):
    """Where the last stage holds its own copy of the embedding (DeepSeek-V3's MTP, GPT-3's tied
    head) at PP > 1, the step reduces it and the MTP modules with the stage's parameters (under
    DualPipe rank 0 holds stage 0 and the last) and all-reduces its gradient with the first
    stage's (step.embedding_sync_s). The bounds add the same all-reduce where the schedule
    keeps a copy and read each DualPipe rank's two stages: never above the exact step."""
    case = COPY_CASES[model]
    pins = {**case["pins"], "recompute": ("selective",), "zero": (1,)}
    req = _request(
        model, load_hardware("h800"), gpus=case["gpus"], global_batch=case["global_batch"],
        pins=pins,
    )  # fmt: skip
    s, picks, _, lbs = _search(req)
    rng = random.Random(5)
    synced = dual = 0
    for j in rng.sample(range(len(picks)), min(150, len(picks))):
        p = _pick(picks[j])
        blk, (layout, run) = s.blocks[p.block], s.layout_run(p)
        step = s.exact(p).step_time_s
        assert lbs[j] <= step, (layout, run, lbs[j], step)
        sync = s.bounds._sync_s(blk.shape, run.schedule)
        if run.schedule is Schedule.dualpipe:
            dual += 1
            assert sync == 0.0
        elif layout.pp > 1:
            synced += 1
            assert sync > 0.0
    assert synced and dual


def test_bounds_price_gated_deltanet_cp_as_the_step_does(h100):
    """Qwen3.8's Gated DeltaNet layers under CP: their all-to-alls (``step.gdn_cp_a2a_s``) are
    in the bound of each candidate as in its exact step, so the bound never exceeds the step and
    the median CP candidate's bound is its step; cp that splits a TP rank's key or value heads
    unevenly is refused by the rule ``layout_problems`` applies."""
    req = _request(
        "qwen3.8", h100, gpus=64, global_batch=64, pins={"recompute": ("none", "selective")}
    )
    s, picks, _, lbs = _search(req)
    assert s.rejections["divisibility: Gated DeltaNet heads/tp by cp"] > 0
    ratios = _cp_bound_ratios(s, picks, lbs, seed=3, n=80)
    assert ratios[len(ratios) // 2] > 0.9999
