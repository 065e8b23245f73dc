"""Model-state recipes: 16 bytes/param (ZeRO) and 18 bytes/param (Megatron, fp32 grads)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpcalc.calc.params.counts import total_params
from tpcalc.calc.params.states import model_states_bytes, recipe_bytes
from tpcalc.calc.params.states_explain import model_states_terms
from tpcalc.choices import StateRecipe
from tpcalc.errors import InputError
from tpcalc.terms import Row
from tpcalc.units import GB


def test_zero16_recipe_is_2_2_12():
    # ZeRO §3.1: 2Ψ (fp16 weights) + 2Ψ (fp16 grads) + KΨ with K = 12 (fp32 master, m, v)
    rb = recipe_bytes(StateRecipe.zero16)
    assert (rb.weight_bytes, rb.grad_bytes, rb.optimizer_bytes) == (2, 2, 12)


def test_megatron18_recipe_has_fp32_grads():
    # Megatron-LM distributed-optimizer docs: bf16 params + fp32 grads -> 18 bytes/param
    rb = recipe_bytes(StateRecipe.megatron18)
    assert (rb.weight_bytes, rb.grad_bytes, rb.optimizer_bytes, rb.total_bytes) == (2, 4, 12, 18)


def test_qwen38_states_on_one_card(qwen38):
    # seed 000 summary: model states on one card 444.5 GB (16 B/param)
    v = model_states_bytes(total_params(qwen38), StateRecipe.zero16)
    assert abs(v / GB - 444.5) <= 0.05


def test_llama70b_states(llama70b):
    # seed 003 §7.3 (closing paragraph): 1,128.9 GB of model states
    v = model_states_bytes(total_params(llama70b), StateRecipe.zero16)
    assert abs(v / GB - 1128.9) <= 0.05


def test_llama70b_states_per_card_at_tp8(llama70b):
    # seed 003 §7.3: 1,128.9 ÷ 8 ≈ 141 GB per card after t = 8
    v = model_states_bytes(total_params(llama70b), StateRecipe.zero16, shards=8)
    assert abs(v / GB - 141) <= 0.5


def test_megatron18_is_eighteen_sixteenths_of_zero16(llama70b):
    n = total_params(llama70b)
    ratio = model_states_bytes(n, StateRecipe.megatron18) / model_states_bytes(
        n, StateRecipe.zero16
    )
    assert ratio == pytest.approx(18 / 16)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"params": -1}, "params=-1"), ({"params": 10, "shards": 0}, "shards=0")],
)
def test_bad_inputs_raise_one_line(kwargs, message):
    with pytest.raises(InputError, match=message) as exc:
        model_states_bytes(recipe=StateRecipe.zero16, **kwargs)
    assert "\n" not in str(exc.value)


@given(
    params=st.integers(min_value=0, max_value=10**13),
    shards=st.integers(min_value=1, max_value=1024),
    recipe=st.sampled_from(list(StateRecipe)),
)
def test_parts_add_up_to_the_total(params, shards, recipe):
    row = Row(inputs={}, terms=model_states_terms(params, recipe, shards=shards))
    assert row.check_breakdowns() == []
    assert row.value("model_states_bytes") == pytest.approx(
        model_states_bytes(params, recipe, shards=shards)
    )
