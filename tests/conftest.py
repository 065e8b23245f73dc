"""Shared fixtures: built-in specs, and a CLI runner that goes through the real entry point."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

import pytest

from tpcalc.catalog import load_hardware, load_model


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> CliResult:
    """Run ``tpcalc ARGS`` through ``tpcalc.cli.main`` (the console script's function)."""
    from tpcalc.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def qwen38():
    return load_model("qwen3.8")


@pytest.fixture(scope="session")
def llama70b():
    return load_model("llama3-70b")


@pytest.fixture(scope="session")
def h100():
    return load_hardware("h100-sxm")


@pytest.fixture(scope="session")
def h800():
    return load_hardware("h800")
