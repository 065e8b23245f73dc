"""Find and load configs: built-in names (shipped inside the package), user YAML, HF config.json.

Errors are one line each and name the file, the line and the field when they can:
``Error: my.yaml:7: hidden_size: Input should be greater than 0``.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from tpcalc.errors import ConfigError, UnknownNameError
from tpcalc.specs import HardwareSpec, ModelSpec

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def configs_root() -> Any:
    """The built-in configs: ``tpcalc.configs`` in an installed wheel (pyproject maps the
    top-level ``configs/`` there), the repository's ``configs/`` in a source checkout."""
    try:
        return resources.files("tpcalc.configs")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / "configs"


def _builtin_dir(kind: str) -> Any:
    return configs_root() / kind


def _names(kind: str) -> list[str]:
    return sorted(
        p.name.rsplit(".", 1)[0]
        for p in _builtin_dir(kind).iterdir()
        if p.name.endswith((".yaml", ".yml"))
    )


def model_names() -> list[str]:
    """Names of the built-in models, e.g. ``llama3-70b``."""
    return _names("models")


def hardware_names() -> list[str]:
    """Names of the built-in accelerators, e.g. ``h100-sxm``."""
    return _names("hardware")


def _looks_like_path(name: str) -> bool:
    return name.endswith(CONFIG_SUFFIXES) or "/" in name or "\\" in name or Path(name).is_file()


def _unknown(kind: str, name: str, known: list[str]) -> UnknownNameError:
    key = name.lower()
    prefixed = [k for k in known if k.startswith(key) or key.startswith(k)]
    close = list(dict.fromkeys(prefixed + difflib.get_close_matches(key, known, n=3, cutoff=0.4)))
    close = close[:3]
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(known)}"
    return UnknownNameError(
        f"unknown {kind} {name!r}: {hint} (or pass a path to a .yaml/.json file; "
        f"'tpcalc {'models' if kind == 'model' else 'hardware'}' lists them)"
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; pass a YAML or JSON config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None


def _parse(text: str, path: Path) -> Any:
    """Parse YAML (safe_load) or JSON, turning syntax errors into 'file:line: problem'."""
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    try:
        # The C build of the *safe* loader when PyYAML has libyaml (same rules, ~10x faster).
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{line}: malformed YAML: {problem}") from None


def _line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort line number of the node at ``loc`` (or of its deepest existing parent)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(key)), None)
            if match is None:
                break
            key_node = next(k for k, v in node.value if v is match)
            line, node = key_node.start_mark.line + 1, match
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


def validation_message(exc: ValidationError, path: Path | str, text: str | None) -> str:
    """One line for a pydantic error: 'file:line: field.path: message (+N more)'."""
    errors = exc.errors()
    # A misspelt key shows up twice: as unknown and as the real key missing. Name the typo first.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(first["loc"])
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = _line_of(text, loc) if text else None
    where = f"{path}:{line}" if line else f"{path}"
    msg = first["msg"].removeprefix("Value error, ")  # pydantic's prefix for validator errors
    if first["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling against the built-in configs)"
    elif first["type"] == "missing":
        msg = "required key is missing"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {field}: {msg}{more}"


def _validate(cls: type[BaseModel], data: Any, path: Path, text: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, path, text)) from None


def _load_model_path(path: Path) -> ModelSpec:
    text = _read_text(path)
    data = _parse(text, path)
    if path.suffix == ".json":
        from tpcalc.hf import model_from_hf_config

        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        return model_from_hf_config(data, source_path=str(path))
    return _validate(ModelSpec, data, path, text)


@lru_cache(maxsize=64)
def load_model(name_or_path: str) -> ModelSpec:
    """A ModelSpec from a built-in name, a YAML path in tpcalc's schema, or a HF config.json."""
    if _looks_like_path(name_or_path):
        return _load_model_path(Path(name_or_path))
    if name_or_path not in model_names():
        raise _unknown("model", name_or_path, model_names())
    res = _builtin_dir("models") / f"{name_or_path}.yaml"
    text = res.read_text(encoding="utf-8")
    return _validate(ModelSpec, _parse(text, Path(res.name)), Path(res.name), text)


@lru_cache(maxsize=16)
def load_hardware(name_or_path: str) -> HardwareSpec:
    """A HardwareSpec from a built-in name or a YAML path."""
    if _looks_like_path(name_or_path):
        path = Path(name_or_path)
        text = _read_text(path)
        return _validate(HardwareSpec, _parse(text, path), path, text)
    if name_or_path not in hardware_names():
        raise _unknown("hardware", name_or_path, hardware_names())
    res = _builtin_dir("hardware") / f"{name_or_path}.yaml"
    text = res.read_text(encoding="utf-8")
    return _validate(HardwareSpec, _parse(text, Path(res.name)), Path(res.name), text)
