"""Units: the only home of conversion constants and dtype sizes.

Inside tpcalc every quantity is in a base unit (bytes, seconds, FLOP, bytes/s) and the unit is
part of the field name. Decimal prefixes are the default because both seed documents use them
(GB = 1e9 bytes); binary ones exist for ``--units GiB``.
"""

from __future__ import annotations

from enum import Enum

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

TFLOP = 10**12
PFLOP = 10**15

MS = 1e-3
US = 1e-6

BITS_PER_BYTE = 8
SECONDS_PER_HOUR = 3600
HOURS_PER_YEAR = 24 * 365.25


class Dtype(str, Enum):
    """Element types a tensor can be stored in."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"

    @property
    def bytes(self) -> int:
        return DTYPE_BYTES[self]


DTYPE_BYTES: dict[Dtype, int] = {Dtype.fp32: 4, Dtype.bf16: 2, Dtype.fp16: 2, Dtype.fp8: 1}


class ByteUnits(str, Enum):
    """How byte quantities are displayed: decimal (the documents' GB) or binary (GiB)."""

    GB = "GB"
    GiB = "GiB"


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    """A NIC rated in Gb/s moves gbit/8 GB/s (seed 003 table 7-7: 400 Gb/s = 50 GB/s)."""
    return gbit_per_s * GB / BITS_PER_BYTE
