"""Seed figures about TP communication, link time, FLOPs and activations, from config + inputs.

Each assertion names its figure id; the printed value, its precision (the tolerance) and its
source come from the one golden table, tests/golden.py.
"""

from __future__ import annotations

import pytest

from tests.golden import expected
from tpcalc.calc.activations.paper import logits, paper_activations
from tpcalc.calc.activations.paper_explain import logits_row_terms, model_terms
from tpcalc.calc.tp.flops import tp_flops
from tpcalc.choices import ParamConvention, Recompute, TimeModel
from tpcalc.reports.request import Workload
from tpcalc.reports.tp import tp_comm_row
from tpcalc.terms import Row
from tpcalc.units import Dtype


def close(fid: str, value: float) -> bool:
    """True when ``value`` rounds to the printed figure ``fid`` (tests/golden.py)."""
    return expected(fid).matches(value)


@pytest.fixture(scope="module")
def qwen_tp8(qwen38, h800) -> Row:
    # seed 000: Qwen3.8, t = 8, 4,096 tokens, H800 links, bandwidth only
    return tp_comm_row(Workload(spec=qwen38, hw=h800, seq=4096, sp=False), 8, with_latency=False)


@pytest.fixture(scope="module")
def llama_tp8(llama70b, h100) -> Row:
    # seed 003 §7.3.5: Llama 3 70B, b = 1, s = 8192, t = 8, H100 links, 6N with all params
    return tp_comm_row(
        Workload(spec=llama70b, hw=h100, seq=8192, micro_batch=1, sp=False),
        8,
        time_model=TimeModel.fixed,  # the seed's 6·N·tokens at 400 TFLOP/s
        params=ParamConvention.all,
        with_latency=False,
    )


def test_q_tp_msg(qwen_tp8):
    # seed 000 q-tp-msg: "4,096 x 5,120 x 2 bytes" = 41.94e6 bytes
    assert qwen_tp8.value("message_bytes") == 4096 * 5120 * 2


def test_q_tp_ar_card(qwen_tp8):
    # seed 000 q-tp-ar-card: 73.4 MB sent per card per ring all-reduce, t = 8
    assert close("q-tp-ar-card", qwen_tp8.value("send_bytes_per_allreduce"))


def test_q_tp_step(qwen_tp8):
    # seed 000 q-tp-step: 18.8 GB per card, 64 layers x 4 all-reduces, fwd + bwd
    assert close("q-tp-step", qwen_tp8.value("send_bytes_per_step"))


def test_q_tp_nvlink_and_ib(qwen_tp8):
    # seed 000 q-tp-nvlink: 117 ms on NVLink 160 GB/s; q-tp-ib: 376 ms on IB 50 GB/s
    assert close("q-tp-nvlink", qwen_tp8.value("nvlink_time_s"))
    assert close("q-tp-ib", qwen_tp8.value("ib_time_s"))


def test_q_tp_flop_rank(qwen38, h800):
    # seed 000 q-tp-flop-rank: 6 x 25,624,600,064 x 4,096 / 8 ≈ 79 TFLOP (matmul params)
    f = tp_flops(qwen38, h800, t=8, seq=4096, micro_batch=1, params=ParamConvention.matmul)
    assert close("q-tp-flop-rank", f.flop_per_rank)
    assert f.n_params == 25_624_600_064  # seed 000: the matmul count, from the counter


def test_q_bwd_time(qwen38, h800):
    # seed 000 q-bwd-time: backward of 4,096 tokens on one card, 4·N·4096/400 TFLOP/s = 1.05 s
    f = tp_flops(qwen38, h800, t=1, seq=4096, micro_batch=1, params=ParamConvention.matmul)
    assert close("q-bwd-time", f.backward_time_s)


def test_l_act_msg_and_ar(llama_tp8):
    # seed 003 §7.3.5: one activation 134.2 MB; per all-reduce 234.9 MB; per layer 939.5 MB;
    # 80 layers 75.2 GB
    assert close("l-act-msg", llama_tp8.value("message_bytes"))
    assert close("l-ar-card", llama_tp8.value("send_bytes_per_allreduce"))
    assert close("l-ar-layer", llama_tp8.value("send_bytes_per_layer"))
    assert close("l-ar-step", llama_tp8.value("send_bytes_per_step"))


def test_l_ar_formula(llama_tp8, llama70b):
    # seed 003 l-ar-formula: per layer per card per micro-batch 8(t-1)/t·s·b·h elements
    t, s, b, h = 8, 8192, 1, llama70b.hidden_size
    elements = llama_tp8.value("send_bytes_per_layer") / Dtype.bf16.bytes
    assert elements == 8 * (t - 1) / t * s * b * h


def test_l_link_times(llama_tp8):
    # seed 003 table 7-7: NVLink 0.17 s = 15%, 400 Gb/s NIC 1.50 s = 139%, compute 1.08 s
    assert close("l-nvlink-time", llama_tp8.value("nvlink_time_s"))
    assert close("l-ib-time", llama_tp8.value("ib_time_s"))
    assert close("l-compute", llama_tp8.value("compute_time_s"))
    assert close("l-nvlink-share", llama_tp8.value("nvlink_share"))
    assert close("l-ib-share", llama_tp8.value("ib_share"))


def test_latency_only_adds(llama70b, h100):
    # the seeds price bandwidth only; with latency on, the bandwidth term is unchanged
    work = Workload(spec=llama70b, hw=h100, seq=8192, sp=False)
    row = tp_comm_row(work, 8, params=ParamConvention.all)
    assert row.value("nvlink_bandwidth_time_s") == pytest.approx(0.167, abs=0.0005)
    assert row.value("nvlink_latency_time_s") > 0
    assert row.check_breakdowns() == []


def test_q_act_selective(qwen38):
    # seed 000 q-act-selective: 34·s·b·h·L = 45.6 GB; q-act-selective-tp8-sp: /8 = 5.7 GB
    one = model_terms(
        paper_activations(
            qwen38, seq=4096, micro_batch=1, t=1, sp=False, recompute=Recompute.selective
        )
    )
    sp8 = model_terms(
        paper_activations(
            qwen38, seq=4096, micro_batch=1, t=8, sp=True, recompute=Recompute.selective
        )
    )
    assert close("q-act-selective", one[-1].value)
    assert close("q-act-selective-tp8-sp", sp8[-1].value)


def test_l_unsplit_activations(llama70b):
    # seed 003 §7.3.6: the 10·s·b·h TP leaves whole = 0.67 GB per layer, 53.7 GB over 80 layers,
    # 0.084 GB per layer with SP (t = 8)
    tp = {
        t.key: t.value
        for t in model_terms(
            paper_activations(
                llama70b, seq=8192, micro_batch=1, t=8, sp=False, recompute=Recompute.selective
            )
        )
    }
    sp = {
        t.key: t.value
        for t in model_terms(
            paper_activations(
                llama70b, seq=8192, micro_batch=1, t=8, sp=True, recompute=Recompute.selective
            )
        )
    }
    assert close("l-unsplit-act-layer", tp["unsplit_bytes_per_layer"])
    assert close("l-unsplit-act-model", tp["unsplit_bytes_per_layer"] * llama70b.num_hidden_layers)
    assert close("l-unsplit-act-sp", sp["unsplit_bytes_per_layer"])


def test_l_logits(llama70b):
    # seed 003 §7.3.4: logits [8192, 128256] 2.10 GB in BF16, 4.20 GB in FP32
    terms = {
        t.key: t.value for t in logits_row_terms(logits(llama70b, seq=8192, micro_batch=1, t=8))
    }
    assert close("l-logits-bf16", terms["logits_bf16_bytes"])
    assert close("l-logits-fp32", terms["logits_fp32_bytes"])


def test_korthikanti_table2_forms(llama70b):
    # Korthikanti et al. 2022 Table 2: TP form sbh(10 + 24/t + 5as/(ht)); SP form sbh/t(34 + 5as/h)
    s, b, h, a, t = 2048, 2, llama70b.hidden_size, llama70b.num_attention_heads, 4
    tp = model_terms(
        paper_activations(llama70b, seq=s, micro_batch=b, t=t, sp=False, recompute=Recompute.none)
    )
    sp = model_terms(
        paper_activations(llama70b, seq=s, micro_batch=b, t=t, sp=True, recompute=Recompute.none)
    )
    full = model_terms(
        paper_activations(llama70b, seq=s, micro_batch=b, t=t, sp=True, recompute=Recompute.full)
    )
    per_layer = {x.key: x.value for x in tp}["activation_bytes_per_layer"]
    assert per_layer == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    per_layer_sp = {x.key: x.value for x in sp}["activation_bytes_per_layer"]
    assert per_layer_sp == pytest.approx(s * b * h / t * (34 + 5 * a * s / h))
    assert {x.key: x.value for x in full}["activation_bytes_per_layer"] == 2 * s * b * h
