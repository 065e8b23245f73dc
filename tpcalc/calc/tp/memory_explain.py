"""Label, formula and source of every ``TpMemoryTotal`` field (the explain layer beside
``memory.py``): the total, card, free and fits rows of ``tpcalc memory``."""

from __future__ import annotations

from tpcalc.calc.tp.memory import TpMemoryTotal
from tpcalc.explain import Explanation, terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Term, Unit

SRC_FREE = "seed 000 (80 GB − 55.6 GB = 24.4 GB left for activations)"
TOTAL_ROWS = ("total_bytes_per_rank", "card_bytes", "free_bytes", "fits")


def explanations(hw: HardwareSpec) -> dict[str, Explanation]:
    """The explain table of ``TpMemoryTotal``; the parts' own rows (with their sources) come
    from the activation, logits and states tables."""
    return {
        "activation_bytes_per_rank": Explanation(
            "activations", Unit.bytes, "the chosen activation model's total",
            "tpcalc.calc.activations (paper or exact)",
        ),
        "logits_fp32_bytes_per_rank": Explanation(
            "logits fp32 per rank", Unit.bytes, "s·b·V·4/t", "seed 003 §7.3.4"
        ),
        "model_states_bytes": Explanation(
            "model states", Unit.bytes, "N/t × bytes_per_param", "the state recipe"
        ),
        "total_bytes_per_rank": Explanation(
            "total", Unit.bytes,
            "activations + logits + model states (no ZeRO/DP: see tpcalc zero)",
            "sum of the parts",
        ),
        "card_bytes": Explanation("card", Unit.bytes, "hardware config", hw.memory_bytes.source),
        "free_bytes": Explanation("free", Unit.bytes, "card − total", SRC_FREE),
        # no source: a comparison, printed as it always was
        "fits": Explanation("fits", Unit.text, "total ≤ card", ""),
    }  # fmt: skip


def total_terms(m: TpMemoryTotal, hw: HardwareSpec) -> tuple[Term, ...]:
    """The rows after the parts: total, card, free, fits."""
    table = explanations(hw)
    return terms(m, {k: table[k] for k in TOTAL_ROWS})
