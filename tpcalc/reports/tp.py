"""Tensor-parallel reports: comm, flops (and memory, in tpcalc.reports.memory)."""

from __future__ import annotations

from tpcalc.calc.params.counts import ParamConvention
from tpcalc.calc.tp.comm import tp_comm_row
from tpcalc.calc.tp.flops import AttentionFlops, flops_terms
from tpcalc.reports.inputs import Inputs, resolve
from tpcalc.terms import Report, Row
from tpcalc.units import Dtype


def tp_warnings(inputs: Inputs) -> list[str]:
    """Impossible splits raise (t must divide the query heads, ...); KV replication only warns."""
    from tpcalc.calc.tp.rules import kv_warning, require_tp

    warnings = list(inputs.warnings)  # the defaulted sequence length, if any
    for t in inputs.tps:
        require_tp(inputs.spec, t)
        message = kv_warning(inputs.spec, t)
        if message:
            warnings.append(message)
    return warnings


def comm_report(
    model: str,
    hardware: str,
    *,
    tp: str | int | list[int] | None = None,
    seq: int | None = None,
    micro_batch: int = 1,
    sp: bool = False,
    recompute_full: bool = False,
    dtype: Dtype = Dtype.bf16,
    params: ParamConvention = ParamConvention.matmul,
    with_latency: bool = True,
) -> Report:
    """One row per t: TP bytes per collective / layer / step and link times (tpcalc comm)."""
    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    warnings = tp_warnings(inputs)
    rows = tuple(
        tp_comm_row(
            inputs.spec,
            inputs.hw,
            t=t,
            seq=inputs.seq,
            micro_batch=inputs.micro_batch,
            dtype=dtype,
            sp=sp,
            recompute_full=recompute_full,
            params=params,
            with_latency=with_latency,
        )
        for t in inputs.tps
    )
    return Report(
        title=f"TP communication per rank, one micro-batch fwd+bwd: {inputs.spec.name}",
        rows=rows,
        warnings=tuple(warnings),
    )


def flops_report(
    model: str,
    hardware: str,
    *,
    tp: str | int | list[int] | None = None,
    seq: int | None = None,
    micro_batch: int = 1,
    params: ParamConvention = ParamConvention.matmul,
    attention: bool = False,
    attention_flops: AttentionFlops = AttentionFlops.full,
    mtp: bool | None = None,
) -> Report:
    """One row per t: per-rank FLOPs of one micro-batch and compute time (tpcalc flops)."""
    inputs = resolve(model, hardware, seq=seq, micro_batch=micro_batch, tp=tp)
    warnings = tp_warnings(inputs)
    rows = []
    for t in inputs.tps:
        terms = flops_terms(
            inputs.spec,
            inputs.hw,
            t=t,
            seq=inputs.seq,
            micro_batch=inputs.micro_batch,
            params=params,
            attention=attention,
            mask=attention_flops,
            mtp=mtp,
        )
        rows.append(
            Row(
                inputs={
                    "model": inputs.spec.name,
                    "hardware": inputs.hw.name,
                    "t": t,
                    "seq": inputs.seq,
                    "micro_batch": inputs.micro_batch,
                    "params_convention": params.value,
                    "attention_term": attention,
                    "attention_flops": attention_flops.value,
                    "active_params": inputs.spec.is_moe,
                    "mtp": (params is ParamConvention.all) if mtp is None else mtp,
                },
                terms=terms,
            )
        )
    return Report(
        title=f"FLOPs per rank, one micro-batch fwd+bwd: {inputs.spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
    )
