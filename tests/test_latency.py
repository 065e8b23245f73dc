"""Latency: NCCL's ring model charges α_inter only on the ring steps that cross nodes.

NCCL src/graph/tuning.cc (ncclTopoTuneModel, ring): latency = (nsteps − nInterSteps)·intraLat +
nInterSteps·interLat, with nsteps = 2(n−1) / n−1 and nInterSteps = 2(N−1) / N−1 for all-reduce /
all-gather and reduce-scatter over n ranks on N nodes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
from tpcalc.calc.links.collectives import Collective
from tpcalc.calc.links.link import LatencySteps, nodes_spanned, ring_latency_s, ring_steps
from tpcalc.errors import InputError
from tpcalc.reports.layout import parallel_layout_report as layout_report


@pytest.mark.parametrize(
    ("collective", "n", "nodes", "intra", "inter"),
    [
        (Collective.all_reduce, 64, 8, 112, 14),  # 2·63 steps, 2·7 of them between nodes
        (Collective.all_reduce, 8, 1, 14, 0),  # one node: all on NVLink
        (Collective.all_reduce, 8, 8, 0, 14),  # one rank per node: all on the network
        (Collective.all_gather, 16, 2, 14, 1),  # 15 steps, 1 between nodes
        (Collective.reduce_scatter, 16, 4, 12, 3),
        (Collective.p2p, 4, 2, 0, 1),  # one send, off-node
        (Collective.p2p, 4, 1, 1, 0),
        (Collective.all_to_all, 64, 8, 0, 1),  # one round of concurrent sends
        (Collective.all_reduce, 1, 1, 0, 0),  # a one-rank group sends nothing
    ],
)
def test_ring_steps_follow_nccl(collective, n, nodes, intra, inter):
    assert ring_steps(collective, n, nodes) == LatencySteps(intra, inter)


def test_ring_steps_reject_impossible_node_counts():
    with pytest.raises(InputError, match="nodes=9 must be between 1 and the group size 8"):
        ring_steps(Collective.all_reduce, 8, 9)
    with pytest.raises(InputError, match="nodes=0"):
        ring_steps(Collective.all_gather, 8, 0)


@given(n=st.integers(2, 512), g=st.sampled_from([1, 2, 4, 8]), stride=st.sampled_from([1, 2, 8]))
def test_steps_add_up_and_an_all_reduce_is_a_reduce_scatter_plus_an_all_gather(n, g, stride):
    nodes = nodes_spanned(n, stride, g)
    ar = ring_steps(Collective.all_reduce, n, nodes)
    assert ar.intra + ar.inter == 2 * (n - 1)
    assert ar == ring_steps(Collective.reduce_scatter, n, nodes) + ring_steps(
        Collective.all_gather, n, nodes
    )


def test_dp_64_pays_alpha_inter_only_on_node_crossing_steps(cli, h100):
    import json

    rows = {}
    for flag in ("--latency", "--no-latency"):
        r = cli("dp", "--dp", "64", "-m", "qwen3.8", "--hardware", "h100-sxm", flag, "-f", "json")
        assert r.code == 0, r.err
        rows[flag] = json.loads(r.out)[0]
    latency = rows["--latency"]["comm_time_s"] - rows["--no-latency"]["comm_time_s"]
    buckets = rows["--latency"]["buckets_count"]
    assert buckets == 2120  # 55.6 GB of BF16 gradients in 25 MiB buckets
    # 64 ranks on 8 nodes: per bucket 112 NVLink steps at 3.4 µs + 14 network steps at 14 µs
    assert latency == pytest.approx(buckets * (112 * 3.4e-6 + 14 * 14e-6))  # 1.22 s
    assert abs(latency - 1.22) <= 0.005
    # the old charge was every one of the 126 steps at 14 µs: 3.74 s
    assert latency < buckets * 126 * 14e-6 / 3
    assert latency == pytest.approx(ring_latency_s(h100, Collective.all_reduce, 64, 8, buckets))


def test_latency_off_leaves_the_bandwidth_term(cli):
    import json

    r = cli("dp", "--dp", "64", "-m", "qwen3.8", "--hardware", "h800", "--no-latency", "-f", "json")
    row = json.loads(r.out)[0]
    # bandwidth only: 2·63/64 × 55.56 GB / 50 GB/s (seed 000's 109.4 GB on IB)
    assert row["comm_time_s"] == pytest.approx(row["ring_send_bytes_per_rank"] / 50e9)


def test_explain_echoes_steps_and_both_alphas(cli):
    r = cli("dp", "--dp", "64", "-m", "qwen3.8", "--hardware", "h100-sxm", "--explain")
    assert r.code == 0, r.err
    text = r.out
    # 2,120 buckets × 112 intra-node and × 14 inter-node steps
    assert "intra_steps=237,440" in text and "inter_steps=29,680" in text
    assert "alpha_intra_s=3.400e-06" in text and "alpha_inter_s=1.400e-05" in text
    assert "tuning.cc" in text and "hwLat[NET][Ring][Simple]" in text


def test_layout_zero0_dp_all_reduce_has_2_n_minus_1_steps(h100):
    from tpcalc.catalog import load_model
    from tpcalc.choices import TimeModel

    spec = load_model("llama3-70b")
    lay = ParallelLayout(tp=8, pp=4, dp=4, gpus_per_node=8)
    rows = {}
    for latency in (True, False):
        run = LayoutRun(seq=8192, microbatches=8, with_latency=latency)
        report = layout_report(spec, h100, lay, run, time_model=TimeModel.fixed)
        rows[latency] = next(r for r in report.rows if r.inputs["dimension"] == "dp")
    extra = rows[True].value("comm_time_s") - rows[False].value("comm_time_s")
    # dp=4 ranks 8 apart: 4 nodes; one all-reduce of the dense gradients, 2·3 network steps
    assert extra == pytest.approx(6 * 14e-6)


def test_cp_ring_counts_its_node_crossings_once_per_pass():
    from tpcalc.calc.cp.ring import ring_latency_steps_per_layer, ring_sends_per_layer

    # cp=16 on two 8-GPU nodes: K,V all-gathered twice (15 steps, 1 crossing each) and dK,dV
    # reduce-scattered (15, 1), as Transformer Engine's backward sends them: 45 = 3·15 sends,
    # 3 crossings
    assert ring_sends_per_layer(16) == 45
    assert ring_latency_steps_per_layer(16, 2) == LatencySteps(42, 3)
    assert ring_sends_per_layer(1) == 0 and ring_latency_steps_per_layer(1, 1) == LatencySteps()
