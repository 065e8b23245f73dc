"""Tensor-parallel communication: bytes per collective, per layer, per step, and link time.

Megatron TP (Shoeybi et al. 2019 §3) puts a conjugate pair f/g around each attention and MLP
block: g all-reduces in the forward pass, f in the backward pass, so a layer has 2 forward + 2
backward all-reduces of one activation [s, b, h] (seed 003 §7.3.3, seed 000's f/g box). Sequence
parallelism (Korthikanti et al. 2022 §4.2.2) replaces each all-reduce with a reduce-scatter +
all-gather pair moving the same bytes. Full recomputation re-runs the forward, repeating its 2
collectives per layer (Korthikanti et al. 2022 §5).
"""

from __future__ import annotations

from tpcalc.calc.links.breakdown import link_time_terms
from tpcalc.calc.links.collectives import Collective, ring_factor
from tpcalc.calc.links.link import Link, link_for_group, link_nodes, ring_steps
from tpcalc.calc.params.counts import ParamConvention
from tpcalc.calc.tp.flops import flops_terms
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Row, Scalar, Term, Unit, term
from tpcalc.units import Dtype

FWD_COLLECTIVES_PER_LAYER = 2  # g after attention and after the MLP (Shoeybi et al. 2019 §3)
BWD_COLLECTIVES_PER_LAYER = 2  # f before attention and before the MLP
SRC_FG = "Shoeybi et al. 2019 §3 (f and g); seed 003 §7.3.3; seed 000 f/g box"
SRC_RING = "Patarasuk & Yuan 2009 (ring); seed 003 §7.3.5: 2(t-1)/t per all-reduce"
SRC_SP = "Korthikanti et al. 2022 §4.2.2: all-reduce = reduce-scatter + all-gather"


def message_bytes(spec: ModelSpec, *, seq: int, micro_batch: int, dtype: Dtype) -> int:
    """M = s·b·h·bytes(dtype): one activation [s, b, h] (seed 003 §7.3.5; seed 000 q-tp-msg)."""
    return seq * micro_batch * spec.hidden_size * dtype.bytes


def collectives_per_layer(recompute_full: bool) -> tuple[int, int, int]:
    """(forward, backward, recomputed forward) all-reduce-equivalents per layer per micro-batch."""
    return (
        FWD_COLLECTIVES_PER_LAYER,
        BWD_COLLECTIVES_PER_LAYER,
        FWD_COLLECTIVES_PER_LAYER if recompute_full else 0,
    )


def tp_comm_row(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    t: int,
    seq: int,
    micro_batch: int = 1,
    dtype: Dtype = Dtype.bf16,
    sp: bool = False,
    recompute_full: bool = False,
    params: ParamConvention = ParamConvention.matmul,
    with_latency: bool = True,
) -> Row:
    """TP communication of one micro-batch forward + backward on one rank, and its link times.

    Per layer 4 all-reduces of M (8(t-1)/t·s·b·h elements sent per rank: seed 003 §7.3.5,
    Narayanan et al. 2021 §3.2); with SP, 4 all-gathers + 4 reduce-scatters of the same bytes.
    """
    m = message_bytes(spec, seq=seq, micro_batch=micro_batch, dtype=dtype)
    layers = spec.num_hidden_layers
    fwd, bwd, rec = collectives_per_layer(recompute_full)
    n_ar = fwd + bwd + rec
    ar_bytes = ring_factor(Collective.all_reduce, t) * m
    half_bytes = ring_factor(Collective.all_gather, t) * m
    step_bytes = n_ar * ar_bytes * layers
    terms: list[Term] = [
        term(
            "message_bytes",
            "message M",
            m,
            Unit.bytes,
            formula="s·b·h·bytes(dtype)",
            source="seed 003 §7.3.5; seed 000 (4,096 × 5,120 × 2 bytes)",
            s=seq,
            b=micro_batch,
            h=spec.hidden_size,
            dtype_bytes=dtype.bytes,
        ),
        term(
            "collectives",
            "collectives per layer",
            _collective_text(fwd, bwd, rec, sp),
            Unit.text,
            formula="f and g around attention and MLP",
            source=SRC_FG,
        ),
    ]
    if sp:
        terms += [
            term(
                "send_bytes_per_allgather",
                "sent per all-gather",
                half_bytes,
                Unit.bytes,
                formula="(t-1)/t · M",
                source=SRC_SP,
                t=t,
                M=m,
            ),
            term(
                "send_bytes_per_reduce_scatter",
                "sent per reduce-scatter",
                half_bytes,
                Unit.bytes,
                formula="(t-1)/t · M",
                source=SRC_SP,
                t=t,
                M=m,
            ),
        ]
    else:
        terms.append(
            term(
                "send_bytes_per_allreduce",
                "sent per all-reduce",
                ar_bytes,
                Unit.bytes,
                formula="2(t-1)/t · M",
                source=SRC_RING,
                t=t,
                M=m,
            )
        )
    terms += [
        term(
            "send_bytes_per_layer",
            "sent per layer",
            n_ar * ar_bytes,
            Unit.bytes,
            formula=f"{n_ar} · 2(t-1)/t · M",
            source="seed 003 §7.3.5: 8(t-1)/t·s·b·h elements",
            t=t,
            M=m,
        ),
        term(
            "forward_send_bytes_per_step",
            "step: forward",
            fwd * ar_bytes * layers,
            Unit.bytes,
            formula="2 · 2(t-1)/t · M · L",
            source=SRC_FG,
            part_of="send_bytes_per_step",
            t=t,
            M=m,
            L=layers,
        ),
        term(
            "backward_send_bytes_per_step",
            "step: backward",
            bwd * ar_bytes * layers,
            Unit.bytes,
            formula="2 · 2(t-1)/t · M · L",
            source=SRC_FG,
            part_of="send_bytes_per_step",
            t=t,
            M=m,
            L=layers,
        ),
        term(
            "recompute_send_bytes_per_step",
            "step: recompute",
            rec * ar_bytes * layers,
            Unit.bytes,
            formula="2 · 2(t-1)/t · M · L if --recompute full else 0",
            source="Korthikanti et al. 2022 §5 (full recompute repeats the forward)",
            part_of="send_bytes_per_step",
            t=t,
            M=m,
            L=layers,
        ),
        term(
            "send_bytes_per_step",
            "sent per step",
            step_bytes,
            Unit.bytes,
            formula="collectives/layer · 2(t-1)/t · M · L",
            source=SRC_RING,
            n=n_ar,
            t=t,
            M=m,
            L=layers,
        ),
        term(
            "message_bytes_per_step",
            "messages per step",
            n_ar * m * layers if t > 1 else 0,
            Unit.bytes,
            formula="collectives/layer · M · L (message-size convention)",
            source="seed 000 (the 3.4x all-gather vs all-reduce claim compares messages)",
            n=n_ar,
            M=m,
            L=layers,
        ),
    ]
    # Each link column prices the TP group as if it sat on that link: inside one node, or one
    # rank per node (every ring step then crosses the network, seed 003 table 7-7's "跨节点").
    for name, label, link in (
        ("nvlink", "NVLink", Link.intra_node),
        ("ib", "inter-node", Link.inter_node),
    ):
        steps = ring_steps(Collective.all_reduce, t, link_nodes(link, t), n_ar * layers)
        terms += link_time_terms(name, label, link, step_bytes, steps, hw, with_latency)
    compute = next(
        x
        for x in flops_terms(spec, hw, t=t, seq=seq, micro_batch=micro_batch, params=params)
        if x.key == "compute_time_s"
    )
    link = link_for_group(t, 1, hw.gpus_per_node.value)
    nv_time = next(x.value for x in terms if x.key == "nvlink_time_s")
    ib_time = next(x.value for x in terms if x.key == "ib_time_s")
    terms += [
        compute,
        term(
            "nvlink_share",
            "NVLink/compute",
            nv_time / compute.value,
            Unit.ratio,
            formula="NVLink time / compute time",
            source="seed 003 table 7-7 (15%)",
        ),
        term(
            "ib_share",
            "inter-node/compute",
            ib_time / compute.value,
            Unit.ratio,
            formula="inter-node time / compute time",
            source="seed 003 table 7-7 (139%)",
        ),
        term(
            "tp_link",
            "TP group link",
            link.value,
            Unit.text,
            formula="nvlink if t divides GPUs per node else ib",
            source="seed 000: TP stays in a node",
            t=t,
            gpus_per_node=hw.gpus_per_node.value,
        ),
    ]
    inputs: dict[str, Scalar] = {
        "model": spec.name,
        "hardware": hw.name,
        "t": t,
        "seq": seq,
        "micro_batch": micro_batch,
        "dtype": dtype.value,
        "sp": sp,
        "recompute_full": recompute_full,
        "params_convention": params.value,
        "latency": with_latency,
    }
    return Row(inputs=inputs, terms=tuple(terms))


def _collective_text(fwd: int, bwd: int, rec: int, sp: bool) -> str:
    def kinds(n: int) -> str:
        return f"{n} AG + {n} RS" if sp else f"{n} AR"

    text = f"fwd {kinds(fwd)}, bwd {kinds(bwd)}"
    return text + (f", recompute {kinds(rec)}" if rec else "")
