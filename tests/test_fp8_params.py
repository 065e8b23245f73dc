"""FP8 primary weights (Megatron fp8_param_gather): bytes per weight by FP8 format and GPU, and
their use in the published-layout checks (issue 11 §3, memory realism).

Sources (tpcalc/calc/params/states.py names each with file, function, commit and lines):
Transformer Engine release_v2.9 / 2877704 / release_v2.16 keeps a per-tensor FP8 weight's
transpose only where FP8 GEMMs are TN-only (nvte_is_non_tn_fp8_gemm_supported: false on
compute capability 9.0, true on 10.0), and an MXFP8 weight as rowwise + columnwise copies with
one E8M0 byte per 32 elements each; Megatron-Bridge's FP8 precision configs set
fp8_param_gather = True (mixed_precision.py at the recipe commits).
"""

from __future__ import annotations

import re

import pytest
import yaml

from tpcalc.calc.params.states import (
    FP8_DATA,
    FP8_TRANSPOSE,
    MXFP8_BOTH,
    fp8_format,
    fp8_params_recipe,
    fp8_storage_note,
    non_tn_fp8_gemm,
    recipe_bytes,
    weight_storage,
    with_fp8_params,
)
from tpcalc.catalog import load_hardware
from tpcalc.choices import Fp8Format, StateRecipe
from tpcalc.errors import InputError
from tpcalc.reports.validate_time import load_runs, precision_options
from tpcalc.units import Dtype


# --- storage per (format, card) -------------------------------------------------------------
@pytest.mark.parametrize(
    ("fmt", "hardware", "storage", "bytes_per_param"),
    [
        # Hopper (9.0): TN-only FP8 GEMMs -> data + transpose, 1 + 1 B
        (Fp8Format.per_tensor, "h100-sxm", FP8_TRANSPOSE, 2),
        (Fp8Format.per_tensor, "h800", FP8_TRANSPOSE, 2),
        (Fp8Format.per_tensor, "h200", FP8_TRANSPOSE, 2),
        # Blackwell (10.0): non-TN FP8 GEMMs -> data only, 1 B
        (Fp8Format.per_tensor, "b200", FP8_DATA, 1),
        (Fp8Format.per_tensor, "gb200", FP8_DATA, 1),
        # MXFP8: 2 copies x (1 B + 1 E8M0 byte / 32 elements) = 2.0625 B
        (Fp8Format.mxfp8, "b200", MXFP8_BOTH, 2 * (1 + 1 / 32)),
        (Fp8Format.mxfp8, "gb200", MXFP8_BOTH, 2 * (1 + 1 / 32)),
    ],
)  # fmt: skip
def test_weight_storage_by_format_and_card(fmt, hardware, storage, bytes_per_param):
    got = weight_storage(fmt, load_hardware(hardware))
    assert got == storage
    assert got.bytes_per_param == bytes_per_param  # exact: sums of powers of two


@pytest.mark.parametrize(
    ("fmt", "hardware", "says"),
    [
        (Fp8Format.mxfp8, "h100-sxm", "valid format there: per-tensor"),
        (Fp8Format.per_tensor, "a100-80g", "has no FP8"),
    ],
)  # fmt: skip
def test_unsupported_format_or_card_is_an_input_error(fmt, hardware, says):
    with pytest.raises(InputError, match=says):
        weight_storage(fmt, load_hardware(hardware))


def test_a_card_without_a_compute_capability_says_what_to_add():
    bare = load_hardware("h100-sxm").model_copy(update={"compute_capability": None})
    with pytest.raises(InputError, match=r"add compute_capability: \{value: \"9.0\""):
        weight_storage(Fp8Format.per_tensor, bare)
    assert fp8_storage_note(StateRecipe.fp8_params, bare) is None  # nothing to check against


# Every built-in card states its compute capability with a source (NVIDIA's CUDA GPUs table).
@pytest.mark.parametrize(
    ("hardware", "cc"),
    [("a100-80g", (8, 0)), ("h100-sxm", (9, 0)), ("h200", (9, 0)), ("h800", (9, 0)),
     ("b200", (10, 0)), ("gb200", (10, 0))],
)  # fmt: skip
def test_built_in_cards_state_their_compute_capability(hardware, cc):
    got = load_hardware(hardware).compute_capability
    assert got is not None and got.major_minor == cc and "cuda-gpus" in got.source


@pytest.mark.parametrize("value", ["9", "9.0.1", "nine", "9.10", ""])
def test_compute_capability_must_be_major_dot_minor(value):
    from pydantic import ValidationError

    from tpcalc.specs.hardware import SourcedCapability

    with pytest.raises(ValidationError):
        SourcedCapability(value=value, source="x")


# --- the recipe a card keeps, said when the user picked another ------------------------------
@pytest.mark.parametrize(
    ("recipe", "hardware", "says"),
    [
        (StateRecipe.fp8_params, "h100-sxm", "keeps 2 B .*--state-recipe fp8-params-transpose "
         "prices that"),
        (StateRecipe.fp8_params_bf16_grads, "h800",
         "--state-recipe fp8-params-transpose-bf16-grads prices that"),
        (StateRecipe.fp8_params_transpose, "b200", "keeps 1 B .*--state-recipe fp8-params "
         "prices that"),
        (StateRecipe.mxfp8_params, "h100-sxm", "valid format there: per-tensor"),
        (StateRecipe.fp8_params, "a100-80g", "has no FP8"),
        # no transpose variant keeps BF16 moments: the bytes are said, no recipe offered
        (StateRecipe.fp8_params_bf16_moments, "h100-sxm", r"keeps 2 B \(per-tensor FP8, data "
         r"\+ transpose(?!.*prices that)"),
    ],
)  # fmt: skip
def test_storage_note_names_what_the_card_keeps(recipe, hardware, says):
    note = fp8_storage_note(recipe, load_hardware(hardware))
    assert note is not None and re.search(says, note), note


@pytest.mark.parametrize(
    ("recipe", "hardware"),
    [(StateRecipe.fp8_params, "b200"), (StateRecipe.fp8_params_transpose, "h100-sxm"),
     (StateRecipe.mxfp8_params, "gb200"), (StateRecipe.zero16, "a100-80g"),
     (StateRecipe.megatron18, "h100-sxm")],
)  # fmt: skip
def test_storage_note_is_silent_when_the_recipe_is_what_the_card_keeps(recipe, hardware):
    assert fp8_storage_note(recipe, load_hardware(hardware)) is None


def test_the_note_reaches_stderr_and_json_stays_clean():
    import json

    from typer.testing import CliRunner

    from tpcalc.cli import app

    args = ["memory", "-m", "llama3-8b", "--hardware", "h100-sxm", "--tp", "1",
            "--state-recipe", "fp8-params", "--format", "json"]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    json.loads(out.stdout)
    assert "--state-recipe fp8-params-transpose prices that" in out.stderr


# TE nvte_is_non_tn_fp8_gemm_supported: [10.0, 12.0) or >= 13.0.
@pytest.mark.parametrize(
    ("cc", "non_tn"),
    [((8, 9), False), ((9, 0), False), ((10, 0), True), ((10, 3), True), ((11, 0), True),
     ((12, 0), False), ((12, 1), False), ((13, 0), True)],
)  # fmt: skip
def test_non_tn_rule_is_transformer_engines(cc, non_tn):
    assert non_tn_fp8_gemm(cc) is non_tn


# --- recipes ---------------------------------------------------------------------------------
# weights + grads + (FP32 master + 2 FP32 moments = 12)
@pytest.mark.parametrize(
    ("recipe", "total"),
    [
        (StateRecipe.fp8_params, 1 + 4 + 12),  # unchanged: per-tensor, no transpose
        (StateRecipe.fp8_params_transpose, 2 + 4 + 12),
        (StateRecipe.mxfp8_params, 2.0625 + 4 + 12),
        (StateRecipe.fp8_params_bf16_grads, 1 + 2 + 12),
        (StateRecipe.fp8_params_transpose_bf16_grads, 2 + 2 + 12),
        (StateRecipe.mxfp8_params_bf16_grads, 2.0625 + 2 + 12),
    ],
)  # fmt: skip
def test_fp8_recipe_bytes(recipe, total):
    assert recipe_bytes(recipe).total_bytes == total


def test_existing_recipes_keep_integer_bytes():
    # the defaults print as before: integers, zero16 16 B, megatron18 18 B
    for recipe, total in ((StateRecipe.zero16, 16), (StateRecipe.megatron18, 18)):
        rb = recipe_bytes(recipe)
        assert rb.total_bytes == total and isinstance(rb.weight_bytes, int)


# The parameter all-gather moves the FP8 data (uint8 buffer; the transpose is made after it), and
# BF16 for MXFP8 (gathered in the gradient buffer: reuse_grad_buf_for_mxfp8_param_ag).
@pytest.mark.parametrize(
    ("recipe", "gathered"),
    [(StateRecipe.zero16, 2), (StateRecipe.fp8_params_transpose_bf16_grads, 1),
     (StateRecipe.fp8_params_bf16_grads, 1), (StateRecipe.mxfp8_params_bf16_grads, 2)],
)  # fmt: skip
def test_all_gather_bytes(recipe, gathered):
    assert recipe_bytes(recipe).weight_gather_bytes == gathered


def test_zero_all_gather_prices_the_fp8_data_not_its_transpose():
    from tpcalc.calc.dp.zero import ZeroStage, zero_comm_parts

    n, params = 8, 1_000_000
    parts = zero_comm_parts(params, StateRecipe.fp8_params_transpose_bf16_grads,
                            ZeroStage.optimizer, n)  # fmt: skip
    assert parts.all_gather_params_update_bytes == (n - 1) / n * params * 1


@pytest.mark.parametrize(
    ("base", "fmt", "hardware", "want"),
    [
        (StateRecipe.zero16, Fp8Format.per_tensor, "gb200", StateRecipe.fp8_params_bf16_grads),
        (StateRecipe.zero16, Fp8Format.per_tensor, "h100-sxm",
         StateRecipe.fp8_params_transpose_bf16_grads),
        (StateRecipe.zero16, Fp8Format.mxfp8, "b200", StateRecipe.mxfp8_params_bf16_grads),
        (StateRecipe.megatron18, Fp8Format.per_tensor, "b200", StateRecipe.fp8_params),
        (StateRecipe.megatron18, Fp8Format.per_tensor, "h800", StateRecipe.fp8_params_transpose),
        (StateRecipe.megatron18, Fp8Format.mxfp8, "gb200", StateRecipe.mxfp8_params),
    ],
)  # fmt: skip
def test_with_fp8_params_keeps_the_gradients(base, fmt, hardware, want):
    hw = load_hardware(hardware)
    got = with_fp8_params(base, fmt, hw)
    assert got is want
    assert recipe_bytes(got).grad_dtype is recipe_bytes(base).grad_dtype
    assert fp8_params_recipe(fmt, hw, recipe_bytes(base).grad_dtype) is want


def test_with_fp8_params_refuses_bf16_moments():
    with pytest.raises(InputError, match="valid: zero16, megatron18"):
        with_fp8_params(StateRecipe.bf16_moments, Fp8Format.per_tensor, load_hardware("gb200"))
    with pytest.raises(InputError, match="fp32 or bf16 grads"):
        fp8_params_recipe(Fp8Format.per_tensor, load_hardware("gb200"), Dtype.fp8)


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("delayed", Fp8Format.per_tensor), ("tensorwise", Fp8Format.per_tensor),
     ("mxfp8", Fp8Format.mxfp8)],
)  # fmt: skip
def test_megatron_fp8_recipe_names(name, fmt):
    assert fp8_format(name) is fmt


def test_blockwise_has_no_storage_here():
    with pytest.raises(InputError, match="valid: delayed, tensorwise, mxfp8"):
        fp8_format("blockwise")


def test_recipe_source_names_transformer_engine_and_megatron():
    src = recipe_bytes(StateRecipe.fp8_params_transpose_bf16_grads).source
    assert "nvte_is_non_tn_fp8_gemm_supported" in src and "reset_parameters" in src
    assert "c9877be" in src and "distrib_optimizer.py" in src and "grad_reduce_in_fp32" in src
    assert "MXFP8Quantizer::create_tensor" in recipe_bytes(StateRecipe.mxfp8_params).source


# --- the published rows ----------------------------------------------------------------------
def _bridge_fp8_rows():
    return [
        r for r in load_runs()
        if r["dtype"] == "fp8" and (r.get("recipe") or {}).get("repository")
        == "NVIDIA-NeMo/Megatron-Bridge"
    ]  # fmt: skip


def test_every_bridge_fp8_row_records_its_precision_config():
    # scripts/performance/utils/precision.py get_precision_config: fp8_cs -> current scaling
    # ("tensorwise"), fp8_mx -> MXFP8, both with fp8_param_gather = True (mixed_precision.py)
    rows = _bridge_fp8_rows()
    assert len(rows) == 51
    for r in rows:
        p = precision_options(r)
        preset = r["recipe"]["preset"]
        want = "mxfp8" if "_FP8_MX_" in preset else "tensorwise"
        assert "_FP8_MX_" in preset or "_FP8_CS_" in preset, r["id"]
        assert p == {"compute_dtype": "fp8_mx" if want == "mxfp8" else "fp8_cs",
                     "fp8_recipe": want, "fp8_param_gather": True}, r["id"]  # fmt: skip
        src = r["recipe"]["precision"]["source"]
        assert r["recipe"]["commit"][:7] in src and "mixed_precision.py" in src, r["id"]


def test_rows_without_a_precision_block_read_nothing():
    rows = [r for r in load_runs() if r["id"].startswith("nemo-24.07")]
    assert rows and all(precision_options(r) == {} for r in rows)


def _check(run_id):
    from tpcalc.reports.plan_published import Pick, check, published_items

    items, _ = published_items({run_id})
    return check(items[0], lambda item: Pick((), (), (), 10))


def _zero16_memory(item):
    from msgspec.structs import replace

    from tpcalc.calc.plan.inverse import worst_rank_bytes
    from tpcalc.calc.time.step import hand_split
    from tpcalc.catalog import load_model

    m = item.memory_case
    spec = load_model(m.model)
    counts = hand_split(item.case.options, spec.num_hidden_layers, m.layout.pp, m.run.vpp)
    run = replace(m.run, recipe=StateRecipe.zero16)
    return worst_rank_bytes(spec, m.layout, run, counts)


def _worst_rank_params(item):
    from tpcalc.calc.layout.memory import rank_memory
    from tpcalc.calc.time.step import hand_split
    from tpcalc.catalog import load_model

    m = item.memory_case
    spec = load_model(m.model)
    counts = hand_split(item.case.options, spec.num_hidden_layers, m.layout.pp, m.run.vpp)
    ranks = rank_memory(
        spec, m.layout, seq=m.run.seq, micro_batch=m.run.micro_batch,
        microbatches=m.run.microbatches, vpp=m.run.vpp, schedule=m.run.schedule,
        recipe=m.run.recipe, sp=m.run.sp, recompute=m.run.recompute,
        activations=m.run.activations, techniques=m.run.memory, counts=counts,
    )  # fmt: skip
    worst = max(ranks, key=lambda r: r.total_bytes)
    return worst.dense_params + worst.expert_params


# Megatron-Bridge performance summaries, Llama 3.1 405B on 256 GB200, FP8 current scaling,
# TP4 PP16 VP4 (26.02.01 @ cfeddcd, 25.11 @ 5776a6d, 26.04.01 @ 21d102f): 186.9 GB of 186 GB
# with BF16 weights; with 1-byte FP8 weights (Blackwell keeps no transpose) every weight of the
# most loaded rank saves 1 B (ZeRO-1 does not shard weights): 180.5 GB, feasible.
@pytest.mark.parametrize(
    "run_id",
    ["mbridge-26.02.01-llama3-1-405b-gb200-256-fp8",
     "mbridge-25.11-llama3-1-405b-gb200-256-fp8-cs",
     "mbridge-26.04.01-llama3-1-405b-gb200-256-fp8"],
)  # fmt: skip
def test_llama31_405b_gb200_fp8_fits_with_fp8_weights(run_id):
    ch = _check(run_id)
    item = ch.item
    assert item.memory_case.run.recipe is StateRecipe.fp8_params_bf16_grads
    assert item.case.run.recipe is StateRecipe.zero16  # the step time stays tpcalc validate's
    bf16 = _zero16_memory(item)
    assert bf16 / 1e9 == pytest.approx(186.9, abs=0.05)
    assert ch.memory_bytes == pytest.approx(bf16 - _worst_rank_params(item) * (2 - 1), rel=1e-12)
    assert ch.memory_bytes / 1e9 == pytest.approx(180.5, abs=0.05)
    assert ch.feasible, ch.why()


# Hopper keeps the transpose: per-tensor FP8 weights hold 2 B, as BF16 does; nothing changes.
@pytest.mark.parametrize(
    "run_id",
    ["mbridge-26.04.01-llama3-1-405b-h100-sxm-1024-fp8",
     "mbridge-25.11-qwen3-30b-a3b-h100-sxm-16-fp8-cs"],
)  # fmt: skip
def test_hopper_fp8_weights_save_nothing(run_id):
    ch = _check(run_id)
    assert ch.item.memory_case.run.recipe is StateRecipe.fp8_params_transpose_bf16_grads
    assert ch.memory_bytes == _zero16_memory(ch.item)


# MXFP8 keeps both copies and their scales: 1/16 B per weight more than BF16.
def test_mxfp8_weights_cost_a_sixteenth_of_a_byte_more():
    ch = _check("mbridge-26.04.01-llama3-1-405b-gb200-256-mxfp8")
    assert ch.item.memory_case.run.recipe is StateRecipe.mxfp8_params_bf16_grads
    extra = _worst_rank_params(ch.item) * (2 * (1 + 1 / 32) - 2)
    assert ch.memory_bytes == pytest.approx(_zero16_memory(ch.item) + extra, rel=1e-12)


def test_validate_step_times_do_not_read_the_precision():
    # tpcalc validate's cases keep the default recipe: the step-time model does not price states
    from tpcalc.reports.validate_time import case_of

    for r in _bridge_fp8_rows():
        case = case_of(r)
        if not isinstance(case, str):
            assert case.run.recipe is StateRecipe.zero16, r["id"]


def test_runs_yaml_precision_block_is_safe_yaml():
    from importlib import resources

    text = resources.files("tpcalc.validation").joinpath("runs.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    blocks = [r["recipe"]["precision"] for r in data["runs"] if (r.get("recipe") or {}).get(
        "precision")]  # fmt: skip
    assert len(blocks) == 51 and all(
        set(b) == {"compute_dtype", "fp8_recipe", "fp8_param_gather", "source"} for b in blocks
    )


def test_cli_layout_echoes_the_fp8_recipe(cli):
    import json

    args = ["layout", "-m", "llama3-8b", "--hardware", "gb200", "--dp", "8", "--zero", "1",
            "-f", "json"]  # fmt: skip
    base = json.loads(cli(*args, "--state-recipe", "zero16").out)[-1]
    fp8 = json.loads(cli(*args, "--state-recipe", "fp8-params-bf16-grads").out)[-1]
    assert fp8["recipe"] == "fp8-params-bf16-grads"
    # every weight 1 B less: dense params on the rank x 1 B (ZeRO-1 keeps whole weights)
    assert base["dense_states_bytes"] - fp8["dense_states_bytes"] == pytest.approx(
        fp8["dense_params_per_rank"] * 1, rel=1e-12
    )


def test_published_report_echoes_the_memory_recipe():
    from tpcalc.reports.plan_published import _row

    row = _row(_check("mbridge-26.02.01-llama3-1-405b-gb200-256-fp8"))
    assert row.inputs["state_recipe"] == "fp8-params-bf16-grads"
    src = recipe_bytes(StateRecipe.fp8_params_bf16_grads).source
    assert "per-tensor FP8, data only" in src
