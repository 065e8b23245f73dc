"""Activation memory per layer and per model: Korthikanti et al. 2022, Table 2 (the "paper" model).

Bytes per transformer layer, 16-bit activations, 1-byte dropout masks, a = attention heads:
  no parallelism          s·b·h·(34 + 5·a·s/h)
  tensor parallel         s·b·h·(10 + 24/t + 5·a·s/(h·t))
  tensor + sequence par.  s·b·h/t·(34 + 5·a·s/h)
  selective recompute     drops the 5·a·s/h term (attention scores, softmax, its dropout)
  full recompute          2·s·b·h: only the layer input is kept. The paper does not divide it by t
                          (Table 2); with SP the input is sharded on s, so /t is an option.
The "10" is what TP does not split (layer-norm inputs, dropout masks, residual: seed 003 table
7-8, "about 10sbh"); the 24 is split by t; SP splits the 10 too (seed 000: 45.6 GB -> 5.7 GB).
"""

from __future__ import annotations

from tpcalc.choices import FullRecomputeSharding, Recompute
from tpcalc.errors import DivisibilityError
from tpcalc.specs import ModelSpec
from tpcalc.terms import Term, Unit, term
from tpcalc.units import Dtype

SRC = "Korthikanti et al. 2022 Table 2"
UNSPLIT_COEFF = 10  # s·b·h multiples TP leaves whole: norm inputs, dropout masks (§4.2.1)
SPLIT_COEFF = 24  # s·b·h multiples TP divides by t: Q, K, V, attention out, MLP 4h (§4.2.1)
SCORES_COEFF = 5  # a·s²·b multiples: QKᵀ (2), softmax out (2), its dropout mask (1) (§4.1)
FULL_RECOMPUTE_COEFF = 2  # the 16-bit layer input, 2·s·b·h bytes (§5)


def sp_seq_problem(seq: int, t: int, cp: int = 1) -> str | None:
    """Why sequence parallelism cannot split this rank's s/cp tokens t ways, or None.

    SP shards the sequence dimension of the norm/dropout region over the t ranks (Korthikanti
    et al. 2022 §4.2.2), so t must divide s/cp. Callers check s % cp first.
    """
    local = seq // cp
    if t > 1 and local % t:
        return (
            f"seq/cp={local} is not divisible by t={t}: sequence parallelism splits the tokens "
            "t ways; pick seq a multiple of t·cp or turn SP off"
        )
    return None


def require_sp_seq(seq: int, t: int, cp: int = 1) -> None:
    """DivisibilityError with ``sp_seq_problem``'s message when SP cannot split the sequence."""
    problem = sp_seq_problem(seq, t, cp)
    if problem is not None:
        raise DivisibilityError(problem)


def paper_layer_terms(
    spec: ModelSpec,
    *,
    seq: int,
    micro_batch: int,
    t: int,
    sp: bool,
    recompute: Recompute,
    full_sharding: FullRecomputeSharding = FullRecomputeSharding.paper,
) -> tuple[Term, ...]:
    """Activation bytes of one layer on one rank, as parts that add up to the Table 2 formula."""
    s, b, h, a = seq, micro_batch, spec.hidden_size, spec.num_attention_heads
    sbh = s * b * h
    total = "activation_bytes_per_layer"
    if recompute is Recompute.full:
        div = t if (sp and full_sharding is FullRecomputeSharding.sp) else 1
        value = FULL_RECOMPUTE_COEFF * sbh / div
        return (
            term(
                "layer_input_bytes",
                "paper: layer input (2sbh)",
                value,
                Unit.bytes,
                formula="2·s·b·h" + ("/t" if div > 1 else ""),
                source=f"{SRC} (full recompute)",
                part_of=total,
                s=s,
                b=b,
                h=h,
                t=div,
            ),
            term(total, "paper: per layer", value, Unit.bytes, formula="sum of parts", source=SRC),
        )
    unsplit_div = t if sp else 1
    unsplit = UNSPLIT_COEFF * sbh / unsplit_div
    split = SPLIT_COEFF * sbh / t
    scores = SCORES_COEFF * a * s * s * b / t if recompute is Recompute.none else 0.0
    return (
        term(
            "unsplit_bytes_per_layer",
            "paper: norm/dropout/residual (10sbh)",
            unsplit,
            Unit.bytes,
            formula="10·s·b·h" + ("/t (SP)" if sp else " (TP does not split it)"),
            source=f"{SRC}; seed 003 table 7-8",
            part_of=total,
            s=s,
            b=b,
            h=h,
            t=unsplit_div,
        ),
        term(
            "split_bytes_per_layer",
            "paper: Q,K,V,MLP (24sbh/t)",
            split,
            Unit.bytes,
            formula="24·s·b·h/t",
            source=SRC,
            part_of=total,
            s=s,
            b=b,
            h=h,
            t=t,
        ),
        term(
            "scores_bytes_per_layer",
            "paper: attention scores (5as²b)",
            scores,
            Unit.bytes,
            formula="5·a·s²·b/t" if recompute is Recompute.none else "0 (selective recompute)",
            source=f"{SRC}; §5 selective recompute drops it",
            part_of=total,
            a=a,
            s=s,
            b=b,
            t=t,
        ),
        term(
            total,
            "paper: per layer",
            unsplit + split + scores,
            Unit.bytes,
            formula=_formula(sp, recompute),
            source=SRC,
        ),
    )


def _formula(sp: bool, recompute: Recompute) -> str:
    scores = "" if recompute is Recompute.selective else " + 5as/h"
    if sp:
        return f"s·b·h/t·(34{scores})"
    return f"s·b·h·(10 + 24/t{scores.replace('/h', '/(h·t)')})"


def paper_model_terms(
    spec: ModelSpec,
    *,
    seq: int,
    micro_batch: int,
    t: int,
    sp: bool,
    recompute: Recompute,
    full_sharding: FullRecomputeSharding = FullRecomputeSharding.paper,
) -> tuple[Term, ...]:
    """Per-layer parts, then the per-model total over all L layers (seed 000 counts all 64)."""
    layer = paper_layer_terms(
        spec,
        seq=seq,
        micro_batch=micro_batch,
        t=t,
        sp=sp,
        recompute=recompute,
        full_sharding=full_sharding,
    )
    per_layer = layer[-1].number
    layers = spec.num_hidden_layers
    return (
        *layer,
        term(
            "activation_bytes",
            "paper: all layers",
            per_layer * layers,
            Unit.bytes,
            formula="per layer · L",
            source=f"{SRC}; seed 000 (34·s·b·h·L = 45.6 GB)",
            per_layer=per_layer,
            L=layers,
        ),
    )


def logits_terms(spec: ModelSpec, *, seq: int, micro_batch: int, t: int) -> tuple[Term, ...]:
    """LM-head logits [s, b, V]: BF16 and the FP32 copy for cross-entropy; per rank with a
    vocab-parallel cross-entropy that keeps 1/t (seed 003 §7.3.4: 2.10 GB and 4.20 GB)."""
    n = seq * micro_batch * spec.vocab_size
    src = "seed 003 §7.3.4 (VocabParallelCrossEntropy keeps 1/t)"
    full = tuple(
        term(f"logits_{d.value}_bytes", f"logits {d.value}", d.bytes * n, Unit.bytes,
             formula=f"s·b·V·{d.bytes}", source=src, s=seq, b=micro_batch, V=spec.vocab_size)
        for d in (Dtype.bf16, Dtype.fp32)
    )  # fmt: skip
    return (
        *full,
        term(
            "logits_fp32_bytes_per_rank",
            "logits fp32 per rank",
            Dtype.fp32.bytes * n / t,
            Unit.bytes,
            formula="s·b·V·4/t",
            source=src,
            t=t,
        ),
    )
