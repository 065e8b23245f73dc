"""Label, formula and source of every ``TpComm`` field (the explain layer beside ``comm.py``),
and the conversion to the ``Term`` rows ``tpcalc comm`` prints."""

from __future__ import annotations

from msgspec.structs import replace

from tpcalc.calc.links.breakdown import link_time_explanations, link_time_symbols
from tpcalc.calc.links.link import latency_source
from tpcalc.calc.tp.comm import TpComm
from tpcalc.explain import Explanation, terms
from tpcalc.specs import HardwareSpec
from tpcalc.terms import Scalar, Term, Unit

SRC_FG = "Shoeybi et al. 2019 §3 (f and g); seed 003 §7.3.3; seed 000 f/g box"
SRC_RING = "Patarasuk & Yuan 2009 (ring); seed 003 §7.3.5: 2(t-1)/t per all-reduce"
SRC_SP = "Korthikanti et al. 2022 §4.2.2: all-reduce = reduce-scatter + all-gather"
SRC_RECOMPUTE = "Korthikanti et al. 2022 §5 (full recompute repeats the forward)"
STEP = "send_bytes_per_step"

EXPLANATIONS: dict[str, Explanation] = {
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC_FG),
    "layers": Explanation("layers", Unit.count, "num_hidden_layers (model config)", SRC_FG),
    "message_bytes": Explanation(
        "message M", Unit.bytes, "s·b·h·bytes(dtype)",
        "seed 003 §7.3.5; seed 000 (4,096 × 5,120 × 2 bytes)",
    ),
    "forward_collectives_per_layer": Explanation(
        "forward collectives per layer", Unit.count, "g after attention and after the MLP", SRC_FG
    ),
    "backward_collectives_per_layer": Explanation(
        "backward collectives per layer", Unit.count, "f before attention and before the MLP",
        SRC_FG,
    ),
    "recompute_collectives_per_layer": Explanation(
        "recompute collectives per layer", Unit.count, "the forward's 2 if --recompute full",
        SRC_RECOMPUTE,
    ),
    "collectives_per_layer": Explanation(
        "all-reduce-equivalents per layer", Unit.count, "forward + backward + recompute", SRC_FG
    ),
    "send_bytes_per_allreduce": Explanation(
        "sent per all-reduce", Unit.bytes, "2(t-1)/t · M", SRC_RING
    ),
    "send_bytes_per_allgather": Explanation(
        "sent per all-gather", Unit.bytes, "(t-1)/t · M", SRC_SP
    ),
    "send_bytes_per_reduce_scatter": Explanation(
        "sent per reduce-scatter", Unit.bytes, "(t-1)/t · M", SRC_SP
    ),
    "send_bytes_per_layer": Explanation(
        "sent per layer", Unit.bytes, "n · 2(t-1)/t · M",
        "seed 003 §7.3.5: 8(t-1)/t·s·b·h elements",
    ),
    "forward_send_bytes_per_step": Explanation(
        "step: forward", Unit.bytes, "2 · 2(t-1)/t · M · L", SRC_FG, STEP
    ),
    "backward_send_bytes_per_step": Explanation(
        "step: backward", Unit.bytes, "2 · 2(t-1)/t · M · L", SRC_FG, STEP
    ),
    "recompute_send_bytes_per_step": Explanation(
        "step: recompute", Unit.bytes, "2 · 2(t-1)/t · M · L if --recompute full else 0",
        SRC_RECOMPUTE, STEP,
    ),
    "send_bytes_per_step": Explanation(
        "sent per step", Unit.bytes, "collectives/layer · 2(t-1)/t · M · L", SRC_RING
    ),
    "message_bytes_per_step": Explanation(
        "messages per step", Unit.bytes, "collectives/layer · M · L (message-size convention)",
        "seed 000 (the 3.4x all-gather vs all-reduce claim compares messages)",
    ),
    "compute_time_s": Explanation(
        "compute time", Unit.seconds, "FLOP per rank / achieved FLOP/s",
        "seed 003 §7.3.5 table 7-7",
    ),
    "nvlink_share": Explanation(
        "NVLink/compute", Unit.ratio, "NVLink time / compute time", "seed 003 table 7-7 (15%)"
    ),
    "ib_share": Explanation(
        "inter-node/compute", Unit.ratio, "inter-node time / compute time",
        "seed 003 table 7-7 (139%)",
    ),
    "tp_link": Explanation(
        "TP group link", Unit.text, "nvlink if t divides GPUs per node else ib",
        "seed 000: TP stays in a node",
    ),
}  # fmt: skip

# The text row "collectives per layer" (fwd 2 AR, bwd 2 AR, ...), derived from the counts.
COLLECTIVES = Explanation(
    "collectives per layer", Unit.text, "f and g around attention and MLP", SRC_FG
)
LINKS = (("nvlink", "NVLink"), ("ib", "inter-node"))


def collectives_text(c: TpComm, sp: bool) -> str:
    """'fwd 2 AR, bwd 2 AR' (or AG + RS under SP), with the recompute forward when there is one."""

    def kinds(n: int) -> str:
        return f"{n} AG + {n} RS" if sp else f"{n} AR"

    text = f"fwd {kinds(c.forward_collectives_per_layer)}, "
    text += f"bwd {kinds(c.backward_collectives_per_layer)}"
    rec = c.recompute_collectives_per_layer
    return text + (f", recompute {kinds(rec)}" if rec else "")


def tp_comm_terms(
    c: TpComm,
    *,
    sp: bool,
    seq: int,
    micro_batch: int,
    hidden_size: int,
    dtype_bytes: int,
    hw: HardwareSpec,
    with_latency: bool,
    compute: Term,
) -> tuple[Term, ...]:
    """The rows of ``tpcalc comm`` for one t, in display order; ``compute`` is the flops term
    the shares divide by (its own formula and inputs, from ``tpcalc.calc.tp.flops``)."""
    tM: dict[str, Scalar] = {"t": c.t, "M": c.message_bytes}
    tML: dict[str, Scalar] = {**tM, "L": c.layers}
    per_collective = (
        ("send_bytes_per_allgather", "send_bytes_per_reduce_scatter")
        if sp
        else ("send_bytes_per_allreduce",)
    )
    ex = dict(EXPLANATIONS)
    ex["send_bytes_per_layer"] = replace(
        ex["send_bytes_per_layer"], formula=f"{c.collectives_per_layer} · 2(t-1)/t · M"
    )
    bytes_keys = (
        *per_collective,
        "send_bytes_per_layer",
        "forward_send_bytes_per_step",
        "backward_send_bytes_per_step",
        "recompute_send_bytes_per_step",
        "send_bytes_per_step",
        "message_bytes_per_step",
    )
    n: dict[str, Scalar] = {"n": c.collectives_per_layer}
    symbols: dict[str, dict[str, Scalar]] = {
        "message_bytes": {"s": seq, "b": micro_batch, "h": hidden_size, "dtype_bytes": dtype_bytes},
        "send_bytes_per_allreduce": tM,
        "send_bytes_per_allgather": tM,
        "send_bytes_per_reduce_scatter": tM,
        "send_bytes_per_layer": tM,
        "forward_send_bytes_per_step": tML,
        "backward_send_bytes_per_step": tML,
        "recompute_send_bytes_per_step": tML,
        "send_bytes_per_step": {**n, **tML},
        "message_bytes_per_step": {**n, "M": c.message_bytes, "L": c.layers},
        "tp_link": {"t": c.t, "gpus_per_node": hw.gpus_per_node.value},
    }
    out = [
        *terms(c, {"message_bytes": ex["message_bytes"]}, symbols=symbols),
        Term(
            key="collectives", label=COLLECTIVES.label, value=collectives_text(c, sp),
            unit=COLLECTIVES.unit, formula=COLLECTIVES.formula, source=COLLECTIVES.source,
        ),
        *terms(c, {k: ex[k] for k in bytes_keys}, symbols=symbols),
    ]  # fmt: skip
    lat_src = latency_source(hw, with_latency)
    for name, label in LINKS:
        lt = getattr(c, name)
        out += terms(
            lt,
            link_time_explanations(label, lat_src),
            symbols=link_time_symbols(lt, c.send_bytes_per_step, hw, with_latency),
            key_prefix=f"{name}_",
        )
    out.append(compute)
    out += terms(c, {k: ex[k] for k in ("nvlink_share", "ib_share", "tp_link")}, symbols=symbols)
    return tuple(out)
