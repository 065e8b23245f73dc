"""The example inputs of issues 12 and 13 through the CLI: one line on stderr, exit 1, no
traceback, no hang; and the stderr note when an imported config.json's seq is defaulted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tpcalc.catalog import configs_root, load_model

BUILTIN = configs_root()
FIXTURES = Path(__file__).parent / "fixtures" / "hf"
HANG_GUARD_S = 60  # only catches a hang; speed is measured in benchmarks/

# Llama-3.1-8B's config.json (the keys tpcalc reads): max_position_embeddings 131,072.
LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "torch_dtype": "bfloat16",
}  # fmt: skip


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", "from tpcalc.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )


def assert_one_line_error(code: int, out: str, err: str, expected: str) -> None:
    assert code == 1, err
    assert out == ""
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("Error: ") and expected in err, err


def _model_yaml(tmp_path: Path, base: str, **changes) -> Path:
    data = yaml.safe_load((BUILTIN / "models" / f"{base}.yaml").read_text())
    data.update(changes)
    path = tmp_path / f"{base}-edited.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.skipif(not Path("/dev/urandom").exists(), reason="needs /dev/urandom")
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # issue 12: each of these hung until killed, or raised MemoryError
        (("show", "/dev/zero"), "/dev/zero: is a character device, not a config file"),
        (("memory", "--model", "/dev/urandom"), "/dev/urandom: is a character device"),
        (("comm", "--hardware", "/dev/urandom"), "/dev/urandom: is a character device"),
        # issue 12: OSError "File name too long" in _looks_like_path
        (("verify", "-m", "a" * 300), "unknown model 'aaaa"),
    ],
)
def test_issue12_devices_and_long_names_through_the_console_script(args, expected):
    r = run(*args)
    assert_one_line_error(r.returncode, r.stdout, r.stderr, expected)


def test_issue13_check_with_a_billion_heads(tmp_path):
    # issue 13 §2: ran for minutes enumerating t up to 10^9
    path = _model_yaml(tmp_path, "llama3-70b", num_attention_heads=10**9, num_key_value_heads=8)
    r = run("check", "-m", str(path))
    assert_one_line_error(
        r.returncode,
        r.stdout,
        r.stderr,
        "num_attention_heads: 1000000000 is beyond any real model (at most 65,536)",
    )


def test_issue13_verify_with_a_huge_intermediate():
    r = run("verify", "--intermediate", "1000000001")
    assert_one_line_error(
        r.returncode, r.stdout, r.stderr, "--intermediate must be a positive integer up to 4,096"
    )


def test_check_at_the_head_bound_lists_divisors(cli, tmp_path):
    # 65,536 heads (the bound) and 8,192 KV heads: every power of two up to 8 divides both
    path = _model_yaml(
        tmp_path,
        "llama3-70b",
        num_attention_heads=2**16,
        num_key_value_heads=2**13,
        hidden_size=2**16,
        head_dim=None,
    )
    data = yaml.safe_load(path.read_text())
    data.pop("head_dim")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    r = cli("check", "-m", str(path), "-f", "json")
    assert r.code == 0, r.err
    assert [row["t"] for row in json.loads(r.out)] == [1, 2, 4, 8]


@pytest.mark.parametrize(
    ("command", "changes", "expected"),
    [
        (
            ("dp", "-t", "8"),
            {"moe_intermediate_size": 2**64},
            "moe_intermediate_size: 18446744073709551616 is beyond any real model",
        ),
        (
            ("memory", "-t", "8"),
            {"hidden_size": 8, "num_attention_heads": 64, "num_key_value_heads": 8},
            "hidden_size: hidden_size=8 is not divisible by num_attention_heads=64",
        ),
        (
            ("show",),
            {"num_hidden_layers": 10**15},
            "num_hidden_layers: 1000000000000000 is beyond any real model (at most 4,096)",
        ),
    ],
)
def test_issue_configs_are_refused_in_one_line(cli, tmp_path, command, changes, expected):
    base = "deepseek-v3" if "moe_intermediate_size" in changes else "llama3-8b"
    data = yaml.safe_load((BUILTIN / "models" / f"{base}.yaml").read_text())
    data.update(changes)
    data.pop("head_dim", None)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    args = (*command, str(path)) if command == ("show",) else (*command, "-m", str(path))
    r = cli(*args)
    assert_one_line_error(r.code, r.out, r.err, expected)


def test_issue12_show_config_json_with_an_empty_seq_length(cli, tmp_path):
    data = yaml.safe_load((BUILTIN / "models" / "llama3-70b.yaml").read_text())
    data["tpcalc"]["seq_length"] = ""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2))
    r = cli("show", str(path))
    assert_one_line_error(
        r.code, r.out, r.err, "tpcalc.seq_length: Input should be a valid integer"
    )


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(model_type={"name": "llama"}),
        lambda d: d.update(moe_layer_freq="every other"),
        lambda d: d.update(num_hidden_layers=10**12),
    ],
)
def test_issue12_hf_tracebacks_are_one_line(cli, tmp_path, edit):
    data = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    edit(data)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    r = cli("show", str(path))
    assert_one_line_error(r.code, r.out, r.err, str(path))


def test_issue12_deeply_nested_config_json(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "x": ' + "[" * 50_000 + "]" * 50_000 + "}")
    r = cli("show", str(path))
    assert_one_line_error(r.code, r.out, r.err, "nested more than 64 levels deep")


def test_issue13_a_20_mb_yaml_is_refused_by_size(cli, tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("w") as f:
        f.write((BUILTIN / "models" / "llama3-70b.yaml").read_text())
        f.write("# padding\n" * 2_000_000)
    r = cli("show", str(path))
    assert_one_line_error(r.code, r.out, r.err, "too large for a config (over 1,048,576 bytes")


def _hf_dir(tmp_path: Path, config: dict) -> Path:
    model_dir = tmp_path / "Llama-3.1-8B"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


def test_issue13_imported_llama31_defaults_to_its_training_length(cli, tmp_path):
    # Before: seq was max_position_embeddings = 131,072 (97.6 GB, "fits: no" at t = 8).
    model_dir = _hf_dir(tmp_path, LLAMA31_8B)
    r = cli("memory", "-m", str(model_dir), "-t", "8", "-f", "json")
    assert r.code == 0, r.err
    (row,) = json.loads(r.out)
    assert row["seq"] == 8192 and row["model"] == "Llama-3.1-8B"
    assert r.err == (
        "Warning: seq defaulted to 8,192 (from the Llama 3 pre-training length: 'The Llama 3 "
        "Herd of Models', arXiv 2407.21783 §3.4.1, sequences of 8,192 tokens); set --seq\n"
    )


def test_no_seq_note_when_seq_is_given_or_the_model_is_builtin(cli, tmp_path):
    model_dir = _hf_dir(tmp_path, LLAMA31_8B)
    given = cli("memory", "-m", str(model_dir), "-t", "8", "--seq", "4096", "-f", "json")
    assert given.code == 0 and given.err == ""
    assert json.loads(given.out)[0]["seq"] == 4096
    builtin = cli("memory", "-m", "llama3-8b", "-t", "8", "-f", "json")
    assert builtin.code == 0 and builtin.err == ""


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("comm", ("-t", "8")),
        ("dp", ("-t", "8")),
        ("layout", ("--tp", "8", "--world-size", "8")),
        ("verify", ()),
    ],
)
def test_the_seq_note_reaches_every_priced_command(cli, tmp_path, command, extra):
    model_dir = _hf_dir(tmp_path, LLAMA31_8B)
    r = cli(command, "-m", str(model_dir), *extra)
    assert r.code == 0, r.err
    notes = [line for line in r.err.splitlines() if "seq defaulted" in line]
    assert notes == [
        "Warning: seq defaulted to 8,192 (from the Llama 3 pre-training length: 'The Llama 3 "
        "Herd of Models', arXiv 2407.21783 §3.4.1, sequences of 8,192 tokens); set --seq"
    ]


@pytest.mark.parametrize(
    ("fixture", "seq", "source"),
    [
        ("deepseek-v3", 4096, "DeepSeek-V3 pre-training length"),
        ("qwen3-8b", 4096, "Qwen3 pre-training length"),
        ("mixtral-8x7b-v0.1", 32768, "Mixtral pre-training context"),
        ("gpt-neox-20b", 2048, "GPT-NeoX-20B training length"),
        ("mistral-7b-v0.1", 4096, "tpcalc's default for a family without a published"),
    ],
)
def test_default_seq_per_family(fixture, seq, source):
    spec = load_model(str(FIXTURES / f"{fixture}.json"))
    assert spec.tpcalc.seq_length_defaulted
    assert spec.seq_length == seq and source in spec.tpcalc.seq_length_source


def test_llama2_keeps_its_shorter_position_limit(tmp_path):
    # Llama-2-7b: max_position_embeddings 4,096 is below the Llama 3 length, and is its own
    # training length (arXiv 2307.09288 §2.2)
    config = LLAMA31_8B | {"max_position_embeddings": 4096, "vocab_size": 32000}
    config |= {"num_key_value_heads": 32, "intermediate_size": 11008}
    spec = load_model(str(_hf_dir(tmp_path, config)))
    assert spec.seq_length == 4096
    assert spec.tpcalc.seq_length_source.startswith("max_position_embeddings of ")
