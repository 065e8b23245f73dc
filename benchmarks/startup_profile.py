"""Where a command's start-up goes: instructions per module, counted by valgrind's callgrind.

Runs `python -m tpcalc ARGS` (or, with --floor, startup.py's floor script) under callgrind with
a marker call (``os.getppid``) just before and after every module's execution, and callgrind
dumping its counters at each marker (``--dump-before=getppid``). The instructions between two
markers belong to the module executing then, so a module's *self* count is its own code (its
classes, their schemas, its constants) without the modules it imports: the self column of
``-X importtime``, but deterministic, so a change of a few million instructions shows. The
``<startup>`` row is the interpreter before the first import, ``<main>`` the command's run
between imports, ``<exit>`` the interpreter's teardown after it.

The markers add about 1% to the total. Needs valgrind; one run takes 30-60 s.

Usage (from outside the checkout, to profile the installed tpcalc, as startup.py):
  python benchmarks/startup_profile.py comm --model llama3-70b -t 8 --format json
  python benchmarks/startup_profile.py --top 50 --match tpcalc memory -t 8
  python benchmarks/startup_profile.py --floor
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from startup import ONE_MODEL_SRC

# Runs in the profiled interpreter: wraps the loader's exec_module with markers, then runs the
# command (or the code in STARTUP_PROFILE_CODE) and writes the marker labels as JSON.
WRAPPER = """
import json, os, runpy, sys
import importlib._bootstrap_external as be
LABELS = []
exec_module = be._LoaderBasics.exec_module
def marked(self, module):
    LABELS.append(("enter", module.__name__)); os.getppid()
    try:
        return exec_module(self, module)
    finally:
        LABELS.append(("exit", module.__name__)); os.getppid()
be._LoaderBasics.exec_module = marked
sys.argv = ["tpcalc", *sys.argv[1:]]
try:
    code = os.environ.get("STARTUP_PROFILE_CODE")
    if code:
        exec(compile(code, "<floor>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module("tpcalc", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    LABELS.append(("end", "")); os.getppid()
    with open(os.environ["STARTUP_PROFILE_LABELS"], "w") as f:
        json.dump(LABELS, f)
"""


def summary(path: Path) -> int:
    """The instruction count of one callgrind dump (its ``summary:`` line)."""
    with path.open() as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise ValueError(f"{path}: no summary line")


def attribute(labels: list[list[str]], counts: list[int], tail: int) -> tuple[Counter, Counter]:
    """(self, cumulative) instructions per module: interval i, which ends at marker i, belongs
    to the module on top of the stack before marker i."""
    stack, own, cumulative, started, total = ["<startup>"], Counter(), Counter(), {}, 0
    for (event, name), count in zip(labels, counts, strict=True):
        own[stack[-1]] += count
        total += count
        if event == "enter":
            if stack == ["<startup>"]:
                stack = ["<main>"]
            stack.append(name)
            started[name] = total
        elif event == "exit":
            stack.pop()
            cumulative[name] = total - started[name]
        else:
            stack = ["<exit>"]
    own["<exit>"] += tail
    return own, cumulative


def profile(argv: list[str], floor: bool) -> tuple[Counter, Counter]:
    with tempfile.TemporaryDirectory() as tmp:
        wrapper, labels = Path(tmp, "wrapper.py"), Path(tmp, "labels.json")
        wrapper.write_text(WRAPPER)
        env = {**os.environ, "STARTUP_PROFILE_LABELS": str(labels)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as startup.py: tpcalc runs from its bytecode
        if floor:
            env["STARTUP_PROFILE_CODE"] = ONE_MODEL_SRC
        out = Path(tmp, "cg.out")
        command = [
            "valgrind", "--tool=callgrind", "--dump-before=getppid",
            f"--callgrind-out-file={out}", sys.executable, str(wrapper), *argv,
        ]  # fmt: skip
        subprocess.run([sys.executable, str(wrapper), *argv], env=env, capture_output=True)
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if not labels.exists():
            raise RuntimeError(f"the profiled run failed: {done.stderr.strip()[-500:]}")
        marks = json.loads(labels.read_text())
        counts = [summary(Path(f"{out}.{i}")) for i in range(1, len(marks) + 1)]
        return attribute(marks, counts, summary(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=30, help="rows to print (by self count)")
    parser.add_argument("--match", default="", help="only modules whose name contains this")
    parser.add_argument("--floor", action="store_true", help="profile startup.py's floor")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="tpcalc arguments (default: comm for llama3-70b)"
    )
    args = parser.parse_args()
    command = args.command
    if shutil.which("valgrind") is None:
        print("error: valgrind is not installed", file=sys.stderr)
        return 2
    if not args.floor and not command:
        command = ["comm", "--model", "llama3-70b", "-t", "8", "--format", "json"]
    own, cumulative = profile(command, args.floor)
    what = "the floor" if args.floor else " ".join(command)
    print(f"total {sum(own.values()) / 1e6:.1f}e6 instructions: {what}")
    print(f"{'self e6':>8} {'cumul e6':>9}  module")
    rows = [(n, c) for n, c in own.most_common() if args.match in n][: args.top]
    for name, count in rows:
        print(f"{count / 1e6:8.2f} {cumulative.get(name, 0) / 1e6:9.2f}  {name}")
    if args.match:
        matched = sum(c for n, c in own.items() if args.match in n)
        print(f"self of every module matching {args.match!r}: {matched / 1e6:.1f}e6")
    return 0


if __name__ == "__main__":
    sys.exit(main())
