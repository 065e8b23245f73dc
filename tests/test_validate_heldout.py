"""Held-out published runs: Megatron-Bridge model verification cards (issue 9 §5).

`tpcalc/validation/heldout.yaml` holds runs no fit has seen. These tests check that the file
adds up, that every row computes through `tpcalc validate --runs`, that no row fitted a constant,
and pin one prediction so a model change is noticed (the errors themselves are reported, not
asserted: this is an out-of-sample check, nothing is tuned to it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tpcalc.catalog import load_hardware
from tpcalc.reports.validate_time import case_of, load_runs, outcomes

HELDOUT = Path(__file__).resolve().parents[1] / "tpcalc" / "validation" / "heldout.yaml"
SHA = re.compile(r"^[0-9a-f]{40}$")
CARD_PATH = re.compile(r"^examples/model_verification_cards/[^/]+/card\.yaml$")
# A card prints its metrics with 3 decimals (half a unit: 0.0005).
HALF_LAST_DIGIT = 0.0005


@pytest.fixture(scope="module")
def rows():
    return load_runs(HELDOUT)


def test_ids_are_unique_and_sources_complete(rows):
    assert len(rows) >= 7  # every verified H100/GB200 pretrain_performance item with a config
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    for r in rows:
        src = r["source"]
        assert src["repository"] == "NVIDIA-NeMo/Megatron-Bridge", r["id"]
        assert CARD_PATH.match(src["path"]), r["id"]
        assert SHA.match(src["commit"]) and SHA.match(src["bridge_commit"]), r["id"]
        assert src["item"].startswith("pretrain_performance."), r["id"]
        assert src["status"] == "verified" and src["last_verified"], r["id"]
        assert src["container"].startswith("nvcr.io/nvidia/"), r["id"]
        assert f"--recipe {r['recipe']['function']}" in src["command"], r["id"]
        recipe = r["recipe"]
        assert recipe["path"].endswith(".py") and SHA.match(recipe["commit"]), r["id"]
        assert recipe["commit"] == src["bridge_commit"], r["id"]


def test_layouts_add_up(rows):
    for r in rows:
        tp, pp, cp = r["tp"], r["pp"], r["cp"]
        assert r["gpus"] == tp * pp * cp * r["dp"], r["id"]
        assert r["dp"] * r["grad_accum"] * r["micro_batch"] == r["global_batch"], r["id"]
        fields = r["recipe"]["fields"]
        assert fields["tensor_model_parallel_size"] == tp, r["id"]
        assert fields["pipeline_model_parallel_size"] == pp, r["id"]
        assert fields["context_parallel_size"] == cp, r["id"]
        assert fields["virtual_pipeline_model_parallel_size"] == r["vp"], r["id"]
        assert fields.get("expert_model_parallel_size") == r["ep"], r["id"]
        assert fields["global_batch_size"] == r["global_batch"], r["id"]
        assert fields["micro_batch_size"] == r["micro_batch"], r["id"]
        assert fields["seq_length"] == r["seq_length"], r["id"]
        assert fields["sequence_parallel"] == r["sequence_parallel"], r["id"]


def test_measured_numbers_agree_with_the_printed_step_time(rows):
    # The card prints tokens/s/GPU (GBS · seq / step time / GPUs, its "token-slot throughput")
    # and the step time separately, each to 3 decimals: a mistyped number breaks this. Tolerance:
    # the rounding of the tokens/s cell plus that of the step time carried through the division.
    for r in rows:
        m = r["measured"]
        tokens = r["global_batch"] * r["seq_length"]
        from_step = tokens / (m["step_time_ms"] / 1e3) / r["gpus"]
        tol = HALF_LAST_DIGIT + from_step * HALF_LAST_DIGIT / m["step_time_ms"]
        assert m["tokens_per_s_per_gpu"] == pytest.approx(from_step, abs=tol), r["id"]


def test_every_row_computes_with_its_measured_number(rows):
    done, skipped = outcomes(rows)
    assert skipped == []
    assert [o.case.id for o in done] == [r["id"] for r in rows]
    for o, r in zip(done, rows, strict=True):
        assert o.case.measured_tokens_per_s_per_gpu == r["measured"]["tokens_per_s_per_gpu"]
        assert o.error is not None and o.step.tokens_per_s_per_gpu > 0


def test_no_held_out_row_fitted_a_constant(rows):
    sources = []
    for name in ("h100-sxm", "b200", "gb200"):
        fitted = load_hardware(name).performance.fitted
        for entry in (fitted.compute_scale, fitted.moe_layer_overhead_s):
            if entry is not None:
                sources.append(entry.source)
    assert sources
    for r in rows:
        assert not any(r["id"] in s for s in sources), r["id"]


def test_recipe_options_reach_the_model(rows):
    by_id = {r["id"]: r for r in rows}
    # DeepSeek-V3 H100 perf recipe: cfg.ddp.overlap_grad_reduce = False, TP comm not overlapped
    ds = case_of(by_id["mbcard-deepseek-v3-h100-sxm-1024-bf16"])
    assert not isinstance(ds, str)
    assert not ds.options.overlap.dp_grad_reduce and ds.options.overlap.dp_param_gather
    assert not ds.options.overlap.tp_comm and ds.run.sp
    assert ds.options.chunk_layers == (1,) + (2,) * 30 + (0,)  # "Et|(tt|)*30mL"
    # Qwen3.8-27B GB200 recipe: TP2 with sequence_parallel = False, no DDP overlap, no MTP
    qw = case_of(by_id["mbcard-qwen3.8-27b-gb200-16-bf16"])
    assert not isinstance(qw, str)
    assert qw.layout.tp == 2 and not qw.run.sp
    assert not qw.options.overlap.dp_grad_reduce and not qw.options.overlap.dp_param_gather
    assert not qw.run.memory.mtp


def test_one_prediction_is_pinned(rows):
    # Qwen3-30B-A3B on 8 GB200 (card pretrain_performance.GB200, recipe
    # qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config @ 6e1b478): TP1 PP1 CP1 EP8 DP8, MXFP8,
    # seq 4096, GBS 512 / MBS 4 (16 micro-batches), EP all-to-all overlapped, HybridEP (flex),
    # no recompute, gb200 config as shipped. Printed as 40,075 tokens/s/GPU (±0.5).
    row = next(r for r in rows if r["id"] == "mbcard-qwen3-30b-a3b-gb200-8-mxfp8")
    (o,), _ = outcomes([row])
    assert o.step.tokens_per_s_per_gpu == pytest.approx(40075, abs=0.5)


def test_cli_validates_the_held_out_file(cli):
    r = cli("validate", "--runs", str(HELDOUT), "--format", "json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert {row["id"] for row in out} == {r["id"] for r in load_runs(HELDOUT)}
