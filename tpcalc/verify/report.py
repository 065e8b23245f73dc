"""``tpcalc verify`` as a ``Report``: schemes side by side, the f/g backward, attention by heads.

Every row echoes ``check`` (ffn | comparison | backward | attention) and ``case`` (scheme,
block or head split) with the toy's and the real model's inputs, so JSON/CSV readers can filter.
Everything is computed by the simulation in ``tpcalc.verify``; nothing here is typed in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpcalc.calc.links.collectives import Collective
from tpcalc.errors import DivisibilityError, InputError
from tpcalc.reports.request import Workload
from tpcalc.specs import ModelSpec
from tpcalc.terms import Report, Row, Scalar, Unit, term
from tpcalc.units import Dtype
from tpcalc.verify.activations import Activation
from tpcalc.verify.attention import (
    AttentionProblem,
    attention_single,
    attention_tp,
    draw_attention,
    head_layout,
    kv_replication,
)
from tpcalc.verify.backward import (
    attention_backward,
    attention_forward,
    attention_single_grad,
    layer_single,
    layer_tp,
    mlp_backward,
    mlp_forward,
    mlp_single,
)
from tpcalc.verify.grids import output_grids
from tpcalc.verify.rowterms import (
    bytes_terms,
    check_cards,
    diff_terms,
    phase_terms,
    ratio_terms,
    tally_terms,
)
from tpcalc.verify.schemes import (
    DIFF_ATOL,
    SCHEME_LABELS,
    SENTENCE_TOKENS,
    TOY_HIDDEN,
    TOY_INTERMEDIATE,
    FfnProblem,
    Scheme,
    SchemeRun,
    compare,
    draw_problem,
    run_scheme,
    single_card,
)
from tpcalc.verify.sim import Cards, Role

DY_STREAM = 2  # the output gradient dY comes from its own stream of the same --seed
DEFAULT_MODEL_TP = 8  # seed 000's anchor: Qwen3.8 at t = 8, 4,096 tokens


def _dy(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng([seed, DY_STREAM]).standard_normal(shape)


def _ffn_rows(
    runs: Sequence[SchemeRun],
    ref: np.ndarray,
    spec: ModelSpec,
    tokens: int,
    dtype: Dtype,
    model_t: int,
    base: dict[str, Scalar],
) -> list[Row]:
    rows = []
    for run in runs:
        terms = diff_terms(compare(run.output, ref))
        terms += tally_terms(run.tally) + bytes_terms(run.tally, spec, tokens, dtype, model_t)
        rows.append(
            Row(inputs={"check": "ffn", "case": run.scheme.value, **base}, terms=tuple(terms))
        )
    return rows


def _comparison_row(
    runs: dict[Scheme, SchemeRun],
    spec: ModelSpec,
    tokens: int,
    dtype: Dtype,
    model_t: int,
    base: dict[str, Scalar],
) -> Row:
    """Seed 000's comparison, from the calls the two schemes actually made."""
    col_col, col_row = runs[Scheme.column_column].tally, runs[Scheme.column_row].tally
    gather = col_col.select(Collective.all_gather, role=Role.intermediate)[0]
    reduce = col_row.select(Collective.all_reduce, role=Role.hidden)[0]
    return Row(
        inputs={
            "check": "comparison",
            "case": "all-gather intermediate vs all-reduce output",
            **base,
        },
        terms=tuple(ratio_terms(gather, reduce, spec, tokens, dtype, model_t)),
    )


def _layout_terms(attn: AttentionProblem, t: int) -> list:
    layout = head_layout(attn.n_heads, attn.n_kv, t)
    return [
        term("q_heads_per_card", "Q heads/card", len(layout[0].q_heads), Unit.count),
        term("kv_heads_per_card", "KV heads/card", len(layout[0].kv_heads), Unit.count),
        term(
            "kv_replication",
            "cards per KV head",
            kv_replication(layout),
            Unit.count,
            formula="cards holding one KV head, counted from the layout (t / n_kv if t > n_kv)",
            source="seed 000 (4 KV heads at t = 8: 2 cards each); seed 003 §7.3.4",
            n_heads=attn.n_heads,
            n_kv=attn.n_kv,
            t=t,
        ),
    ]


def _attention_rows(
    attn: AttentionProblem, ts: Sequence[int], base: dict[str, Scalar]
) -> tuple[list[Row], list[str]]:
    rows, warnings = [], []
    ref = attention_single(attn)
    case = f"{attn.n_heads} Q / {attn.n_kv} KV heads"
    for t in ts:
        try:
            layout = _layout_terms(attn, t)
        except DivisibilityError as exc:
            warnings.append(f"attention split skipped at t={t}: {exc}")
            continue
        run = attention_tp(attn, t)
        terms = layout + diff_terms(compare(run.output, ref)) + tally_terms(run.tally)
        rows.append(
            Row(inputs={"check": "attention", "case": case, **base, "t": t}, terms=tuple(terms))
        )
    return rows, warnings


def _backward_rows(
    p: FfnProblem,
    attn: AttentionProblem,
    act: Activation,
    t: int,
    seed: int,
    base: dict[str, Scalar],
) -> tuple[list[Row], list[str]]:
    dy = _dy(seed, p.x.shape)
    cards = Cards(t)
    grad = mlp_backward(p, mlp_forward(p, p.x, act, cards), dy, act, cards)
    ref = mlp_single(p, p.x, dy, act).dx
    rows = [_backward_row("mlp", compare(grad.dx, ref), cards.tally, base)]
    try:
        head_layout(attn.n_heads, attn.n_kv, t)
    except DivisibilityError as exc:
        return rows, [f"attention and layer backward skipped at t={t}: {exc}"]
    cards = Cards(t)
    grad = attention_backward(attn, attention_forward(attn, attn.x, cards), dy, cards)
    ref = attention_single_grad(attn, attn.x, dy)[1]
    rows.append(_backward_row("attention", compare(grad.dx, ref), cards.tally, base))
    layer = layer_tp(attn, p, dy, act, t)
    rows.append(
        _backward_row(
            "layer", compare(layer.dx, layer_single(attn, p, dy, act)[1]), layer.tally, base
        )
    )
    return rows, []


def _backward_row(block: str, diff, tally, base: dict[str, Scalar]) -> Row:
    terms = diff_terms(diff, "dX") + phase_terms(tally)
    return Row(inputs={"check": "backward", "case": block, **base}, terms=tuple(terms))


def verify_report(
    workload: Workload,
    *,
    cards: int = 2,
    activation: Activation = Activation.relu,
    seed: int = 0,
    intermediate: int = TOY_INTERMEDIATE,
    tp: str | int | list[int] | None = None,
    causal: bool = True,
) -> Report:
    """The verification bench of seed 000 on ``cards`` simulated cards, its communication
    priced for ``workload``'s model, sequence, micro-batch and dtype at each t of ``tp``
    (default 8); the workload's card is not used."""
    from tpcalc.reports.inputs import parse_tp_list

    spec, seq, micro_batch, dtype = (
        workload.spec,
        workload.seq,
        workload.micro_batch,
        workload.dtype,
    )
    activation = Activation(activation)
    check_cards(cards, intermediate)
    if seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {seed}")
    model_tps = parse_tp_list(tp, 1) if tp is not None else [DEFAULT_MODEL_TP]
    defaulted = list(workload.warnings)
    tokens = seq * micro_batch

    p = draw_problem(seed, TOY_HIDDEN, intermediate)
    attn = draw_attention(seed, spec.num_attention_heads, spec.kv_heads, causal=causal)
    ref, _ = single_card(p, activation)
    runs = {s: run_scheme(s, p, cards, activation) for s in Scheme}
    toy: dict[str, Scalar] = {
        "t": cards,
        "activation": activation.value,
        "seed": seed,
        "tokens": len(SENTENCE_TOKENS),
        "hidden": TOY_HIDDEN,
        "intermediate": intermediate,
        "causal": causal,
        "model": spec.name,
    }
    rows: list[Row] = []
    warnings: list[str] = defaulted
    for model_t in model_tps:
        base = {
            **toy,
            "model_t": model_t,
            "seq": seq,
            "micro_batch": micro_batch,
            "dtype": dtype.value,
        }
        rows += _ffn_rows(list(runs.values()), ref, spec, tokens, dtype, model_t, base)
        if cards > 1:
            rows.append(_comparison_row(runs, spec, tokens, dtype, model_t, base))
    if cards == 1:
        warnings.append(
            "--cards 1 communicates nothing: the all-gather vs all-reduce comparison "
            "needs 2 or more cards"
        )
    grids = output_grids(ref, list(runs.values()), cards)
    back, w = _backward_rows(p, attn, activation, cards, seed, toy)
    att, w2 = _attention_rows(attn, sorted({cards, *model_tps}), toy)
    return Report(
        title=f"Verification bench: the {len(SENTENCE_TOKENS)} × {TOY_HIDDEN} sentence on "
        f"{cards} cards, communication priced for {spec.name}",
        rows=tuple(rows + back + att),
        warnings=tuple(warnings + w + w2),
        notes=_notes(),
        grids=grids,
    )


def _notes() -> tuple[str, ...]:
    return (
        f"X: 「{''.join(SENTENCE_TOKENS)}」 = {' / '.join(SENTENCE_TOKENS)}; differing cells "
        f"are [row, col], 0-based, where |diff| > {DIFF_ATOL:g}.",
        *(f"{s.value}: {label}" for s, label in SCHEME_LABELS.items()),
        "Bytes: 'ring' = what each rank sends in a ring collective (2(t-1)/t of the message "
        "per all-reduce, (t-1)/t per all-gather); 'message' = the size of the tensor.",
    )


SECTION_TITLES = {
    "ffn": "FFN Y = f(X·A)·B on {t} cards vs 1 card, scheme by scheme ({activation}, seed {seed})",
    "comparison": "All-gather of the intermediate vs all-reduce of the output on {model}, s={seq}",
    "backward": "Backward through f and g on {t} cards: dX vs 1 card, all-reduces counted",
    "attention": "Attention split by heads ({case}), t cards vs 1 card",
}


def sections(report: Report) -> list[Report]:
    """The report split by ``check`` (for tables): FFN schemes, comparison, backward, attention.

    Warnings go with the first section and the notes with the FFN schemes, so each is shown once.
    """
    order: list[str] = []
    for row in report.rows:
        if row.inputs["check"] not in order:
            order.append(str(row.inputs["check"]))
    out = []
    for i, check in enumerate(order):
        rows = tuple(r for r in report.rows if r.inputs["check"] == check)
        out.append(
            Report(
                title=SECTION_TITLES[check].format(**rows[0].inputs),
                rows=rows,
                warnings=report.warnings if i == 0 else (),
                notes=report.notes if check == "ffn" else (),
                grids=report.grids if check == "ffn" else (),
            )
        )
    return out
