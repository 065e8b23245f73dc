"""Attention split by heads on t simulated cards, including GQA with replicated KV heads.

Megatron-LM (Shoeybi et al. 2019 §3; seed 003 §7.3.4): W_Q, W_K, W_V are split by columns, a
whole head at a time, so each card computes its own heads' softmax attention with no
communication; W_O is split by rows and the partial outputs are summed by one all-reduce (g).
With grouped-query attention the KV heads are fewer than the query heads; when t > n_kv a card
still needs the KV head its query heads read, so each KV head is replicated on t / n_kv cards
(seed 000: Qwen3.8's 4 KV heads at t = 8 are each held by 2 cards; at t = 4 one per card).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from msgspec import Struct

from tpcalc.errors import DivisibilityError, divide
from tpcalc.verify.schemes import TOY_HIDDEN, sentence_x
from tpcalc.verify.sim import Cards, Phase, Role, Tally

TOY_HEAD_DIM = 2  # small enough to print, large enough that Q·Kᵀ is a real contraction
ATTENTION_STREAM = 1  # attention weights come from their own stream of the same --seed


class AttentionProblem(Struct, frozen=True):
    """X [T, hidden]; W_Q [hidden, n_h·d]; W_K, W_V [hidden, n_kv·d]; W_O [n_h·d, hidden]."""

    x: np.ndarray
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    n_heads: int
    n_kv: int
    head_dim: int
    causal: bool = True

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv


def draw_attention(
    seed: int,
    n_heads: int,
    n_kv: int,
    *,
    head_dim: int = TOY_HEAD_DIM,
    hidden: int = TOY_HIDDEN,
    causal: bool = True,
) -> AttentionProblem:
    """The sentence X and a draw of attention weights, scaled by 1/sqrt(fan-in)."""
    divide(n_heads, n_kv, what="num_attention_heads", by="num_key_value_heads")
    rng = np.random.default_rng([seed, ATTENTION_STREAM])

    def w(rows: int, cols: int) -> np.ndarray:
        return rng.standard_normal((rows, cols)) / np.sqrt(rows)

    return AttentionProblem(
        x=sentence_x(hidden),
        wq=w(hidden, n_heads * head_dim),
        wk=w(hidden, n_kv * head_dim),
        wv=w(hidden, n_kv * head_dim),
        wo=w(n_heads * head_dim, hidden),
        n_heads=n_heads,
        n_kv=n_kv,
        head_dim=head_dim,
        causal=causal,
    )


class CardHeads(Struct, frozen=True):
    """The query heads a card computes and the KV heads it must hold for them."""

    card: int
    q_heads: tuple[int, ...]
    kv_heads: tuple[int, ...]


def head_layout(n_heads: int, n_kv: int, t: int) -> tuple[CardHeads, ...]:
    """Query heads in contiguous blocks of n_heads / t; KV heads follow their query heads.

    Megatron-LM requires n_kv divisible by t (KV heads split) or t divisible by n_kv (each KV
    head replicated on t / n_kv cards); source: Megatron-LM ``core/transformer/attention.py``.
    """
    per_card = divide(n_heads, t, what="num_attention_heads", by="t")
    if n_kv % t and t % n_kv:
        raise DivisibilityError(
            f"num_key_value_heads={n_kv} and t={t}: one must divide the other "
            f"(KV heads are split when t <= {n_kv} and replicated when t is a multiple of it)"
        )
    group = n_heads // n_kv
    layout = []
    for card in range(t):
        q = tuple(range(card * per_card, (card + 1) * per_card))
        layout.append(CardHeads(card, q, tuple(sorted({h // group for h in q}))))
    return tuple(layout)


def kv_replication(layout: Sequence[CardHeads]) -> int:
    """How many cards hold each KV head (the largest count), counted from the layout."""
    holders: dict[int, int] = {}
    for card in layout:
        for g in card.kv_heads:
            holders[g] = holders.get(g, 0) + 1
    return max(holders.values())


def _cols(head: int, d: int) -> slice:
    return slice(head * d, (head + 1) * d)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class HeadsCache(Struct, frozen=True):
    """What the backward pass of one card's heads needs."""

    x: np.ndarray
    q_heads: tuple[int, ...]
    per_head: tuple[tuple[np.ndarray, ...], ...]  # (P, Q, K, V) per query head
    o_cat: np.ndarray


def heads_forward(
    p: AttentionProblem, x: np.ndarray, q_heads: Sequence[int]
) -> tuple[np.ndarray, HeadsCache]:
    """softmax(Q·Kᵀ/√d [+ causal mask])·V for ``q_heads``, then times their rows of W_O.

    Vaswani et al. 2017 eq. 1; GQA (Ainslie et al. 2023): query head h reads KV head h // group.
    Returns this card's partial output [T, hidden] (summed over cards by g).
    """
    d, scale = p.head_dim, 1.0 / math.sqrt(p.head_dim)
    tokens = x.shape[0]
    masked = np.triu(np.ones((tokens, tokens), dtype=bool), k=1) if p.causal else None
    outs, cache = [], []
    for h in q_heads:
        g = h // p.group
        q, k, v = x @ p.wq[:, _cols(h, d)], x @ p.wk[:, _cols(g, d)], x @ p.wv[:, _cols(g, d)]
        s = (q @ k.T) * scale
        if masked is not None:
            s = np.where(masked, -np.inf, s)
        prob = _softmax(s)
        outs.append(prob @ v)
        cache.append((prob, q, k, v))
    o_cat = np.concatenate(outs, axis=-1)
    rows = np.concatenate([np.arange(d) + h * d for h in q_heads])
    return o_cat @ p.wo[rows, :], HeadsCache(x, tuple(q_heads), tuple(cache), o_cat)


def heads_backward(p: AttentionProblem, cache: HeadsCache, d_out: np.ndarray) -> np.ndarray:
    """This card's contribution to dX through its heads (summed over cards by f's backward)."""
    d, scale = p.head_dim, 1.0 / math.sqrt(p.head_dim)
    rows = np.concatenate([np.arange(d) + h * d for h in cache.q_heads])
    d_ocat = d_out @ p.wo[rows, :].T
    dx = np.zeros_like(cache.x)
    for i, h in enumerate(cache.q_heads):
        g = h // p.group
        prob, q, k, v = cache.per_head[i]
        do = d_ocat[:, _cols(i, d)]
        dv = prob.T @ do
        dp = do @ v.T
        ds = prob * (dp - (dp * prob).sum(axis=-1, keepdims=True)) * scale
        dq, dk = ds @ k, ds.T @ q
        dx += dq @ p.wq[:, _cols(h, d)].T + dk @ p.wk[:, _cols(g, d)].T
        dx += dv @ p.wv[:, _cols(g, d)].T
    return dx


def attention_single(p: AttentionProblem) -> np.ndarray:
    """The reference: every head on one card."""
    out, _ = heads_forward(p, p.x, range(p.n_heads))
    return out


class AttentionRun(Struct, frozen=True):
    output: np.ndarray
    layout: tuple[CardHeads, ...]
    tally: Tally


def attention_tp(p: AttentionProblem, t: int) -> AttentionRun:
    """Forward on t cards: heads by card, partial outputs summed by g's all-reduce."""
    layout = head_layout(p.n_heads, p.n_kv, t)
    cards = Cards(t)
    partial = [heads_forward(p, p.x, c.q_heads)[0] for c in layout]
    out = cards.all_reduce(partial, phase=Phase.forward, role=Role.hidden, label="g attention")
    return AttentionRun(out[0], layout, cards.tally)
