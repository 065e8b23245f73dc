"""The tpcalc command line: one module per command group, joined here.

Every command parses its options, calls one library function that returns a ``Report``, and
hands it to ``tpcalc.cli.common.emit``. Usage errors print one line and exit 2; content errors
print one line and exit 1; nothing but the requested format reaches stdout.
"""

from __future__ import annotations

import sys

import typer

from tpcalc.cli import (
    check,
    comm,
    dp,
    figures,
    flops,
    hardware,
    memory,
    models,
    pipeline,
    verify,
    zero,
)

app = typer.Typer(
    name="tpcalc",
    help=(
        "What a distributed training layout costs, before a GPU is rented: memory per GPU, "
        "bytes on every link, time on NVLink and InfiniBand, FLOPs per rank.\n\n"
        "Examples:\n\n"
        "  tpcalc comm --model llama3-70b -t 8\n\n"
        "  tpcalc memory --seq 4096 -t 1,8 --format json\n\n"
        "  tpcalc flops -m llama3-70b -s 8192 -t 8 --params all --explain"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for module in (models, comm, memory, flops, check, dp, zero, pipeline, verify, figures, hardware):
    app.add_typer(module.app)


def _click_exceptions() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException) of the click typer runs on (typer >= 0.25 vendors its own)."""
    mro = typer.BadParameter.__mro__
    usage = next(c for c in mro if c.__name__ == "UsageError")
    base = next(c for c in mro if c.__name__ == "ClickException")
    return usage, base


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning usage errors into one line (exit 2)."""
    usage_error, click_exception = _click_exceptions()
    try:
        code = app(args=argv, prog_name="tpcalc", standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare 'tpcalc': help on stdout, exit 0
            sys.stdout.write(exc.format_message() + "\n")
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        where = (
            f"tpcalc {ctx.info_name}" if ctx is not None and ctx.parent is not None else "tpcalc"
        )
        message = exc.format_message().replace("Value error, ", "")
        sys.stderr.write(f"Error: {message} (see '{where} --help')\n")
        sys.exit(2)
    except click_exception as exc:
        sys.stderr.write(f"Error: {exc.format_message()}\n")
        sys.exit(getattr(exc, "exit_code", 1))
    except typer.Abort:
        sys.stderr.write("Aborted.\n")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
