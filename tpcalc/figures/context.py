"""Inputs the figures share: the anchor models and links, loaded once (lazily)."""

from __future__ import annotations

from functools import cache

from tpcalc.catalog import load_hardware, load_model
from tpcalc.specs import HardwareSpec, ModelSpec

# The documents' stated inputs (not results): seed 000 uses s = 4,096 tokens, t = 8, 8 and 64
# DP cards, p = 8, m = 32, v = 4, s = 131,072 for CP; seed 003 uses b = 1, s = 8,192, t = 8.
Q_SEQ = 4096
Q_T = 8
Q_DP_SMALL, Q_DP_LARGE = 8, 64
Q_PP, Q_MICROBATCHES, Q_VPP = 8, 32, 4
Q_CP_SEQ, Q_CP = 131_072, 8
Q_CP_CHUNKS, Q_CP_RANKS = 16, 4
Q_EP = 64
TOY_INTERMEDIATE, TOY_CARDS = 16, 2
DS_GPU_HOURS = 2_664_000  # DeepSeek-V3 report Table 1: 2,664K H800 GPU hours of pre-training
L_SEQ, L_T, L_B = 8192, 8, 1


@cache
def qwen() -> ModelSpec:
    return load_model("qwen3.8")


@cache
def llama70b() -> ModelSpec:
    return load_model("llama3-70b")


@cache
def deepseek() -> ModelSpec:
    return load_model("deepseek-v3")


@cache
def h800() -> HardwareSpec:
    return load_hardware("h800")


@cache
def h100() -> HardwareSpec:
    return load_hardware("h100-sxm")
