"""Loading configs: built-in names, user YAML, HF config.json, and one-line errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from tpcalc.catalog import (
    builtin_data,
    configs_root,
    hardware_names,
    load_hardware,
    load_model,
    model_names,
    trusted,
)
from tpcalc.errors import ConfigError, UnknownNameError
from tpcalc.specs import HardwareSpec, ModelSpec

BUILTIN = configs_root()
LLAMA = (BUILTIN / "models" / "llama3-70b.yaml").read_text(encoding="utf-8")


def test_builtins_are_listed_and_load():
    assert {"qwen3.8", "llama3-8b", "llama3-70b", "llama3-405b", "deepseek-v3"} <= set(
        model_names()
    )
    assert {"h100-sxm", "h800", "a100-80g", "h200", "b200"} <= set(hardware_names())
    for name in model_names():
        assert load_model(name).name == name
    for name in hardware_names():
        assert load_hardware(name).name == name


def _same(built: object, validated: object) -> None:
    """Equal values of the same types, all the way down (8192 == 8192.0, (1,) == [1] do not
    pass: the JSON output and hashing would differ)."""
    assert type(built) is type(validated), (built, validated)
    if isinstance(validated, BaseModel):
        assert built.model_fields_set == validated.model_fields_set
        for name in type(validated).model_fields:
            _same(getattr(built, name), getattr(validated, name))
    elif isinstance(validated, tuple):
        assert len(built) == len(validated)
        for b, v in zip(built, validated, strict=True):
            _same(b, v)
    else:
        assert built == validated


@pytest.mark.parametrize(
    ("kind", "cls", "names"),
    [("models", ModelSpec, model_names()), ("hardware", HardwareSpec, hardware_names())],
)
def test_builtins_validate_and_load_as_validated(kind, cls, names):
    """Built-in configs load without pydantic's validator (catalog.trusted, for start-up): each
    must validate, and the spec built from it must equal the validated one exactly."""
    for name in names:
        data = builtin_data(kind, name)
        validated = cls.model_validate(data)  # raises if a built-in config is invalid
        _same(trusted(cls, data), validated)
        _same(load_model(name) if kind == "models" else load_hardware(name), validated)


def test_trusted_builds_what_validation_builds():
    """The conversions trusted() makes, on a config that needs each of them: integers in float
    fields, lists for tuples, nested and optional models."""
    data = builtin_data("hardware", "h100-sxm")
    data["memory_bytes"]["value"] = 80_000_000_000  # an int in a float field
    built, validated = trusted(HardwareSpec, data), HardwareSpec.model_validate(data)
    assert type(built.memory_bytes.value) is float
    _same(built, validated)
    model = builtin_data("models", "llama3-70b")
    model["mlp_only_layers"] = [0, 1]
    model["layer_types"] = ["full_attention"] * model["num_hidden_layers"]
    model["tpcalc"]["declared_parts"] = [{"name": "vision", "params": 5, "source": "x"}]
    built_model = trusted(ModelSpec, model)
    assert built_model.mlp_only_layers == (0, 1)
    _same(built_model, ModelSpec.model_validate(model))
    assert hash(built_model) == hash(ModelSpec.model_validate(model))


def test_package_data_globs_cover_every_config():
    """The wheel ships the top-level configs/*/*.yaml as tpcalc.configs (pyproject package-dir
    and package-data); nothing else is needed."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    setuptools = pyproject["tool"]["setuptools"]
    assert setuptools["package-dir"]["tpcalc.configs"] == "configs"
    assert set(setuptools["package-data"]["tpcalc.configs"]) == {"models/*.yaml", "hardware/*.yaml"}
    for kind in ("models", "hardware"):
        files = [p.name for p in (BUILTIN / kind).iterdir() if not p.name.startswith("_")]
        assert files and all(f.endswith(".yaml") for f in files if f != "__pycache__")


def test_user_yaml_round_trip(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(LLAMA)
    assert load_model(str(path)).hidden_size == 8192


def test_unknown_name_suggests_nearest():
    with pytest.raises(UnknownNameError, match="did you mean llama3-70b"):
        load_model("llama3-70")
    with pytest.raises(UnknownNameError, match="did you mean h100-sxm"):
        load_hardware("h100")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_model(str(tmp_path / "nope.yaml"))


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model_type: llama\nhidden_size: [1, 2\nvocab_size: 3\n")
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    message = str(exc.value)
    assert message.startswith(f"{path}:") and "malformed YAML" in message
    line = int(message.split(":")[1])
    assert line in (2, 3)


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": ,\n}\n')
    with pytest.raises(ConfigError, match=r"config\.json:3: malformed JSON"):
        load_model(str(path))


def _edited(tmp_path, **changes) -> Path:
    data = yaml.safe_load(LLAMA)
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _line_of(path: Path, key: str) -> int:
    return next(
        i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(key)
    )


def test_unknown_key_names_field_and_line(tmp_path):
    path = _edited(tmp_path, hiden_size=8192)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert str(exc.value) == (
        f"{path}:{_line_of(path, 'hiden_size')}: hiden_size: unknown key "
        "(check the spelling against the built-in configs)"
    )


def test_missing_key_names_field(tmp_path):
    path = _edited(tmp_path, num_hidden_layers=None)
    with pytest.raises(ConfigError, match="num_hidden_layers: required key is missing"):
        load_model(str(path))


@pytest.mark.parametrize("value", [0, -8192])
def test_non_positive_sizes_are_rejected_with_the_line(tmp_path, value):
    path = _edited(tmp_path, hidden_size=value)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert f":{_line_of(path, 'hidden_size')}: hidden_size: Input should be greater than 0" in str(
        exc.value
    )


def test_nested_field_path(tmp_path):
    data = yaml.safe_load(LLAMA)
    data["tpcalc"]["seq_length"] = -1
    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"tpcalc\.seq_length: Input should be greater than 0"):
        load_model(str(path))


def test_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_model(str(path))


def test_hardware_yaml_errors(tmp_path):
    text = (BUILTIN / "hardware" / "h100-sxm.yaml").read_text()
    data = yaml.safe_load(text)
    data["memory_bytes"]["value"] = -80e9
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"memory_bytes\.value: Input should be greater than 0"):
        load_hardware(str(path))


def test_cli_bad_config_is_one_line(cli, tmp_path):
    path = _edited(tmp_path, hiden_size=1)
    for fmt in ("table", "json"):
        r = cli("comm", "--model", str(path), "-t", "8", "-f", fmt)
        assert r.code == 1 and r.out == ""
        assert r.err.count("\n") == 1 and "hiden_size: unknown key" in r.err


def test_cli_hf_config_json(cli, tmp_path):
    cfg = {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
    }  # fmt: skip
    path = tmp_path / "Meta-Llama-3-8B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    rows = json.loads(cli("comm", "-m", str(path), "-t", "8", "-f", "json").out)
    assert rows[0]["model"] == "Meta-Llama-3-8B" and rows[0]["seq"] == 8192


def test_misspelt_key_is_named_before_the_missing_one(tmp_path):
    path = _edited(tmp_path, hidden_size=None, hidden_sizee=8192)
    with pytest.raises(ConfigError, match=r"hidden_sizee: unknown key .*\(\+1 more\)"):
        load_model(str(path))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"intra_node_latency_s": -1e-6}, "greater than or equal to 0"),
        ({"memory_bytes": float("inf")}, "finite number"),
    ],
)
def test_hardware_rejects_negative_latency_and_infinity(tmp_path, changes, message):
    data = yaml.safe_load((BUILTIN / "hardware" / "h100-sxm.yaml").read_text())
    for key, value in changes.items():
        data[key]["value"] = value
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=message):
        load_hardware(str(path))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_experts_per_tok": 300}, "num_experts_per_tok=300 exceeds n_routed_experts=256"),
        ({"topk_group": 9}, "topk_group=9 exceeds n_group=8"),
    ],
)
def test_moe_routing_must_be_possible(tmp_path, changes, message):
    data = yaml.safe_load((BUILTIN / "models" / "deepseek-v3.yaml").read_text())
    data.update(changes)
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=message):
        load_model(str(path))


def test_empty_entry_in_a_t_list_is_an_error(cli):
    r = cli("comm", "-t", "1,,2")
    assert r.code == 1 and "give an integer or a list like 1,2,4,8" in r.err
