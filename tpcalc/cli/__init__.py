"""The tpcalc command line: one module per command group, joined here.

Every command parses its options, calls one library function that returns a ``Report``, and
hands it to ``tpcalc.cli.common.emit``. Usage errors print one line and exit 2; content errors
print one line and exit 1; any other exception is a bug: one "internal error" line and exit 3
(the traceback with TPCALC_DEBUG=1). Nothing but the requested format reaches stdout.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # main() imports typer, after it has set START_UP_GC_THRESHOLD
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
    "plan": "plan",
}

# One line per command for 'tpcalc --help', so the overview imports no command module (and so no
# calculator). Each is the start of the command's own docstring; tests/test_fuzz_cli.py checks
# that they have not drifted apart.
SUMMARIES: dict[str, str] = {
    "models": "Built-in models: total parameters, layers, hidden size, heads",
    "show": "One model: its architecture and its parameter breakdown",
    "comm": "TP communication of one micro-batch (fwd + bwd): bytes per",
    "memory": "Per-rank memory: activations, logits, model states and what",
    "flops": "Per-rank FLOPs of one micro-batch (6·N·tokens/t) and compute",
    "check": "Which t a model admits: query/KV heads, FFN and expert",
    "dp": "Data parallelism: gradient bytes, ring all-reduce vs a naive",
    "zero": "ZeRO stages 0-3: model states per rank, memory left for",
    "pipeline": "Pipeline parallelism: layers and parameters per stage, bytes",
    "cp": "Context parallelism: the K,V block each rank passes per ring",
    "ep": "Expert parallelism: routed experts per rank, routed-expert",
    "layout": "A combined layout: checks world size and every divisibility,",
    "verify": "Split the FFN Y = f(X·A)·B of 「小明把苹果给了小王」 (5 × 4) over",
    "figures": "Every figure the two seed documents print, recomputed from",
    "validate": "Check tpcalc against published training runs, each with its",
    "hardware": "Built-in accelerators: memory, peak and achieved FLOP/s,",
    "plan": "Find the best layout: every TP, CP, PP, VPP, DP, EP, ETP, ZeRO",
}

HELP = (
    "What a distributed training layout costs, before a GPU is rented: memory per GPU, "
    "bytes on every link, time on NVLink and InfiniBand, FLOPs per rank.\n\n"
    "Examples:\n\n"
    "  tpcalc comm --model llama3-70b -t 8\n\n"
    "  tpcalc memory --seq 4096 -t 1,8 --format json\n\n"
    "  tpcalc layout -m llama3-405b --tp 8 --cp 1 --pp 16 --dp 128\n\n"
    "  tpcalc figures\n\n"
    "Exit codes: 0 ok; 1 a problem with the inputs' content (bad config, impossible split); "
    "2 usage (unknown option, bad value); 3 internal error (a bug: rerun with TPCALC_DEBUG=1 "
    "for the traceback and report it)."
)

# Exit codes (README "Exit codes", design.md "CLI contract").
EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
DEBUG_ENV = "TPCALC_DEBUG"
# A command's start-up (typer, pydantic and their schemas, the command's modules) allocates about
# 50,000 container objects that live until exit. At CPython's default generation-0 threshold of
# 700 the cyclic collector runs about 70 times over them and frees about 500 objects: 2-4% of
# a command's CPU time (benchmarks/README.md). main() raises the threshold to this for its
# run, so a calculation collects nothing until it has allocated this many objects more than it
# freed; reference counting frees everything else as before, and a long sweep is still
# collected, once per this many allocations (at most a few MB of cyclic garbage waits).
START_UP_GC_THRESHOLD = 100_000
# pydantic loads its plugins when it builds its first validator, by reading the entry points of
# every installed distribution (pydantic.plugin._loader): about 20e6 instructions, 2% of a
# command's start-up, with the 118 distributions of the machine benchmarks/README.md measures
# on. tpcalc uses no pydantic plugin, so main() turns the look-up off for its run, unless the
# variable is already set (pydantic docs, "Pydantic Plugins": '1' disables all).
PYDANTIC_PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"


def _version() -> str:
    import tpcalc

    return str(tpcalc.__version__)


def _print_version(value: bool) -> None:
    import typer

    if value:
        sys.stdout.write(f"tpcalc {_version()}\n")
        raise typer.Exit(EXIT_OK)


def _new_app() -> typer.Typer:
    import typer

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
    def _group(
        version: bool = typer.Option(
            False,
            "--version",
            "-V",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ) -> None:
        """Keeps tpcalc a command group even when only one command is loaded."""

    return app


def build_app(command: str | None = None) -> typer.Typer:
    """The typer app with every command, or only ``command``'s module when it is known."""
    app = _new_app()
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        app.add_typer(importlib.import_module(f"tpcalc.cli.{name}").app)
    return app


def _overview_app() -> typer.Typer:
    """The group with a stub per command, only to print 'tpcalc --help' (nothing runs them)."""
    app = _new_app()
    for name, summary in SUMMARIES.items():

        def stub() -> None:
            raise RuntimeError("the overview app only prints help")

        app.command(name, help=summary, short_help=summary + "...")(stub)
    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # the full app, for tests and introspection
        return build_app()
    raise AttributeError(name)


def _click_exceptions() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException) of the click typer runs on (typer >= 0.25 vendors its own)."""
    import typer

    mro = typer.BadParameter.__mro__
    usage = next(c for c in mro if c.__name__ == "UsageError")
    base = next(c for c in mro if c.__name__ == "ClickException")
    return usage, base


def internal_error(exc: BaseException) -> None:
    """A bug, not the user's input: one line (or the traceback with TPCALC_DEBUG=1), exit 3."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    else:
        text = " ".join(str(exc).split())  # one line, whatever the message holds
        sys.stderr.write(
            f"internal error: {type(exc).__name__}: {text}; "
            f"rerun with {DEBUG_ENV}=1 for the traceback\n"
        )
    sys.exit(EXIT_INTERNAL)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: usage errors one line (exit 2), bugs one line (exit 3)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] in (["--version"], ["-V"]):  # without building the app
        sys.stdout.write(f"tpcalc {_version()}\n")
        sys.exit(EXIT_OK)
    thresholds = gc.get_threshold()
    gc.set_threshold(max(START_UP_GC_THRESHOLD, thresholds[0]), *thresholds[1:])
    plugins_set = PYDANTIC_PLUGINS_ENV in os.environ
    if not plugins_set:
        os.environ[PYDANTIC_PLUGINS_ENV] = "1"
    try:
        _run(args)
    except SystemExit:
        raise
    except KeyboardInterrupt:  # Ctrl-C: the user's choice, not a bug
        sys.stderr.write("Aborted.\n")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the contract: never a traceback (issue 8 §5)
        internal_error(exc)
    finally:  # an in-process caller (a test) gets its collector back
        # freeze + unfreeze moves what this run allocated to the oldest generation without a
        # scan (gc docs); restoring the threshold alone would make the next allocation scan
        # all of it, ~50,000 objects, as the process exits.
        gc.freeze()
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        if not plugins_set:
            os.environ.pop(PYDANTIC_PLUGINS_ENV, None)


def _message(exc: Exception) -> str:
    """A click exception's own one-paragraph message (``format_message``), else its text."""
    fmt = getattr(exc, "format_message", None)
    return str(fmt()) if callable(fmt) else str(exc)


def _run(args: list[str]) -> None:
    import typer

    usage_error, click_exception = _click_exceptions()
    command = next((a for a in args if not a.startswith("-")), None)
    if command in COMMANDS and args[:1] not in (["--help"], ["-h"]):
        app = build_app(command)  # its own help included: one command module is imported
    elif not args or args[:1] in (["--help"], ["-h"]):
        app = _overview_app()  # 'tpcalc --help' imports no command module, so no calculator
    else:
        app = build_app()  # an unknown command: the full app names the valid ones
    try:
        code = app(args=args, prog_name="tpcalc", standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare 'tpcalc': help on stdout, exit 0
            sys.stdout.write(_message(exc) + "\n")
            sys.exit(0)
        ctx = getattr(exc, "ctx", None)
        if ctx is not None and ctx.parent is not None:
            where = f"tpcalc {ctx.info_name}"
        else:  # errors raised while parsing a command's options carry the group's context
            where = f"tpcalc {command}" if command in COMMANDS else "tpcalc"
        message = _message(exc).replace("Value error, ", "")
        message = " ".join(message.split())
        sys.stderr.write(f"Error: {message} (see '{where} --help')\n")
        sys.exit(EXIT_USAGE)
    except click_exception as exc:
        message = " ".join(_message(exc).split())
        sys.stderr.write(f"Error: {message}\n")
        sys.exit(getattr(exc, "exit_code", EXIT_INPUT))
    except typer.Abort:
        sys.stderr.write("Aborted.\n")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
