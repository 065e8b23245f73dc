"""Specs: the pydantic models that are at once schema, parser, validator and serializer."""

from tpcalc.specs.hardware import HardwareSpec, Sourced
from tpcalc.specs.model import DeclaredPart, ModelSpec, TpcalcBlock

__all__ = ["DeclaredPart", "HardwareSpec", "ModelSpec", "Sourced", "TpcalcBlock"]
