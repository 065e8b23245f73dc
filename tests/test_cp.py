"""Context parallelism: seed 000's ring K/V figures, causal balance, Ulysses, overlap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.golden import expected
from tpcalc.calc.cp.causal import (
    CausalSplit,
    causal_work_per_rank,
    chunk_causal_work,
    rank_chunks,
)
from tpcalc.calc.cp.shapes import (
    block_pair_flop,
    kv_block_bytes,
    kv_dims,
    ulysses_fits,
    ulysses_max_cp,
)
from tpcalc.calc.links.link import Link
from tpcalc.catalog import load_model
from tpcalc.errors import DivisibilityError, InputError
from tpcalc.reports.cp_ep import cp_row
from tpcalc.units import MB, Dtype

SEED_SEQ = 131_072  # seed 000 summary (CP row): s = 131,072 on 8 cards
SEED_CP = 8


@pytest.fixture(scope="module")
def seed_row(qwen38, h800):
    return cp_row(qwen38, h800, seq=SEED_SEQ, cp=SEED_CP)


def test_kv_block_per_ring_step(qwen38):
    # seed 000 summary: each card passes one K,V block of 0.1 GB per step
    # (s/8 × 4 KV heads × 256 × K,V × 2 B = 67.1 MB)
    block = kv_block_bytes(qwen38, seq=SEED_SEQ, cp=SEED_CP, micro_batch=1, dtype=Dtype.bf16)
    assert expected("q-cp-block").matches(block)
    assert abs(block / MB - 67.1) <= 0.05


def test_ring_steps_and_layer_bytes(seed_row):
    # seed 000 summary: 7 blocks per full-attention layer, 0.5 GB per layer (469.8 MB)
    assert seed_row.value("ring_steps") == 7
    fwd = seed_row.value("fwd_kv_bytes_per_layer")
    assert expected("q-cp-layer").matches(fwd)
    assert abs(fwd / MB - 469.8) <= 0.05


def test_only_full_attention_layers_ring(qwen38, seed_row):
    # seed 000: "每个全注意力层" — Qwen3.8 has 16 full-attention layers of 64 (model-facts.md)
    assert seed_row.value("full_attention_layers") == 16
    assert qwen38.num_hidden_layers == 64
    per_layer = seed_row.value("fwd_kv_bytes_per_layer")
    assert seed_row.value("fwd_send_bytes_per_micro_batch") == 16 * per_layer


def test_backward_counts_kv_again_and_the_gradients_behind_them(seed_row):
    # Ring Attention backward as Transformer Engine runs it (AttnFuncWithCPAndKVP2P.backward):
    # cp = 8 steps, the first sends K,V only, the last dK,dV only: 7 sends of each
    block = seed_row.value("kv_block_bytes")
    assert seed_row.value("bwd_kv_bytes_per_layer") == 7 * block
    assert seed_row.value("bwd_dkv_bytes_per_layer") == 7 * block
    assert seed_row.check_breakdowns() == []


def test_fp32_gradients_double_the_dkv_traffic(qwen38, h800):
    row = cp_row(qwen38, h800, seq=SEED_SEQ, cp=SEED_CP, grad_dtype=Dtype.fp32)
    assert row.value("bwd_dkv_bytes_per_layer") == 2 * 7 * row.value("kv_block_bytes")
    assert row.inputs["grad_dtype"] == "fp32"


def test_causal_load_contiguous_and_zigzag():
    # seed 000 summary: 16 chunks on 4 cards contiguous → 10 : 26 : 42 : 58; zig-zag → 34 each
    assert causal_work_per_rank(16, 4, CausalSplit.contiguous) == [10, 26, 42, 58]
    assert causal_work_per_rank(16, 4, CausalSplit.zigzag) == [34, 34, 34, 34]


def test_zigzag_pairs_head_and_tail():
    # Megatron-Core CP load balancing: 2·cp chunks, rank r holds chunks r and 2cp-1-r
    assert rank_chunks(8, 4, CausalSplit.zigzag) == [[0, 7], [1, 6], [2, 5], [3, 4]]


def test_causal_terms_in_the_row(qwen38, h800):
    row = cp_row(qwen38, h800, seq=SEED_SEQ, cp=4, chunks=16)
    assert row.value("causal_work_contiguous") == "10 : 26 : 42 : 58"
    assert row.value("causal_work_zigzag") == "34 : 34 : 34 : 34"
    assert abs(row.value("causal_imbalance_contiguous_ratio") - 58 / 34) < 1e-12
    assert row.value("causal_imbalance_zigzag_ratio") == 1.0


@given(cp=st.integers(1, 32), pairs_per_rank=st.integers(1, 16))
def test_zigzag_equal_for_any_even_chunking(cp, pairs_per_rank):
    n = 2 * cp * pairs_per_rank
    work = causal_work_per_rank(n, cp, CausalSplit.zigzag)
    assert len(set(work)) == 1
    assert sum(work) == sum(chunk_causal_work(n))  # nothing lost or counted twice


@given(cp=st.integers(2, 32), per_rank=st.integers(1, 16))
def test_contiguous_last_rank_works_most(cp, per_rank):
    work = causal_work_per_rank(cp * per_rank, cp, CausalSplit.contiguous)
    assert work == sorted(work) and work[-1] > work[0]


def test_zigzag_needs_a_multiple_of_two_cp():
    with pytest.raises(DivisibilityError, match=r"chunks=12 is not divisible by 2·cp=8"):
        rank_chunks(12, 4, CausalSplit.zigzag)


def test_ulysses_limited_by_kv_heads(qwen38, llama70b):
    # seed 000 summary: "Ulysses 按头切,KV 只有 4 个头"
    assert ulysses_max_cp(qwen38) == 4
    assert ulysses_fits(qwen38, 4) and not ulysses_fits(qwen38, 8)
    assert ulysses_max_cp(llama70b) == 8


def test_overlap_check_on_nvlink(seed_row, h800):
    # transfer 67.1 MB over 160 GB/s vs one block pair: 4·16384²·24·256 FLOP at 400 TFLOP/s
    assert abs(seed_row.value("kv_step_time_s") - 67_108_864 / 160e9) < 1e-12
    flop = seed_row.value("block_pair_flop")
    assert flop == 4 * 16384**2 * 24 * 256
    assert abs(seed_row.value("attn_step_time_s") - flop / 400e12) < 1e-12
    assert seed_row.value("kv_over_compute_ratio") < 1  # hidden


def test_overlap_fails_for_short_blocks_over_ib(qwen38, h800):
    # 4,096 tokens on 8 cards: 512-token blocks compute too fast to hide an IB transfer
    row = cp_row(qwen38, h800, seq=4096, cp=8, link=Link.inter_node)
    assert row.value("kv_over_compute_ratio") > 1


def test_cp_one_moves_nothing(qwen38, h800):
    row = cp_row(qwen38, h800, seq=4096, cp=1)
    assert row.value("send_bytes_per_micro_batch") == 0
    assert row.value("kv_step_time_s") == 0


def test_mla_blocks_use_k_and_v_head_dims():
    ds = load_model("deepseek-v3")
    assert kv_dims(ds) == (128, 192, 128)
    assert block_pair_flop(ds, seq=4096, cp=4, micro_batch=1) == 2 * 1024**2 * 128 * (192 + 128)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seq": 4097, "cp": 8}, DivisibilityError, r"seq=4097 is not divisible by cp=8"),
        ({"seq": 4096, "cp": 0}, InputError, r"cp=0 must be a positive integer"),
        ({"seq": 4096, "cp": 8, "micro_batch": 0}, InputError, r"micro_batch=0"),
        ({"seq": 4096, "cp": 4, "chunks": 12}, DivisibilityError, r"chunks=12"),
    ],
)
def test_bad_inputs_raise_one_line(qwen38, h800, kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        cp_row(qwen38, h800, **kwargs)
    assert "\n" not in str(info.value)


# ---- Gated DeltaNet under CP (Megatron-Core's all-to-all to heads, tpcalc.calc.cp.linear) ----


def test_gated_deltanet_cp_needs_whole_heads_per_rank():
    """Megatron-Core hands each CP rank whole key and value heads of its TP share
    (_build_head_perm_for_split_sections): Qwen3.8 has 16 key and 48 value heads."""
    from tpcalc.calc.cp.linear import gdn_cp_problem
    from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout, layout_problems

    q = load_model("qwen3.8")
    assert gdn_cp_problem(q, 2, 8) is None  # 8 key, 24 value heads per TP rank
    assert "linear_num_key_heads/tp = 8" in (gdn_cp_problem(q, 2, 16) or "")
    assert "linear_num_key_heads/tp = 2" in (gdn_cp_problem(q, 8, 4) or "")
    assert gdn_cp_problem(load_model("llama3-8b"), 8, 16) is None  # no linear-attention layer
    problems = layout_problems(
        q, ParallelLayout(gpus_per_node=8, tp=8, cp=4, dp=2), LayoutRun(seq=4096, microbatches=1)
    )
    assert any("use a cp in 1, 2 at tp=8" in p for p in problems), problems


def test_gated_deltanet_cp_sends_in_proj_out_and_norm_out():
    """Bytes per layer and micro-batch against Megatron-Core's in_proj sections (query, key,
    value, z, beta, alpha) and the gated norm's output, counted here from the config."""
    from tpcalc.calc.cp.linear import gdn_cp_send_bytes_per_layer

    q = load_model("qwen3.8")
    tp, cp, tokens = 2, 4, 4096 // 4
    nk, nv = q.linear_num_key_heads // tp, q.linear_num_value_heads // tp
    dk, dv = q.linear_key_head_dim, q.linear_value_head_dim
    in_proj = nk * dk + nk * dk + nv * dv + nv * dv + nv + nv
    norm_out = nv * dv
    expected = 2 * (cp - 1) / cp * tokens * (in_proj + norm_out) * 2  # fwd + bwd, BF16
    got = gdn_cp_send_bytes_per_layer(q, tokens=tokens, tp=tp, cp=cp, dtype=Dtype.bf16)
    assert got == pytest.approx(expected, rel=1e-12)
