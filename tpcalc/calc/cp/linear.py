"""Context parallelism for Gated DeltaNet layers: an all-to-all to heads, the rule it needs.

A linear-attention layer passes no K/V ring: its state runs along the whole sequence. Under CP
Megatron-Core turns the layer's sequence split into a head split and back (Ulysses-style,
``ULYSSES`` in ``tpcalc.calc.cp.shapes``): after the input projection an all-to-all gives each
of the cp ranks the whole sequence for 1/cp of the rank's TP heads, the causal conv, the delta
rule and the gated norm run on that, and an all-to-all of the norm's output gives back the
rank's s/cp tokens of every head before the output projection (``SRC_GDN_CP``). Each rank
sends (cp − 1)/cp of its share both times; the backward sends the gradients of the same
tensors the other way, the same bytes. The conv, the delta rule and the norm keep their work:
s tokens × heads/cp is (s/cp) tokens × heads.
"""

from __future__ import annotations

import math

from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.params.counts import deltanet_in_proj_width
from tpcalc.errors import divisors
from tpcalc.specs import ModelSpec
from tpcalc.units import Dtype

SRC_GDN_CP = (
    "Megatron-Core GatedDeltaNet context parallelism (NVIDIA/Megatron-LM #2642, 2026-04-13; "
    "megatron/core/ssm/gated_delta_net/common.py a2a_cp_to_hp and a2a_hp_to_cp, "
    "_build_head_perm_for_split_sections @ d98e8a6): in_proj's output all-to-all from the "
    "sequence to the heads, the gated norm's output back"
)

PASSES = 2  # the forward's all-to-alls, and the backward's of their gradients
GDN_CP_TENSORS = 2  # in_proj's output to the heads, the gated norm's output back


def gdn_cp_problem(spec: ModelSpec, tp: int, cp: int) -> str | None:
    """Why cp cannot split ``spec``'s Gated DeltaNet heads over the ranks of a TP group, or
    None: the all-to-all hands each CP rank 1/cp of the rank's key heads and of its value heads
    (Megatron-Core asserts every in_proj section divisible by cp_size and reshapes to whole
    heads). Source: ``SRC_GDN_CP``."""
    if cp == 1 or spec.linear_attention_layers == 0:
        return None
    for what, heads in (
        ("linear_num_key_heads", spec.linear_num_key_heads or 0),
        ("linear_num_value_heads", spec.linear_num_value_heads or 0),
    ):
        if (heads // tp) % cp:
            return (
                f"{what}/tp = {heads // tp} is not divisible by cp={cp}: Gated DeltaNet under CP "
                "gives each CP rank whole heads (Megatron-Core's all-to-all to heads)"
            )
    return None


def gdn_cps(spec: ModelSpec, tp: int) -> list[int]:
    """Every cp that splits ``spec``'s Gated DeltaNet heads at ``tp`` (``gdn_cp_problem``):
    the divisors of both head counts per TP rank."""
    keys, values = spec.linear_num_key_heads or 0, spec.linear_num_value_heads or 0
    return divisors(math.gcd(keys // tp, values // tp))


def gdn_cp_elements_per_token(spec: ModelSpec, tp: int) -> tuple[int, int]:
    """(into the heads, back to the sequence): elements per token of one TP rank's in_proj
    output (q, k, v, z, beta, alpha: Megatron-Core's in_proj_split_sections,
    ``params.counts.deltanet_in_proj_width``) and of its gated norm's output, the two tensors
    the layer's all-to-alls carry. Source: ``SRC_GDN_CP``."""
    nv = (spec.linear_num_value_heads or 0) // tp
    return deltanet_in_proj_width(spec, tp), nv * (spec.linear_value_head_dim or 0)


def gdn_cp_messages(spec: ModelSpec, *, tokens: int, tp: int, dtype: Dtype) -> tuple[float, float]:
    """The two tensors one rank's all-to-alls carry in one pass, in bytes: its ``tokens``
    (s·b/cp) of each of ``gdn_cp_elements_per_token``. Source: ``SRC_GDN_CP``."""
    into, back = gdn_cp_elements_per_token(spec, tp)
    return tokens * into * dtype.bytes, tokens * back * dtype.bytes


def gdn_cp_send_bytes_per_layer(
    spec: ModelSpec, *, tokens: int, tp: int, cp: int, dtype: Dtype
) -> float:
    """Bytes one rank sends in one Gated DeltaNet layer's CP all-to-alls for one micro-batch,
    forward and backward: (cp − 1)/cp of each message (``gdn_cp_messages``), in both passes.
    Source: ``SRC_GDN_CP``."""
    messages = gdn_cp_messages(spec, tokens=tokens, tp=tp, dtype=dtype)
    return PASSES * ring_factor(Collective.all_to_all, cp) * sum(messages)
