"""Per-layer and per-model activation bytes of the exact model, as one typed result.

Each layer kind (``attention+dense``, ``linear_attention+dense``, ``mla+moe``, ...) gets a
per-layer total with its parts (norm / attention / mlp ...); ``layers`` x per-layer is one part
of ``exact_activation_bytes``, the RoPE table all layers share is another; the loss head of the
last stage is counted apart. Labels, formulas and the row keys (``exact_...``):
``summary_explain``.
"""

from __future__ import annotations

from collections import Counter

from msgspec import Struct

from tpcalc.calc.activations.exact.layer import (
    head_tensors,
    layer_kind,
    recompute_working_bytes,
    saved_tensors,
    shared_tensors,
)
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.choices import Recompute
from tpcalc.specs import ModelSpec


class PartBytes(Struct, frozen=True):
    """One part (norm, attention, mlp, ...) of a layer kind's saved tensors."""

    part: str
    bytes_per_layer: int
    tensors: int


class KindBytes(Struct, frozen=True):
    """The saved activations of one layer kind: its parts, one layer, all its layers."""

    kind: str
    layers: int
    parts: tuple[PartBytes, ...]
    bytes_per_layer: int
    layers_bytes: int


class ExactActivations(Struct, frozen=True):
    """Activation bytes one rank keeps for backward, per layer kind and for the whole model."""

    seq: int
    micro_batch: int
    t: int
    cp: int
    kinds: tuple[KindBytes, ...]  # in the order the kinds first appear
    rope_table: bool  # a shared rotary table exists
    exact_shared_bytes: int
    exact_activation_bytes: int
    exact_not_in_paper_bytes: int
    # the loss head a rank with the last stage keeps beside its layers (``head_tensors``): not
    # a layer, so outside ``exact_activation_bytes``; a TP-only rank holds both
    exact_head_bytes: int
    exact_recompute_working_bytes: int | None  # its largest recompute site, rebuilt in backward

    def bytes_per_layer(self, spec: ModelSpec) -> list[float]:
        """Saved bytes of each decoder layer of ``spec``, in layer order."""
        by_kind = {k.kind: float(k.bytes_per_layer) for k in self.kinds}
        return [by_kind[layer_kind(spec, i)] for i in range(spec.num_hidden_layers)]


def exact_activations(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions | None = None
) -> ExactActivations:
    """Activation bytes one rank keeps for backward, per layer kind and for the whole model.

    Units: bytes. Sources: the saved-tensor inventories of this package (each module cites its
    kernel); Korthikanti et al. 2022 Table 2 for the roles and the recompute modes.
    """
    opts = options or ActivationOptions()
    counts = Counter(layer_kind(spec, i) for i in range(spec.num_hidden_layers))
    first = {k: next(i for i in range(spec.num_hidden_layers) if layer_kind(spec, i) == k)
             for k in counts}  # fmt: skip
    kinds = []
    total = 0
    beyond = 0
    for kind, count in counts.items():
        records = saved_tensors(spec, first[kind], seq, micro_batch, opts)
        parts: dict[str, int] = {}
        for r in records:
            parts[r.part] = parts.get(r.part, 0) + r.bytes
        per_layer = sum(parts.values())
        kinds.append(
            KindBytes(
                kind=kind,
                layers=count,
                parts=tuple(
                    PartBytes(part, value, sum(1 for r in records if r.part == part))
                    for part, value in parts.items()
                ),
                bytes_per_layer=per_layer,
                layers_bytes=per_layer * count,
            )
        )
        total += count * sum(r.bytes for r in records)
        beyond += count * sum(r.bytes for r in records if not r.in_paper)
    shared = shared_tensors(spec, seq, micro_batch, opts)
    shared_bytes = sum(r.bytes for r in shared)
    total += shared_bytes
    recompute = (
        max(recompute_working_bytes(spec, i, seq, micro_batch, opts) for i in first.values())
        if opts.recompute is not Recompute.none or opts.recompute_modules
        else None
    )
    return ExactActivations(
        seq=seq,
        micro_batch=micro_batch,
        t=opts.t,
        cp=opts.cp,
        kinds=tuple(kinds),
        rope_table=bool(shared),
        exact_shared_bytes=shared_bytes,
        exact_activation_bytes=total,
        exact_not_in_paper_bytes=beyond + shared_bytes,
        exact_head_bytes=sum(r.bytes for r in head_tensors(spec, seq, micro_batch, opts)),
        exact_recompute_working_bytes=recompute,
    )
