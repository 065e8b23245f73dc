"""`tpcalc plan`'s output contract (issue 11 §1): the top-k table, JSON and CSV, --all, the
counts, --explain as `tpcalc layout --explain`, one-line errors, inverse modes.

The contract is checked on a small result priced here by the same functions `tpcalc layout`
uses (``reference_result``: every layout of Llama 3 8B on 8 H100 with TP x DP, ranked by step
time), so it holds whatever the search does; the search itself is tests/test_plan_engine.py's.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
from msgspec.structs import replace

from tests.conftest import run_cli
from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout, layout_problems
from tpcalc.calc.plan.inverse import worst_rank_bytes
from tpcalc.calc.plan.types import Candidate, PlanRequest, PlanResult
from tpcalc.calc.time.step import STEP_PARTS, TimeOptions, step_time
from tpcalc.catalog import load_hardware, load_model
from tpcalc.reports import plan_view

GPUS, SEQ, BATCH = 8, 4096, 16


def reference_result(top_k: int = 10) -> PlanResult:
    """Every TP x DP layout of Llama 3 8B on 8 H100 (mbs 1, ZeRO-1), priced as tpcalc layout
    prices it; ranked by step time; the memory-vs-time front built by hand."""
    spec, hw = load_model("llama3-8b"), load_hardware("h100-sxm")
    card = hw.memory_bytes.value
    options = TimeOptions()
    feasible, rejected = [], {"divisibility": 0, "memory": 0}
    for tp in (1, 2, 4, 8):
        dp = GPUS // tp
        layout = ParallelLayout(gpus_per_node=8, tp=tp, dp=dp, zero=ZeroStage.optimizer)
        run = LayoutRun(seq=SEQ, microbatches=BATCH // dp, with_latency=True)
        if layout_problems(spec, layout, run):
            rejected["divisibility"] += 1
            continue
        memory = worst_rank_bytes(spec, layout, run)
        if memory > card:
            rejected["memory"] += 1
            continue
        st = step_time(spec, hw, layout, run, options)
        part = max(STEP_PARTS, key=lambda p: getattr(st, p))
        feasible.append(
            Candidate(
                layout=layout,
                run=run,
                options=options,
                memory_bytes=memory,
                worst_pp_rank=0,
                card_memory_bytes=card,
                capacity_bytes=card,
                step_time_s=st.step_time_s,
                tokens_per_s_per_gpu=st.tokens_per_s_per_gpu,
                mfu_ratio=st.mfu_ratio,
                dominant_part=part,
                dominant_time_s=getattr(st, part),
                step=st,
            )  # fmt: skip
        )
    ranked = tuple(sorted(feasible, key=lambda c: c.step_time_s))
    front, best = [], float("inf")
    for c in sorted(feasible, key=lambda c: (c.memory_bytes, c.step_time_s)):
        if c.step_time_s < best:
            front.append(c)
            best = c.step_time_s
    request = PlanRequest(spec=spec, hw=hw, gpus=GPUS, seq=SEQ, global_batch=BATCH, top_k=top_k)
    return PlanResult(
        request=request, gpus=GPUS, top=ranked[:top_k], pareto=tuple(front), all_feasible=ranked,
        enumerated=4, feasible=len(feasible), timed_exactly=len(feasible),
        rejections=tuple((k, v) for k, v in rejected.items() if v),
        why_best="reference: fastest of the TP x DP layouts",
    )  # fmt: skip


@pytest.fixture(scope="module")
def result() -> PlanResult:
    return reference_result()


@pytest.fixture
def planned(monkeypatch, result):
    """`tpcalc plan` with the search replaced by the reference result (same request fields)."""
    seen = {}

    def fake_plan(workload, progress=None, **kwargs):
        seen.update(kwargs, model=workload.spec.name, hardware=workload.hw.name)
        top_k = kwargs["top_k"]
        return replace(result, top=result.top[:top_k])

    monkeypatch.setattr("tpcalc.reports.plan.plan_workload", fake_plan)
    return seen


ARGS = ("plan", "-m", "llama3-8b", "--gpus", "8", "--seq", "4096", "--global-batch", "16")


def test_reference_is_a_real_choice(result):
    # Llama 3 8B on 8 H100, 16 sequences of 4096: 16 B/param states of 8.03 B params need
    # 128 GB at TP1 ZeRO-1 dp 8 (states 2+2 B + 12/8 B = 44 GB plus activations): not all fit,
    # and those that fit differ in step time, so the ranking means something.
    assert 1 < len(result.top) <= 4
    times = [c.step_time_s for c in result.top]
    assert times == sorted(times) and times[0] < times[-1]


def test_json_carries_the_top_k_alone_on_stdout(planned, result):
    r = run_cli(*ARGS, "--top", "2", "-f", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [row["rank"] for row in rows] == [1, 2]
    best = result.top[0]
    assert rows[0]["tp"] == best.layout.tp and rows[0]["dp"] == best.layout.dp
    assert rows[0]["step_time_s"] == best.step_time_s
    assert rows[0]["memory_bytes_per_rank"] == pytest.approx(best.memory_bytes, abs=0.5)
    assert planned["top_k"] == 2 and planned["global_batch"] == 16


def test_csv_is_rectangular_and_all_lists_every_feasible_layout(planned, result):
    r = run_cli(*ARGS, "--all", "-f", "csv")
    assert r.code == 0, r.err
    table = list(csv.reader(io.StringIO(r.out)))
    assert len({len(row) for row in table}) == 1
    assert len(table) == 1 + result.feasible
    assert planned["include_all"] is True


def test_table_shows_top_pareto_counts_reason_and_reproduction(planned, result):
    r = run_cli(*ARGS)
    assert r.code == 0, r.err
    out = " ".join(r.out.split())
    assert "memory per rank (GB)" in out and "step time" in out and "MFU" in out
    assert "Pareto front" in out and "How the search went" in out
    assert result.why_best in out
    best = result.top[0]
    # The step time as the table prints it (4 significant digits, in ms or s).
    want = f"tpcalc layout -m llama3-8b --hardware h100-sxm --tp {best.layout.tp} --cp 1"
    assert want in out


def test_counts_add_up(result):
    row = plan_view.counts_report(result).rows[0]
    assert row.check_breakdowns() == []
    rejected = sum(t.value for t in row.terms if t.key.startswith("rejected_"))
    assert row.value("layouts_feasible") + rejected == row.value("layouts_evaluated") == 4


def test_reproduction_command_prices_the_candidate_exactly(result):
    for c in result.top:
        args = plan_view.layout_args("llama3-8b", "h100-sxm", c)
        r = run_cli("layout", *args, "-f", "json")
        assert r.code == 0, r.err
        total = json.loads(r.out)[-1]
        assert total["step_time_s"] == pytest.approx(c.step_time_s, rel=1e-12)
        assert total["memory_bytes_per_rank"] == pytest.approx(c.memory_bytes, rel=1e-12)


def test_explain_is_layout_explain(planned, result):
    r = run_cli(*ARGS, "--explain")
    assert r.code == 0, r.err
    args = plan_view.layout_args("llama3-8b", "h100-sxm", result.top[0])
    direct = run_cli("layout", *args, "--explain")
    # Everything `tpcalc layout --explain` prints after its table is printed by plan --explain.
    tail = direct.out[direct.out.index("\n[") :]
    assert tail.strip() in r.out


def test_pins_and_bounds_reach_the_search(planned):
    r = run_cli(*ARGS, "--tp", "2,4", "--zero", "1", "--recompute", "selective,full",
                "--no-sp", "--max-pp", "4", "--memory-headroom", "0.1", "--reserve-gb", "2",
                "-f", "json")  # fmt: skip
    assert r.code == 0, r.err
    pins = {k: tuple(v) for k, v in planned["pins"].items()}
    assert pins == {"tp": (2, 4), "zero": (1,), "recompute": ("selective", "full"), "sp": (False,)}
    assert planned["bounds"] == {"pp": 4}
    assert planned["memory_headroom"] == 0.1 and planned["reserve_bytes"] == 2e9


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--tp", "2,x"), "--tp '2,x': give an integer or a list"),
        (("--recompute", "some"), "--recompute 'some': give one or more of none, selective, full"),
        (("--schedule", "1f1b,zz"), "--schedule '1f1b,zz': give one or more of"),
        (("--tp", "0"), "--tp must be a positive integer, got 0"),
    ],
)
def test_bad_pins_are_one_line_errors(planned, extra, message):
    r = run_cli(*ARGS, *extra, "-f", "json")
    assert r.code == 1 and r.out == ""
    assert r.err.count("\n") == 1 and message in r.err


def test_pareto_within_reaches_the_search_and_the_front_says_it(planned, result):
    """--pareto-within sets how far the front reaches (0: the whole front); the front's title
    says the reach it was searched with."""
    assert run_cli(*ARGS, "--pareto-within", "2", "-f", "json").code == 0
    assert planned["pareto_within"] == 2.0
    assert run_cli(*ARGS, "--pareto-within", "0", "-f", "json").code == 0
    assert planned["pareto_within"] == math.inf
    assert "up to 3× the best step" in plan_view.pareto_report(result).title
    whole = replace(result, request=replace(result.request, pareto_within=math.inf))
    assert "best step" not in plan_view.pareto_report(whole).title


@pytest.mark.parametrize("value", ["0.5", "-1", "nan"])
def test_a_pareto_reach_below_one_is_a_one_line_error(value):
    r = run_cli(*ARGS, "--pareto-within", value, "-f", "json")
    assert r.code == 1 and r.out == ""
    assert r.err.count("\n") == 1 and "pareto_within" in r.err and "--pareto-within 0" in r.err


def test_gpus_is_required():
    r = run_cli("plan", "-m", "llama3-8b", "--global-batch", "16")
    assert r.code == 2 and r.err.count("\n") == 1 and "--gpus" in r.err


def test_help_has_examples():
    text = " ".join(run_cli("plan", "--help").out.split())
    assert "Examples:" in text and "tpcalc plan -m llama3-70b --gpus 64" in text
    assert "--max-seq" in text and "--largest-micro-batch" in text


# --- inverse modes through the command ------------------------------------------------------
INVERSE = ("plan", "-m", "llama3-405b", "--gpus", "16384", "--tp", "8", "--pp", "16",
           "--zero", "1", "--global-batch", "2048")  # fmt: skip


def test_max_seq_mode_matches_layout_at_the_answer():
    r = run_cli(*INVERSE, "--max-seq", "-f", "json")
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    s = row["max_seq_tokens"]
    assert s % 8 == 0 and row["next_seq_tokens"] == s + 8
    lay = run_cli("layout", "-m", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128",
                  "--zero", "1", "--microbatches", "16", "--seq", str(s), "-f", "json")  # fmt: skip
    assert json.loads(lay.out)[-1]["memory_bytes_per_rank"] == row["memory_bytes_per_rank"]
    assert row["memory_bytes_per_rank"] <= row["memory_budget_bytes"] == 80e9


def test_headroom_in_inverse_mode_shrinks_the_budget():
    r = run_cli(*INVERSE, "--max-seq", "--memory-headroom", "0.1", "--reserve-gb", "2", "-f",
                "json")  # fmt: skip
    row = json.loads(r.out)[0]
    assert row["memory_budget_bytes"] == pytest.approx(80e9 * 0.9 - 2e9, abs=1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--pp", "8,16", "--max-seq"), "--pp: --max-seq and --largest-micro-batch price one"),
        (("--max-seq", "--memory-headroom", "1.5"), "--memory-headroom must be a share in [0, 1)"),
        (("--max-seq", "--dp", "64"), "--dp must be gpus / (tp·cp·pp) = 128"),
    ],
)
def test_inverse_errors_are_one_line(extra, message):
    r = run_cli(*INVERSE, *extra, "-f", "json")
    assert r.code == 1 and r.out == "" and r.err.count("\n") == 1
    assert message in r.err, r.err


def test_inverse_needs_a_global_batch():
    r = run_cli("plan", "-m", "llama3-8b", "--gpus", "8", "--max-seq")
    assert r.code == 1 and "--max-seq and --largest-micro-batch need --global-batch" in r.err


def test_units_in_headers(planned):
    r = run_cli(*ARGS)
    assert re.search(r"step time \((ms|s)\)", r.out)


def test_objective_gpus_finds_the_fewest_counts_tried(monkeypatch, result):
    # A planner whose best step halves with every doubling of GPUs (1.0 s on 8 GPUs): a
    # 0.3 s target needs 8 · 1.0 / 0.3 = 26.7 GPUs, i.e. 32 among whole 8-GPU nodes
    # (24 gives 0.333 s); the search tries powers of two, then bisects node multiples.

    from tpcalc.calc.plan.types import Objective

    tried = []

    def fake_plan(request, gpus, progress=None):  # the engine's search on one GPU count
        tried.append(gpus)
        assert request.objective is Objective.time
        top = tuple(replace(c, step_time_s=8.0 / gpus) for c in result.top[:1])
        return replace(result, gpus=gpus, top=top)

    monkeypatch.setattr("tpcalc.calc.plan.search._plan_gpus", fake_plan)
    r = run_cli(*ARGS[:3], "--gpus", "64", "--global-batch", "16", "--objective", "gpus",
                "--target-step-time", "0.3")  # fmt: skip
    assert r.code == 0, r.err
    assert "on 32 × h100-sxm" in r.out and "Fewest GPUs for a 0.3 s step" in r.out
    assert 24 in tried and 32 in tried
    r = run_cli(*ARGS[:3], "--gpus", "64", "--global-batch", "16", "--objective", "gpus",
                "-f", "json")  # fmt: skip
    assert r.code == 1 and "--objective gpus needs --target-step-time" in r.err


def test_pareto_is_spread_when_long(result):
    report = plan_view.pareto_report(result, most=2)
    assert len(report.rows) == min(2, len(result.pareto))
    points = plan_view.spread(tuple(range(10)), 4)  # type: ignore[arg-type]
    assert points == (0, 3, 6, 9)


# --- the real search, small --------------------------------------------------------------
@pytest.fixture(scope="module")
def real():
    from tpcalc.reports.plan import plan

    return plan("llama3-8b", "h100-sxm", gpus=8, seq=4096, global_batch=16, top_k=3)


def test_real_search_output_contract(real):
    r = run_cli(*ARGS, "--top", "3", "-f", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [row["rank"] for row in rows] == [1, 2, 3]
    times = [row["step_time_s"] for row in rows]
    assert times == sorted(times) and times[0] == real.top[0].step_time_s
    assert plan_view.counts_report(real).rows[0].check_breakdowns() == []


def test_real_search_layouts_reproduce_in_tpcalc_layout(real):
    for c in real.top:
        r = run_cli("layout", *plan_view.layout_args("llama3-8b", "h100-sxm", c), "-f", "json")
        assert r.code == 0, r.err
        total = json.loads(r.out)[-1]
        assert total["step_time_s"] == pytest.approx(c.step_time_s, rel=1e-9)
        assert total["memory_bytes_per_rank"] == pytest.approx(c.memory_bytes, rel=1e-9)


# Megatron-Bridge's Llama 3.1 405B recipe counts the embedding and the loss as layers of the
# pipeline split (recipes/llama/llama3.py llama31_405b_pretrain_config @ 21d102f, lines
# 1146-1147); the performance summary's 256-GB200 MXFP8 run uses TP4 PP16 VP8 (128 virtual
# stages for 126 layers). With the two options the planner searches that split: the published
# layout is a candidate, every reported layout reproduces in `tpcalc layout` with the same
# options, and without them PP16 VP8 is refused as a divisibility.
ACCOUNTED = (
    "plan", "-m", "llama3-405b", "--hardware", "gb200", "--gpus", "256", "--seq", "8192",
    "--global-batch", "1536", "--dtype", "fp8", "--zero", "1", "--top", "3",
)  # fmt: skip
BOTH_ENDS = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")


def test_the_planner_searches_megatrons_accounted_split():
    pinned = (
        "--tp", "4", "--pp", "16", "--vpp", "8", "--schedule", "interleaved", "--recompute",
        "none", "--micro-batch", "1",
    )  # fmt: skip
    r = run_cli(*ACCOUNTED, *pinned, *BOTH_ENDS, "-f", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert rows and all((x["pp"], x["vpp"]) == (16, 8) for x in rows)
    assert rows[0]["embedding_in_split"] and rows[0]["loss_in_split"]
    # the same layout priced by `tpcalc layout` with the same options (174.9 of 186 GB; the
    # planner searches every overlap on)
    best = rows[0]
    lay = run_cli(
        "layout", "-m", "llama3-405b", "--hardware", "gb200", "--tp", "4", "--pp", "16",
        "--vpp", "8", "--dp", str(best["dp"]), "--zero", "1", "--schedule", "interleaved",
        "--microbatches", str(best["microbatches"]), "--dtype", "fp8", "--recompute", "none",
        "--seq", "8192", "--tp-comm-overlap", *BOTH_ENDS, "-f", "json",
    )  # fmt: skip
    assert lay.code == 0, lay.err
    total = json.loads(lay.out)[-1]
    assert total["memory_bytes_per_rank"] == pytest.approx(best["memory_bytes_per_rank"], rel=1e-9)
    assert total["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    # without the options the even split cannot place 126 layers on 128 virtual stages
    none = run_cli(*ACCOUNTED, *pinned, "-f", "json")
    assert json.loads(none.out) == [] and "divisibility: pp·vpp above the layers" in none.err


def test_accounted_plan_layouts_reproduce_in_tpcalc_layout():
    from tpcalc.calc.time.step import TimeOptions
    from tpcalc.reports.plan import plan

    result = plan(
        "llama3-405b", "gb200", seq=8192, dtype="fp8", gpus=256, global_batch=1536, top_k=3,
        pins={"zero": 1}, time_options=TimeOptions(embedding_in_split=True, loss_in_split=True),
    )  # fmt: skip
    assert result.top
    for c in result.top:
        args = plan_view.layout_args("llama3-405b", "gb200", c)
        assert BOTH_ENDS[0] in args and BOTH_ENDS[1] in args
        r = run_cli("layout", *args, "-f", "json")
        assert r.code == 0, r.err
        total = json.loads(r.out)[-1]
        assert total["step_time_s"] == pytest.approx(c.step_time_s, rel=1e-9)
        assert total["memory_bytes_per_rank"] == pytest.approx(c.memory_bytes, rel=1e-9)
        assert (c.layout.pp * c.run.vpp) and (126 + 2) % c.layout.pp == 0


def test_the_planner_refuses_the_embedding_alone():
    r = run_cli(*ACCOUNTED, BOTH_ENDS[0])
    assert r.code != 0 and r.err.count("\n") == 1
    assert "add loss_in_split" in r.err


def test_overlap_pins_and_memory_techniques_reach_the_search(monkeypatch, result):
    seen = {}

    def fake_plan(workload, progress=None, **kwargs):
        seen.update(kwargs, memory=workload.memory)
        return replace(result, top=result.top[: kwargs["top_k"]])

    monkeypatch.setattr("tpcalc.reports.plan.plan_workload", fake_plan)
    r = run_cli(*ARGS, "--no-ep-overlap", "--cp-overlap", "--no-pp-overlap",
                "--offload-layers", "4", "--no-mtp", "--router-dtype", "bf16",
                "--fp8-linear-inputs", "--moe-dispatcher", "flex", "-f", "json")  # fmt: skip
    assert r.code == 0, r.err
    pins = {k: tuple(v) for k, v in seen["pins"].items()}
    assert pins == {"ep_overlap": (False,), "cp_overlap": (True,), "pp_overlap": (False,)}
    mem = seen["memory"]
    assert (mem.offload_layers, mem.mtp, mem.router_dtype) == (4, False, "bf16")
    assert mem.moe_dispatcher == "flex"
    assert mem.fp8_linear_inputs is True and mem.recompute_modules == ()


def test_the_workloads_warnings_reach_stderr_after_the_search(planned):
    # seed 000's card is Hopper: per-tensor FP8 weights keep a transpose there (TE_NON_TN)
    r = run_cli(*ARGS, "--hardware", "h100-sxm", "--state-recipe", "fp8-params", "-f", "json")
    assert r.code == 0, r.err
    json.loads(r.out)
    assert "--state-recipe fp8-params-transpose prices that" in r.err


def test_inverse_mode_takes_the_memory_techniques_as_layout_does():
    # --offload-layers 2 moves two layers' activations per rank to the host (Megatron
    # --cpu-offloading-num-layers): the longest sequence grows, and tpcalc layout with the same
    # option prices the answer at the same bytes.
    plain = json.loads(run_cli(*INVERSE, "--max-seq", "-f", "json").out)[0]
    r = run_cli(*INVERSE, "--max-seq", "--offload-layers", "2", "-f", "json")
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    assert row["max_seq_tokens"] > plain["max_seq_tokens"]
    lay = run_cli("layout", "-m", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128",
                  "--zero", "1", "--microbatches", "16", "--seq", str(row["max_seq_tokens"]),
                  "--offload-layers", "2", "-f", "json")  # fmt: skip
    assert json.loads(lay.out)[-1]["memory_bytes_per_rank"] == row["memory_bytes_per_rank"]


def test_layouts_planned_with_memory_techniques_reproduce_in_tpcalc_layout():
    # The techniques apply to every candidate and ride in the reproduction command: 2 layers'
    # activations offloaded, FP8 inputs kept although the GEMMs run BF16, the router in BF16.
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.reports.plan import plan

    memory = MemoryTechniques(offload_layers=2, fp8_linear_inputs=True, router_dtype="bf16")
    got = plan("llama3-8b", "h100-sxm", gpus=8, seq=4096, global_batch=16, top_k=2,
               memory=memory)  # fmt: skip
    for c in got.top:
        assert c.run.memory.offload_layers == 2
        args = plan_view.layout_args("llama3-8b", "h100-sxm", c)
        assert "--offload-layers" in args and "--fp8-linear-inputs" in args
        assert plan_view.unrepresentable(c) == []
        r = run_cli("layout", *args, "-f", "json")
        assert r.code == 0, r.err
        total = json.loads(r.out)[-1]
        assert total["step_time_s"] == pytest.approx(c.step_time_s, rel=1e-9)
        assert total["memory_bytes_per_rank"] == pytest.approx(c.memory_bytes, rel=1e-9)


def test_plan_without_dropout_reproduces_in_tpcalc_layout():
    # GPT-3's default keeps dropout masks; --no-dropout plans without them, the option is echoed
    # and rides in the reproduction command, and `tpcalc layout` without it needs more memory.
    r = run_cli("plan", "-m", "gpt3-5b", "--gpus", "8", "--seq", "2048", "--global-batch", "16",
                "--top", "1", "--no-dropout", "-f", "json")  # fmt: skip
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    assert row["dropout"] is False
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.reports.plan import plan

    best = plan("gpt3-5b", "h100-sxm", gpus=8, seq=2048, global_batch=16, top_k=1,
                memory=MemoryTechniques(dropout=False)).top[0]  # fmt: skip
    args = plan_view.layout_args("gpt3-5b", "h100-sxm", best)
    assert "--no-dropout" in args
    without = json.loads(run_cli("layout", *args, "-f", "json").out)[-1]
    assert without["memory_bytes_per_rank"] == pytest.approx(best.memory_bytes, rel=1e-9)
    args.remove("--no-dropout")
    masks = json.loads(run_cli("layout", *args, "-f", "json").out)[-1]
    assert masks["memory_bytes_per_rank"] > without["memory_bytes_per_rank"]


# A DeepEP / HybridEP run (Megatron-Core --moe-token-dispatcher-type flex): Qwen3 30B-A3B on two
# H100 nodes with EP 16, so the dispatch crosses the network. Every candidate is timed with the
# node-aware dispatch, the option is echoed, and the printed reproduction command carries it:
# `tpcalc layout` prices the pick at the planner's step time, and without the option slower.
FLEX = (
    "plan", "-m", "qwen3-30b-a3b", "--gpus", "16", "--seq", "4096", "--global-batch", "64",
    "--ep", "16", "--top", "2", "--moe-dispatcher", "flex",
)  # fmt: skip


def test_plan_with_the_flex_dispatcher_reproduces_in_tpcalc_layout():
    import shlex

    r = run_cli(*FLEX, "-f", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert rows and all(row["ep"] == 16 for row in rows)
    assert all(
        (row["moe_dispatcher"], row["ep_dispatch"]) == ("flex", "node-aware") for row in rows
    )
    assert all(row["moe_probs_in_act"] is True for row in rows)  # echoed for an MoE model
    table = run_cli(*FLEX)
    assert table.code == 0, table.err
    assert "moe_dispatcher=flex" in table.out and "ep_dispatch=node-aware" in table.out
    assert "moe_probs_in_act=yes" in table.out
    line = next(x for x in table.out.splitlines() if x.startswith("Reproduce the best: "))
    command = shlex.split(line.removeprefix("Reproduce the best: "))
    assert command[:2] == ["tpcalc", "layout"] and "--moe-dispatcher" in command
    assert command[command.index("--moe-dispatcher") + 1] == "flex"
    lay = run_cli(*command[1:], "-f", "json")
    assert lay.code == 0, lay.err
    total = json.loads(lay.out)[-1]
    assert total["ep_dispatch"] == "node-aware"
    assert total["step_time_s"] == pytest.approx(rows[0]["step_time_s"], rel=1e-9)
    assert total["memory_bytes_per_rank"] == pytest.approx(
        rows[0]["memory_bytes_per_rank"], rel=1e-9
    )
    # the same layout with NCCL's all-to-all (every copy over the network) is slower
    at = command.index("--moe-dispatcher")
    nccl = run_cli(*command[1:at], *command[at + 2 :], "-f", "json")
    assert json.loads(nccl.out)[-1]["step_time_s"] > total["step_time_s"]


def test_plan_with_the_combine_side_weighting_reproduces_in_tpcalc_layout():
    """--no-moe-probs-in-act (older Megatron-Core keeps every expert output) is echoed, carried
    into the reproducing command, and priced the same by tpcalc layout: more memory per rank
    than the default for the same layout."""
    import shlex

    table = run_cli(*FLEX, "--no-moe-probs-in-act", "--top", "1")
    assert table.code == 0, table.err
    assert "moe_probs_in_act=no" in table.out
    line = next(x for x in table.out.splitlines() if x.startswith("Reproduce the best: "))
    command = shlex.split(line.removeprefix("Reproduce the best: "))
    assert "--no-moe-probs-in-act" in command
    keeps = json.loads(run_cli(*command[1:], "-f", "json").out)[-1]
    assert keeps["moe_probs_in_act"] is False
    command.remove("--no-moe-probs-in-act")
    default = json.loads(run_cli(*command[1:], "-f", "json").out)[-1]
    assert default["moe_probs_in_act"] is True
    assert keeps["memory_bytes_per_rank"] > default["memory_bytes_per_rank"]


def test_plan_with_a_loss_kernel_reproduces_in_tpcalc_layout():
    """--loss-kernel is echoed, carried into the reproducing command, and priced the same by
    tpcalc layout; Transformer Engine's kernel (2 B per logit) needs less memory than the
    default FP32 copy (4 B) for the same layout."""
    import shlex

    args = ("plan", "-m", "llama3-8b", "--gpus", "8", "--seq", "8192", "--global-batch", "16",
            "--pp", "1", "--top", "1")  # fmt: skip
    rows = json.loads(run_cli(*args, "--loss-kernel", "te", "-f", "json").out)
    assert rows and all(row["loss_kernel"] == "te" for row in rows)
    table = run_cli(*args, "--loss-kernel", "te")
    assert table.code == 0, table.err
    assert "loss_kernel=te" in table.out
    line = next(x for x in table.out.splitlines() if x.startswith("Reproduce the best: "))
    command = shlex.split(line.removeprefix("Reproduce the best: "))
    assert command[command.index("--loss-kernel") + 1] == "te"
    te = json.loads(run_cli(*command[1:], "-f", "json").out)[-1]
    assert te["loss_kernel"] == "te"
    assert te["memory_bytes_per_rank"] == pytest.approx(rows[0]["memory_bytes_per_rank"], rel=1e-9)
    at = command.index("--loss-kernel")
    copy = json.loads(run_cli(*command[1:at], *command[at + 2 :], "-f", "json").out)[-1]
    assert copy["loss_kernel"] == "fp32-copy"
    assert copy["memory_bytes_per_rank"] > te["memory_bytes_per_rank"]


def test_help_shows_the_dispatcher():
    words = run_cli("plan", "--help").out.split()
    text = " ".join(w for w in words if w != "\\")  # an example's lines joined
    assert "--moe-dispatcher" in text and "--global-batch 64 --moe-dispatcher flex" in text


# The fitted MoE overhead is a per-layer constant measured at the fit rows' micro-batches
# (configs/hardware/h100-sxm.yaml: 4,096 tokens per rank). Qwen3-30B-A3B on 16 H100 with a
# global batch of 1,024, held to CP 1: at micro-batch 8 (32,768 tokens) the plan says the
# overhead was taken to grow with the tokens, at sequence 2,048 (2,048 tokens) that it was
# extrapolated as the constant; at micro-batch 1 (4,096 tokens, as fitted) it says nothing.
def test_the_plan_cautions_where_the_best_leaves_the_moe_constants_fitted_range():
    from tpcalc.reports.plan import plan
    from tpcalc.reports.plan_view import moe_extrapolation

    def best_note(seq: int, mb: int) -> str | None:
        got = plan(
            "qwen3-30b-a3b", "h100-sxm", gpus=16, seq=seq, global_batch=1024, top_k=2,
            pins={"micro_batch": [mb], "cp": [1]},
        )  # fmt: skip
        assert got.best is not None and got.best.run.micro_batch == mb
        return moe_extrapolation(got)

    above = best_note(4096, 8)
    assert above is not None and "runs 32,768 tokens per micro-batch" in above
    assert "fitted on runs of 4,096" in above and "grow with the tokens beyond 4,096" in above
    below = best_note(2048, 1)
    assert below is not None and "runs 2,048 tokens per micro-batch" in below
    assert "extrapolated as the fitted per-layer constant" in below
    assert best_note(4096, 1) is None
    dense = plan("llama3-8b", "h100-sxm", gpus=8, seq=4096, global_batch=64, top_k=2)
    assert moe_extrapolation(dense) is None


def test_a_recompute_module_set_pin_is_one_set_of_its_modules():
    """`--recompute-modules layernorm,moe_act` pins one set of both modules (the help's
    example); `--recompute none` with modules is selective with them (Megatron: the modules
    replace selective's core attention), as `tpcalc layout --recompute none
    --recompute-modules ...` prices it; full with modules leaves no mode: one line."""
    base = ("plan", "-m", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--gpus", "16",
            "--seq", "4096", "--global-batch", "512", "--tp", "1", "--pp", "1", "--ep", "16",
            "--top", "3", "-f", "json")  # fmt: skip
    both = run_cli(*base, "--recompute-modules", "layernorm,moe_act")
    assert both.code == 0, both.err
    rows = json.loads(both.out)
    assert rows and all(row["recompute_modules"] == "layernorm,moe_act" for row in rows)
    none = run_cli(*base, "--recompute", "none", "--recompute-modules", "layernorm")
    assert none.code == 0, none.err
    rows = json.loads(none.out)
    assert rows and all(
        (row["recompute"], row["recompute_modules"]) == ("selective", "layernorm") for row in rows
    )
    bad = run_cli(*base, "--recompute", "full", "--recompute-modules", "layernorm")
    assert bad.code == 1 and bad.out == "" and bad.err.count("\n") == 1
    assert "recompute_modules layernorm leave no recompute mode" in bad.err


PIN_SMOKE = ("plan", "-m", "llama3-8b", "--gpus", "8", "--seq", "4096", "--global-batch", "16",
             "--top", "2", "-f", "json")  # fmt: skip


@pytest.mark.parametrize(
    ("pin", "field", "allowed"),
    [
        (("--tp", "2"), "tp", {2}),
        (("--tp", "1,2"), "tp", {1, 2}),
        (("--cp", "2"), "cp", {2}),
        (("--pp", "2"), "pp", {2}),
        (("--dp", "4"), "dp", {4}),
        (("--vpp", "2"), "vpp", {2}),
        (("--micro-batch", "1,2"), "micro_batch", {1, 2}),
        (("--zero", "1,3"), "zero", {1, 3}),
        (("--recompute", "none"), "recompute", {"none"}),
        (("--recompute", "selective,full"), "recompute", {"selective", "full"}),
        (("--recompute-modules", "none"), "recompute_modules", {"none"}),
        (("--recompute-modules", "core_attn"), "recompute_modules", {"core_attn"}),
        (("--recompute-modules", "layernorm,mlp"), "recompute_modules", {"layernorm,mlp"}),
        (("--schedule", "interleaved"), "schedule", {"interleaved"}),
        (("--schedule", "zb-h1"), "schedule", {"zb-h1"}),
        (("--schedule", "dualpipe"), "schedule", {"dualpipe"}),
        (("--sp",), "sp", {True}),
        (("--no-sp",), "sp", {False}),
    ],
)
def test_every_pin_a_user_can_type_is_searched(pin, field, allowed):
    """Each pin given alone, with a value its --help describes, plans and holds every listed
    layout to it (a valid value refused, or a crash, is the bug class `--recompute-modules
    layernorm,moe_act` had)."""
    r = run_cli(*PIN_SMOKE, *pin)
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert rows and {row[field] for row in rows} <= allowed, (pin, [row[field] for row in rows])


def test_no_layout_says_how_far_the_closest_is_from_the_card():
    """Llama 3 70B on 8 H100 fits in no layout: the warning gives the screen's floor, a lower
    bound on every layout's memory (``PlanResult.memory_floor_bytes``). It is at least the
    model states spread perfectly over the 8 GPUs (mixed-precision Adam, 16 bytes per
    parameter, ZeRO §3) and at most the memory of the layout that needs the least
    (TP8 ZeRO-3, full recompute, micro-batch 1, as `tpcalc layout` prices it)."""
    from tpcalc.calc.params.counts import total_params
    from tpcalc.calc.plan import search
    from tpcalc.calc.plan.request import build_request

    spec, hw = load_model("llama3-70b"), load_hardware("h100-sxm")
    result = search.plan(build_request(spec, hw, gpus=8, seq=8192, global_batch=128))
    floor = result.memory_floor_bytes
    assert not result.top and not result.feasible
    assert total_params(spec) * 16 / 8 <= floor
    lay = run_cli("layout", "-m", "llama3-70b", "--tp", "8", "--dp", "1", "--zero", "3",
                  "--recompute", "full", "--micro-batch", "1", "--microbatches", "128",
                  "--seq", "8192", "-f", "json")  # fmt: skip
    assert floor <= json.loads(lay.out)[-1]["memory_bytes_per_rank"]
    r = run_cli("plan", "-m", "llama3-70b", "--gpus", "8", "--seq", "8192", "--global-batch",
                "128", "-f", "json")  # fmt: skip
    assert r.code == 0 and json.loads(r.out) == []
    assert f"needs at least {floor / 1e9:,.1f} GB per rank, 80.0 GB usable" in r.err
    assert "try more GPUs" in r.err and len(r.err.splitlines()) == 1


def test_the_memory_budget_is_echoed():
    """Every fit is against card · (1 − headroom) − reserve: both inputs are echoed in the table's
    caption and in every JSON row, beside the capacity they make."""
    args = ("plan", "-m", "llama3-8b", "--gpus", "8", "--seq", "4096", "--global-batch", "32",
            "--top", "2", "--memory-headroom", "0.1", "--reserve-gb", "2")  # fmt: skip
    rows = json.loads(run_cli(*args, "-f", "json").out)
    for row in rows:
        assert (row["memory_headroom_ratio"], row["reserve_bytes"]) == (0.1, 2e9)
        assert row["capacity_bytes"] == pytest.approx(80e9 * 0.9 - 2e9, abs=1)
    assert "memory_headroom_ratio=0.1" in run_cli(*args).out


def test_a_best_that_fills_the_card_without_headroom_gets_a_note():
    """Llama 3 8B on 16 H100 at the defaults: the best fills more than
    ``plan_view.NEAR_FULL_RATIO`` of the card, so the table says what is not counted; with room
    kept free the note goes (and the best changes to one that leaves it)."""
    args = ("plan", "-m", "llama3-8b", "--gpus", "16", "--seq", "8192", "--global-batch", "128",
            "--top", "3")  # fmt: skip
    best = json.loads(run_cli(*args, "-f", "json").out)[0]
    assert best["memory_share_ratio"] > plan_view.NEAR_FULL_RATIO
    assert f"the best fills {best['memory_share_ratio']:.1%} of the card" in run_cli(*args).out
    roomy = run_cli(*args, "--memory-headroom", "0.1")
    assert roomy.code == 0 and "with no room kept free" not in roomy.out
