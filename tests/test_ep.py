"""Expert parallelism: seed 000's DeepSeek-V3 figures, all-to-all bytes, node-limited routing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpcalc.calc.ep.all_to_all import ep_comm
from tpcalc.calc.ep.memory import experts_per_rank
from tpcalc.calc.ep.routing import copies_per_token, max_nodes_per_token
from tpcalc.calc.links.link import nodes_spanned
from tpcalc.calc.params.counts import routed_expert_params
from tpcalc.catalog import load_model
from tpcalc.choices import EpRouting, StateRecipe
from tpcalc.errors import DivisibilityError, InputError
from tpcalc.reports.cp_ep import ep_row
from tpcalc.units import Dtype

TOKENS = 4096  # DeepSeek-V3 pre-training sequence length (report §4.2), one sequence per rank


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


@pytest.fixture(scope="module")
def row(dsv3, h800):
    return ep_row(dsv3, h800, ep_comm(dsv3, h800, ep=64, tokens=TOKENS))


def test_experts_per_card(dsv3, row):
    # seed 000 summary: 256 routed experts / 64 cards = 4 per card per layer
    assert experts_per_rank(dsv3, 64) == 4
    assert row.value("experts_per_rank") == 4


def test_routed_expert_params(dsv3, row):
    # seed 000 summary: 654B routed-expert parameters = 58 × 256 × 3 × 7168 × 2048
    assert abs(routed_expert_params(dsv3) / 1e9 - 654) <= 0.5
    assert row.value("routed_expert_params") == 58 * 256 * 3 * 7168 * 2048
    assert row.value("routed_expert_params_per_rank") == 58 * 4 * 3 * 7168 * 2048


def test_max_nodes_per_token(dsv3, row):
    # seed 000 summary: each token is routed to at most 4 nodes (topk_group = 4)
    assert max_nodes_per_token(dsv3) == 4
    assert row.value("max_nodes_per_token") == 4


def test_expert_memory_per_rank(row):
    per_rank = 58 * 4 * 3 * 7168 * 2048
    assert row.value("expert_weights_bytes_per_rank") == 2 * per_rank
    assert row.value("expert_states_bytes_per_rank") == 16 * per_rank


def test_megatron_recipe_is_18_bytes(dsv3, h800):
    r = ep_row(dsv3, h800, ep_comm(dsv3, h800, ep=64, tokens=TOKENS, recipe=StateRecipe.megatron18))
    assert r.value("expert_states_bytes_per_rank") == 18 * r.value("routed_expert_params_per_rank")


def test_node_limited_copies_over_ib(row):
    # EP 64 on 8-GPU nodes spans N = 8 nodes; M = 4: 4·7/8 = 3.5 IB copies per token of k = 8
    assert row.value("ep_nodes") == 8
    assert row.value("ib_copies_per_token") == 3.5
    assert row.value("nvlink_copies_per_token") == 8 * 63 / 64 - 3.5
    assert row.value("cross_node_share_ratio") == 3.5 / 8


def test_uniform_routing_sends_more_over_ib(dsv3, h800, row):
    uni = ep_row(dsv3, h800, ep_comm(dsv3, h800, ep=64, tokens=TOKENS, routing=EpRouting.uniform))
    assert uni.value("ib_copies_per_token") == 8 * 7 / 8
    assert uni.value("cross_node_share_ratio") > row.value("cross_node_share_ratio")
    # same total bytes leave the rank; only the link mix changes
    assert uni.value("send_bytes_per_layer") == pytest.approx(row.value("send_bytes_per_layer"))


def test_a2a_bytes_per_layer(row):
    # 4 all-to-alls (dispatch, combine; fwd and bwd) of tokens × k × h × 2 B, (ep-1)/ep leaving
    msg = TOKENS * 8 * 7168 * 2
    assert row.value("a2a_message_bytes") == msg
    assert row.value("send_bytes_per_layer") == pytest.approx(4 * msg * 63 / 64)
    assert row.value("send_bytes_per_micro_batch") == pytest.approx(58 * 4 * msg * 63 / 64)
    assert row.check_breakdowns() == []


def test_fp8_dispatch_halves_dispatch_bytes(dsv3, h800, row):
    # DeepSeek-V3 §3.3: activations are dispatched in FP8, combined in BF16
    r = ep_row(dsv3, h800, ep_comm(dsv3, h800, ep=64, tokens=TOKENS, dispatch_dtype=Dtype.fp8))
    assert r.value("fwd_dispatch_bytes_per_layer") * 2 == pytest.approx(
        row.value("fwd_dispatch_bytes_per_layer")
    )
    assert r.value("fwd_combine_bytes_per_layer") == row.value("fwd_combine_bytes_per_layer")


def test_cross_node_ep_comm_about_equal_to_compute(row):
    # seed 000 summary: cross-node EP compute : communication ≈ 1 : 1
    assert 0.5 < row.value("a2a_over_compute_ratio") < 2


def test_ep_inside_one_node_uses_nvlink_only(dsv3, h800):
    r = ep_row(dsv3, h800, ep_comm(dsv3, h800, ep=8, tokens=TOKENS))
    assert r.value("ep_nodes") == 1
    assert r.value("ib_copies_per_token") == 0


def test_ep_one_moves_nothing(dsv3, h800):
    r = ep_row(dsv3, h800, ep_comm(dsv3, h800, ep=1, tokens=TOKENS))
    assert r.value("send_bytes_per_micro_batch") == 0
    assert r.value("comm_time_s") == 0


@pytest.mark.parametrize(
    ("ep", "stride", "g", "nodes"), [(64, 1, 8, 8), (8, 1, 8, 1), (8, 8, 8, 8), (4, 2, 8, 1)]
)
def test_nodes_spanned(ep, stride, g, nodes):
    assert nodes_spanned(ep, stride, g) == nodes


@given(
    k=st.integers(1, 16),
    nodes=st.integers(1, 32),
    per_node=st.integers(1, 8),
    m=st.integers(1, 8),
)
def test_node_limit_never_adds_ib_traffic(k, nodes, per_node, m):
    ep = nodes * per_node
    ib_lim, nv_lim = copies_per_token(k, ep, nodes, EpRouting.node_limited, m)
    ib_uni, nv_uni = copies_per_token(k, ep, nodes, EpRouting.uniform, None)
    assert ib_lim <= ib_uni + 1e-12  # one IB copy per remote node, never more than k
    assert ib_lim + nv_lim == pytest.approx(ib_uni + nv_uni)  # same copies leave the rank
    assert nv_lim >= 0


def test_errors_name_what_to_change(dsv3, h800, qwen38):
    with pytest.raises(DivisibilityError, match=r"n_routed_experts=256 is not divisible by ep=3"):
        ep_row(dsv3, h800, ep_comm(dsv3, h800, ep=3, tokens=TOKENS))
    with pytest.raises(InputError, match=r"needs an MoE model"):
        ep_row(qwen38, h800, ep_comm(qwen38, h800, ep=8, tokens=TOKENS))
    with pytest.raises(InputError, match=r"routing=node-limited needs topk_group"):
        no_groups = dsv3.model_copy(update={"n_group": None, "topk_group": None})
        ep_row(
            no_groups,
            h800,
            ep_comm(no_groups, h800, ep=64, tokens=TOKENS, routing=EpRouting.node_limited),
        )
