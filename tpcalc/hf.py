"""Translate a Hugging Face ``config.json`` into a ModelSpec.

A real config.json carries dozens of keys (token ids, rope scaling, dtype, ...); only the ones that
shape the weights are read, the rest are ignored. A missing required key raises ConfigError naming
the file and the field. The ``tpcalc`` block is synthesised: the name is the file stem (or the
parent directory when the file is ``config.json``) and, since a config.json does not say what
length the model trained at, the sequence length is the family's pre-training length where it
is published, else a documented default (``tpcalc.hf_seq``), never more than
``max_position_embeddings``. The block records that it was defaulted, so reports can say so.

Every error is a ``ConfigFieldError`` naming the config.json field (``num_experts``, not
tpcalc's ``n_routed_experts``); the catalog adds the line. Values used in arithmetic here, before
the schema sees them (layer counts, frequencies, vision sizes), are checked first, so a string,
a float or an absurd size is refused with the field named rather than raising or allocating.

Field meanings follow the transformers configuration classes of each ``model_type``
(LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig, MixtralConfig,
DeepseekV3Config, Qwen3_5Config, GPTNeoXConfig).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from pydantic import ValidationError

from tpcalc.errors import ConfigFieldError
from tpcalc.hf_seq import default_seq
from tpcalc.specs import DeclaredPart, ModelSpec, TpcalcBlock
from tpcalc.specs.bounds import MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS, MAX_SEQ

REQUIRED = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "max_position_embeddings",
)
# Same name in config.json and ModelSpec; copied when present and not null.
COMMON = (
    "num_key_value_heads",
    "head_dim",
    "tie_word_embeddings",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "num_experts_per_tok",
)
MLA = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
DEEPSEEK_MOE = (
    "n_shared_experts",
    "first_k_dense_replace",
    "norm_topk_prob",
    "n_group",
    "topk_group",
)
DELTANET = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
# model_type -> (extra keys copied as-is, {config.json name: ModelSpec name}, extra required keys)
TYPES: dict[str, tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]] = {
    "llama": ((), {}, ()),
    "mistral": ((), {}, ()),
    "qwen2": ((), {}, ()),
    "qwen3": ((), {}, ()),
    "qwen3_moe": (
        ("moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"),
        {"num_experts": "n_routed_experts"},
        ("num_experts", "moe_intermediate_size"),
    ),
    "mixtral": ((), {"num_local_experts": "n_routed_experts"}, ("num_local_experts",)),
    "deepseek_v3": (
        (
            *MLA,
            *DEEPSEEK_MOE,
            "n_routed_experts",
            "moe_intermediate_size",
            "num_nextn_predict_layers",
        ),
        {},
        ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
    ),
    "qwen3_5": (
        (*DELTANET, "layer_types", "attn_output_gate", "mtp_num_hidden_layers"),
        {},
        DELTANET,
    ),
    "gpt_neox": ((), {}, ()),
}
# GPTNeoXConfig: attention_bias defaults to True and the MLP linears always carry a bias.
GPT_NEOX_DEFAULTS = {"attention_bias": True, "mlp_bias": True}
# Qwen3-Next / Qwen3.5 attention always gates its output (q_proj is 2 × heads × head_dim wide).
QWEN3_5_DEFAULTS = {"attn_output_gate": True}
# Qwen3_5VisionConfig defaults, used when vision_config leaves a key out.
VISION_DEFAULTS = {
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "num_position_embeddings": 2304,
}
# Bounds of the vision_config sizes read here (the schema never sees them): far above any
# published ViT (Qwen3.5: depth 27, hidden 1152, patch 16; InternViT-6B: depth 48, hidden 3200).
VISION_BOUNDS = {
    "depth": MAX_LAYERS,
    "hidden_size": MAX_HIDDEN,
    "intermediate_size": MAX_INTERMEDIATE,
    "out_hidden_size": MAX_HIDDEN,
    "in_channels": 2**10,
    "patch_size": 2**10,
    "temporal_patch_size": 2**10,
    "spatial_merge_size": 2**10,
    "num_position_embeddings": MAX_SEQ,
}
LAYERNORM_TENSORS = 2  # ViT LayerNorms have weight and bias
QKV = 3  # fused qkv projection of a ViT block
VIT_NORMS = 2  # norm1, norm2 of a ViT block

JSON_KINDS = {
    dict: "an object",
    list: "a list",
    int: "a number",
    float: "a number",
    bool: "a boolean",
}


def model_from_hf_config(data: dict[str, Any], *, source_path: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json; ``source_path`` names the file in errors."""
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type not in TYPES:
        if model_type is None:
            problem = "required key is missing"
        elif isinstance(model_type, str):
            problem = f"{model_type!r:.60} is not supported"
        else:
            problem = f"expected a string, got {JSON_KINDS.get(type(model_type), 'a value')}"
        raise ConfigFieldError(
            source_path, ("model_type",), f"{problem}; supported: {', '.join(TYPES)}"
        )
    text: dict[str, Any] = data
    prefix: tuple[str, ...] = ()
    if model_type == "qwen3_5" and isinstance(data.get("text_config"), dict):
        text, prefix = data["text_config"], ("text_config",)  # the top level is the VL wrapper
    extra, renamed, required = TYPES[model_type]
    for key in (*REQUIRED, *required):
        if text.get(key) is None:
            raise ConfigFieldError(source_path, (*prefix, key), "required key is missing")
    # range() runs over the layers below, before the schema has bounded them
    _count(text, "num_hidden_layers", MAX_LAYERS, source_path, prefix)

    fields: dict[str, Any] = {"model_type": model_type}
    fields |= GPT_NEOX_DEFAULTS if model_type == "gpt_neox" else {}
    fields |= QWEN3_5_DEFAULTS if model_type == "qwen3_5" else {}
    for key in (*REQUIRED, *COMMON, *extra):
        if text.get(key) is not None:
            fields[key] = text[key]
    if text is not data and data.get("tie_word_embeddings") is not None:
        fields["tie_word_embeddings"] = data["tie_word_embeddings"]  # the wrapper owns the head
    for hf_key, spec_key in renamed.items():
        fields[spec_key] = text[hf_key]
    fields |= _special_fields(model_type, text, source_path, prefix)

    parts, notes = _declared_parts(model_type, data, source_path)
    name = _name(source_path)
    seq, seq_source = default_seq(model_type, text.get("max_position_embeddings"), source_path)
    notes.insert(0, f"seq_length {seq} is a default: {seq_source}")
    fields["tpcalc"] = TpcalcBlock(
        name=name,
        display_name=_name_or_path(data) or name,
        hf_id=_name_or_path(data),
        seq_length=seq,
        seq_length_source=seq_source,
        seq_length_defaulted=True,
        source=source_path,
        declared_parts=parts,
        notes="; ".join(notes),
    )
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        from tpcalc.configfile import field_error

        err = field_error(exc, source_path)
        loc = _hf_loc(model_type, renamed, text, err.loc, prefix)
        raise ConfigFieldError(source_path, loc, err.problem, more=err.more) from None


def _hf_loc(
    model_type: str,
    renamed: dict[str, str],
    text: dict[str, Any],
    loc: tuple[str | int, ...],
    prefix: tuple[str, ...],
) -> tuple[str | int, ...]:
    """A ModelSpec field path as the config.json spells it."""
    head = loc[0] if loc else ""
    spelling = {spec: hf for hf, spec in renamed.items()}
    if model_type == "mixtral":
        spelling["moe_intermediate_size"] = "intermediate_size"
    if model_type == "deepseek_v3":
        spelling["mlp_only_layers"] = "moe_layer_freq"
    if model_type == "qwen3_5" and text.get("layer_types") is None:
        spelling["layer_types"] = "full_attention_interval"
    if head == "tpcalc":  # the synthesised block: say which config.json keys fed it
        sub = loc[1] if len(loc) > 1 else ""
        return {
            "declared_parts": ("vision_config",),
            "seq_length": (*prefix, "max_position_embeddings"),
        }.get(str(sub), ("_name_or_path",))
    if head == "tie_word_embeddings" and prefix and "tie_word_embeddings" not in text:
        return loc  # taken from the wrapper
    return (*prefix, spelling.get(str(head), head), *loc[1:])


def _name_or_path(data: dict[str, Any]) -> str | None:
    value = data.get("_name_or_path")
    return value if isinstance(value, str) and value else None


def _count(
    text: dict[str, Any], key: str, high: int, source: str, prefix: tuple[str, ...] = ()
) -> int | None:
    """An integer field in [1, high] that is used before the schema sees it, or None if absent."""
    value = text.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigFieldError(
            source, (*prefix, key), f"expected a positive integer, got {value!r:.40}"
        )
    if value < 1:
        raise ConfigFieldError(source, (*prefix, key), "Input should be greater than 0")
    if value > high:
        raise ConfigFieldError(
            source, (*prefix, key), f"{value} is beyond any real model (at most {high:,})"
        )
    return value


def _special_fields(
    model_type: str, text: dict[str, Any], source: str, prefix: tuple[str, ...]
) -> dict[str, Any]:
    """Fields whose meaning differs between families."""
    if model_type == "mixtral":  # every layer is MoE; intermediate_size is the expert width
        return {"moe_intermediate_size": text["intermediate_size"]}
    layers = text["num_hidden_layers"]
    if model_type == "deepseek_v3":
        freq = _count(text, "moe_layer_freq", MAX_LAYERS, source, prefix) or 1
        return {
            # noaux_tc routing adds e_score_correction_bias, one entry per routed expert
            "router_bias": text.get("topk_method") == "noaux_tc",
            # DeepseekV3DecoderLayer: MoE when i >= first_k_dense_replace and i % freq == 0
            "mlp_only_layers": tuple(i for i in range(layers) if i % freq),
        }
    if model_type == "qwen3_5" and text.get("layer_types") is None:
        interval = _count(text, "full_attention_interval", MAX_LAYERS, source, prefix) or 1
        return {
            "layer_types": tuple(
                "full_attention" if (i + 1) % interval == 0 else "linear_attention"
                for i in range(layers)
            )
        }
    return {}


def _declared_parts(
    model_type: str, data: dict[str, Any], source_path: str
) -> tuple[tuple[DeclaredPart, ...], list[str]]:
    vision = data.get("vision_config")
    if model_type != "qwen3_5" or not isinstance(vision, dict):
        return (), []
    if vision.get("deepstack_visual_indexes"):
        return (), ["vision tower not counted: deepstack mergers are not modelled"]
    for key in ("depth", "hidden_size", "intermediate_size", "out_hidden_size"):
        if vision.get(key) is None:
            raise ConfigFieldError(source_path, ("vision_config", key), "required key is missing")
    for key, high in VISION_BOUNDS.items():  # multiplied below: a string would repeat itself
        _count(vision, key, high, source_path, ("vision_config",))
    part = DeclaredPart(
        name="vision_tower",
        params=vision_tower_params(vision),
        source=f"vision_config of {source_path}, counted by tpcalc.hf.vision_tower_params",
    )
    return (part,), []


def vision_tower_params(vision: dict[str, Any]) -> int:
    """Qwen3-VL / Qwen3.5 vision encoder: Conv3d patch embedding with bias, a learned position
    table, ``depth`` ViT blocks (two LayerNorms, fused qkv and proj with bias, GELU MLP with bias)
    and a patch merger (LayerNorm, then spatial_merge² · d → same → out_hidden_size, with bias).
    Source: transformers ``Qwen3VLVisionModel`` module shapes; Qwen3.5-27B gives 460,730,096."""
    v = VISION_DEFAULTS | {k: x for k, x in vision.items() if x is not None}
    d, inter, out = v["hidden_size"], v["intermediate_size"], v["out_hidden_size"]
    patch_in = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
    merged = d * v["spatial_merge_size"] ** 2
    block = (
        VIT_NORMS * LAYERNORM_TENSORS * d
        + d * QKV * d + QKV * d  # qkv
        + d * d + d  # proj
        + d * inter + inter  # fc1
        + inter * d + d  # fc2
    )  # fmt: skip
    merger = LAYERNORM_TENSORS * d + merged * merged + merged + merged * out + out
    return patch_in * d + d + v["num_position_embeddings"] * d + v["depth"] * block + merger


def _name(source_path: str) -> str:
    path = PurePath(source_path)
    if path.name == "config.json" and path.parent.name:
        return path.parent.name
    return path.stem
