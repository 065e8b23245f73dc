"""Parameter counts derived from a ModelSpec, as named terms that add up to the total.

Every count is the shape of a weight tensor in the reference implementation, multiplied out:
transformers ``modeling_llama`` / ``qwen2`` / ``qwen3`` / ``qwen3_moe`` / ``mixtral`` /
``gpt_neox`` / ``deepseek_v3`` / ``qwen3_5``. The shape of the breakdown (named terms checked
against an independent count) follows nanoGPT ``transformer_sizing.ipynb``.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.choices import ParamConvention, Schedule
from tpcalc.errors import InputError
from tpcalc.specs import ModelSpec

NORMS_PER_LAYER = 2  # input_layernorm + post_attention_layernorm
LAYERNORM_TENSORS = 2  # LayerNorm has weight and bias; RMSNorm has weight only
GATED_MLP_MATRICES = 3  # gate_proj, up_proj, down_proj (SwiGLU)
PLAIN_MLP_MATRICES = 2  # dense_h_to_4h, dense_4h_to_h (GPT MLP)
KV_PROJECTIONS = 2  # k_proj and v_proj
QK_NORMS = 2  # q_norm and k_norm, one head_dim-wide RMSNorm each
OUTPUT_GATE_FACTOR = 2  # attn_output_gate: q_proj also emits a gate as wide as the queries
DELTANET_QK = 2  # Gated DeltaNet q and k are both key_dim wide
DELTANET_BA = 2  # in_proj_b and in_proj_a: one scalar per value head each
DELTANET_VZ = 2  # in_proj's v and in_proj_z: value-head rows each
DELTANET_DECAY = 2  # dt_bias and A_log: one scalar per value head each
MTP_FC_INPUTS = 2  # MTP fc / eh_proj maps [norm(embedding); norm(hidden)] (2h) to h
MTP_PRE_NORMS = 2  # enorm + hnorm (DeepSeek) = pre_fc_norm_embedding + pre_fc_norm_hidden (Qwen3.5)


class LayerParts(Struct, frozen=True):
    """A decoder layer's parameters by part (or, summed, all layers'); 0 for a part it lacks."""

    full_attention: int = 0
    linear_attention: int = 0
    dense_mlp: int = 0
    routed_expert: int = 0
    shared_expert: int = 0
    router: int = 0
    norm: int = 0

    @property
    def total(self) -> int:
        """Every part, summed."""
        return (
            self.full_attention + self.linear_attention + self.dense_mlp + self.routed_expert
            + self.shared_expert + self.router + self.norm
        )  # fmt: skip

    def __add__(self, other: LayerParts) -> LayerParts:
        return LayerParts(
            self.full_attention + other.full_attention,
            self.linear_attention + other.linear_attention,
            self.dense_mlp + other.dense_mlp,
            self.routed_expert + other.routed_expert,
            self.shared_expert + other.shared_expert,
            self.router + other.router,
            self.norm + other.norm,
        )


def _norm(spec: ModelSpec, width: int) -> int:
    """One norm over ``width`` features: RMSNorm (weight) or LayerNorm (weight and bias)."""
    return width * (LAYERNORM_TENSORS if spec.uses_layernorm else 1)


def attention_params(spec: ModelSpec) -> int:
    """One full-attention block with biases and q/k norms; source: transformers LlamaAttention,
    Qwen2 (qkv bias), Qwen3 (q_norm, k_norm), Qwen3.5 (attn_output_gate doubles q_proj)."""
    if spec.is_mla:
        return _mla_params(spec)
    h, d = spec.hidden_size, spec.head_dim_resolved
    q, kv = spec.num_attention_heads * d, spec.kv_heads * d
    gate = OUTPUT_GATE_FACTOR if spec.attn_output_gate else 1
    n = h * q * gate + KV_PROJECTIONS * h * kv + q * h
    n += (q * gate + KV_PROJECTIONS * kv) if spec.qkv_bias else 0
    n += h if spec.o_proj_bias else 0
    n += spec.num_attention_heads if spec.attention_sinks else 0  # GPT-OSS sinks, one per head
    return n + (QK_NORMS * _norm(spec, d) if spec.uses_qk_norm else 0)


def _mla_params(spec: ModelSpec) -> int:
    """MLA: low-rank q (or full q), kv latent, up-projections, o; DeepSeek-V3 report §2.1.1."""
    h, n = spec.hidden_size, spec.num_attention_heads
    nope, rope, v = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0, spec.v_head_dim or 0
    kv_rank, q_rank = spec.kv_lora_rank or 0, spec.q_lora_rank
    q = (
        h * q_rank + _norm(spec, q_rank) + q_rank * n * (nope + rope)
        if q_rank
        else h * n * (nope + rope)
    )
    kv = h * (kv_rank + rope) + _norm(spec, kv_rank) + kv_rank * n * (nope + v)
    bias = (q_rank or 0) + kv_rank + rope + h if spec.attention_bias else 0
    return q + kv + n * v * h + bias


def deltanet_in_proj_width(spec: ModelSpec, tp: int = 1) -> int:
    """Outputs of a Gated DeltaNet block's input projections on one of ``tp`` ranks: q and k
    (key heads), v and the output gate z (value heads), and b and a (a scalar per value head)."""
    nk, nv = (spec.linear_num_key_heads or 0) // tp, (spec.linear_num_value_heads or 0) // tp
    dk, dv = spec.linear_key_head_dim or 0, spec.linear_value_head_dim or 0
    return DELTANET_QK * nk * dk + DELTANET_VZ * nv * dv + DELTANET_BA * nv


def linear_attention_params(spec: ModelSpec) -> int:
    """One Gated DeltaNet block: in_proj_qkv/z/b/a, depthwise conv1d (no bias), dt_bias, A_log,
    gated RMSNorm over head_v_dim, out_proj; Gated DeltaNet (arXiv 2412.06464), Qwen3.5."""
    h, nv, dv = spec.hidden_size, spec.linear_num_value_heads or 0, spec.linear_value_head_dim or 0
    key_dim = (spec.linear_num_key_heads or 0) * (spec.linear_key_head_dim or 0)
    value_dim = nv * dv
    conv_dim = DELTANET_QK * key_dim + value_dim
    return (
        h * deltanet_in_proj_width(spec)
        + conv_dim * (spec.linear_conv_kernel_dim or 0)
        + DELTANET_DECAY * nv
        + dv
        + value_dim * h
    )


def mlp_params(spec: ModelSpec, intermediate: int) -> int:
    """One MLP of width I: SwiGLU 3·h·I (Shazeer 2020) or GPT 2·h·I (Megatron), plus biases."""
    h = spec.hidden_size
    if spec.gated_mlp:
        bias = (GATED_MLP_MATRICES - 1) * intermediate + h
        return GATED_MLP_MATRICES * h * intermediate + (bias if spec.mlp_bias else 0)
    return PLAIN_MLP_MATRICES * h * intermediate + (intermediate + h if spec.mlp_bias else 0)


def _shared_gate(spec: ModelSpec) -> int:
    """The [h, 1] sigmoid gate on the shared expert (``shared_expert_gate``), present exactly when
    ``shared_expert_intermediate_size`` is set: transformers Qwen2MoeSparseMoeBlock, Qwen3-Next."""
    return spec.hidden_size if spec.shared_expert_intermediate_size is not None else 0


def shared_expert_intermediate(spec: ModelSpec) -> int:
    """Width of the shared-expert MLP: Qwen's shared_expert_intermediate_size, else DeepSeek's
    n_shared_experts × moe_intermediate_size (transformers DeepseekV3MoE.shared_experts)."""
    if spec.shared_expert_intermediate_size is not None:
        return spec.shared_expert_intermediate_size
    return spec.n_shared_experts * (spec.moe_intermediate_size or 0)


def _ffn(spec: ModelSpec, i: int) -> tuple[int, int, int, int]:
    """Layer i's FFN as (dense MLP, routed experts, shared experts, router): a dense MLP, or
    routed + shared experts + router (DeepSeek-V3 §2.1.2)."""
    if not spec.is_moe_layer(i):
        return mlp_params(spec, spec.intermediate_size), 0, 0, 0
    experts, shared = spec.n_routed_experts or 0, shared_expert_intermediate(spec)
    return (
        0,
        experts * mlp_params(spec, spec.moe_intermediate_size or 0),
        (mlp_params(spec, shared) if shared else 0) + _shared_gate(spec),
        experts * spec.hidden_size + (experts if spec.router_bias else 0),
    )


def _is_full(spec: ModelSpec, i: int, force_full: bool) -> bool:
    return force_full or spec.resolved_layer_types[i] != "linear_attention"


def _layer_total(spec: ModelSpec, i: int, *, force_full: bool = False) -> int:
    """``layer_parts(spec, i).total`` without building the parts (the planner's hot path)."""
    full = _is_full(spec, i, force_full)
    attention = attention_params(spec) if full else linear_attention_params(spec)
    return attention + sum(_ffn(spec, i)) + NORMS_PER_LAYER * _norm(spec, spec.hidden_size)


def layer_parts(spec: ModelSpec, i: int, *, force_full: bool = False) -> LayerParts:
    """Layer i by part: its attention (full or linear), its FFN and its two norms."""
    full = _is_full(spec, i, force_full)
    dense, routed, shared, router = _ffn(spec, i)
    return LayerParts(
        full_attention=attention_params(spec) if full else 0,
        linear_attention=0 if full else linear_attention_params(spec),
        dense_mlp=dense,
        routed_expert=routed,
        shared_expert=shared,
        router=router,
        norm=NORMS_PER_LAYER * _norm(spec, spec.hidden_size),
    )


def layer_params(spec: ModelSpec, i: int) -> int:
    """Parameters of decoder layer i (0-based), by its type (Llama 3 70B: 855,654,400, seed 003)."""
    if not 0 <= i < spec.num_hidden_layers:
        raise InputError(
            f"layer {i} does not exist; {spec.name} has layers 0..{spec.num_hidden_layers - 1}"
        )
    return _layer_total(spec, i)


def routed_layer_params(spec: ModelSpec, i: int) -> int:
    """Routed-expert parameters of layer i: E·P_mlp(I_moe) on an MoE layer, else 0."""
    return _ffn(spec, i)[1]


def active_layer_params(spec: ModelSpec, i: int) -> int:
    """Parameters of layer i one token multiplies: all but the E − k routed experts it is not
    sent to, on the layers ``spec.is_moe_layer`` marks (DeepSeek-V3 report §1, 37B active)."""
    n = layer_params(spec, i)
    if spec.is_moe_layer(i):
        idle = (spec.n_routed_experts or 0) - (spec.num_experts_per_tok or 0)
        n -= idle * mlp_params(spec, spec.moe_intermediate_size or 0)
    return n


def summed_layer_parts(spec: ModelSpec) -> LayerParts:
    """Every part summed over all decoder layers."""
    out = LayerParts()
    for i in range(spec.num_hidden_layers):
        out += layer_parts(spec, i)
    return out


def embedding_params(spec: ModelSpec) -> int:
    """Input embedding V·h (Megatron, arXiv 2104.04473 eq. 2)."""
    return spec.vocab_size * spec.hidden_size


def lm_head_params(spec: ModelSpec) -> int:
    """Parameters the LM head adds: V·h, or 0 when tied to the input embedding (eq. 2, ibid.)."""
    return 0 if spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size


SRC_EMBEDDING_COPY = (
    "Megatron-Core language_module.py setup_embeddings_and_output_layer (a tied output layer "
    "on a last stage without pre_process is allocated, zeroed, and its gradient all-reduced "
    "with the first stage's over the embedding group); gpt_model.py (LanguageModelEmbedding "
    "built where pre_process or mtp_process)"
)


EMBEDDING_GROUP_RANKS = 2  # Megatron-Core embedding group: the first and last pipeline ranks
SRC_EMBEDDING_SYNC = (
    "Megatron-Core distributed/finalize_model_grads.py: finalize_model_grads runs "
    "_allreduce_word_embedding_grads after finish_grad_sync, an all-reduce of the shared word "
    "embedding's gradient over the embedding group (the first and last pipeline ranks) when "
    "the output layer is tied to it or MTP runs"
)


def last_stage_embedding_copy(spec: ModelSpec, p: int, schedule: Schedule, *, mtp: bool) -> int:
    """V·h that the last of p pipeline stages allocates beside the first stage's embedding when
    the two ends are on different ranks (``SRC_EMBEDDING_COPY``): the output layer's own weight
    when it is tied to the embedding, or the MTP modules' embedding (which the MTP stage
    builds). One copy when both apply: the output layer then reads the embedding's weight. 0
    when one rank holds both ends (p = 1; DualPipe, whose end ranks each run the first and the
    last stage), which share one weight."""
    apart = p > 1 and schedule is not Schedule.dualpipe
    needed = spec.tie_word_embeddings or (mtp and spec.mtp_layers > 0)
    return embedding_params(spec) if apart and needed else 0


def final_norm_params(spec: ModelSpec) -> int:
    """The norm after the last layer (model.norm / final_layer_norm)."""
    return _norm(spec, spec.hidden_size)


def mtp_params(spec: ModelSpec) -> int:
    """Multi-token prediction: per module a 2h→h projection, two pre-norms, one full-attention
    layer with the last layer's FFN, a final norm; embedding and head shared (DeepSeek-V3 §2.2)."""
    h, last = spec.hidden_size, spec.num_hidden_layers - 1
    module = (
        MTP_FC_INPUTS * h * h
        + MTP_PRE_NORMS * _norm(spec, h)
        + _layer_total(spec, last, force_full=True)
        + _norm(spec, h)
    )
    return spec.mtp_layers * module


def last_stage_extra_params(
    spec: ModelSpec, p: int, schedule: Schedule, *, mtp: bool
) -> tuple[int, int]:
    """(dense, routed-expert) parameters the last of p pipeline stages holds beyond its layers,
    final norm and head: the MTP modules when they run (DeepSeek-V3 §2.2; their FFN's routed
    experts are the last layer's) and the embedding's copy (``last_stage_embedding_copy``)."""
    routed = dense = 0
    if mtp and spec.mtp_layers:
        routed = spec.mtp_layers * routed_layer_params(spec, spec.num_hidden_layers - 1)
        dense = mtp_params(spec) - routed
    return dense + last_stage_embedding_copy(spec, p, schedule, mtp=mtp), routed


def declared_params(spec: ModelSpec) -> int:
    """Parts counted from the tpcalc block (e.g. a vision tower), each with its own source."""
    return sum(p.params for p in spec.tpcalc.declared_parts)


def decoder_params(spec: ModelSpec) -> int:
    """All decoder layers of the main model."""
    return sum(layer_params(spec, i) for i in range(spec.num_hidden_layers))


def routed_expert_params(spec: ModelSpec) -> int:
    """Routed experts over all MoE layers (DeepSeek-V3: 58 × 256 × 3 × 7168 × 2048 = 653.9e9,
    seed 000 §专家并行)."""
    return summed_layer_parts(spec).routed_expert


def total_params(spec: ModelSpec) -> int:
    """Every parameter: embedding + layers + final norm + LM head + MTP + declared parts."""
    return (
        embedding_params(spec)
        + decoder_params(spec)
        + final_norm_params(spec)
        + lm_head_params(spec)
        + mtp_params(spec)
        + declared_params(spec)
    )


def matmul_params(spec: ModelSpec) -> int:
    """Seed 000's count: decoder layers + final norm + LM head matrix (V·h even when tied, since
    the shared matrix still multiplies as the head); seed 000 §张量并行."""
    return decoder_params(spec) + final_norm_params(spec) + lm_head_matmul_params(spec)


def lm_head_matmul_params(spec: ModelSpec) -> int:
    """The LM head multiplies V·h weights per token even when tied to the embedding."""
    return spec.vocab_size * spec.hidden_size


def active_params(spec: ModelSpec) -> int:
    """Parameters one token touches in the main model: embedding + ``active_layer_params`` of
    every layer + final norm + LM head (MTP and declared parts left out). DeepSeek-V3 report §1
    ("37B activated"): 37,552,297,472 (input embedding included), model-facts' 37.55e9."""
    layers = sum(active_layer_params(spec, i) for i in range(spec.num_hidden_layers))
    return embedding_params(spec) + layers + final_norm_params(spec) + lm_head_params(spec)


def params_for(spec: ModelSpec, convention: ParamConvention) -> int:
    """N for 6·N·tokens under the chosen convention (see ParamConvention)."""
    return total_params(spec) if convention is ParamConvention.all else matmul_params(spec)


SRC_TP_REPLICATED = (
    "Megatron-Core: norm weights (input/pre-MLP, q/k and MLA latent norms, final norm) are not "
    "split by TP and their gradients are all-reduced over the TP group "
    "(core/distributed/finalize_model_grads.py _allreduce_layernorm_grads); the MoE router "
    "(TopKRouter) and the MLA down-projections are duplicated on every TP rank too"
)


def tp_replicated_layer_params(spec: ModelSpec, i: int, *, force_full: bool = False) -> int:
    """Parameters of layer i every TP rank holds whole (``SRC_TP_REPLICATED``): the two layer
    norms, q/k norms, the MLA latent norms and down-projections, the router, the gated norm of
    a Gated DeltaNet layer."""
    h = spec.hidden_size
    n = NORMS_PER_LAYER * _norm(spec, h)
    linear = not force_full and spec.resolved_layer_types[i] == "linear_attention"
    if linear:
        n += spec.linear_value_head_dim or 0
    elif spec.is_mla:
        q_rank, kv_rank, rope = spec.q_lora_rank or 0, spec.kv_lora_rank or 0, spec.qk_rope_head_dim
        n += _norm(spec, kv_rank) + h * (kv_rank + (rope or 0))
        n += (_norm(spec, q_rank) + h * q_rank) if q_rank else 0
    elif spec.uses_qk_norm:
        n += QK_NORMS * _norm(spec, spec.head_dim_resolved)
    return n + _ffn(spec, i)[3]


def tp_replicated_mtp_params(spec: ModelSpec) -> int:
    """MTP modules' TP-replicated parameters: enorm, hnorm, final norm and the block's own."""
    last = spec.num_hidden_layers - 1
    module = (MTP_PRE_NORMS + 1) * _norm(spec, spec.hidden_size) + tp_replicated_layer_params(
        spec, last, force_full=True
    )
    return spec.mtp_layers * module


def active_mtp_params(spec: ModelSpec) -> int:
    """Parameters one token multiplies in the MTP modules: all but the idle routed experts."""
    last = spec.num_hidden_layers - 1
    idle = 0
    if spec.is_moe_layer(last):
        idle = (spec.n_routed_experts or 0) - (spec.num_experts_per_tok or 0)
        idle *= mlp_params(spec, spec.moe_intermediate_size or 0)
    return mtp_params(spec) - spec.mtp_layers * idle
