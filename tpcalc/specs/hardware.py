"""HardwareSpec: one accelerator kind and the links around it; every number carries a source."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from tpcalc.specs.performance import PerformanceSpec

# Largest scale-up domain shipped: 72 GPUs (GB200 NVL72); NVL576 is announced. 2**16 is far
# beyond both and keeps per-node enumerations short.
MAX_GPUS_PER_NODE = 2**16


def _number_not_bool(value: Any) -> Any:
    """YAML ``yes`` is a bool, which pydantic would take as 1; say so instead."""
    if isinstance(value, bool):
        raise ValueError("Input should be a number, not a boolean")
    return value


class Sourced(BaseModel):
    """A number and where it comes from (datasheet, paper, seed section)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    value: Annotated[float, BeforeValidator(_number_not_bool), Field(gt=0, allow_inf_nan=False)]
    source: str


class SourcedCount(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    value: Annotated[int, BeforeValidator(_number_not_bool), Field(ge=1, le=MAX_GPUS_PER_NODE)]
    source: str


class SourcedCapability(BaseModel):
    """A CUDA compute capability, "major.minor" (e.g. "9.0"), and where it comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    value: Annotated[str, Field(pattern=r"^[0-9]{1,2}\.[0-9]$")]
    source: str

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor = self.value.split(".")
        return int(major), int(minor)


class SourcedSeconds(BaseModel):
    """A latency: zero is allowed (the seeds price bandwidth only), negative is not."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    value: Annotated[float, BeforeValidator(_number_not_bool), Field(ge=0, allow_inf_nan=False)]
    source: str


class HardwareSpec(BaseModel):
    """An accelerator and its links, in base units (bytes, FLOP/s, bytes/s, s).

    Bandwidths are one direction, per GPU: ``intra_node_bandwidth_bytes_per_s`` is what one GPU
    can send over NVLink, ``inter_node_bandwidth_bytes_per_s`` what it can send through its NIC.
    A collective over a group is priced on the slowest link the group crosses.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    display_name: str
    memory_bytes: Sourced
    peak_bf16_flop_per_s: Sourced
    peak_fp8_flop_per_s: Sourced | None = None
    achieved_flop_per_s: Sourced
    intra_node_bandwidth_bytes_per_s: Sourced
    inter_node_bandwidth_bytes_per_s: Sourced
    intra_node_latency_s: SourcedSeconds
    inter_node_latency_s: SourcedSeconds
    gpus_per_node: SourcedCount
    # Kernel-level achieved rates for the per-operation step-time model (tpcalc.calc.time).
    performance: PerformanceSpec | None = None
    # GPU <-> host memory, one direction (PCIe or NVLink-C2C): activation offloading (issue 10)
    host_bandwidth_bytes_per_s: Sourced | None = None
    # CUDA compute capability: which FP8 formats Transformer Engine runs and how it stores FP8
    # weights (tpcalc.calc.params.states.weight_storage)
    compute_capability: SourcedCapability | None = None
