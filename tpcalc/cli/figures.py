"""tpcalc figures: every figure of the two seed documents, recomputed, with a match mark."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from tpcalc.cli.common import emit
from tpcalc.cli.options import ExplainOpt, FormatOpt
from tpcalc.render import Format

app = typer.Typer()


class Seed(str, Enum):
    """The two source documents."""

    lesson = "000"  # the TP lesson (Qwen3.8, H800 links)
    book = "003"  # llm_internals §7.3 (Llama 3 70B, H100 links)


@app.command()
def figures(
    seed: Annotated[
        Seed | None,
        typer.Option(
            "--seed",
            help="Only one document: 000 (the lesson 「一层的矩阵乘,能不能拆到几张卡上一起算?」) "
            "or 003 (llm_internals §7.3 「模型并行与张量并行」).",
        ),
    ] = None,
    ids: Annotated[
        list[str] | None, typer.Option("--id", help="Only this figure id (repeatable).")
    ] = None,
    fmt: FormatOpt = Format.table,
    explain: ExplainOpt = False,
) -> None:
    """Every figure the two seed documents print, recomputed from configs at the printed
    precision; exits 1 if any computed figure misses.

    Examples:

    \b
      tpcalc figures

    \b
      tpcalc figures --seed 003 --format csv

    \b
      tpcalc figures --id q-tp-step --id l-ar-step
    """

    def build():
        from tpcalc.reports.figures import figures_report

        return figures_report(seed=seed.value if seed else None, ids=ids)

    report = emit(build, fmt, explain=explain)
    if report is not None and report.warnings:
        raise typer.Exit(1)
