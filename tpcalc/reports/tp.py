"""Tensor-parallel reports: comm, flops, check (and memory, in tpcalc.reports.memory)."""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.tp.comm import tp_comm
from tpcalc.calc.tp.comm_explain import tp_comm_terms
from tpcalc.choices import (
    DEFAULT_VOCAB_PAD_MULTIPLE,
    AttentionFlops,
    ParamConvention,
    Recompute,
    TimeModel,
)
from tpcalc.explain import terms
from tpcalc.reports.inputs import parse_tp_list, tp_sweep, tp_warnings
from tpcalc.reports.request import Workload
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term
from tpcalc.units import Dtype

COMPUTE_TIME_KEY = "compute_time_s"
# seed 000: "现代配置里 TP 通常不超过 8"; seed 003 §7.3.5: TP stays inside one 8-GPU node.
DEFAULT_MAX_T = 8


SRC_ROOFLINE_COMPUTE = (
    "tpcalc.calc.time.step.micro_batch_compute: every op of the model on one TP rank timed by "
    "the roofline on the card's measured kernel rates (the model tpcalc validate checks)"
)


def compute_term(
    spec: ModelSpec,
    hw: HardwareSpec,
    *,
    t: int,
    seq: int,
    micro_batch: int,
    params: ParamConvention,
    time_model: TimeModel = TimeModel.roofline,
    sp: bool = True,
    recompute_full: bool = False,
) -> Term:
    """The per-rank compute time of one micro-batch, as ``tpcalc flops`` prints it: the
    per-operation roofline (default; issue 13 §5: one compute model in comm, flops, dp and
    layout) or the seeds' 6·N·tokens at the card's achieved FLOP/s (``TimeModel.fixed``).
    """
    if time_model is TimeModel.fixed:
        from tpcalc.calc.tp import flops_explain
        from tpcalc.calc.tp.flops import tp_flops

        f = tp_flops(spec, hw, t=t, seq=seq, micro_batch=micro_batch, params=params)
        ex = {COMPUTE_TIME_KEY: flops_explain.result_explanations(f, hw)[COMPUTE_TIME_KEY]}
        (fixed,) = terms(f, ex, symbols=flops_explain.symbols(f, spec))
        return fixed
    from tpcalc.calc.time.step import micro_batch_compute  # the step model, only when asked

    recompute = Recompute.full if recompute_full else Recompute.none
    mb = micro_batch_compute(
        spec, hw, tp=t, seq=seq, micro_batch=micro_batch, sp=sp and t > 1, recompute=recompute
    )
    return term(
        COMPUTE_TIME_KEY, "compute time", mb.total_s, Unit.seconds,
        formula="Σ forward + backward op times of one micro-batch, roofline",
        source=SRC_ROOFLINE_COMPUTE,
        forward_s=mb.forward_s, backward_s=mb.backward_s, t=t,
    )  # fmt: skip


def tp_comm_row(
    workload: Workload,
    t: int,
    *,
    params: ParamConvention = ParamConvention.matmul,
    with_latency: bool = True,
    time_model: TimeModel = TimeModel.roofline,
) -> Row:
    """One row of ``tpcalc comm``: ``tp_comm`` for one t, with its explanations and inputs.
    Full recompute (``workload.recompute``) replays the forward's all-reduces."""
    spec, hw, seq, micro_batch = workload.spec, workload.hw, workload.seq, workload.micro_batch
    dtype, sp = workload.dtype, workload.sp
    recompute_full = workload.recompute is Recompute.full
    compute = compute_term(
        spec, hw, t=t, seq=seq, micro_batch=micro_batch, params=params, time_model=time_model,
        sp=sp, recompute_full=recompute_full,
    )  # fmt: skip
    c = tp_comm(
        spec, hw, t=t, seq=seq, micro_batch=micro_batch, dtype=dtype,
        recompute_full=recompute_full, with_latency=with_latency,
        compute_time_s=float(compute.value),  # type: ignore[arg-type]
    )  # fmt: skip
    inputs: dict[str, Scalar] = {
        "model": spec.name, "hardware": hw.name, "t": t, "seq": seq,
        "micro_batch": micro_batch, "dtype": dtype.value, "sp": sp,
        "recompute_full": recompute_full, "params_convention": params.value,
        "latency": with_latency, "time_model": time_model.value,
    }  # fmt: skip
    row_terms = tp_comm_terms(
        c, sp=sp, seq=seq, micro_batch=micro_batch, hidden_size=spec.hidden_size,
        dtype_bytes=dtype.bytes, hw=hw, with_latency=with_latency, compute=compute,
    )  # fmt: skip
    return Row(inputs=inputs, terms=row_terms)


def comm_report(
    workload: Workload,
    tp: str | int | list[int] | None = None,
    *,
    params: ParamConvention = ParamConvention.matmul,
    with_latency: bool = True,
    time_model: TimeModel = TimeModel.roofline,
) -> Report:
    """One row per t: TP bytes per collective / layer / step and link times (tpcalc comm)."""
    tps = tp_sweep(workload, tp)
    warnings = tp_warnings(workload, tps)
    rows = tuple(
        tp_comm_row(workload, t, params=params, with_latency=with_latency, time_model=time_model)
        for t in tps
    )
    return Report(
        title=f"TP communication per rank, one micro-batch fwd+bwd: {workload.spec.name}",
        rows=rows,
        warnings=tuple(warnings),
    )


def flops_report(
    workload: Workload,
    tp: str | int | list[int] | None = None,
    *,
    params: ParamConvention = ParamConvention.matmul,
    attention: bool = False,
    attention_flops: AttentionFlops = AttentionFlops.full,
    mtp: bool | None = None,
    time_model: TimeModel = TimeModel.roofline,
) -> Report:
    """One row per t: per-rank FLOPs of one micro-batch and compute time (tpcalc flops); the
    time by the per-operation roofline, or at the achieved FLOP/s with ``TimeModel.fixed``.
    It prices the workload's model, card, seq and micro-batch (with SP, no recompute)."""
    from tpcalc.calc.tp import flops_explain
    from tpcalc.calc.tp.flops import tp_flops

    spec, hw, seq, micro_batch = workload.spec, workload.hw, workload.seq, workload.micro_batch
    tps = tp_sweep(workload, tp)
    warnings = tp_warnings(workload, tps)
    rows = []
    for t in tps:
        f = tp_flops(
            spec, hw, t=t, seq=seq, micro_batch=micro_batch,
            params=params, attention=attention, mask=attention_flops, mtp=mtp,
        )  # fmt: skip
        row_terms = flops_explain.tp_flops_terms(f, spec, hw)
        if time_model is TimeModel.roofline:
            timed = compute_term(
                spec, hw, t=t, seq=seq, micro_batch=micro_batch, params=params
            )  # fmt: skip
            row_terms = tuple(timed if x.key == COMPUTE_TIME_KEY else x for x in row_terms)
        rows.append(
            Row(
                inputs={
                    "model": spec.name,
                    "hardware": hw.name,
                    "t": t,
                    "seq": seq,
                    "micro_batch": micro_batch,
                    "params_convention": params.value,
                    "attention_term": attention,
                    "attention_flops": attention_flops.value,
                    "active_params": spec.is_moe,
                    "mtp": f.mtp,
                    "time_model": time_model.value,
                },
                terms=row_terms,
            )
        )
    return Report(
        title=f"FLOPs per rank, one micro-batch fwd+bwd: {spec.name}",
        rows=tuple(rows),
        warnings=tuple(warnings),
    )


def check_report(
    workload: Workload,
    tp: str | int | list[int] | None = None,
    *,
    vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE,
    shards: bool = False,
) -> Report:
    """``tpcalc check``: one ``check_tp`` row per t, or with ``shards`` the per-card shard table
    of every t. ``tp`` None means every valid t up to DEFAULT_MAX_T. KV replication warnings
    and the valid t list travel with the report; a bad t raises DivisibilityError. Only the
    workload's model is read (no card, no sequence)."""
    from tpcalc.calc.tp.rules import (
        all_valid_tp_sizes,
        max_t_without_replication,
        uses_kv_heads,
        valid_tp_sizes,
    )

    spec = workload.spec
    tps = valid_tp_sizes(spec, DEFAULT_MAX_T) if tp is None else parse_tp_list(tp, DEFAULT_MAX_T)
    checks = [check_tp(spec, t, vocab_pad_multiple=vocab_pad_multiple) for t in tps]
    valid = ", ".join(str(t) for t in all_valid_tp_sizes(spec))
    notes = [f"valid t for {spec.name}: {valid}"]
    if uses_kv_heads(spec):
        notes.append(f"largest t without KV replication: {max_t_without_replication(spec)}")
    notes += [
        f"{p.name} ({p.params} params) is declared, not sharded: excluded from params per rank"
        for p in spec.tpcalc.declared_parts
    ]
    if shards:
        rows = tuple(
            r for t in tps for r in shard_shapes(spec, t, vocab_pad_multiple=vocab_pad_multiple)
        )
        title = (
            f"Per-card shard shapes (rows = in, cols = out) under tensor parallelism: {spec.name}"
        )
    else:
        rows = tuple(c.row for c in checks)
        title = f"Tensor-parallel divisibility, KV replication and vocab padding: {spec.name}"
    warnings = tuple(w for c in checks for w in c.warnings)
    return Report(title=title, rows=rows, warnings=warnings, notes=tuple(notes))


class TpCheck(Struct, frozen=True, kw_only=True):
    """``check_tp``'s answer for one t: the summary row and warnings (KV replication)."""

    row: Row
    warnings: tuple[str, ...] = ()


def check_tp(
    spec: ModelSpec,
    t: int,
    *,
    vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE,
    dtype: Dtype = Dtype.bf16,
) -> TpCheck:
    """One row of ``tpcalc check``: ``tp_shards`` for one t with its explanations, and the KV
    replication warning (raises like ``tp_shards`` for a bad t)."""
    from tpcalc.calc.tp.shards import tp_shards
    from tpcalc.calc.tp.shards_explain import shards_terms

    s = tp_shards(spec, t, vocab_pad_multiple=vocab_pad_multiple, dtype=dtype)
    inputs = row_inputs(spec, t, vocab_pad_multiple, dtype=dtype.value)
    return TpCheck(row=Row(inputs=inputs, terms=shards_terms(s)), warnings=s.warnings)


def row_inputs(spec: ModelSpec, t: int, pad: int, **more: Scalar) -> dict[str, Scalar]:
    """The inputs every shard-table row echoes: model, t, vocab pad multiple, and more."""
    return {"model": spec.name, "t": t, "vocab_pad_multiple": pad, **more}


def shard_shapes(
    spec: ModelSpec, t: int, *, vocab_pad_multiple: int = DEFAULT_VOCAB_PAD_MULTIPLE
) -> tuple[Row, ...]:
    """Seed 003 §7.3.4's per-card shard table: one row per weight, shapes as [in, out] ints.

    Llama 3 70B at t=8 (pad multiple 1): W_Q [8192, 1024], W_K/W_V [8192, 128], W_O [1024, 8192],
    gate/up [8192, 3584], down [3584, 8192], embedding [16032, 8192]. The rows'
    ``params_per_rank`` add up to ``per_rank_params``. Raises like ``check_tp`` for a bad t.
    """
    from tpcalc.calc.tp.table_explain import BLOCK_LABELS, weight_terms
    from tpcalc.calc.tp.weights import model_weights

    rows = []
    for w in model_weights(spec, t, vocab_pad_multiple):
        inputs = row_inputs(
            spec, t, vocab_pad_multiple, block=BLOCK_LABELS.get(w.block, w.block),
            weight=w.weight, module=w.module, split=w.split.value,
        )  # fmt: skip
        rows.append(Row(inputs=inputs, terms=weight_terms(w, t, spec.kv_heads)))
    return tuple(rows)
