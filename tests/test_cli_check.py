"""tpcalc check via the real entry point: every format, JSON parses, errors exit 1, one line."""

from __future__ import annotations

import csv
import io
import json

import pytest


def records(result) -> list[dict]:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_summary_json_one_row_per_t(cli):
    data = records(cli("check", "-m", "qwen3.8", "-t", "4,8", "--format", "json"))
    assert [r["t"] for r in data] == [4, 8]
    # seed 000: 24 query heads -> 3 per card at t=8; FFN 17408 / 8 = 2176; 4 KV heads on 2 ranks
    t8 = data[1]
    assert t8["query_heads_per_rank"] == 3
    assert t8["ffn_intermediate_per_rank"] == 2176
    assert t8["kv_replicas"] == 2
    assert data[0]["kv_replicas"] == 1
    assert t8["model"] == "qwen3.8" and t8["vocab_pad_multiple"] == 128


def test_kv_replication_warning_goes_to_stderr(cli):
    result = cli("check", "-m", "qwen3.8", "-t", "8", "--format", "json")
    assert result.code == 0
    json.loads(result.out)  # stdout is only the JSON
    assert result.err.startswith("Warning: t=8: qwen3.8 has num_key_value_heads=4 < t")
    assert "replicated on 2 ranks" in result.err
    quiet = cli("check", "-m", "qwen3.8", "-t", "4", "--format", "json")
    assert quiet.err == ""


def test_shards_json_is_the_seed_003_table(cli):
    data = records(
        cli("check", "-m", "llama3-70b", "-t", "8", "--shards", "--vocab-pad-multiple", "1",
            "-f", "json")
    )  # fmt: skip
    shapes = {r["weight"]: [r["shard_rows"], r["shard_cols"]] for r in data}
    # seed 003 §7.3.4 (Llama 3 70B, t = 8)
    assert shapes["W_Q"] == [8192, 1024]
    assert shapes["W_K"] == shapes["W_V"] == [8192, 128]
    assert shapes["W_O"] == [1024, 8192]
    assert shapes["W_gate"] == shapes["W_up"] == [8192, 3584]
    assert shapes["W_down"] == [3584, 8192]
    assert shapes["embedding"] == [16032, 8192]
    assert all(isinstance(v, int | str) for r in data for v in r.values())  # flat JSON


def test_csv_has_the_json_columns(cli):
    args = ("check", "-m", "llama3-70b", "-t", "1,8")
    rows = list(csv.DictReader(io.StringIO(cli(*args, "-f", "csv").out)))
    data = records(cli(*args, "-f", "json"))
    assert list(rows[0]) == list(data[0])
    assert [int(r["vocab_rows_per_rank"]) for r in rows] == [r["vocab_rows_per_rank"] for r in data]
    # Megatron padding at t = 8: 128256 -> 129024 rows, 16128 per rank
    assert rows[1]["padded_vocab"] == "129024" and rows[1]["vocab_rows_per_rank"] == "16128"


def test_table_and_explain(cli):
    result = cli("check", "-m", "llama3-70b", "-t", "8", "--explain")
    assert result.code == 0, result.err
    assert "query heads per rank" in result.out
    assert "query_heads_per_rank = n_h / t" in result.out
    assert "largest t without KV replication: 8" in result.out  # seed 003 §7.3.4
    shards = cli("check", "-m", "llama3-70b", "-t", "8", "--shards")
    assert shards.code == 0 and "W_down" in shards.out


def test_default_tp_is_every_valid_t_up_to_8(cli):
    data = records(cli("check", "-m", "qwen3.8", "-f", "json"))
    assert [r["t"] for r in data] == [1, 2, 4, 8]


def test_mla_moe_model(cli):
    data = records(cli("check", "-m", "deepseek-v3", "-t", "8", "-f", "json"))
    assert data[0]["expert_ffn_per_rank"] == 2048 // 8
    assert "kv_replicas" not in data[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (("-m", "llama3-70b", "-t", "3"),
         "Error: num_attention_heads=64 is not divisible by t=3; "
         "use t in 1, 2, 4, 8, 16, 32, 64 for llama3-70b\n"),
        (("-m", "llama3-70b", "-t", "8,5"),
         "Error: num_attention_heads=64 is not divisible by t=5; "
         "use t in 1, 2, 4, 8, 16, 32, 64 for llama3-70b\n"),
        (("-m", "llama3-70b", "-t", "0"), "Error: --tp must be a positive integer, got 0\n"),
        (("-m", "llama3-70b", "--vocab-pad-multiple", "0"),
         "Error: vocab pad multiple=0 must be a positive integer (1 = no padding)\n"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_bad_input_exits_1_with_one_line(cli, args, message, fmt):
    result = cli("check", *args, "-f", fmt)
    assert result.code == 1
    assert result.out == ""
    assert result.err == message


def test_unknown_model_and_usage_errors(cli):
    unknown = cli("check", "-m", "no-such-model")
    assert unknown.code == 1 and unknown.err.count("\n") == 1 and "Traceback" not in unknown.err
    usage = cli("check", "--format", "xml")
    assert usage.code == 2 and usage.err.startswith("Error:")
    assert cli("check", "--help").code == 0
