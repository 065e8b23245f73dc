"""Time one full `layout` evaluation through the core, without loading configs or rendering.

The case is issue 8's: Llama 3 405B on 16,384 H100s, [TP, CP, PP, DP] = 8 × 1 × 16 × 128
(the Llama 3 report's 405B pre-training layout, Dubey et al. 2024 Table 4). The specs are loaded
once, outside the timer; each timed call checks, places and prices the layout exactly as
`tpcalc layout` does, into the typed ``LayoutPrice`` (``tpcalc.calc.layout.price.price_layout``,
no terms, no rendering); the report built from it (``tpcalc.reports.layout.price_report``:
labels, formulas, sources) and the per-operation step model (``tpcalc.calc.time.step.step_time``)
are timed too.

    python benchmarks/layout_eval.py            # 200 evaluations, median and minimum
    python benchmarks/layout_eval.py -n 1000

Wall-clock figures are noisy: run on a quiet machine, compare medians, and never gate a unit
test on them (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.catalog import load_hardware, load_model
from tpcalc.errors import InputError

MODEL = "llama3-405b"
HARDWARE = "h100-sxm"
# Dubey et al. 2024 (The Llama 3 Herd of Models) Table 4: 16,384 GPUs, TP 8, CP 1, PP 16, DP 128.
TP, CP, PP, DP = 8, 1, 16, 128
SEQ = 8192  # Table 4, the 8K-context stage
# ZeRO-1: Megatron's distributed optimizer shards the optimizer state over dp (Llama 3 §3.3.2).
MICROBATCHES = 16  # Table 4: batch 16M tokens / (8,192 tokens · dp 128) = 16 sequences per dp rank


def _timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """(median, minimum) seconds of ``runs`` calls of ``fn``, after one untimed warm-up."""
    fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), min(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=200, help="timed evaluations")
    args = parser.parse_args()

    spec, hw = load_model(MODEL), load_hardware(HARDWARE)
    layout = ParallelLayout(
        gpus_per_node=hw.gpus_per_node.value, tp=TP, cp=CP, pp=PP, dp=DP, zero=ZeroStage.optimizer
    )
    run = LayoutRun(seq=SEQ, microbatches=MICROBATCHES)

    from tpcalc.calc.layout.price import price_layout
    from tpcalc.reports.layout import price_report

    priced = price_layout(spec, hw, layout, run)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("price_layout (typed core: checks, placement, memory, comm, step, MFU)",
         lambda: price_layout(spec, hw, layout, run)),
        ("price_report (its rows: labels, formulas, sources; no rendering)",
         lambda: price_report(priced)),
    ]  # fmt: skip
    try:
        from tpcalc.calc.time.step import step_time
    except ImportError:
        pass
    else:
        cases.append(
            ("step_time (per-operation step model)", lambda: step_time(spec, hw, layout, run))
        )

    print(
        f"{MODEL} on {layout.world:,} × {HARDWARE}: tp {TP} cp {CP} pp {PP} dp {DP}, "
        f"{args.runs} runs"
    )
    for name, fn in cases:
        try:
            median, minimum = _timed(fn, args.runs)
        except InputError as e:  # e.g. a card without the step-time model's performance block
            print(f"  {name}: skipped ({e})")
            continue
        print(f"  {name}: median {median * 1e3:.3f} ms, min {minimum * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
