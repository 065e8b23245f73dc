"""ModelSpec: a model as its Hugging Face config.json fields plus a ``tpcalc:`` block.

Field names are the Hugging Face ones, so a downloaded config.json can be pasted in. Parameter
counts are derived from these fields by ``tpcalc.calc.params.counts``, never typed in, except parts
the tool does not shard (a vision tower), which are declared with a source.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

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
        raise ValueError(f"{because} is set, so {', '.join(missing)} must be set too")


class DeclaredPart(BaseModel):
    """A part counted but not derived (e.g. a vision tower), with where its count comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    params: NonNegativeInt
    source: str


class TpcalcBlock(BaseModel):
    """Facts a config.json does not carry: built-in name, training length, sources."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    display_name: str | None = None
    hf_id: str | None = None
    seq_length: PositiveInt
    seq_length_source: str = ""
    source: str = ""
    declared_parts: tuple[DeclaredPart, ...] = ()
    notes: str = ""


class ModelSpec(BaseModel):
    """A decoder-only transformer described by Hugging Face config fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_type: str
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    vocab_size: PositiveInt
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False
    max_position_embeddings: PositiveInt | None = None

    # Hybrid attention (Qwen3.5 / Qwen3-Next): which layers are full attention.
    layer_types: tuple[LayerType, ...] | None = None
    attn_output_gate: bool = False
    qk_norm: bool | None = None
    # Gated DeltaNet linear attention.
    linear_num_key_heads: PositiveInt | None = None
    linear_num_value_heads: PositiveInt | None = None
    linear_key_head_dim: PositiveInt | None = None
    linear_value_head_dim: PositiveInt | None = None
    linear_conv_kernel_dim: PositiveInt | None = None

    # Mixture of experts (DeepSeek names; importers map num_experts/num_local_experts here).
    n_routed_experts: PositiveInt | None = None
    num_experts_per_tok: PositiveInt | None = None
    n_shared_experts: NonNegativeInt = 0
    moe_intermediate_size: PositiveInt | None = None
    shared_expert_intermediate_size: PositiveInt | None = None
    first_k_dense_replace: NonNegativeInt = 0
    # Qwen-MoE placement: layer i is MoE when (i + 1) % decoder_sparse_step == 0 and i is not in
    # mlp_only_layers (transformers qwen3_moe Qwen3MoeDecoderLayer).
    decoder_sparse_step: PositiveInt = 1
    mlp_only_layers: tuple[NonNegativeInt, ...] = ()
    norm_topk_prob: bool = False
    # A per-expert bias on the router scores (DeepSeek-V3 e_score_correction_bias, noaux_tc).
    router_bias: bool = False
    n_group: PositiveInt | None = None
    topk_group: PositiveInt | None = None

    # Multi-head latent attention (DeepSeek-V2/V3).
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None

    # Multi-token prediction modules (DeepSeek name; Qwen3.5 name).
    num_nextn_predict_layers: NonNegativeInt = 0
    mtp_num_hidden_layers: NonNegativeInt = 0
    # GPT-OSS: one learned attention-sink logit per query head and layer (transformers
    # GptOssAttention.sinks); tpcalc-only field, implied by model_type gpt_oss on HF configs.
    attention_sinks: bool = False
    # Banded attention (GPT-OSS, Mistral): a sliding_attention layer's queries see the last
    # ``sliding_window`` keys (transformers GptOssConfig.sliding_window).
    sliding_window: PositiveInt | None = None

    tpcalc: TpcalcBlock = Field(description="tpcalc's own facts: name, training seq length")

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries but "
                f"num_hidden_layers={self.num_hidden_layers}"
            )
        if self.num_key_value_heads is not None and (
            self.num_attention_heads % self.num_key_value_heads
        ):
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.n_routed_experts is not None and self.moe_intermediate_size is None:
            raise ValueError("n_routed_experts is set but moe_intermediate_size is missing")
        if any(i >= self.num_hidden_layers for i in self.mlp_only_layers):
            raise ValueError(
                f"mlp_only_layers={list(self.mlp_only_layers)} names a layer >= "
                f"num_hidden_layers={self.num_hidden_layers}"
            )
        if self.kv_lora_rank is not None:
            _require(self, "kv_lora_rank", ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
        if "linear_attention" in self.resolved_layer_types:
            _require(self, "layer_types has linear_attention", LINEAR_ATTENTION_FIELDS)
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError(
                f"first_k_dense_replace={self.first_k_dense_replace} exceeds "
                f"num_hidden_layers={self.num_hidden_layers}"
            )
        k, experts = self.num_experts_per_tok, self.n_routed_experts
        if k is not None and experts is not None and k > experts:
            raise ValueError(
                f"num_experts_per_tok={k} exceeds n_routed_experts={experts}: a token cannot "
                "be routed to more experts than exist"
            )
        if (
            self.topk_group is not None
            and self.n_group is not None
            and (self.topk_group > self.n_group)
        ):
            raise ValueError(f"topk_group={self.topk_group} exceeds n_group={self.n_group}")
        return self

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
