"""Published layouts against the card: the Python twin of ``tpcalc validate --memory``.

Each entry of ``tpcalc/validation/layouts.yaml`` (a published run with its source and the
options the source states) is priced by ``tpcalc.reports.layout.layout_report``; one row per
layout carries the most loaded rank's memory by part (model states, activations, buffers), the
card, the margin left and whether it fits.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tpcalc.calc.layout.memory import RANK_TOTAL_FORMULA
from tpcalc.choices import LossKernel
from tpcalc.errors import ConfigError
from tpcalc.terms import Report, Row, Term, Unit, term

LAYOUTS_FILE = "layouts.yaml"
SRC = "tpcalc/validation/layouts.yaml (each row's source) priced by tpcalc layout"


class PublishedSizes(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int = 1
    zero: int = 0


class PublishedRun(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    micro_batch: int = 1
    microbatches: int
    schedule: str = "1f1b"
    vpp: int = 1
    recipe: str = "zero16"
    sp: bool = True
    recompute: str = "none"
    recompute_modules: tuple[str, ...] = ()
    fp8_cache: bool = False
    moe_probs_in_act: bool = True  # Megatron-Core 0.13+ (MemoryTechniques)
    mtp: bool = True
    loss_kernel: LossKernel = LossKernel.fp32_copy


class PublishedLayout(BaseModel):
    """One published run: what it trains, on what, how it is split, and where that is said."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: str
    hardware: str
    layout: PublishedSizes
    run: PublishedRun
    source: str
    options_source: str = Field(min_length=1)


def published_layouts() -> list[PublishedLayout]:
    """The entries of layouts.yaml (yaml.safe_load; a malformed entry is a ConfigError)."""
    import yaml

    text = resources.files("tpcalc.validation").joinpath(LAYOUTS_FILE).read_text("utf-8")
    data = yaml.safe_load(text)
    try:
        return [PublishedLayout.model_validate(x) for x in data["layouts"]]
    except (ValidationError, KeyError, TypeError) as exc:
        raise ConfigError(f"{LAYOUTS_FILE}: {str(exc).splitlines()[0]}") from None


def price_published(entry: PublishedLayout) -> Report:
    """``tpcalc layout`` on one published entry, with every option its source states."""
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.choices import Recompute, Schedule, StateRecipe
    from tpcalc.reports.layout import layout_report
    from tpcalc.reports.request import Layout, Workload

    lay, run = entry.layout, entry.run
    work = Workload.load(
        entry.model, entry.hardware, seq=run.seq, micro_batch=run.micro_batch, sp=run.sp,
        recompute=Recompute(run.recompute), recipe=StateRecipe(run.recipe),
        memory=MemoryTechniques(
            recompute_modules=run.recompute_modules, fp8_cache=run.fp8_cache,
            moe_probs_in_act=run.moe_probs_in_act, mtp=run.mtp,
            loss_kernel=run.loss_kernel.value,
        ),
    )  # fmt: skip
    split = Layout(
        tp=lay.tp, cp=lay.cp, pp=lay.pp, dp=lay.dp, ep=lay.ep, etp=lay.etp, zero=lay.zero,
        vpp=run.vpp, schedule=Schedule(run.schedule), microbatches=run.microbatches,
    )  # fmt: skip
    return layout_report(work, split)


def _memory_terms(total: Row, cited: str) -> tuple[Term, ...]:
    v = total.value
    states = v("dense_states_bytes") + v("expert_states_bytes")
    mem = "memory_bytes_per_rank"
    source = f"{cited}; {SRC}"
    return (
        term("states_bytes", "model states", states, Unit.bytes, formula="dense + expert states",
             source=source, part_of=mem),
        term("activation_bytes", "activations", v("activation_bytes"), Unit.bytes,
             formula="layout: activations in flight", source=source, part_of=mem),
        term("recompute_working_bytes", "recompute working set", v("recompute_working_bytes"),
             Unit.bytes, formula="layout: one layer's recompute, rebuilt in backward",
             source=source, part_of=mem),
        term("buffer_bytes", "buffers", v("buffer_bytes"), Unit.bytes,
             formula="layout: logits, MoE dispatch", source=source, part_of=mem),
        term(mem, "per rank", v(mem), Unit.bytes,
             formula=RANK_TOTAL_FORMULA, source=source),
        term("card_memory_bytes", "card", v("card_memory_bytes"), Unit.bytes,
             formula="hardware config", source=source),
        term("memory_free_bytes", "margin", v("memory_free_bytes"), Unit.bytes,
             formula="card - per rank", source=source),
        term("memory_fits", "fits", v("memory_fits"), Unit.text, formula="per rank <= card",
             source=source),
    )  # fmt: skip


def _inputs(entry: PublishedLayout) -> dict[str, Any]:
    lay = entry.layout
    sizes = f"TP{lay.tp} CP{lay.cp} PP{lay.pp} DP{lay.dp}" + (
        f" EP{lay.ep} ETP{lay.etp}" if lay.ep > 1 else ""
    )
    return {"layout": entry.name, "model": entry.model, "hardware": entry.hardware,
            "split": sizes}  # fmt: skip


def validate_memory_report() -> Report:
    """One row per published layout: per-rank memory by part, the card, margin and fits."""
    rows = []
    for entry in published_layouts():
        total = price_published(entry).rows[-1]
        rows.append(Row(inputs=_inputs(entry), terms=_memory_terms(total, entry.source)))
    return Report(
        title="Published layouts: per-rank memory of the most loaded rank", rows=tuple(rows)
    )
