"""Startup benchmark: is `tpcalc comm ...` barely slower than the floor of its own stack?

Times, in one run and interleaved (so machine drift hits both alike), the median wall time of
  - the command, `tpcalc comm --model llama3-70b -t 8 --format json`, run as
    `python -m tpcalc ...` and through the `tpcalc` console script when one is installed;
  - the floor (issue 12 §6): a script that imports typer and yaml and defines and validates one
    pydantic model, the least any CLI on this stack with a pydantic-validated config costs;
  - `tpcalc --help`, bare `import typer, pydantic, yaml` and `from pydantic import BaseModel`,
    for information.
It prints each median, the ratio command / floor, and exits 1 when a gated ratio exceeds
--target (default 1.15). Wall time is gated by default; `--clock cpu` gates the CPU time (user +
system) of each run instead, which a machine shared with other jobs disturbs far less. With
--importtime it also runs the command once under `-X importtime` and prints the slowest imports,
to find what to make lazy.

The commands run without PYTHONDONTWRITEBYTECODE, so the warm-up writes tpcalc's bytecode as an
install does (pip compiles it): with it set, every timed run would compile tpcalc from source,
roughly a sixth of its start-up, while the packages of the floor have their bytecode.

Usage: python benchmarks/startup.py [-n 10] [--target 1.15] [--clock cpu] [--cmd-args "comm ..."]
This is a script, not a test: timings belong on a quiet machine, not in CI's pass/fail.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CMD_ARGS = "comm --model llama3-70b -t 8 --format json"
BARE_IMPORTS = [sys.executable, "-c", "import typer, pydantic, yaml"]
# `import pydantic` is lazy (pydantic 2 loads BaseModel on first use), so the floor does not pay
# for what any pydantic model costs; this informational case shows that share of the gap.
PYDANTIC_IN_USE = [sys.executable, "-c", "import typer, yaml; from pydantic import BaseModel"]
# The least any pydantic-validated config costs: one model class built and one instance validated.
ONE_MODEL_SRC = (
    "import typer, yaml\nfrom pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nA(x=1)"
)
ONE_MODEL = [sys.executable, "-c", ONE_MODEL_SRC]
FLOOR = ONE_MODEL
DEFAULT_TARGET = 1.15
US_PER_S = 1e6
MS_PER_S = 1e3


@dataclass
class Case:
    label: str
    argv: list[str]
    gated: bool  # counts toward the exit code
    times_s: list[float]  # wall
    cpu_s: list[float] = field(default_factory=list)  # user + system of the child

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_s)

    def median(self, clock: str) -> float:
        return self.median_cpu_s if clock == "cpu" else self.median_s


class CommandFailed(RuntimeError):
    pass


def child_env() -> dict[str, str]:
    """This environment without PYTHONDONTWRITEBYTECODE (see the module docstring)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run; raises CommandFailed (with its stderr) on failure."""
    start = time.perf_counter()
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env()
    ) as child:
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        stderr = child.stderr.read() if child.stderr else ""
    if child.returncode != 0:
        tail = stderr.strip().splitlines()[-3:]
        raise CommandFailed(f"{shlex.join(argv)} exited {child.returncode}: " + " | ".join(tail))
    return elapsed, usage.ru_utime + usage.ru_stime


def console_scripts() -> list[tuple[str, str]]:
    """(label, path) of the `tpcalc` console script: the one next to this interpreter, and the one
    on PATH when that is a different file (e.g. a pyenv shim, which adds its own start-up)."""
    found: list[tuple[str, str]] = []
    beside = Path(sys.executable).parent / "tpcalc"
    if beside.is_file() and os.access(beside, os.X_OK):
        found.append(("tpcalc (script)", str(beside)))
    on_path = shutil.which("tpcalc")
    if on_path and all(Path(on_path).resolve() != Path(p).resolve() for _, p in found):
        shim = " shim" if "shims" in Path(on_path).parts else ""
        found.append((f"tpcalc (PATH{shim})", on_path))
    return found


def build_cases(cmd_args: list[str], baselines: list[str] | None = None) -> tuple[Case, list[Case]]:
    """The floor, and the cases compared with it (``baselines``: other installs' console
    scripts, timed in the same rounds and not gated, e.g. the tpcalc a change started from)."""
    floor = Case("floor: typer, yaml + one pydantic model validated", FLOOR, False, [])
    shown = shlex.join(cmd_args)
    cases = [
        Case(f"python -m tpcalc {shown}", [sys.executable, "-m", "tpcalc", *cmd_args], True, [])
    ]
    for label, path in console_scripts():
        # A PATH shim's overhead is the user's setup, not tpcalc's: report it, do not gate on it.
        cases.append(Case(f"{label} {shown}", [path, *cmd_args], "PATH" not in label, []))
    for path in baselines or []:
        cases.append(Case(f"baseline {path} {shown}", [path, *cmd_args], False, []))
    if cmd_args != ["--help"]:
        help_argv = [sys.executable, "-m", "tpcalc", "--help"]
        cases.append(Case("python -m tpcalc --help", help_argv, False, []))
    cases.append(Case("import typer, pydantic, yaml", BARE_IMPORTS, False, []))
    pydantic_label = "import typer, yaml; from pydantic import BaseModel"
    cases.append(Case(pydantic_label, PYDANTIC_IN_USE, False, []))
    return floor, cases


def measure(floor: Case, cases: list[Case], repetitions: int) -> list[Case]:
    """One untimed warm-up each (bytecode, disk cache), then `repetitions` interleaved rounds.
    Returns the cases timed: an ungated one that fails its warm-up (a PATH shim whose Python
    has no tpcalc) is left out with a note; a gated one raises CommandFailed."""
    kept = []
    for case in cases:
        try:
            run_once(case.argv)
        except CommandFailed as error:
            if case.gated:
                raise
            print(f"note: not timed: {error}", file=sys.stderr)
        else:
            kept.append(case)
    run_once(floor.argv)
    everything = [floor, *kept]
    for _ in range(repetitions):
        for case in everything:
            wall_s, cpu_s = run_once(case.argv)
            case.times_s.append(wall_s)
            case.cpu_s.append(cpu_s)
    return kept


def report(floor: Case, cases: list[Case], target: float, clock: str = "wall") -> bool:
    """Print wall and CPU medians and ratios; True when every gated ratio (on ``clock``) is
    within target."""
    width = max(len(c.label) for c in [floor, *cases])
    print(
        f"{'command':<{width}}  median ms   min ms   ratio   cpu median ms   cpu ratio"
        f"   (gated: {clock})"
    )
    ok = True
    for case in [floor, *cases]:
        ratio = case.median_s / floor.median_s
        cpu_ratio = case.median_cpu_s / floor.median_cpu_s
        mark = ""
        if case.gated:
            within = case.median(clock) / floor.median(clock) <= target
            ok &= within
            mark = "  ok" if within else f"  OVER target {target}"
        elif case is not floor:
            mark = "  (not gated)"
        print(
            f"{case.label:<{width}}  {case.median_s * MS_PER_S:9.1f}  "
            f"{min(case.times_s) * MS_PER_S:7.1f}  {ratio:6.2f}  "
            f"{case.median_cpu_s * MS_PER_S:14.1f}  {cpu_ratio:10.2f}{mark}"
        )
    return ok


def slowest_imports(argv: list[str], count: int, key: str) -> list[tuple[int, int, str]]:
    """(self_us, cumulative_us, module) of the `count` slowest imports under -X importtime."""
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    rows: list[tuple[int, int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, module = line.removeprefix("import time:").split("|", 2)
        rows.append((int(self_us), int(cumulative_us), module.rstrip()))
    index = 0 if key == "self" else 1
    return sorted(rows, key=lambda row: row[index], reverse=True)[:count]


def print_imports(argv: list[str], count: int, key: str) -> None:
    rows = slowest_imports(argv, count, key)
    print(f"\n{count} slowest imports of `{shlex.join(argv[1:])}` (by {key}, -X importtime):")
    print(f"{'self ms':>8} {'cumul ms':>9}  module")
    for self_us, cumulative_us, module in rows:
        print(f"{self_us / 1e3:8.1f} {cumulative_us / 1e3:9.1f}  {module}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--repetitions", type=int, default=10, help="timed runs per command")
    parser.add_argument(
        "--target",
        type=float,
        default=DEFAULT_TARGET,
        help="largest allowed median(command)/median(floor)",
    )
    parser.add_argument(
        "--cmd-args",
        default=DEFAULT_CMD_ARGS,
        help=f'tpcalc arguments to time (default "{DEFAULT_CMD_ARGS}"; try "--help")',
    )
    parser.add_argument(
        "--importtime",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also list the slowest imports of the command (default on)",
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="which median the target gates (cpu: user + system, steadier on a busy machine)",
    )
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="SCRIPT",
        help="another install's tpcalc console script, timed in the same rounds (not gated)",
    )
    parser.add_argument("--top", type=int, default=10, help="how many imports to list")
    parser.add_argument(
        "--sort", choices=["cumulative", "self"], default="cumulative", help="import ranking"
    )
    args = parser.parse_args(argv)
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cmd_args = shlex.split(args.cmd_args)
    floor, cases = build_cases(cmd_args, args.baseline)
    print(f"python {sys.version.split()[0]} at {sys.executable}; {args.repetitions} runs each")
    try:
        cases = measure(floor, cases, args.repetitions)
    except CommandFailed as error:
        print(f"error: cannot time it: {error}", file=sys.stderr)
        return 2
    ok = report(floor, cases, args.target, args.clock)
    if args.importtime:
        print_imports(cases[0].argv, args.top, args.sort)
    verdict = "within" if ok else "above"
    print(f"\n{'PASS' if ok else 'FAIL'}: gated {args.clock} ratios {verdict} {args.target}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
