"""Expert parallel as Megatron-Core does it (issue 10 §2): ETP, dispatchers, router dtype,
capacity factor, EP groups on the right link."""

from __future__ import annotations

import pytest

from tpcalc.calc.activations.exact.layer import saved_tensors
from tpcalc.calc.activations.exact.options import ActivationOptions
from tpcalc.calc.ep.all_to_all import ep_comm
from tpcalc.calc.layout.groups import ParallelLayout, place_groups
from tpcalc.calc.links.link import Link
from tpcalc.catalog import load_hardware, load_model
from tpcalc.choices import MoeDispatcher, RouterDtype
from tpcalc.reports.cp_ep import ep_row

S, H, K, E, F = 4096, 7168, 8, 256, 2048  # DeepSeek-V3 config.json


@pytest.fixture(scope="module")
def ds():
    return load_model("deepseek-v3")


@pytest.fixture(scope="module")
def h800():
    return load_hardware("h800")


def test_etp_splits_each_expert(ds, h800):
    # Megatron-Core expert tensor parallel: each expert's weights split over etp ranks
    one = ep_row(ds, h800, ep_comm(ds, h800, ep=8, tokens=S))
    two = ep_row(ds, h800, ep_comm(ds, h800, ep=8, tokens=S, etp=2))
    assert one.value("routed_expert_params_per_rank") == 58 * E * 3 * H * F // 8
    assert two.value("routed_expert_params_per_rank") == 58 * E * 3 * H * F // 16


def test_allgather_dispatcher_sends_every_token_to_every_rank(ds, h800):
    # MoEAllGatherTokenDispatcher: a ring all-gather sends (n-1) shards of T·h per rank;
    # four collectives per layer (dispatch, combine, and their backward), bf16
    row = ep_row(ds, h800, ep_comm(ds, h800, ep=8, tokens=S, dispatcher=MoeDispatcher.allgather))
    assert row.value("send_bytes_per_layer") == 4 * 7 * S * H * 2


def test_capacity_factor_pads_expert_tensors_and_dispatch(ds, h800):
    # --moe-expert-capacity-factor 1.25 with padding: 1.25·T·k rows instead of T·k
    plain = {r.name: r for r in saved_tensors(ds, 10, S, 1)}
    opts = ActivationOptions(capacity_factor=1.25)
    padded = {r.name: r for r in saved_tensors(ds, 10, S, 1, opts)}
    assert plain["moe.permuted_tokens"].shape == (S * K, H)
    assert padded["moe.permuted_tokens"].shape == (S * K * 5 // 4, H)
    base = ep_row(ds, h800, ep_comm(ds, h800, ep=64, tokens=S)).value("send_bytes_per_layer")
    capped = ep_row(ds, h800, ep_comm(ds, h800, ep=64, tokens=S, capacity_factor=1.25)).value(
        "send_bytes_per_layer"
    )
    assert capped == pytest.approx(1.25 * base, rel=1e-12)


def test_router_dtype(ds):
    # Megatron --moe-router-dtype fp64 keeps the [T, E] scores in 8 bytes
    opts = ActivationOptions(router_dtype=RouterDtype.fp64)
    recs = {r.name: r for r in saved_tensors(ds, 10, S, 1, opts)}
    assert recs["moe.router_scores"].bytes == S * E * 8


def test_ep_group_leaving_a_node_is_priced_on_ib():
    # EP 64 over the dp ranks, 8 GPUs per node: the group spans 8 nodes (DeepSeek-V3 §3.2)
    g = place_groups(ParallelLayout(pp=16, dp=128, ep=64, gpus_per_node=8))["ep"]
    assert (g.size, g.stride, g.nodes, g.link) == (64, 1, 8, Link.inter_node)
    inside = place_groups(ParallelLayout(tp=2, dp=4, ep=8, gpus_per_node=8))["ep"]
    assert inside.link is Link.intra_node  # etp = 1: 8 consecutive ranks, one node


def test_cli_ep_and_layout_take_the_new_options(cli):
    res = cli("ep", "--ep", "8", "-t", "2", "--etp", "1", "--moe-dispatcher", "allgather",
              "--capacity-factor", "1.25", "-f", "json")  # fmt: skip
    assert res.code == 0 and '"dispatcher": "allgather"' in res.out
    res = cli("layout", "-m", "qwen3-30b-a3b", "--dp", "16", "--ep", "16", "--zero", "1",
              "--router-dtype", "fp64", "--moe-dispatcher", "allgather", "-f", "json")  # fmt: skip
    assert res.code == 0 and '"router_dtype": "fp64"' in res.out
    bad = cli("ep", "--ep", "8", "--capacity-factor", "-1")
    assert bad.code == 1 and "capacity_factor" in bad.err


@pytest.mark.parametrize("value", ["1e309", "nan", "0"])
@pytest.mark.parametrize(
    "command",
    [("memory", "-m", "deepseek-v3"), ("ep", "--ep", "8"),
     ("layout", "-m", "qwen3-30b-a3b", "--dp", "8", "--ep", "8")],
)  # fmt: skip
def test_a_capacity_factor_that_is_not_a_positive_finite_number_is_refused(cli, command, value):
    # fuzz seed 74 found `tpcalc memory --capacity-factor 1e309` ending in an internal error (the
    # expert capacity ceil(inf)); every command now refuses it in one line, naming the field
    res = cli(*command, "--capacity-factor", value, "-f", "json")
    assert res.code == 1 and res.out == ""
    assert "capacity_factor=" in res.err and "positive finite" in res.err
    assert len(res.err.strip().splitlines()) == 1
