"""The sequence length given to an imported config.json, which states no training length.

``max_position_embeddings`` is the longest context a model serves (131,072 for Llama 3.1 8B),
not the length one trains at by default; pricing a run at it reports 97.6 GB for Llama 3.1 8B
at t = 8 (issue 13 §1). The family's pre-training length is used where it is published, else
``DEFAULT_SEQ``, never more than ``max_position_embeddings``.
"""

from __future__ import annotations

# The sequence length of the bulk of pre-training, per model_type, with its source. An imported
# config.json gets min(this, max_position_embeddings): max_position_embeddings is the longest
# context the model serves (131,072 for Llama 3.1 8B), not a length one trains at by default.
TRAINING_SEQ: dict[str, tuple[int, str]] = {
    "llama": (
        8192,
        "from the Llama 3 pre-training length: 'The Llama 3 Herd of Models', arXiv 2407.21783 "
        "§3.4.1, sequences of 8,192 tokens",
    ),
    "qwen2": (
        4096,
        "from the Qwen2 pre-training length: arXiv 2407.10671 §3.2, 4,096 tokens until the "
        "final long-context phase",
    ),
    "qwen3": (4096, "from the Qwen3 pre-training length: arXiv 2505.09388 §3.2, stages S1-S2"),
    "qwen3_moe": (
        4096,
        "from the Qwen3 pre-training length: arXiv 2505.09388 §3.2, stages S1-S2",
    ),
    "mixtral": (32768, "from the Mixtral pre-training context: arXiv 2401.04088 §2, 32k tokens"),
    "deepseek_v3": (
        4096,
        "from the DeepSeek-V3 pre-training length: arXiv 2412.19437 §4.2, 4K tokens",
    ),
    "gpt_neox": (2048, "from the GPT-NeoX-20B training length: arXiv 2204.06745 §3, 2,048"),
}
# Families without a published length: 4,096, the bulk pre-training length of Llama 2 (arXiv
# 2307.09288 §2.2), Qwen2/Qwen3 and DeepSeek-V3 above, and the length of seed 000's examples.
DEFAULT_SEQ = (4096, "tpcalc's default for a family without a published training length")


def default_seq(model_type: str, max_positions: object, source_path: str) -> tuple[int, str]:
    """The family's pre-training length (``TRAINING_SEQ``) or ``DEFAULT_SEQ``, capped at
    max_position_embeddings, and where it comes from."""
    seq, source = TRAINING_SEQ.get(model_type, DEFAULT_SEQ)
    if type(max_positions) is int and 0 < max_positions < seq:  # not a bool; the schema checks
        return max_positions, f"max_position_embeddings of {source_path}, below {seq:,} {source}"
    return seq, source
