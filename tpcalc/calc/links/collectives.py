"""Bytes moved by ring collectives, per rank.

Two conventions are in use in the sources and tpcalc names which one a figure uses:
- ``ring``: bytes each rank *sends* in a bandwidth-optimal ring (Patarasuk & Yuan 2009;
  seed 003 §7.1.3/§7.3.5: an all-reduce sends 2(n-1)/n of the message per rank);
- ``message``: the size of the tensor being reduced or gathered (seed 000's "3.4x" compares
  message sizes).
"""

from __future__ import annotations

from enum import Enum

from tpcalc.errors import InputError


class Collective(str, Enum):
    all_reduce = "all-reduce"
    all_gather = "all-gather"
    reduce_scatter = "reduce-scatter"
    all_to_all = "all-to-all"
    p2p = "send/recv"


class BytesConvention(str, Enum):
    """What "bytes moved" means in a result."""

    ring = "ring"  # bytes each rank sends in a ring collective
    message = "message"  # the size of the full tensor (the message)


def ring_factor(collective: Collective, n: int) -> float:
    """Fraction of the full message each rank sends in a ring collective over n ranks.

    all-reduce 2(n-1)/n; all-gather and reduce-scatter (n-1)/n each (so an all-reduce is exactly
    one reduce-scatter plus one all-gather); all-to-all (n-1)/n (each rank keeps 1/n of its
    buffer); send/recv 1 between two distinct stages. Source: Patarasuk & Yuan 2009
    "Bandwidth optimal all-reduce algorithms"; seed 003 §7.3.5 (2(t-1)/t per all-reduce).
    n = 1 moves nothing.
    """
    if n < 1:
        raise InputError(f"a collective's group size must be a positive integer, got {n}")
    if n == 1:
        return 0.0
    if collective is Collective.all_reduce:
        return 2 * (n - 1) / n
    if collective is Collective.p2p:
        return 1.0
    return (n - 1) / n


def send_bytes_per_rank(
    collective: Collective, message_bytes: float, n: int, convention: BytesConvention
) -> float:
    """Bytes one rank sends for one collective of a ``message_bytes`` tensor over n ranks.

    Under the ``message`` convention the message size itself is reported (zero when n = 1,
    since nothing is communicated). Source: see ``ring_factor``.
    """
    if n == 1:
        return 0.0
    if convention is BytesConvention.message:
        return float(message_bytes)
    return ring_factor(collective, n) * message_bytes
