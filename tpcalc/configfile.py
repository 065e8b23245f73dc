"""Reading a config file safely and locating its errors.

- ``read_text``: only a regular file of at most MAX_CONFIG_BYTES, in UTF-8; anything else (a
  directory, /dev/zero, a FIFO, a huge file, an unreadable one, a name too long) is one line
  naming the path and what it is, before a byte is read.
- ``parse``: nesting is bounded before the JSON or YAML parser runs (no RecursionError, no
  libyaml crash on deep input); syntax errors become ``file:line: problem``.
- ``locate`` and ``field_error``: a pydantic error as ``file:line: field.path: problem (+N
  more)``, the line found by a linear regular-expression scan, not by re-parsing.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tpcalc.errors import ConfigError, ConfigFieldError, FieldProblem

HF_CONFIG = "config.json"  # what a Hugging Face model directory holds
# Configs are a few KB (DeepSeek-V3's config.json: 1.7 KB; the longest built-in YAML: 3 KB).
# 1 MiB is hundreds of times that and keeps parsing and locating an error well under a second;
# it also bounds every list in a config to well under a million entries before parsing.
MAX_CONFIG_BYTES = 2**20
# A config nests a few levels (tpcalc.declared_parts, rope_scaling, quantization_config).
MAX_DEPTH = 64
# pydantic error types for a number that is not a usable float
FLOAT_ERRORS = frozenset({"float_type", "float_parsing", "finite_number"})
MAX_BITS = 80  # integers up to 24 digits are echoed in full


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words, or None for a regular file."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    )
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _os_problem(exc: OSError) -> str:
    """One phrase for a failed stat/open of a config path."""
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ENOTDIR:
        return "no such file (a parent is not a directory)"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot read (permission denied)"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    return f"cannot read ({exc.strerror or exc})"


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        raise ConfigError(f"{path}: {_os_problem(exc)}") from None
    except ValueError:  # an embedded NUL byte
        raise ConfigError(f"{path!r}: not a valid file name") from None


def read_text(path: Path) -> str:
    """The text of a config file: a regular file of at most MAX_CONFIG_BYTES in UTF-8.

    Anything else (a directory, a device such as /dev/zero, a FIFO, a file too large, one that
    cannot be read) is refused with one line naming the path and what it is, before a byte is
    read, so nothing hangs or fills memory. The file is opened non-blocking and checked again
    through its descriptor, so a FIFO swapped in after the first check cannot block either.
    """
    what = _kind(_stat(path).st_mode)
    if what is not None:
        raise ConfigError(f"{path}: is {what}, not a config file; pass a .yaml or .json file")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ConfigError(f"{path}: {_os_problem(exc)}") from None
    with os.fdopen(fd, "rb") as f:
        what = _kind(os.fstat(fd).st_mode)
        if what is not None:
            raise ConfigError(f"{path}: is {what}, not a config file; pass a .yaml or .json file")
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{path}: {_os_problem(exc)}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: too large for a config (over {MAX_CONFIG_BYTES:,} bytes; "
            "configs are a few KB)"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; pass a YAML or JSON config file") from None


def model_file(path: Path) -> Path:
    """A model path as given, or the config.json inside a directory (a Hugging Face download:
    ``huggingface-cli download Qwen/Qwen2.5-72B --local-dir ./Qwen2.5-72B``)."""
    if not stat.S_ISDIR(_stat(path).st_mode):
        return path
    inside = path / HF_CONFIG
    try:
        os.stat(inside)
    except (OSError, ValueError):
        raise ConfigError(
            f"{path}: is a directory without {HF_CONFIG}; pass a Hugging Face model directory, "
            "or a .yaml/.json config file"
        ) from None
    return inside


# Strings are blanked before nesting is measured, so brackets inside them do not count.
_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\n]|\'\')*\'|#[^\n]*')
_BRACKETS = re.compile(r"[^\[\]{}]+")


def _check_nesting(text: str, path: Path) -> None:
    """Refuse nesting deeper than MAX_DEPTH before parsing: json raises RecursionError on deep
    input and libyaml crashes the interpreter on very deep input. Counts flow brackets ([ and {)
    and, for YAML, block indentation levels and "- " markers."""
    stripped = _QUOTED.sub("", text)
    depth = deepest = 0
    for ch in _BRACKETS.sub("", stripped):
        depth = depth + 1 if ch in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    if deepest <= MAX_DEPTH and path.suffix != ".json":
        indents: list[int] = []
        for line in stripped.splitlines():
            body = line.lstrip(" ")
            if not body.strip():
                continue
            indent = len(line) - len(body)
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
            dashes = len(body) - len(body.lstrip("- "))
            deepest = max(deepest, len(indents) + dashes // 2)
            if deepest > MAX_DEPTH:
                break
    if deepest > MAX_DEPTH:
        raise ConfigError(
            f"{path}: nested more than {MAX_DEPTH} levels deep; a config nests a few levels"
        )


def parse(text: str, path: Path) -> Any:
    """Parse YAML (safe_load) or JSON, turning syntax errors into 'file:line: problem'."""
    _check_nesting(text, path)
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
        except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
            raise ConfigError(f"{path}: malformed JSON: {exc}") from None
    try:
        # The C build of the *safe* loader when PyYAML has libyaml (same rules, ~10x faster).
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{line}: malformed YAML: {problem}") from None
    except (ValueError, OverflowError) as exc:  # an integer too long to convert
        raise ConfigError(f"{path}: malformed YAML: {exc}") from None


def _key_pattern(key: str) -> re.Pattern[str]:
    """A mapping key in YAML block style (``  key:``, ``- key:``) or in JSON/flow style
    (``"key":`` after a brace, comma or line start)."""
    k = re.escape(key)
    return re.compile(rf"""(?:^|[{{,])[ \t]*(?:-[ \t]+)*(?:"{k}"|'{k}'|{k})[ \t]*:""", re.M)


def locate(text: str, loc: tuple[Any, ...]) -> int | None:
    """Line (1-based) of the field at ``loc``, or of its deepest parent found; None if not even
    the first key is in the text.

    A regular-expression scan, each key searched after its parent's position: linear in the
    text and a few milliseconds on a 1 MiB file (composing a YAML node tree in pure Python to
    find a line took minutes on a 20 MB file). Best effort: list indices are skipped.
    """
    pos, line = 0, None
    for key in loc:
        if isinstance(key, int):
            continue
        match = _key_pattern(str(key)).search(text, pos)
        if match is None:
            break
        start = match.start() + (1 if text[match.start()] in "{," else 0)
        line, pos = text.count("\n", 0, start) + 1, match.end()
    return line


def _problem(error: Any) -> str:
    """What was wrong and, when pydantic knows it, what would be valid."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown key (check the spelling against the built-in configs)"
    if kind == "missing":
        return "required key is missing"
    value = error.get("input")
    if kind == "less_than_equal":
        return f"{_shown(value)} is beyond any real model (at most {ctx['le']:,})"
    if kind in FLOAT_ERRORS and isinstance(value, int) and not isinstance(value, bool):
        return f"{_shown(value)} does not fit a float (max ~1.8e308)"
    if kind == "too_long":
        return f"too many entries (at most {ctx['max_length']:,})"
    return str(error["msg"]).removeprefix("Value error, ")  # pydantic's prefix for validators


def _shown(value: Any) -> str:
    """A value for a message: a very long integer as its digit count (str() of an integer over
    4,300 digits raises, and a thousand digits would not read as one line anyway)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_BITS:
        digits = math.floor(math.log10(abs(value))) + 1  # the float log may round up by one
        digits -= 10 ** (digits - 1) > abs(value)
        return f"an integer of {digits} digits"
    return repr(value)


def field_error(exc: ValidationError, source: str) -> ConfigFieldError:
    """The first error of a pydantic ValidationError as a ConfigFieldError (no line yet)."""
    errors = exc.errors(include_url=False)
    # A misspelt key shows up twice: as unknown and as the real key missing. Name the typo first.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(first["loc"])
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, FieldProblem):  # a model validator naming the field at fault
        loc = (*loc, cause.field)
    return ConfigFieldError(source, loc, _problem(first), more=len(errors) - 1)
