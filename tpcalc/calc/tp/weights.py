"""The weight inventory of a model under tensor parallelism: every weight, its split, its shard.

Shapes are [in, out] as in seed 003 §7.3.4 (``X[s, h] × W_Q[h, n_h·d]``); a vector (norm
weight, bias) is [1, n]. Split kinds follow Megatron-LM ``core/tensor_parallel/layers.py``:
- Q/K/V, gate, up, Gated DeltaNet input projections: ``ColumnParallelLinear`` (out / t);
- W_O, down, out_proj: ``RowParallelLinear`` (in / t; its bias is replicated);
- embedding and LM head: ``VocabParallelEmbedding`` / the vocab-parallel output layer
  (padded vocab / t rows);
- norms, MoE router, MLA down-projections (q_a_proj, kv_a_proj_with_mqa): replicated
  (Megatron ``MLASelfAttention`` builds the down-projections "duplicated").
Gated DeltaNet follows vLLM ``models/qwen3_next.py`` (in_proj, conv1d, dt_bias, A_log split by
head; the gated norm replicated). K/V of GQA attention follow ``QKVParallelLinear``: when
t > n_kv each rank holds one KV head, replicated on t / n_kv ranks (seed 000's GQA paragraph).
"""

from __future__ import annotations

from collections import Counter

from msgspec import Struct
from msgspec.structs import replace

from tpcalc.calc.params.counts import shared_expert_intermediate
from tpcalc.calc.tp.rules import Split, kv_split, padded_vocab, require_tp
from tpcalc.choices import DEFAULT_VOCAB_PAD_MULTIPLE
from tpcalc.errors import InputError, divide
from tpcalc.specs import ModelSpec


class ShardedWeight(Struct, frozen=True):
    """One weight of the model (per layer, per expert) and what one rank holds of it."""

    block: str  # embedding | attention | mla | linear_attention | mlp | moe | mtp | norm | lm_head
    weight: str  # seed 003's name where it has one (W_Q, W_K, ...), else the HF module name
    module: str  # Hugging Face module path inside a layer (self_attn.q_proj)
    split: Split
    rows: int
    cols: int
    shard_rows: int
    shard_cols: int
    instances: int = 1  # copies in the model: layers, or layers × experts
    replicas: int = 1  # ranks holding the same shard (KV heads when t > n_kv)

    @property
    def params(self) -> int:
        return self.rows * self.cols

    @property
    def shard_params(self) -> int:
        return self.shard_rows * self.shard_cols

    @property
    def params_per_rank(self) -> int:
        return self.shard_params * self.instances


class _Builder:
    """Makes ShardedWeights for one t; callers have already checked the split with require_tp."""

    def __init__(self, spec: ModelSpec, t: int):
        self.spec, self.t = spec, t

    def column(self, block: str, weight: str, module: str, n_in: int, n_out: int) -> ShardedWeight:
        shard = divide(n_out, self.t, what=f"{module} output", by="t")
        return ShardedWeight(block, weight, module, Split.column, n_in, n_out, n_in, shard)

    def row(self, block: str, weight: str, module: str, n_in: int, n_out: int) -> ShardedWeight:
        shard = divide(n_in, self.t, what=f"{module} input", by="t")
        return ShardedWeight(block, weight, module, Split.row, n_in, n_out, shard, n_out)

    def replicated(
        self, block: str, weight: str, module: str, n_in: int, n_out: int
    ) -> ShardedWeight:
        return ShardedWeight(block, weight, module, Split.replicated, n_in, n_out, n_in, n_out)

    def norm(
        self, block: str, module: str, n: int, *, layernorm: bool | None = None
    ) -> list[ShardedWeight]:
        """RMSNorm: a weight; LayerNorm: weight and bias; replicated on every rank."""
        out = [self.replicated(block, module, f"{module}.weight", 1, n)]
        if self.spec.uses_layernorm if layernorm is None else layernorm:
            out.append(self.replicated(block, module, f"{module}.bias", 1, n))
        return out


def _gqa_attention(spec: ModelSpec, b: _Builder) -> list[ShardedWeight]:
    """Q/K/V column-split by head, W_O row-split (seed 003 §7.3.4; Shoeybi et al. 2019 §3)."""
    h, d = spec.hidden_size, spec.head_dim_resolved
    q, kv = spec.num_attention_heads * d, spec.kv_heads * d
    kv_per_rank, replicas = kv_split(spec, b.t)
    blk, out = "attention", []
    # The weights [h, ·], then (with qkv_bias) the biases [1, ·], split the same way.
    for w, suffix, n_in in (("W", "", h), ("b", ".bias", 1))[: 1 + spec.qkv_bias]:
        out.append(b.column(blk, f"{w}_Q", f"self_attn.q_proj{suffix}", n_in, q))
        if spec.attn_output_gate:
            # Qwen3.5: q_proj also emits a same-width output gate (2 × n_h × d columns in all).
            out.append(b.column(blk, f"{w}_Q gate", f"self_attn.q_proj{suffix} (gate)", n_in, q))
        for x in "KV":
            module = f"self_attn.{x.lower()}_proj{suffix}"
            full = b.replicated(blk, f"{w}_{x}", module, n_in, kv)
            out.append(
                replace(full, split=Split.column, shard_cols=kv_per_rank * d, replicas=replicas)
            )
    out.append(b.row(blk, "W_O", "self_attn.o_proj", q, h))
    if spec.o_proj_bias:
        out.append(b.replicated(blk, "b_O", "self_attn.o_proj.bias", 1, h))
    if spec.attention_sinks:  # GPT-OSS: one sink logit per query head, split with the heads
        out.append(b.column(blk, "sinks", "self_attn.sinks", 1, spec.num_attention_heads))
    if spec.uses_qk_norm:
        out += b.norm(blk, "self_attn.q_norm", d) + b.norm(blk, "self_attn.k_norm", d)
    return out


def _mla(spec: ModelSpec, b: _Builder) -> list[ShardedWeight]:
    """DeepSeek MLA: latent down-projections replicated, up-projections column, o_proj row
    (Megatron ``MLASelfAttention``; vLLM ``DeepseekV2MLAAttention``)."""
    h, n_h = spec.hidden_size, spec.num_attention_heads
    nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0
    v_dim, kv_rank = spec.v_head_dim or 0, spec.kv_lora_rank or 0
    blk = "mla"
    out: list[ShardedWeight] = []
    if spec.q_lora_rank:
        out.append(b.replicated(blk, "W_DQ", "self_attn.q_a_proj", h, spec.q_lora_rank))
        out += b.norm(blk, "self_attn.q_a_layernorm", spec.q_lora_rank)
        out.append(
            b.column(blk, "W_UQ", "self_attn.q_b_proj", spec.q_lora_rank, n_h * (nope + rope))
        )
    else:
        out.append(b.column(blk, "W_Q", "self_attn.q_proj", h, n_h * (nope + rope)))
    out.append(b.replicated(blk, "W_DKV", "self_attn.kv_a_proj_with_mqa", h, kv_rank + rope))
    out += b.norm(blk, "self_attn.kv_a_layernorm", kv_rank)
    out.append(b.column(blk, "W_UKV", "self_attn.kv_b_proj", kv_rank, n_h * (nope + v_dim)))
    out.append(b.row(blk, "W_O", "self_attn.o_proj", n_h * v_dim, h))
    if spec.attention_bias:
        # Biases on the replicated down-projections and on o_proj: all replicated.
        if spec.q_lora_rank:
            out.append(b.replicated(blk, "b_DQ", "self_attn.q_a_proj.bias", 1, spec.q_lora_rank))
        out.append(
            b.replicated(blk, "b_DKV", "self_attn.kv_a_proj_with_mqa.bias", 1, kv_rank + rope)
        )
        out.append(b.replicated(blk, "b_O", "self_attn.o_proj.bias", 1, h))
    return out


def _linear_attention(spec: ModelSpec, b: _Builder) -> list[ShardedWeight]:
    """Gated DeltaNet (Qwen3.5/Qwen3-Next), split by key/value head as vLLM ``qwen3_next.py``."""
    h = spec.hidden_size
    n_k, n_v = spec.linear_num_key_heads or 0, spec.linear_num_value_heads or 0
    key_dim = n_k * (spec.linear_key_head_dim or 0)
    value_dim = n_v * (spec.linear_value_head_dim or 0)
    conv_dim = 2 * key_dim + value_dim
    blk, la = "linear_attention", "linear_attn"
    return [
        b.column(blk, "in_proj_qkv", f"{la}.in_proj_qkv", h, conv_dim),
        b.column(blk, "in_proj_z", f"{la}.in_proj_z", h, value_dim),
        b.column(blk, "in_proj_b", f"{la}.in_proj_b", h, n_v),
        b.column(blk, "in_proj_a", f"{la}.in_proj_a", h, n_v),
        b.column(blk, "conv1d", f"{la}.conv1d", spec.linear_conv_kernel_dim or 0, conv_dim),
        b.column(blk, "dt_bias", f"{la}.dt_bias", 1, n_v),
        b.column(blk, "A_log", f"{la}.A_log", 1, n_v),
        *b.norm(blk, f"{la}.norm", spec.linear_value_head_dim or 0, layernorm=False),
        b.row(blk, "out_proj", f"{la}.out_proj", value_dim, h),
    ]


def _mlp(spec: ModelSpec, b: _Builder, blk: str, prefix: str, width: int) -> list[ShardedWeight]:
    """gate/up column-split, down row-split (seed 003 §7.3.4 SwiGLU; Shoeybi et al. 2019 §3)."""
    h = spec.hidden_size
    out = []
    if spec.gated_mlp:
        out.append(b.column(blk, "W_gate", f"{prefix}.gate_proj", h, width))
    out.append(b.column(blk, "W_up", f"{prefix}.up_proj", h, width))
    out.append(b.row(blk, "W_down", f"{prefix}.down_proj", width, h))
    if spec.mlp_bias:
        out.append(b.column(blk, "b_up", f"{prefix}.up_proj.bias", 1, width))
        if spec.gated_mlp:
            out.append(b.column(blk, "b_gate", f"{prefix}.gate_proj.bias", 1, width))
        out.append(b.replicated(blk, "b_down", f"{prefix}.down_proj.bias", 1, h))
    return out


def _moe(spec: ModelSpec, b: _Builder) -> list[ShardedWeight]:
    """Router replicated; every expert's FFN split by t (Megatron expert TP = TP, no EP here)."""
    h, n_e = spec.hidden_size, spec.n_routed_experts or 0
    out = [b.replicated("moe", "router", "mlp.gate", h, n_e)]
    if spec.router_bias:
        out.append(b.replicated("moe", "router bias", "mlp.gate.e_score_correction_bias", 1, n_e))
    experts = _mlp(spec, b, "moe", "mlp.experts.*", spec.moe_intermediate_size or 0)
    out += [replace(w, instances=n_e) for w in experts]
    shared = shared_expert_intermediate(spec)
    if shared:
        out += _mlp(spec, b, "moe", "mlp.shared_experts", shared)
        if spec.shared_expert_intermediate_size is not None:
            # Qwen MoE gates the shared expert with a [h, 1] sigmoid gate.
            out.append(b.replicated("moe", "shared expert gate", "mlp.shared_expert_gate", h, 1))
    return out


def layer_kind(spec: ModelSpec, i: int) -> tuple[str, str]:
    """(attention kind, MLP kind) of decoder layer i (0-based)."""
    if not 0 <= i < spec.num_hidden_layers:
        raise InputError(
            f"layer {i} does not exist: {spec.name} has layers 0..{spec.num_hidden_layers - 1}"
        )
    attn = spec.resolved_layer_types[i]
    attn = (
        "linear_attention"
        if attn == "linear_attention"
        else ("mla" if spec.is_mla else "attention")
    )
    mlp = "moe" if spec.is_moe_layer(i) else "dense"
    return attn, mlp


ATTENTION_BUILDERS = {
    "attention": _gqa_attention,
    "mla": _mla,
    "linear_attention": _linear_attention,
}


def _layer(spec: ModelSpec, b: _Builder, attn: str, mlp: str) -> list[ShardedWeight]:
    """One decoder layer: two norms, its attention, its MLP."""
    out = b.norm("norm", "input_layernorm", spec.hidden_size)
    out += ATTENTION_BUILDERS[attn](spec, b)
    out += b.norm("norm", "post_attention_layernorm", spec.hidden_size)
    out += _moe(spec, b) if mlp == "moe" else _mlp(spec, b, "mlp", "mlp", spec.intermediate_size)
    return out


def _mtp_extras(spec: ModelSpec, b: _Builder) -> list[ShardedWeight]:
    """MTP module besides its decoder layer: enorm, hnorm, eh_proj (Megatron ColumnParallelLinear
    2h -> h), final norm; embedding and LM head are shared with the main model."""
    h = spec.hidden_size
    out = b.norm("mtp", "mtp.enorm", h) + b.norm("mtp", "mtp.hnorm", h)
    out.append(b.column("mtp", "eh_proj", "mtp.eh_proj", 2 * h, h))
    return out + b.norm("mtp", "mtp.norm", h)


def _vocab(spec: ModelSpec, t: int, pad_multiple: int) -> tuple[ShardedWeight, ...]:
    rows = padded_vocab(spec.vocab_size, t, pad_multiple) // t
    v, h = spec.vocab_size, spec.hidden_size
    name = "embedding (tied LM head)" if spec.tie_word_embeddings else "embedding"
    emb = ShardedWeight("embedding", name, "embed_tokens", Split.vocab, v, h, rows, h)
    if spec.tie_word_embeddings:
        return (emb,)
    head = ShardedWeight("lm_head", "LM head", "lm_head", Split.vocab, h, v, h, rows)
    return emb, head


def _merge(weights: list[ShardedWeight]) -> tuple[ShardedWeight, ...]:
    """Add up instances of the same (block, module) weight, keeping first-seen order."""
    merged: dict[tuple[str, str], ShardedWeight] = {}
    for w in weights:
        key = (w.block, w.module)
        if key in merged:
            merged[key] = replace(merged[key], instances=merged[key].instances + w.instances)
        else:
            merged[key] = w
    return tuple(merged.values())


def _kinds(spec: ModelSpec) -> Counter[tuple[str, str]]:
    """How many decoder layers (MTP layers included) have each (attention, MLP) kind."""
    kinds = Counter(layer_kind(spec, i) for i in range(spec.num_hidden_layers))
    if spec.mtp_layers:
        # An MTP block is full attention with the last layer's FFN (DeepSeek-V3 §2.2, Qwen3.5).
        mtp_ffn = layer_kind(spec, spec.num_hidden_layers - 1)[1]
        kinds[("mla" if spec.is_mla else "attention", mtp_ffn)] += spec.mtp_layers
    return kinds


def model_weights(
    spec: ModelSpec, t: int, vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE
) -> tuple[ShardedWeight, ...]:
    """Every weight the tensor-parallel ranks hold: embedding, each layer kind (with its
    instance count), MTP, final norm, LM head. Declared parts (a vision tower) are not here."""
    require_tp(spec, t)
    b = _Builder(spec, t)
    vocab = _vocab(spec, t, vocab_pad_multiple)
    out: list[ShardedWeight] = [vocab[0]]
    for (attn, mlp), count in _kinds(spec).items():
        out += [replace(w, instances=w.instances * count) for w in _layer(spec, b, attn, mlp)]
    n_mtp = spec.mtp_layers
    out += [replace(w, instances=n_mtp) for w in _mtp_extras(spec, b)] if n_mtp else []
    out += b.norm("norm", "norm", spec.hidden_size)
    out += vocab[1:]
    return _merge(out)


def layer_weights(spec: ModelSpec, t: int, i: int) -> tuple[ShardedWeight, ...]:
    """The weights of decoder layer i alone (one instance each; experts counted n_e times)."""
    require_tp(spec, t)
    return tuple(_layer(spec, _Builder(spec, t), *layer_kind(spec, i)))


__all__ = ["ShardedWeight", "layer_kind", "layer_weights", "model_weights"]
