"""Published layouts fit (issue 10 §4): each entry of tpcalc/validation/layouts.yaml, priced with
the options its source states, fits its card; the margin is reported."""

from __future__ import annotations

import json

import pytest

from tpcalc.calc.params.counts import active_params, embedding_params, total_params
from tpcalc.catalog import load_model
from tpcalc.reports.validate_memory import price_published, published_layouts

ENTRIES = published_layouts()


def test_the_file_holds_every_layout_the_issue_names():
    names = {e.name for e in ENTRIES}
    assert {
        "deepseek-v3-2048xh800", "bridge-deepseek-v3-1024xh100",
        "bridge-qwen3-235b-a22b-256xh100", "bridge-qwen3-30b-a3b-16xh100",
        "bridge-llama31-405b-1024xh100", "bridge-gpt-oss-120b-64xh100",
        "llama3-405b-16384xh100-8k", "llama3-405b-16384xh100-131k",
    } <= names  # fmt: skip
    for e in ENTRIES:
        lay = e.layout
        assert e.source and e.options_source
        world = lay.tp * lay.cp * lay.pp * lay.dp
        assert world in (16, 64, 256, 1024, 2048, 16384)  # the GPU counts the sources state


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_published_layout_fits_with_margin(entry):
    total = price_published(entry).rows[-1]
    card, mem = total.value("card_memory_bytes"), total.value("memory_bytes_per_rank")
    parts = sum(total.value(k) for k in ("dense_states_bytes", "expert_states_bytes",
                                         "activation_bytes", "recompute_working_bytes",
                                         "buffer_bytes"))  # fmt: skip
    assert mem == pytest.approx(parts, rel=1e-12)
    assert total.value("memory_fits") is True
    assert total.value("memory_free_bytes") == pytest.approx(card - mem, rel=1e-12)
    assert total.value("memory_free_bytes") > 0


def test_validate_memory_cli_one_row_each(cli):
    res = cli("validate", "--memory", "-f", "json")
    assert res.code == 0
    rows = json.loads(res.out)
    assert [r["layout"] for r in rows] == [e.name for e in ENTRIES]
    for r in rows:
        assert r["fits"] if "fits" in r else r["memory_fits"]
        assert r["memory_bytes_per_rank"] == pytest.approx(
            r["states_bytes"]
            + r["activation_bytes"]
            + r["recompute_working_bytes"]
            + r["buffer_bytes"],
            rel=1e-12,
        )
    bare = cli("validate", "--hardware", "h100-sxm", "--format", "json")  # step time, the default
    assert bare.code == 0 and all(
        "predicted_tokens_per_s_per_gpu" in r for r in json.loads(bare.out)
    )


@pytest.mark.parametrize(
    ("name", "total", "active_no_embedding"),
    [
        # model cards: Qwen3-30B-A3B 30.5B (3.3B active), Qwen3-235B-A22B 235B (22B active),
        # gpt-oss-120b 116.83B total and 5.13B active (arXiv 2508.10925 Table 1)
        ("qwen3-30b-a3b", 30_532_122_624, 3.0e9),
        ("qwen3-235b-a22b", 235_093_634_560, 21.6e9),
        ("gpt-oss-120b", 116_829_156_672, 5.13e9),
    ],
)
def test_new_model_configs_match_published_totals(name, total, active_no_embedding):
    spec = load_model(name)
    assert total_params(spec) == total
    active = active_params(spec) - embedding_params(spec)
    assert abs(active - active_no_embedding) / active_no_embedding < 0.02
