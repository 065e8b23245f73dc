"""Find and load configs: built-in names (shipped inside the package), user YAML, HF config.json.

Errors are one line each and name the file, the line and the field when they can:
``Error: my.yaml:7: hidden_size: Input should be greater than 0``.
"""

from __future__ import annotations

import difflib
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from tpcalc.configfile import (
    field_error,
    locate,
    model_file,
    parse,
    read_text,
)
from tpcalc.errors import ConfigError, ConfigFieldError, UnknownNameError
from tpcalc.specs import HardwareSpec, ModelSpec

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
MAX_NAME_SHOWN = 60  # characters of an unknown name echoed back

Spec = TypeVar("Spec", bound=BaseModel)


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
    """A config suffix or a path separator, or something on disk by that name (a file, or a
    Hugging Face model directory). A name the OS cannot even look up (too long, a NUL byte) is
    not a path; it then falls through to 'unknown model'."""
    if name.endswith(CONFIG_SUFFIXES) or "/" in name or "\\" in name:
        return True
    try:
        os.lstat(name)
    except (OSError, ValueError):
        return False
    return True


def _unknown(kind: str, name: str, known: list[str]) -> UnknownNameError:
    if len(name) > MAX_NAME_SHOWN:
        shown = f"{name[:MAX_NAME_SHOWN]!r}... ({len(name)} characters)"
        return UnknownNameError(
            f"unknown {kind} {shown}: known: {', '.join(known)} (or pass a path to a .yaml/.json "
            "file)"
        )
    key = name.lower()
    prefixed = [k for k in known if k.startswith(key) or key.startswith(k)]
    close = list(dict.fromkeys(prefixed + difflib.get_close_matches(key, known, n=3, cutoff=0.4)))
    close = close[:3]
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(known)}"
    return UnknownNameError(
        f"unknown {kind} {name!r}: {hint} (or pass a path to a .yaml/.json file; "
        f"'tpcalc {'models' if kind == 'model' else 'hardware'}' lists them)"
    )


def _validate(cls: type[BaseModel], data: Any, path: Path, text: str) -> Any:
    if data is None:
        raise ConfigError(f"{path}: the file is empty; expected a mapping of fields")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        error = field_error(exc, str(path))
        raise error.at_line(locate(text, error.loc)) from None


def _load_model_path(path: Path) -> ModelSpec:
    path = model_file(path)
    text = read_text(path)
    data = parse(text, path)
    if path.suffix == ".json" and not (isinstance(data, dict) and "tpcalc" in data):
        # A Hugging Face config.json; a JSON file with a tpcalc block is in tpcalc's schema.
        from tpcalc.hf import model_from_hf_config

        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        try:
            return model_from_hf_config(data, source_path=str(path))
        except ConfigFieldError as exc:
            raise exc.at_line(locate(text, exc.loc)) from None
    return _validate(ModelSpec, data, path, text)


def _as_field(annotation: Any, value: Any) -> Any:
    """``value`` as pydantic's validation stores it in a field of type ``annotation``, for data
    known to be valid: nested models built, lists made tuples, integers in float fields made
    floats (``ModelSpec``, ``HardwareSpec`` and their parts need no more)."""
    if value is None:
        return None
    aliased = getattr(annotation, "__value__", None)  # a TypeAliasType (specs/bounds.py)
    if aliased is not None:
        return _as_field(aliased, value)
    origin = get_origin(annotation)
    if origin is Annotated:
        return _as_field(get_args(annotation)[0], value)
    if origin is Union or origin is UnionType:
        (arm,) = (a for a in get_args(annotation) if a is not type(None))  # X | None only
        return _as_field(arm, value)
    if origin is tuple:
        return tuple(_as_field(get_args(annotation)[0], v) for v in value)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return trusted(annotation, value)
    if annotation is float:
        return float(value)
    return value


def trusted(cls: type[Spec], data: dict[str, Any]) -> Spec:
    """A spec from a built-in config, without pydantic's validator (``model_construct``).

    Building ModelSpec's and HardwareSpec's validators is most of what loading a config costs
    at start-up (issue 12 §6); the specs defer it (``defer_build``) to the first user config.
    The built-in configs ship with the package, and tests/test_catalog.py checks that every one
    of them validates and, built this way, equals its validated self, field by field and type
    by type. User files are validated as always (``_validate``)."""
    fields = cls.model_fields
    return cls.model_construct(**{k: _as_field(fields[k].annotation, v) for k, v in data.items()})


def builtin_data(kind: str, name: str) -> Any:
    """The parsed YAML of the built-in config ``kind``/``name`` (``models`` or ``hardware``)."""
    res = _builtin_dir(kind) / f"{name}.yaml"
    return parse(res.read_text(encoding="utf-8"), Path(res.name))


def _builtin(cls: type[Spec], kind: str, name: str) -> Spec:
    return trusted(cls, builtin_data(kind, name))


@lru_cache(maxsize=64)
def load_model(name_or_path: str) -> ModelSpec:
    """A ModelSpec from a built-in name, a YAML path in tpcalc's schema, or a HF config.json."""
    if _looks_like_path(name_or_path):
        return _load_model_path(Path(name_or_path))
    if name_or_path not in model_names():
        raise _unknown("model", name_or_path, model_names())
    return _builtin(ModelSpec, "models", name_or_path)


@lru_cache(maxsize=16)
def load_hardware(name_or_path: str) -> HardwareSpec:
    """A HardwareSpec from a built-in name or a YAML path."""
    if _looks_like_path(name_or_path):
        path = Path(name_or_path)
        text = read_text(path)
        return _validate(HardwareSpec, parse(text, path), path, text)
    if name_or_path not in hardware_names():
        raise _unknown("hardware", name_or_path, hardware_names())
    return _builtin(HardwareSpec, "hardware", name_or_path)
