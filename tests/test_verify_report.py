"""verify_report: every scheme's difference, cells and tally; seed 000's comparison figures."""

from __future__ import annotations

import json

import pytest

from tests.golden import expected
from tpcalc.errors import DivisibilityError, InputError
from tpcalc.reports.request import Workload
from tpcalc.verify.kinds import Activation, Scheme
from tpcalc.verify.report import sections
from tpcalc.verify.report import verify_report as verify_workload

WORKLOAD_FIELDS = ("seq", "micro_batch", "dtype")


def verify_report(model, **kwargs):
    """``verify_report`` of ``model`` on the default card; seq, micro_batch and dtype go to
    the ``Workload`` as the CLI puts them."""
    given = {k: kwargs.pop(k) for k in WORKLOAD_FIELDS if k in kwargs}
    return verify_workload(Workload.load(model, "h100-sxm", **given), **kwargs)


@pytest.fixture(scope="module")
def report():
    return verify_report("qwen3.8")  # defaults: 2 cards, relu, seed 0, t = 8, s = 4096


def _rows(report, check):
    return [r.flat() for r in report.rows if r.inputs["check"] == check]


def test_every_scheme_row_carries_difference_cells_and_tally(report):
    rows = {r["case"]: r for r in _rows(report, "ffn")}
    assert list(rows) == [s.value for s in Scheme]
    for r in rows.values():
        cells = json.loads(r["differing_cells"])
        assert len(cells) == r["differing_cells_count"]
        assert all(len(c) == 2 for c in cells)
        assert r["matches_single_card"] is (cells == [])
        assert isinstance(r["max_abs_diff"], float)
        assert r["all_reduce_count"] + r["all_gather_count"] >= 1
    assert rows["naive"]["max_abs_diff"] > 1e-3 and rows["naive"]["differing_cells_count"] == 20
    assert rows["column-row"]["max_abs_diff"] < 1e-12
    assert rows["row-first"]["all_reduce_count"] == 2
    assert rows["column-column"]["all_gather_count"] == 2


def test_column_row_all_reduce_is_seed_000s_73_4_mb(report):
    r = next(r for r in _rows(report, "ffn") if r["case"] == "column-row")
    # seed 000 §代价: 4,096 × 5,120 × 2 B per all-reduce, ring at t = 8 → 73.4 MB per card
    assert expected("q-tp-ar-card").matches(r["model_ring_send_bytes_per_rank"])
    assert r["model_message_bytes"] == 4096 * 5120 * 2
    assert r["model_t"] == 8 and r["seq"] == 4096 and r["model"] == "qwen3.8"


def test_all_gather_vs_all_reduce_both_conventions(report):
    (r,) = _rows(report, "comparison")
    # seed 000 常见误解之二: 3.4× (message sizes, 17,408 / 5,120)
    assert expected("q-allgather-vs-ar").matches(r["message_ratio"])
    # seed-figures q-allgather-vs-ar note: 1.7× in ring bytes each card sends
    assert abs(r["ring_ratio"] - 1.7) <= 0.05
    assert r["all_gather_intermediate_message_bytes"] == 4096 * 17408 * 2


def test_ring_ratio_does_not_depend_on_t():
    rep = verify_report("qwen3.8", tp="2,4,8")
    ratios = [r["ring_ratio"] for r in _rows(rep, "comparison")]
    assert len(ratios) == 3 and max(ratios) - min(ratios) < 1e-12


def test_backward_rows_count_two_plus_two_per_layer(report):
    rows = {r["case"]: r for r in _rows(report, "backward")}
    assert set(rows) == {"mlp", "attention", "layer"}
    for block in ("mlp", "attention"):
        assert rows[block]["forward_all_reduce_count"] == 1
        assert rows[block]["backward_all_reduce_count"] == 1
    assert rows["layer"]["forward_all_reduce_count"] == 2
    assert rows["layer"]["backward_all_reduce_count"] == 2
    assert all(r["matches_single_card"] for r in rows.values())


def test_attention_rows_at_toy_and_model_t(report):
    rows = {r["t"]: r for r in _rows(report, "attention")}
    assert set(rows) == {2, 8}
    assert rows[8]["kv_replication"] == 2 and rows[8]["q_heads_per_card"] == 3
    assert rows[2]["kv_replication"] == 1
    assert all(r["matches_single_card"] for r in rows.values())


def test_changing_cards_changes_the_counted_bytes():
    def toy_ring(cards):
        rep = verify_report("qwen3.8", cards=cards)
        return next(r for r in _rows(rep, "ffn") if r["case"] == "column-row")[
            "toy_ring_send_bytes_per_rank"
        ]

    # one float64 [5, 4] all-reduce: 2(t-1)/t × 160 B
    assert toy_ring(2) == pytest.approx(160) and toy_ring(4) == pytest.approx(240)
    one = verify_report("qwen3.8", cards=1)
    assert all(r["all_reduce_count"] == 0 for r in _rows(one, "ffn"))
    assert _rows(one, "comparison") == [] and one.warnings


def test_heads_that_do_not_split_warn_instead_of_failing():
    rep = verify_report("qwen3.8", cards=16)  # 16 divides 16 but not 24 heads
    assert {r["t"] for r in _rows(rep, "attention")} == {8}
    assert any("t=16" in w for w in rep.warnings)


def test_activation_and_seed_are_echoed():
    rep = verify_report("qwen3.8", activation=Activation.gelu, seed=7, cards=4)
    r = rep.rows[0].flat()
    assert (r["activation"], r["seed"], r["t"]) == ("gelu", 7, 4)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cards": 3}, DivisibilityError, "--cards=3 does not divide --intermediate=16"),
        ({"cards": 0}, InputError, "--cards must be a positive integer"),
        ({"intermediate": 0}, InputError, "--intermediate must be a positive integer"),
        ({"seed": -1}, InputError, "--seed must be a non-negative integer"),
        ({"seq": 0}, InputError, "--seq must be a positive integer"),
    ],
)
def test_bad_inputs_raise_one_line(kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        verify_report("qwen3.8", **kwargs)
    assert "\n" not in str(info.value)


def test_sections_split_by_check_and_keep_every_row(report):
    parts = sections(report)
    assert [p.rows[0].inputs["check"] for p in parts] == [
        "ffn",
        "comparison",
        "backward",
        "attention",
    ]
    assert sum(len(p.rows) for p in parts) == len(report.rows)
    assert parts[0].notes == report.notes and not parts[1].notes
    for p in parts:
        assert all(not row.check_breakdowns() for row in p.rows)
