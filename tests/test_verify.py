"""The verification bench: schemes against one card, and collectives counted by the simulation."""

from __future__ import annotations

import numpy as np
import pytest

from tpcalc.calc.links.collectives import BytesConvention, Collective
from tpcalc.verify.activations import activate, activation_grad
from tpcalc.verify.kinds import Activation, Scheme
from tpcalc.verify.schemes import (
    DIFF_ATOL,
    compare,
    draw_problem,
    run_scheme,
    sentence_x,
    single_card,
)
from tpcalc.verify.sim import Cards, Phase, Role

SEEDS = range(20)  # issue 4: "for 20 different seeds"
TS = (2, 4)
WRONG = 1e-3  # issue 4: the naive scheme differs by more than this
EXACT = 1e-12  # issue 4: column → row stays below this (rounding only)


def _diff(scheme: Scheme, seed: int, t: int, act: Activation):
    p = draw_problem(seed)
    ref, _ = single_card(p, act)
    return compare(run_scheme(scheme, p, t, act).output, ref)


@pytest.mark.parametrize("act", list(Activation))
@pytest.mark.parametrize("t", TS)
def test_naive_is_wrong_for_every_seed(act, t):
    diffs = [_diff(Scheme.naive, s, t, act).max_abs_diff for s in SEEDS]
    assert min(diffs) > WRONG, diffs


@pytest.mark.parametrize("act", list(Activation))
@pytest.mark.parametrize("t", TS)
def test_column_row_is_exact_for_every_seed(act, t):
    diffs = [_diff(Scheme.column_row, s, t, act) for s in SEEDS]
    assert max(d.max_abs_diff for d in diffs) < EXACT
    assert all(d.matches and d.cells == () for d in diffs)


@pytest.mark.parametrize("act", list(Activation))
@pytest.mark.parametrize("t", TS)
def test_row_first_needs_the_sync_and_column_column_the_gathers(act, t):
    for s in SEEDS:
        assert _diff(Scheme.row_first_no_sync, s, t, act).max_abs_diff > WRONG
        assert _diff(Scheme.row_first, s, t, act).max_abs_diff < EXACT
        assert _diff(Scheme.column_column, s, t, act).max_abs_diff < EXACT


@pytest.mark.parametrize("t", [1, 2, 4, 8, 16])
def test_any_divisor_of_the_intermediate_works(t):
    p = draw_problem(3)
    ref, _ = single_card(p, Activation.silu)
    for scheme in (Scheme.column_row, Scheme.row_first, Scheme.column_column):
        assert compare(run_scheme(scheme, p, t, Activation.silu).output, ref).matches
    naive = compare(run_scheme(Scheme.naive, p, t, Activation.silu).output, ref)
    assert naive.matches == (t == 1)  # one card splits nothing


def test_t_must_divide_the_intermediate():
    from tpcalc.errors import DivisibilityError

    with pytest.raises(DivisibilityError, match="intermediate_size=16 is not divisible by t=3"):
        run_scheme(Scheme.column_row, draw_problem(0), 3, Activation.relu)


def test_differing_cells_are_the_cells_over_tolerance():
    got = np.zeros((5, 4))
    got[1, 2], got[4, 0], got[0, 0] = 0.5, -2.0, DIFF_ATOL / 2
    d = compare(got, np.zeros((5, 4)))
    assert d.cells == ((1, 2), (4, 0)) and d.max_abs_diff == 2.0
    assert d.cells_json() == "[[1,2],[4,0]]"


def test_naive_differs_in_every_cell_of_the_sentence():
    d = _diff(Scheme.naive, 0, 2, Activation.gelu)
    assert len(d.cells) == 5 * 4


def test_sentence_is_five_tokens_and_independent_of_the_seed():
    x = sentence_x()
    assert x.shape == (5, 4)  # seed 000: 5 tokens, a 5 × 4 matrix X
    assert np.array_equal(draw_problem(1).x, draw_problem(2).x)
    assert not np.array_equal(draw_problem(1).a, draw_problem(2).a)


# ---- the tally is what the simulated operations did ----


def test_all_reduce_sums_and_records_one_call_per_operation():
    cards = Cards(3)
    parts = [np.full((5, 4), float(i)) for i in range(3)]
    out = cards.all_reduce(parts, phase=Phase.forward, role=Role.hidden, label="x")
    assert all(np.array_equal(o, np.full((5, 4), 3.0)) for o in out)
    cards.all_gather(parts, phase=Phase.backward, role=Role.intermediate, label="y")
    calls = cards.tally.calls
    assert [c.op for c in calls] == [Collective.all_reduce, Collective.all_gather]
    assert calls[0].message_bytes == 5 * 4 * 8  # float64 [5, 4]
    assert calls[1].shape == (5, 12) and calls[1].phase is Phase.backward


def test_one_card_records_nothing():
    run = run_scheme(Scheme.column_column, draw_problem(0), 1, Activation.relu)
    assert run.tally.calls == []


def test_the_scheme_changes_the_tally():
    p = draw_problem(0)
    tallies = {s: run_scheme(s, p, 2, Activation.relu).tally for s in Scheme}
    assert [c.role for c in tallies[Scheme.column_row].calls] == [Role.hidden]
    assert tallies[Scheme.column_row].count(Collective.all_reduce) == 1
    assert [c.role for c in tallies[Scheme.row_first].calls] == [Role.intermediate, Role.hidden]
    assert tallies[Scheme.row_first_no_sync].count(Collective.all_reduce) == 2
    assert tallies[Scheme.column_column].count(Collective.all_gather) == 2
    assert tallies[Scheme.column_column].count(Collective.all_reduce) == 0
    # the no-sync variant moves the same bytes as the fix; only the position differs
    assert tallies[Scheme.row_first_no_sync].select(role=Role.intermediate)[0].label != (
        tallies[Scheme.row_first].select(role=Role.intermediate)[0].label
    )


@pytest.mark.parametrize("t", [2, 4, 8])
def test_t_changes_the_ring_bytes_of_the_tally(t):
    call = run_scheme(Scheme.column_row, draw_problem(0), t, Activation.relu).tally.calls[0]
    assert call.n == t
    message = 5 * 4 * 8  # tokens × hidden × float64
    assert call.send_bytes_per_rank(BytesConvention.message) == message
    assert call.send_bytes_per_rank(BytesConvention.ring) == pytest.approx(
        2 * (t - 1) / t * message
    )


# ---- activations ----


@pytest.mark.parametrize("act", list(Activation))
def test_activation_grad_matches_finite_differences(act):
    z = np.linspace(-3, 3, 61) + 0.013  # off ReLU's kink at 0
    eps = 1e-6
    numeric = (activate(z + eps, act) - activate(z - eps, act)) / (2 * eps)
    assert np.max(np.abs(numeric - activation_grad(z, act))) < 1e-6


def test_gelu_and_silu_reference_points():
    z = np.array([1.0])
    # GELU(1) = Φ(1) = 0.8413447 (standard normal CDF); SiLU(1) = 1/(1+e^-1) = 0.7310586
    assert abs(activate(z, Activation.gelu)[0] - 0.8413447) < 1e-7
    assert abs(activate(z, Activation.silu)[0] - 0.7310586) < 1e-7
