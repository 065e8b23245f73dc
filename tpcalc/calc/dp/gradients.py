"""Data parallelism: gradient bytes, ring all-reduce vs a naive gather, buckets, overlap.

Every rank holds the whole model and computes on its own 1/N of the batch; after the backward
pass the N gradient copies are summed (seed 000, summary table "数据并行"). The figures here are
per rank per optimizer step.
"""

from __future__ import annotations

import math

from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import (
    LATENCY_FORMULA,
    Link,
    bandwidth_bytes_per_s,
    latency_inputs,
    latency_source,
    link_nodes,
    ring_steps,
    steps_time_s,
)
from tpcalc.calc.params.states import check_params
from tpcalc.calc.tp.flops import FLOP_PER_PARAM_TOKEN_BWD, FLOP_PER_PARAM_TOKEN_FWD
from tpcalc.errors import InputError
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Term, Unit, term
from tpcalc.units import Dtype, MiB

# PyTorch DistributedDataParallel(bucket_cap_mb=25): gradients are all-reduced in 25 MiB buckets
# as the backward pass fills them (Li et al. 2020, "PyTorch Distributed", §3.2.3; seed 000).
DDP_BUCKET_MIB = 25
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

RING_SOURCE = "Patarasuk & Yuan 2009 (ring all-reduce 2(N-1)/N); seed 000 summary table"
NAIVE_SOURCE = "seed 000 §数据并行: gather every gradient to card 0, (N-1) copies arrive there"
BWD_SOURCE = "Kaplan et al. 2020 §2.1 (backward = 2 × forward = 4·N per token); seed 000 summary"


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


def dp_terms(
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
) -> tuple[Term, ...]:
    """Gradient bytes, ring vs naive bytes, link time, buckets, and the overlap check.

    ``params`` counts the parameters whose gradients are synchronized (all of them);
    ``flop_params`` those that enter 4·N·tokens of the backward (seed 000: matmul parameters);
    ``tokens`` the tokens each rank computes per step. The exposed time assumes buckets are
    sent back-to-back from the start of the backward pass, so what cannot hide behind it stays
    exposed, and at least the last bucket's all-reduce always does (seed 000 §数据并行).
    ``nodes`` = nodes the group spans (``links.nodes_spanned``; default ``links.link_nodes``):
    each bucket's all-reduce pays NCCL's ring latency, α_inter only on its node-crossing steps.
    """
    check_group(n)
    g = gradient_bytes(params, grad_dtype)
    ring = ring_all_reduce_bytes(g, n)
    bw = bandwidth_bytes_per_s(hw, link)
    nodes = link_nodes(link, n) if nodes is None else nodes
    steps = ring_steps(Collective.all_reduce, n, nodes)  # one bucket's all-reduce
    buckets = bucket_count(g, bucket_bytes)
    all_steps = steps.times(buckets)
    comm_s = steps_time_s(ring, all_steps, hw, link, with_latency=with_latency)
    last = last_bucket_bytes(g, bucket_bytes)
    last_s = steps_time_s(
        ring_all_reduce_bytes(last, n), steps, hw, link, with_latency=with_latency
    )
    flop = backward_flop(flop_params, tokens)
    achieved = hw.achieved_flop_per_s.value
    bwd_s = flop / achieved
    exposed_s = max(last_s, comm_s - bwd_s) if n > 1 else 0.0
    link_src = f"{hw.name} {link.value} bandwidth: alpha-beta model (seed 003 table 7-7)"
    return (
        term(
            "grad_bytes",
            "gradients",
            g,
            Unit.bytes,
            formula="N × grad_dtype_bytes",
            source="seed 000 summary (BF16 gradients)",
            N=params,
            grad_dtype_bytes=grad_dtype.bytes,
        ),
        term(
            "ring_send_bytes_per_rank",
            "ring all-reduce, sent per rank",
            ring,
            Unit.bytes,
            formula="2(n-1)/n × G",
            source=RING_SOURCE,
            n=n,
            G=g,
        ),
        term(
            "naive_recv_bytes_rank0",
            "naive gather, arriving at rank 0",
            naive_gather_bytes(g, n),
            Unit.bytes,
            formula="(n-1) × G",
            source=NAIVE_SOURCE,
            n=n,
            G=g,
        ),
        term(
            "comm_time_s",
            f"all-reduce time on {link.value}",
            comm_s,
            Unit.seconds,
            formula=f"ring_bytes / bandwidth + {LATENCY_FORMULA}",
            source=f"{link_src}; {latency_source(hw, with_latency)}",
            ring_bytes=ring,
            bandwidth=bw,
            buckets=buckets,
            nodes=nodes,
            **latency_inputs(hw, all_steps, with_latency),
        ),
        term(
            "bucket_bytes",
            "DDP bucket",
            bucket_bytes,
            Unit.bytes,
            formula="bucket_cap_mb × MiB",
            source="PyTorch DDP default bucket_cap_mb=25",
        ),
        term(
            "buckets_count",
            "buckets",
            buckets,
            Unit.count,
            formula="ceil(G / bucket)",
            source="PyTorch DDP (Li et al. 2020 §3.2.3)",
            G=g,
            bucket=bucket_bytes,
        ),
        term(
            "last_bucket_time_s",
            "last bucket's all-reduce",
            last_s,
            Unit.seconds,
            formula=f"2(n-1)/n × last_bucket / bandwidth + {LATENCY_FORMULA}",
            source=f"{link_src}; {latency_source(hw, with_latency)}",
            n=n,
            last_bucket=last,
            bandwidth=bw,
            **latency_inputs(hw, steps, with_latency),
        ),
        term(
            "backward_flop",
            "backward compute per rank",
            flop,
            Unit.flop,
            formula="4 × N × tokens",
            source=BWD_SOURCE,
            N=flop_params,
            tokens=tokens,
        ),
        term(
            "backward_time_s",
            "backward time",
            bwd_s,
            Unit.seconds,
            formula="backward_flop / achieved",
            source=BWD_SOURCE,
            backward_flop=flop,
            achieved=achieved,
        ),
        term(
            "comm_over_backward_ratio",
            "comm / backward",
            comm_s / bwd_s,
            Unit.ratio,
            formula="comm_time / backward_time",
            source="seed 000 §数据并行 (1.94 s vs 1.05 s)",
            comm_time=comm_s,
            backward_time=bwd_s,
        ),
        term(
            "exposed_comm_time_s",
            "exposed after backward",
            exposed_s,
            Unit.seconds,
            formula="max(last_bucket_time, comm_time - backward_time)",
            source="seed 000 §数据并行 (buckets overlap the backward; the last one cannot)",
            last_bucket_time=last_s,
            comm_time=comm_s,
            backward_time=bwd_s,
        ),
        term(
            "hides_behind_backward",
            "comm hides behind backward",
            comm_s <= bwd_s,
            Unit.text,
            formula="comm_time <= backward_time",
            source="seed 000 §数据并行",
            comm_time=comm_s,
            backward_time=bwd_s,
        ),
    )
