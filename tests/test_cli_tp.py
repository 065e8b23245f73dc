"""CLI contract for comm / memory / flops / hardware: every format, exit codes, one-line errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.golden import expected

COMMANDS = [
    ["comm", "--model", "llama3-70b", "-t", "8"],
    ["memory", "--seq", "4096"],
    ["flops", "-m", "llama3-70b", "-s", "8192", "-t", "1,8", "--params", "all"],
    ["hardware"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_table(cli, args):
    r = cli(*args)
    assert r.code == 0, r.err
    assert "┃" in r.out and "Traceback" not in r.err


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_json_is_a_list_of_flat_objects(cli, args):
    r = cli(*args, "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert isinstance(rows, list) and rows
    for row in rows:
        assert all(not isinstance(v, dict | list) for v in row.values())


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_csv_has_the_json_columns(cli, args):
    r = cli(*args, "--format", "csv")
    assert r.code == 0, r.err
    rows = list(csv.DictReader(io.StringIO(r.out)))
    js = json.loads(cli(*args, "-f", "json").out)
    assert len(rows) == len(js)
    assert list(rows[0]) == list(js[0])


def test_comm_json_echoes_inputs_and_base_units(cli):
    rows = json.loads(cli("comm", "-m", "llama3-70b", "-t", "1,2,4,8", "-f", "json").out)
    assert [r["t"] for r in rows] == [1, 2, 4, 8]
    r8 = rows[-1]
    assert r8["model"] == "llama3-70b" and r8["seq"] == 8192 and r8["hardware"] == "h100-sxm"
    # seed 003 §7.3.5: 75.2 GB per step, raw bytes in JSON
    assert expected("l-ar-step").matches(r8["send_bytes_per_step"])


def test_default_t_sweeps_powers_of_two_to_a_node(cli):
    rows = json.loads(cli("comm", "-f", "json").out)
    assert [r["t"] for r in rows] == [1, 2, 4, 8]
    assert rows[0]["model"] == "qwen3.8" and rows[0]["seq"] == 4096


def test_explain_prints_formula_source_and_numbers(cli):
    r = cli("comm", "-m", "llama3-70b", "-t", "8", "--no-sp", "--explain")
    assert "send_bytes_per_allreduce = 2(t-1)/t · M" in r.out
    assert "with t=8, M=134,217,728" in r.out
    assert "source: Patarasuk & Yuan 2009" in r.out


def test_explain_json_stays_json(cli):
    rows = json.loads(cli("comm", "-t", "8", "-f", "json", "--explain").out)
    assert rows[0]["explain"]["send_bytes_per_step"]["formula"]


def test_units_gib(cli):
    r = cli("memory", "-m", "llama3-70b", "-t", "8", "--units", "GiB")
    assert "GiB" in r.out


def test_kv_replication_is_a_warning_not_an_error(cli):
    r = cli("comm", "-m", "qwen3.8", "-t", "8", "-f", "json")
    assert r.code == 0
    json.loads(r.out)
    assert "replicated on 2 ranks" in r.err


BAD = [
    (["comm", "--model", "no-such-model"], 1, "unknown model 'no-such-model'"),
    (["comm", "--model", "llama3-7b"], 1, "did you mean"),
    (["comm", "--hardware", "h1000"], 1, "unknown hardware 'h1000'"),
    (["comm", "-t", "0"], 1, "--tp must be a positive integer, got 0"),
    (["comm", "-t", "-4"], 1, "--tp must be a positive integer"),
    (["comm", "-m", "llama3-70b", "-t", "3"], 1, "use t in 1, 2, 4, 8"),
    (["memory", "--seq", "-1"], 1, "--seq must be a positive integer, got -1"),
    (["memory", "--seq", "0"], 1, "--seq must be a positive integer"),
    (["memory", "-b", "0"], 1, "--micro-batch must be a positive integer"),
    (["flops", "--seq", str(10**30)], 1, "beyond any real run"),
    (["comm", "--format", "xml"], 2, "'xml' is not one of"),
    (["comm", "--bogus"], 2, "No such option"),
    (["nosuch"], 2, "No such command"),
]


@pytest.mark.parametrize(("args", "code", "text"), BAD, ids=lambda x: str(x))
def test_bad_input_is_one_line(cli, args, code, text):
    for fmt in ("table", "json"):
        r = (
            cli(*args, "--format", fmt)
            if args[0] != "nosuch" and "--format" not in args
            else cli(*args)
        )
        assert r.code == code, (r.out, r.err)
        assert r.out == ""
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), r.err
        assert text in lines[0]
        assert "Traceback" not in r.err


def test_huge_but_valid_values_stay_finite(cli):
    r = cli("comm", "-m", "llama3-405b", "-t", "8", "-s", str(10**9), "-b", "1000", "-f", "json")
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    assert row["send_bytes_per_step"] > 0


def test_every_command_has_help(cli):
    import typer.main

    from tpcalc.cli import app

    group = typer.main.get_command(app)
    for name in group.commands:  # type: ignore[attr-defined]
        r = cli(name, "--help")
        assert r.code == 0 and "Usage:" in r.out and "Example" in r.out, name


def test_bare_tpcalc_prints_help(cli):
    r = cli()
    assert r.code == 0 and "Commands" in r.out


def test_missing_option_value_points_at_the_command_help(cli):
    r = cli("comm", "-t")
    assert r.code == 2 and r.err.strip().endswith("(see 'tpcalc comm --help')")
