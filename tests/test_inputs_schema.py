"""The schema refuses what no model has (issue 12 §1 and §3, issue 13 §2): absurd sizes,
inconsistent geometry, NaN, inf, booleans and integers too large for a float, each in one line
naming the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tpcalc.catalog import configs_root, load_hardware, load_model
from tpcalc.errors import ConfigError, divisors
from tpcalc.specs import bounds

BUILTIN = configs_root()
FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _yaml(tmp_path: Path, base: str, **changes) -> Path:
    data = yaml.safe_load((BUILTIN / "models" / f"{base}.yaml").read_text())
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}  # None removes a key
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _line(path: Path, key: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith(key))


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    message = str(exc.value)
    assert "\n" not in message and "pydantic" not in message and "validation error" not in message
    return message


@pytest.mark.parametrize(
    ("base", "field", "bound"),
    [
        ("llama3-70b", "num_hidden_layers", bounds.MAX_LAYERS),
        ("llama3-70b", "num_attention_heads", bounds.MAX_HEADS),
        ("llama3-70b", "num_key_value_heads", bounds.MAX_HEADS),
        ("llama3-70b", "hidden_size", bounds.MAX_HIDDEN),
        ("llama3-70b", "intermediate_size", bounds.MAX_INTERMEDIATE),
        ("llama3-70b", "vocab_size", bounds.MAX_VOCAB),
        ("llama3-70b", "max_position_embeddings", bounds.MAX_SEQ),
        ("deepseek-v3", "n_routed_experts", bounds.MAX_HEADS),
        ("deepseek-v3", "moe_intermediate_size", bounds.MAX_INTERMEDIATE),
        ("qwen3.8", "head_dim", bounds.MAX_HEAD_DIM),
    ],
)
def test_a_size_beyond_its_bound_is_refused_with_the_field(tmp_path, base, field, bound):
    path = _yaml(tmp_path, base, **{field: bound + 1})
    assert _error(path).startswith(
        f"{path}:{_line(path, field)}: {field}: {bound + 1} is beyond any real model "
        f"(at most {bound:,})"
    )


def test_moe_intermediate_2_pow_64_is_refused(tmp_path):
    # issue 13 §2: accepted before, and dp printed negative last_bucket_time_s
    path = _yaml(tmp_path, "deepseek-v3", moe_intermediate_size=2**64)
    assert _error(path) == (
        f"{path}:{_line(path, 'moe_intermediate_size')}: moe_intermediate_size: "
        "18446744073709551616 is beyond any real model (at most 4,194,304)"
    )


def test_seq_length_beyond_its_bound(tmp_path):
    data = yaml.safe_load((BUILTIN / "models" / "llama3-8b.yaml").read_text())
    data["tpcalc"]["seq_length"] = 2**40
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert ": tpcalc.seq_length: 1099511627776 is beyond any real model (at most 67,108,864)" in (
        _error(path)
    )


def test_every_builtin_is_within_the_bounds_with_room():
    for name in ("llama3-405b", "deepseek-v3", "qwen3.8"):
        spec = load_model(name)
        assert spec.num_hidden_layers * 10 < bounds.MAX_LAYERS
        assert spec.rough_params * 100 < bounds.MAX_PARAMS


def test_sizes_that_multiply_beyond_any_model_are_refused(tmp_path):
    # every field is within its own bound, but together they give ~2e17 parameters
    path = _yaml(
        tmp_path, "llama3-70b", num_hidden_layers=4_000, hidden_size=2**20, intermediate_size=2**22
    )
    message = _error(path)
    assert (
        f"{path}:{_line(path, 'num_hidden_layers')}: num_hidden_layers: the sizes give about"
        in (message)
    )
    assert "parameters, beyond any real model (at most 1e+14)" in message


@pytest.mark.parametrize(
    ("base", "changes", "field", "message"),
    [
        # issue 13 §2: hidden 8 with 64 heads gave head_dim 0 and zero attention parameters
        (
            "llama3-70b",
            {"hidden_size": 8, "head_dim": None},
            "hidden_size",
            "hidden_size=8 is not divisible by num_attention_heads=64 (head_dim would be 0); "
            "give head_dim, or a hidden_size that is a multiple of 64",
        ),
        (
            "llama3-70b",
            {"num_key_value_heads": 48},
            "num_key_value_heads",
            "num_attention_heads=64 is not a multiple of num_key_value_heads=48; each KV head "
            "serves the same number of query heads (GQA)",
        ),
        (
            "deepseek-v3",
            {"num_experts_per_tok": 300},
            "num_experts_per_tok",
            "num_experts_per_tok=300 exceeds n_routed_experts=256: a token cannot be routed to "
            "more experts than exist",
        ),
        (
            "deepseek-v3",
            {"n_group": 6},
            "n_group",
            "n_routed_experts=256 is not divisible by n_group=6",
        ),
        (
            "deepseek-v3",
            {"first_k_dense_replace": 62},
            "first_k_dense_replace",
            "first_k_dense_replace=62 exceeds num_hidden_layers=61",
        ),
        (
            "qwen3.8",
            {"linear_num_value_heads": 20},
            "linear_num_value_heads",
            "linear_num_value_heads=20 is not a multiple of linear_num_key_heads=16",
        ),
        (
            "qwen3.8",
            {"num_hidden_layers": 60},
            "layer_types",
            "has 64 entries but num_hidden_layers=60; give one entry per layer",
        ),
        (
            "deepseek-v3",
            {"v_head_dim": None},
            "v_head_dim",
            "kv_lora_rank is set, so v_head_dim must be set too",
        ),
    ],
)
def test_inconsistent_geometry_names_the_field(tmp_path, base, changes, field, message):
    path = _yaml(tmp_path, base, **changes)
    if field in changes and changes[field] is None:  # a removed key has no line
        assert _error(path) == f"{path}: {field}: {message}"
    else:
        assert _error(path) == f"{path}:{_line(path, field)}: {field}: {message}"


def test_head_dim_makes_an_indivisible_hidden_size_valid(tmp_path):
    path = _yaml(tmp_path, "llama3-70b", hidden_size=8, head_dim=128)  # 64 heads of 128
    spec = load_model(str(path))
    assert spec.head_dim_resolved == 128


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (".nan", "Input should be a finite number"),
        (".inf", "Input should be a finite number"),
        ("true", "Input should be an integer, not a boolean"),
        ("8192.5", "Input should be a valid integer, got a number with a fractional part"),
        ("9" * 400, "an integer of 400 digits is beyond any real model (at most 1,048,576)"),
    ],
)
def test_nan_inf_bool_and_huge_integers_are_refused_where_they_enter(tmp_path, value, message):
    text = (BUILTIN / "models" / "llama3-70b.yaml").read_text()
    lines = text.splitlines()
    index = next(i for i, t in enumerate(lines) if t.startswith("hidden_size:"))
    lines[index] = f"hidden_size: {value}"
    path = tmp_path / "m.yaml"
    path.write_text("\n".join(lines) + "\n")
    error = _error(path)
    assert error.startswith(f"{path}:{index + 1}: hidden_size: ") and message in error


def test_hardware_number_too_large_for_a_float(tmp_path):
    data = yaml.safe_load((BUILTIN / "hardware" / "h100-sxm.yaml").read_text())
    data["memory_bytes"]["value"] = 10**400
    data["gpus_per_node"]["value"] = True
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as exc:
        load_hardware(str(path))
    value_line = next(
        i
        for i, t in enumerate(path.read_text().splitlines(), 1)
        if t.strip().startswith("value:") and i > _line(path, "memory_bytes")
    )
    assert str(exc.value) == (
        f"{path}:{value_line}: memory_bytes.value: an integer of 401 digits does not fit "
        "a float (max ~1.8e308) (+1 more)"
    )


def test_several_wrong_fields_name_the_first_and_count_the_rest(tmp_path):
    path = _yaml(tmp_path, "llama3-70b", hidden_size=0, vocab_size="many", num_hidden_layers=-1)
    assert _error(path) == (
        f"{path}:{_line(path, 'hidden_size')}: hidden_size: Input should be greater than 0 "
        "(+2 more)"
    )


def _hf(tmp_path: Path, name: str, edit) -> Path:
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    edit(data)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def _json_line(path: Path, key: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if f'"{key}"' in t)


@pytest.mark.parametrize(
    ("name", "edit", "field", "message"),
    [
        # issue 12: TypeError "unhashable type: 'dict'"
        (
            "qwen2-7b",
            lambda d: d.update(model_type={"a": 1}),
            "model_type",
            "expected a string, got an object; supported: llama, mistral, qwen2, qwen3, "
            "qwen3_moe, mixtral, deepseek_v3, qwen3_5, gpt_neox",
        ),
        (
            "qwen2-7b",
            lambda d: d.update(model_type=["llama"]),
            "model_type",
            "expected a string, got a list; supported: llama, mistral, qwen2, qwen3, qwen3_moe, "
            "mixtral, deepseek_v3, qwen3_5, gpt_neox",
        ),
        # issue 12: TypeError in _special_fields for a float or string frequency
        (
            "deepseek-v3",
            lambda d: d.update(moe_layer_freq="2"),
            "moe_layer_freq",
            "expected a positive integer, got '2'",
        ),
        (
            "deepseek-v3",
            lambda d: d.update(moe_layer_freq=1.5),
            "moe_layer_freq",
            "expected a positive integer, got 1.5",
        ),
        (
            "qwen3-30b-a3b",
            lambda d: d.update(decoder_sparse_step=1.5),
            "decoder_sparse_step",
            "Input should be a valid integer, got a number with a fractional part",
        ),
        (
            "qwen3-30b-a3b",
            lambda d: d.update(mlp_only_layers="0,1"),
            "mlp_only_layers",
            "Input should be a valid tuple",
        ),
        # issue 12: MemoryError from a huge layer count before the schema saw it
        (
            "deepseek-v3",
            lambda d: d.update(num_hidden_layers=10**12),
            "num_hidden_layers",
            "1000000000000 is beyond any real model (at most 4,096)",
        ),
        (
            "qwen3-30b-a3b",
            lambda d: d.update(num_experts=10**6),
            "num_experts",
            "1000000 is beyond any real model (at most 65,536)",
        ),
        (
            "mixtral-8x7b-v0.1",
            lambda d: d.update(intermediate_size=2**64),
            "intermediate_size",
            "18446744073709551616 is beyond any real model (at most 4,194,304) (+1 more)",
        ),
        (
            "qwen2-7b",
            lambda d: d.update(hidden_size=float("nan")),
            "hidden_size",
            "Input should be a finite number",
        ),
    ],
)
def test_hf_errors_are_one_line_naming_the_config_json_field(tmp_path, name, edit, field, message):
    path = _hf(tmp_path, name, edit)
    assert _error(path) == f"{path}:{_json_line(path, field)}: {field}: {message}"


def test_hf_nested_and_vision_fields_are_checked_before_arithmetic(tmp_path):
    # a string depth would have repeated a string (str * int) until memory ran out
    path = _hf(tmp_path, "qwen3.8-27b", lambda d: d["vision_config"].update(depth="27"))
    message = _error(path)
    assert message == f"{path}:{_json_line(path, 'depth')}: vision_config.depth: expected a " + (
        "positive integer, got '27'"
    )

    def nested(d):
        del d["text_config"]["layer_types"]
        d["text_config"]["num_hidden_layers"] = 2**40

    path = _hf(tmp_path, "qwen3.8-27b", nested)
    line = next(
        i
        for i, t in enumerate(path.read_text().splitlines(), 1)
        if '"num_hidden_layers"' in t and i > _json_line(path, "text_config")
    )
    assert _error(path) == (
        f"{path}:{line}: text_config.num_hidden_layers: 1099511627776 is beyond any real model "
        "(at most 4,096)"
    )


def test_divisors_match_a_brute_force_count():
    for n in range(1, 2000):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    # 1,000,000,001 = 7 · 11 · 13 · 19 · 52,579 (issue 13 §2's --intermediate)
    assert divisors(1_000_000_001)[:6] == [1, 7, 11, 13, 19, 77]
    assert len(divisors(1_000_000_001)) == 2**5
