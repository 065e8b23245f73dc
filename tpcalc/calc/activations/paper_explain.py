"""Label, formula and source of every ``PaperLayer``, ``PaperActivations`` and ``Logits`` field
(the explain layer beside ``paper.py``), and their conversion to the ``Term`` rows ``tpcalc
memory`` prints."""

from __future__ import annotations

from tpcalc.calc.activations.paper import (
    SRC,
    Logits,
    PaperActivations,
    PaperLayer,
)
from tpcalc.choices import Recompute
from tpcalc.explain import Explanation, terms
from tpcalc.terms import Scalar, Term, Unit

LAYER_TOTAL = "activation_bytes_per_layer"
SRC_LOGITS = "seed 003 §7.3.4 (VocabParallelCrossEntropy keeps 1/t)"
# The rows of each recompute mode, in display order.
FULL_ROWS = ("layer_input_bytes", LAYER_TOTAL)
PARTS_ROWS = (
    "unsplit_bytes_per_layer", "split_bytes_per_layer", "scores_bytes_per_layer", LAYER_TOTAL
)  # fmt: skip


def _total_formula(sp: bool, recompute: Recompute) -> str:
    if recompute is Recompute.full:
        return "sum of parts"
    scores = "" if recompute is Recompute.selective else " + 5as/h"
    if sp:
        return f"s·b·h/t·(34{scores})"
    return f"s·b·h·(10 + 24/t{scores.replace('/h', '/(h·t)')})"


def layer_explanations(
    sp: bool, recompute: Recompute, input_divisor: int
) -> dict[str, Explanation]:
    """The explain table of ``PaperLayer``; formulas name the split the options make."""
    return {
        "layer_input_bytes": Explanation(
            "paper: layer input (2sbh)", Unit.bytes,
            "2·s·b·h" + ("/t" if input_divisor > 1 else ""), f"{SRC} (full recompute)",
            LAYER_TOTAL,
        ),
        "unsplit_bytes_per_layer": Explanation(
            "paper: norm/dropout/residual (10sbh)", Unit.bytes,
            "10·s·b·h" + ("/t (SP)" if sp else " (TP does not split it)"),
            f"{SRC}; seed 003 table 7-8", LAYER_TOTAL,
        ),
        "split_bytes_per_layer": Explanation(
            "paper: Q,K,V,MLP (24sbh/t)", Unit.bytes, "24·s·b·h/t", SRC, LAYER_TOTAL
        ),
        "scores_bytes_per_layer": Explanation(
            "paper: attention scores (5as²b)", Unit.bytes,
            "5·a·s²·b/t" if recompute is Recompute.none else "0 (selective recompute)",
            f"{SRC}; §5 selective recompute drops it", LAYER_TOTAL,
        ),
        LAYER_TOTAL: Explanation(
            "paper: per layer", Unit.bytes, _total_formula(sp, recompute), SRC
        ),
    }  # fmt: skip


# The inputs ``PaperLayer`` carries for its formulas, explained so every field has text.
LAYER_INPUTS: dict[str, Explanation] = {
    "s": Explanation("s", Unit.count, "sequence length", SRC),
    "b": Explanation("b", Unit.count, "micro-batch size", SRC),
    "h": Explanation("h", Unit.count, "hidden_size (model config)", SRC),
    "a": Explanation("a", Unit.count, "num_attention_heads (model config)", SRC),
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC),
    "sp": Explanation("SP", Unit.text, "--sp", "Korthikanti et al. 2022 §4.2.2"),
    "input_divisor": Explanation(
        "layer-input divisor", Unit.count, "t if --full-recompute-sharding sp with SP, else 1",
        f"{SRC} (the paper keeps the whole input)",
    ),
    "unsplit_divisor": Explanation(
        "unsplit divisor", Unit.count, "t with SP, else 1", "Korthikanti et al. 2022 §4.2.2"
    ),
}  # fmt: skip

MODEL_EXPLANATIONS: dict[str, Explanation] = {
    "activation_bytes": Explanation(
        "paper: all layers", Unit.bytes, "per layer · L", f"{SRC}; seed 000 (34·s·b·h·L = 45.6 GB)"
    ),
    "layers": Explanation("L", Unit.count, "num_hidden_layers (model config)", SRC),
}

LOGITS_EXPLANATIONS: dict[str, Explanation] = {
    "logits_bf16_bytes": Explanation("logits bf16", Unit.bytes, "s·b·V·2", SRC_LOGITS),
    "logits_fp32_bytes": Explanation("logits fp32", Unit.bytes, "s·b·V·4", SRC_LOGITS),
    "logits_fp32_bytes_per_rank": Explanation(
        "logits fp32 per rank", Unit.bytes, "s·b·V·4/t", SRC_LOGITS
    ),
    "s": Explanation("s", Unit.count, "sequence length", SRC_LOGITS),
    "b": Explanation("b", Unit.count, "micro-batch size", SRC_LOGITS),
    "vocab_size": Explanation("V", Unit.count, "vocab_size (model config)", SRC_LOGITS),
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC_LOGITS),
}
LOGITS_ROWS = ("logits_bf16_bytes", "logits_fp32_bytes", "logits_fp32_bytes_per_rank")


def layer_terms(layer: PaperLayer) -> tuple[Term, ...]:
    """The per-layer rows: the layer input under full recompute, else the three parts; then
    the per-layer total."""
    table = layer_explanations(layer.sp, layer.recompute, layer.input_divisor)
    rows = FULL_ROWS if layer.recompute is Recompute.full else PARTS_ROWS
    sbh: dict[str, Scalar] = {"s": layer.s, "b": layer.b, "h": layer.h}
    symbols: dict[str, dict[str, Scalar]] = {
        "layer_input_bytes": {**sbh, "t": layer.input_divisor},
        "unsplit_bytes_per_layer": {**sbh, "t": layer.unsplit_divisor},
        "split_bytes_per_layer": {**sbh, "t": layer.t},
        "scores_bytes_per_layer": {"a": layer.a, "s": layer.s, "b": layer.b, "t": layer.t},
    }
    return terms(layer, {k: table[k] for k in rows}, symbols=symbols)


def model_terms(act: PaperActivations) -> tuple[Term, ...]:
    """The per-layer rows, then the all-layers total."""
    per_layer = act.layer.activation_bytes_per_layer
    symbols: dict[str, dict[str, Scalar]] = {
        "activation_bytes": {"per_layer": per_layer, "L": act.layers}
    }
    total = terms(
        act, {"activation_bytes": MODEL_EXPLANATIONS["activation_bytes"]}, symbols=symbols
    )
    return (*layer_terms(act.layer), *total)


def logits_row_terms(lg: Logits) -> tuple[Term, ...]:
    """The bf16 and fp32 logits, and the fp32 share of one rank."""
    svb: dict[str, Scalar] = {"s": lg.s, "b": lg.b, "V": lg.vocab_size}
    symbols: dict[str, dict[str, Scalar]] = {
        "logits_bf16_bytes": svb,
        "logits_fp32_bytes": svb,
        "logits_fp32_bytes_per_rank": {"t": lg.t},
    }
    return terms(lg, {k: LOGITS_EXPLANATIONS[k] for k in LOGITS_ROWS}, symbols=symbols)
