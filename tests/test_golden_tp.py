"""Seed figures about TP communication, link time, FLOPs and activations, from config + inputs.

Each assertion names its figure id (../shared/figures/seed-figures.yaml), the seed and section,
the printed value, and uses the printed precision as tolerance.
"""

from __future__ import annotations

import pytest

from tpcalc.calc.activations.paper import Recompute, logits_terms, paper_model_terms
from tpcalc.calc.params.counts import ParamConvention
from tpcalc.calc.tp.comm import tp_comm_row
from tpcalc.calc.tp.flops import flops_terms
from tpcalc.terms import Row
from tpcalc.units import GB, MB, MS, TFLOP


def close(value: float, printed: float, half_unit: float) -> bool:
    """True when ``value`` rounds to ``printed`` at the printed precision (± half a unit)."""
    return abs(value - printed) <= half_unit + 1e-12


@pytest.fixture(scope="module")
def qwen_tp8(qwen38, h800) -> Row:
    # seed 000: Qwen3.8, t = 8, 4,096 tokens, H800 links, bandwidth only
    return tp_comm_row(qwen38, h800, t=8, seq=4096, micro_batch=1, with_latency=False)


@pytest.fixture(scope="module")
def llama_tp8(llama70b, h100) -> Row:
    # seed 003 §7.3.5: Llama 3 70B, b = 1, s = 8192, t = 8, H100 links, 6N with all params
    return tp_comm_row(
        llama70b,
        h100,
        t=8,
        seq=8192,
        micro_batch=1,
        params=ParamConvention.all,
        with_latency=False,
    )


def test_q_tp_msg(qwen_tp8):
    # seed 000 q-tp-msg: "4,096 x 5,120 x 2 bytes" = 41.94e6 bytes
    assert qwen_tp8.value("message_bytes") == 4096 * 5120 * 2


def test_q_tp_ar_card(qwen_tp8):
    # seed 000 q-tp-ar-card: 73.4 MB sent per card per ring all-reduce, t = 8
    assert close(qwen_tp8.value("send_bytes_per_allreduce") / MB, 73.4, 0.05)


def test_q_tp_step(qwen_tp8):
    # seed 000 q-tp-step: 18.8 GB per card, 64 layers x 4 all-reduces, fwd + bwd
    assert close(qwen_tp8.value("send_bytes_per_step") / GB, 18.8, 0.05)


def test_q_tp_nvlink_and_ib(qwen_tp8):
    # seed 000 q-tp-nvlink: 117 ms on NVLink 160 GB/s; q-tp-ib: 376 ms on IB 50 GB/s
    assert close(qwen_tp8.value("nvlink_time_s") / MS, 117, 0.5)
    assert close(qwen_tp8.value("ib_time_s") / MS, 376, 0.5)


def test_q_tp_flop_rank(qwen38, h800):
    # seed 000 q-tp-flop-rank: 6 x 25,624,600,064 x 4,096 / 8 ≈ 79 TFLOP (matmul params)
    row = {
        t.key: t.value
        for t in flops_terms(
            qwen38, h800, t=8, seq=4096, micro_batch=1, params=ParamConvention.matmul
        )
    }
    assert close(row["flop_per_rank"] / TFLOP, 79, 0.5)
    assert row["n_params"] == 25_624_600_064  # seed 000: the matmul count, from the counter


def test_q_bwd_time(qwen38, h800):
    # seed 000 q-bwd-time: backward of 4,096 tokens on one card, 4·N·4096/400 TFLOP/s = 1.05 s
    row = {
        t.key: t.value
        for t in flops_terms(
            qwen38, h800, t=1, seq=4096, micro_batch=1, params=ParamConvention.matmul
        )
    }
    assert close(row["backward_time_s"], 1.05, 0.005)


def test_l_act_msg_and_ar(llama_tp8):
    # seed 003 §7.3.5: one activation 134.2 MB; per all-reduce 234.9 MB; per layer 939.5 MB;
    # 80 layers 75.2 GB
    assert close(llama_tp8.value("message_bytes") / MB, 134.2, 0.05)
    assert close(llama_tp8.value("send_bytes_per_allreduce") / MB, 234.9, 0.05)
    assert close(llama_tp8.value("send_bytes_per_layer") / MB, 939.5, 0.05)
    assert close(llama_tp8.value("send_bytes_per_step") / GB, 75.2, 0.05)


def test_l_ar_formula(llama_tp8, llama70b):
    # seed 003 l-ar-formula: per layer per card per micro-batch 8(t-1)/t·s·b·h elements
    t, s, b, h = 8, 8192, 1, llama70b.hidden_size
    elements = llama_tp8.value("send_bytes_per_layer") / 2  # bf16
    assert elements == 8 * (t - 1) / t * s * b * h


def test_l_link_times(llama_tp8):
    # seed 003 table 7-7: NVLink 0.17 s = 15%, 400 Gb/s NIC 1.50 s = 139%, compute 1.08 s
    assert close(llama_tp8.value("nvlink_time_s"), 0.17, 0.005)
    assert close(llama_tp8.value("ib_time_s"), 1.50, 0.005)
    assert close(llama_tp8.value("compute_time_s"), 1.08, 0.005)
    assert close(llama_tp8.value("nvlink_share") * 100, 15, 0.5)
    assert close(llama_tp8.value("ib_share") * 100, 139, 0.5)


def test_latency_only_adds(llama70b, h100):
    # the seeds price bandwidth only; with latency on, the bandwidth term is unchanged
    row = tp_comm_row(llama70b, h100, t=8, seq=8192, params=ParamConvention.all)
    assert row.value("nvlink_bandwidth_time_s") == pytest.approx(0.167, abs=0.0005)
    assert row.value("nvlink_latency_time_s") > 0
    assert row.check_breakdowns() == []


def test_q_act_selective(qwen38):
    # seed 000 q-act-selective: 34·s·b·h·L = 45.6 GB; q-act-selective-tp8-sp: /8 = 5.7 GB
    one = paper_model_terms(
        qwen38, seq=4096, micro_batch=1, t=1, sp=False, recompute=Recompute.selective
    )
    sp8 = paper_model_terms(
        qwen38, seq=4096, micro_batch=1, t=8, sp=True, recompute=Recompute.selective
    )
    assert close(one[-1].value / GB, 45.6, 0.05)
    assert close(sp8[-1].value / GB, 5.7, 0.05)


def test_l_unsplit_activations(llama70b):
    # seed 003 §7.3.6: the 10·s·b·h TP leaves whole = 0.67 GB per layer, 53.7 GB over 80 layers,
    # 0.084 GB per layer with SP (t = 8)
    tp = {
        t.key: t.value
        for t in paper_model_terms(
            llama70b, seq=8192, micro_batch=1, t=8, sp=False, recompute=Recompute.selective
        )
    }
    sp = {
        t.key: t.value
        for t in paper_model_terms(
            llama70b, seq=8192, micro_batch=1, t=8, sp=True, recompute=Recompute.selective
        )
    }
    assert close(tp["unsplit_bytes_per_layer"] / GB, 0.67, 0.005)
    assert close(tp["unsplit_bytes_per_layer"] * llama70b.num_hidden_layers / GB, 53.7, 0.05)
    assert close(sp["unsplit_bytes_per_layer"] / GB, 0.084, 0.0005)


def test_l_logits(llama70b):
    # seed 003 §7.3.4: logits [8192, 128256] 2.10 GB in BF16, 4.20 GB in FP32
    terms = {t.key: t.value for t in logits_terms(llama70b, seq=8192, micro_batch=1, t=8)}
    assert close(terms["logits_bf16_bytes"] / GB, 2.10, 0.005)
    assert close(terms["logits_fp32_bytes"] / GB, 4.20, 0.005)


def test_korthikanti_table2_forms(llama70b):
    # Korthikanti et al. 2022 Table 2: TP form sbh(10 + 24/t + 5as/(ht)); SP form sbh/t(34 + 5as/h)
    s, b, h, a, t = 2048, 2, llama70b.hidden_size, llama70b.num_attention_heads, 4
    tp = paper_model_terms(llama70b, seq=s, micro_batch=b, t=t, sp=False, recompute=Recompute.none)
    sp = paper_model_terms(llama70b, seq=s, micro_batch=b, t=t, sp=True, recompute=Recompute.none)
    full = paper_model_terms(llama70b, seq=s, micro_batch=b, t=t, sp=True, recompute=Recompute.full)
    per_layer = {x.key: x.value for x in tp}["activation_bytes_per_layer"]
    assert per_layer == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    per_layer_sp = {x.key: x.value for x in sp}["activation_bytes_per_layer"]
    assert per_layer_sp == pytest.approx(s * b * h / t * (34 + 5 * a * s / h))
    assert {x.key: x.value for x in full}["activation_bytes_per_layer"] == 2 * s * b * h
