"""Every example a ``--help`` prints is a command tpcalc accepts, and reads whole on an 80-column
terminal: each is a ``\\b`` block (click prints it unwrapped) broken with `` \\`` continuations,
so it can be pasted into a shell as printed. The examples are taken from the rendered help, not
the docstrings, so a line the help formatter re-wraps (``--save-`` / ``svg``) fails here."""

from __future__ import annotations

import shlex

import pytest
import typer

from tests.conftest import run_cli
from tpcalc.cli import COMMANDS, build_app

WIDTH = 80
PROMPT = "tpcalc "


def _examples(text: str) -> list[tuple[list[str], list[str]]]:
    """Each example of a help text: its printed lines and its arguments after ``tpcalc``. An
    example starts at a line that begins with ``tpcalc`` (or a ``#`` comment just above one) and
    runs on while a line ends with a continuation backslash; a shell redirection ends it."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        if not lines[i].strip().startswith(PROMPT):
            i += 1
            continue
        start = i - 1 if i and lines[i - 1].strip().startswith("#") else i
        while lines[i].endswith("\\") and i + 1 < len(lines):
            i += 1
        printed = lines[start : i + 1]
        command = [x.rstrip("\\") for x in printed if not x.strip().startswith("#")]
        words = shlex.split(" ".join(command))
        if ">" in words:
            words = words[: words.index(">")]
        out.append((printed, words[1:]))
        i += 1
    return out


def _helps() -> list[tuple[str, str]]:
    """(command, its --help at 80 columns) for the overview and every command."""
    return [("", run_cli("--help").out)] + [
        (name, run_cli(name, "--help").out) for name in COMMANDS
    ]


@pytest.fixture(scope="module")
def helps() -> list[tuple[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", str(WIDTH))
        return _helps()


def test_every_command_prints_examples(helps):
    for name, text in helps:
        assert _examples(text), f"'tpcalc {name} --help' prints no example"


def test_help_examples_fit_80_columns(helps):
    for name, text in helps:
        for printed, _ in _examples(text):
            wide = [line for line in printed if len(line) > WIDTH]
            assert not wide, f"'tpcalc {name} --help': {wide}"


def test_help_examples_parse(helps):
    """Each example's options exist and its values convert (click parses them; nothing runs)."""
    group = typer.main.get_command(build_app())
    seen = 0
    for name, text in helps:
        for printed, args in _examples(text):
            ctx = group.make_context("tpcalc", list(args))
            command = group.get_command(ctx, args[0])
            assert command is not None, printed
            assert not name or args[0] == name, printed
            command.make_context(args[0], args[1:], parent=ctx)
            seen += 1
    assert seen >= len(COMMANDS)


def test_a_wrapped_example_is_caught():
    """The check reads what the formatter printed: an option broken across lines fails."""
    printed = "    tpcalc pipeline --pp 4 --timeline --save-\n    svg pp.svg"
    [(_, args)] = _examples(printed)
    group = typer.main.get_command(build_app("pipeline"))
    ctx = group.make_context("tpcalc", list(args))
    with pytest.raises(Exception, match="--save-"):
        group.get_command(ctx, "pipeline").make_context("pipeline", args[1:], parent=ctx)
