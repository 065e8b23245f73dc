"""ZeRO stages 0-3: seed 000's per-card states, communication and the room for activations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpcalc.calc.activations.paper import paper_activations
from tpcalc.calc.activations.paper_explain import model_terms
from tpcalc.calc.dp.zero import (
    ZeroStage,
    zero_comm,
    zero_comm_bytes,
    zero_comm_parts,
    zero_stage,
    zero_states_bytes,
)
from tpcalc.calc.dp.zero_explain import zero_terms
from tpcalc.calc.links.link import Link
from tpcalc.calc.params.counts import total_params
from tpcalc.choices import Recompute, StateRecipe
from tpcalc.errors import InputError
from tpcalc.terms import Row
from tpcalc.units import GB

RECIPES = list(StateRecipe)
STAGES = list(ZeroStage)


def zero_row(spec, hw, stage: ZeroStage, n: int = 8, activation_bytes: float | None = None) -> Row:
    terms = zero_terms(
        params=total_params(spec), recipe=StateRecipe.zero16, stage=stage, n=n, hw=hw,
        link=Link.inter_node, activation_bytes=activation_bytes,
    )  # fmt: skip
    return Row(inputs={"stage": int(stage), "n": n}, terms=terms)


def test_states_on_one_card_and_ratio_to_the_card(qwen38, h800):
    row = zero_row(qwen38, h800, ZeroStage.none, n=1)
    # seed 000 summary: 444.5 GB of model states, 5.6x an 80 GB card
    assert abs(row.value("model_states_bytes") / GB - 444.5) <= 0.05
    assert abs(row.value("states_over_memory_ratio") - 5.6) <= 0.05


@pytest.mark.parametrize(
    ("stage", "printed_gb"),
    [(ZeroStage.optimizer, 152.8), (ZeroStage.gradients, 104.2), (ZeroStage.parameters, 55.6)],
)
def test_states_per_card_on_8_cards(qwen38, h800, stage, printed_gb):
    # seed 000 §ZeRO: 444.5 -> 152.8 -> 104.2 -> 55.6 GB on 8 cards
    assert abs(zero_row(qwen38, h800, stage).value("model_states_bytes") / GB - printed_gb) <= 0.05


def test_zero3_comm_is_one_and_a_half_dp(qwen38, h800):
    row = zero_row(qwen38, h800, ZeroStage.parameters)
    # seed 000 summary: ZeRO-3 each card sends 145.9 GB per step, 1.5x DP
    assert abs(row.value("comm_send_bytes_per_rank") / GB - 145.9) <= 0.05
    assert abs(row.value("comm_vs_dp_ratio") - 1.5) <= 0.05
    assert row.check_breakdowns() == []


def selective_activations(spec) -> float:
    """Seed 000's 45.6 GB: selective recompute, s = 4,096, b = 1, t = 1, all 64 layers."""
    terms = model_terms(
        paper_activations(
            spec, seq=4096, micro_batch=1, t=1, sp=False, recompute=Recompute.selective
        )
    )
    return Row(inputs={}, terms=terms).value("activation_bytes")


def test_free_for_activations_and_selective_recompute_does_not_fit(qwen38, h800):
    act = selective_activations(qwen38)
    row = zero_row(qwen38, h800, ZeroStage.parameters, activation_bytes=act)
    # seed 000 §ZeRO: 80 - 55.6 = 24.4 GB left; 45.6 GB of selective-recompute activations
    assert abs(row.value("free_for_activations_bytes") / GB - 24.4) <= 0.05
    assert abs(act / GB - 45.6) <= 0.05
    assert row.value("activations_fit") is False


def test_megatron_distributed_optimizer_is_6_plus_12_over_d():
    # Megatron-LM docs: bf16 params + fp32 grads with the distributed optimizer: 6 + 12/d B/param
    for d in (1, 2, 8, 64):
        v = zero_states_bytes(1000, StateRecipe.megatron18, ZeroStage.optimizer, d)
        assert v == pytest.approx(1000 * (6 + 12 / d))


def test_megatron18_stage1_comm_carries_fp32_grads():
    # reduce-scatter of fp32 grads (4 B) + all-gather of bf16 params (2 B), each (n-1)/n
    assert zero_comm_bytes(1000, StateRecipe.megatron18, ZeroStage.optimizer, 4) == pytest.approx(
        0.75 * 1000 * (4 + 2)
    )


def test_unknown_stage_is_one_line():
    with pytest.raises(InputError, match="ZeRO stage 4 does not exist") as exc:
        zero_stage(4)
    assert "\n" not in str(exc.value)


def test_zero_ranks_is_an_input_error():
    with pytest.raises(InputError, match="dp=0"):
        zero_states_bytes(10, StateRecipe.zero16, ZeroStage.parameters, 0)


params_st = st.integers(min_value=0, max_value=10**12)
n_st = st.integers(min_value=1, max_value=4096)


@given(params=params_st, n=n_st, recipe=st.sampled_from(RECIPES))
def test_memory_never_grows_with_the_stage(params, n, recipe):
    mem = [zero_states_bytes(params, recipe, s, n) for s in STAGES]
    assert all(a >= b for a, b in zip(mem, mem[1:], strict=False))


@given(params=params_st, n=n_st, recipe=st.sampled_from(RECIPES), stage=st.sampled_from(STAGES))
def test_memory_never_grows_with_n(params, n, recipe, stage):
    assert zero_states_bytes(params, recipe, stage, n + 1) <= zero_states_bytes(
        params, recipe, stage, n
    )


@given(params=params_st, n=st.integers(min_value=2, max_value=4096))
def test_zero16_comm_is_dp_until_stage3_then_one_and_a_half(params, n):
    # ZeRO §7.2: stages 1 and 2 move what DP moves; stage 3 adds a parameter all-gather: 1.5x
    dp = zero_comm_bytes(params, StateRecipe.zero16, ZeroStage.none, n)
    for stage in (ZeroStage.optimizer, ZeroStage.gradients):
        assert zero_comm_bytes(params, StateRecipe.zero16, stage, n) == pytest.approx(dp)
    zero3 = zero_comm_bytes(params, StateRecipe.zero16, ZeroStage.parameters, n)
    assert zero3 == pytest.approx(1.5 * dp)


@pytest.mark.parametrize("m", [1, 2, 5])
def test_gradient_accumulation_repeats_what_stages_2_and_3_shard(m):
    # ZeRO §5.2-5.3: with m micro-batches a stage-2 rank holds only its gradient shard, so it
    # reduce-scatters after every backward; stage 3 also gathers the weights before every
    # forward and backward. Stages 0-1 accumulate locally and reduce once. 1,000 params over
    # n = 4, zero16 (2 B gradients, 2 B weights): one reduce-scatter or gather is 0.75 × 2,000 B.
    one = 0.75 * 1000 * 2
    parts = {s: zero_comm_parts(1000, StateRecipe.zero16, s, 4, m) for s in STAGES}
    assert parts[ZeroStage.none].all_reduce_grads_bytes == pytest.approx(2 * one)
    assert parts[ZeroStage.optimizer].reduce_scatter_grads_bytes == pytest.approx(one)
    assert parts[ZeroStage.gradients].reduce_scatter_grads_bytes == pytest.approx(m * one)
    assert parts[ZeroStage.gradients].all_gather_params_update_bytes == pytest.approx(one)
    zero3 = parts[ZeroStage.parameters]
    assert zero3.reduce_scatter_grads_bytes == pytest.approx(m * one)
    assert zero3.all_gather_params_fwd_bytes == pytest.approx(m * one)
    assert zero3.all_gather_params_bwd_bytes == pytest.approx(m * one)
    assert zero3.all_gather_params_update_bytes == 0


def test_gradient_accumulation_pays_each_repeat_its_latency(h800):
    # every repeated collective is a ring of its own: m times the latency steps of one
    one = zero_comm(10**9, StateRecipe.zero16, ZeroStage.parameters, 16, h800, Link.inter_node,
                    nodes=2)  # fmt: skip
    four = zero_comm(10**9, StateRecipe.zero16, ZeroStage.parameters, 16, h800, Link.inter_node,
                     nodes=2, microbatches=4)  # fmt: skip
    assert four.latency_steps == one.latency_steps.times(4)
    assert four.comm_vs_dp_ratio == pytest.approx(4 * 1.5)


def test_zero_microbatches_must_be_positive():
    with pytest.raises(InputError, match="microbatches must be a positive integer, got 0"):
        zero_comm_parts(1000, StateRecipe.zero16, ZeroStage.parameters, 4, 0)


@given(n=n_st, stage=st.sampled_from(STAGES), recipe=st.sampled_from(RECIPES))
def test_parts_add_up(qwen38, h800, n, stage, recipe):
    terms = zero_terms(
        params=total_params(qwen38), recipe=recipe, stage=stage, n=n, hw=h800,
        link=Link.intra_node,
    )  # fmt: skip
    assert Row(inputs={}, terms=terms).check_breakdowns() == []
