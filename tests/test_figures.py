"""Every seed figure, checked row by row against the documents' printed text.

The printed strings are the golden table of tests/golden.py (a copy of
../shared/figures/seed-figures.yaml). Each row's computed text comes from the calculators; the
comparison is with that copy, not with the Figure record's own ``printed`` field.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.golden import PRINTED
from tpcalc.figures.model import evaluate
from tpcalc.reports.figures import all_figures

CITED = {"q-llama405-4d", "q-ds-parallel", "l-sp-layer-time"}  # measurements / published layouts

BY_ID = {f.id: f for f in all_figures()}


def test_every_document_figure_has_a_row():
    assert set(BY_ID) == set(PRINTED)


@pytest.mark.parametrize("fid", sorted(set(PRINTED) - CITED))
def test_computed_figure_matches_the_document(fid):
    seed, printed = PRINTED[fid]
    fig = BY_ID[fid]
    assert fig.seed == seed and not fig.is_cited
    assert evaluate(fig).shown == printed


@pytest.mark.parametrize("fid", sorted(CITED))
def test_cited_figures_are_not_pretended_computed(fid):
    fig = BY_ID[fid]
    assert fig.is_cited and fig.cited


def test_figures_command_all_match(cli):
    r = cli("figures", "-f", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert len(rows) == len(PRINTED)
    assert {row["status"] for row in rows} == {"match", "cited"}
    assert {row["id"]: row["computed"] for row in rows if row["status"] == "match"} == {
        k: v[1] for k, v in PRINTED.items() if k not in CITED
    }


def test_figures_command_fails_on_a_miss(cli, monkeypatch):
    import msgspec

    import tpcalc.figures.seed000 as s000

    broken = [msgspec.structs.replace(f, printed="1.0 GB") if f.id == "q-tp-step" else f
              for f in s000.FIGURES]  # fmt: skip
    monkeypatch.setattr(s000, "FIGURES", broken)
    r = cli("figures", "--id", "q-tp-step")
    assert r.code == 1
    assert "MISMATCH" in r.out and "do not match" in r.err


def test_figures_filters(cli):
    rows = json.loads(cli("figures", "--seed", "003", "-f", "json").out)
    assert rows and all(r["seed"] == "003" for r in rows)
    csv_rows = list(csv.DictReader(io.StringIO(cli("figures", "--seed", "003", "-f", "csv").out)))
    assert [r["id"] for r in csv_rows] == [r["id"] for r in rows]
    assert all(r["seed"] == "003" for r in csv_rows)
    r = cli("figures", "--id", "nope")
    assert r.code == 1 and "no figure 'nope'" in r.err


def test_unknown_seed_is_a_usage_error(cli):
    r = cli("figures", "--seed", "001")
    assert r.code == 2 and r.out == "" and "'001' is not one of '000', '003'" in r.err
