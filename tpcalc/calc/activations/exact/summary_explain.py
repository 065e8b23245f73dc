"""Label, formula and source of the exact model's activation bytes (the explain layer beside
``summary.py``), flattened here into the terms of a result row.

Keys start with ``exact_`` so they sit next to the paper model's keys in one row. Each layer
kind gets a per-layer total with its parts, and ``layers`` x per-layer is one part of
``exact_activation_bytes``; the RoPE table all layers share is another. The last stage's loss
head is a row of its own.
"""

from __future__ import annotations

from tpcalc.calc.activations.exact.layer import SRC_HEAD, SRC_RECOMPUTE_WORKING
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.records import TensorRecord
from tpcalc.calc.activations.exact.summary import ExactActivations, KindBytes, exact_activations
from tpcalc.explain import Explanation, terms
from tpcalc.specs import ModelSpec
from tpcalc.terms import Scalar, Term, Unit, term

SRC = (
    "tpcalc exact model: per-tensor inventory of what autograd saves "
    "(roles from Korthikanti et al. 2022 §4; kernels per tpcalc.calc.activations.exact)"
)
TOTAL = "exact_activation_bytes"

INPUTS = {
    "seq": Explanation("s", Unit.count, "sequence length", SRC),
    "micro_batch": Explanation("b", Unit.count, "micro-batch size", SRC),
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC),
    "cp": Explanation("cp", Unit.count, "context-parallel size", SRC),
    "rope_table": Explanation("RoPE table", Unit.text, "the model has a rotary table", SRC),
}


def explanations(rope_table: bool) -> dict[str, Explanation]:
    """The explain table of ``ExactActivations``' totals (its kinds: ``kind_terms``)."""
    return {
        "exact_shared_bytes": Explanation(
            "RoPE table (once)", Unit.bytes,
            "s/cp · d_rope · 4 (fp32)" if rope_table else "0 (no rotary table)", SRC, TOTAL,
        ),
        TOTAL: Explanation("exact, all layers", Unit.bytes, "Σ parts", SRC),
        "exact_not_in_paper_bytes": Explanation(
            "of which outside Table 2's tensors", Unit.bytes,
            "norm statistics, softmax LSE, fp32 copies, RoPE table, router, ...", SRC,
        ),
        "exact_head_bytes": Explanation(
            "loss head (last stage, beside the layers)", Unit.bytes,
            "the final norm's input and statistics + the output layer's input, [s/cp (/t with "
            "SP), b, h] each", SRC_HEAD,
        ),
        "exact_recompute_working_bytes": Explanation(
            "+ one layer's recompute rebuilt in backward", Unit.bytes,
            "largest recompute site's tensors over the layer kinds (full: a layer's saved "
            "tensors less its input; transient, tpcalc layout adds it to the peak)",
            SRC_RECOMPUTE_WORKING,
        ),
    }  # fmt: skip


def _key(kind: str) -> str:
    return kind.replace("+", "_")


def kind_terms(k: KindBytes, run: dict[str, Scalar]) -> list[Term]:
    """One layer kind: its parts, the per-layer total, and its layers' share of the total."""
    per_layer = f"exact_{_key(k.kind)}_bytes_per_layer"
    out = [
        term(f"exact_{_key(k.kind)}_{p.part}_bytes_per_layer", f"{k.kind} {p.part}",
             p.bytes_per_layer, Unit.bytes, formula=f"Σ bytes of the {p.part} tensors",
             source=SRC, part_of=per_layer, tensors=p.tensors)
        for p in k.parts
    ]  # fmt: skip
    out.append(
        term(per_layer, f"per {k.kind} layer", k.bytes_per_layer, Unit.bytes,
             formula="Σ bytes of the tensors one layer saves", source=SRC, symbols=run)
    )  # fmt: skip
    out.append(
        term(f"exact_{_key(k.kind)}_layers_bytes", f"{k.layers} {k.kind} layers", k.layers_bytes,
             Unit.bytes, formula="per layer · layers", source=SRC, part_of=TOTAL,
             per_layer=k.bytes_per_layer, layers=k.layers)
    )  # fmt: skip
    return out


def activation_terms(a: ExactActivations) -> tuple[Term, ...]:
    """The row terms of ``a``: every layer kind, the shared table, the total, what lies outside
    Table 2, and with recompute its largest site rebuilt in backward."""
    run: dict[str, Scalar] = {"s": a.seq, "b": a.micro_batch, "t": a.t, "cp": a.cp}
    table = explanations(a.rope_table)
    rows = ["exact_shared_bytes", TOTAL, "exact_not_in_paper_bytes", "exact_head_bytes"]
    if a.exact_recompute_working_bytes is not None:
        rows.append("exact_recompute_working_bytes")
    totals = terms(a, {k: table[k] for k in rows})
    return (*(t for k in a.kinds for t in kind_terms(k, run)), *totals)


def exact_activation_terms(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions | None = None
) -> tuple[Term, ...]:
    """``exact_activations`` as row terms (``activation_terms``)."""
    return activation_terms(exact_activations(spec, seq, micro_batch, options))


def tensor_terms(records: list[TensorRecord]) -> tuple[Term, ...]:
    """One term per saved tensor, for ``--explain``: bytes = Π shape · element size."""
    return tuple(
        term(
            r.name,
            f"{r.name} [{r.split}]",
            r.bytes,
            Unit.bytes,
            formula=" x ".join(str(d) for d in r.shape) + f" x {r.dtype.bytes} B ({r.dtype.value})",
            source=r.note or SRC,
            split=r.split,
            in_paper=r.in_paper,
        )
        for r in records
    )
