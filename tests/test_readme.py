"""The README's figures, rerun: every ```console reproducible``` block (issue 13 §6).

Convention (README "What it prints"): in a block opened with ```` ```console reproducible ````,
a line ``$ tpcalc ARGS`` is a command and the lines after it, up to the next command, are lines
its output must contain (after table borders are dropped and runs of spaces collapsed). A
markdown table right after ``<!-- figures from the next reproducible block -->`` summarises the
next reproducible block: every number in its value cells must appear in that block's lines.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_cli

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = "```"
OPEN = "```console reproducible"
TABLE_MARK = "<!-- figures from the next reproducible block -->"
BORDERS = str.maketrans({c: " " for c in "│┃║|"})
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?%?")
LABEL_COLUMNS = 2  # model, seq: the table cells that are not figures


@dataclass
class Command:
    args: list[str]
    expected: list[str]
    line: int  # README line of the `$ tpcalc` line


def normalise(text: str) -> list[str]:
    """Lines without table borders, runs of spaces collapsed: what both sides are compared as."""
    return [" ".join(line.translate(BORDERS).split()) for line in text.splitlines()]


def blocks(text: str) -> list[list[Command]]:
    """The commands of every reproducible block, in README order."""
    found: list[list[Command]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != OPEN:
            i += 1
            continue
        block: list[Command] = []
        i += 1
        while i < len(lines) and lines[i].strip() != FENCE:
            line = lines[i]
            if line.startswith("$ tpcalc "):
                block.append(Command(shlex.split(line)[2:], [], i + 1))
            elif line.strip():
                assert block, f"README line {i + 1}: output before any '$ tpcalc' line"
                block[-1].expected.append(line)
            i += 1
        found.append(block)
    return found


def summary_tables(text: str) -> list[tuple[list[str], list[Command]]]:
    """(table value cells, the block they summarise) for every marked table."""
    lines = text.splitlines()
    all_blocks = blocks(text)
    opens = [n for n, line in enumerate(lines) if line.strip() == OPEN]
    found = []
    for n, line in enumerate(lines):
        if line.strip() != TABLE_MARK:
            continue
        cells: list[str] = []
        for row in lines[n + 2 :]:  # below the header row
            if not row.startswith("|"):
                break
            parts = [c.strip() for c in row.strip().strip("|").split("|")]
            if set("".join(parts)) <= set("-: "):
                continue  # the |---| rule
            cells.extend(parts[LABEL_COLUMNS:])
        following = next(k for k, o in enumerate(opens) if o > n)
        found.append((cells, all_blocks[following]))
    return found


TEXT = README.read_text()
COMMANDS = [c for block in blocks(TEXT) for c in block]


def test_the_readme_has_reproducible_figures():
    # The comm example, the activation table (12 commands) and the parallelism map at least.
    assert len(COMMANDS) >= 17
    assert all(c.expected for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"L{c.line}:{shlex.join(c.args)}")
def test_readme_command_prints_its_figures(command: Command):
    r = run_cli(*command.args)
    assert r.code == 0, r.err
    printed = normalise(r.out)
    for want in normalise("\n".join(command.expected)):
        assert any(want in line for line in printed), (
            f"README line {command.line}: '{want}' not in the output of "
            f"tpcalc {shlex.join(command.args)}"
        )


def test_summary_tables_show_only_figures_their_block_checks():
    tables = summary_tables(TEXT)
    assert tables, f"no table marked {TABLE_MARK!r}"
    for cells, block in tables:
        checked = set(NUMBER.findall(" ".join(line for c in block for line in c.expected)))
        assert cells
        for cell in cells:
            for number in NUMBER.findall(cell):
                assert number in checked, f"table figure {cell!r} is not in the block below it"


def test_convention_rejects_a_figure_that_is_not_printed():
    # The comparison can fail: a figure one digit off is not found in the real output.
    command = next(c for c in COMMANDS if c.args[:1] == ["comm"])
    printed = normalise(run_cli(*command.args).out)
    assert any("75.16" in line for line in printed)
    assert not any("sent per step GB 75.17" in line for line in printed)
