"""One rank's memory under tensor parallelism alone (``tpcalc memory``): activations + logits +
model states against the card. No ZeRO or DP here (``tpcalc zero`` and ``tpcalc layout`` add
them). The parts come from ``tpcalc.calc.activations`` and ``tpcalc.calc.params.states``; the
explanations are in ``tpcalc.calc.tp.memory_explain``."""

from __future__ import annotations

from msgspec import Struct


class TpMemoryTotal(Struct, frozen=True):
    """The per-rank total of the three parts, and what is left on the card."""

    activation_bytes_per_rank: float
    logits_fp32_bytes_per_rank: float
    model_states_bytes: float
    total_bytes_per_rank: float
    card_bytes: float
    free_bytes: float
    fits: bool


def tp_memory_total(
    *, activation_bytes: float, logits_bytes: float, states_bytes: float, card_bytes: float
) -> TpMemoryTotal:
    """total = activations + logits + model states; free = card − total (seed 000: 80 GB −
    55.6 GB = 24.4 GB left for activations)."""
    total = activation_bytes + logits_bytes + states_bytes
    return TpMemoryTotal(
        activation_bytes_per_rank=activation_bytes,
        logits_fp32_bytes_per_rank=logits_bytes,
        model_states_bytes=states_bytes,
        total_bytes_per_rank=total,
        card_bytes=card_bytes,
        free_bytes=card_bytes - total,
        fits=total <= card_bytes,
    )
