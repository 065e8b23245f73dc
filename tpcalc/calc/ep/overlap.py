"""When Megatron-Core can overlap the EP all-to-all with compute.

Megatron-Core's ``--overlap-moe-expert-parallel-comm`` (``overlap_moe_expert_parallel_comm``)
runs one micro-batch's dispatch and combine under another micro-batch's expert compute, in its
combined 1F1B schedule. ``TransformerConfig.__post_init__`` refuses it (an assert, so the job does
not start) unless every rule below holds (``SRC_RULES``). The step model times the all-to-all as
exposed wherever a rule fails, and ``tpcalc layout --ep-overlap`` on such a layout is an error.
"""

from __future__ import annotations

SRC_RULES = (
    "Megatron-LM megatron/core/transformer/transformer_config.py, TransformerConfig.__post_init__, "
    "the overlap_moe_expert_parallel_comm asserts (core_r0.15.0 575b0fb; main d98e8a6 adds "
    "'disable moe in recompute_modules')"
)
# MTP supports at most one layer with the overlap (the same asserts)
MAX_MTP_LAYERS = 1


def pipeline_problem(pp: int, vpp: int) -> str | None:
    """The pipeline rule: with pp > 1 the overlap runs in the interleaved schedule only."""
    if pp > 1 and vpp == 1:
        return "with pp > 1 it needs virtual pipeline stages (--vpp 2 or more)"
    return None


def recompute_problem(
    full_recompute: bool, recompute_modules: tuple[str, ...], recompute_layers: int | None
) -> str | None:
    """The recompute rules: no full or block recompute, no recomputed moe module."""
    if full_recompute:
        return "it cannot run with full recompute (--recompute selective or none)"
    if recompute_layers is not None:
        return "it cannot run with block recompute (drop --recompute-layers)"
    if "moe" in recompute_modules:
        return "it cannot recompute the moe module (drop moe from --recompute-modules)"
    return None


def setup_problem(dispatcher: str, mtp_layers: int) -> str | None:
    """The rules on the run's set-up: the dispatcher and the MTP depth (``mtp_layers``: the
    MTP layers the run trains, 0 when it trains none)."""
    if dispatcher not in ("alltoall", "flex"):
        return f"it needs the alltoall or flex dispatcher, not {dispatcher}"
    if mtp_layers > MAX_MTP_LAYERS:
        return f"it supports at most {MAX_MTP_LAYERS} MTP layer, not {mtp_layers} (--no-mtp)"
    return None


def a2a_overlap_problem(
    *,
    pp: int,
    vpp: int,
    ep: int,
    full_recompute: bool,
    recompute_modules: tuple[str, ...],
    recompute_layers: int | None,
    dispatcher: str,
    mtp_layers: int,
) -> str | None:
    """The first of Megatron-Core's rules for the EP all-to-all overlap that this run breaks,
    in words a user can act on, or None when the overlap is allowed (``SRC_RULES``)."""
    if ep == 1:
        return "it needs expert parallelism (--ep 2 or more)"
    return (
        pipeline_problem(pp, vpp)
        or setup_problem(dispatcher, mtp_layers)
        or recompute_problem(full_recompute, recompute_modules, recompute_layers)
    )
