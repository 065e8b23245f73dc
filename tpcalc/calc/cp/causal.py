"""Causal load balance of context parallelism: contiguous versus zig-zag chunk assignment.

With a causal mask, query chunk i attends to chunks 0..i, so a contiguous split gives the last
rank the most work (seed 000: 16 chunks on 4 cards, 10 : 26 : 42 : 58). Zig-zag deals chunks
in head/tail pairs, each pair costing the same, so every rank gets the same work.
"""

from __future__ import annotations

from enum import Enum

from msgspec import Struct

from tpcalc.errors import DivisibilityError, InputError, divide

ZIGZAG = (
    "seed 000 summary: contiguous 10:26:42:58, zig-zag pairs head and tail; Megatron-Core CP "
    "load balancing (2·cp chunks, rank r holds chunks r and 2cp-1-r)"
)


class CausalSplit(str, Enum):
    """How the chunks of a causal sequence are assigned to cp ranks."""

    contiguous = "contiguous"  # rank r holds chunks [r·n/cp, (r+1)·n/cp)
    zigzag = "zigzag"  # chunks paired head-and-tail: (i, n-1-i), pairs dealt to ranks


def chunk_causal_work(n_chunks: int) -> list[int]:
    """Causal attention work of each query chunk, in block pairs: chunk i attends to i+1 blocks.

    The diagonal block counts as one whole block (the kernel computes it with a mask), which is
    how seed 000 counts: 16 chunks on 4 ranks give 10 : 26 : 42 : 58. Source: ``ZIGZAG``.
    """
    if n_chunks < 1:
        raise InputError(f"chunks={n_chunks} must be a positive integer")
    return [i + 1 for i in range(n_chunks)]


def rank_chunks(n_chunks: int, cp: int, split: CausalSplit) -> list[list[int]]:
    """Chunk indices held by each of ``cp`` ranks. Zig-zag needs chunks divisible by 2·cp."""
    if split is CausalSplit.contiguous:
        per = divide(n_chunks, cp, what="chunks", by="cp")
        return [list(range(r * per, (r + 1) * per)) for r in range(cp)]
    if cp <= 0:
        raise InputError(f"cp={cp} must be a positive integer")
    if n_chunks % (2 * cp):
        raise DivisibilityError(
            f"chunks={n_chunks} is not divisible by 2·cp={2 * cp}: zig-zag pairs head and tail "
            f"chunks, so use a multiple of {2 * cp}"
        )
    pairs = [(i, n_chunks - 1 - i) for i in range(n_chunks // 2)]
    per = len(pairs) // cp
    out: list[list[int]] = []
    for r in range(cp):
        mine = pairs[r * per : (r + 1) * per]
        out.append(sorted(c for pair in mine for c in pair))
    return out


def causal_work_per_rank(n_chunks: int, cp: int, split: CausalSplit) -> list[int]:
    """Causal attention work per rank (block pairs), summed over the chunks each rank holds.

    A head/tail pair (i, n-1-i) costs (i+1) + (n-i) = n+1 whatever i is, so zig-zag is exactly
    balanced whenever the pairs divide evenly among the ranks. Source: ``ZIGZAG``.
    """
    work = chunk_causal_work(n_chunks)
    return [sum(work[c] for c in chunks) for chunks in rank_chunks(n_chunks, cp, split)]


class CausalBalance(Struct, frozen=True):
    """Causal attention work per rank (block pairs) under both splits, and max/mean imbalance."""

    chunks: int
    contiguous_work: tuple[int, ...]
    zigzag_work: tuple[int, ...]
    mean_work: float
    causal_imbalance_contiguous_ratio: float
    causal_imbalance_zigzag_ratio: float


def causal_balance(n_chunks: int, cp: int) -> CausalBalance:
    """Contiguous and zig-zag splits of ``n_chunks`` causal chunks over cp ranks (``ZIGZAG``)."""
    contiguous = causal_work_per_rank(n_chunks, cp, CausalSplit.contiguous)
    zigzag = causal_work_per_rank(n_chunks, cp, CausalSplit.zigzag)
    mean = sum(contiguous) / cp
    return CausalBalance(
        chunks=n_chunks,
        contiguous_work=tuple(contiguous),
        zigzag_work=tuple(zigzag),
        mean_work=mean,
        causal_imbalance_contiguous_ratio=max(contiguous) / mean,
        causal_imbalance_zigzag_ratio=max(zigzag) / mean,
    )
