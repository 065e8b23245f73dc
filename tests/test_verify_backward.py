"""f and g on simulated cards, and attention split by heads (incl. GQA with replicated KV)."""

from __future__ import annotations

import numpy as np
import pytest
from msgspec.structs import replace

from tpcalc.calc.links.collectives import Collective
from tpcalc.errors import DivisibilityError
from tpcalc.verify.attention import (
    attention_single,
    attention_tp,
    draw_attention,
    head_layout,
    kv_replication,
)
from tpcalc.verify.backward import (
    attention_backward,
    attention_forward,
    attention_single_grad,
    layer_single,
    layer_tp,
    mlp_backward,
    mlp_forward,
    mlp_single,
)
from tpcalc.verify.kinds import Activation
from tpcalc.verify.schemes import compare, draw_problem
from tpcalc.verify.sim import Cards, Phase

QWEN_HEADS, QWEN_KV = 24, 4  # Qwen3.8 full-attention layers (model-facts.md)
EXACT = 1e-12


def _dy(shape, seed=11):
    return np.random.default_rng(seed).standard_normal(shape)


def _numeric_grad(fn, x, dy, eps=1e-6):
    """d(sum(fn(x) * dy))/dx by central differences: an independent check of a backward."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        g[idx] = ((fn(xp) - fn(xm)) * dy).sum() / (2 * eps)
    return g


# ---- the single-card references are right (finite differences) ----


@pytest.mark.parametrize("act", list(Activation))
def test_single_card_mlp_backward_matches_finite_differences(act):
    p = draw_problem(5)
    dy = _dy(p.x.shape)
    numeric = _numeric_grad(lambda x: mlp_single(p, x, dy, act).y, p.x, dy)
    assert np.max(np.abs(numeric - mlp_single(p, p.x, dy, act).dx)) < 1e-6


@pytest.mark.parametrize("causal", [True, False])
def test_single_card_attention_backward_matches_finite_differences(causal):
    a = draw_attention(4, QWEN_HEADS, QWEN_KV, causal=causal)
    dy = _dy(a.x.shape)
    numeric = _numeric_grad(lambda x: attention_single_grad(a, x, dy)[0], a.x, dy)
    assert np.max(np.abs(numeric - attention_single_grad(a, a.x, dy)[1])) < 1e-6


def test_single_card_layer_backward_matches_finite_differences():
    a, p = draw_attention(2, QWEN_HEADS, QWEN_KV), draw_problem(2)
    dy = _dy(a.x.shape)

    def out(x):
        shifted = replace(a, x=x)
        return layer_single(shifted, p, dy, Activation.gelu)[0]

    numeric = _numeric_grad(out, a.x, dy)
    assert np.max(np.abs(numeric - layer_single(a, p, dy, Activation.gelu)[1])) < 1e-6


# ---- t cards equal one card; the tally counts f and g ----


@pytest.mark.parametrize("act", list(Activation))
@pytest.mark.parametrize("t", [2, 4])
def test_mlp_dx_through_f_equals_one_card(act, t):
    p = draw_problem(9)
    dy = _dy(p.x.shape)
    cards = Cards(t)
    fwd = mlp_forward(p, p.x, act, cards)
    grad = mlp_backward(p, fwd, dy, act, cards)
    ref = mlp_single(p, p.x, dy, act)
    assert compare(fwd.y, ref.y).max_abs_diff < EXACT
    assert compare(grad.dx, ref.dx).max_abs_diff < EXACT
    # seed 003 §7.3.3: g all-reduces forward, f all-reduces backward: 1 + 1 per MLP
    assert cards.tally.count(Collective.all_reduce, Phase.forward) == 1
    assert cards.tally.count(Collective.all_reduce, Phase.backward) == 1
    assert [c.label for c in cards.tally.calls] == ["g mlp", "f mlp"]


@pytest.mark.parametrize("t", [2, 4, 8])
def test_attention_dx_through_f_equals_one_card(t):
    a = draw_attention(6, QWEN_HEADS, QWEN_KV)
    dy = _dy(a.x.shape)
    cards = Cards(t)
    grad = attention_backward(a, attention_forward(a, a.x, cards), dy, cards)
    assert compare(grad.dx, attention_single_grad(a, a.x, dy)[1]).max_abs_diff < EXACT
    assert cards.tally.count(Collective.all_reduce, Phase.forward) == 1
    assert cards.tally.count(Collective.all_reduce, Phase.backward) == 1


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_a_layer_costs_two_forward_and_two_backward_all_reduces(t):
    a, p = draw_attention(1, QWEN_HEADS, QWEN_KV), draw_problem(1)
    dy = _dy(a.x.shape)
    run = layer_tp(a, p, dy, Activation.silu, t)
    out, dx = layer_single(a, p, dy, Activation.silu)
    assert compare(run.out, out).max_abs_diff < EXACT
    assert compare(run.dx, dx).max_abs_diff < EXACT
    # seed 000 / seed 003 §7.3.3: 2 forward + 2 backward per layer (none on one card)
    per_phase = 2 if t > 1 else 0
    assert run.tally.count(Collective.all_reduce, Phase.forward) == per_phase
    assert run.tally.count(Collective.all_reduce, Phase.backward) == per_phase
    assert run.tally.count() == 2 * per_phase


# ---- attention split by heads ----


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_attention_by_heads_is_exact(t, causal):
    a = draw_attention(3, QWEN_HEADS, QWEN_KV, causal=causal)
    run = attention_tp(a, t)
    assert compare(run.output, attention_single(a)).max_abs_diff < EXACT
    assert run.tally.count(Collective.all_reduce) == (1 if t > 1 else 0)


def test_causal_mask_changes_the_result():
    args = (3, QWEN_HEADS, QWEN_KV)
    causal, full = draw_attention(*args), draw_attention(*args, causal=False)
    assert not compare(attention_single(causal), attention_single(full)).matches


def test_qwen_kv_heads_are_replicated_at_t8_not_at_t4():
    # seed 000: 24 Q heads, 4 KV heads; t = 8 → 3 Q heads per card and each KV head on 2 cards;
    # t = 4 → one KV head per card (seed-figures q-kv-replication-8 / -4)
    t8 = head_layout(QWEN_HEADS, QWEN_KV, 8)
    assert {len(c.q_heads) for c in t8} == {3}
    assert kv_replication(t8) == 2
    assert kv_replication(head_layout(QWEN_HEADS, QWEN_KV, 4)) == 1


def test_gqa_replication_with_t_larger_than_n_kv_is_exact():
    a = draw_attention(8, 8, 2)
    run = attention_tp(a, 8)  # 1 Q head per card; each of the 2 KV heads on 4 cards
    assert kv_replication(run.layout) == 4
    assert [c.kv_heads for c in run.layout] == [(0,)] * 4 + [(1,)] * 4
    assert compare(run.output, attention_single(a)).max_abs_diff < EXACT


@pytest.mark.parametrize(
    ("heads", "kv", "t", "message"),
    [
        (24, 4, 16, "num_attention_heads=24 is not divisible by t=16"),
        (24, 4, 6, "num_key_value_heads=4 and t=6: one must divide the other"),
    ],
)
def test_impossible_head_splits_raise(heads, kv, t, message):
    with pytest.raises(DivisibilityError, match=message):
        head_layout(heads, kv, t)
