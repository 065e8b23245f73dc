"""Context- and expert-parallel reports: the Python twins of ``tpcalc cp`` and ``tpcalc ep``.

Each takes the request (``tpcalc.reports.request``), then calls ``tpcalc.calc.cp.ring.cp_ring`` /
``ep_row`` once per cp / ep value and echoes the resolved inputs
(hardware, node size, ...) in every row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec.structs import replace

from tpcalc.choices import DEFAULT_EP, EpRouting, LinkChoice, MoeDispatcher
from tpcalc.errors import InputError
from tpcalc.reports.request import Layout, Workload
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Report, Row, Scalar
from tpcalc.units import Dtype

if TYPE_CHECKING:
    from tpcalc.calc.cp.ring import CpRing
    from tpcalc.calc.ep.all_to_all import EpComm
    from tpcalc.calc.links.link import Link

DEFAULT_CP = "2,4,8"
# The causal-balance count lists the work of every chunk, so the chunk count is bounded to keep
# every answer under a second (issue 13 §2). Zig-zag uses 2·cp chunks; seed 000 uses 16 on 4
# cards; no CP group of today's clusters needs more than a few thousand.
MAX_CAUSAL_CHUNKS = 65_536


def cp_row(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    seq: int,
    cp: int,
    micro_batch: int = 1,
    tp: int = 1,
    dtype: Dtype = Dtype.bf16,
    grad_dtype: Dtype | None = None,
    link: Link | None = None,
    chunks: int | None = None,
    with_latency: bool = False,
    nodes: int | None = None,
) -> Row:
    """One row of ``tpcalc cp``: ``cp_ring`` with its explanations (``ring_row``); the link
    defaults to NVLink."""
    from tpcalc.calc.cp.ring import cp_ring
    from tpcalc.calc.links.link import Link

    link = link or Link.intra_node
    r = cp_ring(
        spec, hw, seq=seq, cp=cp, micro_batch=micro_batch, tp=tp, dtype=dtype,
        grad_dtype=grad_dtype, link=link, with_latency=with_latency, nodes=nodes,
    )  # fmt: skip
    return ring_row(
        r, spec, hw, seq=seq, cp=cp, micro_batch=micro_batch, tp=tp, dtype=dtype,
        grad_dtype=grad_dtype, link=link, chunks=chunks, with_latency=with_latency,
    )  # fmt: skip


def ring_row(
    r: CpRing,
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    seq: int,
    cp: int,
    micro_batch: int,
    tp: int,
    dtype: Dtype,
    grad_dtype: Dtype | None,
    link: Link,
    chunks: int | None,
    with_latency: bool,
) -> Row:
    """The row of ``r`` (computed with these inputs): the ring, Ulysses' limit, and the causal
    balance over ``chunks`` (default 2·cp) chunks, with the inputs echoed."""
    from tpcalc.calc.cp.ring_explain import row_terms

    grad_dtype = grad_dtype or dtype
    chunks = chunks or 2 * cp
    terms = row_terms(
        r, spec, hw, seq=seq, cp=cp, micro_batch=micro_batch, dtype=dtype, link=link,
        chunks=chunks, with_latency=with_latency,
    )  # fmt: skip
    inputs: dict[str, Scalar] = {
        "model": spec.name, "seq": seq, "cp": cp, "micro_batch": micro_batch, "tp": tp,
        "dtype": dtype.value, "grad_dtype": grad_dtype.value, "link": link.value,
        "chunks": chunks, "latency": with_latency,
    }  # fmt: skip
    return Row(inputs=inputs, terms=terms)


def cp_report(
    workload: Workload,
    layout: Layout = Layout(),
    cp: str | int | list[int] | None = None,
    *,
    grad_dtype: Dtype | None = None,
    chunks: int | None = None,
    link: LinkChoice = LinkChoice.auto,
    with_latency: bool = True,
) -> Report:
    """One row per cp (the ``cp`` sweep; ``layout`` gives tp and the node size): ring K/V bytes
    per layer and micro-batch, link time vs attention compute, causal work contiguous vs
    zig-zag, and whether Ulysses could split the heads instead."""
    from tpcalc.calc.cp.linear import gdn_cp_problem
    from tpcalc.calc.cp.ring import cp_ring
    from tpcalc.reports.inputs import int_list, pick_link, pick_nodes, positive, tp_warnings

    spec, hw, dtype = workload.spec, workload.hw, workload.dtype
    tp = positive(layout.tp, "--tp")
    warnings = tp_warnings(workload, [tp])  # raises for a t the model cannot split
    g = workload.node(layout)
    chunks = positive(chunks, "--chunks") if chunks is not None else None
    rows = []
    for c in int_list(cp, "--cp", [int(v) for v in DEFAULT_CP.split(",")]):
        balance_chunks = chunks if chunks is not None else 2 * c  # cp_row's default: 2·cp
        if balance_chunks > MAX_CAUSAL_CHUNKS:  # the balance count lists every chunk
            given = f"--chunks={chunks}" if chunks is not None else f"--cp={c} (2·cp chunks)"
            raise InputError(
                f"{given} is too many causal-balance chunks: use at most {MAX_CAUSAL_CHUNKS:,} "
                "(zig-zag uses 2·cp)"
            )
        lk = pick_link(link, c, tp, g)
        ring = cp_ring(
            spec, hw, seq=workload.seq, cp=c, micro_batch=workload.micro_batch, tp=tp,
            dtype=dtype, grad_dtype=grad_dtype, link=lk, with_latency=with_latency,
            nodes=pick_nodes(link, c, tp, g),
        )  # fmt: skip
        row = ring_row(
            ring, spec, hw, seq=workload.seq, cp=c, micro_batch=workload.micro_batch,
            tp=tp, dtype=dtype, grad_dtype=grad_dtype, link=lk, chunks=chunks,
            with_latency=with_latency,
        )  # fmt: skip
        echo = {**row.inputs, "hardware": hw.name, "gpus_per_node": g}
        rows.append(replace(row, inputs=echo))
        if ring.kv_over_compute_ratio > 1:
            warnings.append(
                f"cp={c}: a K,V block takes longer to send than its attention takes to compute; "
                "the ring cannot hide it (use longer sequences per rank or a faster link)"
            )
        if (why := gdn_cp_problem(spec, tp, c)) is not None:
            warnings.append(f"cp={c}: {why}; Megatron-Core cannot run it")
    notes = [
        f"ring layers = full-attention layers only ({spec.full_attention_layers} of "
        f"{spec.num_hidden_layers}); causal work counts block pairs"
    ]
    if spec.linear_attention_layers:
        notes.append(
            f"the {spec.linear_attention_layers} Gated DeltaNet layers pass no ring: under CP "
            "each sends two all-to-alls per pass, to the heads and back (Megatron-Core; "
            "tpcalc layout and plan count them)"
        )
    return Report(
        title=f"Context parallelism (ring attention) per rank, one micro-batch: {spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def ep_report(
    workload: Workload,
    layout: Layout = Layout(),
    ep: str | int | list[int] | None = None,
    *,
    routing: EpRouting | None = None,
    combine_dtype: Dtype | None = None,
    with_latency: bool = True,
) -> Report:
    """One row per ep (the ``ep`` sweep; ``layout`` gives tp, cp, etp and the node size):
    experts and expert memory per rank, the four all-to-alls of an MoE layer with their IB and
    NVLink shares, and all-to-all time against expert compute. The dispatch dtype, the state
    recipe, the dispatcher and the capacity factor are the workload's."""
    from tpcalc.calc.ep.all_to_all import ep_comm
    from tpcalc.errors import divide
    from tpcalc.reports.inputs import int_list, positive, tp_warnings

    tp, cp, etp = positive(layout.tp, "--tp"), layout.cp, layout.etp
    warnings = tp_warnings(workload, [tp])  # raises for a t the model cannot split
    g = workload.node(layout)
    shard = positive(cp, "--cp") * tp
    seq, micro_batch, dtype = workload.seq, workload.micro_batch, workload.dtype
    tokens = divide(seq * micro_batch, shard, what="seq·micro_batch", by="cp·tp")
    techniques = workload.memory
    rows = []
    for e in int_list(ep, "--ep", [int(v) for v in DEFAULT_EP.split(",")]):
        comm = ep_comm(
            workload.spec, workload.hw, ep=e, tokens=tokens, stride=positive(etp, "--etp"),
            gpus_per_node=g, routing=routing, dispatch_dtype=dtype,
            combine_dtype=combine_dtype or dtype, recipe=workload.recipe,
            with_latency=with_latency, etp=etp,
            dispatcher=MoeDispatcher(techniques.moe_dispatcher),
            capacity_factor=techniques.capacity_factor,
        )  # fmt: skip
        row = ep_row(workload.spec, workload.hw, comm)
        echo = {"model": row.inputs["model"], "hardware": workload.hw.name, "seq": seq,
                "micro_batch": micro_batch, "tp": tp, "cp": cp, **row.inputs}  # fmt: skip
        rows.append(replace(row, inputs=echo))
    return Report(
        title=f"Expert parallelism per rank, one micro-batch fwd+bwd: {workload.spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
        notes=(
            "tokens = s·b/(cp·tp) per rank; experts uniform; an all-to-all's IB and NVLink "
            "parts run at once (time = the slower); expert states before ZeRO",
        ),
    )


def ep_row(spec: ModelSpec, hw: HardwareSpec, r: EpComm) -> Row:
    """One row of ``tpcalc ep``: an ``ep_comm`` result with its explanations, and the inputs it
    was priced with (node size and routing as resolved)."""
    from tpcalc.calc.ep.all_to_all_explain import ep_terms

    inputs: dict[str, Scalar] = {
        "model": spec.name,
        "ep": r.ep,
        "tokens": r.tokens,
        "stride": r.stride,
        "gpus_per_node": r.gpus_per_node,
        "routing": r.routing.value,
        "dispatch_dtype": r.dispatch_dtype.value,
        "combine_dtype": r.combine_dtype.value,
        "recipe": r.memory.recipe.value,
        "latency": r.with_latency,
        "etp": r.etp,
        "dispatcher": r.dispatcher.value,
        "capacity_factor": "none" if r.capacity_factor is None else r.capacity_factor,
    }
    return Row(inputs=inputs, terms=ep_terms(r, spec, hw))
