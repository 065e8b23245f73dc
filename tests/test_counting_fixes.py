"""Counting fixes of issue 10 §1, each against its source (each failed before the fix)."""

from __future__ import annotations

import json

import pytest

from tpcalc.calc.layout.compute import rank_flops
from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.params.counts import active_layer_params, active_params, mtp_params
from tpcalc.calc.tp.flops import attention_score_flop, counted_params, deltanet_flop
from tpcalc.catalog import load_model
from tpcalc.choices import AttentionFlops, ParamConvention, Recompute

V_DS, H_DS = 129_280, 7_168  # DeepSeek-V3 config.json vocab_size, hidden_size


@pytest.fixture(scope="module")
def ds():
    return load_model("deepseek-v3")


def test_flops_on_moe_counts_active_params(ds, cli):
    # DeepSeek-V3 report §1: 37B activated; tpcalc's active count with the input embedding is
    # 37,552,297,472, and the matmul convention drops the V·h embedding lookup
    n = counted_params(ds, ParamConvention.matmul, mtp=False)
    assert n == 37_552_297_472 - V_DS * H_DS
    out = json.loads(cli("flops", "-m", "deepseek-v3", "-t", "1", "-f", "json").out)[0]
    assert out["n_params"] == n and out["active_params"] is True
    # 6·N·tokens with N = 36.6e9, not the 670e9 of every expert (18.3x too much before)
    assert out["dense_flop_per_rank"] == pytest.approx(6 * n * 4096)


def test_dense_flops_keep_the_seed_counts():
    qwen = load_model("qwen3.8")  # seed 000: matmul params 25,624,600,064
    assert counted_params(qwen, ParamConvention.matmul, mtp=False) == 25_624_600_064
    assert counted_params(qwen, ParamConvention.all, mtp=True) == 27_781_427_952


def test_mla_attention_times_v_uses_v_head_dim(ds):
    # QKᵀ on d_qk = 128 + 64 = 192, scores·V on v_head_dim = 128: 6·b·s²·n·(192 + 128)·L
    s = 4096
    assert attention_score_flop(ds, seq=s, micro_batch=1) == 6 * s**2 * 128 * (192 + 128) * 61


def test_causal_attention_flops_are_half_of_full(ds):
    full = attention_score_flop(ds, seq=4096, micro_batch=1)
    causal = attention_score_flop(ds, seq=4096, micro_batch=1, mask=AttentionFlops.causal)
    assert causal == full / 2


def test_gated_deltanet_chunked_flops():
    # Gated DeltaNet (arXiv 2412.06464) §3.3 chunkwise form, C = 64, per value head and chunk:
    # 2·(3·C·dk·dv + 3·C²·dk + 2·C²·dv + C³/3) forward, × 3 for fwd + bwd
    q = load_model("qwen3.8")
    hv, dk, dv = q.linear_num_value_heads, q.linear_key_head_dim, q.linear_value_head_dim
    c, s = 64, 4096
    per_chunk = 2 * (3 * c * dk * dv + 3 * c * c * dk + 2 * c * c * dv + c**3 / 3)
    expected = 3 * per_chunk * hv * (s // c) * q.linear_attention_layers
    assert deltanet_flop(q, seq=s, micro_batch=1, chunk=c) == pytest.approx(expected, rel=1e-12)
    assert expected > 0


def test_mtp_counted_with_an_option_to_leave_it_out(ds):
    # DeepSeek-V3 §2.2: one MTP module (a full layer with the last layer's MoE); a token uses
    # k = 8 of its 256 routed experts, each 3·h·2048
    idle = (256 - 8) * 3 * H_DS * 2048
    with_mtp = counted_params(ds, ParamConvention.all, mtp=True)
    without = counted_params(ds, ParamConvention.all, mtp=False)
    assert without == active_params(ds)
    assert with_mtp - without == mtp_params(ds) - idle


def test_full_recompute_does_not_rerun_the_lm_head():
    # Megatron recomputes transformer layers only: the extra forward is the layers' 2N·tokens
    spec = load_model("llama3-8b")
    lay = ParallelLayout(gpus_per_node=8)
    (r,) = rank_flops(spec, lay, seq=8192, micro_batch=1, vpp=1, recompute=Recompute.full)
    layers = sum(active_layer_params(spec, i) for i in range(spec.num_hidden_layers))
    attn = attention_score_flop(spec, seq=8192, micro_batch=1)
    assert r.recompute_flop == pytest.approx((6 * layers * 8192 + attn) / 3, rel=1e-12)


@pytest.mark.parametrize(("convention", "share"), [("causal", 0.5), ("full", 1.0)])
def test_flops_attention_scores_follow_the_shared_convention(cli, convention, share):
    # Narayanan et al. 2021 Eq. 3: 12·b·s²·h·L score FLOPs counted in full; Megatron-LM counts
    # the causal half, tpcalc's default in every command (--attention-flops). Llama 3 8B
    # config.json: h = 4096, L = 32.
    b, s, h, layers = 1, 4096, 4096, 32
    args = ("flops", "-m", "llama3-8b", "-s", str(s), "-t", "1", "--attention-scores", "-f", "json")
    default = json.loads(cli(*args).out)[0]
    chosen = json.loads(cli(*args, "--attention-flops", convention).out)[0]
    assert default["attention_flops"] == "causal"
    assert chosen["attention_flop_per_rank"] == share * 12 * b * s**2 * h * layers
    off = json.loads(cli(*args[:-3], "--no-attention-scores", "-f", "json").out)[0]
    assert "attention_flop_per_rank" not in off
    assert off["flop_per_rank"] == off["dense_flop_per_rank"]
