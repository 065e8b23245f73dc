"""Print the README's validation table from `tpcalc validate` (python tools/validation_markdown.py).

One row per published run the step-time model computes: measured and predicted tokens/s/GPU
and the error; the rows that fitted a card's constants are marked, from the card's config.
"""

from __future__ import annotations

from tpcalc.catalog import load_hardware
from tpcalc.reports.validate_time import layout_text, load_runs, outcomes


def fitted_rows() -> dict[str, str]:
    marks: dict[str, str] = {}
    for name in ("h100-sxm", "b200", "gb200"):
        fitted = load_hardware(name).performance.fitted
        for label, entry in (("scale", fitted.compute_scale), ("moe", fitted.moe_layer_overhead_s)):
            if entry is None:
                continue
            for row_id in entry.source.split("rows: ", 1)[-1].split(", "):
                marks[row_id.strip()] = label
    return marks


def main() -> None:
    done, _ = outcomes(load_runs())
    marks = fitted_rows()
    print("| run | kind | dtype | GPUs | layout | measured | predicted | error | fit |")
    print("|---|---|---|---:|---|---:|---:|---:|---|")
    for o in done:
        c, st = o.case, o.step
        measured = c.measured_tokens_per_s_per_gpu
        err = f"{o.error:+.1%}" if o.error is not None else "–"
        meas = f"{measured:,.0f}" if measured else "–"
        print(
            f"| {c.id} | {c.kind} | {c.dtype.value} | {c.gpus:,} | {layout_text(c)} | {meas} "
            f"| {st.tokens_per_s_per_gpu:,.0f} | {err} | {marks.get(c.id, '')} |"
        )


if __name__ == "__main__":
    main()
