"""ModelSpec: a model as its Hugging Face config.json fields plus a ``tpcalc:`` block.

Field names are the Hugging Face ones, so a downloaded config.json can be pasted in. Parameter
counts are derived from these fields by ``tpcalc.calc.params.counts``, never typed in, except parts
the tool does not shard (a vision tower), which are declared with a source.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tpcalc.errors import FieldProblem
from tpcalc.specs.bounds import (
    MAX_LAYERS,
    MAX_PARAMS,
    Count,
    HeadDim,
    Heads,
    Hidden,
    LayerCount,
    LayerIndex,
    Params,
    Seq,
    Vocab,
    Width,
)

LayerType = Literal["full_attention", "linear_attention", "sliding_attention"]

# model_type values whose MLP is the non-gated GPT-style 4h GeLU (dense_h_to_4h / dense_4h_to_h).
NON_GATED_MLP_TYPES = frozenset(
    {"gpt_neox", "gpt2", "gpt_bigcode", "gptj", "opt", "bloom", "nemotron"}
)
# model_type values that put RMSNorm on q and k per head (Qwen3 family).
QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "qwen3_5", "qwen3_next"})
# model_type values whose q/k/v projections carry a bias (Qwen2 hard-codes it).
QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe"})
# model_type values with LayerNorm (weight and bias) rather than RMSNorm.
LAYERNORM_TYPES = frozenset({"gpt_neox", "gpt2", "gpt_bigcode", "gptj", "opt", "bloom", "nemotron"})
# model_type values without rotary positions: learned absolute positions (GPT-2/3, StarCoder,
# OPT) or ALiBi (BLOOM).
NO_ROPE_TYPES = frozenset({"gpt2", "gpt_bigcode", "opt", "bloom"})
# model_type values whose positions are a learned table added to the token embedding
# (Megatron-Core LanguageModelEmbedding, position_embedding_type learned_absolute; Hugging Face
# GPT2Model wpe, GPTBigCodeModel wpe, OPTLearnedPositionalEmbedding).
LEARNED_POSITION_TYPES = frozenset({"gpt2", "gpt_bigcode", "opt"})


LINEAR_ATTENTION_FIELDS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


def _require(spec: BaseModel, because: str, fields: tuple[str, ...]) -> None:
    missing = [f for f in fields if getattr(spec, f) is None]
    if missing:
        raise FieldProblem(missing[0], f"{because} is set, so {', '.join(missing)} must be set too")


class DeclaredPart(BaseModel):
    """A part counted but not derived (e.g. a vision tower), with where its count comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    params: Params
    source: str


class TpcalcBlock(BaseModel):
    """Facts a config.json does not carry: built-in name, training length, sources."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    display_name: str | None = None
    hf_id: str | None = None
    seq_length: Seq
    seq_length_source: str = ""
    # True when tpcalc chose seq_length (a config.json has no training length); reports then
    # say which length was used and that --seq sets it.
    seq_length_defaulted: bool = False
    # Whether the model trains with dropout (its masks are saved activations), as its training
    # config states it; None: tpcalc's rule (on for GPT-style models, off for Llama-style),
    # ``calc.activations.exact.options.ActivationOptions.resolved_dropout``.
    dropout: bool | None = None
    dropout_source: str = ""
    source: str = ""
    declared_parts: tuple[DeclaredPart, ...] = ()
    notes: str = ""


class ModelSpec(BaseModel):
    """A decoder-only transformer described by Hugging Face config fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    model_type: str
    hidden_size: Hidden
    intermediate_size: Width
    num_hidden_layers: LayerCount
    num_attention_heads: Heads
    num_key_value_heads: Heads | None = None
    head_dim: HeadDim | None = None
    vocab_size: Vocab
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False
    max_position_embeddings: Seq | None = None

    # Hybrid attention (Qwen3.5 / Qwen3-Next): which layers are full attention.
    layer_types: Annotated[tuple[LayerType, ...], Field(max_length=MAX_LAYERS)] | None = None
    attn_output_gate: bool = False
    qk_norm: bool | None = None
    # Gated DeltaNet linear attention.
    linear_num_key_heads: Heads | None = None
    linear_num_value_heads: Heads | None = None
    linear_key_head_dim: HeadDim | None = None
    linear_value_head_dim: HeadDim | None = None
    linear_conv_kernel_dim: HeadDim | None = None

    # Mixture of experts (DeepSeek names; importers map num_experts/num_local_experts here).
    n_routed_experts: Heads | None = None
    num_experts_per_tok: Heads | None = None
    n_shared_experts: Count = 0
    moe_intermediate_size: Width | None = None
    shared_expert_intermediate_size: Width | None = None
    first_k_dense_replace: LayerIndex = 0
    # Qwen-MoE placement: layer i is MoE when (i + 1) % decoder_sparse_step == 0 and i is not in
    # mlp_only_layers (transformers qwen3_moe Qwen3MoeDecoderLayer).
    decoder_sparse_step: LayerCount = 1
    mlp_only_layers: Annotated[tuple[LayerIndex, ...], Field(max_length=MAX_LAYERS)] = ()
    norm_topk_prob: bool = False
    # A per-expert bias on the router scores (DeepSeek-V3 e_score_correction_bias, noaux_tc).
    router_bias: bool = False
    n_group: Heads | None = None
    topk_group: Heads | None = None

    # Multi-head latent attention (DeepSeek-V2/V3).
    q_lora_rank: HeadDim | None = None
    kv_lora_rank: HeadDim | None = None
    qk_nope_head_dim: HeadDim | None = None
    qk_rope_head_dim: HeadDim | None = None
    v_head_dim: HeadDim | None = None

    # Multi-token prediction modules (DeepSeek name; Qwen3.5 name).
    num_nextn_predict_layers: LayerIndex = 0
    mtp_num_hidden_layers: LayerIndex = 0
    # GPT-OSS: one learned attention-sink logit per query head and layer (transformers
    # GptOssAttention.sinks); tpcalc-only field, implied by model_type gpt_oss on HF configs.
    attention_sinks: bool = False
    # Banded attention (GPT-OSS, Mistral): a sliding_attention layer's queries see the last
    # ``sliding_window`` keys (transformers GptOssConfig.sliding_window).
    sliding_window: Seq | None = None

    tpcalc: TpcalcBlock = Field(description="tpcalc's own facts: name, training seq length")

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        """Geometry that a real model has; each failure names the field to fix."""
        heads, kv = self.num_attention_heads, self.num_key_value_heads
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise FieldProblem(
                "layer_types",
                f"has {len(self.layer_types)} entries but num_hidden_layers="
                f"{self.num_hidden_layers}; give one entry per layer",
            )
        if self.head_dim is None and not self.mla_dims_given and self.hidden_size % heads:
            # transformers' default head_dim is hidden_size // num_attention_heads
            raise FieldProblem(
                "hidden_size",
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={heads}"
                f" (head_dim would be {self.hidden_size // heads}); give head_dim, or a "
                f"hidden_size that is a multiple of {heads}",
            )
        if kv is not None and heads % kv:
            raise FieldProblem(
                "num_key_value_heads",
                f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}; "
                "each KV head serves the same number of query heads (GQA)",
            )
        if self.n_routed_experts is not None and self.moe_intermediate_size is None:
            raise FieldProblem(
                "moe_intermediate_size",
                "n_routed_experts is set but moe_intermediate_size is missing; give the expert "
                "FFN width",
            )
        if any(i >= self.num_hidden_layers for i in self.mlp_only_layers):
            raise FieldProblem(
                "mlp_only_layers",
                f"names a layer >= num_hidden_layers={self.num_hidden_layers}; "
                f"layers are 0 to {self.num_hidden_layers - 1}",
            )
        if self.kv_lora_rank is not None:
            _require(self, "kv_lora_rank", ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
        if "linear_attention" in self.resolved_layer_types:
            _require(self, "layer_types has linear_attention", LINEAR_ATTENTION_FIELDS)
            k_heads, v_heads = self.linear_num_key_heads or 1, self.linear_num_value_heads or 1
            if v_heads % k_heads:  # transformers Qwen3NextGatedDeltaNet: num_v_heads // num_k_heads
                raise FieldProblem(
                    "linear_num_value_heads",
                    f"linear_num_value_heads={v_heads} is not a multiple of "
                    f"linear_num_key_heads={k_heads}",
                )
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise FieldProblem(
                "first_k_dense_replace",
                f"first_k_dense_replace={self.first_k_dense_replace} exceeds "
                f"num_hidden_layers={self.num_hidden_layers}",
            )
        k, experts = self.num_experts_per_tok, self.n_routed_experts
        if k is not None and experts is not None and k > experts:
            raise FieldProblem(
                "num_experts_per_tok",
                f"num_experts_per_tok={k} exceeds n_routed_experts={experts}: a token cannot "
                "be routed to more experts than exist",
            )
        if self.n_group is not None and experts is not None and experts % self.n_group:
            # DeepSeek-V3 group-limited routing splits the experts into n_group equal groups
            raise FieldProblem(
                "n_group",
                f"n_routed_experts={experts} is not divisible by n_group={self.n_group}",
            )
        if (
            self.topk_group is not None
            and self.n_group is not None
            and (self.topk_group > self.n_group)
        ):
            raise FieldProblem(
                "topk_group", f"topk_group={self.topk_group} exceeds n_group={self.n_group}"
            )
        if self.rough_params > MAX_PARAMS:
            raise FieldProblem(
                "num_hidden_layers",
                f"the sizes give about {self.rough_params:.2g} parameters, beyond any real model "
                f"(at most {MAX_PARAMS:.0e}); check num_hidden_layers, hidden_size and the "
                "FFN and expert widths",
            )
        return self

    @property
    def mla_dims_given(self) -> bool:
        return self.qk_nope_head_dim is not None and self.qk_rope_head_dim is not None

    @property
    def rough_params(self) -> int:
        """An upper-end estimate of the parameter count from the sizes alone, for the MAX_PARAMS
        sanity bound (``tpcalc.calc.params`` counts exactly): q, k, v, o projections, a gated
        FFN and every expert per layer, plus embedding and head."""
        h, d = self.hidden_size, self.head_dim_resolved
        attention = h * d * 2 * (self.num_attention_heads + self.kv_heads)
        experts = (self.n_routed_experts or 0) + self.n_shared_experts
        ffn = 3 * h * (self.intermediate_size + experts * (self.moe_intermediate_size or 0))
        ffn += 3 * h * (self.shared_expert_intermediate_size or 0)
        return self.num_hidden_layers * (attention + ffn) + 2 * self.vocab_size * h

    # ---- resolved views (derived, never stored) ----
    @property
    def name(self) -> str:
        return self.tpcalc.name

    @property
    def seq_length(self) -> int:
        return self.tpcalc.seq_length

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_dim_resolved(self) -> int:
        """Query/key width per head; for MLA the q·k width qk_nope_head_dim + qk_rope_head_dim."""
        if self.qk_nope_head_dim is not None and self.qk_rope_head_dim is not None:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def gated_mlp(self) -> bool:
        """SwiGLU-style gate+up+down, unless the model type is a GPT-style 4h MLP."""
        return self.model_type not in NON_GATED_MLP_TYPES

    @property
    def uses_qk_norm(self) -> bool:
        return self.qk_norm if self.qk_norm is not None else self.model_type in QK_NORM_TYPES

    @property
    def qkv_bias(self) -> bool:
        """q, k and v projections carry a bias (attention_bias, or Qwen2's hard-coded one)."""
        return self.attention_bias or self.model_type in QKV_BIAS_TYPES

    @property
    def o_proj_bias(self) -> bool:
        return self.attention_bias

    @property
    def mtp_layers(self) -> int:
        """MTP modules: DeepSeek num_nextn_predict_layers or Qwen3.5 mtp_num_hidden_layers."""
        return self.num_nextn_predict_layers or self.mtp_num_hidden_layers

    @property
    def uses_layernorm(self) -> bool:
        return self.model_type in LAYERNORM_TYPES

    @property
    def uses_rope(self) -> bool:
        """Rotary position embeddings on q and k (every model type but ``NO_ROPE_TYPES``)."""
        return self.model_type not in NO_ROPE_TYPES

    @property
    def learned_positions(self) -> bool:
        """A learned position table added to the token embedding (``LEARNED_POSITION_TYPES``)."""
        return self.model_type in LEARNED_POSITION_TYPES

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts is not None

    @property
    def resolved_layer_types(self) -> tuple[str, ...]:
        return self.layer_types or ("full_attention",) * self.num_hidden_layers

    @property
    def full_attention_layers(self) -> int:
        return sum(1 for t in self.resolved_layer_types if t != "linear_attention")

    @property
    def linear_attention_layers(self) -> int:
        return self.num_hidden_layers - self.full_attention_layers

    def is_moe_layer(self, i: int) -> bool:
        """Layer i (0-based) has routed experts: DeepSeek first_k_dense_replace, Qwen step/list."""
        return (
            self.is_moe
            and i >= self.first_k_dense_replace
            and i not in self.mlp_only_layers
            and (i + 1) % self.decoder_sparse_step == 0
        )

    @property
    def moe_layers(self) -> int:
        return sum(1 for i in range(self.num_hidden_layers) if self.is_moe_layer(i))

    @property
    def dense_layers(self) -> int:
        return self.num_hidden_layers - self.moe_layers
