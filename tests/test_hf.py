"""Hugging Face config.json import: public totals, field mapping, errors naming file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpcalc.calc.params.counts import (
    active_params,
    embedding_params,
    lm_head_params,
    matmul_params,
    mtp_params,
    total_params,
)
from tpcalc.catalog import load_model
from tpcalc.errors import ConfigError
from tpcalc.hf import model_from_hf_config, vision_tower_params

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def data(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def spec(name: str):
    return model_from_hf_config(data(name), source_path=str(FIXTURES / f"{name}.json"))


@pytest.mark.parametrize(
    ("name", "total"),
    [
        # Mistral-7B-v0.1 checkpoint: 7,241,732,096 = 32·218,112,000 + 2·32000·4096 + 4096
        ("mistral-7b-v0.1", 7_241_732_096),
        # Qwen2-7B checkpoint: 7,615,616,512 (q/k/v biases, untied 152064-entry vocab)
        ("qwen2-7b", 7_615_616_512),
        # Mixtral-8x7B checkpoint: 46,702,792,704 (8 experts × 32 layers + routers)
        ("mixtral-8x7b-v0.1", 46_702_792_704),
        # GPT-NeoX-20B checkpoint: 20,554,567,680 = 44·(12h² + 13h) + 2·50432·h + 2h, h = 6144
        ("gpt-neox-20b", 20_554_567_680),
        # Meta-Llama-3-8B checkpoint (model-facts)
        ("meta-llama-3-8b", 8_030_261_248),
        # Qwen3.8-27B (model-facts): text + MTP + vision tower counted from vision_config
        ("qwen3.8-27b", 27_781_427_952),
    ],
)
def test_public_totals(name, total):
    assert total_params(spec(name)) == total


def test_deepseek_v3_main_model():
    # model-facts: 671,026,419,200 without MTP; the config import equals the built-in YAML
    s = spec("deepseek-v3")
    assert total_params(s) - mtp_params(s) == 671_026_419_200
    builtin = load_model("deepseek-v3")
    assert total_params(s) == total_params(builtin)
    assert active_params(s) == active_params(builtin)
    assert s.router_bias and s.moe_layers == 58 and s.is_mla
    assert s.head_dim_resolved == 128 + 64  # q·k width of MLA


def test_qwen35_nested_equals_builtin():
    # seed 000: matmul parameters 25,624,600,064 (Qwen3.8)
    s = spec("qwen3.8-27b")
    assert matmul_params(s) == 25_624_600_064
    assert s.full_attention_layers == 16 and s.linear_attention_layers == 48
    assert s.mtp_layers == 1 and s.attn_output_gate
    (part,) = s.tpcalc.declared_parts
    # model-facts: vision tower 460,730,096 params (the built-in YAML declares it)
    assert part.params == 460_730_096 == vision_tower_params(data("qwen3.8-27b")["vision_config"])
    assert total_params(s) == total_params(load_model("qwen3.8"))


def test_qwen35_layer_types_from_interval():
    d = data("qwen3.8-27b")
    del d["text_config"]["layer_types"]  # Qwen3-Next style: derived from full_attention_interval
    s = model_from_hf_config(d, source_path="x.json")
    assert s.resolved_layer_types[:4] == ("linear_attention",) * 3 + ("full_attention",)
    assert total_params(s) == 27_781_427_952


def qwen3_independent(h, inter, layers, heads, kv, d, vocab):
    """Qwen3 dense written out per tensor: Llama plus q_norm/k_norm of head_dim each."""
    attn = h * heads * d + 2 * h * kv * d + heads * d * h + 2 * d
    per_layer = attn + 3 * h * inter + 2 * h
    return vocab * h + layers * per_layer + h + vocab * h


def test_qwen3_8b():
    s = spec("qwen3-8b")
    assert s.uses_qk_norm
    assert total_params(s) == qwen3_independent(4096, 12288, 36, 32, 8, 128, 151936)
    # Qwen3-8B model card: 8.2B parameters, 6.95B non-embedding
    assert abs(total_params(s) / 1e9 - 8.2) <= 0.05
    non_embedding = total_params(s) - embedding_params(s) - lm_head_params(s)
    assert abs(non_embedding / 1e9 - 6.95) <= 0.005


def test_qwen3_30b_a3b():
    s = spec("qwen3-30b-a3b")
    assert s.n_routed_experts == 128 and s.moe_layers == 48 and s.norm_topk_prob
    # Qwen3-30B-A3B model card: 30.5B total, 29.9B non-embedding. Its "3.3B activated" is not
    # asserted: we count 3,353,032,704 (3.35e9, embedding and head included) and the card does not
    # say which convention or rounding gives 3.3.
    assert abs(total_params(s) / 1e9 - 30.5) <= 0.05
    non_embedding = total_params(s) - embedding_params(s) - lm_head_params(s)
    assert abs(non_embedding / 1e9 - 29.9) <= 0.05


@pytest.mark.parametrize(
    ("change", "moe_layers"),
    [({"decoder_sparse_step": 2}, 24), ({"mlp_only_layers": [0, 1]}, 46)],
)
def test_qwen3_moe_layer_placement(change, moe_layers):
    s = model_from_hf_config(data("qwen3-30b-a3b") | change, source_path="q.json")
    assert s.moe_layers == moe_layers
    assert s.dense_layers == 48 - moe_layers


def test_mixtral_active():
    s = spec("mixtral-8x7b-v0.1")
    assert s.moe_intermediate_size == 14336 and s.moe_layers == 32
    # Mixtral paper (arXiv 2401.04088) §1: 47B parameters, 13B active per token
    assert abs(total_params(s) / 1e9 - 47) <= 0.5
    assert abs(active_params(s) / 1e9 - 13) <= 0.5


def test_gpt_neox_shape():
    s = spec("gpt-neox-20b")
    assert not s.gated_mlp and s.uses_layernorm and s.qkv_bias and s.mlp_bias
    assert s.kv_heads == s.num_attention_heads  # no num_key_value_heads: MHA


def test_gpt3_megatron_formula():
    # Narayanan et al. 2021 (arXiv 2104.04473) eq. 2: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh));
    # it has a learned s·h position table (rotary here) and leaves out the final LayerNorm (2h).
    s = spec("gpt3-175b")
    layers, h, vocab, seq = 96, 12288, 51200, 2048
    megatron = 12 * layers * h * h + 13 * layers * h + (vocab + seq) * h
    assert total_params(s) == megatron - seq * h + 2 * h
    assert abs(total_params(s) / 1e9 - 175) <= 0.5  # "GPT-3 175B"


def test_deepseek_moe_layer_freq():
    s = model_from_hf_config(data("deepseek-v3") | {"moe_layer_freq": 2}, source_path="d.json")
    # DeepseekV3DecoderLayer: MoE when i >= 3 and i % 2 == 0 -> layers 4, 6, ..., 60
    assert s.moe_layers == len(range(4, 61, 2))


def test_tpcalc_block(tmp_path):
    s = spec("mistral-7b-v0.1")
    assert s.name == "mistral-7b-v0.1"
    # Mistral publishes no training length: tpcalc's documented 4,096, not max_position_embeddings
    # (32,768), recorded as a default so reports can say so
    assert s.seq_length == 4096 and s.tpcalc.seq_length_defaulted
    assert "without a published training length" in s.tpcalc.seq_length_source
    path = tmp_path / "Mistral-7B-v0.1" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data("mistral-7b-v0.1")))
    via_catalog = load_model(str(path))
    assert via_catalog.name == "Mistral-7B-v0.1"
    assert total_params(via_catalog) == 7_241_732_096


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("mistral-7b-v0.1", lambda d: d.pop("hidden_size"), "m.json: hidden_size: required key"),
        (
            "qwen3.8-27b",
            lambda d: d["text_config"].pop("num_hidden_layers"),
            "m.json: text_config.num_hidden_layers: required key is missing",
        ),
        (
            "qwen3.8-27b",
            lambda d: d["vision_config"].pop("depth"),
            "m.json: vision_config.depth: required key is missing",
        ),
        ("mixtral-8x7b-v0.1", lambda d: d.pop("num_local_experts"), "num_local_experts: required"),
        ("qwen3-30b-a3b", lambda d: d.pop("num_experts"), "num_experts: required key is missing"),
        ("qwen2-7b", lambda d: d.update(model_type="bert"), "model_type: 'bert' is not supported"),
        ("qwen2-7b", lambda d: d.update(num_attention_heads=0), "m.json: num_attention_heads"),
        ("qwen2-7b", lambda d: d.update(num_key_value_heads=5), "not a multiple"),
    ],
)
def test_errors_name_file_and_field(name, edit, message):
    d = data(name)
    edit(d)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        model_from_hf_config(d, source_path="m.json")


def test_qwen35_wrapper_tie_wins():
    d = data("qwen3.8-27b")
    d["tie_word_embeddings"], d["text_config"]["tie_word_embeddings"] = True, False
    s = model_from_hf_config(d, source_path="t.json")
    assert s.tie_word_embeddings and lm_head_params(s) == 0
    assert total_params(s) == 27_781_427_952 - 248320 * 5120


@pytest.mark.parametrize("change", [{"decoder_sparse_step": 2}, {"mlp_only_layers": [0, 1]}])
def test_qwen3_moe_active_params_follow_the_layer_placement(change):
    from tpcalc.calc.params.counts import active_layer_params, layer_params, mlp_params
    from tpcalc.calc.pipeline.breakdown import flop_stage_times, stage_matmul_params
    from tpcalc.catalog import load_hardware

    s = model_from_hf_config(data("qwen3-30b-a3b") | change, source_path="q.json")
    idle_expert_params = (128 - 8) * mlp_params(s, 768)  # E - k experts of 3·h·768 each
    for i in range(s.num_hidden_layers):
        dense = not s.is_moe_layer(i)
        # a dense layer multiplies all its weights; an MoE layer skips its E - k idle experts
        expected = layer_params(s, i) - (0 if dense else idle_expert_params)
        assert active_layer_params(s, i) == expected > 0
    # independent count: everything but MTP/declared parts, minus the idle experts of MoE layers
    independent = total_params(s) - mtp_params(s) - s.moe_layers * idle_expert_params
    assert active_params(s) == independent
    head = s.vocab_size * s.hidden_size  # the LM head multiplies V·h; no embedding lookup
    stages = stage_matmul_params(s, 4, 1)
    assert sum(stages) == independent - embedding_params(s) - lm_head_params(s) + head
    assert min(stages) > 0
    times = flop_stage_times(s, load_hardware("h100-sxm"), p=4, v=1, tokens=4096, tp=1)
    assert times.forward_s > 0 and times.backward_weight_s > 0
