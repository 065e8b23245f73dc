"""Fit the end-to-end constants of one card's step-time model to measured runs, and say which.

The per-operation model takes every efficiency from public kernel-level measurements (the card's
``performance`` block). What kernel benchmarks cannot see is left to at most two constants per
card, each fitted here on a fixed, named subset of the validation table (a rule, not a choice of
rows by their errors); every other row stays held out. Nothing is fitted per row.

- ``compute_scale`` multiplies every GEMM and attention efficiency (sustained clocks under
  training load, SMs lent to overlapped communication, FP8 scaling bookkeeping); fitted on the
  card's dense rows of FIT_ROWS.
- ``moe_layer_overhead_s`` is a fixed cost per MoE layer and pass (router, the host sync on
  tokens per expert, many small kernels); fitted afterwards, with compute_scale fixed, on the
  card's MoE rows of MOE_FIT_ROWS. ``--write`` records beside it the least and most tokens per
  micro-batch on one rank (s·b/cp) of those rows, ``moe_fit_tokens``: a per-layer constant is
  measured at those sizes only, and ``tpcalc plan`` says when its best layout goes beyond them.

    python tools/fit_time.py --hardware h100-sxm            # fit, print the rows used
    python tools/fit_time.py --hardware h100-sxm --write    # and write them into its config
    python tools/fit_time.py --hardware h100-sxm --gaps     # what each MoE row lacks (below)

The objective is the mean |log(predicted / measured)| of tokens/s/GPU, minimised on a grid.

``--gaps`` is the audit behind the MoE constant: for every MoE row of the card it prices the step
with no MoE overhead (compute_scale as configured) and prints the time the model lacks against
the measured step, as a share of that step and spread over the MoE layer-passes (forward and
backward of each MoE layer of the bottleneck stage, every micro-batch), per routed token copy
and per local expert. A physical per-layer cost would show one value per card in the per-pass
column, a per-token cost one value in the per-copy column, a per-expert cost one value in the
last; docs/kernel-measurements.md §6 reads the table.

Two what-ifs behind docs/kernel-measurements.md §7 (neither changes the shipped constants):
``--gaps --unfused-sinks`` prices the attention-sink models (GPT-OSS) with their scores
materialised, the fallback Transformer Engine takes without cuDNN 9.13.1; ``--exclude-sinks``
fits the MoE constant without them (a kernel tpcalc cannot price from a public measurement),
and ``--errors`` prints every MoE row's error under the constants just fitted.

``--in-sample`` is a bound, not a fit: the MoE constant that minimises the mean |error| over every
MoE row of the card (all of them, so nothing is held out), the least any per-layer constant can
reach on the shipped table (docs/kernel-measurements.md §6).
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from msgspec.structs import replace

from tpcalc.calc.pipeline.schedule import rank_layers
from tpcalc.calc.time.step import split_of, step_time
from tpcalc.catalog import configs_root, load_hardware, load_model
from tpcalc.reports.validate_time import Case, case_of, load_runs, recipe_options

# Dense rows: the Megatron-Bridge 25.11 release's dense rows of the card.
FIT_ROWS: dict[str, tuple[str, ...]] = {
    "h100-sxm": ("mbridge-25.11-llama3-*-h100-sxm-*",),
    "b200": ("mbridge-25.11-llama3-*-b200-*",),
    "gb200": ("mbridge-25.11-llama3-*-gb200-*",),
}
# MoE rows: the newest Megatron-Bridge release's (26.04.01) MoE rows of the card.
MOE_FIT_ROWS: dict[str, tuple[str, ...]] = {
    "h100-sxm": ("mbridge-26.04.01-*-h100-sxm-*",),
    "b200": ("mbridge-26.04.01-*-b200-*",),
    "gb200": ("mbridge-26.04.01-*-gb200-*",),
}
# The fitted MoE overhead is paid in the forward and in the backward of each MoE layer
# (calc/time/step.py: the constant is added to F and to B).
PASSES_WITH_OVERHEAD = 2
SCALES = [0.50 + 0.005 * i for i in range(101)]  # 0.50 .. 1.00
OVERHEADS_S = [0.00005 * i for i in range(121)]  # 0 .. 6 ms


def _cases(hardware: str, patterns: tuple[str, ...], kind: str, runs: Path | None) -> list[Case]:
    chosen = []
    for row in load_runs(runs):
        if row["hardware"] != hardware or row["kind"] != kind:
            continue
        if not any(fnmatch.fnmatch(row["id"], p) for p in patterns):
            continue
        case = case_of(row)
        if isinstance(case, Case) and case.measured_tokens_per_s_per_gpu:
            chosen.append(case)
    return chosen


def _card(hw, **values: float):
    perf = hw.performance
    fitted = perf.fitted
    for name, value in values.items():
        entry = getattr(fitted, name).model_copy(update={"value": value})
        fitted = fitted.model_copy(update={name: entry})
    return hw.model_copy(update={"performance": perf.model_copy(update={"fitted": fitted})})


def _objective(cases: list[Case], card) -> float:
    total = 0.0
    for c in cases:
        st = step_time(load_model(c.model), card, c.layout, c.run, c.options)
        total += abs(math.log(st.tokens_per_s_per_gpu / c.measured_tokens_per_s_per_gpu))
    return total / len(cases)


def _sinks(case: Case) -> bool:
    return load_model(case.model).attention_sinks


def fit(
    hardware: str, runs: Path | None = None, *, exclude_sinks: bool = False
) -> dict[str, tuple[float, float, list[str]]]:
    """{constant: (value, objective, row ids)} for ``hardware``; ``exclude_sinks`` leaves the
    attention-sink models out of the MoE fit rows (module docstring)."""
    hw = load_hardware(hardware)
    dense = _cases(hardware, FIT_ROWS[hardware], "dense", runs)
    if not dense:
        raise SystemExit(f"no computable dense fit rows for {hardware}: {FIT_ROWS[hardware]}")
    obj, scale = min((_objective(dense, _card(hw, compute_scale=s)), s) for s in SCALES)
    out = {"compute_scale": (scale, obj, [c.id for c in dense])}
    moe = _cases(hardware, MOE_FIT_ROWS[hardware], "moe", runs)
    if exclude_sinks:
        moe = [c for c in moe if not _sinks(c)]
    if moe and hw.performance.fitted.moe_layer_overhead_s is not None:
        base = _card(hw, compute_scale=scale)
        obj, over = min(
            (_objective(moe, _card(base, moe_layer_overhead_s=o)), o) for o in OVERHEADS_S
        )
        out["moe_layer_overhead_s"] = (over, obj, [c.id for c in moe])
    return out


def fit_tokens(hardware: str, runs: Path | None = None) -> tuple[int, int] | None:
    """(least, most) tokens per micro-batch on one rank, s·b/cp, of the card's MoE fit rows:
    the range the per-layer MoE constant has seen (``fitted.moe_fit_tokens``)."""
    moe = _cases(hardware, MOE_FIT_ROWS[hardware], "moe", runs)
    tokens = [c.run.seq * c.run.micro_batch // c.layout.cp for c in moe]
    return (min(tokens), max(tokens)) if tokens else None


@dataclass(frozen=True)
class Gap:
    """What the model without MoE overhead lacks on one MoE row (``--gaps``)."""

    id: str
    predicted_step_s: float  # no MoE overhead
    measured_step_s: float  # tokens per step per GPU / measured tokens/s/GPU
    moe_layer_passes: int  # MoE layers of the bottleneck stage x micro-batches x (F, B)
    routed_copies: int  # token copies one rank dispatches per MoE layer and micro-batch
    local_experts: int
    cuda_graphs: bool  # the recipe replays the MoE router / preprocessing from CUDA graphs

    @property
    def missing_s(self) -> float:
        return self.measured_step_s - self.predicted_step_s

    @property
    def per_pass_s(self) -> float:
        return self.missing_s / self.moe_layer_passes


def gaps(hardware: str, runs: Path | None = None, *, unfused_sinks: bool = False) -> list[Gap]:
    """Gap of every computable MoE row of ``hardware`` with the MoE overhead set to zero;
    ``unfused_sinks`` prices attention sinks with the scores materialised."""
    card = _card(load_hardware(hardware), moe_layer_overhead_s=0.0)
    out = []
    for row in load_runs(runs):
        if row["hardware"] != hardware or row["kind"] != "moe":
            continue
        c = case_of(row)
        if not isinstance(c, Case) or not c.measured_tokens_per_s_per_gpu:
            continue
        spec = load_model(c.model)
        o = c.options
        if unfused_sinks and spec.attention_sinks:
            o = replace(o, fused_sinks=False)
        st = step_time(spec, card, c.layout, c.run, o)
        n = spec.num_hidden_layers
        split = rank_layers(n, c.layout.pp, c.run.vpp, split_of(o, n, c.layout.pp, c.run.vpp))
        moe_layers = sum(1 for i in split[st.bottleneck_stage] if spec.is_moe_layer(i))
        last = spec.num_hidden_layers - 1
        if st.bottleneck_stage == c.layout.pp - 1 and c.run.memory.mtp and spec.is_moe_layer(last):
            moe_layers += spec.mtp_layers  # each MTP module's FFN is an MoE layer (step.py)
        tokens = c.run.seq * c.run.micro_batch // c.layout.cp // c.layout.tp
        graphs = recipe_options(row).get("cuda_graph_impl") is not None
        out.append(
            Gap(
                id=c.id,
                predicted_step_s=st.step_time_s,
                measured_step_s=st.tokens_per_step / c.gpus / c.measured_tokens_per_s_per_gpu,
                moe_layer_passes=moe_layers * c.run.microbatches * PASSES_WITH_OVERHEAD,
                routed_copies=tokens * (spec.num_experts_per_tok or 1),
                local_experts=(spec.n_routed_experts or 1) // c.layout.ep,
                cuda_graphs=graphs,
            )  # fmt: skip
        )
    return out


def _print_gaps(hardware: str, rows: list[Gap]) -> None:
    print(f"{hardware}: MoE rows priced with no MoE overhead; missing = measured - predicted step")
    print(
        f"{'row':<58} {'graphs':>6} {'missing':>8} {'share':>6} {'per pass':>9} "
        f"{'per copy':>9} {'per expert':>10}"
    )
    for g in rows:
        print(
            f"{g.id:<58} {'yes' if g.cuda_graphs else 'no':>6} {g.missing_s:>7.2f}s "
            f"{g.missing_s / g.predicted_step_s:>+6.0%} {g.per_pass_s * 1e3:>7.2f}ms "
            f"{g.per_pass_s / g.routed_copies * 1e9:>7.1f}ns "
            f"{g.per_pass_s / g.local_experts * 1e3:>8.3f}ms"
        )


def moe_errors(
    hardware: str, constants: dict[str, float], runs: Path | None = None
) -> list[tuple[str, float]]:
    """(row id, predicted / measured − 1) of every computable MoE row of ``hardware`` under
    ``constants`` (the fitted values to try)."""
    card = _card(load_hardware(hardware), **constants)
    out = []
    for c in _cases(hardware, ("*",), "moe", runs):
        st = step_time(load_model(c.model), card, c.layout, c.run, c.options)
        out.append((c.id, st.tokens_per_s_per_gpu / c.measured_tokens_per_s_per_gpu - 1))
    return out


def in_sample(hardware: str, runs: Path | None = None) -> tuple[float, float, int]:
    """(constant, mean |error|, rows): the MoE constant of ``OVERHEADS_S`` with the least mean
    |predicted / measured − 1| over every MoE row of ``hardware`` (``--in-sample``)."""
    best = (math.inf, 0.0, 0)
    for over in OVERHEADS_S:
        errors = moe_errors(hardware, {"moe_layer_overhead_s": over}, runs)
        mean = sum(abs(e) for _, e in errors) / len(errors)
        best = min(best, (mean, over, len(errors)))
    return best[1], best[0], best[2]


def _write(
    hardware: str, fitted: dict[str, tuple[float, float, list[str]]],
    tokens: tuple[int, int] | None = None,
) -> Path:  # fmt: skip
    path = Path(str(configs_root())) / "hardware" / f"{hardware}.yaml"
    text = path.read_text(encoding="utf-8")
    block = "  fitted:\n"
    for name, (value, _, rows) in fitted.items():
        block += (
            f"    {name}:\n      value: {value:.6g}\n      source: >-\n"
            f"        tools/fit_time.py on {len(rows)} rows: {', '.join(rows)}\n"
        )
    if tokens is not None and "moe_layer_overhead_s" in fitted:
        block += (
            f"    moe_fit_tokens:\n      low: {tokens[0]}\n      high: {tokens[1]}\n"
            "      source: >-\n        tools/fit_time.py: seq · micro-batch / cp of the rows "
            "moe_layer_overhead_s was fitted on\n"
        )
    new, n = re.subn(r"  fitted:\n(?:    .*\n|      .*\n|        .*\n)*", block, text)
    if n != 1:
        raise SystemExit(f"{path}: no 'fitted:' block under performance to replace")
    path.write_text(new, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--hardware", required=True, choices=sorted(FIT_ROWS))
    parser.add_argument("--runs", type=Path, default=None, help="runs YAML (default: shipped)")
    parser.add_argument("--write", action="store_true", help="write the constants into the config")
    parser.add_argument(
        "--gaps", action="store_true", help="print what each MoE row lacks with no MoE overhead"
    )
    parser.add_argument(
        "--unfused-sinks", action="store_true", help="--gaps: price attention sinks unfused"
    )
    parser.add_argument(
        "--exclude-sinks", action="store_true", help="fit the MoE constant without sink models"
    )
    parser.add_argument(
        "--errors", action="store_true", help="print every MoE row's error under the fit"
    )
    parser.add_argument(
        "--in-sample",
        action="store_true",
        help="the MoE constant best over every MoE row of the card (a bound, not a fit)",
    )
    args = parser.parse_args(argv)
    if args.in_sample:
        over, mean, n = in_sample(args.hardware, args.runs)
        print(
            f"{args.hardware}: in sample, moe_layer_overhead_s {over:.6g} gives the least MoE "
            f"mean |error|, {mean:.1%} over {n} rows"
        )
        return 0
    if args.gaps:
        _print_gaps(args.hardware, gaps(args.hardware, args.runs, unfused_sinks=args.unfused_sinks))
        return 0
    if args.write and args.exclude_sinks:
        parser.error("--exclude-sinks is a what-if; --write keeps the shipped rule")
    fitted = fit(args.hardware, args.runs, exclude_sinks=args.exclude_sinks)
    for name, (value, obj, rows) in fitted.items():
        print(
            f"{args.hardware}: {name} {value:.6g} (mean |log error| {obj:.4f} on {len(rows)} rows)"
        )
        for r in rows:
            print(f"  {r}")
    if args.errors:
        errors = moe_errors(args.hardware, {k: v[0] for k, v in fitted.items()}, args.runs)
        for row, err in errors:
            print(f"  {row:<58} {err:+.1%}")
        mean = sum(abs(e) for _, e in errors) / len(errors)
        print(f"{args.hardware}: MoE mean |error| {mean:.1%} over {len(errors)} rows")
    if args.write:
        print(f"wrote {_write(args.hardware, fitted, fit_tokens(args.hardware, args.runs))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
