"""Two independent counts agree: whole-model parameters (calc/params) and the sum of every
rank's TP shards at t = 1 (calc/shards_table), for dense, MoE and shared-expert-gated models."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpcalc.calc.params.counts import total_params
from tpcalc.calc.tp.table import per_rank_params
from tpcalc.catalog import load_model, model_names
from tpcalc.specs import ModelSpec


def declared(spec: ModelSpec) -> int:
    return sum(p.params for p in spec.tpcalc.declared_parts)


@pytest.mark.parametrize("name", model_names())
def test_builtins(name):
    spec = load_model(name)
    assert per_rank_params(spec, 1, vocab_pad_multiple=1) == total_params(spec) - declared(spec)


@settings(max_examples=60, deadline=None)
@given(
    model_type=st.sampled_from(["llama", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral"]),
    h=st.sampled_from([64, 128]),
    kv=st.sampled_from([1, 2, 4]),
    moe=st.booleans(),
    shared=st.sampled_from([None, 0, 96]),
    tied=st.booleans(),
)
def test_generated(model_type, h, kv, moe, shared, tied):
    fields = dict(
        model_type=model_type, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv, vocab_size=1000,
        tie_word_embeddings=tied, tpcalc={"name": "gen", "seq_length": 64},
    )  # fmt: skip
    if moe:
        fields |= dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
        if shared:
            fields["shared_expert_intermediate_size"] = shared
    spec = ModelSpec.model_validate(fields)
    assert per_rank_params(spec, 1, vocab_pad_multiple=1) == total_params(spec)
