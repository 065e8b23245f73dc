"""Parameter counts: exact public totals, seed figures, an independent count, properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpcalc.calc.params.breakdown_explain import param_terms
from tpcalc.calc.params.counts import (
    active_params,
    embedding_params,
    layer_params,
    lm_head_params,
    matmul_params,
    mtp_params,
    params_for,
    routed_expert_params,
    total_params,
)
from tpcalc.catalog import load_model, model_names
from tpcalc.choices import ParamConvention
from tpcalc.errors import InputError
from tpcalc.specs import ModelSpec
from tpcalc.terms import Row, Unit


def test_builtin_names():
    assert set(model_names()) >= {
        "qwen3.8",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "deepseek-v3",
    }


@pytest.mark.parametrize(
    ("name", "total"),
    [
        # model-facts: Meta-Llama-3-8B / -70B / Llama-3.1-405B checkpoint totals
        ("llama3-8b", 8_030_261_248),
        ("llama3-70b", 70_553_706_496),
        ("llama3-405b", 405_853_388_800),
        # model-facts / seed-figures: Qwen3.8-27B total incl. embedding, vision tower and MTP
        ("qwen3.8", 27_781_427_952),
    ],
)
def test_exact_totals(name, total):
    assert total_params(load_model(name)) == total


def test_qwen38_matmul_params():
    # seed 000 §张量并行: 6 × 25,624,600,064 × 4,096 (matmul params only)
    spec = load_model("qwen3.8")
    assert matmul_params(spec) == 25_624_600_064
    assert params_for(spec, ParamConvention.matmul) == 25_624_600_064
    assert params_for(spec, ParamConvention.all) == 27_781_427_952


def test_qwen38_parts():
    # model-facts: MTP = fc 2h·h + 3 norms + one full-attention layer; vision tower declared
    spec = load_model("qwen3.8")
    row = Row(inputs={}, terms=param_terms(spec))
    assert row.value("mtp_params") == 424_699_392
    assert row.value("vision_tower_params") == 460_730_096
    assert row.value("embedding_params") == 248320 * 5120
    # the matmul count is the total without input embedding, vision tower and MTP
    assert matmul_params(spec) == (
        total_params(spec) - embedding_params(spec) - 460_730_096 - mtp_params(spec)
    )


def test_deepseek_v3_totals():
    # model-facts: main model 671,026,419,200 WITHOUT the MTP module
    spec = load_model("deepseek-v3")
    assert total_params(spec) - mtp_params(spec) == 671_026_419_200
    # MTP (embedding and head shared, DeepSeek-V3 §2.2): eh_proj + 2 norms + one MoE layer + norm
    assert mtp_params(spec) == 2 * 7168 * 7168 + 2 * 7168 + layer_params(spec, 60) + 7168
    assert total_params(spec) == 682_636_487_424  # with MTP


def test_deepseek_v3_routed_and_active():
    spec = load_model("deepseek-v3")
    # seed 000 q-ep-routed-params: 58 MoE layers × 256 × 3 × 7168 × 2048 = 654B (653.9e9)
    assert routed_expert_params(spec) == 58 * 256 * 3 * 7168 * 2048
    assert abs(routed_expert_params(spec) / 1e9 - 653.9) <= 0.05
    # model-facts: 37.55e9 activated per token incl. the input embedding
    assert abs(active_params(spec) / 1e9 - 37.55) <= 0.005
    assert spec.moe_layers == 58 and spec.dense_layers == 3


def test_llama70b_layer():
    # seed 003 表 7-8: one layer 8.56 亿 parameters; exact 855,654,400
    spec = load_model("llama3-70b")
    assert layer_params(spec, 0) == 855_654_400
    assert abs(layer_params(spec, 0) / 1e8 - 8.56) <= 0.005
    # seed 003 §7.3.5: 6 × 705.5 亿 × 8,192 counts all parameters
    assert abs(params_for(spec, ParamConvention.all) / 1e8 - 705.5) <= 0.05


def test_layer_out_of_range():
    spec = load_model("llama3-8b")
    with pytest.raises(InputError, match="layer 32 does not exist"):
        layer_params(spec, 32)


def nanogpt_style_llama(h, inter, layers, heads, kv_heads, vocab, tied=False):
    """Independent count written out per tensor (not using tpcalc.calc.params.counts)."""
    d = h // heads
    per_layer = {
        "q_proj": h * heads * d,
        "k_proj": h * kv_heads * d,
        "v_proj": h * kv_heads * d,
        "o_proj": heads * d * h,
        "gate_proj": h * inter,
        "up_proj": h * inter,
        "down_proj": inter * h,
        "input_layernorm": h,
        "post_attention_layernorm": h,
    }
    out = {
        "embed_tokens": vocab * h,
        "layers": layers * sum(per_layer.values()),
        "norm": h,
        "lm_head": 0 if tied else vocab * h,
    }
    return sum(out.values())


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "llama3-405b"])
def test_llama_independent_count(name):
    s = load_model(name)
    expected = nanogpt_style_llama(
        s.hidden_size,
        s.intermediate_size,
        s.num_hidden_layers,
        s.num_attention_heads,
        s.num_key_value_heads,
        s.vocab_size,
    )
    assert total_params(s) == expected


def test_terms_shape():
    terms = param_terms(load_model("llama3-70b"))
    keys = [t.key for t in terms]
    assert len(keys) == len(set(keys))
    assert all(t.key.endswith("_params") and t.unit is Unit.params for t in terms)
    assert all(t.source for t in terms)
    row = Row(inputs={}, terms=terms)
    assert row.check_breakdowns() == []
    assert row.value("linear_attention_params") == 0
    assert row.value("lm_head_params") == lm_head_params(load_model("llama3-70b"))
    assert row.get("matmul_params").part_of is None


# ---- property tests: random small llama-like and MoE-like specs ----

TPCALC = {"name": "random", "seq_length": 128}


@st.composite
def llama_like(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0]))
    d = draw(st.sampled_from([8, 16, 32]))
    return ModelSpec.model_validate(
        {
            "model_type": draw(st.sampled_from(["llama", "qwen2", "qwen3", "gpt_neox"])),
            "hidden_size": heads * d,
            "intermediate_size": draw(st.integers(1, 512)),
            "num_hidden_layers": draw(st.integers(1, 6)),
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "vocab_size": draw(st.integers(1, 1000)),
            "tie_word_embeddings": draw(st.booleans()),
            "attention_bias": draw(st.booleans()),
            "mlp_bias": draw(st.booleans()),
            "tpcalc": {
                **TPCALC,
                "declared_parts": [
                    {"name": "vision_tower", "params": draw(st.integers(0, 99)), "source": "test"}
                ],
            },
        }
    )


@st.composite
def moe_like(draw):
    layers = draw(st.integers(1, 6))
    experts = draw(st.integers(1, 16))
    return ModelSpec.model_validate(
        {
            "model_type": draw(st.sampled_from(["deepseek_v3", "qwen3_moe", "mixtral"])),
            "hidden_size": 64,
            "intermediate_size": draw(st.integers(1, 256)),
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": draw(st.sampled_from([1, 2, 4])),
            "vocab_size": draw(st.integers(1, 1000)),
            "n_routed_experts": experts,
            "num_experts_per_tok": draw(st.integers(1, experts)),
            "moe_intermediate_size": draw(st.integers(1, 128)),
            "n_shared_experts": draw(st.integers(0, 2)),
            "first_k_dense_replace": draw(st.integers(0, layers)),
            "decoder_sparse_step": draw(st.integers(1, 3)),
            "router_bias": draw(st.booleans()),
            "num_nextn_predict_layers": draw(st.integers(0, 2)),
            "tpcalc": TPCALC,
        }
    )


def _check(spec: ModelSpec) -> None:
    terms = param_terms(spec)
    row = Row(inputs={}, terms=terms)
    parts = [int(t.value) for t in terms if t.part_of == "total_params"]
    assert sum(parts) == row.value("total_params") == total_params(spec)
    assert row.check_breakdowns() == []
    assert 0 < matmul_params(spec) <= total_params(spec)
    assert active_params(spec) <= total_params(spec)
    assert sum(layer_params(spec, i) for i in range(spec.num_hidden_layers)) < total_params(spec)


@settings(max_examples=60, deadline=None)
@given(llama_like())
def test_llama_like_breakdown_adds_up(spec):
    _check(spec)


@settings(max_examples=60, deadline=None)
@given(moe_like())
def test_moe_like_breakdown_adds_up(spec):
    _check(spec)
    assert routed_expert_params(spec) == spec.moe_layers * spec.n_routed_experts * 3 * 64 * (
        spec.moe_intermediate_size
    )
