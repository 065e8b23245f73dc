"""Every field of a typed result has its explanation (tpcalc.explain), and the row a command
prints is the result's fields under their labels, in base units."""

from __future__ import annotations

import pytest

from tpcalc.calc.cp.causal import CausalBalance
from tpcalc.calc.cp.ring import CpRing
from tpcalc.calc.cp.ring_explain import CAUSAL_EXPLANATIONS
from tpcalc.calc.cp.ring_explain import explanations as cp_explanations
from tpcalc.calc.dp.gradients import GradientSync
from tpcalc.calc.dp.gradients_explain import explanations as dp_explanations
from tpcalc.calc.links.breakdown import LinkTime, link_time_explanations
from tpcalc.calc.links.link import Link
from tpcalc.calc.tp.comm import TpComm
from tpcalc.calc.tp.comm_explain import EXPLANATIONS as TP_COMM
from tpcalc.choices import Recompute
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
    ],
    ids=["TpComm", "LinkTime", "GradientSync", "CpRing", "CausalBalance"],
)
def test_every_field_is_explained(result_type: type, table: dict[str, Explanation]) -> None:
    assert unexplained(result_type, table) == []
    assert all(ex.formula and ex.source and ex.label for ex in table.values())


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
