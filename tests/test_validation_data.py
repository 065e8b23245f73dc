"""The published-runs table (tpcalc/validation/runs.yaml) is well-formed and self-consistent.

Every row must carry a source with a revision, and its layout must add up the way Megatron-Core
requires: gpus = tp * pp * cp * dp and dp * grad_accum * micro_batch = global_batch (after the
corrections the row records). These checks are what found the inconsistent GPT-OSS 120B H100 row
of the Megatron-Bridge 25.11 table (see its `corrections`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.mbridge_presets import PRESET_DEFAULTS, PRESET_LAYOUT

ROOT = Path(__file__).parents[1]
RUNS = ROOT / "tpcalc" / "validation" / "runs.yaml"
README = ROOT / "tpcalc" / "validation" / "README.md"
CONFIGS = ROOT / "configs"

# Hardware the table uses that tpcalc has no config for yet; README.md lists each one.
NEEDS_HARDWARE_CONFIG = {"gb200"}


def _load() -> dict:
    with RUNS.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


DATA = _load()
ROWS = DATA["runs"]


def _names(kind: str) -> set[str]:
    names = set()
    for path in (CONFIGS / kind).glob("*.yaml"):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        names.add(doc["tpcalc"]["name"] if kind == "models" else doc["name"])
    return names


def _corrected(row: dict, field: str) -> bool:
    return any(c["field"] == field for c in row.get("corrections") or [])


def test_loads_with_safe_load_and_has_rows():
    assert DATA["schema_version"] == 1
    assert len(ROWS) >= 50


def test_ids_are_unique():
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_every_row_names_its_source_and_revision(row):
    src = row["source"]
    for key in ("document", "commit", "date", "table", "row", "url"):
        assert src.get(key), f"{row['id']}: source.{key} missing"
    if src.get("repository"):  # a git source: a full 40-hex commit
        assert len(src["commit"]) == 40 and int(src["commit"], 16) >= 0
        assert src["commit"] in src["url"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_gpus_are_tp_pp_cp_dp(row):
    assert row["tp"] * row["pp"] * row["cp"] * row["dp"] == row["gpus"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_dp_ga_mbs_is_the_global_batch(row):
    mbs = row["micro_batch"]
    if mbs is None:  # Llama 3 Table 4 prints batch per DP rank, not the micro-batch
        assert row["global_batch"] % row["dp"] == 0
        assert "grad_accum" not in row
        return
    ga = row["grad_accum"]
    assert isinstance(ga, int) and ga >= 1
    assert row["dp"] * ga * mbs == row["global_batch"]
    printed = row["grad_accum_printed"]
    if printed is not None and printed != ga:
        assert _corrected(row, "grad_accum"), f"{row['id']}: GA {printed} printed, {ga} derived"


@pytest.mark.parametrize("row", [r for r in ROWS if r.get("corrections")], ids=lambda r: r["id"])
def test_corrections_say_what_and_why_and_are_applied(row):
    for c in row["corrections"]:
        assert c["why"] and c["printed"] != c["used"]
        value = row["grad_accum"] if c["field"] == "grad_accum" else row[c["field"]]
        assert value == c["used"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_hardware_is_known_or_listed_as_needing_a_config(row):
    assert row["hardware"] in _names("hardware") | NEEDS_HARDWARE_CONFIG


def test_hardware_needing_a_config_is_documented():
    text = README.read_text(encoding="utf-8")
    for name in NEEDS_HARDWARE_CONFIG:
        assert f"`{name}`" in text


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_model_has_a_config_or_is_listed_as_needing_one(row):
    model = row["model"]
    if model["tpcalc"] is not None:
        assert model["tpcalc"] in _names("models")
    else:
        assert model["needs_config"]
        assert f"`{model['needs_config']}`" in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_measured_values_are_printed_positive_integers(row):
    m = row["measured"]
    values = [m.get("tokens_per_s_per_gpu"), m.get("model_tflop_per_s_per_gpu")]
    assert any(v is not None for v in values)
    assert all(isinstance(v, int) and v > 0 for v in values if v is not None)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_dtype_and_fp8_recipe(row):
    assert row["dtype"] in {"bf16", "fp8"}
    assert (row["fp8_recipe"] is not None) == (row["dtype"] == "fp8")


@pytest.mark.parametrize("row", [r for r in ROWS if r["kind"] != "dense"], ids=lambda r: r["id"])
def test_expert_parallel_group_fits_the_data_parallel_ranks(row):
    # Megatron-Core parallel_state: the expert-data-parallel size is tp*cp*dp / (etp*ep), so
    # etp*ep must divide tp*cp*dp (etp defaults to 1 when not printed).
    etp = row["etp"] or 1
    assert row["ep"] >= 1
    assert (row["tp"] * row["cp"] * row["dp"]) % (etp * row["ep"]) == 0


@pytest.mark.parametrize("row", [r for r in ROWS if r["id"].startswith("mbridge-")],
                         ids=lambda r: r["id"])  # fmt: skip
def test_megatron_bridge_sequence_parallel_rule(row):
    # Megatron-Bridge scripts/performance/utils/utils.py: sequence_parallel = tp > 1
    assert row["sequence_parallel"] is (row["tp"] > 1)


@pytest.mark.parametrize(
    ("run_id", "tokens", "tflops"),
    [
        # NVIDIA/NeMo performance_summary.md @ 8e3d65d, Pretraining: LLAMA3-70B 1524 | 734
        ("nemo-24.07-llama3-70b-h100-64", 1524, 734),
        # same table: GPT3-175B 512 GPUs 825 | [888](mlcommons link)
        ("nemo-24.07-gpt3-175b-h100-512", 825, 888),
        # Megatron-Bridge performance-summary.md @ cfeddcd, 25.11 DGX-H100: LLAMA3.1_405B 292 | 737
        ("mbridge-25.11-llama3-1-405b-h100-sxm-1024-fp8-cs", 292, 737),
        # same, 25.11 DGX-GB200: LLAMA3_8B "31508 (29789)" | "1622 (1533)", FP8-MX in parentheses
        ("mbridge-25.11-llama3-8b-gb200-8-fp8-mx", 29789, 1533),
        # same, 26.02.01 Qwen3_235B_a22B DGX-H100 FP8: 1611 | 238
        ("mbridge-26.02.01-qwen3-235b-a22b-h100-sxm-256-fp8", 1611, 238),
        # same file @ 21d102f, 26.04.01 LLAMA3.1_405B DGX-H100 1024 GPUs FP8: 328 | 827
        ("mbridge-26.04.01-llama3-1-405b-h100-sxm-1024-fp8", 328, 827),
        # Llama 3 Table 4 as on the SC'24 slide: 16,384 GPUs, TP 8, CP 1, PP 16: 400 TFLOPs/GPU
        ("llama3-paper-405b-h100-16384-cp1", None, 400),
    ],
)
def test_spot_checks_against_the_printed_cells(run_id, tokens, tflops):
    row = next(r for r in ROWS if r["id"] == run_id)
    assert row["measured"]["tokens_per_s_per_gpu"] == tokens
    assert row["measured"]["model_tflop_per_s_per_gpu"] == tflops


MBRIDGE_ROWS = [r for r in ROWS if r["source"].get("repository") == "NVIDIA-NeMo/Megatron-Bridge"]


def test_every_megatron_bridge_row_is_counted():
    # 23 rows of 25.11, 17 of 26.02.01, 22 of 26.04.01 (see the README's row counts)
    assert len(MBRIDGE_ROWS) == 62


@pytest.mark.parametrize("row", MBRIDGE_ROWS, ids=lambda r: r["id"])
def test_every_megatron_bridge_row_has_a_recipe_with_a_commit(row):
    recipe = row.get("recipe") or {}
    assert recipe.get("repository") == "NVIDIA-NeMo/Megatron-Bridge", row["id"]
    commit = recipe.get("commit") or ""
    assert len(commit) == 40 and int(commit, 16) >= 0, row["id"]
    assert recipe["path"].startswith("scripts/performance/configs/")
    assert "_PRETRAIN_CONFIG_" in recipe["preset"]
    assert "the row wins" in recipe["note"]


@pytest.mark.parametrize("row", MBRIDGE_ROWS, ids=lambda r: r["id"])
def test_megatron_bridge_recipe_layout_matches_the_row_or_says_where_not(row):
    recipe = row["recipe"]
    preset = {**PRESET_DEFAULTS, **recipe.get("defaults", {}), **recipe["fields"]}
    differs = recipe.get("disagrees_with_row") or {}
    for field, preset_field in PRESET_LAYOUT.items():
        printed = row[field]
        if field == "vp" and not (isinstance(printed, int) and printed > 1):
            printed = None  # no interleaving
        if field == "ep" and printed is None:
            printed = 1  # dense rows: no experts
        if printed is None:
            continue
        got = preset[preset_field]
        if got == printed:
            assert preset_field not in differs, f"{row['id']}: {preset_field} listed but equal"
        else:
            assert differs.get(preset_field) == {"preset": got, "row": printed}, row["id"]
