"""Resolve and validate the shared inputs of every report (model, hardware, seq, b, t list)."""

from __future__ import annotations

from dataclasses import dataclass

from tpcalc.catalog import load_hardware, load_model
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec, ModelSpec

# Beyond this a "size" is surely a typo (and floats would lose integer exactness).
MAX_SIZE = 10**12


def positive(value: int, name: str) -> int:
    """Zero, negative or absurd sizes are content errors that name the option."""
    if value <= 0:
        raise InputError(f"{name} must be a positive integer, got {value}")
    if value > MAX_SIZE:
        raise InputError(f"{name}={value} is beyond any real run (max {MAX_SIZE:,})")
    return value


def parse_tp_list(tp: str | int | list[int] | None, gpus_per_node: int) -> list[int]:
    """A t sweep: the values given ('8', '1,2,4,8', [1, 8]) or powers of two up to a node."""
    if tp is None:
        values, t = [], 1
        while t <= gpus_per_node:
            values.append(t)
            t *= 2
        return values
    if isinstance(tp, int):
        values = [tp]
    elif isinstance(tp, str):
        try:
            values = [int(v) for v in tp.replace(" ", "").split(",")]
        except ValueError:
            raise InputError(f"--tp {tp!r}: give an integer or a list like 1,2,4,8") from None
    else:
        values = list(tp)
    if not values:
        raise InputError("--tp: give at least one value, e.g. 8 or 1,2,4,8")
    return [positive(t, "--tp") for t in values]


def node_size(gpus_per_node: int | None, hardware_default: int) -> int:
    """--gpus-per-node, validated, or the hardware config's value."""
    return hardware_default if gpus_per_node is None else positive(gpus_per_node, "--gpus-per-node")


def seq_warnings(spec: ModelSpec, seq: int | None) -> list[str]:
    """The stderr note when --seq was not given and the model's length is tpcalc's default (an
    imported config.json states no training length; ``tpcalc.hf`` picks one and says why)."""
    if seq is not None or not spec.tpcalc.seq_length_defaulted:
        return []
    return [f"seq defaulted to {spec.seq_length:,} ({spec.tpcalc.seq_length_source}); set --seq"]


@dataclass(frozen=True)
class Inputs:
    spec: ModelSpec
    hw: HardwareSpec
    seq: int
    micro_batch: int
    tps: list[int]
    warnings: tuple[str, ...] = ()  # e.g. the defaulted sequence length (seq_warnings)


def resolve(
    model: str,
    hardware: str,
    *,
    seq: int | None,
    micro_batch: int,
    tp: str | int | list[int] | None,
) -> Inputs:
    """Load model and hardware by name or path and validate the sizes shared by all reports."""
    spec = load_model(model)
    hw = load_hardware(hardware)
    warnings = tuple(seq_warnings(spec, seq))
    seq = positive(seq, "--seq") if seq is not None else spec.seq_length
    return Inputs(
        spec=spec,
        hw=hw,
        seq=seq,
        micro_batch=positive(micro_batch, "--micro-batch"),
        tps=parse_tp_list(tp, hw.gpus_per_node.value),
        warnings=warnings,
    )
