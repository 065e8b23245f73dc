"""Core attention (scores, softmax, weighted V): what each kernel keeps, per rank.

Shapes per rank: S = s/cp tokens, b, a_l query heads and g_l KV heads on this rank.
- flash (FlashAttention-2 Dao 2023 §3.1; TE FusedAttnFunc ``save_for_backward(q, k, v, out,
  softmax stats)``; PyTorch CPU ``_scaled_dot_product_flash_attention_for_cpu``): q, k, v, the
  output O and the fp32 log-sum-exp per row [b, a_l, S]; with dropout only an RNG seed/offset.
- eager (Korthikanti et al. 2022 §4.1, the 11sbh + 5as²b of attention): q and k (QKᵀ), the
  softmax output, the dropout mask and output, v, and O (kept by the output projection). With
  GQA, k and v are first repeated to all query heads (Megatron-Core ``DotProductAttention`` and
  Hugging Face ``repeat_kv``), and the repeated copies are what the matmuls keep.
- sdpa-math (PyTorch ``_scaled_dot_product_attention_math`` on CPU, measured): fp32 copies of
  the scaled q and k and of v, k and v repeated to all query heads, and the fp32 probabilities;
  with dropout also its fp32 mask and output. O is kept by the output projection.
Not modelled (GPU details the CPU cannot show): TE's FlashAttention-2 path with the sbhd layout
returns ``output.contiguous()``, a second copy of O (cuDNN fused attention, TE's choice on
Hopper, writes O in place); a kernel that keeps v as a strided view of a fused QKV output keeps
that whole buffer alive. Under CP, TE's ring attention re-sends K/V blocks in backward, so each
rank keeps only its s/cp share.
Selective recompute (Korthikanti §5) checkpoints this block: only its inputs q, k, v and the
output O (kept by the output projection) remain.
"""

from __future__ import annotations

from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.records import Layout, SavedDtype, TensorRecord, rec
from tpcalc.choices import AttentionKernel, Recompute, SoftmaxDtype
from tpcalc.errors import InputError

RNG_STATE_ELEMENTS = 2  # philox seed and offset, int64 each (flash attention with dropout)


def core_attention_records(
    part: str,
    lay: Layout,
    opts: ActivationOptions,
    *,
    heads: int,
    kv_heads: int,
    qk_dim: int,
    v_dim: int,
    dropout: bool,
) -> list[TensorRecord]:
    """Tensors kept by core attention on one rank (see the module docstring for the source)."""
    n, b, a, g = lay.tokens, lay.b, heads, kv_heads
    act, fp32, tp = lay.act, SavedDtype.fp32, lay.tp_split
    q = rec(f"{part}.q", part, (n, b, a, qk_dim), act, tp, paper=True, note="query (post-RoPE)")
    k = rec(f"{part}.k", part, (n, b, g, qk_dim), act, tp, paper=True, note="key (post-RoPE)")
    v = rec(f"{part}.v", part, (n, b, g, v_dim), act, tp, paper=True, note="value")
    out = rec(
        f"{part}.out", part, (n, b, a, v_dim), act, tp, paper=True, note="O: output-proj input"
    )
    if opts.recompute is Recompute.selective:
        return [q, k, v, out]
    kernel = opts.attention
    if kernel is not AttentionKernel.flash and lay.cp > 1:
        raise InputError(
            f"context parallelism (cp={lay.cp}) needs a flash kernel (TE ring attention); "
            "use --attention flash"
        )
    if kernel is AttentionKernel.flash:
        lse = rec(f"{part}.softmax_lse", part, (b, a, n), fp32, tp, note="fp32 log-sum-exp")
        extra = [rec(f"{part}.rng_state", part, (RNG_STATE_ELEMENTS,), SavedDtype.int64, ())]
        return [q, k, v, out, lse, *(extra if dropout else [])]
    scores = (b, a, n, n)
    if kernel is AttentionKernel.sdpa_math:
        math = [
            rec(f"{part}.q_fp32", part, (b, a, n, qk_dim), fp32, tp, note="scaled q, fp32"),
            rec(f"{part}.k_fp32", part, (b, a, n, qk_dim), fp32, tp, note="scaled k, all heads"),
            rec(f"{part}.v_fp32", part, (b, a, n, v_dim), fp32, tp, note="v, all heads"),
            rec(f"{part}.probs_fp32", part, scores, fp32, tp, note="softmax output"),
        ]
        if dropout:
            math += [
                rec(f"{part}.dropout_mask_fp32", part, scores, fp32, tp, note="CPU dropout"),
                rec(f"{part}.dropout_out_fp32", part, scores, fp32, tp, note="probs x V input"),
            ]
        return [*math, out]
    if g != a:  # GQA: the matmuls keep k and v repeated to every query head
        k = rec(f"{part}.k", part, (n, b, a, qk_dim), act, tp, paper=True, note="k, all heads")
        v = rec(f"{part}.v", part, (n, b, a, v_dim), act, tp, paper=True, note="v, all heads")
    probs_dtype = fp32 if opts.softmax_dtype is SoftmaxDtype.fp32 else act
    probs = [
        rec(
            f"{part}.softmax_out",
            part,
            scores,
            probs_dtype,
            tp,
            paper=probs_dtype is act,
            note="softmax output",
        )
    ]
    if dropout:
        probs += [
            rec(f"{part}.softmax_dropout_mask", part, scores, SavedDtype.bool, tp, paper=True),
            rec(f"{part}.softmax_dropout_out", part, scores, act, tp, paper=True),
        ]
    elif probs_dtype is not act:
        probs.append(rec(f"{part}.probs_cast", part, scores, act, tp, note="probs x V input"))
    return [q, k, *probs, v, out]
