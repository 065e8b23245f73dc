"""Typed errors raised by the core; the CLI turns each into one line on stderr and exit code 1."""

from __future__ import annotations


class TpcalcError(Exception):
    """A problem with the content of the inputs, shown to the user as one line."""


class ConfigError(TpcalcError):
    """A model or hardware config that cannot be read or does not validate."""


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
