"""The schedule simulator: idle time equals the closed-form bubbles behind seed 000's figures,
every pass waits for its predecessors, no stage runs two passes at once."""

from __future__ import annotations

import pytest

from tpcalc.calc.pipeline import schedule as pp
from tpcalc.calc.pipeline.schedule import EQUAL_TIMES, StageTimes
from tpcalc.calc.pipeline.timeline import Kind, Timeline, simulate
from tpcalc.choices import Schedule
from tpcalc.errors import InputError
from tpcalc.pictures.timeline import timeline_cells

SEED_P, SEED_M, SEED_V = 8, 32, 4  # seed 000 §流水线并行: p = 8, m = 32, interleaved v = 4
PRINTED = 0.0005  # shares print as 17.9%: agree to half the last printed digit
WIDE = 480  # columns enough for one cell per quantum of every seed case (interleaved: 405)
F, B, W = EQUAL_TIMES.forward_s, EQUAL_TIMES.backward_input_s, EQUAL_TIMES.backward_weight_s


def seed(schedule: Schedule, v: int = 1) -> Timeline:
    return simulate(schedule, SEED_P, SEED_M, v, F, B, W)


def idle_over_busy(tl: Timeline) -> float:
    return sum(tl.idle_s) / sum(tl.busy_s)


@pytest.mark.parametrize("schedule", [Schedule.one_f_one_b, Schedule.gpipe])
def test_seed_1f1b_and_gpipe(schedule):
    tl = seed(schedule)
    # seed 000: bubble (p-1)/m = 21.9% of compute, 17.9% of the step (Narayanan 2021 §2.2.1)
    assert abs(idle_over_busy(tl) - 0.219) <= PRINTED
    assert abs(tl.idle_share - 0.179) <= PRINTED
    assert tl.idle_share == pytest.approx(pp.bubble_share(schedule, SEED_P, SEED_M, EQUAL_TIMES))


def test_seed_interleaved():
    tl = seed(Schedule.interleaved, SEED_V)
    want = pp.bubble_share(Schedule.interleaved, SEED_P, SEED_M, EQUAL_TIMES, SEED_V)
    # seed 000: interleaved v = 4 divides the bubble by v, (p-1)/(m·v) = 5.5% of compute
    assert abs(idle_over_busy(tl) - 0.055) <= PRINTED
    assert tl.idle_share == pytest.approx(want)


def test_seed_zb_h1_is_a_third_of_1f1b():
    zb, ref = seed(Schedule.zb_h1), seed(Schedule.one_f_one_b)
    # seed 000; Qi et al. 2023 §3.1: with F = B = W, ZB-H1's bubble is 1/3 of 1F1B's
    for z, r in zip(zb.idle_s, ref.idle_s, strict=True):
        assert z == pytest.approx(r / 3)
    assert zb.idle_share == pytest.approx(
        pp.bubble_share(Schedule.zb_h1, SEED_P, SEED_M, EQUAL_TIMES)
    )


@pytest.mark.parametrize(
    ("schedule", "v"),
    [(Schedule.one_f_one_b, 1), (Schedule.gpipe, 1), (Schedule.interleaved, SEED_V),
     (Schedule.zb_h1, 1)],
)  # fmt: skip
def test_picture_idle_cells_equal_the_bubble(schedule, v):
    """The acceptance of issue 12 §5: the share of idle cells in the drawn timeline equals the
    bubble / step the table prints beside it, to the printed precision (and here exactly: the
    seed's F = B = W put every boundary on a whole cell)."""
    cells = timeline_cells(seed(schedule, v), WIDE)
    want = pp.bubble_share(schedule, SEED_P, SEED_M, EQUAL_TIMES, v)
    assert cells.exact
    assert f"{cells.idle_share:.1%}" == f"{want:.1%}"
    assert cells.idle_share == pytest.approx(want)


def test_dualpipe_closed_form_differs_from_its_published_order():
    """DualPipe: DeepSeek-V3 Table 2 prints (PP/2-1)(F&B + B - 3W) with B the full backward; with
    F = B = W and no overlap that is 3·(3 + 2 - 3) = 6 units per rank at p = 8. The order of
    deepseek-ai/DualPipe dualpipe.py (DualPipe.step, steps 1-8), run with F&B back to back and
    free communication, leaves 3 units idle per rank: the closed form is not what this order
    gives, so the picture prints both (tpcalc.pictures.show.SRC_DUALPIPE_GAP)."""
    tl = seed(Schedule.dualpipe)
    closed = pp.bubble_time_s(Schedule.dualpipe, SEED_P, SEED_M, EQUAL_TIMES)
    assert closed == 6
    assert tl.idle_s == pytest.approx((3.0,) * SEED_P)
    assert all(i <= closed for i in tl.idle_s)
    # every rank computes all m micro-batches once: m/2 in each direction
    for r in range(SEED_P):
        fwd = [e for e in tl.stage_events(r) if e.kind is Kind.forward]
        assert sorted(e.microbatch for e in fwd) == list(range(SEED_M))
        assert tl.busy_s[r] == pytest.approx(SEED_M * EQUAL_TIMES.full_s)


CASES = [
    (s, p, m, v, t)
    for s, v in [(Schedule.gpipe, 1), (Schedule.one_f_one_b, 1), (Schedule.zb_h1, 1),
                 (Schedule.interleaved, 2), (Schedule.interleaved, 3), (Schedule.dualpipe, 1)]
    for p, m in [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16)]
    for t in [(1.0, 1.0, 1.0), (1.0, 2.0, 0.5), (0.7, 1.3, 1.1)]
    if not (s is Schedule.interleaved and m % p)
]  # fmt: skip


def _path(tl: Timeline, stage: int, chunk: int) -> int:
    if tl.schedule is Schedule.interleaved:
        return chunk * tl.p + stage
    if tl.schedule is Schedule.dualpipe and chunk == 1:
        return tl.p - 1 - stage
    return stage


@pytest.mark.parametrize(("schedule", "p", "m", "v", "times"), CASES)
def test_dependencies_and_no_overlap(schedule, p, m, v, times):
    tl = simulate(schedule, p, m, v, *times)
    eps = 1e-12
    for r in range(p):  # one pass at a time per stage
        events = tl.stage_events(r)
        for a, b in zip(events, events[1:], strict=False):
            assert b.start_s >= a.end_s - eps
    by_pos = {}
    for e in tl.events:
        by_pos[(e.kind, e.microbatch, _path(tl, e.stage, e.chunk))] = e
    last = p * v - 1 if schedule is Schedule.interleaved else p - 1
    for e in tl.events:
        pos = _path(tl, e.stage, e.chunk)
        if e.kind is Kind.forward and pos > 0:  # the previous stage's forward has ended
            assert e.start_s >= by_pos[(Kind.forward, e.microbatch, pos - 1)].end_s - eps
        if e.kind in (Kind.backward, Kind.backward_input):
            before = by_pos[(Kind.forward, e.microbatch, pos)]
            assert e.start_s >= before.end_s - eps  # its own forward
            if pos < last:  # the next stage's backward has ended
                nxt = (
                    by_pos.get((Kind.backward, e.microbatch, pos + 1))
                    or by_pos[(Kind.backward_input, e.microbatch, pos + 1)]
                )
                assert e.start_s >= nxt.end_s - eps
        if e.kind is Kind.backward_weight:
            assert e.start_s >= by_pos[(Kind.backward_input, e.microbatch, pos)].end_s - eps
    # every stage computes m micro-batches through its chunks: busy = m·(F+B+W)
    assert tl.busy_s == pytest.approx((m * sum(times),) * p)


@pytest.mark.parametrize(("schedule", "p", "m", "v", "times"), CASES)
def test_idle_equals_the_closed_form(schedule, p, m, v, times):
    """GPipe, 1F1B, interleaved: always. ZB-H1: when W <= min(F, B), the regime of Qi et al.
    2023 §3.1 (F = B = W); otherwise the ramps are longer: the last stage waits (p-1)·F for its
    first forward and the first stage (p-1)·B for its last backward, so the order idles
    (p-1)·max(F, B, F+B-W). DualPipe: see the test above."""
    if schedule is Schedule.dualpipe:
        pytest.skip("DualPipe's Table 2 closed form is not its published order's idle time")
    f, b, w = times
    tl = simulate(schedule, p, m, v, *times)
    bubble = pp.bubble_time_s(schedule, p, m, StageTimes(f, b, w), v)
    if schedule is Schedule.zb_h1 and w > min(f, b):
        bubble = (p - 1) * max(f, b, f + b - w)
    assert tl.idle_s == pytest.approx((bubble,) * p)


def test_per_stage_times_make_the_slowest_stage_set_the_pace():
    tl = simulate(Schedule.one_f_one_b, 4, 8, 1, [1, 1, 2, 1], [1, 1, 2, 1], [1, 1, 2, 1])
    # the slow stage never idles in steady state; its busy time is m·(F+B+W) = 8·6
    assert tl.busy_s[2] == pytest.approx(48)
    assert tl.idle_share_per_stage[2] < min(tl.idle_share_per_stage[r] for r in (0, 1, 3))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((Schedule.interleaved, 4, 6, 2, 1, 1, 1), "divisible by pp"),
        ((Schedule.one_f_one_b, 4, 8, 1, [1, 1], 1, 1), "one per stage"),
        ((Schedule.one_f_one_b, 4, 8, 1, float("nan"), 1, 1), "non-negative"),
        ((Schedule.dualpipe, 4, 6, 1, 1, 1, 1), "DualPipe"),
    ],
)
def test_bad_input(args, match):
    with pytest.raises(InputError, match=match):
        simulate(*args)


HOP_S = 1e-5  # a send far shorter than any pass: the count of exposed sends, not their overlap
HOP_TIMES = [(1, 1, 1), (1, 2, 1), (1, 0.5, 0.5), (2, 3, 1), (1, 1, 2), (0.2, 1, 1)]


def _exposed_by_simulation(schedule: Schedule, p: int, m: int, v: int, times) -> float:
    """How many sends a step lengthens by: (makespan with hop_s − without) / hop_s."""
    free = simulate(schedule, p, m, v, *times).makespan_s
    return (simulate(schedule, p, m, v, *times, hop_s=HOP_S).makespan_s - free) / HOP_S


@pytest.mark.parametrize("times", HOP_TIMES)
@pytest.mark.parametrize(
    ("schedule", "v"),
    [(Schedule.gpipe, 1), (Schedule.one_f_one_b, 1), (Schedule.zb_h1, 1),
     (Schedule.interleaved, 2), (Schedule.interleaved, 3)],
)  # fmt: skip
def test_exposed_sends_are_what_the_simulated_order_waits_for(schedule, v, times):
    """pipeline.schedule.exposed_sends against the simulator with a send time on every
    cross-stage dependency, over p and m (m a multiple of p for interleaved): equal, and for
    ZB-H1 outside Qi et al. 2023 §3.1's regime (W ≤ min(F, B)) at most the count (its W
    passes then leave more slack)."""
    f, b, w = times
    for p in (2, 3, 4, 8):
        for m in range(p, 3 * p + 2):
            if schedule is Schedule.interleaved and m % p:
                continue
            got = _exposed_by_simulation(schedule, p, m, v, times)
            want = pp.exposed_sends(schedule, p, m, v)
            if schedule is Schedule.zb_h1 and w > min(f, b):
                assert got <= want + 1e-6, (p, m)
            else:
                assert got == pytest.approx(want, abs=1e-6), (p, m)


def test_1f1b_exposes_its_steady_state_and_interleaving_its_virtual_stages():
    """The two counts the step model uses most, at p = 8, m = 32 (seed 000's pipeline):
    1F1B waits on 2(p−1) fill and drain sends plus 2⌊(m−1)(p−1)/p⌋ = 54 in the steady state;
    interleaved (v = 4) on 2(p·v − 1) = 62, whatever m."""
    assert pp.exposed_sends(Schedule.one_f_one_b, 8, 32, 1) == 14 + 54
    assert pp.exposed_sends(Schedule.interleaved, 8, 32, 4) == 62
    assert pp.exposed_sends(Schedule.interleaved, 8, 64, 4) == 62
    assert pp.exposed_sends(Schedule.gpipe, 8, 32, 1) == 14
    assert pp.exposed_sends(Schedule.one_f_one_b, 1, 32, 1) == 0


def test_bad_hop():
    with pytest.raises(InputError, match="hop_s"):
        simulate(Schedule.one_f_one_b, 4, 8, 1, 1, 1, 1, hop_s=-1.0)
