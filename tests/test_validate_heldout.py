"""Held-out published runs: Megatron-Bridge model verification cards, the GB200 rows of the
26.08 performance summary and the GB200 and H100 rows of the 26.06 one, the NeMo user guide's
tables, Megatron-LM's April 2021 A100 GPT scaling table, Korthikanti et al. 2022's A100 iteration
times and the DeepSeek-V3 report's own run on 2,048 H800 (issue 9 §5).

`tpcalc/validation/heldout.yaml` holds runs no fit has seen. These tests check each source's rows
by that source's rules (a card prints 3-decimal metrics and a step time; the summary prints
integers in a table line), that the file adds up, that every row computes through
`tpcalc validate --runs`, that no row fitted a constant, and pin one prediction so a model change
is noticed (the errors themselves are reported, not asserted: this is an out-of-sample check,
nothing is tuned to it).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from tests.mbridge_presets import PRESET_DEFAULTS, PRESET_LAYOUT
from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import Recompute, Schedule
from tpcalc.errors import ConfigError
from tpcalc.reports.validate_time import case_of, load_runs, outcomes

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "tpcalc" / "validation" / "heldout.yaml"
SHA = re.compile(r"^[0-9a-f]{40}$")
CARD_PATH = re.compile(r"^examples/model_verification_cards/[^/]+/card\.yaml$")
SUMMARY_PATH = "docs/performance-summary.md"
SUMMARY_TABLE = "{edition} NeMo Container / Pre-Training Performance / Model: "
# Each summary edition: the commit it was read at and where its performance recipes live then.
# 26.08 (4ab94df): flat perf_recipes functions; 26.06 (8f341b0): scripts/performance presets.
SUMMARY_EDITIONS = {
    "26.08": "4ab94dfad36641cabdeb96452b21bf676aac4772",
    "26.06": "8f341b04f7b44af14ffc79a0b97a679b4dd633d8",
}
PRESET_DIR = "scripts/performance/configs/"
# A card prints its metrics with 3 decimals (half a unit: 0.0005).
HALF_LAST_DIGIT = 0.0005
# The summary's column order: System, #-GPUs, Precision, GBS, MBS, Sequence Length, TP, PP, CP,
# VP, EP, Tokens / sec / GPU, Model TFLOP / sec / GPU.
SUMMARY_COLUMNS = 13
SYSTEM_HARDWARE = {"DGX-GB200": "gb200", "DGX-H100": "h100-sxm", "DGX-B200": "b200"}
GUIDE_DOCUMENT = "NVIDIA NeMo Framework User Guide, Performance (performance summary)"
GUIDE_URL = "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/"
# The user guide's columns -> the row's fields (FSDP and GA: read apart; the model: its name).
GUIDE_FIELDS = {
    "#-GPUs": "gpus", "GBS": "global_batch", "MBS": "micro_batch",
    "Sequence Length": "seq_length", "TP": "tp", "PP": "pp", "CP": "cp", "VP": "vp", "EP": "ep",
}  # fmt: skip
GUIDE_MEASURED = {
    "Tokens / sec / GPU": "tokens_per_s_per_gpu",
    "Model TFLOP / sec / GPU": "model_tflop_per_s_per_gpu",
}
# The printed precision -> the row's fp8_recipe and the recipe's fp8 recipe (Megatron-Bridge
# mixed_precision.py: bf16_with_mxfp8_mixed "mxfp8"; FP8 read as FP8_CS, "tensorwise").
SUMMARY_PRECISION = {
    "MXFP8": ("MXFP8 block scaling", "mxfp8"),
    "FP8": ("not stated (column prints FP8)", "tensorwise"),
}
# Source 5: Megatron-LM's GPT scaling table (README image, = Narayanan et al. 2021 Table 1) and
# the script that launches its runs (examples/sc21/run_table_1.sh).
MLM_TABLE_PATH = "images/cases_april2021.png"
MLM_TABLE_COMMIT = "50a4b5fa0280a160cc1b03a1c15faddbc1b1da9a"
MLM_SCRIPT = ("examples/sc21/run_table_1.sh", "de7dc40f883ceed06344051c3c7ebd57da59cc53")
# the table prints aggregate petaFLOP/s to 0.1 and per-GPU teraFLOP/s to 1
MLM_PFLOPS_HALF_DIGIT = 0.05
# Source 6: Korthikanti et al. 2022 Table 4 iteration times as Calculon transcribed them, and the
# Megatron-LM README's MFU of the same sequence-parallel + selective runs (a second source)
KORTHIKANTI_REPO = "calculon-ai/calculon"
README_MFU_PERCENT = {"22B": 41.5, "175B": 51.4, "530B": 56.0, "1T": 56.3}  # README @ b83477a
DEEPSEEK_REPORT = "DeepSeek-V3 Technical Report"
A100_PEAK_FLOP_PER_S = 312e12  # the README's MFU is against the A100's 312 TFLOP/s fp16 peak


def edition(row: dict) -> str:
    """The summary edition of a summary row ("NeMo 26.08" -> "26.08")."""
    return row["source"]["container"].removeprefix("NeMo ")


@pytest.fixture(scope="module")
def rows():
    return load_runs(HELDOUT)


def is_card(row: dict) -> bool:
    return bool(CARD_PATH.match(row["source"].get("path") or ""))


def is_summary(row: dict) -> bool:
    return row["source"].get("path") == SUMMARY_PATH


def is_guide(row: dict) -> bool:
    return row["source"]["document"] == GUIDE_DOCUMENT


def is_megatron_2021(row: dict) -> bool:
    return row["source"].get("path") == MLM_TABLE_PATH


def is_korthikanti(row: dict) -> bool:
    return row["source"].get("repository") == KORTHIKANTI_REPO


def is_deepseek_report(row: dict) -> bool:
    return row["source"]["document"].startswith(DEEPSEEK_REPORT)


@pytest.fixture(scope="module")
def cards(rows):
    return [r for r in rows if is_card(r)]


@pytest.fixture(scope="module")
def summary_rows(rows):
    return [r for r in rows if is_summary(r)]


@pytest.fixture(scope="module")
def guide_rows(rows):
    return [r for r in rows if is_guide(r)]


@pytest.fixture(scope="module")
def megatron_rows(rows):
    return [r for r in rows if is_megatron_2021(r)]


@pytest.fixture(scope="module")
def korthikanti_rows(rows):
    return [r for r in rows if is_korthikanti(r)]


def test_every_row_has_one_known_source(
    rows, cards, summary_rows, guide_rows, megatron_rows, korthikanti_rows
):
    assert len(cards) >= 7  # every verified H100/GB200 pretrain_performance item with a config
    # the 26.08 GB200 rows of DeepSeekV3, GPT OSS 120B, Qwen3_30B_a3B, Qwen3_235B_a22B
    assert sum(edition(r) == "26.08" for r in summary_rows) >= 4
    # the 26.06 GB200 and H100 FP8/MXFP8 rows of LLAMA3.1_405B (3), DeepSeekV3, GPT OSS 120B,
    # Qwen3_30B_a3B (2) and Qwen3_235B_a22B
    assert sum(edition(r) == "26.06" for r in summary_rows) >= 8
    # the NeMo user guide's tables as far as the stored copies show them: 25.02 DGX-B200 (8) and
    # DGX-H100 (1), 25.04 DGX-GB200 (7), 25.07 DGX-GB200 (3)
    containers = [r["source"]["container"] for r in guide_rows]
    assert [containers.count(f"NeMo {v}") for v in ("25.02", "25.04", "25.07")] == [9, 7, 3]
    # Megatron-LM's April 2021 GPT scaling table: all ten rows, 1.7B to 1T
    assert len(megatron_rows) == 10
    # Korthikanti et al. 2022 Table 4: four models, full recompute and SP + selective each
    assert len(korthikanti_rows) == 8
    # the DeepSeek-V3 report's own run on 2,048 H800
    deepseek = [r for r in rows if is_deepseek_report(r)]
    assert [r["id"] for r in deepseek] == ["deepseek-v3-report-h800-2048"]
    sources = (cards, summary_rows, guide_rows, megatron_rows, korthikanti_rows, deepseek)
    assert sum(map(len, sources)) == len(rows)
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    for r in rows:
        if is_megatron_2021(r):
            assert r["source"]["repository"] == "NVIDIA/Megatron-LM", r["id"]
        elif not (is_guide(r) or is_korthikanti(r) or is_deepseek_report(r)):
            assert r["source"]["repository"] == "NVIDIA-NeMo/Megatron-Bridge", r["id"]


def test_card_sources_complete(cards):
    for r in cards:
        src = r["source"]
        assert r["id"].startswith("mbcard-"), r["id"]
        assert SHA.match(src["commit"]) and SHA.match(src["bridge_commit"]), r["id"]
        assert src["item"].startswith("pretrain_performance."), r["id"]
        assert src["status"] == "verified" and src["last_verified"], r["id"]
        assert src["container"].startswith("nvcr.io/nvidia/"), r["id"]
        assert f"--recipe {r['recipe']['function']}" in src["command"], r["id"]
        recipe = r["recipe"]
        assert recipe["path"].endswith(".py") and SHA.match(recipe["commit"]), r["id"]
        assert recipe["commit"] == src["bridge_commit"], r["id"]


def test_summary_sources_complete(summary_rows):
    for r in summary_rows:
        src, recipe = r["source"], r["recipe"]
        ed = edition(r)
        assert ed in SUMMARY_EDITIONS and r["id"].startswith(f"mbridge-{ed}-"), r["id"]
        assert src["document"] == "Megatron-Bridge performance summary", r["id"]
        assert src["commit"] == SUMMARY_EDITIONS[ed], r["id"]
        table = SUMMARY_TABLE.format(edition=ed)
        assert src["table"] == table + r["model"]["published"], r["id"]
        assert src["url"] == (
            f"https://github.com/{src['repository']}/blob/{src['commit']}/{SUMMARY_PATH}"
        ), r["id"]
        assert recipe["commit"] == src["commit"], r["id"]
        if "preset" in recipe:
            # 26.06: the preset get_workload_base_config names for the row
            # (<MODEL>_PRETRAIN_CONFIG_<GPU>_<DTYPE>_<VARIANT>), its launcher beside it
            assert ed == "26.06", r["id"]
            assert recipe["path"].startswith(PRESET_DIR), r["id"]
            assert recipe["path"].endswith("_workload_base_configs.py"), r["id"]
            assert recipe["launcher"]["path"].startswith(PRESET_DIR), r["id"]
            gpu = r["system"].removeprefix("DGX-")
            dtype = {"MXFP8": "FP8_MX", "FP8": "FP8_CS"}[r["source"]["row"].split(", ")[-1]]
            assert re.fullmatch(
                rf"[A-Z0-9_]+_PRETRAIN_CONFIG_{gpu}_{dtype}_V[12]", recipe["preset"]
            ), r["id"]
            assert "disagrees_with_row" not in recipe, r["id"]
            continue
        # the flat performance recipe the launcher resolves for the row, at the summary's commit
        # (scripts/performance/utils/utils.py _recipe_function_name)
        assert recipe["path"].startswith("src/megatron/bridge/perf_recipes/"), r["id"]
        assert recipe["path"].endswith(".py"), r["id"]
        assert recipe["function"].endswith(
            f"_pretrain_{r['gpus']}gpu_{r['hardware']}_fp8mx_config"
        ), r["id"]


def test_summary_rows_are_the_printed_lines(summary_rows):
    # Every number of a summary row is the table line's cell as printed: integers, no rounding.
    for r in summary_rows:
        text = r["source"]["row_text"]
        assert text.startswith("| ") and text.endswith(" |"), r["id"]
        cells = [c.strip() for c in text[1:-1].split("|")]
        assert len(cells) == SUMMARY_COLUMNS, r["id"]
        system, gpus, precision, gbs, mbs, seq, tp, pp, cp, vp, ep, tokens, tflops = cells
        assert system == r["system"] and SYSTEM_HARDWARE[system] == r["hardware"], r["id"]
        row = f"{system}, {r['model']['published']}, {gpus} GPUs, {precision}"
        assert r["source"]["row"] == row, r["id"]
        fp8_recipe, recipe_fp8 = SUMMARY_PRECISION[precision]
        assert precision == "MXFP8" or edition(r) == "26.06", r["id"]
        assert r["dtype"] == "fp8" and r["fp8_recipe"] == fp8_recipe, r["id"]
        assert r["recipe"]["precision"]["fp8_recipe"] == recipe_fp8, r["id"]
        printed = {
            "gpus": gpus, "global_batch": gbs, "micro_batch": mbs, "seq_length": seq,
            "tp": tp, "pp": pp, "cp": cp,
        }  # fmt: skip
        for field, cell in printed.items():
            assert type(r[field]) is int and str(r[field]) == cell, (r["id"], field)
        # "n/a": VP no interleaving, EP a dense model (no experts)
        assert r["vp"] is None if vp == "n/a" else str(r["vp"]) == vp, r["id"]
        if ep == "n/a":
            assert r["ep"] is None, r["id"]
        else:
            assert type(r["ep"]) is int and str(r["ep"]) == ep, r["id"]
        assert (ep == "n/a") == (r["kind"] == "dense"), r["id"]
        m = r["measured"]
        for field, cell in (
            ("tokens_per_s_per_gpu", tokens), ("model_tflop_per_s_per_gpu", tflops)
        ):  # fmt: skip
            assert type(m[field]) is int and str(m[field]) == cell, (r["id"], field)
        # not printed: ETP, GA, recompute, step time
        assert r["etp"] is None and r["grad_accum_printed"] is None, r["id"]
        assert r["recompute"] is None and m["step_time_s"] is None, r["id"]
        assert r["dp_derived"] is True and r["fsdp"] == 0, r["id"]
        if r["kind"] == "moe":
            assert "(footnote)" in r["options"]["moe_token_distribution"], r["id"]


def test_guide_rows_are_the_printed_cells(guide_rows):
    # Every number of a user-guide row is its cell in source.row_text (cells in source.columns
    # order; a cell printed "A (B)" gives A), but for a correction the row states.
    for r in guide_rows:
        src = r["source"]
        assert src["url"].startswith(GUIDE_URL), r["id"]
        version = src["container"].removeprefix("NeMo ")
        assert r["id"].startswith(f"nemo-{version}-"), r["id"]
        cells = [c.strip().split(" (")[0] for c in src["row_text"].split("|")]
        assert len(cells) == len(src["columns"]), r["id"]
        printed = dict(zip(src["columns"], cells, strict=True))
        assert printed["Model"] == r["model"]["published"], r["id"]
        assert SYSTEM_HARDWARE[r["system"]] == r["hardware"], r["id"]
        assert src["row"] == f"{printed['Model']}, {printed['#-GPUs']} GPUs", r["id"]
        # a correction names its fields "a / b"
        corrected = {f for c in r.get("corrections", []) for f in c["field"].split(" / ")}
        for column, field in GUIDE_FIELDS.items():
            if field in corrected:
                continue
            assert type(r[field]) is int and str(r[field]) == printed[column], (r["id"], field)
        assert str(r["grad_accum_printed"]) == printed["GA"] == str(r["grad_accum"]), r["id"]
        assert r["fsdp"] == (int(printed["FSDP"]) if "FSDP" in printed else None), r["id"]
        for column, field in GUIDE_MEASURED.items():
            assert str(r["measured"][field]) == printed[column], (r["id"], field)
        assert r["dtype"] == "fp8" and r["recipe"] is None, r["id"]
        assert r["measured"]["step_time_s"] is None and r["etp"] is None, r["id"]
        assert (r["kind"] == "moe") == (r["ep"] > 1), r["id"]
    # the one correction: Mixtral-8x22B's GBS and MBS, printed swapped (GA 16 as printed)
    fixed = [r for r in guide_rows if r.get("corrections")]
    assert [r["id"] for r in fixed] == ["nemo-25.02-mixtral-8x22b-b200-256"]
    row = fixed[0]
    cells = dict(zip(row["source"]["columns"], row["source"]["row_text"].split(" | "), strict=True))
    assert (cells["GBS"], cells["MBS"], cells["GA"]) == ("1", "64", "16")  # as printed
    assert "GBS 1, MBS 64" in row["corrections"][0]["printed"]
    assert (fixed[0]["global_batch"], fixed[0]["micro_batch"]) == (64, 1)


def test_megatron_2021_rows_are_the_printed_cells(megatron_rows):
    # Every number of a Megatron-LM 2021 row is its cell of the table as printed (source.row, in
    # source.columns order), and run_table_1.sh agrees with the printed columns.
    for r in megatron_rows:
        src, recipe = r["source"], r["recipe"]
        assert src["commit"] == MLM_TABLE_COMMIT and SHA.match(recipe["commit"]), r["id"]
        assert (recipe["path"], recipe["commit"]) == MLM_SCRIPT, r["id"]
        assert src["url"].endswith(f"/blob/{MLM_TABLE_COMMIT}/{MLM_TABLE_PATH}"), r["id"]
        cells = [c.strip() for c in src["row"].split("|")]
        assert len(cells) == len(src["columns"]) == 10, r["id"]
        size, hidden, layers, _, mp, gpus, batch, tflops, _, pflops = cells
        assert r["model"]["published"] == f"GPT {size}", r["id"]
        assert r["id"] == f"megatron-lm-2021-gpt-{size.lower()}-a100-{gpus}", r["id"]
        spec = load_model(r["model"]["tpcalc"])
        assert (str(spec.hidden_size), str(spec.num_hidden_layers)) == (hidden, layers), r["id"]
        assert str(r["tp"] * r["pp"]) == mp, r["id"]  # "Model-parallel size"
        assert str(r["gpus"]) == gpus and str(r["global_batch"]) == batch, r["id"]
        m = r["measured"]
        assert type(m["model_tflop_per_s_per_gpu"]) is int, r["id"]
        assert str(m["model_tflop_per_s_per_gpu"]) == tflops, r["id"]
        assert m["flop_convention"]["name"] == "narayanan-2021-eq3", r["id"]
        assert m["flop_convention"]["vocab"] == 51200, r["id"]  # the README's vocabulary
        # aggregate petaFLOP/s = GPUs x teraFLOP/s per GPU, within both cells' rounding
        tol = MLM_PFLOPS_HALF_DIGIT + r["gpus"] * 0.5 / 1e3
        assert float(pflops) == pytest.approx(r["gpus"] * int(tflops) / 1e3, abs=tol), r["id"]
        assert r["dtype"] == "fp16" and r["recipe"]["fields"]["fp16"] is True, r["id"]
        assert r["recompute"] == "full" and recipe["fields"]["checkpoint_activations"], r["id"]
        # torch DDP overlaps the gradient all-reduce with the backward, local DDP does not
        ddp = recipe["fields"]["ddp_impl"]
        assert recipe["derived"]["overlap_grad_reduce"] is (ddp == "torch"), r["id"]
        assert recipe["derived"]["use_distributed_optimizer"] is False, r["id"]
        assert m["tokens_per_s_per_gpu"] is None and m["step_time_s"] is None, r["id"]


def test_layouts_add_up(rows):
    for r in rows:
        tp, pp, cp = r["tp"], r["pp"], r["cp"]
        assert r["gpus"] == tp * pp * cp * r["dp"], r["id"]
        if is_deepseek_report(r):
            # §3.2: EP 64 of the 128 DP ranks; §4.2: 15,360 sequences, 120 per DP rank, in
            # micro-batches of a size the report does not state
            assert r["global_batch"] % r["dp"] == 0 and r["dp"] % r["ep"] == 0, r["id"]
            assert r["micro_batch"] is None and r["unstated"]["choices"] == ["micro_batch"]
            continue
        assert r["dp"] * r["grad_accum"] * r["micro_batch"] == r["global_batch"], r["id"]
        if is_megatron_2021(r):
            # run_table_1.sh options; vp from --num-layers-per-virtual-pipeline-stage
            # (megatron/arguments.py: layers / (pp * that)), none set: no interleaving
            fields = r["recipe"]["fields"]
            assert fields["tensor_model_parallel_size"] == tp, r["id"]
            assert fields["pipeline_model_parallel_size"] == pp, r["id"]
            assert fields["global_batch_size"] == r["global_batch"], r["id"]
            assert fields["micro_batch_size"] == r["micro_batch"], r["id"]
            per_stage = fields.get("num_layers_per_virtual_pipeline_stage")
            layers = load_model(r["model"]["tpcalc"]).num_hidden_layers
            vp = None if per_stage is None else layers // (pp * per_stage)
            assert r["vp"] == vp and (vp is None or vp * pp * per_stage == layers), r["id"]
            assert cp == 1 and r["sequence_parallel"] is False, r["id"]
            continue
        if is_korthikanti(r):
            # Calculon's execution file of the run (validation/<size>_<mode>.json)
            fields = r["recipe"]["fields"]
            assert (fields["tensor_par"], fields["pipeline_par"], fields["data_par"]) == (
                tp, pp, r["dp"],
            ), r["id"]  # fmt: skip
            assert fields["num_procs"] == r["gpus"], r["id"]
            assert fields["batch_size"] == r["global_batch"], r["id"]
            assert fields["microbatch_size"] == r["micro_batch"], r["id"]
            assert fields["pipeline_interleaving"] == (r["vp"] or 1), r["id"]
            selective = fields["activation_recompute"] == "attn_only"
            assert r["sequence_parallel"] is selective, r["id"]  # "seqsel": SP + selective
            assert r["recompute"] == ("selective" if selective else "full"), r["id"]
            continue
        if r["recipe"] is None:  # the user guide's rows name no recipe
            assert is_guide(r), r["id"]
            if r["ep"] > 1:
                assert (tp * cp * r["dp"]) % r["ep"] == 0, r["id"]
            continue
        fields = r["recipe"]["fields"]
        if "preset" in r["recipe"]:
            # a preset states only what differs from WorkloadBaseConfig
            preset = {**PRESET_DEFAULTS, **r["recipe"].get("defaults", {}), **fields}
            for row_field, name in PRESET_LAYOUT.items():
                # a dense row prints no EP ("n/a"): the preset's is WorkloadBaseConfig's 1
                printed = 1 if row_field == "ep" and r["ep"] is None else r[row_field]
                assert preset[name] == printed, (r["id"], name)
            assert r["sequence_parallel"] is (tp > 1), r["id"]  # WorkloadBaseConfig rule
            if r["ep"] is not None:
                assert (tp * cp * r["dp"]) % (r["ep"] * (r["etp"] or 1)) == 0, r["id"]
            continue
        assert fields["tensor_model_parallel_size"] == tp, r["id"]
        assert fields["pipeline_model_parallel_size"] == pp, r["id"]
        assert fields["context_parallel_size"] == cp, r["id"]
        assert fields["virtual_pipeline_model_parallel_size"] == r["vp"], r["id"]
        assert fields.get("expert_model_parallel_size") == r["ep"], r["id"]
        assert fields["global_batch_size"] == r["global_batch"], r["id"]
        assert fields["micro_batch_size"] == r["micro_batch"], r["id"]
        assert fields["seq_length"] == r["seq_length"], r["id"]
        assert fields["sequence_parallel"] == r["sequence_parallel"], r["id"]
        if r["ep"] is not None:
            # the experts of a layer spread over EP ranks of the expert data-parallel group
            assert (tp * cp * r["dp"]) % (r["ep"] * (r["etp"] or 1)) == 0, r["id"]


def test_measured_numbers_agree_with_the_printed_step_time(cards):
    # The card prints tokens/s/GPU (GBS · seq / step time / GPUs, its "token-slot throughput")
    # and the step time separately, each to 3 decimals: a mistyped number breaks this. Tolerance:
    # the rounding of the tokens/s cell plus that of the step time carried through the division.
    for r in cards:
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
        m = r["measured"]
        if m.get("gpu_hours_per_trillion_tokens"):
            # a whole run's GPU hours per 10^12 tokens (DeepSeek-V3 report §1)
            tokens = 1e12 / (m["gpu_hours_per_trillion_tokens"] * 3600)
            assert o.case.measured_tokens_per_s_per_gpu == pytest.approx(tokens, rel=1e-12)
            assert "GPU hours" in o.case.measured_from, r["id"]
        elif m["tokens_per_s_per_gpu"] is None and m["step_time_s"]:
            # printed as an iteration time (Korthikanti et al. 2022): every token of the batch
            tokens = r["global_batch"] * r["seq_length"] / (m["step_time_s"] * r["gpus"])
            assert o.case.measured_tokens_per_s_per_gpu == tokens, r["id"]
        elif m["tokens_per_s_per_gpu"] is None:
            # printed as model TFLOP/s only (Megatron-LM 2021): counted back with the FLOP
            # convention the row states
            assert m["model_tflop_per_s_per_gpu"] and m["flop_convention"], r["id"]
            assert o.case.measured_tflop_per_s_per_gpu == m["model_tflop_per_s_per_gpu"]
            assert m["flop_convention"]["name"] in o.case.measured_from, r["id"]
            assert o.case.measured_tokens_per_s_per_gpu > 0, r["id"]
        else:
            assert o.case.measured_tokens_per_s_per_gpu == m["tokens_per_s_per_gpu"]
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


def test_no_held_out_row_is_a_fit_row(rows, monkeypatch):
    # tools/fit_time.py fits on the runs.yaml rows its patterns name; none may name a row here
    spec = importlib.util.spec_from_file_location("fit_time", REPO / "tools" / "fit_time.py")
    assert spec is not None and spec.loader is not None
    fit_time = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fit_time", fit_time)  # its dataclasses look it up
    spec.loader.exec_module(fit_time)
    patterns = [p for table in (fit_time.FIT_ROWS, fit_time.MOE_FIT_ROWS) for ps in table.values()
                for p in ps]  # fmt: skip
    assert patterns
    for r in rows:
        assert not any(fnmatch.fnmatch(r["id"], p) for p in patterns), r["id"]


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
    # DeepSeek-V3 26.08 GB200 MXFP8 recipe: HybridEP (flex), EP overlap, the layout of
    # _get_deepseek_v3_pipeline_layout(4, 4, 1), MTP trained, recompute mla_up_proj only
    ds8 = case_of(by_id["mbridge-26.08-deepseekv3-gb200-256-mxfp8"])
    assert not isinstance(ds8, str)
    assert ds8.options.ep_node_dedup and ds8.options.overlap.ep_a2a
    assert ds8.options.chunk_layers == (4,) * 15 + (1,)  # "Et*4|(t*4|)*14tmL"
    assert ds8.run.memory.mtp and ds8.run.memory.recompute_modules == ("mla_up_proj",)
    # Qwen3-235B-A22B 26.08: the embedding and the loss count in the pipeline split
    q235 = case_of(by_id["mbridge-26.08-qwen3-235b-a22b-gb200-256-mxfp8"])
    assert not isinstance(q235, str)
    assert q235.options.embedding_in_split and q235.options.loss_in_split
    assert q235.options.ep_node_dedup and q235.options.overlap.ep_a2a
    # GPT-OSS-120B 26.08 MXFP8: flex dispatcher and EP overlap from the full-iteration helper
    go = case_of(by_id["mbridge-26.08-gpt-oss-120b-gb200-64-mxfp8"])
    assert not isinstance(go, str)
    assert go.options.ep_node_dedup and go.options.overlap.ep_a2a
    # its recipe ends with recompute_granularity "selective" and recompute_modules []: Megatron-Core
    # fills ["core_attn"] only into None, so nothing is recomputed
    assert go.run.memory.recompute_modules == () and go.run.recompute == Recompute.none


def test_one_prediction_is_pinned(rows):
    # Qwen3-30B-A3B on 8 GB200 (card pretrain_performance.GB200, recipe
    # qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config @ 6e1b478): TP1 PP1 CP1 EP8 DP8, MXFP8,
    # seq 4096, GBS 512 / MBS 4 (16 micro-batches), EP all-to-all overlapped, HybridEP (flex),
    # no recompute, gb200 config as shipped (MoE constant 0.45 ms). Printed as 38,284
    # tokens/s/GPU (±0.5).
    row = next(r for r in rows if r["id"] == "mbcard-qwen3-30b-a3b-gb200-8-mxfp8")
    (o,), _ = outcomes([row])
    assert o.step.tokens_per_s_per_gpu == pytest.approx(38284, abs=0.5)


def test_cli_validates_the_held_out_file(cli):
    r = cli("validate", "--runs", str(HELDOUT), "--format", "json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert {row["id"] for row in out} == {r["id"] for r in load_runs(HELDOUT)}
    # the shipped file by name, for an installed tpcalc (no checkout path needed)
    shipped = cli("validate", "--held-out", "--format", "json")
    assert shipped.code == 0 and json.loads(shipped.out) == out
    both = cli("validate", "--held-out", "--runs", str(HELDOUT))
    assert both.code == 1 and both.err.count("\n") == 1 and "give one" in both.err


def test_korthikanti_times_give_back_the_readmes_mfu(korthikanti_rows):
    # Two sources agree: the iteration times (the paper's Table 4, as Calculon transcribed them)
    # give back the MFU Megatron-LM's README prints for the same SP + selective runs, with the
    # paper's model FLOPs per iteration, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) (V = 51,200, no
    # recompute counted). Tolerance: half the MFU's last printed digit plus the time's rounding
    # (printed to 0.01 s) carried through the division.
    checked = set()
    for r in korthikanti_rows:
        if not r["sequence_parallel"]:
            continue
        size = r["model"]["published"].removeprefix("GPT ")
        spec = load_model(r["model"]["tpcalc"])
        b, s, h, layers = (
            r["global_batch"],
            r["seq_length"],
            spec.hidden_size,
            spec.num_hidden_layers,
        )
        flop = 72 * b * s * layers * h**2 * (1 + s / (6 * h) + 51200 / (12 * layers * h))
        t = r["measured"]["step_time_s"]
        mfu = 100 * flop / (t * r["gpus"] * A100_PEAK_FLOP_PER_S)
        tol = 0.05 + mfu * 0.005 / t
        assert mfu == pytest.approx(README_MFU_PERCENT[size], abs=tol), r["id"]
        checked.add(size)
    assert checked == set(README_MFU_PERCENT)


def test_deepseek_report_run_is_read_as_the_report_states_it(rows):
    """The DeepSeek-V3 report's run (Source 7): 180K GPU hours per 10^12 tokens is Table 1's
    2,664K pre-training GPU hours over 14.8T tokens, 1,543 tokens/s/GPU; the case runs DualPipe
    (its all-to-all overlapped by the schedule), the node-aware dispatch, the recomputed
    modules and the MTP module the report states, 120 micro-batches of 1 sequence."""
    (row,) = [r for r in rows if is_deepseek_report(r)]
    hours = row["measured"]["gpu_hours_per_trillion_tokens"]
    assert 14.8 * hours == pytest.approx(2664e3, rel=1e-12)  # Table 1, §4.1
    case = case_of(row)
    assert not isinstance(case, str)
    assert round(case.measured_tokens_per_s_per_gpu) == 1543
    assert case.run.schedule is Schedule.dualpipe and case.options.overlap.ep_a2a is None
    assert case.options.ep_node_dedup and case.run.memory.mtp
    assert case.run.memory.recompute_modules == ("layernorm", "mla_up_proj", "moe_act")
    assert (case.layout.tp, case.layout.pp, case.layout.ep, case.layout.zero) == (
        1, 16, 64, ZeroStage.optimizer,
    )  # fmt: skip
    assert (case.run.micro_batch, case.run.microbatches) == (1, 120)
    bad = {**row, "recipe": {**row["recipe"], "derived": {"pipeline_schedule": "pipedream"}}}
    with pytest.raises(ConfigError, match="pipeline_schedule 'pipedream'.*valid: .*dualpipe"):
        case_of(bad)
