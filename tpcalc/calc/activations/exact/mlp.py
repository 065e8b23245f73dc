"""MLPs: dense GeLU 4h (GPT-3), dense SwiGLU (Llama, Qwen) and top-k routed experts, per rank.

Dense, after the norm (whose output fc1 keeps, see ``norms.norm_output``):
- GeLU: the GeLU input (fc1 output) and the fc2 input, [s, b, f/t] each (Korthikanti et al.
  2022 §4.1: 8sbh + 8sbh for f = 4h; Megatron's fused bias-GeLU keeps the same input).
- SwiGLU fused (Megatron ``bias_swiglu_impl``: ``SwiGLUFunction`` saves its input only): the fc1
  output [gate, up] of width 2f/t and the fc2 input; unfused (``F.silu(gate) * up``) also keeps
  silu(gate).
MoE (Megatron-Core alltoall dispatcher, grouped GEMM; modelled, not measured): a rank routes its
own s/(cp·t) tokens (Megatron requires SP with TP and MoE) to k experts each; with balanced
routing and no token dropping it receives as many token copies as it sends, T·k, whatever the
expert-parallel size. Kept: fp32 router scores [T, E], the top-k indices and probabilities, the
permuted tokens (fc1 input), fc1 output and fc2 input; the expert outputs only when the combine
weights them by the probabilities (``moe_probs_in_act`` off, older Megatron-Core; today's weights
inside the activation, ``techniques``); shared experts are a dense SwiGLU split by t. The router
keeps its scores in ``router_dtype`` (Megatron --moe-router-dtype). With a capacity factor cf
(Megatron --moe-expert-capacity-factor, --moe-pad-expert-input-to-capacity; GShard §2.2) the
expert tensors have the padded capacity cf·T·k rows instead of T·k.
"""

from __future__ import annotations

import math

from tpcalc.calc.activations.exact.norms import dropout_mask, norm_output
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.records import Layout, SavedDtype, Split, TensorRecord, rec
from tpcalc.calc.params.counts import shared_expert_intermediate
from tpcalc.specs import ModelSpec

PART = "mlp"
MOE_PART = "moe"


def _ffn_body(
    prefix: str,
    part: str,
    shape_of: tuple[int, ...],
    splits: tuple[Split, ...],
    act: SavedDtype,
    ffn: int,
    *,
    gated: bool,
    fused_swiglu: bool,
) -> list[TensorRecord]:
    """Tensors between fc1 and fc2 for ``shape_of`` leading dims and ``ffn`` columns per rank."""
    if not gated:
        return [
            rec(f"{prefix}.gelu_input", part, (*shape_of, ffn), act, splits, paper=True),
            rec(f"{prefix}.fc2_input", part, (*shape_of, ffn), act, splits, paper=True),
        ]
    out = [rec(f"{prefix}.fc1_output", part, (*shape_of, 2 * ffn), act, splits, paper=True)]
    if not fused_swiglu:
        out.append(rec(f"{prefix}.silu_output", part, (*shape_of, ffn), act, splits))
    out.append(rec(f"{prefix}.fc2_input", part, (*shape_of, ffn), act, splits, paper=True))
    return out


def dense_mlp_records(
    spec: ModelSpec, lay: Layout, opts: ActivationOptions, dropout: bool
) -> list[TensorRecord]:
    """A dense MLP of ``intermediate_size`` columns, split by t."""
    f_l = lay.heads(spec.intermediate_size, "intermediate_size")
    out = [norm_output(f"{PART}.fc1_input", PART, lay, spec.hidden_size)]
    out += _ffn_body(
        PART, PART, (lay.tokens, lay.b), lay.tp_split, lay.act, f_l,
        gated=spec.gated_mlp, fused_swiglu=opts.fused_swiglu,
    )  # fmt: skip
    if dropout:
        out.append(dropout_mask(f"{PART}.dropout_mask", PART, lay, spec.hidden_size))
    return out


def moe_records(
    spec: ModelSpec, lay: Layout, opts: ActivationOptions, dropout: bool
) -> list[TensorRecord]:
    """Router, routed experts and shared experts of one MoE layer (see the module docstring)."""
    h, e, k = spec.hidden_size, spec.n_routed_experts or 0, spec.num_experts_per_tok or 1
    f_e = spec.moe_intermediate_size or 0
    tokens = lay.norm_tokens * lay.b
    split, act = lay.norm_split, lay.act
    router = SavedDtype(opts.router_dtype.value)
    # rows the experts see: T·k, or the padded capacity cf·T·k (SRC_CAPACITY) when set
    rows = (
        tokens * k if opts.capacity_factor is None else math.ceil(opts.capacity_factor * tokens * k)
    )
    p = MOE_PART
    out = [
        norm_output(f"{p}.input", p, lay, h),
        rec(f"{p}.router_scores", p, (tokens, e), router, split, note="softmax/sigmoid scores"),
        rec(f"{p}.topk_indices", p, (tokens, k), SavedDtype.int64, split),
        rec(f"{p}.topk_probs", p, (tokens, k), router, split, note="kept by the combine"),
        rec(f"{p}.permuted_tokens", p, (rows, h), act, split, note="expert fc1 input"),
    ]
    out += _ffn_body(
        f"{p}.experts", p, (rows,), split, act, f_e,
        gated=spec.gated_mlp, fused_swiglu=opts.fused_swiglu,
    )  # fmt: skip
    out.append(rec(f"{p}.expert_output", p, (rows, h), act, split, note="for d(probs)"))
    shared = shared_expert_intermediate(spec)
    if shared:
        f_s = lay.heads(shared, "shared expert intermediate size")
        out += _ffn_body(
            f"{p}.shared", p, (lay.tokens, lay.b), lay.tp_split, act, f_s,
            gated=spec.gated_mlp, fused_swiglu=opts.fused_swiglu,
        )  # fmt: skip
    if dropout:
        out.append(dropout_mask(f"{p}.dropout_mask", p, lay, h))
    return out
