"""Tensor-parallel divisibility, KV replication, vocab padding and per-card shard shapes.

Golden figures carry their id from the shared seed-figure list, the seed and section, and the
printed precision as tolerance; counts the seeds print as integers are asserted exactly.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpcalc.calc.params.counts import layer_params, total_params
from tpcalc.calc.tp.rules import max_t_without_replication, padded_vocab, valid_tp_sizes
from tpcalc.calc.tp.table import layer_params_per_rank, per_rank_params
from tpcalc.calc.tp.table_explain import per_rank_param_terms
from tpcalc.catalog import load_model, model_names
from tpcalc.errors import DivisibilityError, InputError
from tpcalc.reports.tp import check_tp, shard_shapes
from tpcalc.specs import ModelSpec
from tpcalc.terms import Row

HUNDRED_MILLION = 10**8  # 亿, the unit seed 003 table 7-8 prints


def shard(rows: tuple[Row, ...], weight: str) -> list[int]:
    """[shard_rows, shard_cols] of the row whose weight is ``weight``."""
    (row,) = [r for r in rows if r.inputs["weight"] == weight]
    return [row.value("shard_rows"), row.value("shard_cols")]


@pytest.fixture(scope="module")
def llama_shards(llama70b) -> tuple[Row, ...]:
    # seed 003 §7.3.4: Llama 3 70B, t = 8; the vocab is split unpadded (128256 / 8)
    return shard_shapes(llama70b, 8, vocab_pad_multiple=1)


# ---------------- seed 000: Qwen3.8 ----------------


def test_q_ffn_per_card(qwen38):
    # q-ffn-per-card, seed 000 §张量并行 table: ft = 17408 / 8 = 2176
    assert check_tp(qwen38, 8).row.value("ffn_intermediate_per_rank") == 2176


def test_q_heads_per_card(qwen38):
    # q-heads-per-card, seed 000 GQA paragraph: 24 query heads, t = 8 -> 3 per card
    assert check_tp(qwen38, 8).row.value("query_heads_per_rank") == 3


def test_q_kv_replication_8(qwen38):
    # q-kv-replication-8, seed 000 GQA paragraph: 4 KV heads at t = 8, each on 2 cards
    result = check_tp(qwen38, 8)
    assert result.row.value("kv_replicas") == 2
    assert result.row.value("kv_heads_per_rank") == 1
    (warning,) = result.warnings
    assert "num_key_value_heads=4" in warning and "replicated on 2 ranks" in warning


def test_q_kv_replication_4(qwen38):
    # q-kv-replication-4, seed 000 GQA paragraph: t = 4 -> exactly one KV head per card
    result = check_tp(qwen38, 4)
    assert result.row.value("kv_heads_per_rank") == 1
    assert result.row.value("kv_replicas") == 1
    assert result.warnings == ()
    assert result.row.value("kv_replication_extra_bytes_per_rank") == 0


def test_q_kv_replication_bytes(qwen38):
    # 17 full-attention layers (16 + MTP), K and V each 5120 x 256 per KV head, BF16:
    # replicated, a rank holds one head (2·17·5120·256·2 B); an even split would be half of it.
    row = check_tp(qwen38, 8).row
    assert row.value("kv_weight_bytes_per_rank") == 2 * 17 * 5120 * 256 * 2
    assert row.value("kv_replication_extra_bytes_per_rank") == 2 * 17 * 5120 * 256 * 2 // 2
    assert row.check_breakdowns() == []
    # the same cost from the weight inventory: replica parameters × 2 bytes
    terms = {t.key: t.value for t in per_rank_param_terms(qwen38, 8)}
    assert terms["kv_replica_params_per_rank"] * 2 == row.value(
        "kv_replication_extra_bytes_per_rank"
    )


def test_q_linear_attention_heads(qwen38):
    # Gated DeltaNet: 16 key heads and 48 value heads over t = 8
    row = check_tp(qwen38, 8).row
    assert row.value("linear_key_heads_per_rank") == 2
    assert row.value("linear_value_heads_per_rank") == 6


def test_q_gated_attention_shards(qwen38):
    # attn_output_gate: q_proj carries a gate as wide as the queries; 3 heads × 256 per card
    rows = shard_shapes(qwen38, 8)
    assert shard(rows, "W_Q") == [5120, 768]
    assert shard(rows, "W_Q gate") == [5120, 768]
    (wk,) = [r for r in rows if r.inputs["weight"] == "W_K"]
    assert [wk.value("shard_cols"), wk.value("kv_replicas")] == [256, 2]
    # in_proj_qkv: (2·16·128 + 48·128) / 8 columns; conv1d the same channels
    assert shard(rows, "in_proj_qkv") == [5120, 1280]
    assert shard(rows, "conv1d") == [4, 1280]


def test_vision_tower_is_excluded(qwen38):
    # The declared vision tower (460,730,096 params, config) cannot be sharded: it is left out.
    terms = {t.key: t.value for t in per_rank_param_terms(qwen38, 1, vocab_pad_multiple=1)}
    assert terms["excluded_declared_params"] == 460_730_096
    assert terms["params_per_rank"] == total_params(qwen38) - 460_730_096
    assert terms["params_per_rank"] == 27_781_427_952 - 460_730_096  # model-facts total


# ---------------- seed 003: Llama 3 70B ----------------


def test_l_heads_per_card(llama70b):
    # l-heads-per-card, seed 003 §7.3.4: "8 query heads, 1 KV head" at t = 8
    row = check_tp(llama70b, 8).row
    assert [row.value("query_heads_per_rank"), row.value("kv_heads_per_rank")] == [8, 1]
    assert row.value("kv_replicas") == 1


def test_l_wq_shard(llama_shards):
    # l-wq-shard, seed 003 §7.3.4: W_Q^(i) [8192, 1024]
    assert shard(llama_shards, "W_Q") == [8192, 1024]


def test_l_wk_shard(llama_shards):
    # l-wk-shard, seed 003 §7.3.4: W_K^(i) [8192, 128], V the same shape
    assert shard(llama_shards, "W_K") == [8192, 128]
    assert shard(llama_shards, "W_V") == [8192, 128]


def test_l_attn_out(llama_shards):
    # l-attn-out, seed 003 §7.3.4: [s, 1024] × W_O^(i)[1024, 8192], a row split
    assert shard(llama_shards, "W_O") == [1024, 8192]
    (wo,) = [r for r in llama_shards if r.inputs["weight"] == "W_O"]
    assert wo.inputs["split"] == "row"


def test_l_gate_up_shard(llama_shards):
    # l-gate-up-shard, seed 003 §7.3.4: gate and up [8192, 28672] -> [8192, 3584] per card
    assert shard(llama_shards, "W_gate") == [8192, 3584]
    assert shard(llama_shards, "W_up") == [8192, 3584]


def test_l_down_shard(llama_shards):
    # l-down-shard, seed 003 §7.3.4: down [3584, 8192], row split
    assert shard(llama_shards, "W_down") == [3584, 8192]


def test_l_vocab_shard(llama_shards, llama70b):
    # l-vocab-shard, seed 003 §7.3.4: embedding [128256, 8192] -> [16032, 8192] per card
    assert shard(llama_shards, "embedding") == [16032, 8192]
    assert shard(llama_shards, "LM head") == [8192, 16032]
    row = check_tp(llama70b, 8, vocab_pad_multiple=1).row
    assert row.value("vocab_padding_rows") == 0


def test_l_vocab_megatron_padding(llama70b):
    # Megatron pads to a multiple of 128·t: 128256 -> 126 × 1024 = 129024 at t = 8
    row = check_tp(llama70b, 8).row
    assert row.value("padded_vocab") == 129024
    assert row.value("vocab_rows_per_rank") == 16128
    assert row.value("vocab_padding_rows") == 768


def test_l_kv_max_t(llama70b):
    # l-kv-max-t, seed 003 §7.3.4: n_kv = 8, so t = 8 is the largest t without KV replication
    assert max_t_without_replication(llama70b) == 8


def test_l_layer_params(llama70b):
    # l-layer-params, seed 003 table 7-8: "8.56 亿 / 8 ≈ 1.07 亿" (one layer, and per card at t=8)
    whole = layer_params_per_rank(llama70b, 1, 0)
    per_card = layer_params_per_rank(llama70b, 8, 0)
    assert abs(whole / HUNDRED_MILLION - 8.56) <= 0.005
    assert abs(per_card / HUNDRED_MILLION - 1.07) <= 0.005
    assert whole == layer_params(llama70b, 0)  # the independent count in tpcalc.calc.params.counts


def test_l_total_at_t1(llama70b):
    # model facts: Llama 3 70B has 70,553,706,496 parameters; t = 1 holds all of them
    assert per_rank_params(llama70b, 1, vocab_pad_multiple=1) == 70_553_706_496


def test_shard_table_sums_to_per_rank(llama70b, qwen38):
    for spec, t in ((llama70b, 8), (qwen38, 8), (qwen38, 2)):
        rows = shard_shapes(spec, t)
        assert sum(r.value("params_per_rank") for r in rows) == per_rank_params(spec, t)


# ---------------- MoE and MLA (DeepSeek-V3) ----------------


def test_deepseek_mla_and_experts():
    spec = load_model("deepseek-v3")
    row = check_tp(spec, 8).row
    assert row.value("query_heads_per_rank") == 128 // 8
    assert row.value("expert_ffn_per_rank") == 2048 // 8
    assert row.value("shared_expert_ffn_per_rank") == 2048 // 8
    assert "kv_replicas" not in row.flat()  # MLA: a shared latent, no KV heads to replicate
    rows = shard_shapes(spec, 8)
    (down,) = [r for r in rows if r.inputs["module"] == "self_attn.kv_a_proj_with_mqa"]
    assert down.inputs["split"] == "replicated"
    assert shard(rows, "W_DKV") == [7168, 512 + 64]
    assert shard(rows, "W_UKV") == [512, 128 * (128 + 128) // 8]
    (experts,) = [r for r in rows if r.inputs["module"] == "mlp.experts.*.down_proj"]
    # 58 MoE layers plus the MTP layer (it copies the last layer's MoE FFN), 256 experts each
    assert experts.value("instances") == (58 + 1) * 256


# ---------------- errors ----------------


@pytest.mark.parametrize("t", [0, -1, -8])
def test_nonpositive_t_is_an_input_error(llama70b, t):
    with pytest.raises(InputError, match=rf"t={t} must be a positive integer"):
        check_tp(llama70b, t)
    with pytest.raises(InputError):
        shard_shapes(llama70b, t)


def test_t_not_dividing_heads_lists_valid_t(llama70b):
    with pytest.raises(DivisibilityError) as exc:
        check_tp(llama70b, 3)
    msg = str(exc.value)
    assert "num_attention_heads=64" in msg and "t=3" in msg
    assert "1, 2, 4, 8, 16, 32, 64" in msg
    assert "\n" not in msg


def test_t_not_dividing_ffn(qwen38):
    # 24 heads admit t = 6, but intermediate 17408 = 2^10 · 17 does not
    with pytest.raises(DivisibilityError, match=r"intermediate_size=17408 .* t in 1, 2, 4, 8 "):
        check_tp(qwen38, 6)


def small_spec(**fields) -> ModelSpec:
    base = dict(
        model_type="llama",
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=2,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=64,
        vocab_size=1001,
        tpcalc={"name": "tiny", "seq_length": 128},
    )
    return ModelSpec.model_validate(base | fields)


def test_kv_heads_neither_split_nor_replicated():
    # 8 KV heads at t = 12: 12 divides the 24 query heads, but 8 and 12 divide neither way
    spec = small_spec()
    with pytest.raises(DivisibilityError) as exc:
        check_tp(spec, 12)
    assert "num_key_value_heads=8" in str(exc.value)
    assert "use t in 1, 2, 4, 8, 24 for tiny" in str(exc.value)
    assert valid_tp_sizes(spec, 24) == [1, 2, 4, 8, 24]


def test_other_input_errors(llama70b):
    with pytest.raises(InputError, match="max_t=0"):
        valid_tp_sizes(llama70b, 0)
    with pytest.raises(InputError, match="pad multiple=0"):
        check_tp(llama70b, 8, vocab_pad_multiple=0)
    with pytest.raises(InputError, match="layer 80 does not exist"):
        layer_params_per_rank(llama70b, 8, 80)


def test_padded_vocab():
    assert padded_vocab(1001, 2, 1) == 1002  # pad multiple 1 still makes t divide the vocab
    assert padded_vocab(128256, 8, 1) == 128256
    assert padded_vocab(128256, 1, 128) == 1002 * 128


# ---------------- properties ----------------


@st.composite
def specs(draw) -> ModelSpec:
    """Small dense, MoE and hybrid models with random head/width factors."""
    n_kv = draw(st.sampled_from([1, 2, 4, 8]))
    n_h = n_kv * draw(st.sampled_from([1, 2, 3, 4, 6]))
    layers = draw(st.integers(1, 4))
    fields = dict(
        model_type=draw(st.sampled_from(["llama", "qwen2", "qwen3", "gpt_neox"])),
        hidden_size=64 * draw(st.integers(1, 12)),
        intermediate_size=16 * draw(st.integers(1, 40)),
        num_hidden_layers=layers,
        num_attention_heads=n_h,
        num_key_value_heads=n_kv,
        head_dim=draw(st.sampled_from([16, 32])),
        vocab_size=draw(st.integers(64, 5000)),
        tie_word_embeddings=draw(st.booleans()),
        attention_bias=draw(st.booleans()),
        attn_output_gate=draw(st.booleans()),
    )
    if draw(st.booleans()):  # MoE (DeepSeek-style shared experts)
        fields |= dict(
            n_routed_experts=draw(st.integers(1, 8)),
            num_experts_per_tok=1,
            n_shared_experts=draw(st.integers(0, 2)),
            moe_intermediate_size=16 * draw(st.integers(1, 12)),
            first_k_dense_replace=draw(st.integers(0, layers)),
            router_bias=draw(st.booleans()),
        )
    if draw(st.booleans()):  # hybrid Gated DeltaNet layers
        types = draw(st.lists(st.sampled_from(["linear_attention", "full_attention"]),
                              min_size=layers, max_size=layers))  # fmt: skip
        n_k = draw(st.sampled_from([2, 4, 8]))
        fields |= dict(
            layer_types=types,
            linear_num_key_heads=n_k,
            linear_num_value_heads=n_k * draw(st.sampled_from([1, 3])),
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
        )
    fields["num_nextn_predict_layers"] = draw(st.integers(0, 1))
    return ModelSpec.model_validate(fields | {"tpcalc": {"name": "gen", "seq_length": 64}})


PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(spec=specs(), pad=st.sampled_from([1, 8, 128]))
def test_valid_sizes_pass_and_params_never_grow(spec, pad):
    valid = valid_tp_sizes(spec, 64)
    assert valid[0] == 1
    previous = None
    for t in valid:
        result = check_tp(spec, t, vocab_pad_multiple=pad)  # no DivisibilityError
        assert result.row.check_breakdowns() == []
        n = per_rank_params(spec, t, vocab_pad_multiple=pad)
        assert previous is None or n <= previous
        previous = n


@PROPS
@given(spec=specs())
def test_t1_holds_the_whole_model(spec):
    assert per_rank_params(spec, 1, vocab_pad_multiple=1) == total_params(spec)
    assert all(
        layer_params_per_rank(spec, 1, i) == layer_params(spec, i)
        for i in range(spec.num_hidden_layers)
    )


@PROPS
@given(spec=specs(), t=st.integers(1, 48))
def test_invalid_sizes_raise_with_the_valid_list(spec, t):
    valid = valid_tp_sizes(spec, spec.num_attention_heads)
    if t in valid:
        return
    with pytest.raises(DivisibilityError) as exc:
        check_tp(spec, t)
    assert str(exc.value).endswith(f"use t in {', '.join(map(str, valid))} for gen")


@PROPS
@given(spec=specs())
def test_shards_tile_the_full_weight(spec):
    for t in valid_tp_sizes(spec, 16):
        for row in shard_shapes(spec, t, vocab_pad_multiple=1):
            v = row.flat()
            held = v["shard_rows"] * v["shard_cols"] * t
            full = v["full_rows"] * v["full_cols"]
            if v["split"] == "replicated":
                assert held == full * t
            else:  # KV replicas hold the same shard; vocab rows may be padded
                assert held == full * v["kv_replicas"] or (v["split"] == "vocab" and held >= full)


@pytest.mark.parametrize("name", model_names())
def test_builtin_models_match_the_parameter_counter(name):
    spec = load_model(name)
    declared = sum(p.params for p in spec.tpcalc.declared_parts)
    assert per_rank_params(spec, 1, vocab_pad_multiple=1) == total_params(spec) - declared
    for t in valid_tp_sizes(spec, 8):
        assert check_tp(spec, t).row.check_breakdowns() == []
