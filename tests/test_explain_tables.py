"""Every field of a typed result has its explanation (tpcalc.explain), and the row a command
prints is the result's fields under their labels, in base units."""

from __future__ import annotations

import pytest

from tpcalc.calc.activations import paper_explain
from tpcalc.calc.activations.exact import summary_explain as exact_explain
from tpcalc.calc.activations.exact.summary import ExactActivations
from tpcalc.calc.activations.paper import Logits, PaperActivations, PaperLayer
from tpcalc.calc.cp.causal import CausalBalance
from tpcalc.calc.cp.ring import CpRing
from tpcalc.calc.cp.ring_explain import CAUSAL_EXPLANATIONS
from tpcalc.calc.cp.ring_explain import explanations as cp_explanations
from tpcalc.calc.dp import zero_explain
from tpcalc.calc.dp.gradients import GradientSync
from tpcalc.calc.dp.gradients_explain import explanations as dp_explanations
from tpcalc.calc.dp.zero import ZeroComm, ZeroCommParts, ZeroStates
from tpcalc.calc.ep import all_to_all_explain as ep_explain
from tpcalc.calc.ep.all_to_all import EpComm
from tpcalc.calc.ep.memory import ExpertMemory
from tpcalc.calc.ep.routing import AllToAll
from tpcalc.calc.layout import comm_explain, memory_explain, summary_explain, timed_explain
from tpcalc.calc.layout.comm import (
    CpDetail,
    DimCost,
    DpDetail,
    DpShare,
    EpDetail,
    PpDetail,
    TpDetail,
)
from tpcalc.calc.layout.groups import Group
from tpcalc.calc.layout.memory import LayoutMemory
from tpcalc.calc.layout.summary import DimensionTotal, FixedStepSummary
from tpcalc.calc.layout.timed import RooflineSummary
from tpcalc.calc.links.breakdown import LinkTime, link_time_explanations
from tpcalc.calc.links.link import Link
from tpcalc.calc.params import breakdown_explain, states_explain
from tpcalc.calc.params.breakdown import ParamBreakdown
from tpcalc.calc.params.states import ModelStates, StateParts
from tpcalc.calc.pipeline import breakdown_explain as pp_explain
from tpcalc.calc.pipeline.breakdown import PipelineActivations, PipelineBreakdown
from tpcalc.calc.tp import shards_explain
from tpcalc.calc.tp.comm import TpComm
from tpcalc.calc.tp.comm_explain import EXPLANATIONS as TP_COMM
from tpcalc.calc.tp.flops import TpFlops, tp_flops
from tpcalc.calc.tp.flops_explain import FLAG_EXPLANATIONS as FLOPS_FLAGS
from tpcalc.calc.tp.flops_explain import explanations as flops_explanations
from tpcalc.calc.tp.memory import TpMemoryTotal
from tpcalc.calc.tp.memory_explain import explanations as tp_memory_explanations
from tpcalc.calc.tp.shards import KvSplit, TpShards, VocabPadding, Width
from tpcalc.calc.tp.table import RankParams
from tpcalc.calc.tp.table_explain import PLAIN as SHARD_PLAIN
from tpcalc.calc.tp.table_explain import RANK_EXPLANATIONS, RANK_INPUTS
from tpcalc.calc.tp.table_explain import explanations as shard_explanations
from tpcalc.calc.tp.weights import ShardedWeight, model_weights
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import (
    ActivationModel,
    AttentionFlops,
    ParamConvention,
    Recompute,
    Schedule,
    StateRecipe,
)
from tpcalc.explain import Explanation, unexplained
from tpcalc.reports.request import Workload
from tpcalc.reports.tp import tp_comm_row


@pytest.mark.parametrize(
    ("result_type", "table"),
    [
        (TpComm, TP_COMM),
        (LinkTime, link_time_explanations("NVLink", "src")),
        (GradientSync, dp_explanations(Link.inter_node, "src")),
        (CpRing, cp_explanations("src")),
        (CausalBalance, CAUSAL_EXPLANATIONS),
        (EpComm, {**ep_explain.explanations(load_hardware("h800"), True), **ep_explain.INPUTS}),
        (
            ExpertMemory,
            {**ep_explain.memory_explanations(StateRecipe.zero16), **ep_explain.MEMORY_INPUTS},
        ),
        (AllToAll, ep_explain.a2a_explanations("bwd_combine")),
        (
            LayoutMemory,
            {
                **memory_explain.explanations(load_hardware("h100-sxm"), ActivationModel.exact),
                **memory_explain.INPUTS,
            },
        ),
        (
            PaperLayer,
            {
                **paper_explain.layer_explanations(True, Recompute.full, 8),
                **paper_explain.LAYER_INPUTS,
            },
        ),
        (PaperActivations, paper_explain.MODEL_EXPLANATIONS),
        (Logits, paper_explain.LOGITS_EXPLANATIONS),
        (TpMemoryTotal, tp_memory_explanations(load_hardware("h100-sxm"))),
        (StateParts, states_explain.part_explanations("src")),
        (
            PipelineBreakdown,
            {
                **pp_explain.explanations(
                    Schedule.dualpipe,
                    link=Link.inter_node,
                    hw=load_hardware("h800"),
                    with_latency=True,
                    dualpipe_copies=True,
                    p2p_divided=True,
                    times_given=False,
                ),
                **pp_explain.INPUTS,
            },
        ),
        (PipelineActivations, pp_explain.ACTIVATION_EXPLANATIONS),
        (TpShards, shards_explain.EXPLANATIONS),
        (Width, shards_explain.WIDTH_EXPLANATIONS),
        (KvSplit, shards_explain.KV_EXPLANATIONS),
        (VocabPadding, shards_explain.VOCAB_EXPLANATIONS),
        (ModelStates, states_explain.explanations(StateRecipe.megatron18)),
        (ZeroStates, zero_explain.states_explanations(StateRecipe.zero16)),
        (
            ZeroComm,
            zero_explain.comm_explanations(load_hardware("h800"), Link.inter_node, True),
        ),
        (ZeroCommParts, zero_explain.parts_explanations()),
        (TpDetail, {**comm_explain.TP_EXPLANATIONS, **comm_explain.TP_INPUTS}),
        (CpDetail, {**comm_explain.CP_INPUTS, **comm_explain.GDN_CP_EXPLANATIONS}),
        (PpDetail, {**comm_explain.PP_EXPLANATIONS, **comm_explain.PP_INPUTS}),
        (DpShare, comm_explain.DP_SHARE_INPUTS),
        (DpDetail, {"dp_backward_time_s": comm_explain.DP_BACKWARD, **comm_explain.DP_INPUTS}),
        (
            EpDetail,
            {
                "ep_tokens_per_rank": comm_explain.EP_TOKENS,
                **comm_explain.EP_INPUTS,
                "etp_send_bytes_per_layer": comm_explain.EP_ETP,
            },
        ),
        (DimCost, comm_explain.cost_explanations("dp", load_hardware("h100-sxm"), True)),
        (Group, {**comm_explain.group_explanations("tp"), **comm_explain.GROUP_INPUTS}),
        (RooflineSummary, timed_explain.EXPLANATIONS),
        (ExactActivations, {**exact_explain.explanations(True), **exact_explain.INPUTS}),
        (ParamBreakdown, breakdown_explain.explanations(load_model("deepseek-v3"))),
        (RankParams, {**RANK_EXPLANATIONS, **RANK_INPUTS}),
        (
            TpFlops,
            {
                **flops_explanations(
                    ParamConvention.all, moe=True, mtp=True, mask=AttentionFlops.causal
                ),
                **FLOPS_FLAGS,
            },
        ),
    ],
    ids=[
        "TpComm",
        "LinkTime",
        "GradientSync",
        "CpRing",
        "CausalBalance",
        "EpComm",
        "ExpertMemory",
        "AllToAll",
        "LayoutMemory",
        "PaperLayer",
        "PaperActivations",
        "Logits",
        "TpMemoryTotal",
        "StateParts",
        "PipelineBreakdown",
        "PipelineActivations",
        "TpShards",
        "Width",
        "KvSplit",
        "VocabPadding",
        "ModelStates",
        "ZeroStates",
        "ZeroComm",
        "ZeroCommParts",
        "TpDetail",
        "CpDetail",
        "PpDetail",
        "DpShare",
        "DpDetail",
        "EpDetail",
        "DimCost",
        "Group",
        "RooflineSummary",
        "ExactActivations",
        "ParamBreakdown",
        "RankParams",
        "TpFlops",
    ],
)
def test_every_field_is_explained(result_type: type, table: dict[str, Explanation]) -> None:
    assert unexplained(result_type, table) == []
    # "tokens" (s·b, tpcalc flops) and "fits" (total ≤ card, tpcalc memory) are printed
    # without a source today; their rows keep it that way so outputs stay identical
    assert all(ex.formula and ex.label for ex in table.values())
    assert all(ex.source for name, ex in table.items() if name not in ("tokens", "fits"))


@pytest.mark.parametrize(("model", "attention"), [("qwen3.8", False), ("qwen3.8", True),
                                                  ("llama3-70b", True)])  # fmt: skip
def test_flops_row_prints_the_parts_it_counts(h100, model: str, attention: bool) -> None:
    """The attention part is a row only when counted, the Gated DeltaNet part only for a model
    with linear-attention layers (Qwen3.8: 48 of its 64 layers); the parts add up to the total."""
    from tpcalc.calc.tp.flops_explain import tp_flops_terms
    from tpcalc.terms import Row

    spec = load_model(model)
    f = tp_flops(
        spec, h100, t=8, seq=4096, micro_batch=1, params=ParamConvention.matmul,
        attention=attention,
    )  # fmt: skip
    row = Row(inputs={}, terms=tp_flops_terms(f, spec, h100))
    keys = [x.key for x in row.terms]
    assert ("attention_flop_per_rank" in keys) is attention
    assert ("linear_attention_flop_per_rank" in keys) is (
        attention and spec.linear_attention_layers > 0
    )
    assert row.check_breakdowns() == []
    assert row.value("compute_time_s") == f.flop_per_rank / h100.achieved_flop_per_s.value


@pytest.mark.parametrize("sp", [False, True])
def test_comm_row_shows_every_byte_and_time_of_the_result(qwen38, h800, sp: bool) -> None:
    work = Workload(spec=qwen38, hw=h800, seq=4096, sp=sp, recompute=Recompute.full)
    row = tp_comm_row(work, 8)
    keys = [x.key for x in row.terms]
    assert len(keys) == len(set(keys))
    for name in ("nvlink", "ib"):
        assert [k for k in keys if k.startswith(f"{name}_") and k.endswith("time_s")] == [
            f"{name}_bandwidth_time_s",
            f"{name}_latency_time_s",
            f"{name}_time_s",
        ]
    per_collective = {"send_bytes_per_allgather", "send_bytes_per_reduce_scatter"}
    assert (per_collective <= set(keys)) is sp
    assert ("send_bytes_per_allreduce" in keys) is not sp
    assert row.get("send_bytes_per_layer").formula == "6 · 2(t-1)/t · M"  # 2 fwd, 2 bwd, 2 rec


def test_every_shard_table_field_is_explained(llama70b) -> None:
    """Every field of a ShardedWeight has its text; the shape and count rows print without a
    formula, as ``tpcalc check --shards`` always has, the shard rows with theirs."""
    for w in model_weights(llama70b, 16, 128):  # t=16 > 8 KV heads: replicated K/V shards
        table = shard_explanations(w, 16, llama70b.kv_heads)
        assert unexplained(ShardedWeight, table) == []
        assert all(ex.formula and ex.source for k, ex in table.items() if k not in SHARD_PLAIN)


def test_every_layout_summary_field_is_explained(h100) -> None:
    """The fixed-model summary row of tpcalc layout: every field of FixedStepSummary and of
    each DimensionTotal has its text."""
    table = {
        **summary_explain.explanations("1f1b", "bf16", "src", h100),
        **summary_explain.INPUTS,
    }
    assert unexplained(FixedStepSummary, table) == []
    assert unexplained(DimensionTotal, summary_explain.DIMENSION_EXPLANATIONS) == []
    assert all(ex.formula and ex.source and ex.label for ex in table.values())
