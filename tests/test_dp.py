"""Data parallelism: seed 000's gradient, ring vs naive, link-time and backward figures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpcalc.calc.dp.gradients import (
    DDP_BUCKET_BYTES,
    backward_flop,
    bucket_count,
    dp_terms,
    gradient_bytes,
    last_bucket_bytes,
    naive_gather_bytes,
    ring_all_reduce_bytes,
)
from tpcalc.calc.links.link import Link
from tpcalc.calc.params.counts import matmul_params, total_params
from tpcalc.errors import InputError
from tpcalc.render import pick_scale
from tpcalc.terms import Row, Unit
from tpcalc.units import GB, ByteUnits, Dtype


def seed_row(qwen38, h800, n: int = 8, link: Link = Link.inter_node) -> Row:
    """Seed 000's DP example: Qwen3.8, BF16 gradients, 4,096 tokens per card, H800 links."""
    terms = dp_terms(
        params=total_params(qwen38),
        flop_params=matmul_params(qwen38),
        tokens=4096,
        n=n,
        hw=h800,
        link=link,
        grad_dtype=Dtype.bf16,
    )
    return Row(inputs={"n": n}, terms=terms)


def test_grad_bytes(qwen38):
    # seed 000 summary (DP row): BF16 gradients 55.6 GB
    assert abs(gradient_bytes(total_params(qwen38), Dtype.bf16) / GB - 55.6) <= 0.05


@pytest.mark.parametrize(("n", "printed_gb"), [(8, 97.2), (64, 109.4)])
def test_ring_all_reduce_per_card(qwen38, n, printed_gb):
    # seed 000 summary: ring all-reduce, each card sends 97.2 GB (8 cards) / 109.4 GB (64 cards)
    g = gradient_bytes(total_params(qwen38), Dtype.bf16)
    assert abs(ring_all_reduce_bytes(g, n) / GB - printed_gb) <= 0.05


@pytest.mark.parametrize(("n", "printed_gb", "tol"), [(8, 388.9, 0.05), (64, 3500, 0.5)])
def test_naive_gather_to_card0(qwen38, n, printed_gb, tol):
    # seed 000 §数据并行: gathering to card 0, 388.9 GB (8 cards) and 3,500 GB (64 cards) arrive
    g = gradient_bytes(total_params(qwen38), Dtype.bf16)
    assert abs(naive_gather_bytes(g, n) / GB - printed_gb) <= tol


def test_dp_time_on_ib(qwen38, h800):
    # seed 000 §数据并行: 97.2 GB over IB 50 GB/s takes 1.94 s
    assert abs(seed_row(qwen38, h800).value("comm_time_s") - 1.94) <= 0.005


def test_backward_time(qwen38, h800):
    # seed 000 §数据并行: backward of 4,096 tokens = 4 × matmul params × 4096 / 400 TFLOP/s ≈ 1.05 s
    assert abs(seed_row(qwen38, h800).value("backward_time_s") - 1.05) <= 0.005


def test_dp_cannot_hide_behind_backward(qwen38, h800):
    # seed 000 §数据并行: "token 太少就藏不住" — 1.94 s of comm vs 1.05 s of backward
    row = seed_row(qwen38, h800)
    assert row.value("hides_behind_backward") is False
    assert row.value("exposed_comm_time_s") == pytest.approx(
        row.value("comm_time_s") - row.value("backward_time_s")
    )


def test_ddp_bucket_is_25_mib(qwen38, h800):
    # seed 000 §数据并行: default bucket 25 MiB (PyTorch DDP bucket_cap_mb=25)
    term = seed_row(qwen38, h800).get("bucket_bytes")
    factor, name = pick_scale([term.value], Unit.bytes, ByteUnits.GiB)
    assert (term.value / factor, name) == (25, "MiB")


def test_bucket_count_and_last_bucket(qwen38):
    g = gradient_bytes(total_params(qwen38), Dtype.bf16)
    # by hand: 55,562,855,904 / 26,214,400 = 2,119.6 -> 2,120 buckets, the last one 0.6 full
    assert bucket_count(g, DDP_BUCKET_BYTES) == 2120
    assert last_bucket_bytes(g, DDP_BUCKET_BYTES) == 55_562_855_904 - 2119 * 26_214_400


def test_small_model_hides_and_only_the_last_bucket_is_exposed(h800):
    # 10M params: 20 MB of BF16 gradients fit in one bucket; with many tokens the backward is long
    row = Row(
        inputs={},
        terms=dp_terms(
            params=10**7, flop_params=10**7, tokens=10**6, n=8, hw=h800,
            link=Link.intra_node, grad_dtype=Dtype.bf16,
        ),
    )  # fmt: skip
    assert row.value("buckets_count") == 1
    assert row.value("hides_behind_backward") is True
    assert row.value("exposed_comm_time_s") == row.value("last_bucket_time_s")


def test_one_rank_moves_nothing(qwen38, h800):
    row = seed_row(qwen38, h800, n=1)
    assert row.value("ring_send_bytes_per_rank") == 0
    assert row.value("naive_recv_bytes_rank0") == 0
    assert row.value("exposed_comm_time_s") == 0


def test_nvlink_is_faster_by_the_bandwidth_ratio(qwen38, h800):
    ib = seed_row(qwen38, h800).value("comm_time_s")
    nv = seed_row(qwen38, h800, link=Link.intra_node).value("comm_time_s")
    # seed 000: NVLink 160 GB/s is 3.2x IB 50 GB/s
    assert abs(ib / nv - 3.2) <= 0.05


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ring_all_reduce_bytes(1.0, 0), "dp=0"),
        (lambda: naive_gather_bytes(1.0, -2), "dp=-2"),
        (lambda: bucket_count(1.0, 0), "bucket size 0"),
        (lambda: backward_flop(10, 0), "tokens=0"),
        (lambda: gradient_bytes(-5, Dtype.bf16), "params=-5"),
    ],
)
def test_bad_inputs_raise_one_line(call, message):
    with pytest.raises(InputError, match=message) as exc:
        call()
    assert "\n" not in str(exc.value)


@given(g=st.integers(min_value=1, max_value=10**12), n=st.integers(min_value=2, max_value=4096))
def test_ring_is_bounded_and_naive_grows_with_n(g, n):
    ring = ring_all_reduce_bytes(g, n)
    assert g <= ring < 2 * g
    assert naive_gather_bytes(g, n + 1) > naive_gather_bytes(g, n) >= ring / 2


@given(g=st.integers(min_value=1, max_value=10**12), b=st.integers(min_value=1, max_value=2**30))
def test_buckets_cover_the_gradient(g, b):
    k = bucket_count(g, b)
    assert (k - 1) * b < g <= k * b
    assert 0 < last_bucket_bytes(g, b) <= b


@given(n=st.integers(min_value=1, max_value=512), tokens=st.integers(min_value=1, max_value=10**6))
def test_row_has_no_broken_breakdowns(qwen38, h800, n, tokens):
    terms = dp_terms(
        params=total_params(qwen38), flop_params=matmul_params(qwen38), tokens=tokens, n=n,
        hw=h800, link=Link.inter_node, grad_dtype=Dtype.bf16,
    )  # fmt: skip
    row = Row(inputs={}, terms=terms)
    assert row.check_breakdowns() == []
    assert row.value("exposed_comm_time_s") <= row.value("comm_time_s")
