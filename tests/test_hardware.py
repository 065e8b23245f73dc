"""The built-in hardware configs: each loads, each number has a source, and the documents' links
and compute rate reproduce the documents' printed times.

The byte counts fed to the link-time checks are rebuilt here from the seeds' own inputs (message
shape, ring factor, all-reduces per layer, layers); what is under test is the config's numbers.
"""

from __future__ import annotations

import pytest
import yaml

from tpcalc.calc.links.link import Link, bandwidth_bytes_per_s, transfer_time_s
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


@pytest.mark.parametrize("name", yaml_names())
def test_every_number_is_a_yaml_number_not_a_string(name):
    # PyYAML reads `80e9` as the string "80e9"; pydantic would quietly coerce it. Keep the files
    # honest: every value must already be an int or float after yaml.safe_load.
    def walk(prefix: str, block: dict) -> None:
        for field, entry in block.items():
            if isinstance(entry, dict) and "value" in entry:
                value = entry["value"]
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
    assert abs(ratio - 3.2) <= 0.05


def test_h100_links_are_seed_003s():
    hw = load("h100-sxm")
    # seed 003 table 7-7: NVLink 450 GB/s one direction; 400 Gb/s NIC = 50 GB/s
    assert hw.intra_node_bandwidth_bytes_per_s.value == 450 * GB
    assert hw.inter_node_bandwidth_bytes_per_s.value == 50 * GB
    # seed 003 §7.3.5: "带宽相差 9 倍"
    ratio = hw.intra_node_bandwidth_bytes_per_s.value / hw.inter_node_bandwidth_bytes_per_s.value
    assert abs(ratio - 9) <= 0.5


@pytest.mark.parametrize("name", ["h800", "h100-sxm"])
def test_the_documents_cards_hold_80_gb_and_run_at_400_tflops(name):
    hw = load(name)
    # seed 000: "是 80 GB 的 5.6 倍" (an 80 GB card, GB = 1e9)
    assert hw.memory_bytes.value == 80 * GB
    # seed 000 (1.05 s backward) and seed 003 table 7-7 ("8 × 400 TFLOPs/s"): 400 TFLOP/s achieved
    assert hw.achieved_flop_per_s.value == 400 * TFLOP_PER_S
    assert hw.gpus_per_node.value == 8


def test_h800_gives_seed_000_tp_link_times():
    hw = load("h800")
    # seed 000 §TP: one all-reduce message = 4,096 × 5,120 × 2 bytes; t = 8; ring all-reduce
    # sends 2(t-1)/t of it; 4 all-reduces per layer (2 fwd + 2 bwd); 64 layers -> 18.8 GB
    t, tokens, hidden, bf16_bytes, per_layer, layers = 8, 4096, 5120, 2, 4, 64
    step_bytes = tokens * hidden * bf16_bytes * 2 * (t - 1) / t * per_layer * layers
    assert abs(step_bytes / GB - 18.8) <= 0.05  # seed 000: 18.8 GB
    nvlink_s = transfer_time_s(step_bytes, 0, hw, Link.intra_node, with_latency=False)
    ib_s = transfer_time_s(step_bytes, 0, hw, Link.inter_node, with_latency=False)
    assert abs(nvlink_s * 1e3 - 117) <= 0.5  # seed 000: "机内要约 117 ms"
    assert abs(ib_s * 1e3 - 376) <= 0.5  # seed 000: "跨机要约 376 ms"


def test_h800_gives_seed_000_dp_and_backward_times():
    hw = load("h800")
    # seed 000 summary: 8-card ring all-reduce of BF16 grads of 27,781,427,952 params = 97.2 GB
    n, params, matmul_params, bf16_bytes, tokens = 8, 27_781_427_952, 25_624_600_064, 2, 4096
    dp_bytes = 2 * (n - 1) / n * params * bf16_bytes
    dp_s = dp_bytes / bandwidth_bytes_per_s(hw, Link.inter_node)
    assert abs(dp_s - 1.94) <= 0.005  # seed 000: "按 IB 50 GB/s 要 1.94 s"
    # backward = 4 FLOP per matmul parameter per token (seed 000 summary: about 1.05 s)
    backward_s = 4 * matmul_params * tokens / hw.achieved_flop_per_s.value
    assert abs(backward_s - 1.05) <= 0.005


def test_h100_gives_seed_003_table_7_7():
    hw = load("h100-sxm")
    # seed 003 §7.3.5: Llama 3 70B, b=1, s=8192, h=8192, t=8: 8(t-1)/t·sbh elements per layer
    # per card, BF16, 80 layers -> 75.2 GB
    t, s, b, h, bf16_bytes, layers, params = 8, 8192, 1, 8192, 2, 80, 70_553_706_496
    step_bytes = 8 * (t - 1) / t * s * b * h * bf16_bytes * layers
    assert abs(step_bytes / GB - 75.2) <= 0.05  # seed 003: 75.2 GB
    # table 7-7 note: 6 × 705.5 亿 × 8,192 ÷ (8 × 400 TFLOPs/s) ≈ 1.08 s
    compute_s = 6 * params * s * b / (t * hw.achieved_flop_per_s.value)
    assert abs(compute_s - 1.08) <= 0.005
    nvlink_s = transfer_time_s(step_bytes, 0, hw, Link.intra_node, with_latency=False)
    ib_s = transfer_time_s(step_bytes, 0, hw, Link.inter_node, with_latency=False)
    assert abs(nvlink_s - 0.17) <= 0.005  # table 7-7: 0.17 s
    assert abs(ib_s - 1.50) <= 0.005  # table 7-7: 1.50 s
    assert abs(nvlink_s / compute_s * 100 - 15) <= 0.5  # table 7-7: 15%
    assert abs(ib_s / compute_s * 100 - 139) <= 0.5  # table 7-7: 139%


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
