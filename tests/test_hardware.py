"""The built-in hardware configs: each loads, each number has a source, and the documents'
cards carry the documents' links and compute rate.

The documents' printed times (117 ms, 0.17 s, 1.94 s, ...) are checked through the calculators
that produce them, against the golden table (tests/golden.py): tests/test_golden_tp.py and
tests/test_dp.py. Rebuilding those byte counts here would test the test's own arithmetic.
"""

from __future__ import annotations

import pytest
import yaml

from tests.golden import expected
from tpcalc.catalog import configs_root
from tpcalc.specs import HardwareSpec

HARDWARE_DIR = configs_root() / "hardware"
BUILT_IN = ("h100-sxm", "h800", "a100-80g", "h200", "b200")
SOURCED_FIELDS = (
    "memory_bytes",
    "peak_bf16_flop_per_s",
    "peak_fp8_flop_per_s",
    "achieved_flop_per_s",
    "intra_node_bandwidth_bytes_per_s",
    "inter_node_bandwidth_bytes_per_s",
    "intra_node_latency_s",
    "inter_node_latency_s",
    "gpus_per_node",
)


def raw(name: str) -> dict:
    return yaml.safe_load((HARDWARE_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


def load(name: str) -> HardwareSpec:
    return HardwareSpec.model_validate(raw(name))


def yaml_names() -> list[str]:
    names = (p.name for p in HARDWARE_DIR.iterdir())
    return sorted(n.removesuffix(".yaml") for n in names if n.endswith(".yaml"))


# ---------------------------------------------------------------- every config


def test_the_built_ins_ship_as_package_data():
    assert set(BUILT_IN) <= set(yaml_names())


@pytest.mark.parametrize("name", yaml_names())
def test_config_loads_and_is_named_after_its_file(name):
    hw = load(name)
    assert hw.name == name
    assert hw.display_name.strip()


# Fields whose value is a version, not a number: the CUDA compute capability.
VERSION_FIELDS = ("compute_capability",)


@pytest.mark.parametrize("name", yaml_names())
def test_every_number_is_a_yaml_number_not_a_string(name):
    # PyYAML reads `80e9` as the string "80e9"; pydantic would quietly coerce it. Keep the files
    # honest: every value must already be an int or float after yaml.safe_load.
    def walk(prefix: str, block: dict) -> None:
        for field, entry in block.items():
            if isinstance(entry, dict) and "value" in entry:
                value = entry["value"]
                if field in VERSION_FIELDS:  # "major.minor", quoted so 10.0 stays "10.0"
                    assert isinstance(value, str), f"{name}.{prefix}{field}: {value!r}"
                    continue
                assert isinstance(value, int | float), f"{name}.{prefix}{field}: {value!r}"
            elif isinstance(entry, dict):  # a nested block: performance, performance.fitted
                walk(f"{prefix}{field}.", entry)

    walk("", raw(name))


@pytest.mark.parametrize("name", yaml_names())
def test_every_number_has_a_source(name):
    hw = load(name)
    for field in SOURCED_FIELDS:
        entry = getattr(hw, field)
        if entry is None:  # only the optional FP8 peak may be absent (A100 has no FP8)
            assert field == "peak_fp8_flop_per_s", f"{name}.{field} is missing"
            continue
        assert entry.source.strip(), f"{name}.{field} has an empty source"


@pytest.mark.parametrize("name", yaml_names())
def test_achieved_never_exceeds_peak(name):
    hw = load(name)
    assert 0 < hw.achieved_flop_per_s.value <= hw.peak_bf16_flop_per_s.value
    if hw.peak_fp8_flop_per_s is not None:
        assert hw.peak_fp8_flop_per_s.value >= hw.peak_bf16_flop_per_s.value


@pytest.mark.parametrize("name", yaml_names())
def test_links_are_ordered(name):
    # Inside a node NVLink is faster and nearer than the NIC; that is why TP stays in a node
    # (seed 003 §7.3.5, seed 000 "只能放在机内").
    hw = load(name)
    assert hw.intra_node_bandwidth_bytes_per_s.value > hw.inter_node_bandwidth_bytes_per_s.value
    assert 0 <= hw.intra_node_latency_s.value <= hw.inter_node_latency_s.value


def test_a100_has_no_fp8_peak():
    assert load("a100-80g").peak_fp8_flop_per_s is None


# ---------------------------------------------------------------- the documents' values

GB = 1e9
TFLOP_PER_S = 1e12


def test_h800_links_are_deepseek_v3s():
    hw = load("h800")
    # seed 000 quoting DeepSeek-V3 §3.2.2: NVLink 160 GB/s, IB 50 GB/s
    assert hw.intra_node_bandwidth_bytes_per_s.value == 160 * GB
    assert hw.inter_node_bandwidth_bytes_per_s.value == 50 * GB
    # seed 000: "NVLink 提供 160 GB/s,约是 IB(50 GB/s)的 3.2 倍"
    ratio = hw.intra_node_bandwidth_bytes_per_s.value / hw.inter_node_bandwidth_bytes_per_s.value
    assert expected("q-nvlink-vs-ib").matches(ratio)


def test_h100_links_are_seed_003s():
    hw = load("h100-sxm")
    # seed 003 table 7-7: NVLink 450 GB/s one direction; 400 Gb/s NIC = 50 GB/s
    assert hw.intra_node_bandwidth_bytes_per_s.value == 450 * GB
    assert hw.inter_node_bandwidth_bytes_per_s.value == 50 * GB
    # seed 003 §7.3.5: "带宽相差 9 倍"
    ratio = hw.intra_node_bandwidth_bytes_per_s.value / hw.inter_node_bandwidth_bytes_per_s.value
    assert expected("l-bw-ratio").matches(ratio)


@pytest.mark.parametrize("name", ["h800", "h100-sxm"])
def test_the_documents_cards_hold_80_gb_and_run_at_400_tflops(name):
    hw = load(name)
    # seed 000: "是 80 GB 的 5.6 倍" (an 80 GB card, GB = 1e9)
    assert hw.memory_bytes.value == 80 * GB
    # seed 000 (1.05 s backward) and seed 003 table 7-7 ("8 × 400 TFLOPs/s"): 400 TFLOP/s achieved
    assert hw.achieved_flop_per_s.value == 400 * TFLOP_PER_S
    assert hw.gpus_per_node.value == 8


# ---------------------------------------------------------------- the other cards' datasheets


@pytest.mark.parametrize(
    ("name", "memory_gb", "bf16_tflops", "nvlink_gb_s", "nic_gb_s"),
    [
        ("a100-80g", 80, 312, 300, 25),  # A100 datasheet; NVLink 600 GB/s both ways; HDR 200 Gb/s
        ("h200", 141, 989.5, 450, 50),  # H200 datasheet; NVLink 900 GB/s both ways; 400 Gb/s
        ("b200", 180, 2250, 900, 50),  # DGX B200 1,440 GB / 8; NVLink 5 1.8 TB/s; CX-7 400 Gb/s
    ],
)
def test_other_cards_match_their_datasheets(name, memory_gb, bf16_tflops, nvlink_gb_s, nic_gb_s):
    hw = load(name)
    assert hw.memory_bytes.value == memory_gb * GB
    assert hw.peak_bf16_flop_per_s.value == bf16_tflops * TFLOP_PER_S
    assert hw.intra_node_bandwidth_bytes_per_s.value == nvlink_gb_s * GB
    assert hw.inter_node_bandwidth_bytes_per_s.value == nic_gb_s * GB
    # stated assumption: achieved = 40% of dense BF16 peak (Llama 3 Table 4: 38-43% MFU)
    assert abs(hw.achieved_flop_per_s.value / hw.peak_bf16_flop_per_s.value - 0.40) <= 1e-9
