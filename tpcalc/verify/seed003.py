"""Seed 003 §7.3.2–7.3.3, the two-card hand example, recomputed in exact integers (int64).

Inputs are the book's: X = [2, 1], W1 (2 × 4), ReLU, W2 (4 × 2), dY = [1, −1], t = 2. Every
result below comes from the same simulated schemes and f/g operators as the float64 bench;
ReLU and matrix products keep int64 arrays integer, so equality is exact (difference 0).
"""

from __future__ import annotations

import json

import numpy as np
from msgspec import Struct

from tpcalc.calc.links.collectives import Collective
from tpcalc.terms import Report, Row, Scalar, Unit, term
from tpcalc.verify.activations import Activation, activate
from tpcalc.verify.backward import mlp_backward, mlp_forward, mlp_single
from tpcalc.verify.schemes import Diff, FfnProblem, Scheme, compare, run_scheme
from tpcalc.verify.sim import Cards, Phase, Tally

# seed 003 §7.3.2 「代入数字」 and §7.3.3 「设输出的梯度为 dY = [1, −1]」: the example's inputs.
SEED003_X = ((2, 1),)
SEED003_W1 = ((1, 0, -1, 2), (0, 1, 1, -1))
SEED003_W2 = ((1, 0), (2, 1), (0, 1), (1, -1))
SEED003_DY = ((1, -1),)
SEED003_CARDS = 2
SEED003_ACTIVATION = Activation.relu


def seed003_problem() -> FfnProblem:
    def arr(rows: tuple) -> np.ndarray:
        return np.array(rows, dtype=np.int64)

    return FfnProblem(arr(SEED003_X), arr(SEED003_W1), arr(SEED003_W2))


class Seed003Result(Struct, frozen=True):
    """Every number of the hand example, as computed."""

    y_single: np.ndarray  # ReLU(X·W1)·W2
    pre_single: np.ndarray  # X·W1
    h_single: np.ndarray  # ReLU(X·W1): the correct intermediate
    card_y: tuple[np.ndarray, ...]  # column → row: each card's partial output
    y_column_row: np.ndarray  # after the all-reduce
    column_row: Diff
    row_first_card_pre: tuple[np.ndarray, ...]  # row-first: each card's X_i·W1_i
    row_first_no_sync: np.ndarray  # ReLU on each card, then summed
    row_first_error: Diff  # against the correct intermediate
    row_first_synced: np.ndarray  # summed, then ReLU
    dx_single: np.ndarray
    card_dh: tuple[np.ndarray, ...]  # each card's gradient after ReLU'
    card_dx: tuple[np.ndarray, ...]  # each card's contribution to dX
    dx_tp: np.ndarray  # after f's backward all-reduce
    backward: Diff
    tally: Tally  # forward + backward collectives of the column → row MLP


def seed003_example() -> Seed003Result:
    """Recompute seed 003 §7.3.2–7.3.3 on two simulated cards, in integers."""
    p = seed003_problem()
    dy = np.array(SEED003_DY, dtype=np.int64)
    act, t = SEED003_ACTIVATION, SEED003_CARDS
    single = mlp_single(p, p.x, dy, act)
    pre = p.x @ p.a
    h_single = activate(pre, act)

    col_row = run_scheme(Scheme.column_row, p, t, act)
    no_sync = run_scheme(Scheme.row_first_no_sync, p, t, act)
    synced = run_scheme(Scheme.row_first, p, t, act)

    cards = Cards(t)
    fwd = mlp_forward(p, p.x, act, cards)
    grad = mlp_backward(p, fwd, dy, act, cards)
    return Seed003Result(
        y_single=single.y,
        pre_single=pre,
        h_single=h_single,
        card_y=col_row.partial_outputs,
        y_column_row=col_row.output,
        column_row=compare(col_row.output, single.y),
        row_first_card_pre=no_sync.card_preactivations,
        row_first_no_sync=no_sync.intermediate,
        row_first_error=compare(no_sync.intermediate, h_single),
        row_first_synced=synced.intermediate,
        dx_single=single.dx,
        card_dh=grad.card_dh,
        card_dx=grad.card_dx,
        dx_tp=grad.dx,
        backward=compare(grad.dx, single.dx),
        tally=cards.tally,
    )


def _vec(a: np.ndarray | tuple[tuple[int, ...], ...]) -> str:
    """A one-row integer array as the book prints it: [7, -2]."""
    return json.dumps(np.asarray(a).ravel().tolist())


def _row(step: str, value: np.ndarray, diff: Diff | None = None, **extra: Scalar) -> Row:
    terms = [term("vector", "value", _vec(value), Unit.text)]
    if diff is not None:
        terms += [
            term("matches", "= reference", diff.matches, Unit.text),
            term("max_abs_diff", "max |diff|", diff.max_abs_diff, Unit.count),
            term("differing_cells", "differing (row,col)", diff.cells_json(), Unit.text),
        ]
    terms += [term(k, k.replace("_", " "), v, Unit.count) for k, v in extra.items()]
    return Row(inputs={"example": "seed003", "step": step}, terms=tuple(terms))


def seed003_report() -> Report:
    """Seed 003 §7.3.2–7.3.3 step by step, every vector recomputed on two simulated cards."""
    r = seed003_example()
    fwd = r.tally.count(Collective.all_reduce, Phase.forward)
    bwd = r.tally.count(Collective.all_reduce, Phase.backward)
    off = ", ".join(str(c + 1) for _, c in r.row_first_error.cells)
    rows = [
        _row("1 card: X·W1", r.pre_single),
        _row("1 card: ReLU(X·W1)·W2", r.y_single),
        *(
            _row(f"column → row, card {i}: ReLU(X·W1_{i})·W2_{i}", y)
            for i, y in enumerate(r.card_y)
        ),
        _row("column → row, all-reduce of the partials (g)", r.y_column_row, r.column_row),
        *(
            _row(f"row-first, card {i}: X_{i}·W1_{i} (a partial sum)", z)
            for i, z in enumerate(r.row_first_card_pre)
        ),
        _row(
            "row-first, ReLU on each card then sum (vs ReLU(X·W1))",
            r.row_first_no_sync,
            r.row_first_error,
        ),
        _row(
            "row-first, sum then ReLU (all-reduce before ReLU)",
            r.row_first_synced,
            compare(r.row_first_synced, r.h_single),
        ),
        _row("1 card backward: dX", r.dx_single),
        *(
            row
            for i, (dh, dx) in enumerate(zip(r.card_dh, r.card_dx, strict=True))
            for row in (
                _row(f"card {i}: (dY·W2_{i}ᵀ) ⊙ ReLU'(X·W1_{i})", dh),
                _row(f"card {i}: that times W1_{i}ᵀ (its part of dX)", dx),
            )
        ),
        _row(
            "dX after f's backward all-reduce",
            r.dx_tp,
            r.backward,
            forward_all_reduce_count=fwd,
            backward_all_reduce_count=bwd,
        ),
    ]
    return Report(
        title="Seed 003 §7.3.2–7.3.3: the two-card hand example in exact integers",
        rows=tuple(rows),
        notes=(
            f"X = {_vec(SEED003_X)}, W1 = {json.dumps(SEED003_W1)}, ReLU, "
            f"W2 = {json.dumps(SEED003_W2)}, dY = {_vec(SEED003_DY)}; card i holds W1's "
            "columns and W2's rows of block i (column → row) or X's and W1's rows (row-first).",
            f"Row-first without the sync is wrong in cells {off} (1-based), as the book says.",
            f"The two-card MLP used {fwd} forward and {bwd} backward all-reduce (g and f), "
            "counted by the simulation.",
        ),
    )
