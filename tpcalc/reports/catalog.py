"""Listing reports for the built-in hardware."""

from __future__ import annotations

from tpcalc.catalog import hardware_names, load_hardware
from tpcalc.terms import Report, Row, Unit, term


def hardware_report() -> Report:
    """One row per built-in accelerator, every number with its source (for --explain/JSON)."""
    rows = []
    for name in hardware_names():
        hw = load_hardware(name)
        fields = (
            ("memory_bytes", "memory", Unit.bytes),
            ("peak_bf16_flop_per_s", "peak BF16", Unit.flop_per_s),
            ("achieved_flop_per_s", "achieved", Unit.flop_per_s),
            ("intra_node_bandwidth_bytes_per_s", "NVLink (one way)", Unit.bytes_per_s),
            ("inter_node_bandwidth_bytes_per_s", "inter-node per GPU", Unit.bytes_per_s),
            ("gpus_per_node", "GPUs/node", Unit.count),
        )
        terms = tuple(
            term(
                key,
                label,
                getattr(hw, key).value,
                unit,
                formula="config",
                source=getattr(hw, key).source,
            )
            for key, label, unit in fields
        )
        rows.append(Row(inputs={"hardware": name, "name": hw.display_name}, terms=terms))
    return Report(title="Built-in hardware", rows=tuple(rows))
