"""Seed 003 §7.3.2–7.3.3: the two-card hand example, exact in integers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tpcalc.verify.seed003 import seed003_example, seed003_report


@pytest.fixture(scope="module")
def ex():
    return seed003_example()


def _is(a, expected):
    arr = np.asarray(a)
    return arr.dtype.kind == "i" and arr.ravel().tolist() == expected


def test_forward_single_card(ex):
    assert _is(ex.pre_single, [2, 1, -1, 3])  # seed 003: X × W_1 = [2, 1, −1, 3]
    assert _is(ex.h_single, [2, 1, 0, 3])  # ReLU 后为 [2, 1, 0, 3]
    assert _is(ex.y_single, [7, -2])  # 乘 W_2 得 [7, −2]


def test_column_row_partials_and_all_reduce(ex):
    assert _is(ex.card_y[0], [4, 1])  # 卡 0: [4, 1]
    assert _is(ex.card_y[1], [3, -3])  # 卡 1: [3, −3]
    assert _is(ex.y_column_row, [7, -2])  # AllReduce 求和: [7, −2]
    assert ex.column_row.max_abs_diff == 0 and ex.column_row.matches


def test_row_first_error(ex):
    assert _is(ex.row_first_card_pre[0], [2, 0, -2, 4])  # 卡 0 得 [2, 0, −2, 4]
    assert _is(ex.row_first_card_pre[1], [0, 1, 1, -1])  # 卡 1 得 [0, 1, 1, −1]
    assert _is(ex.row_first_no_sync, [2, 1, 1, 4])  # 各自先过 ReLU 再相加
    assert _is(ex.row_first_synced, [2, 1, 0, 3])  # 正确值
    assert ex.row_first_error.cells == ((0, 2), (0, 3))  # 第 3、4 格出错 (1-based)


def test_backward_through_f(ex):
    assert _is(ex.dx_single, [5, -1])  # 单卡反向 dX = [5, −1]
    assert _is(ex.card_dh[0], [1, 1])  # 卡 0 算出自己那一路的 [1, 1]
    assert _is(ex.card_dh[1], [0, 2])  # 卡 1 算出 [0, 2]
    assert _is(ex.card_dx[0], [1, 1])  # 乘 W_1 前两列的转置得 [1, 1]
    assert _is(ex.card_dx[1], [4, -2])  # 乘后两列的转置得 [4, −2]
    assert _is(ex.dx_tp, [5, -1]) and ex.backward.max_abs_diff == 0
    assert [c.label for c in ex.tally.calls] == ["g mlp", "f mlp"]


def test_report_rows_carry_the_vectors():
    rows = [r.flat() for r in seed003_report().rows]
    by_step = {r["step"]: r for r in rows}
    no_sync = next(r for s, r in by_step.items() if s.startswith("row-first, ReLU on each"))
    assert json.loads(no_sync["vector"]) == [2, 1, 1, 4]
    assert json.loads(no_sync["differing_cells"]) == [[0, 2], [0, 3]]
    last = rows[-1]
    assert json.loads(last["vector"]) == [5, -1] and last["matches"] is True
    assert last["forward_all_reduce_count"] == 1 and last["backward_all_reduce_count"] == 1
