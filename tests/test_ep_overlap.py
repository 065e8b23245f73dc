"""The EP all-to-all overlap runs only where Megatron-Core allows it (``calc.ep.overlap``:
Megatron-LM transformer_config.py, the ``overlap_moe_expert_parallel_comm`` asserts).

Each rule is checked on its own; the step model prices a refused overlap as exposed; ``tpcalc
layout --ep-overlap`` refuses such a run in one line; the planner never reports a layout with an
overlap Megatron-Core would refuse, and what it reports is what ``step_time`` prices."""

from __future__ import annotations

import json

import pytest

from tpcalc.calc.ep.overlap import a2a_overlap_problem
from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
from tpcalc.calc.plan.request import build_request
from tpcalc.calc.plan.search import plan
from tpcalc.calc.time.step import (
    Overlap,
    TimeOptions,
    ep_overlap_on,
    ep_overlap_problem,
    step_time,
)
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute, Schedule

# A run Megatron-Core accepts: the shape of the published overlapped runs (runs.yaml:
# Qwen3-235B-A22B PP8 VP4 EP32; GPT-OSS 120B selective layernorm,moe_act; DeepSeek-V3 one MTP)
ALLOWED = dict(
    pp=4, vpp=2, ep=8, full_recompute=False, recompute_modules=("layernorm", "moe_act"),
    recompute_layers=None, dispatcher="alltoall", mtp_layers=1,
)  # fmt: skip


def test_the_published_shape_is_allowed():
    assert a2a_overlap_problem(**ALLOWED) is None
    assert a2a_overlap_problem(**{**ALLOWED, "pp": 1, "vpp": 1}) is None  # no pipeline
    assert a2a_overlap_problem(**{**ALLOWED, "dispatcher": "flex"}) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"vpp": 1}, "--vpp"),
        ({"ep": 1}, "--ep"),
        ({"dispatcher": "allgather"}, "allgather"),
        ({"full_recompute": True}, "full recompute"),
        ({"recompute_layers": 2}, "--recompute-layers"),
        ({"recompute_modules": ("moe_act", "moe")}, "moe from --recompute-modules"),
        ({"mtp_layers": 2}, "MTP"),
    ],
)
def test_each_rule_refuses_on_its_own(change, says):
    problem = a2a_overlap_problem(**{**ALLOWED, **change})
    assert problem is not None and says in problem


QWEN = load_model("qwen3-30b-a3b")
H100 = load_hardware("h100-sxm")
LAYOUT = ParallelLayout(gpus_per_node=8, tp=1, pp=1, dp=16, ep=16)  # EP over two nodes


def _run(recompute: Recompute, modules: tuple[str, ...] = ()) -> LayoutRun:
    return LayoutRun(
        seq=4096, microbatches=8, recompute=recompute,
        memory=MemoryTechniques(recompute_modules=modules),
    )  # fmt: skip


def _step(run: LayoutRun, ep_a2a: bool | None):
    return step_time(QWEN, H100, LAYOUT, run, TimeOptions(overlap=Overlap(ep_a2a=ep_a2a)))


def test_an_allowed_overlap_hides_the_all_to_all():
    run = _run(Recompute.selective)
    exposed, hidden = _step(run, False), _step(run, True)
    assert exposed.ep_exposed_time_s > 0
    assert hidden.ep_exposed_time_s < exposed.ep_exposed_time_s
    assert hidden.step_time_s < exposed.step_time_s


@pytest.mark.parametrize(
    "run", [_run(Recompute.full), _run(Recompute.selective, ("moe",))], ids=["full", "moe"]
)
def test_a_refused_overlap_is_priced_exposed(run):
    assert ep_overlap_problem(QWEN, LAYOUT, run, TimeOptions()) is not None
    assert not ep_overlap_on(QWEN, LAYOUT, run, TimeOptions(overlap=Overlap(ep_a2a=True)))
    assert _step(run, True) == _step(run, False)


def test_dualpipe_overlaps_by_its_own_schedule():
    lay = ParallelLayout(gpus_per_node=8, tp=1, pp=2, dp=8, ep=16)
    run = LayoutRun(seq=4096, microbatches=8, schedule=Schedule.dualpipe, recompute=Recompute.full)
    assert ep_overlap_on(QWEN, lay, run, TimeOptions())  # unset: on with DualPipe
    assert ep_overlap_on(QWEN, lay, run, TimeOptions(overlap=Overlap(ep_a2a=True)))


LAYOUT_ARGS = ("-m", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--tp", "1", "--pp", "1",
               "--dp", "16", "--ep", "16", "--seq", "4096", "--microbatches", "8")  # fmt: skip


def test_layout_refuses_a_refused_overlap_in_one_line(cli):
    r = cli("layout", *LAYOUT_ARGS, "--recompute", "full", "--ep-overlap", "--format", "json")
    assert r.code != 0
    assert r.out == ""
    line = r.err.strip()
    assert "\n" not in line and "--ep-overlap" in line and "full recompute" in line
    ok = cli("layout", *LAYOUT_ARGS, "--recompute", "selective", "--ep-overlap", "-f", "json")
    assert ok.code == 0
    json.loads(ok.out)


def test_the_planner_reports_only_overlaps_megatron_allows():
    """Qwen3-30B-A3B on 16 H100 (no pipeline) with full recompute and the moe module allowed:
    every layout
    the planner prices exactly carries the overlap it was priced with, and that is the overlap
    ``ep_overlap_on`` grants (so ``tpcalc layout`` takes its reproduction command)."""
    req = build_request(
        QWEN, H100, gpus=16, seq=4096, global_batch=64, include_all=True,
        pins={"tp": (1,), "cp": (1,), "pp": (1,), "zero": (1,), "recompute": ("selective", "full"),
              "recompute_modules": (("moe",), ("moe_act",), ("none",))},
    )  # fmt: skip
    result = plan(req)
    granted_by: dict[tuple, set[bool]] = {}
    for c in result.all_feasible:
        granted = ep_overlap_on(QWEN, c.layout, c.run, c.options)
        assert c.options.overlap.ep_a2a == granted
        assert step_time(QWEN, H100, c.layout, c.run, c.options).step_time_s == c.step_time_s
        if c.layout.ep > 1:
            key = (c.run.recompute, c.run.memory.recompute_modules)
            granted_by.setdefault(key, set()).add(granted)
    assert granted_by[(Recompute.full, ())] == {False}
    assert granted_by[(Recompute.selective, ("moe",))] == {False}
    assert granted_by[(Recompute.selective, ("moe_act",))] == {True}


@pytest.mark.parametrize("batched", [True, False])
def test_bounds_take_the_refused_overlap_exposed(batched, monkeypatch):
    """The planner's bounds stay below ``step_time`` where Megatron-Core refuses the overlap
    the search asks for (full recompute, the moe module, pp 2 without vpp), and are as tight
    there as where it is granted (``StepBounds.ep_gaps``): without the gaps the refused
    candidates' bounds are a median 0.86 (least 0.60) of their step (measured), with them 0.985."""
    from statistics import median

    from tpcalc.calc.plan import search as S
    from tpcalc.calc.plan.bounds import StepBounds

    if not batched:
        monkeypatch.setattr(StepBounds, "prime", lambda self, *a: None)
    req = build_request(
        QWEN, H100, gpus=16, seq=4096, global_batch=32,
        pins={"tp": (1,), "cp": (1,), "pp": (1, 2), "ep": (8, 16), "ep_overlap": (True,),
              "recompute": ("selective", "full"), "recompute_modules": (("moe",), ("moe_act",))},
    )  # fmt: skip
    s = S._Search(req, req.gpus)
    s.enumerate()
    picks, _, lbs = s.picks()
    ratio: dict[bool, list[float]] = {True: [], False: []}
    for j, row in enumerate(picks):
        layout, run = s.layout_run(S._Pick(*(int(x) for x in row)))
        t = step_time(QWEN, H100, layout, run, s.opts).step_time_s
        assert lbs[j] <= t, (layout, run, lbs[j], t)
        ratio[ep_overlap_on(QWEN, layout, run, s.opts)].append(lbs[j] / t)
    assert len(ratio[False]) > 100 and len(ratio[True]) > 50
    assert median(ratio[False]) > 0.95 and min(ratio[False]) > 0.9
