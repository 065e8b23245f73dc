"""Print the README's held-out table from `tpcalc validate` (python tools/heldout_markdown.py).

One row per run of tpcalc/validation/heldout.yaml (Megatron-Bridge model verification cards,
the 26.08 performance summary's GB200 rows, the 26.06 one's GB200 and H100 rows, the NeMo
25.02-25.07 user guide's rows, Megatron-LM's 2021 A100 GPT scaling table and Korthikanti et
al. 2022's A100 iteration times, no row used by any fit): the card item, summary edition ("26.06
performance summary") or user-guide container ("NeMo 25.04 user guide"), GPUs, layout,
measured and predicted tokens/s/GPU and the error, then the mean |error| of the dense and of the
MoE rows. "same layout in runs.yaml" names
the performance-summary editions of the shipped rows of the same model, card and layout (any
dtype), marked "fit" where that row fitted a constant: a held-out measurement of a layout the
fit has seen.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tpcalc.catalog import load_hardware
from tpcalc.reports.validate_time import Case, layout_text, load_runs, mean_abs, outcomes

HELDOUT = Path(str(resources.files("tpcalc") / "validation" / "heldout.yaml"))


SUMMARY_PATH = "docs/performance-summary.md"


def source_of(row: dict) -> str:
    """`<model dir> <item>` of the card a row was read from, `<edition> performance summary`
    for a row of Megatron-Bridge's performance summary (container "NeMo 26.08" -> 26.08), or
    `<container> user guide` for a row of the NeMo Framework user guide's page."""
    src = row["source"]
    if src.get("repository") == "NVIDIA/Megatron-LM":  # the 2021 GPT scaling table
        return f"Megatron-LM README {src['date'][:4]} (Narayanan et al. Table 1)"
    if src.get("repository") == "calculon-ai/calculon":  # the paper's times, as transcribed
        return "Korthikanti et al. 2022 Table 4"
    if src["document"].startswith("DeepSeek-V3 Technical Report"):  # the report's own run
        return "DeepSeek-V3 report §1, §3.2"
    if "path" not in src:  # the NeMo Framework user guide's page (no repository)
        return f"{src['container']} user guide"
    if src["path"] == SUMMARY_PATH:
        return f"{src['container'].removeprefix('NeMo ')} performance summary"
    model_dir = src["path"].split("/")[-2]
    return f"{model_dir} `{src['item']}`"


def tokens(value: float) -> str:
    """Tokens/s/GPU to the printed precision's scale: whole above 100, else one decimal."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fitted_ids() -> set[str]:
    """Every runs.yaml row a card's constant was fitted on (named in its config's source)."""
    ids: set[str] = set()
    for name in ("h100-sxm", "b200", "gb200"):
        fitted = load_hardware(name).performance.fitted
        for entry in (fitted.compute_scale, fitted.moe_layer_overhead_s):
            if entry is not None:
                ids |= {i.strip() for i in entry.source.split("rows: ", 1)[-1].split(", ")}
    return ids


def same_layout(c: Case, shipped: list[Case], fitted: set[str]) -> str:
    key = (c.model, c.hardware, layout_text(c))
    hits = [s for s in shipped if (s.model, s.hardware, layout_text(s)) == key]
    # a summary row's edition (mbridge-26.04.01-...) is enough to find it in README's table
    names = [s.id.split("-")[1] if s.id.startswith("mbridge-") else s.id for s in hits]
    marks = [f"{n} (fit)" if s.id in fitted else n for n, s in zip(names, hits, strict=True)]
    return ", ".join(sorted(marks)) or "–"


def main() -> None:
    rows = load_runs(HELDOUT)
    by_id = {r["id"]: r for r in rows}
    done, skipped = outcomes(rows)
    shipped, _ = outcomes(load_runs())
    fitted = fitted_ids()
    print(
        "| run | source | GPUs | layout | measured | predicted | error | same layout in runs.yaml |"
    )
    print("|---|---|---:|---|---:|---:|---:|---|")
    for o in done:
        c = o.case
        err = f"{o.error:+.1%}" if o.error is not None else "–"
        meas = tokens(c.measured_tokens_per_s_per_gpu) if c.measured_tokens_per_s_per_gpu else "–"
        if c.measured_from != "as printed":
            meas += "†"
        twin = same_layout(c, [s.case for s in shipped], fitted)
        print(
            f"| {c.id} | {source_of(by_id[c.id])} | {c.gpus:,} | {layout_text(c)} | {meas} "
            f"| {tokens(o.step.tokens_per_s_per_gpu)} | {err} | {twin} |"
        )
    print()
    if any(o.case.measured_from != "as printed" for o in done):
        print(
            "† counted back from what the source prints: model TFLOP/s/GPU with its FLOP count "
            "(Narayanan et al. 2021 Eq. 3: `measured.flop_convention`), the iteration time "
            "(global batch × sequence / (time × GPUs)), or GPU hours per trillion tokens "
            "(10¹² / (hours × 3600 s))\n"
        )
    for kind in ("dense", "moe"):
        errors = [o.error for o in done if o.case.kind == kind and o.error is not None]
        if errors:
            print(f"- {kind}: {len(errors)} rows, mean |error| {mean_abs(errors):.1%}")
    for reason in skipped:
        print(f"- skipped {reason}")


if __name__ == "__main__":
    main()
