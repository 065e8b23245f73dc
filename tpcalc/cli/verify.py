"""tpcalc verify: the verification bench of seed 000, simulated on t numpy cards."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from tpcalc.cli.common import emit
from tpcalc.cli.options import (
    DEFAULT_MODEL,
    DtypeOpt,
    ExplainOpt,
    FormatOpt,
    MicroBatchOpt,
    ModelOpt,
    SeqOpt,
    TpOpt,
    UnitsOpt,
)
from tpcalc.cli.request import workload_of
from tpcalc.errors import TpcalcError
from tpcalc.render import Format
from tpcalc.terms import Report
from tpcalc.units import ByteUnits, Dtype
from tpcalc.verify.kinds import Activation, Example

app = typer.Typer()


def _require_numpy() -> None:
    """The bench simulates cards in numpy, a core dependency a broken install may lack."""
    import importlib.util

    if importlib.util.find_spec("numpy") is None:
        raise TpcalcError(
            "tpcalc verify needs numpy, a core dependency: reinstall tpcalc (pip install .)"
        )


@app.command()
def verify(
    ctx: typer.Context,
    cards: Annotated[
        int,
        typer.Option(
            "--cards", help="Simulated cards t of the toy FFN (a divisor of --intermediate)."
        ),
    ] = 2,
    activation: Annotated[
        Activation, typer.Option("--activation", help="The FFN's non-linearity f.")
    ] = Activation.relu,
    seed: Annotated[
        int, typer.Option("--seed", help="Weight draw (another seed = another set of weights).")
    ] = 0,
    intermediate: Annotated[
        int, typer.Option("--intermediate", help="The toy FFN's intermediate size.")
    ] = 16,
    causal: Annotated[
        bool, typer.Option("--causal/--no-causal", help="Causal mask in the toy attention.")
    ] = True,
    example: Annotated[
        Example | None,
        typer.Option(
            "--example",
            help="Reproduce a worked example exactly instead (seed003: seed 003, "
            "llm_internals §7.3 「模型并行与张量并行」, §7.3.2–7.3.3, in integers; the other "
            "options do not apply).",
        ),
    ] = None,
    model: ModelOpt = DEFAULT_MODEL,
    tp: TpOpt = None,
    seq: SeqOpt = None,
    micro_batch: MicroBatchOpt = 1,
    dtype: DtypeOpt = Dtype.bf16,
    units: UnitsOpt = ByteUnits.GB,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Split the FFN Y = f(X·A)·B of 「小明把苹果给了小王」 (5 × 4) over simulated cards, four ways,
    and compare every cell with one card; run the backward through f and g and attention split
    by heads; count the collectives and price them for a real model (-m, -t, default t = 8).

    Examples:

    \b
      tpcalc verify

    \b
      tpcalc verify --cards 4 --activation gelu --seed 7

    \b
      tpcalc verify -m llama3-70b -t 8 -s 8192 --format json

    \b
      tpcalc verify --example seed003
    """

    def build() -> Report:
        _require_numpy()
        if example is Example.seed003:
            from tpcalc.verify.seed003 import seed003_report

            return seed003_report()
        from tpcalc.verify.report import verify_report

        return verify_report(
            workload_of(ctx.params),
            cards=cards,
            activation=activation,
            seed=seed,
            intermediate=intermediate,
            tp=tp,
            causal=causal,
        )

    if fmt is not Format.table or example is not None:
        emit(build, fmt, units=units, explain=explain)
        return
    # A table per section (schemes, comparison, backward, attention); JSON/CSV stay one array.
    parts: list[Report] = []

    def first_section() -> Report:
        from tpcalc.verify.report import sections

        parts.extend(sections(build()))
        return parts[0]

    emit(first_section, fmt, units=units, explain=explain)
    for part in parts[1:]:
        emit(functools.partial(_same, part), fmt, units=units, explain=explain)


def _same(report: Report) -> Report:
    """The report itself (each later section of ``verify`` is already built)."""
    return report
