"""tpcalc models / tpcalc show: the built-in models, and one model's architecture and parameters."""

from __future__ import annotations

from typing import Annotated

import typer

from tpcalc.cli.common import emit
from tpcalc.cli.options import ExplainOpt, FormatOpt
from tpcalc.render import Format

app = typer.Typer()

ModelArg = Annotated[
    str,
    typer.Argument(
        help="Built-in model name ('tpcalc models'), a YAML in tpcalc's schema, or a HF "
        "config.json.",
        show_default=False,
    ),
]


@app.command()
def models(fmt: FormatOpt = Format.table) -> None:
    """Built-in models: total parameters, layers, hidden size, heads, KV heads, seq length.

    Example:

    \b
      tpcalc models --format csv
    """

    def build():
        from tpcalc.reports.models import models_report

        return models_report()

    emit(build, fmt)


@app.command()
def show(model: ModelArg, fmt: FormatOpt = Format.table, explain: ExplainOpt = False) -> None:
    """One model: its architecture and its parameter breakdown (embedding, attention, MLP,
    experts, norms, LM head, MTP, declared parts; total, matmul and active counts).

    Examples:

    \b
      tpcalc show llama3-70b

    \b
      tpcalc show deepseek-v3 --explain

    \b
      tpcalc show ./Mistral-7B-v0.1/config.json --format json
    """

    def build():
        from tpcalc.reports.models import show_report

        return show_report(model)

    emit(build, fmt, explain=explain)
