"""Four ways to split the FFN Y = f(X·A)·B over t cards, simulated and compared with one card.

Seed 000's verification bench (「小明把苹果给了小王」 as a 5 × 4 X, intermediate 16):
- naive: split the contraction dimension of X·A (rows of A), apply f to the partial sums, each
  card multiplies by the whole B, sum the outputs. Wrong: f is not additive.
- column → row (Megatron-LM, Shoeybi et al. 2019 §3): A by columns, f on each card's own
  columns, B by rows, one all-reduce of the output (g). Exact up to floating-point rounding.
- row-first: A by rows as in the naive scheme; correct only if the full intermediate is
  all-reduced *before* f (seed 003 §7.3.2). The "no sync" variant applies f first and sums
  afterwards: the same collectives in the wrong place, and wrong.
- column → column: A and B both by columns; f is local, but the second matmul needs the whole
  intermediate (all-gather) and the output columns must be gathered too.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
from msgspec import Struct

from tpcalc.verify.activations import activate
from tpcalc.verify.kinds import Activation, Scheme
from tpcalc.verify.sim import Cards, Phase, Role, Tally, column_slices, uneven_slices

# The running example of seed 000: 「小明把苹果给了小王」 as 5 tokens.
SENTENCE_TOKENS = ("小明", "把", "苹果", "给了", "小王")
TOY_HIDDEN = 4  # seed 000: "一个 5 × 4 的矩阵 X"
TOY_INTERMEDIATE = 16  # seed 000: "小规模对应验算台的 16 ÷ 2"
# A cell differs when |parallel - single| exceeds this; column → row stays near 1e-16.
DIFF_ATOL = 1e-12


SCHEME_LABELS: dict[Scheme, str] = {
    Scheme.naive: "A by rows (the contraction dim), f on partial sums, whole B, sum outputs",
    Scheme.column_row: "Megatron: A by columns, f local, B by rows, all-reduce the output (g)",
    Scheme.row_first_no_sync: "A by rows, f on partial sums, then sum: the sync comes too late",
    Scheme.row_first: "A by rows, all-reduce the full intermediate before f, B by rows",
    Scheme.column_column: "A and B by columns: all-gather the intermediate and the output",
}


class FfnProblem(Struct, frozen=True):
    """X [tokens, hidden], A [hidden, intermediate], B [intermediate, hidden]."""

    x: np.ndarray
    a: np.ndarray
    b: np.ndarray

    @property
    def hidden(self) -> int:
        return self.a.shape[0]

    @property
    def intermediate(self) -> int:
        return self.a.shape[1]


def sentence_x(hidden: int = TOY_HIDDEN) -> np.ndarray:
    """The sentence as a [5, hidden] matrix: each token's row is drawn from its own characters.

    Deterministic and independent of ``--seed`` (a new weight draw keeps the same sentence).
    """
    rows = [
        np.random.default_rng([ord(c) for c in token]).standard_normal(hidden)
        for token in SENTENCE_TOKENS
    ]
    return np.stack(rows)


def draw_problem(
    seed: int = 0, hidden: int = TOY_HIDDEN, intermediate: int = TOY_INTERMEDIATE
) -> FfnProblem:
    """The sentence X and a weight draw ("换一组权重" = another seed), scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((hidden, intermediate)) / np.sqrt(hidden)
    b = rng.standard_normal((intermediate, hidden)) / np.sqrt(intermediate)
    return FfnProblem(sentence_x(hidden), a, b)


def single_card(p: FfnProblem, act: Activation) -> tuple[np.ndarray, np.ndarray]:
    """The reference on one card: (Y, f(X·A))."""
    h = activate(p.x @ p.a, act)
    return h @ p.b, h


class SchemeRun(Struct, frozen=True):
    """What t cards end with under one scheme, the per-card partials, and the collectives used."""

    scheme: Scheme
    t: int
    output: np.ndarray
    partial_outputs: tuple[np.ndarray, ...]
    intermediate: np.ndarray  # the full f(X·A) as the cards have it (concatenated if split)
    card_preactivations: tuple[np.ndarray, ...]  # each card's part of X·A before f
    tally: Tally


def _naive(p: FfnProblem, cards: Cards, act: Activation) -> tuple:
    rows = uneven_slices(p.hidden, cards.t)
    z = [p.x[:, s] @ p.a[s, :] for s in rows]  # partial sums of X·A, full width
    h = [activate(zi, act) for zi in z]  # f on partial sums
    partial = [hi @ p.b for hi in h]  # every card holds the whole B
    y = cards.all_reduce(partial, phase=Phase.forward, role=Role.hidden, label="sum")
    return y[0], partial, sum(h[1:], h[0]), z


def _column_row(p: FfnProblem, cards: Cards, act: Activation) -> tuple:
    cols = column_slices(p.intermediate, cards.t, what="intermediate_size")
    z = [p.x @ p.a[:, s] for s in cols]
    h = [activate(zi, act) for zi in z]  # f on whole columns: no communication
    partial = [hi @ p.b[s, :] for hi, s in zip(h, cols, strict=True)]
    y = cards.all_reduce(partial, phase=Phase.forward, role=Role.hidden, label="g")
    return y[0], partial, np.concatenate(h, axis=-1), z


def _row_first(p: FfnProblem, cards: Cards, act: Activation, *, sync: bool) -> tuple:
    rows = uneven_slices(p.hidden, cards.t)
    z = [p.x[:, s] @ p.a[s, :] for s in rows]  # partial sums of X·A, full width
    if sync:  # sum first, then f: correct
        full = cards.all_reduce(
            z, phase=Phase.forward, role=Role.intermediate, label="before the nonlinearity"
        )
        h = [activate(zi, act) for zi in full]
    else:  # f first, then sum: too late
        h = cards.all_reduce(
            [activate(zi, act) for zi in z],
            phase=Phase.forward,
            role=Role.intermediate,
            label="after the nonlinearity",
        )
    cols = column_slices(p.intermediate, cards.t, what="intermediate_size")
    partial = [hi[:, s] @ p.b[s, :] for hi, s in zip(h, cols, strict=True)]  # B by rows
    y = cards.all_reduce(partial, phase=Phase.forward, role=Role.hidden, label="sum")
    return y[0], partial, h[0], z


def _column_column(p: FfnProblem, cards: Cards, act: Activation) -> tuple:
    cols = column_slices(p.intermediate, cards.t, what="intermediate_size")
    z = [p.x @ p.a[:, s] for s in cols]
    h_local = [activate(zi, act) for zi in z]
    h = cards.all_gather(h_local, phase=Phase.forward, role=Role.intermediate, label="")
    out_cols = uneven_slices(p.hidden, cards.t)
    partial = [hi @ p.b[:, s] for hi, s in zip(h, out_cols, strict=True)]  # B by columns
    y = cards.all_gather(partial, phase=Phase.forward, role=Role.hidden, label="")
    return y[0], partial, h[0], z


_RUNNERS: dict[Scheme, Callable[[FfnProblem, Cards, Activation], tuple]] = {
    Scheme.naive: _naive,
    Scheme.column_row: _column_row,
    Scheme.row_first_no_sync: lambda p, c, a: _row_first(p, c, a, sync=False),
    Scheme.row_first: lambda p, c, a: _row_first(p, c, a, sync=True),
    Scheme.column_column: _column_column,
}


def run_scheme(scheme: Scheme, p: FfnProblem, t: int, act: Activation) -> SchemeRun:
    """Simulate ``scheme`` on t cards. t must divide the intermediate size."""
    cards = Cards(t)
    column_slices(p.intermediate, t, what="intermediate_size")  # same error for every scheme
    output, partial, intermediate, z = _RUNNERS[scheme](p, cards, act)
    return SchemeRun(scheme, t, output, tuple(partial), intermediate, tuple(z), cards.tally)


class Diff(Struct, frozen=True):
    """Element-wise comparison with the single-card result."""

    max_abs_diff: float  # an int for integer arrays (seed 003 stays exact)
    cells: tuple[tuple[int, int], ...]  # [row, col], 0-based, where |diff| > atol

    @property
    def matches(self) -> bool:
        return not self.cells

    def cells_json(self) -> str:
        return json.dumps([list(c) for c in self.cells], separators=(",", ":"))


def compare(got: np.ndarray, want: np.ndarray, atol: float = DIFF_ATOL) -> Diff:
    """Max |got - want| and the [row, col] cells where it exceeds ``atol`` (0 for integers)."""
    got2, want2 = np.atleast_2d(got), np.atleast_2d(want)
    diff = np.abs(got2 - want2)
    cells = tuple((int(r), int(c)) for r, c in np.argwhere(diff > atol))
    return Diff(diff.max().item() if diff.size else 0, cells)
