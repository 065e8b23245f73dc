"""Simulated cards: t numpy "GPUs" whose collectives are real operations that also keep a tally.

Every collective the verification bench needs (all-reduce, all-gather) is performed here on the
per-card arrays, and each call appends a ``CollectiveCall`` to the group's ``Tally``: which
collective, forward or backward, which tensor (a hidden-wide activation or the intermediate),
its shape and element size. Communication figures are therefore counted from what the
simulation did, never typed in. A group of one card communicates nothing and records nothing,
as Megatron-LM's ``_reduce`` returns its input when the world size is 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from math import prod

import numpy as np
from msgspec import Struct, field

from tpcalc.calc.links.collectives import BytesConvention, Collective, send_bytes_per_rank
from tpcalc.errors import InputError, divide


class Phase(str, Enum):
    forward = "forward"
    backward = "backward"


class Role(str, Enum):
    """Which tensor a collective moves; it fixes the width used for a real model's message."""

    hidden = "hidden"  # [tokens, hidden_size]: a block's input or output
    intermediate = "intermediate"  # [tokens, intermediate_size]: the MLP's inner activation


class CollectiveCall(Struct, frozen=True):
    """One collective the simulation performed."""

    op: Collective
    phase: Phase
    role: Role
    label: str
    shape: tuple[int, ...]
    itemsize: int
    n: int

    @property
    def tokens(self) -> int:
        return prod(self.shape[:-1])

    @property
    def message_bytes(self) -> int:
        """Size of the full tensor being reduced or gathered (the message)."""
        return prod(self.shape) * self.itemsize

    def send_bytes_per_rank(self, convention: BytesConvention) -> float:
        return send_bytes_per_rank(self.op, self.message_bytes, self.n, convention)

    def describe(self) -> str:
        """E.g. ``all-reduce(hidden: g mlp)``; Megatron's f acts in backward, g in forward."""
        label = f": {self.label}" if self.label else ""
        return f"{self.op.value}({self.role.value}{label})"


class Tally(Struct):
    """The collectives a simulation performed, in order."""

    calls: list[CollectiveCall] = field(default_factory=list)

    def count(
        self,
        op: Collective | None = None,
        phase: Phase | None = None,
        role: Role | None = None,
    ) -> int:
        return len(self.select(op, phase, role))

    def select(
        self,
        op: Collective | None = None,
        phase: Phase | None = None,
        role: Role | None = None,
    ) -> list[CollectiveCall]:
        return [
            c
            for c in self.calls
            if (op is None or c.op is op)
            and (phase is None or c.phase is phase)
            and (role is None or c.role is role)
        ]

    def describe(self) -> str:
        """E.g. ``all-gather(intermediate) + all-gather(hidden)``, or ``none``."""
        return " + ".join(c.describe() for c in self.calls) or "none"


def column_slices(n: int, t: int, *, what: str) -> list[slice]:
    """t equal contiguous slices of a dimension of size n that t must divide."""
    width = divide(n, t, what=what, by="t")
    return [slice(i * width, (i + 1) * width) for i in range(t)]


def uneven_slices(n: int, t: int) -> list[slice]:
    """t contiguous slices as even as possible (numpy.array_split); some may be empty if t > n.

    Used where a scheme splits a dimension the issue does not require t to divide (the hidden
    size of the toy, 4, with t = 8 or 16): the simulation stays valid, a card just gets less.
    """
    bounds = np.cumsum([0] + [len(a) for a in np.array_split(np.arange(n), t)])
    return [slice(int(bounds[i]), int(bounds[i + 1])) for i in range(t)]


class Cards(Struct):
    """t simulated cards sharing one tally."""

    t: int
    tally: Tally = field(default_factory=Tally)

    def __post_init__(self) -> None:
        if self.t < 1:
            raise InputError(f"cards={self.t} must be a positive integer")

    def _record(
        self, op: Collective, phase: Phase, role: Role, label: str, full: np.ndarray
    ) -> None:
        if self.t > 1:
            call = CollectiveCall(
                op, phase, role, label, tuple(full.shape), full.dtype.itemsize, self.t
            )
            self.tally.calls.append(call)

    def _check(self, parts: Sequence[np.ndarray]) -> None:
        if len(parts) != self.t:
            raise InputError(f"expected one array per card ({self.t}), got {len(parts)}")

    def all_reduce(
        self, parts: Sequence[np.ndarray], *, phase: Phase, role: Role, label: str
    ) -> list[np.ndarray]:
        """Element-wise sum of every card's array (in card order); every card gets the sum."""
        self._check(parts)
        total = parts[0].copy()
        for p in parts[1:]:
            total = total + p
        self._record(Collective.all_reduce, phase, role, label, total)
        return [total.copy() for _ in range(self.t)]

    def all_gather(
        self, parts: Sequence[np.ndarray], *, phase: Phase, role: Role, label: str
    ) -> list[np.ndarray]:
        """Concatenate every card's columns (last axis, card order); every card gets the whole."""
        self._check(parts)
        full = np.concatenate(list(parts), axis=-1)
        self._record(Collective.all_gather, phase, role, label, full)
        return [full.copy() for _ in range(self.t)]
