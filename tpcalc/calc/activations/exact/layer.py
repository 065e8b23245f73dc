"""One transformer layer's saved tensors, and the tensors all layers share.

A layer is: norm -> attention part (full / MLA / Gated DeltaNet) -> [dropout] -> residual ->
norm -> MLP part (dense or MoE) -> [dropout] -> residual (pre-norm, Megatron and GPT-3 order).
Recompute (Korthikanti et al. 2022 §5): ``selective`` checkpoints core softmax attention (its
q, k, v inputs and O stay; Gated DeltaNet layers are not affected), ``full`` checkpoints the
whole layer so only its input [s/(cp·t) with SP, b, h] stays (Table 2: 2sbh).
"""

from __future__ import annotations

from msgspec.structs import replace

from tpcalc.calc.activations.exact.attention import full_attention_records, mla_records
from tpcalc.calc.activations.exact.linear_attention import gated_deltanet_records
from tpcalc.calc.activations.exact.mlp import dense_mlp_records, moe_records
from tpcalc.calc.activations.exact.norms import layer_norm_records, norm_output
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.activations.exact.records import Layout, SavedDtype, TensorRecord, rec
from tpcalc.calc.activations.exact.techniques import apply_techniques, recomputed_by
from tpcalc.calc.params.counts import MTP_FC_INPUTS
from tpcalc.choices import Recompute
from tpcalc.errors import InputError
from tpcalc.specs import ModelSpec


def layout(spec: ModelSpec, seq: int, micro_batch: int, opts: ActivationOptions) -> Layout:
    """The rank's token counts and splits; raises when s does not divide by cp (and t with SP)."""
    del spec  # the layout depends on the run, not the architecture
    return Layout.build(seq, micro_batch, opts.t, opts.cp, opts.sp(), opts.dtype)


def layer_kind(spec: ModelSpec, layer_index: int) -> str:
    """'attention+dense', 'linear_attention+moe', 'mla+moe', ... for layer ``layer_index``."""
    kinds = spec.resolved_layer_types
    if not 0 <= layer_index < len(kinds):
        raise InputError(f"layer_index={layer_index} is outside 0..{len(kinds) - 1}")
    if kinds[layer_index] == "linear_attention":
        attn = "linear_attention"
    else:
        attn = "mla" if spec.is_mla else "attention"
    return f"{attn}+{'moe' if spec.is_moe_layer(layer_index) else 'dense'}"


def saved_tensors(
    spec: ModelSpec,
    layer_index: int,
    seq: int,
    micro_batch: int,
    options: ActivationOptions | None = None,
) -> list[TensorRecord]:
    """Every tensor layer ``layer_index`` keeps for backward on one rank, in forward order."""
    opts = options or ActivationOptions()
    if opts.recompute_modules and opts.recompute is Recompute.selective:
        # Megatron: recompute_modules replaces selective's default ["core_attn"]
        opts = replace(opts, recompute=Recompute.none)
    kind = layer_kind(spec, layer_index)
    lay = layout(spec, seq, micro_batch, opts)
    h = spec.hidden_size
    if opts.recompute is Recompute.full:
        shape = (lay.norm_tokens, lay.b, h)
        note = "input of the checkpointed layer"
        return [rec("layer.input", "layer", shape, lay.act, lay.norm_split, paper=True, note=note)]
    dropout = opts.resolved_dropout(spec)
    ln = spec.uses_layernorm
    attn, mlp = kind.split("+")
    out = layer_norm_records("input_norm", "norm", lay, h, layernorm=ln, fused=opts.fused_norm)
    if attn == "linear_attention":
        out += gated_deltanet_records(spec, lay, dropout)
    elif attn == "mla":
        out += mla_records(spec, lay, opts, dropout)
    else:
        out += full_attention_records(spec, lay, opts, dropout)
    out += layer_norm_records(
        "post_attention_norm", "norm", lay, h, layernorm=ln, fused=opts.fused_norm
    )
    out += (moe_records if mlp == "moe" else dense_mlp_records)(spec, lay, opts, dropout)
    if not (
        opts.recompute_modules or opts.fp8_cache or opts.fp8_linear_inputs or opts.moe_probs_in_act
    ):
        return out
    return apply_techniques(
        out, modules=frozenset(opts.recompute_modules), fp8_cache=opts.fp8_cache,
        probs_in_act=opts.moe_probs_in_act, mla=attn == "mla",
        fp8_linear_inputs=opts.fp8_linear_inputs,
    )  # fmt: skip


# Where the rebuilt tensors of a recompute live, and for how long (``recompute_working_bytes``).
SRC_RECOMPUTE_WORKING = (
    "Megatron-Core tensor_parallel/random.py: CheckpointFunction.backward re-runs a checkpointed "
    "layer's (or core attention's, or module's) forward and then its backward, so its saved "
    "tensors exist again until that backward ends; CheckpointWithoutOutput (recompute_modules) "
    "rebuilds one module's output when its consumer's backward needs it; Korthikanti et al. "
    "2022 §5"
)
# Each norm the layernorm module discards is rebuilt on its own (one CheckpointWithoutOutput per
# norm), so its sites are single tensors; every other module rebuilds its tensors together.
ONE_SITE_PER_TENSOR = ("layernorm",)


# Megatron-Core GPTModel: the decoder's ``final_layernorm`` (TransformerBlock, post_process) and
# ``output_layer``, a ``tensor_parallel.ColumnParallelLinear`` that keeps its local input with
# SP and all-gathers it again in backward (Korthikanti et al. 2022 §4.2.2); each MTP depth runs
# its own final norm and the shared output layer (multi_token_prediction.py).
SRC_HEAD = (
    "Megatron-Core gpt_model.py (decoder final_layernorm; output_layer = ColumnParallelLinear, "
    "local input kept with SP, Korthikanti et al. 2022 §4.2.2); multi_token_prediction.py"
)


def head_tensors(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions | None = None
) -> list[TensorRecord]:
    """What the last pipeline stage keeps for backward after its last decoder layer, one
    micro-batch (``SRC_HEAD``): the final norm's input and statistics, and the output layer's
    input (the norm's output, [s/(cp·t) with SP, b, h]). Recompute never reaches them: full
    and selective recompute checkpoint decoder layers, and no recompute module names the
    final norm. The output layer is Megatron's own linear, not a Transformer Engine FP8 one,
    so its input stays 16-bit. The logits its loss keeps are a buffer
    (``layout.memory.buffer_bytes``)."""
    opts = options or ActivationOptions()
    lay, h, ln = layout(spec, seq, micro_batch, opts), spec.hidden_size, spec.uses_layernorm
    return [
        *layer_norm_records("final_norm", "head", lay, h, layernorm=ln, fused=opts.fused_norm,
                            paper=False),
        norm_output("output_layer.input", "head", lay, h, paper=False),
    ]  # fmt: skip


# Megatron-Core multi_token_prediction.py, MultiTokenPredictionLayer._concat_embeddings: enorm
# over the shifted tokens' embeddings and hnorm over the previous depth's hidden states, their
# outputs concatenated and projected by eh_proj (a column-parallel linear) before the module's
# transformer layer (DeepSeek-V3 report §2.2: M_k [RMSNorm(h); RMSNorm(Emb(t))]).
SRC_MTP_INPUT = (
    "Megatron-Core multi_token_prediction.py _concat_embeddings (enorm, hnorm, eh_proj); "
    "DeepSeek-V3 report §2.2 (the projection M_k of two RMSNorm outputs); eh_proj's input in "
    "FP8 in an FP8 run: _proj_and_transformer_layer runs _concat_embeddings under "
    "get_fp8_context (Megatron-LM 00611e6), DeepSeek-V3 report §3.3"
)
# eh_proj is the backend's column-parallel linear (Transformer Engine's with TE specs) and runs
# inside the run's FP8 context, so an FP8 run keeps its quantized input
# (``techniques.SRC_FP8_LINEAR_INPUTS``); DeepSeek-V3's FP8 caching keeps every Linear's input
# in FP8, the MTP projection's too (report §3.3: only the embedding, output head, gating,
# norms and attention stay in BF16).


def mtp_input_tensors(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions | None = None
) -> list[TensorRecord]:
    """What one MTP module keeps for backward before its transformer layer, one micro-batch
    (``SRC_MTP_INPUT``): the inputs and statistics of its two norms, and eh_proj's input, the
    [.., 2h] concatenation of their outputs (column-parallel: with SP the local s/t shard).
    The concatenation itself keeps nothing; eh_proj's input is kept in FP8 where the run keeps
    Linear inputs in FP8 (TE FP8 or DeepSeek-V3's FP8 caching)."""
    opts = options or ActivationOptions()
    lay, h, ln = layout(spec, seq, micro_batch, opts), spec.hidden_size, spec.uses_layernorm
    norms = [
        r for name in ("mtp.enorm", "mtp.hnorm")
        for r in layer_norm_records(name, "mtp", lay, h, layernorm=ln, fused=opts.fused_norm,
                                    paper=False)
    ]  # fmt: skip
    proj = norm_output("mtp.eh_proj.input", "mtp", lay, MTP_FC_INPUTS * h, paper=False)
    return apply_techniques(
        [*norms, proj], modules=frozenset(), fp8_cache=opts.fp8_cache, probs_in_act=False,
        mla=False, fp8_linear_inputs=opts.fp8_linear_inputs,
    )  # fmt: skip


def recompute_working_bytes(
    spec: ModelSpec,
    layer_index: int,
    seq: int,
    micro_batch: int,
    options: ActivationOptions | None = None,
) -> int:
    """The most that recomputing layer ``layer_index`` holds at once in backward, beyond what
    the layer keeps (``SRC_RECOMPUTE_WORKING``): the largest recompute site's rebuilt tensors.
    ``full``: the whole layer's saved tensors but its kept input (the checkpoint's input is the
    same storage); ``selective``: what core attention drops; recompute modules: the largest
    module's drop, each norm of ``layernorm`` a site of its own; no recompute: 0. The tensors
    are the ones a plain forward saves, with the run's other techniques (FP8 caching, ...)."""
    opts = options or ActivationOptions()
    if opts.recompute is Recompute.none and not opts.recompute_modules:
        return 0
    plain_opts = replace(opts, recompute=Recompute.none, recompute_modules=())
    plain = saved_tensors(spec, layer_index, seq, micro_batch, plain_opts)
    if opts.recompute is Recompute.full or not opts.recompute_modules:
        # one site: the checkpointed layer, or core attention (selective alone)
        kept = saved_tensors(spec, layer_index, seq, micro_batch, opts)
        return _bytes(plain) - _bytes(kept)
    mla = layer_kind(spec, layer_index).startswith("mla")
    sites = [0]
    for m in opts.recompute_modules:
        dropped = [r.bytes for r in plain if recomputed_by(r, m, mla)]
        sites += dropped if m in ONE_SITE_PER_TENSOR else [sum(dropped)]
    return max(sites)


def _bytes(records: list[TensorRecord]) -> int:
    return sum(r.bytes for r in records)


def rope_dim(spec: ModelSpec) -> int:
    """Width of the rotary table: qk_rope_head_dim for MLA, the head size otherwise; 0 if none."""
    if not spec.uses_rope or spec.full_attention_layers == 0:
        return 0
    return spec.qk_rope_head_dim or spec.head_dim_resolved


def shared_tensors(
    spec: ModelSpec, seq: int, micro_batch: int, options: ActivationOptions | None = None
) -> list[TensorRecord]:
    """Tensors every layer reads and autograd keeps once: the fp32 RoPE table [s/cp, d_rope].

    Megatron computes ``rotary_pos_emb`` once per forward and passes it to every layer; TE's
    fused RoPE keeps it for backward (one storage, so it counts once per model).
    """
    opts = options or ActivationOptions()
    lay = layout(spec, seq, micro_batch, opts)
    width = rope_dim(spec)
    if not width:
        return []
    shape = (lay.tokens, width)
    return [rec("rope.freqs", "shared", shape, SavedDtype.fp32, lay.replicated_split)]
