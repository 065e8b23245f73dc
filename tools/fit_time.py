"""Fit the end-to-end constants of one card's step-time model to measured runs, and say which.

The per-operation model takes every efficiency from public kernel-level measurements (the card's
``performance`` block). What kernel benchmarks cannot see (sustained clocks under training load,
kernel launch gaps, stream contention) is left to at most three constants per card, fitted here
on a fixed, named subset of the validation table; the other rows stay held out. Nothing is fitted
per row.

    python tools/fit_time.py --hardware h100-sxm            # fit on the card's FIT_ROWS, print
    python tools/fit_time.py --hardware h100-sxm --write    # and write them into its config

The one constant fitted today: ``compute_scale``, which multiplies every GEMM and attention
efficiency. The objective is the mean |log(predicted / measured)| of tokens/s/GPU over the fit
rows, minimised on a grid of 0.005 steps.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import re
import sys
from pathlib import Path

from tpcalc.calc.time.step import step_time
from tpcalc.catalog import configs_root, load_hardware, load_model
from tpcalc.reports.validate_time import Case, case_of, load_runs

# The rows each card's constants are fitted on (glob patterns over row ids). Chosen by a rule,
# not by their errors: the newest Megatron-Bridge release's dense rows for that card.
FIT_ROWS: dict[str, tuple[str, ...]] = {
    "h100-sxm": ("mbridge-25.11-llama3-*-h100-sxm-*",),
    "b200": ("mbridge-25.11-llama3-*-b200-*",),
    "gb200": ("mbridge-25.11-llama3-*-gb200-*",),
}
SCALES = [0.50 + 0.005 * i for i in range(101)]  # 0.50 .. 1.00


def _cases(hardware: str, patterns: tuple[str, ...], runs: Path | None) -> list[Case]:
    chosen = []
    for row in load_runs(runs):
        if row["hardware"] != hardware:
            continue
        if not any(fnmatch.fnmatch(row["id"], p) for p in patterns):
            continue
        case = case_of(row)
        if isinstance(case, Case) and case.measured_tokens_per_s_per_gpu:
            chosen.append(case)
    return chosen


def _objective(cases: list[Case], hw, scale: float) -> float:
    perf = hw.performance
    fitted = perf.fitted.model_copy(
        update={"compute_scale": perf.fitted.compute_scale.model_copy(update={"value": scale})}
    )
    card = hw.model_copy(update={"performance": perf.model_copy(update={"fitted": fitted})})
    total = 0.0
    for c in cases:
        st = step_time(load_model(c.model), card, c.layout, c.run, c.options)
        total += abs(math.log(st.tokens_per_s_per_gpu / c.measured_tokens_per_s_per_gpu))
    return total / len(cases)


def fit(hardware: str, runs: Path | None = None) -> tuple[float, float, list[str]]:
    """(compute_scale, objective, row ids) for ``hardware``."""
    hw = load_hardware(hardware)
    cases = _cases(hardware, FIT_ROWS[hardware], runs)
    if not cases:
        raise SystemExit(f"no computable fit rows for {hardware}: {FIT_ROWS[hardware]}")
    obj, scale = min((_objective(cases, hw, scale), scale) for scale in SCALES)
    return scale, obj, [c.id for c in cases]


def _write(hardware: str, scale: float, rows: list[str]) -> Path:
    path = Path(str(configs_root())) / "hardware" / f"{hardware}.yaml"
    text = path.read_text(encoding="utf-8")
    used = ", ".join(rows)
    block = (
        "  fitted:\n"
        "    compute_scale:\n"
        f"      value: {scale:.3f}\n"
        f"      source: >-\n        tools/fit_time.py on {len(rows)} rows: {used}\n"
    )
    new, n = re.subn(r"  fitted:\n(?:    .*\n|      .*\n|        .*\n)*", block, text)
    if n != 1:
        raise SystemExit(f"{path}: no 'fitted:' block under performance to replace")
    path.write_text(new, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hardware", required=True, choices=sorted(FIT_ROWS))
    parser.add_argument("--runs", type=Path, default=None, help="runs YAML (default: shipped)")
    parser.add_argument("--write", action="store_true", help="write the constants into the config")
    args = parser.parse_args(argv)
    scale, obj, rows = fit(args.hardware, args.runs)
    print(f"{args.hardware}: compute_scale {scale:.3f}")
    print(f"mean |log error| on the fit rows {obj:.4f}; rows used ({len(rows)}):")
    for r in rows:
        print(f"  {r}")
    if args.write:
        print(f"wrote {_write(args.hardware, scale, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
