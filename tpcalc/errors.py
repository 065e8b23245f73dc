"""Typed errors raised by the core; the CLI turns each into one line on stderr and exit code 1."""

from __future__ import annotations

import math


def one_line(text: str) -> str:
    """``text`` on one line: a newline inside a value (a file name, a pasted string) is escaped,
    so an error can never spill onto a second stderr line."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class TpcalcError(Exception):
    """A problem with the content of the inputs, shown to the user as one line."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(message))


class ConfigError(TpcalcError):
    """A model or hardware config that cannot be read or does not validate."""


class ConfigFieldError(ConfigError):
    """A config field that is missing or wrong, located by file, line and field path.

    ``str()`` is ``file:line: field.path: problem (+N more)``; ``line`` is None until a loader that
    has the text locates the field (``tpcalc.catalog.locate``).
    """

    def __init__(
        self,
        source: str,
        loc: tuple[str | int, ...],
        problem: str,
        *,
        more: int = 0,
        line: int | None = None,
    ) -> None:
        self.source, self.loc, self.problem, self.more, self.line = source, loc, problem, more, line
        where = f"{source}:{line}" if line else source
        field = ".".join(str(p) for p in loc) or "(top level)"
        extra = f" (+{more} more)" if more else ""
        super().__init__(f"{where}: {field}: {problem}{extra}")

    def at_line(self, line: int | None) -> ConfigFieldError:
        """The same error with its line filled in."""
        return ConfigFieldError(self.source, self.loc, self.problem, more=self.more, line=line)


class FieldProblem(ValueError):
    """Raised inside a spec validator to name the field at fault (pydantic reports a model
    validator's errors at the top level; ``tpcalc.catalog`` reads ``field`` back from the
    error's context so the message and the line point at that field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class UnknownNameError(TpcalcError):
    """A built-in model or hardware name that does not exist."""


class DivisibilityError(TpcalcError):
    """A split that does not divide evenly (heads by t, layers by p, ...)."""


class InputError(TpcalcError):
    """A value outside its domain (zero or negative size, inconsistent combination)."""


def divide(numerator: int, denominator: int, *, what: str, by: str) -> int:
    """Exact integer division, or a DivisibilityError naming both numbers.

    The idiom is Megatron-LM ``megatron/core/utils.py::divide``; unlike it, the message says what
    each number is, e.g. ``num_attention_heads=25 is not divisible by tp=2``.
    """
    if denominator <= 0:
        raise InputError(f"{by}={denominator} must be a positive integer")
    if numerator % denominator:
        raise DivisibilityError(f"{what}={numerator} is not divisible by {by}={denominator}")
    return numerator // denominator


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in increasing order, found in O(√n) steps (each d <= √n
    pairs with n // d), so listing the valid splits of a 10^9-wide size takes milliseconds."""
    if n < 1:
        raise InputError(f"{n} has no positive divisors; give a positive integer")
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]
