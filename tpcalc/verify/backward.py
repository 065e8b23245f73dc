"""Backward through Megatron's conjugate operators f and g, on t simulated cards.

Shoeybi et al. 2019 §3, Fig. 3 (seed 000 "反向的 2 次 all-reduce 从哪来"; seed 003 §7.3.3):
- f sits before a column-split matmul: identity forward, all-reduce of dX backward (each card
  used the whole X, so X's gradient is the sum of every card's contribution);
- g sits after a row-split matmul: all-reduce forward (sum of partial outputs), identity backward.
An MLP block and an attention block each carry one f and one g, so a layer costs 2 all-reduces
forward and 2 backward. Megatron-LM: ``megatron/core/tensor_parallel/mappings.py``
(``_CopyToModelParallelRegion``, ``_ReduceFromModelParallelRegion``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from msgspec import Struct

from tpcalc.verify.activations import Activation, activate, activation_grad
from tpcalc.verify.attention import AttentionProblem, head_layout, heads_backward, heads_forward
from tpcalc.verify.schemes import FfnProblem
from tpcalc.verify.sim import Cards, Phase, Role, Tally, column_slices


def f_forward(x: np.ndarray, cards: Cards) -> list[np.ndarray]:
    """f forward: identity; every card already has the whole X."""
    return [x for _ in range(cards.t)]


def f_backward(dx_parts: Sequence[np.ndarray], cards: Cards, block: str) -> np.ndarray:
    """f backward: all-reduce the cards' contributions to dX."""
    return cards.all_reduce(dx_parts, phase=Phase.backward, role=Role.hidden, label=f"f {block}")[0]


def g_forward(partials: Sequence[np.ndarray], cards: Cards, block: str) -> np.ndarray:
    """g forward: all-reduce the partial outputs."""
    return cards.all_reduce(partials, phase=Phase.forward, role=Role.hidden, label=f"g {block}")[0]


def g_backward(dy: np.ndarray, cards: Cards) -> list[np.ndarray]:
    """g backward: identity; every card receives the whole dY."""
    return [dy for _ in range(cards.t)]


class MlpGrad(Struct, frozen=True):
    """One card's (or the single card's) pass through Y = f(X·A)·B and back."""

    y: np.ndarray
    dx: np.ndarray
    dh: np.ndarray  # gradient at f(X·A)'s input, after f' (seed 003: [1, 1] and [0, 2])


def mlp_single(p: FfnProblem, x: np.ndarray, dy: np.ndarray, act: Activation) -> MlpGrad:
    """Reference on one card: dH = (dY·Bᵀ) ⊙ f'(X·A), dX = dH·Aᵀ."""
    z = x @ p.a
    dz = (dy @ p.b.T) * activation_grad(z, act)
    return MlpGrad(activate(z, act) @ p.b, dz @ p.a.T, dz)


class BlockForward(Struct, frozen=True):
    """A block's forward on t cards: the output every card has after g, and what backward needs."""

    y: np.ndarray
    card_y: tuple[np.ndarray, ...]  # partial outputs before g (seed 003: [4, 1] and [3, -3])
    saved: tuple  # per card: pre-activation (MLP) or the heads' cache (attention)


class BlockGrad(Struct, frozen=True):
    """dX after f's all-reduce, and each card's contribution before it."""

    dx: np.ndarray
    card_dx: tuple[np.ndarray, ...]
    card_dh: tuple[np.ndarray, ...] = ()  # MLP: gradient at f's input, after f'


def mlp_forward(p: FfnProblem, x: np.ndarray, act: Activation, cards: Cards) -> BlockForward:
    """f, then column-split A, local f(·), row-split B, then g."""
    cols = column_slices(p.intermediate, cards.t, what="intermediate_size")
    xs = f_forward(x, cards)
    z = [xi @ p.a[:, s] for xi, s in zip(xs, cols, strict=True)]
    partial = [activate(zi, act) @ p.b[s, :] for zi, s in zip(z, cols, strict=True)]
    return BlockForward(g_forward(partial, cards, "mlp"), tuple(partial), tuple(z))


def mlp_backward(
    p: FfnProblem, fwd: BlockForward, dy: np.ndarray, act: Activation, cards: Cards
) -> BlockGrad:
    """g backward (identity), each card's dX = ((dY·B_iᵀ) ⊙ f'(Z_i))·A_iᵀ, f backward."""
    cols = column_slices(p.intermediate, cards.t, what="intermediate_size")
    dys = g_backward(dy, cards)
    dz = [
        (dyi @ p.b[s, :].T) * activation_grad(zi, act)
        for dyi, zi, s in zip(dys, fwd.saved, cols, strict=True)
    ]
    parts = [dzi @ p.a[:, s].T for dzi, s in zip(dz, cols, strict=True)]
    return BlockGrad(f_backward(parts, cards, "mlp"), tuple(parts), tuple(dz))


def attention_forward(p: AttentionProblem, x: np.ndarray, cards: Cards) -> BlockForward:
    """f, each card's heads (Q/K/V columns by head), its rows of W_O, then g."""
    layout = head_layout(p.n_heads, p.n_kv, cards.t)
    xs = f_forward(x, cards)
    fw = [heads_forward(p, xi, c.q_heads) for xi, c in zip(xs, layout, strict=True)]
    partial = [out for out, _ in fw]
    y = g_forward(partial, cards, "attention")
    return BlockForward(y, tuple(partial), tuple(cache for _, cache in fw))


def attention_backward(
    p: AttentionProblem, fwd: BlockForward, dy: np.ndarray, cards: Cards
) -> BlockGrad:
    """g backward (identity), each card's heads backward, f backward."""
    dys = g_backward(dy, cards)
    parts = [heads_backward(p, c, dyi) for c, dyi in zip(fwd.saved, dys, strict=True)]
    return BlockGrad(f_backward(parts, cards, "attention"), tuple(parts))


def attention_single_grad(
    p: AttentionProblem, x: np.ndarray, dy: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reference on one card: (output, dX) with every head."""
    out, cache = heads_forward(p, x, range(p.n_heads))
    return out, heads_backward(p, cache, dy)


class LayerRun(Struct, frozen=True):
    """h = x + attn(x), out = h + mlp(h) (norms left out: they are per-token, not split)."""

    out: np.ndarray
    dx: np.ndarray
    tally: Tally


def layer_tp(
    attn: AttentionProblem, mlp: FfnProblem, dout: np.ndarray, act: Activation, t: int
) -> LayerRun:
    """One layer forward then backward on t cards; the tally holds every collective, in order."""
    cards = Cards(t)
    x = attn.x
    a = attention_forward(attn, x, cards)
    h = x + a.y
    m = mlp_forward(mlp, h, act, cards)
    dh = dout + mlp_backward(mlp, m, dout, act, cards).dx  # residual + MLP branch
    dx = dh + attention_backward(attn, a, dh, cards).dx
    return LayerRun(h + m.y, dx, cards.tally)


def layer_single(
    attn: AttentionProblem, mlp: FfnProblem, dout: np.ndarray, act: Activation
) -> tuple[np.ndarray, np.ndarray]:
    """Reference on one card: (out, dX)."""
    x = attn.x
    a_out, _ = attention_single_grad(attn, x, np.zeros_like(x))
    h = x + a_out
    m = mlp_single(mlp, h, dout, act)
    dh = dout + m.dx
    _, a_dx = attention_single_grad(attn, x, dh)
    return h + m.y, dh + a_dx
