"""A saved tensor as a record (name, per-rank shape, dtype, bytes, split) and the rank's layout.

Shapes are one rank's: tokens divided by context parallelism (CP, s/cp) everywhere, by t in the
sequence-parallel regions (norms, dropout, residual: SP), and heads or FFN columns divided by t
inside the tensor-parallel regions (TP). Source for which region splits how: Korthikanti et al.
2022 §4.2 (TP and SP), Megatron-Core context-parallel docs (CP splits every token dimension).
"""

from __future__ import annotations

import math
from enum import Enum

from msgspec import Struct

from tpcalc.calc.activations.paper import require_sp_seq
from tpcalc.errors import DivisibilityError, InputError, divide
from tpcalc.units import Dtype


class SavedDtype(str, Enum):
    """Element type of a saved tensor: the activation dtypes plus masks and indices."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp64 = "fp64"  # Megatron --moe-router-dtype fp64
    bool = "bool"  # dropout masks (torch.native_dropout keeps one byte per element)
    int64 = "int64"  # top-k expert indices

    @property
    def bytes(self) -> int:
        return SAVED_DTYPE_BYTES[self]

    @classmethod
    def of(cls, dtype: Dtype) -> SavedDtype:
        return cls(dtype.value)


SAVED_DTYPE_BYTES = {
    SavedDtype.fp32: 4,
    SavedDtype.bf16: 2,
    SavedDtype.fp16: 2,
    SavedDtype.fp8: 1,
    SavedDtype.fp64: 8,
    SavedDtype.bool: 1,
    SavedDtype.int64: 8,
}


class Split(str, Enum):
    """Which parallelism divides a tensor on this rank."""

    tp = "TP"  # heads or FFN columns / t
    sp = "SP"  # tokens / t (norm, dropout, residual regions)
    cp = "CP"  # tokens / cp


class TensorRecord(Struct, frozen=True, kw_only=True):
    """One tensor autograd keeps for backward, as held by one rank."""

    name: str
    part: str
    shape: tuple[int, ...]
    dtype: SavedDtype
    bytes: int
    splits: tuple[Split, ...] = ()
    in_paper: bool = False  # one of the tensors Korthikanti et al. 2022 Table 2 counts
    note: str = ""

    @property
    def split(self) -> str:
        """'TP+CP', 'SP', ... or 'none'."""
        return "+".join(s.value for s in self.splits) or "none"


def rec(
    name: str,
    part: str,
    shape: tuple[int, ...],
    dtype: SavedDtype,
    splits: tuple[Split, ...],
    *,
    paper: bool = False,
    note: str = "",
) -> TensorRecord:
    """A record whose bytes are the product of its shape times the element size."""
    return TensorRecord(
        name=name,
        part=part,
        shape=shape,
        dtype=dtype,
        bytes=math.prod(shape) * dtype.bytes,
        splits=splits,
        in_paper=paper,
        note=note,
    )


class Layout(Struct, frozen=True):
    """One rank's token counts and splits for sequence s, micro-batch b, t, cp and SP."""

    s: int
    b: int
    t: int
    cp: int
    sp: bool
    act: SavedDtype

    @classmethod
    def build(cls, seq: int, micro_batch: int, t: int, cp: int, sp: bool, act: Dtype) -> Layout:
        if seq < 1 or micro_batch < 1:
            raise InputError(f"seq={seq} and micro_batch={micro_batch} must be positive integers")
        divide(seq, cp, what="seq", by="cp")
        if sp:
            require_sp_seq(seq, t, cp)
        return cls(seq, micro_batch, t, cp, sp and t > 1, SavedDtype.of(act))

    @property
    def tokens(self) -> int:
        """Tokens per rank inside attention and MLP (the TP region): s/cp."""
        return self.s // self.cp

    @property
    def norm_tokens(self) -> int:
        """Tokens per rank in the norm/dropout/residual region: s/(cp·t) with SP, else s/cp."""
        return self.tokens // self.t if self.sp else self.tokens

    def _with_cp(self, *splits: Split) -> tuple[Split, ...]:
        return (*splits, Split.cp) if self.cp > 1 else tuple(splits)

    @property
    def tp_split(self) -> tuple[Split, ...]:
        return self._with_cp(Split.tp) if self.t > 1 else self._with_cp()

    @property
    def norm_split(self) -> tuple[Split, ...]:
        return self._with_cp(Split.sp) if self.sp else self._with_cp()

    @property
    def replicated_split(self) -> tuple[Split, ...]:
        """Full s/cp tokens, not divided by t (replicated on every TP rank)."""
        return self._with_cp()

    def heads(self, n: int, what: str) -> int:
        """Heads (or FFN columns) per rank: n/t, which must divide."""
        return divide(n, self.t, what=what, by="t")

    def kv_heads(self, g: int) -> int:
        """KV heads per rank: g/t, or 1 when t > g and each KV head is replicated t/g times."""
        if g % self.t == 0:
            return g // self.t
        if self.t % g == 0:
            return 1
        raise DivisibilityError(
            f"num_key_value_heads={g} and t={self.t} do not divide one another; "
            "pick t that divides or is a multiple of the KV heads"
        )
