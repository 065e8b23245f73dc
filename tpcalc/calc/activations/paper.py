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

from msgspec import Struct

from tpcalc.choices import FullRecomputeSharding, Recompute
from tpcalc.errors import DivisibilityError
from tpcalc.specs import ModelSpec
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


class PaperLayer(Struct, frozen=True):
    """Activation bytes of one layer on one rank (Table 2), as parts of the per-layer total.

    Under full recompute only ``layer_input_bytes`` is kept; otherwise the unsplit, split and
    scores parts (``scores`` 0 under selective recompute). Labels, formulas and sources:
    ``tpcalc.calc.activations.paper_explain``."""

    s: int
    b: int
    h: int
    a: int
    t: int
    sp: bool
    recompute: Recompute
    input_divisor: int  # t when full recompute shards the input with SP, else 1
    unsplit_divisor: int  # t with SP, else 1
    layer_input_bytes: float
    unsplit_bytes_per_layer: float
    split_bytes_per_layer: float
    scores_bytes_per_layer: float
    activation_bytes_per_layer: float


class PaperActivations(Struct, frozen=True):
    """Table 2's layer times all L layers (seed 000 counts all 64)."""

    layer: PaperLayer
    layers: int
    activation_bytes: float


def paper_layer(
    spec: ModelSpec,
    *,
    seq: int,
    micro_batch: int,
    t: int,
    sp: bool,
    recompute: Recompute,
    full_sharding: FullRecomputeSharding = FullRecomputeSharding.paper,
) -> PaperLayer:
    """Activation bytes of one layer on one rank: 10·sbh/(t if SP) + 24·sbh/t + 5·a·s²·b/t
    (no recompute), or 2·sbh (full recompute, /t when sharded with SP). Source: ``SRC``."""
    s, b, h, a = seq, micro_batch, spec.hidden_size, spec.num_attention_heads
    sbh = s * b * h
    full = recompute is Recompute.full
    input_div = t if (sp and full_sharding is FullRecomputeSharding.sp) else 1
    unsplit_div = t if sp else 1
    if full:
        layer_input = FULL_RECOMPUTE_COEFF * sbh / input_div
        unsplit = split = scores = 0.0
        total = layer_input
    else:
        layer_input = 0.0
        unsplit = UNSPLIT_COEFF * sbh / unsplit_div
        split = SPLIT_COEFF * sbh / t
        scores = SCORES_COEFF * a * s * s * b / t if recompute is Recompute.none else 0.0
        total = unsplit + split + scores
    return PaperLayer(
        s=s, b=b, h=h, a=a, t=t, sp=sp, recompute=recompute, input_divisor=input_div,
        unsplit_divisor=unsplit_div, layer_input_bytes=layer_input,
        unsplit_bytes_per_layer=unsplit, split_bytes_per_layer=split,
        scores_bytes_per_layer=scores, activation_bytes_per_layer=total,
    )  # fmt: skip


def paper_activations(
    spec: ModelSpec,
    *,
    seq: int,
    micro_batch: int,
    t: int,
    sp: bool,
    recompute: Recompute,
    full_sharding: FullRecomputeSharding = FullRecomputeSharding.paper,
) -> PaperActivations:
    """``paper_layer`` × L (seed 000: 34·s·b·h·L = 45.6 GB)."""
    layer = paper_layer(
        spec, seq=seq, micro_batch=micro_batch, t=t, sp=sp, recompute=recompute,
        full_sharding=full_sharding,
    )  # fmt: skip
    L = spec.num_hidden_layers
    return PaperActivations(
        layer=layer, layers=L, activation_bytes=layer.activation_bytes_per_layer * L
    )


class Logits(Struct, frozen=True):
    """LM-head logits [s, b, V] in BF16 and FP32, and the FP32 share one rank keeps."""

    s: int
    b: int
    vocab_size: int
    t: int
    logits_bf16_bytes: int
    logits_fp32_bytes: int
    logits_fp32_bytes_per_rank: float


def logits(spec: ModelSpec, *, seq: int, micro_batch: int, t: int) -> Logits:
    """s·b·V·bytes(dtype); per rank with a vocab-parallel cross-entropy that keeps 1/t (seed 003
    §7.3.4: 2.10 GB and 4.20 GB)."""
    n = seq * micro_batch * spec.vocab_size
    return Logits(
        s=seq, b=micro_batch, vocab_size=spec.vocab_size, t=t,
        logits_bf16_bytes=Dtype.bf16.bytes * n, logits_fp32_bytes=Dtype.fp32.bytes * n,
        logits_fp32_bytes_per_rank=Dtype.fp32.bytes * n / t,
    )  # fmt: skip
