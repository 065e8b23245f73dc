"""The tpcalc command line: one module per command group, joined here.

Every command parses its options, calls one library function that returns a ``Report``, and
hands it to ``tpcalc.cli.common.emit``. Usage errors print one line and exit 2; content errors
print one line and exit 1; nothing but the requested format reaches stdout.
"""

from __future__ import annotations

import importlib
import sys

import typer

# Command name -> module under tpcalc.cli. Only the module of the command being run is imported
# (a lazily built app), so 'tpcalc comm' does not pay for numpy, the verify bench or 14 other
# commands' option parsing. --help and unknown names build the full app.
COMMANDS: dict[str, str] = {
    "models": "models",
    "show": "models",
    "comm": "comm",
    "memory": "memory",
    "flops": "flops",
    "check": "check",
    "dp": "dp",
    "zero": "zero",
    "pipeline": "pipeline",
    "cp": "cp",
    "ep": "ep",
    "layout": "layout",
    "verify": "verify",
    "figures": "figures",
    "validate": "validate",
    "hardware": "hardware",
}

HELP = (
    "What a distributed training layout costs, before a GPU is rented: memory per GPU, "
    "bytes on every link, time on NVLink and InfiniBand, FLOPs per rank.\n\n"
    "Examples:\n\n"
    "  tpcalc comm --model llama3-70b -t 8\n\n"
    "  tpcalc memory --seq 4096 -t 1,8 --format json\n\n"
    "  tpcalc layout -m llama3-405b --tp 8 --cp 1 --pp 16 --dp 128\n\n"
    "  tpcalc figures"
)


def build_app(command: str | None = None) -> typer.Typer:
    """The typer app with every command, or only ``command``'s module when it is known."""
    app = typer.Typer(
        name="tpcalc",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _group() -> None:
        """Keeps tpcalc a command group even when only one command is loaded."""

    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        app.add_typer(importlib.import_module(f"tpcalc.cli.{name}").app)
    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # the full app, for tests and introspection
        return build_app()
    raise AttributeError(name)


def _click_exceptions() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException) of the click typer runs on (typer >= 0.25 vendors its own)."""
    mro = typer.BadParameter.__mro__
    usage = next(c for c in mro if c.__name__ == "UsageError")
    base = next(c for c in mro if c.__name__ == "ClickException")
    return usage, base


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning usage errors into one line (exit 2)."""
    usage_error, click_exception = _click_exceptions()
    args = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in args if not a.startswith("-")), None)
    app = build_app(command if "--help" not in args and "-h" not in args else None)
    try:
        code = app(args=args, prog_name="tpcalc", standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare 'tpcalc': help on stdout, exit 0
            sys.stdout.write(exc.format_message() + "\n")
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        if ctx is not None and ctx.parent is not None:
            where = f"tpcalc {ctx.info_name}"
        else:  # errors raised while parsing a command's options carry the group's context
            where = f"tpcalc {command}" if command in COMMANDS else "tpcalc"
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
