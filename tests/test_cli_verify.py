"""tpcalc verify on the command line: every format, JSON content, one-line errors, lazy numpy."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from tests.conftest import CliResult, run_cli
from tests.golden import expected


def _registered() -> bool:
    from tpcalc.cli import app

    return any(
        g.typer_instance.registered_commands[0].callback.__name__ == "verify"
        for g in app.registered_groups
        if g.typer_instance.registered_commands
    )


@pytest.fixture
def vcli():
    """``tpcalc verify ...`` through the real entry point once the command is registered;
    until then through a parent app holding only tpcalc.cli.verify (same options, same emit)."""
    if _registered():
        return run_cli

    import typer
    from typer.testing import CliRunner

    from tpcalc.cli import verify

    parent = typer.Typer()
    parent.callback()(lambda: None)
    parent.add_typer(verify.app)

    def run(*args: str) -> CliResult:
        r = CliRunner().invoke(parent, list(args))
        return CliResult(r.exit_code, r.stdout, r.stderr)

    return run


ARGS = [
    ["verify"],
    ["verify", "--cards", "4", "--activation", "gelu", "--seed", "7"],
    ["verify", "-m", "llama3-70b", "-t", "8", "-s", "8192"],
    ["verify", "--example", "seed003"],
]
IDS = ["default", "cards4-gelu", "llama", "seed003"]


@pytest.mark.parametrize("args", ARGS, ids=IDS)
def test_table(vcli, args):
    r = vcli(*args)
    assert r.code == 0, r.err
    assert "┃" in r.out and "Traceback" not in r.err


def test_table_has_one_section_per_check(vcli):
    out = vcli("verify").out
    for title in ("scheme by scheme", "All-gather of the intermediate", "Backward", "Attention"):
        assert title in out


@pytest.mark.parametrize("args", ARGS, ids=IDS)
def test_json_is_a_list_of_flat_objects(vcli, args):
    r = vcli(*args, "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert isinstance(rows, list) and rows
    for row in rows:
        assert all(not isinstance(v, dict | list) for v in row.values())


@pytest.mark.parametrize("args", ARGS, ids=IDS)
def test_csv_has_the_json_rows(vcli, args):
    r = vcli(*args, "--format", "csv")
    assert r.code == 0, r.err
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert len(rows) == len(json.loads(vcli(*args, "-f", "json").out))


def test_json_carries_every_scheme_difference_cells_and_tally(vcli):
    rows = json.loads(vcli("verify", "--cards", "4", "-f", "json").out)
    ffn = {r["case"]: r for r in rows if r["check"] == "ffn"}
    assert set(ffn) == {"naive", "column-row", "row-first-no-sync", "row-first", "column-column"}
    for r in ffn.values():
        assert {"max_abs_diff", "differing_cells", "collectives", "all_reduce_count"} <= set(r)
        assert isinstance(json.loads(r["differing_cells"]), list)
        assert r["t"] == 4
    assert ffn["naive"]["max_abs_diff"] > 1e-3 and ffn["column-row"]["max_abs_diff"] < 1e-12
    (cmp,) = [r for r in rows if r["check"] == "comparison"]
    # seed 000: 3.4× in message size; 1.7× in ring bytes per rank (q-allgather-vs-ar)
    assert expected("q-allgather-vs-ar").matches(cmp["message_ratio"])
    assert abs(cmp["ring_ratio"] - 1.7) <= 0.05


def test_seed003_json_is_exact(vcli):
    rows = json.loads(vcli("verify", "--example", "seed003", "-f", "json").out)
    vectors = [json.loads(r["vector"]) for r in rows]
    # seed 003 §7.3.2–7.3.3
    for vector in ([7, -2], [4, 1], [3, -3], [2, 1, 1, 4], [2, 1, 0, 3], [5, -1], [4, -2]):
        assert vector in vectors


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cards", "3"], "Error: --cards=3 does not divide --intermediate=16: use one of"),
        (["--cards", "5", "--intermediate", "12"], "Error: --cards=5 does not divide"),
        (["--seed", "-2"], "Error: --seed must be a non-negative integer"),
        (["-m", "no-such-model"], "Error: unknown model 'no-such-model'"),
    ],
)
def test_bad_input_exits_1_with_one_line(vcli, args, message):
    r = vcli("verify", *args, "-f", "json")
    assert r.code == 1
    assert r.out == ""
    assert r.err.startswith(message) and r.err.count("\n") == 1


def test_unknown_activation_is_a_usage_error(vcli):
    r = vcli("verify", "--activation", "tanh")
    assert r.code == 2 and "Traceback" not in r.err


def test_importing_the_command_does_not_load_numpy():
    code = "import sys, tpcalc.cli.verify; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_numpy_is_one_line(vcli, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a)
    )
    r = vcli("verify")
    message = "tpcalc verify needs numpy, a core dependency: reinstall tpcalc (pip install .)"
    assert r.code == 1 and r.err == f"Error: {message}\n"
