"""Time the layout planner (issue 11 §2): one full search per case, with its phases.

Cases: issue 11's two targets, then the cost as the GPU count and the model depth grow.
- Llama 3 405B on 16,384 H100s, seq 8192, global batch 2048 sequences (Dubey et al. 2024
  Table 4: 16M tokens per step / 8,192 tokens); target ≤ 1 s.
- DeepSeek-V3 on 2,048 H800s with EP, seq 4096, global batch 15,360 sequences (DeepSeek-V3
  report §4.2: batch size raised to 15,360); target ≤ 2 s.
- Llama 3 8B on 64 H100s (batch 256); Llama 3 405B on 1,024 and 4,096 H100s; Llama 3 8B (32
  layers) and 70B (80) on 1,024.

Specs are loaded and the request is built outside the timer. Each line prints the layouts
enumerated, the feasible ones, the exact step-time evaluations, layouts per second
(enumerated / wall time), the CPU time of this process and of the forked second worker (a
large search runs part of its units (tp, cp) in a child, ``search.WORKERS``; the machine is
shared: wall time includes waiting), and each phase on a second search: enumerate +
divisibility + memory screen + the bounds of every candidate that fits
(``StepBounds.group``; a group slower than ``search.DEFER_IDEAL_STEPS`` by its CP ring alone
waits), unit by unit (wall, CPU here and in the child), then in CPU time: the floors put
together, the top-k branch-and-bound with the Pareto front (both list a block's candidates
only when its floor, the least bound of a cell, can still win; the deferred groups either
could draw on are bounded and both rerun, ``search._settled``), and pricing the reported
candidates; then how many blocks were listed and how many deferred groups were bounded later.

    python benchmarks/plan.py            # every case, once
    python benchmarks/plan.py --quick    # the two targets only
    python benchmarks/plan.py --workers 1 --only 405b  # one process, the 405B cases only

Wall-clock figures are noisy: run on a quiet machine and never gate a unit test on them
(benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from tpcalc.calc.plan import search as S
from tpcalc.calc.plan.request import build_request
from tpcalc.catalog import load_hardware, load_model

TOP_K = 10
TARGETS = [
    ("llama3-405b", "h100-sxm", 16384, 8192, 2048, 1.0),
    ("deepseek-v3", "h800", 2048, 4096, 15360, 2.0),
]
GROWTH = [
    ("llama3-8b", "h100-sxm", 64, 8192, 256, None),
    ("llama3-405b", "h100-sxm", 1024, 8192, 2048, None),
    ("llama3-405b", "h100-sxm", 4096, 8192, 2048, None),
    ("llama3-8b", "h100-sxm", 1024, 8192, 2048, None),
    ("llama3-70b", "h100-sxm", 1024, 8192, 2048, None),
]


def _child_cpu() -> float:
    """CPU time (user + system) of the waited-for children so far: the forked workers."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_case(model: str, hardware: str, gpus: int, seq: int, batch: int) -> dict[str, float]:
    """One full search, phase by phase, as ``search.plan`` runs it."""
    req = build_request(
        load_model(model), load_hardware(hardware), gpus=gpus, seq=seq, global_batch=batch,
        top_k=TOP_K,
    )  # fmt: skip
    clock = time.perf_counter
    t0, c0, k0 = clock(), time.process_time(), _child_cpu()
    result = S.plan(req)
    total, cpu, child = clock() - t0, time.process_time() - c0, _child_cpu() - k0
    # the phases, on a fresh search (the same work plan() does, timed apart)
    w0, k0 = clock(), _child_cpu()
    clock = time.process_time
    t0 = clock()
    s = S._Search(req, gpus)
    s.enumerate()
    t1 = clock()
    screen_wall, screen_child = time.perf_counter() - w0, _child_cpu() - k0
    s.prepare()
    t2 = clock()
    deferred = sum(g.deferred is not None for g in s.groups)
    ranked, front = S._settled(s, TOP_K)
    t3 = clock()
    for p in [p for _, p in ranked] + front:
        s.candidate(p)
    t4 = clock()
    bounded = np.isfinite(s.floors)  # blocks with a candidate bounded (the others never list)
    return {
        "total_s": total, "cpu_s": cpu, "child_s": child, "enumerated": result.enumerated,
        "feasible": result.feasible, "timed": result.timed_exactly, "screen_s": t1 - t0,
        "screen_wall_s": screen_wall, "screen_child_s": screen_child,
        "floors_s": t2 - t1, "settle_s": t3 - t2, "price_s": t4 - t3,
        "blocks": int(bounded.sum()), "built": int((s.expanded & bounded).sum()),
        "groups": len(s.groups),
        "deferred": deferred, "later": deferred - sum(g.deferred is not None for g in s.groups),
        "best_s": result.best.step_time_s if result.best else float("nan"),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the two targets only")
    parser.add_argument("--only", default="", help="the cases whose model name has this")
    parser.add_argument(
        "--workers", type=int, default=S.WORKERS, help="processes (search.WORKERS; 1: no fork)"
    )
    args = parser.parse_args()
    S.WORKERS = args.workers
    cases = TARGETS if args.quick else TARGETS + GROWTH
    for model, hw, gpus, seq, batch, target in cases:
        if args.only not in model:
            continue
        r = run_case(model, hw, gpus, seq, batch)
        goal = f" (target {target:g} s)" if target else ""
        print(
            f"{model} on {gpus:,} × {hw}, seq {seq}, batch {batch}: {r['total_s']:.2f} s "
            f"(CPU {r['cpu_s']:.2f} s + {r['child_s']:.2f} s in the child){goal}; "
            f"{r['enumerated']:,.0f} layouts ({r['enumerated'] / r['total_s']:,.0f}/s), "
            f"{r['feasible']:,.0f} feasible, {r['timed']:.0f} timed exactly; best step "
            f"{r['best_s']:.3f} s"
        )
        print(
            f"    phases: enumerate+screen+bounds {r['screen_wall_s']:.2f} s wall (CPU "
            f"{r['screen_s']:.2f} s + {r['screen_child_s']:.2f} s in the child); CPU: "
            f"floors {r['floors_s']:.2f} s, top-{TOP_K} and Pareto front {r['settle_s']:.2f} s, "
            f"pricing {r['price_s']:.2f} s; blocks listed {r['built']:,} of the "
            f"{r['blocks']:,} with a candidate bounded; "
            f"groups bounded later {r['later']:,} of the {r['deferred']:,} deferred (of "
            f"{r['groups']:,})"
        )


if __name__ == "__main__":
    main()
