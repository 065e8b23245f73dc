"""Reading a config path safely (issue 12 §1, issue 13 §2 and §4): only regular files of at most
1 MiB, bounded nesting, a Hugging Face model directory, and errors located cheaply."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from tpcalc.catalog import configs_root, load_hardware, load_model
from tpcalc.configfile import MAX_CONFIG_BYTES, MAX_DEPTH, locate
from tpcalc.errors import ConfigError, UnknownNameError

LLAMA = (configs_root() / "models" / "llama3-70b.yaml").read_text(encoding="utf-8")
FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("loader", [load_model, load_hardware])
def test_devices_are_refused_without_reading(device, loader):
    # Before: /dev/zero grew a string until MemoryError, /dev/urandom hung.
    with pytest.raises(ConfigError) as exc:
        loader(device)
    assert _one_line(exc) == (
        f"{device}: is a character device, not a config file; pass a .yaml or .json file"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def load() -> None:
        try:
            load_model(str(fifo))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            outcome.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(timeout=10)  # a hang guard, not a speed target
    if worker.is_alive():  # unblock the reader so the thread can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    assert isinstance(outcome[0], ConfigError)
    assert str(outcome[0]).endswith(
        "is a FIFO (named pipe), not a config file; pass a .yaml or .json file"
    )


def test_a_file_over_the_cap_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(LLAMA + "#" * MAX_CONFIG_BYTES)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert _one_line(exc) == (
        f"{path}: too large for a config (over 1,048,576 bytes; configs are a few KB)"
    )


def test_a_file_just_under_the_cap_loads(tmp_path):
    path = tmp_path / "padded.yaml"
    path.write_text(LLAMA + "#" * (MAX_CONFIG_BYTES - len(LLAMA.encode()) - 2) + "\n")
    assert path.stat().st_size <= MAX_CONFIG_BYTES
    assert load_model(str(path)).hidden_size == 8192


def test_a_directory_is_refused_for_hardware(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_hardware(str(tmp_path))
    assert (
        _one_line(exc)
        == f"{tmp_path}: is a directory, not a config file; pass a .yaml or .json file"
    )


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_named(tmp_path):
    path = tmp_path / "secret.yaml"
    path.write_text(LLAMA)
    path.chmod(0)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert _one_line(exc) == f"{path}: cannot read (permission denied)"


def test_a_name_too_long_is_an_unknown_model_not_an_oserror():
    # Before: OSError "File name too long" from Path.is_file in _looks_like_path.
    name = "a" * 300
    with pytest.raises(UnknownNameError) as exc:
        load_model(name)
    message = _one_line(exc)
    assert message.startswith(f"unknown model {name[:60]!r}... (300 characters): known: ")


def test_a_path_too_long_says_so(tmp_path):
    path = tmp_path / ("b" * 300 + ".yaml")
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert _one_line(exc) == f"{path}: file name too long"


def test_a_path_through_a_file_is_no_such_file(tmp_path):
    parent = tmp_path / "plain.txt"
    parent.write_text("x")
    with pytest.raises(ConfigError, match="no such file"):
        load_model(str(parent / "m.yaml"))


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_deep_nesting_is_refused_before_parsing(tmp_path, suffix):
    # Before: json raised RecursionError; libyaml segfaults on ~100,000 levels.
    path = tmp_path / f"deep{suffix}"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert (
        _one_line(exc)
        == f"{path}: nested more than {MAX_DEPTH} levels deep; a config nests a few levels"
    )


def test_deep_yaml_block_nesting_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text(
        "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5)) + " " * 80 + "v: 1\n"
    )
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        load_model(str(path))


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path):
    data = yaml.safe_load(LLAMA)
    data["tpcalc"]["notes"] = "[" * 500
    path = tmp_path / "brackets.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_model(str(path)).tpcalc.notes == "[" * 500


def test_an_integer_too_long_to_convert_is_one_line(tmp_path):
    path = tmp_path / "digits.json"
    path.write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert _one_line(exc).startswith(f"{path}: malformed JSON: ")


def test_a_hugging_face_directory_reads_its_config_json(tmp_path):
    # issue 13 §4: what `huggingface-cli download --local-dir ./Qwen3-8B` leaves behind
    model_dir = tmp_path / "Qwen3-8B"
    model_dir.mkdir()
    (model_dir / "config.json").write_text((FIXTURES / "qwen3-8b.json").read_text())
    (model_dir / "model.safetensors.index.json").write_text("{}")
    spec = load_model(str(model_dir))
    assert spec.name == "Qwen3-8B" and spec.hidden_size == 4096 and spec.num_hidden_layers == 36


def test_a_directory_without_config_json_says_so(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_model(str(tmp_path))
    assert _one_line(exc) == (
        f"{tmp_path}: is a directory without config.json; pass a Hugging Face model directory, "
        "or a .yaml/.json config file"
    )


def test_a_json_file_in_tpcalcs_schema_is_validated_as_such(tmp_path):
    # issue 12 §2's example: tpcalc.seq_length "" in a config.json
    data = yaml.safe_load(LLAMA)
    data["tpcalc"]["seq_length"] = ""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if '"seq_length"' in t)
    assert _one_line(exc) == (
        f"{path}:{line}: tpcalc.seq_length: Input should be a valid integer, unable to parse "
        "string as an integer"
    )


def test_locate_finds_nested_keys_in_yaml_and_json():
    text = "a: 1\nb:\n  c: 2\n  d:\n    - e: 3\n"
    assert locate(text, ("b", "d", 0, "e")) == 5
    assert locate(text, ("b", "c")) == 3
    assert locate(text, ("b", "missing")) == 2  # the deepest parent found
    assert locate(text, ("zzz",)) is None
    assert locate('{"x": {"y": 1},\n "y": 2}', ("y",)) == 1  # the first "y" at any depth
    assert (
        locate('{"x": 1,\n "text_config": {\n  "hidden_size": 0}}', ("text_config", "hidden_size"))
        == 3
    )


def test_an_error_in_a_large_yaml_is_located_without_composing_it(tmp_path, monkeypatch):
    # issue 13 §2: the line used to be found by composing the YAML in pure Python, node by node
    # (minutes on a 20-30 MB file). A node-dense file near the 1 MiB cap, the bad field first.
    data = yaml.safe_load(LLAMA)
    data["vocab_size"] = 0
    parts = [{"name": f"part{i}", "params": i, "source": "s"} for i in range(20_000)]
    data["tpcalc"]["declared_parts"] = parts
    path = tmp_path / "large.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert 700_000 < path.stat().st_size <= MAX_CONFIG_BYTES

    def compose(*args, **kwargs):
        raise AssertionError("the error line must be found without composing the YAML")

    monkeypatch.setattr(yaml, "compose", compose)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("vocab"))
    start = time.process_time()
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert _one_line(exc) == f"{path}:{line}: vocab_size: Input should be greater than 0"
    assert time.process_time() - start < 10  # a hang guard; benchmarks/ holds speed targets


def test_a_newline_in_a_file_name_stays_on_one_line(tmp_path):
    path = tmp_path / "two\nlines.yaml"
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert _one_line(exc) == f"{tmp_path}/two\\nlines.yaml: no such file"
