"""Label, formula and source of every ``GradientSync`` field (the explain layer beside
``gradients.py``), and the conversion to the ``Term`` rows ``tpcalc dp`` prints."""

from __future__ import annotations

from tpcalc.calc.dp.gradients import DDP_BUCKET_BYTES, GradientSync, gradient_sync
from tpcalc.calc.links.link import LATENCY_FORMULA, Link, latency_inputs, latency_source
from tpcalc.explain import ACHIEVED_FLOP_PER_S, Explanation, terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Term, Unit
from tpcalc.units import Dtype

RING_SOURCE = "Patarasuk & Yuan 2009 (ring all-reduce 2(N-1)/N); seed 000 summary table"
NAIVE_SOURCE = "seed 000 §数据并行: gather every gradient to card 0, (N-1) copies arrive there"
BWD_SOURCE = "Kaplan et al. 2020 §2.1 (backward = 2 × forward = 4·N per token); seed 000 summary"
SRC_OVERLAP = "seed 000 §数据并行 (buckets overlap the backward; the last one cannot)"
SRC_BUCKETS = "PyTorch DDP (Li et al. 2020 §3.2.3)"

# The rows ``tpcalc dp`` prints, in order (the other fields are the substituted inputs).
ROW = (
    "grad_bytes",
    "ring_send_bytes_per_rank",
    "naive_recv_bytes_rank0",
    "comm_time_s",
    "bucket_bytes",
    "buckets_count",
    "last_bucket_time_s",
    "backward_flop",
    "backward_time_s",
    "comm_over_backward_ratio",
    "exposed_comm_time_s",
    "hides_behind_backward",
)


def explanations(link: Link, link_src: str) -> dict[str, Explanation]:
    """The explain table of ``GradientSync``; ``link_src`` names the card, the link and the α."""
    return {
        "grad_bytes": Explanation(
            "gradients", Unit.bytes, "N × grad_dtype_bytes", "seed 000 summary (BF16 gradients)"
        ),
        "ring_send_bytes_per_rank": Explanation(
            "ring all-reduce, sent per rank", Unit.bytes, "2(n-1)/n × G", RING_SOURCE
        ),
        "naive_recv_bytes_rank0": Explanation(
            "naive gather, arriving at rank 0", Unit.bytes, "(n-1) × G", NAIVE_SOURCE
        ),
        "bandwidth_bytes_per_s": Explanation(
            "link bandwidth", Unit.bytes_per_s, "hardware config", link_src
        ),
        "nodes": Explanation(
            "nodes the group spans", Unit.count, "nodes_spanned(n, stride, GPUs per node)",
            "tpcalc.calc.links.link.nodes_spanned (Megatron rank order)",
        ),
        "comm_time_s": Explanation(
            f"all-reduce time on {link.value}", Unit.seconds,
            f"ring_bytes / bandwidth + {LATENCY_FORMULA}", link_src,
        ),
        "bucket_bytes": Explanation(
            "DDP bucket", Unit.bytes, "bucket_cap_mb × MiB", "PyTorch DDP default bucket_cap_mb=25"
        ),
        "buckets_count": Explanation("buckets", Unit.count, "ceil(G / bucket)", SRC_BUCKETS),
        "last_bucket_bytes": Explanation(
            "last bucket", Unit.bytes, "G − (buckets − 1) × bucket", SRC_BUCKETS
        ),
        "last_bucket_time_s": Explanation(
            "last bucket's all-reduce", Unit.seconds,
            f"2(n-1)/n × last_bucket / bandwidth + {LATENCY_FORMULA}", link_src,
        ),
        "backward_flop": Explanation(
            "backward compute per rank", Unit.flop, "4 × N × tokens", BWD_SOURCE
        ),
        "achieved_flop_per_s": ACHIEVED_FLOP_PER_S,
        "backward_time_s": Explanation(
            "backward time", Unit.seconds, "backward_flop / achieved", BWD_SOURCE
        ),
        "comm_over_backward_ratio": Explanation(
            "comm / backward", Unit.ratio, "comm_time / backward_time",
            "seed 000 §数据并行 (1.94 s vs 1.05 s)",
        ),
        "exposed_comm_time_s": Explanation(
            "exposed after backward", Unit.seconds,
            "max(last_bucket_time, comm_time - backward_time)", SRC_OVERLAP,
        ),
        "hides_behind_backward": Explanation(
            "comm hides behind backward", Unit.text, "comm_time <= backward_time",
            "seed 000 §数据并行",
        ),
    }  # fmt: skip


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
    backward_time_s: float | None = None,
) -> tuple[Term, ...]:
    """The rows of ``tpcalc dp`` for one group size: ``gradient_sync`` with its explanations
    (``backward_time_s``: the roofline's backward, see ``gradient_sync``)."""
    r: GradientSync = gradient_sync(
        params=params, flop_params=flop_params, tokens=tokens, n=n, hw=hw, link=link,
        grad_dtype=grad_dtype, bucket_bytes=bucket_bytes, with_latency=with_latency, nodes=nodes,
        backward_time_s=backward_time_s,
    )  # fmt: skip
    link_src = f"{hw.name} {link.value} bandwidth: alpha-beta model (seed 003 table 7-7)"
    link_src = f"{link_src}; {latency_source(hw, with_latency)}"
    G, ring, bw = r.grad_bytes, r.ring_send_bytes_per_rank, r.bandwidth_bytes_per_s
    comm, bwd = {"comm_time": r.comm_time_s}, {"backward_time": r.backward_time_s}
    symbols: dict[str, dict[str, Scalar]] = {
        "grad_bytes": {"N": params, "grad_dtype_bytes": grad_dtype.bytes},
        "ring_send_bytes_per_rank": {"n": n, "G": G},
        "naive_recv_bytes_rank0": {"n": n, "G": G},
        "comm_time_s": {
            "ring_bytes": ring, "bandwidth": bw, "buckets": r.buckets_count, "nodes": r.nodes,
            **latency_inputs(hw, r.all_steps, with_latency),
        },
        "buckets_count": {"G": G, "bucket": r.bucket_bytes},
        "last_bucket_time_s": {
            "n": n, "last_bucket": r.last_bucket_bytes, "bandwidth": bw,
            **latency_inputs(hw, r.steps, with_latency),
        },
        "backward_flop": {"N": flop_params, "tokens": tokens},
        "backward_time_s": {"backward_flop": r.backward_flop, "achieved": r.achieved_flop_per_s},
        "comm_over_backward_ratio": {**comm, **bwd},
        "exposed_comm_time_s": {"last_bucket_time": r.last_bucket_time_s, **comm, **bwd},
        "hides_behind_backward": {**comm, **bwd},
    }  # fmt: skip
    table = explanations(link, link_src)
    if backward_time_s is not None:  # timed by the roofline: the rate is the one it implies
        table = {
            **table,
            "achieved_flop_per_s": Explanation(
                "achieved (implied)", Unit.flop_per_s, "backward FLOP / roofline backward time",
                "tpcalc.calc.time.step.micro_batch_compute (per-operation roofline)",
            ),
            "backward_time_s": Explanation(
                "backward time", Unit.seconds,
                "m · Σ backward op times of one micro-batch (per-operation roofline)",
                "tpcalc.calc.time.step.micro_batch_compute",
            ),
        }  # fmt: skip
    return terms(r, {k: table[k] for k in ROW}, symbols=symbols)
