"""tpcalc figures: every figure of both seed documents, recomputed, with a match mark."""

from __future__ import annotations

from tpcalc.figures.model import evaluate
from tpcalc.terms import Report, Row, Unit, term


def all_figures():
    from tpcalc.figures.seed000 import FIGURES as F000
    from tpcalc.figures.seed003 import FIGURES as F003

    return [*F000, *F003]


def _raw(value):
    """The computed value for JSON/CSV: numbers as they are, anything else as None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def figures_report(seed: str | None = None, ids: list[str] | None = None) -> Report:
    """One row per figure: printed text, computed text at the same precision, status."""
    from tpcalc.errors import InputError

    seeds = sorted({f.seed for f in all_figures()})
    if seed is not None and seed not in seeds:
        raise InputError(f"no seed document {seed!r}; use one of {', '.join(seeds)}")
    figures = [f for f in all_figures() if seed is None or f.seed == seed]
    if ids:
        known = {f.id for f in figures}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise InputError(f"no figure {unknown[0]!r}; 'tpcalc figures' lists the ids")
        figures = [f for f in figures if f.id in ids]
    rows = []
    misses = 0
    for fig in figures:
        ev = evaluate(fig)
        status = "cited" if fig.is_cited else ("match" if ev.match else "MISMATCH")
        misses += status == "MISMATCH"
        rows.append(Row(
            inputs={"id": fig.id, "seed": fig.seed, "section": fig.section},
            terms=(
                term("meaning", "what it is", fig.meaning, Unit.text),
                term("printed", "document prints", fig.printed, Unit.text),
                term("computed", "tpcalc computes", ev.shown if not fig.is_cited else "—",
                     Unit.text),
                term("value", "raw value", _raw(ev.value), Unit.text),
                term("status", "status", status, Unit.text,
                     formula=fig.cited and f"cited measurement: {fig.cited}"),
            ),
        ))  # fmt: skip
    computed = sum(1 for f in figures if not f.is_cited)
    note = (
        f"{computed - misses} of {computed} computed figures match the printed text; "
        f"{len(figures) - computed} cited figures are measurements or published layouts, "
        "listed with their source, not computed."
    )
    warnings = (f"{misses} figure(s) do not match the documents",) if misses else ()
    return Report(title="Seed figures", rows=tuple(rows), notes=(note,), warnings=warnings)
