"""Per-layer and per-model activation terms of the exact model, ready for a result row.

Keys start with ``exact_`` so they sit next to the paper model's keys in one row. Each layer kind
(``attention+dense``, ``linear_attention+dense``, ``mla+moe``, ...) gets a per-layer total with
its parts (norm / attention / mlp ...), and ``layers`` x per-layer is one part of
``exact_activation_bytes``; the RoPE table all layers share is another.
"""

from __future__ import annotations

from collections import Counter

from tpcalc.calc.activations.exact.layer import layer_kind, saved_tensors, shared_tensors
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.records import TensorRecord
from tpcalc.choices import Recompute
from tpcalc.specs import ModelSpec
from tpcalc.terms import Term, Unit, term

SRC = (
    "tpcalc exact model: per-tensor inventory of what autograd saves "
    "(roles from Korthikanti et al. 2022 §4; kernels per tpcalc.calc.activations.exact)"
)
TOTAL = "exact_activation_bytes"


def _key(kind: str) -> str:
    return kind.replace("+", "_")


def _layer_terms(kind: str, records: list[TensorRecord], count: int, **run: int) -> list[Term]:
    per_layer = f"exact_{_key(kind)}_bytes_per_layer"
    parts: dict[str, int] = {}
    for r in records:
        parts[r.part] = parts.get(r.part, 0) + r.bytes
    out = [
        term(
            f"exact_{_key(kind)}_{part}_bytes_per_layer",
            f"{kind} {part}",
            value,
            Unit.bytes,
            formula=f"Σ bytes of the {part} tensors",
            source=SRC,
            part_of=per_layer,
            tensors=sum(1 for r in records if r.part == part),
        )
        for part, value in parts.items()
    ]
    value = sum(parts.values())
    out.append(
        term(
            per_layer,
            f"per {kind} layer",
            value,
            Unit.bytes,
            formula="Σ bytes of the tensors one layer saves",
            source=SRC,
            symbols=run,
        )
    )
    out.append(
        term(
            f"exact_{_key(kind)}_layers_bytes",
            f"{count} {kind} layers",
            value * count,
            Unit.bytes,
            formula="per layer · layers",
            source=SRC,
            part_of=TOTAL,
            per_layer=value,
            layers=count,
        )
    )
    return out


def exact_activation_terms(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions | None = None
) -> tuple[Term, ...]:
    """Activation bytes one rank keeps for backward, per layer kind and for the whole model.

    Units: bytes. Sources: the saved-tensor inventories of this package (each module cites its
    kernel); Korthikanti et al. 2022 Table 2 for the roles and the recompute modes.
    """
    opts = options or ActivationOptions()
    counts = Counter(layer_kind(spec, i) for i in range(spec.num_hidden_layers))
    first = {k: next(i for i in range(spec.num_hidden_layers) if layer_kind(spec, i) == k)
             for k in counts}  # fmt: skip
    run = {"s": seq, "b": micro_batch, "t": opts.t, "cp": opts.cp}
    out: list[Term] = []
    total = 0
    beyond = 0
    for kind, count in counts.items():
        records = saved_tensors(spec, first[kind], seq, micro_batch, opts)
        out += _layer_terms(kind, records, count, **run)
        total += count * sum(r.bytes for r in records)
        beyond += count * sum(r.bytes for r in records if not r.in_paper)
    shared = shared_tensors(spec, seq, micro_batch, opts)
    shared_bytes = sum(r.bytes for r in shared)
    out.append(
        term(
            "exact_shared_bytes",
            "RoPE table (once)",
            shared_bytes,
            Unit.bytes,
            formula="s/cp · d_rope · 4 (fp32)" if shared else "0 (no rotary table)",
            source=SRC,
            part_of=TOTAL,
        )
    )
    total += shared_bytes
    out.append(term(TOTAL, "exact, all layers", total, Unit.bytes, formula="Σ parts", source=SRC))
    out.append(
        term(
            "exact_not_in_paper_bytes",
            "of which outside Table 2's tensors",
            beyond + shared_bytes,
            Unit.bytes,
            formula="norm statistics, softmax LSE, fp32 copies, RoPE table, router, ...",
            source=SRC,
        )
    )
    if opts.recompute is Recompute.full:
        out.append(_recompute_peak(spec, seq, micro_batch, opts, first))
    return tuple(out)


def _recompute_peak(
    spec: ModelSpec, seq: int, micro_batch: int, opts: ActivationOptions, first: dict[str, int]
) -> Term:
    """While one layer is recomputed in backward its full activations exist again (transient)."""
    plain = opts.model_copy(update={"recompute": Recompute.none})
    worst = max(
        sum(r.bytes for r in saved_tensors(spec, i, seq, micro_batch, plain))
        for i in first.values()
    )
    return term(
        "exact_recompute_working_bytes",
        "+ one layer rebuilt in backward",
        worst,
        Unit.bytes,
        formula="largest per-layer total without recompute (transient, add to the peak)",
        source="Korthikanti et al. 2022 §5",
    )


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
