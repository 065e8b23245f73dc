"""The tpcalc command line: one module per command group, joined here.

Every command parses its options, calls one library function that returns a ``Report``, and
hands it to ``tpcalc.cli.common.emit``. Usage errors print one line and exit 2; content errors
print one line and exit 1; nothing but the requested format reaches stdout.
"""

from __future__ import annotations

import sys

import typer

from tpcalc.cli import comm, flops, memory

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

for module in (comm, flops, memory):
    app.add_typer(module.app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning click's usage errors into one line (exit 2)."""
    import click

    try:
        code = app(args=argv, prog_name="tpcalc", standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see 'tpcalc {exc.ctx.info_name} --help')" if exc.ctx else ""
        if exc.ctx and exc.ctx.parent is None:
            hint = " (see 'tpcalc --help')"
        sys.stderr.write(f"Error: {exc.format_message()}{hint}\n")
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        sys.stderr.write("Aborted.\n")
        sys.exit(1)
    except click.ClickException as exc:
        sys.stderr.write(f"Error: {exc.format_message()}\n")
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
