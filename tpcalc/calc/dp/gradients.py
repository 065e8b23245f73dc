"""Data parallelism: gradient bytes, ring all-reduce vs a naive gather, buckets, overlap.

Every rank holds the whole model and computes on its own 1/N of the batch; after the backward
pass the N gradient copies are summed (seed 000, summary table "数据并行"). The figures here are
per rank per optimizer step. ``gradient_sync`` returns a ``GradientSync``; its labels, formulas
and sources are in ``tpcalc.calc.dp.gradients_explain``.
"""

from __future__ import annotations

import math

from msgspec import Struct

from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import (
    LatencySteps,
    Link,
    bandwidth_bytes_per_s,
    link_nodes,
    ring_steps,
    steps_time_s,
)
from tpcalc.calc.params.states import check_params
from tpcalc.calc.tp.flops import FLOP_PER_PARAM_TOKEN_BWD, FLOP_PER_PARAM_TOKEN_FWD
from tpcalc.choices import DDP_BUCKET_MIB
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec
from tpcalc.units import Dtype, MiB

DDP_BUCKET_BYTES = DDP_BUCKET_MIB * MiB

# Matmul FLOP per parameter per token (forward 2, backward 4) live in tpcalc.calc.tp.flops; the
# backward splits evenly into the input gradient B and the weight gradient W (Qi et al. 2023 §2:
# both are one matmul of the forward's size).
FORWARD_FLOP_PER_PARAM_TOKEN = FLOP_PER_PARAM_TOKEN_FWD
BACKWARD_FLOP_PER_PARAM_TOKEN = FLOP_PER_PARAM_TOKEN_BWD
BACKWARD_INPUT_FLOP_PER_PARAM_TOKEN = FLOP_PER_PARAM_TOKEN_BWD // 2
BACKWARD_WEIGHT_FLOP_PER_PARAM_TOKEN = (
    FLOP_PER_PARAM_TOKEN_BWD - BACKWARD_INPUT_FLOP_PER_PARAM_TOKEN
)


def check_group(n: int, what: str = "dp") -> None:
    """Raise InputError unless the group size n is a positive integer."""
    if n < 1:
        raise InputError(f"{what}={n} must be a positive integer")


def gradient_bytes(params: int, grad_dtype: Dtype) -> int:
    """Bytes of one full gradient copy: params × bytes of the gradient dtype (seed 000: 55.6 GB)."""
    check_params(params)
    return params * grad_dtype.bytes


def ring_all_reduce_bytes(grad_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``grad_bytes`` over n ranks: 2(n-1)/n × M.

    Source: Patarasuk & Yuan 2009; seed 000 (97.2 GB at n=8, 109.4 GB at n=64).
    """
    check_group(n)
    return ring_factor(Collective.all_reduce, n) * grad_bytes


def naive_gather_bytes(grad_bytes: float, n: int) -> float:
    """Bytes arriving at rank 0 when every other rank sends it a full gradient: (n-1) × M.

    Source: seed 000 (388.9 GB at n=8, 3,500 GB at n=64): the load grows with n, a ring's does not.
    """
    check_group(n)
    return (n - 1) * grad_bytes


def bucket_count(grad_bytes: float, bucket_bytes: int) -> int:
    """Number of DDP buckets: ceil(M / bucket). Source: PyTorch DDP (Li et al. 2020 §3.2.3)."""
    if bucket_bytes <= 0:
        raise InputError(f"bucket size {bucket_bytes} bytes must be positive")
    return max(1, math.ceil(grad_bytes / bucket_bytes))


def last_bucket_bytes(grad_bytes: float, bucket_bytes: int) -> float:
    """Bytes in the bucket filled last (the first layers' gradients): what the remainder leaves."""
    full = (bucket_count(grad_bytes, bucket_bytes) - 1) * bucket_bytes
    return grad_bytes - full


def backward_flop(params: int, tokens: int) -> int:
    """Backward FLOP of ``tokens`` tokens: 4 × N × tokens (input grad 2N + weight grad 2N).

    Source: Kaplan et al. 2020 §2.1; seed 000 (4 × 25,624,600,064 × 4,096).
    """
    check_params(params)
    if tokens < 1:
        raise InputError(f"tokens={tokens} must be a positive integer")
    return BACKWARD_FLOP_PER_PARAM_TOKEN * params * tokens


class GradientSync(Struct, frozen=True):
    """One optimizer step's gradient all-reduce on one rank of a DP group, against its backward.

    Bytes per rank (ring convention); times in seconds; the exposed time assumes buckets are
    sent back-to-back from the start of the backward pass (seed 000 §数据并行).
    """

    grad_bytes: int
    ring_send_bytes_per_rank: float
    naive_recv_bytes_rank0: float
    bandwidth_bytes_per_s: float
    nodes: int
    steps: LatencySteps  # one bucket's all-reduce (NCCL ring model)
    all_steps: LatencySteps  # every bucket's
    comm_time_s: float
    bucket_bytes: int
    buckets_count: int
    last_bucket_bytes: float
    last_bucket_time_s: float
    backward_flop: int
    achieved_flop_per_s: float
    backward_time_s: float
    comm_over_backward_ratio: float
    exposed_comm_time_s: float
    hides_behind_backward: bool


def gradient_sync(
    *,
    params: int,
    flop_params: int,
    tokens: int,
    n: int,
    hw: HardwareSpec,
    link: Link,
    grad_dtype: Dtype,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    with_latency: bool = False,
    nodes: int | None = None,
    backward_time_s: float | None = None,
) -> GradientSync:
    """Gradient bytes, ring vs naive bytes, link time, buckets, and the overlap check.

    ``params`` counts the parameters whose gradients are synchronized (all of them);
    ``flop_params`` those that enter 4·N·tokens of the backward (seed 000: matmul parameters);
    ``tokens`` the tokens each rank computes per step. At least the last bucket's all-reduce
    is always exposed (seed 000 §数据并行). ``nodes`` = nodes the group spans
    (``links.nodes_spanned``; default ``links.link_nodes``): each bucket's all-reduce pays NCCL's
    ring latency, α_inter only on its node-crossing steps. ``backward_time_s``, when given (the
    per-operation roofline's), replaces 4·N·tokens at the card's achieved FLOP/s, and the
    achieved rate becomes the one it implies.
    """
    check_group(n)
    G = gradient_bytes(params, grad_dtype)
    ring = ring_all_reduce_bytes(G, n)  # 2(n-1)/n · G
    nodes = link_nodes(link, n) if nodes is None else nodes
    steps = ring_steps(Collective.all_reduce, n, nodes)  # one bucket's all-reduce
    buckets = bucket_count(G, bucket_bytes)
    all_steps = steps.times(buckets)
    comm_s = steps_time_s(ring, all_steps, hw, link, with_latency=with_latency)
    last = last_bucket_bytes(G, bucket_bytes)
    last_s = steps_time_s(
        ring_all_reduce_bytes(last, n), steps, hw, link, with_latency=with_latency
    )
    flop = backward_flop(flop_params, tokens)  # 4 · N · tokens
    if backward_time_s is None:
        achieved = hw.achieved_flop_per_s.value
        bwd_s = flop / achieved
    else:
        bwd_s = backward_time_s
        achieved = flop / bwd_s
    return GradientSync(
        grad_bytes=G,
        ring_send_bytes_per_rank=ring,
        naive_recv_bytes_rank0=naive_gather_bytes(G, n),
        bandwidth_bytes_per_s=bandwidth_bytes_per_s(hw, link),
        nodes=nodes,
        steps=steps,
        all_steps=all_steps,
        comm_time_s=comm_s,
        bucket_bytes=bucket_bytes,
        buckets_count=buckets,
        last_bucket_bytes=last,
        last_bucket_time_s=last_s,
        backward_flop=flop,
        achieved_flop_per_s=achieved,
        backward_time_s=bwd_s,
        comm_over_backward_ratio=comm_s / bwd_s,
        exposed_comm_time_s=max(last_s, comm_s - bwd_s) if n > 1 else 0.0,
        hides_behind_backward=comm_s <= bwd_s,
    )
