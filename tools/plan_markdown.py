"""Print the README's published-choice table (issue 11 §3): python tools/plan_markdown.py [-j 2]

``--only ID`` (repeatable) prints the rows of those runs alone, with their summary line;
``--runs PATH`` checks another runs file of the same schema (the held-out runs:
``--runs tpcalc/validation/heldout.yaml``, recipes newer than the shipped table's, never fitted).

For every published run tpcalc computes (tpcalc/validation/runs.yaml), the planner plans the same
model on the same GPUs, sequence and global batch; the table shows the published layout, the
planner's pick, both predicted step times, the published layout's rank, and whether the three
checks hold (feasible; top 10 or within 5% of the best; the pick at least as fast), with the
reason where they do not. Memory is priced with each row's stated memory options, FP8 primary
weights included (``tpcalc.reports.plan_published.published``), for the published layout and the
planner's candidates alike. It runs one plan per row (minutes for the whole table), so the test
suite checks a representative subset (tests/test_plan_published.py) and this tool the rest.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tpcalc.reports.plan_published import (
    Check,
    check,
    choice_text,
    engine_planner,
    gap_to,
    published_items,
    rank_in,
)


def _one(run_id: str, runs: Path | None = None) -> Check:
    items, _ = published_items({run_id}, runs)
    return check(
        items[0],
        engine_planner(),
        engine_planner(hold_published=True),
        engine_planner(complete=True),
    )


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1%}"


def _line(ch: Check) -> str:
    c = ch.item.case
    mine = ch.published_text()
    pick = choice_text(ch.pick.choices[0]) if ch.pick.choices else "none feasible"
    best = f"{ch.best_step_s:.2f}" if ch.best_step_s is not None else "–"
    rank = str(ch.rank) if ch.rank is not None else f">{ch.pick.top_k}"
    verdict = "hold" if ch.holds else "fail"
    held = "–"
    if ch.held is not None:
        held_rank = rank_in(ch.held, ch.published_step_s)
        where = str(held_rank) if held_rank is not None else f">{ch.held.top_k}"
        held = f"{where}, {_pct(gap_to(ch.held, ch.published_step_s))}"
        held += ", hold" if ch.holds_when_held else ", fail"
    return (
        f"| {c.id} | {c.gpus:,} | {mine} | {pick} | {ch.published_step_s:.2f} | {best} "
        f"| {_pct(ch.gap_ratio)} | {rank} | {verdict} | {held} | {ch.why()} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=1, help="processes (one plan each)")
    parser.add_argument(
        "--only", action="append", metavar="ID", help="just this run (repeatable): one row to paste"
    )
    parser.add_argument(
        "--runs",
        type=Path,
        metavar="PATH",
        help="a runs file in runs.yaml's schema instead of the shipped table, e.g. the held-out "
        "runs: --runs tpcalc/validation/heldout.yaml",
    )
    args = parser.parse_args()
    items, skipped = published_items(set(args.only) if args.only else None, args.runs)
    ids = [i.case.id for i in items]
    print(
        "| run | GPUs | published | planner's pick | published step (s) | best step (s) "
        "| published / best − 1 | rank | checks "
        "| ZeRO and overlaps held as published: rank, gap, checks "
        "| why not |"
    )
    print("|---|---:|---|---|---:|---:|---:|---:|---|---|---|")
    done: list[Check] = []
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        # rows print as they arrive, in table order
        for ch in pool.map(_one, ids, [args.runs] * len(ids)):
            done.append(ch)
            print(_line(ch), flush=True)
    held = sum(1 for ch in done if ch.holds)
    feasible = sum(1 for ch in done if ch.feasible)
    close = sum(1 for ch in done if ch.in_top_or_close)
    fast = sum(1 for ch in done if ch.pick_as_fast)
    asked = sum(1 for ch in done if ch.held is not None)
    pinned = sum(1 for ch in done if ch.holds_when_held)
    print(
        f"\n{len(done)} runs: {feasible} published layouts feasible in tpcalc, {close} in the "
        f"top 10 or within 5% of the best, {fast} with the pick at least as fast; all three "
        f"hold for {held}. Where check 2 fails and the pick changes the ZeRO stage or an "
        f"overlap ({asked} runs), the planner held to the run's stage and overlaps makes all "
        f"three hold for {pinned} more. Skipped: {len(skipped)} (" + "; ".join(skipped) + ")."
    )
    completed = [ch.item.case.id for ch in done if ch.completed is not None]
    if completed:
        print(
            f"\n\\* not printed by the source ({len(completed)} runs: {', '.join(completed)}): "
            "the published layout is completed with the planner's best over the unprinted "
            "choices, every printed one pinned (the row's `unstated` in its runs file)."
        )


if __name__ == "__main__":
    main()
