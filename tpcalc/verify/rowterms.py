"""Terms of a verification row: the comparison with one card, and the tally priced in bytes.

Differing cells are a JSON string of [row, col] pairs (0-based) because a term value is a
scalar. Communication is priced from the simulated tally: the toy at its own size (float64 on
t cards) and a real model at ``model_t`` (message = tokens × width × dtype bytes, width =
hidden_size or intermediate_size), under both byte conventions.
"""

from __future__ import annotations

from tpcalc.calc.links.collectives import BytesConvention, Collective
from tpcalc.errors import DivisibilityError, InputError, divisors
from tpcalc.specs import ModelSpec
from tpcalc.terms import Scalar, Term, Unit, term
from tpcalc.units import Dtype
from tpcalc.verify.schemes import DIFF_ATOL, Diff
from tpcalc.verify.sim import CollectiveCall, Phase, Role, Tally

SRC_BENCH = "seed 000 验算台 (verification bench); Shoeybi et al. 2019 §3"
SRC_MSG = "seed 000 §代价: message = tokens × width × dtype bytes (4,096 × 5,120 × 2)"
SRC_RING = "Patarasuk & Yuan 2009: ring all-reduce 2(t-1)/t, all-gather (t-1)/t per rank"
SRC_RATIO = (
    "seed 000 常见误解之二 (3.4×, message sizes); seed-figures q-allgather-vs-ar (1.7× ring)"
)


def diff_terms(diff: Diff, what: str = "output") -> list[Term]:
    """Whether t cards equal one card, the max |difference| and the differing cells."""
    return [
        term("matches_single_card", f"{what} = 1 card", diff.matches, Unit.text),
        term(
            "max_abs_diff",
            "max |diff|",
            diff.max_abs_diff,
            Unit.count,
            formula="max |parallel - single card| over all cells",
            source=SRC_BENCH,
        ),
        term("differing_cells_count", "differing cells", len(diff.cells), Unit.count),
        term(
            "differing_cells",
            f"differing (row,col), |diff|>{DIFF_ATOL:g}",
            diff.cells_json(),
            Unit.text,
        ),
    ]


def tally_terms(tally: Tally) -> list[Term]:
    """The collectives the simulation performed, counted from its tally."""
    return [
        term("collectives", "collectives (counted)", tally.describe(), Unit.text),
        term("all_reduce_count", "all-reduces", tally.count(Collective.all_reduce), Unit.count),
        term("all_gather_count", "all-gathers", tally.count(Collective.all_gather), Unit.count),
    ]


def _width(call: CollectiveCall, spec: ModelSpec) -> int:
    return spec.intermediate_size if call.role is Role.intermediate else spec.hidden_size


def model_send_bytes(
    call: CollectiveCall, spec: ModelSpec, tokens: int, dtype: Dtype, t: int, conv: BytesConvention
) -> float:
    """Per-rank bytes of the same collective on the real model: a [tokens, width] message in
    ``dtype`` (seed 000 §代价: 4,096 × 5,120 × 2 bytes) over t ranks, under ``conv``."""
    shape = (tokens, _width(call, spec))
    real = CollectiveCall(call.op, call.phase, call.role, call.label, shape, dtype.bytes, t)
    return real.send_bytes_per_rank(conv)


RING_K = "k = 2(t-1)/t per all-reduce, (t-1)/t per all-gather"
TOY_RING = f"Σ k·T·w·8 over the collectives (T×w float64 message; {RING_K})"
TOY_MSG = "Σ T·w·8 over the collectives (message size)"
MODEL_RING = f"Σ k·s·b·w·B, w = hidden_size or intermediate_size ({RING_K})"
MODEL_MSG = "Σ s·b·w·B, w = hidden_size or intermediate_size (message size)"


def bytes_terms(
    tally: Tally, spec: ModelSpec, tokens: int, dtype: Dtype, model_t: int
) -> list[Term]:
    """Per-rank bytes of every collective in the tally: toy and real model, ring and message."""
    ring, msg = BytesConvention.ring, BytesConvention.message
    subs: dict[str, Scalar] = {
        "t": model_t,
        "s_b": tokens,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "B": dtype.bytes,
    }

    def model(conv: BytesConvention) -> float:
        return sum(model_send_bytes(c, spec, tokens, dtype, model_t, conv) for c in tally.calls)

    def toy(conv: BytesConvention) -> float:
        return sum(c.send_bytes_per_rank(conv) for c in tally.calls)

    return [
        term(
            "toy_ring_send_bytes_per_rank",
            "toy sent/rank (ring)",
            toy(ring),
            Unit.bytes,
            formula=TOY_RING,
            source=SRC_RING,
        ),
        term(
            "toy_message_bytes",
            "toy messages",
            toy(msg),
            Unit.bytes,
            formula=TOY_MSG,
            source=SRC_MSG,
        ),
        term(
            "model_ring_send_bytes_per_rank",
            "model sent/rank (ring)",
            model(ring),
            Unit.bytes,
            formula=MODEL_RING,
            source=f"{SRC_MSG}; {SRC_RING}",
            symbols=subs,
        ),
        term(
            "model_message_bytes",
            "model messages",
            model(msg),
            Unit.bytes,
            formula=MODEL_MSG,
            source=SRC_MSG,
            symbols=subs,
        ),
    ]


RATIO_FORMULA = {
    BytesConvention.message: "(s·b·I·B) / (s·b·h·B) = I / h",
    BytesConvention.ring: "((t-1)/t·s·b·I·B) / (2(t-1)/t·s·b·h·B) = I / (2h)",
}


def ratio_terms(
    gather: CollectiveCall,
    reduce: CollectiveCall,
    spec: ModelSpec,
    tokens: int,
    dtype: Dtype,
    t: int,
) -> list[Term]:
    """All-gather of the intermediate (column → column) against all-reduce of the output
    (column → row) on the real model, under both conventions: 3.4× in message size, 1.7× in
    ring bytes per rank for Qwen3.8 (seed 000 常见误解之二; seed-figures q-allgather-vs-ar)."""
    out: list[Term] = []
    subs: dict[str, Scalar] = {"t": t, "s_b": tokens, "B": dtype.bytes}
    for conv in (BytesConvention.message, BytesConvention.ring):
        ag = model_send_bytes(gather, spec, tokens, dtype, t, conv)
        ar = model_send_bytes(reduce, spec, tokens, dtype, t, conv)
        ring = conv is BytesConvention.ring
        key = "ring_send_bytes_per_rank" if ring else "message_bytes"
        src = f"{SRC_MSG}; {SRC_RING}" if ring else SRC_MSG
        out += [
            term(
                f"all_gather_intermediate_{key}",
                f"all-gather intermediate ({conv.value})",
                ag,
                Unit.bytes,
                formula=("(t-1)/t·" if ring else "") + "s·b·I·B",
                source=src,
                I=spec.intermediate_size,
                symbols=subs,
            ),
            term(
                f"all_reduce_output_{key}",
                f"all-reduce output ({conv.value})",
                ar,
                Unit.bytes,
                formula=("2(t-1)/t·" if ring else "") + "s·b·h·B",
                source=src,
                h=spec.hidden_size,
                symbols=subs,
            ),
            term(
                f"{conv.value}_ratio",
                f"ratio ({conv.value})",
                ag / ar if ar else None,
                Unit.times,
                formula=RATIO_FORMULA[conv],
                source=SRC_RATIO,
                I=spec.intermediate_size,
                h=spec.hidden_size,
                t=t,
            ),
        ]
    return out


def phase_terms(tally: Tally) -> list[Term]:
    """All-reduces per phase, counted from the tally (f: backward, g: forward)."""
    return [
        term("collectives", "collectives (counted)", tally.describe(), Unit.text),
        term(
            "forward_all_reduce_count",
            "fwd all-reduces",
            tally.count(Collective.all_reduce, Phase.forward),
            Unit.count,
            source="g: Shoeybi et al. 2019 §3; seed 003 §7.3.3",
        ),
        term(
            "backward_all_reduce_count",
            "bwd all-reduces",
            tally.count(Collective.all_reduce, Phase.backward),
            Unit.count,
            source="f: Shoeybi et al. 2019 §3; seed 003 §7.3.3",
        ),
    ]


# The bench multiplies the toy matrices for real, once per simulated card. These bounds (256x and
# 512x seed 000's 16-wide FFN on 2 cards; `--intermediate 1000000001` ran for minutes) keep a
# run within a second.
MAX_TOY_INTERMEDIATE = 4096
MAX_TOY_CARDS = 2**10


def check_cards(cards: int, intermediate: int) -> None:
    """--cards must divide --intermediate (column → row splits the intermediate evenly)."""
    if not 0 < intermediate <= MAX_TOY_INTERMEDIATE:
        raise InputError(
            f"--intermediate must be a positive integer up to {MAX_TOY_INTERMEDIATE:,} (the toy "
            f"FFN is simulated in full), got {intermediate}"
        )
    if not 0 < cards <= MAX_TOY_CARDS:
        raise InputError(
            f"--cards must be a positive integer up to {MAX_TOY_CARDS:,} (each card is "
            f"simulated), got {cards}"
        )
    if intermediate % cards:
        valid = ", ".join(str(d) for d in divisors(intermediate))  # O(sqrt n)
        raise DivisibilityError(
            f"--cards={cards} does not divide --intermediate={intermediate}: use one of {valid}"
        )
