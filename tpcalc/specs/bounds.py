"""Bounded integer types for spec fields: the schema refuses absurd sizes, naming the field.

Each bound is far above any published model, so no real config is refused, and low enough that
nothing downstream allocates or loops beyond a second (a per-layer list is at most MAX_LAYERS
long) and every parameter and byte count stays an exact float (< 2**53).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from typing_extensions import TypeAliasType

# Largest published values, for scale: 128 layers, 25,600 hidden, 160 heads and a 102,400 FFN
# (4h) in Megatron-LM's 1T configuration (Narayanan et al. 2021, arXiv 2104.04473, Table 1);
# 262,144 vocabulary (Gemma 3); 2,048 experts (Switch-C, arXiv 2101.03961); 10,485,760
# positions (Llama 4 Scout).
MAX_LAYERS = 2**12  # 4,096: 32x the deepest (per-layer loops in calc stay well under a second)
MAX_HIDDEN = 2**20  # 1,048,576: 40x the widest
MAX_HEADS = 2**16  # 65,536 heads, KV heads, experts, groups: 32x the most experts
MAX_HEAD_DIM = 2**16  # per-head widths (head_dim, MLA ranks, DeltaNet dims, conv kernel)
MAX_INTERMEDIATE = 2**22  # 4,194,304: 40x the widest FFN
MAX_VOCAB = 2**24  # 16,777,216: 64x the largest vocabulary
MAX_SEQ = 2**26  # 67,108,864 tokens: 6x the longest context window
# A rough parameter count (``ModelSpec.rough_params``) above 10^14 (50x the largest published
# models, ~2 T) is refused: 16 bytes of training state per parameter then stays below 2**53.
MAX_PARAMS = 10**14


def _no_bool(value: Any) -> Any:
    """YAML reads ``yes``/``true`` as a bool, which pydantic would take as the integer 1."""
    if isinstance(value, bool):
        raise ValueError("Input should be an integer, not a boolean")
    return value


def bounded(name: str, low: int, high: int) -> Any:
    """An integer field in [low, high]: bools, fractions, NaN and inf are refused.

    A named alias (TypeAliasType): pydantic builds its schema once per model and refers to it
    from every field of that type, instead of once per field (ModelSpec has 40 of them: about
    a third of its class build at start-up, issue 12 §6). Validation and errors are the same."""
    lower = Field(gt=0) if low == 1 else Field(ge=low)  # "greater than 0" reads better than ">= 1"
    return TypeAliasType(name, Annotated[int, BeforeValidator(_no_bool), lower, Field(le=high)])


LayerCount = bounded("LayerCount", 1, MAX_LAYERS)
LayerIndex = bounded("LayerIndex", 0, MAX_LAYERS)
Hidden = bounded("Hidden", 1, MAX_HIDDEN)
Heads = bounded("Heads", 1, MAX_HEADS)
HeadDim = bounded("HeadDim", 1, MAX_HEAD_DIM)
Width = bounded("Width", 1, MAX_INTERMEDIATE)
Vocab = bounded("Vocab", 1, MAX_VOCAB)
Seq = bounded("Seq", 1, MAX_SEQ)
Count = bounded("Count", 0, MAX_HEADS)
Params = bounded("Params", 0, MAX_PARAMS)
