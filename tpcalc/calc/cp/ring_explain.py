"""Label, formula and source of every ``CpRing`` field (the explain layer beside ``ring.py``),
and of ``CausalBalance``; and the row ``tpcalc cp`` prints: the ring, Ulysses' limit, then the
causal balance."""

from __future__ import annotations

from tpcalc.calc.cp.causal import ZIGZAG, CausalBalance, causal_balance
from tpcalc.calc.cp.ring import RING_BWD, CpRing
from tpcalc.calc.cp.shapes import FLASH, RING, ULYSSES
from tpcalc.calc.links.link import LATENCY_FORMULA, Link, latency_inputs, latency_source
from tpcalc.explain import ACHIEVED_FLOP_PER_S, Explanation, terms
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Scalar, Term, Unit
from tpcalc.units import Dtype

PER_LAYER = "send_bytes_per_layer"
PER_MICRO_BATCH = "send_bytes_per_micro_batch"
SRC_OVERLAP = "Liu et al. 2023 §3.1: overlap needs compute >= transfer per block"

# The ring's rows in ``tpcalc cp``, in order (the other fields are substituted inputs).
ROW = (
    "tokens_per_rank",
    "kv_block_bytes",
    "ring_steps",
    "full_attention_layers",
    "fwd_kv_bytes_per_layer",
    "bwd_kv_bytes_per_layer",
    "bwd_dkv_bytes_per_layer",
    "ring_sends_per_layer_count",
    "send_bytes_per_layer",
    "fwd_send_bytes_per_micro_batch",
    "bwd_send_bytes_per_micro_batch",
    "send_bytes_per_micro_batch",
    "comm_time_s",
    "kv_step_time_s",
    "block_pair_flop",
    "attn_step_time_s",
    "kv_over_compute_ratio",
    "ulysses_max_cp",
    "ulysses_fits",
)


# The rows of ``CpRing`` whose sources do not depend on the link's latency model.
RING_EXPLANATIONS: dict[str, Explanation] = {
    "tokens_per_rank": Explanation("tokens per rank", Unit.count, "s / cp", RING),
    "n_kv": Explanation("KV heads per rank", Unit.count, "n_kv / tp (at least 1)", RING),
    "d_k": Explanation("key head dim", Unit.count, "model config", RING),
    "d_v": Explanation("value head dim", Unit.count, "model config", RING),
    "q_heads": Explanation("query heads per rank", Unit.count, "n_q / tp", FLASH),
    "kv_block_bytes": Explanation(
        "K,V block per ring step", Unit.bytes, "(s/cp)·b·n_kv·(d_k+d_v)·dtype", RING
    ),
    "grad_block_bytes": Explanation(
        "dK,dV block", Unit.bytes, "block·grad_dtype/dtype", RING_BWD
    ),
    "ring_steps": Explanation("ring steps per layer forward", Unit.count, "cp - 1", RING),
    "full_attention_layers": Explanation(
        "layers with a ring", Unit.count, "layers whose layer_type is full attention",
        "model config layer_types",
    ),
    "fwd_kv_bytes_per_layer": Explanation(
        "forward K,V sent per layer", Unit.bytes, "(cp-1)·block", RING, PER_LAYER
    ),
    "bwd_kv_bytes_per_layer": Explanation(
        "backward K,V sent per layer", Unit.bytes, "(cp-1)·block", RING_BWD, PER_LAYER
    ),
    "bwd_dkv_bytes_per_layer": Explanation(
        "backward dK,dV sent per layer", Unit.bytes, "(cp-1)·block·grad_dtype/dtype", RING_BWD,
        PER_LAYER,
    ),
    "ring_sends_per_layer_count": Explanation(
        "ring sends per layer, fwd+bwd", Unit.count, "3(cp-1)", RING_BWD
    ),
    "send_bytes_per_layer": Explanation(
        "sent per layer, fwd+bwd", Unit.bytes, "fwd K,V + bwd K,V + bwd dK,dV", RING_BWD
    ),
    "fwd_send_bytes_per_micro_batch": Explanation(
        "forward sent, all ring layers", Unit.bytes, "L_full·(cp-1)·block", RING,
        PER_MICRO_BATCH,
    ),
    "bwd_send_bytes_per_micro_batch": Explanation(
        "backward sent, all ring layers", Unit.bytes, "L_full·(bwd K,V + bwd dK,dV)",
        RING_BWD, PER_MICRO_BATCH,
    ),
    "send_bytes_per_micro_batch": Explanation(
        "sent per rank per micro-batch", Unit.bytes, "L_full·send_bytes_per_layer", RING_BWD
    ),
    "nodes": Explanation(
        "nodes the ring spans", Unit.count, "nodes_spanned(cp, tp, GPUs per node)",
        "tpcalc.calc.links.link.nodes_spanned (Megatron rank order)",
    ),
    "block_pair_flop": Explanation(
        "attention FLOP per ring step (one block pair, fwd)", Unit.flop,
        "2·c²·b·heads·(d_k+d_v), c = s/cp", FLASH,
    ),
    "achieved_flop_per_s": ACHIEVED_FLOP_PER_S,
    "attn_step_time_s": Explanation(
        "attention compute per ring step", Unit.seconds, "block_pair_flop / achieved FLOP/s",
        FLASH,
    ),
    "kv_over_compute_ratio": Explanation(
        "transfer / compute per step (<= 1 hides)", Unit.ratio,
        "kv_step_time / attn_step_time", SRC_OVERLAP,
    ),
    "ulysses_max_cp": Explanation(
        "largest Ulysses degree (KV heads)", Unit.count, "n_kv", ULYSSES
    ),
    "ulysses_fits": Explanation(
        "cp divides q and KV heads (Ulysses possible)", Unit.text,
        "n_kv % cp == 0 and n_q % cp == 0", ULYSSES,
    ),
}  # fmt: skip


def explanations(latency_src: str) -> dict[str, Explanation]:
    """The explain table of ``CpRing``: ``RING_EXPLANATIONS`` and the link rows, whose
    source names the latency model (``latency_src``: ``links.link.latency_source``)."""
    alpha_beta = f"alpha-beta model; {latency_src}"
    return {
        **RING_EXPLANATIONS,
        "bandwidth_bytes_per_s": Explanation(
            "link bandwidth", Unit.bytes_per_s, "hardware config", alpha_beta
        ),
        "comm_time_s": Explanation(
            "ring time per micro-batch if not hidden", Unit.seconds,
            f"send_bytes / bandwidth + {LATENCY_FORMULA}", alpha_beta,
        ),
        "kv_step_time_s": Explanation(
            "K,V transfer per ring step", Unit.seconds, f"block / bandwidth + {LATENCY_FORMULA}",
            alpha_beta,
        ),
    }  # fmt: skip


CAUSAL_EXPLANATIONS: dict[str, Explanation] = {
    "chunks": Explanation("causal chunks", Unit.count, "2·cp unless --chunks", ZIGZAG),
    "contiguous_work": Explanation(
        "causal work per rank, contiguous (block pairs)", Unit.text,
        "rank r: sum of (i+1) over its chunks i", ZIGZAG,
    ),
    "zigzag_work": Explanation(
        "causal work per rank, zig-zag (block pairs)", Unit.text,
        "each head/tail pair (i, n-1-i) costs n+1", ZIGZAG,
    ),
    "mean_work": Explanation("mean work per rank", Unit.count, "Σ work / cp", ZIGZAG),
    "causal_imbalance_contiguous_ratio": Explanation(
        "slowest rank / mean, contiguous", Unit.ratio, "max(work) / mean(work)", ZIGZAG
    ),
    "causal_imbalance_zigzag_ratio": Explanation(
        "slowest rank / mean, zig-zag", Unit.ratio, "max(work) / mean(work)", ZIGZAG
    ),
}  # fmt: skip


def causal_terms(c: CausalBalance, cp: int) -> tuple[Term, ...]:
    """The causal-balance rows: each split's work per rank as '10 : 26 : 42 : 58' (the vector is
    flattened here, at the output edge), then its max/mean imbalance."""
    out: list[Term] = []
    for split in ("contiguous", "zigzag"):
        work = getattr(c, f"{split}_work")
        ex = CAUSAL_EXPLANATIONS[f"{split}_work"]
        out.append(
            Term(
                key=f"causal_work_{split}", label=ex.label, unit=ex.unit, formula=ex.formula,
                source=ex.source, value=" : ".join(str(w) for w in work),
                inputs={"chunks": c.chunks, "cp": cp},
            )
        )  # fmt: skip
        ratio = f"causal_imbalance_{split}_ratio"
        out += terms(
            c,
            {ratio: CAUSAL_EXPLANATIONS[ratio]},
            symbols={ratio: {"max_work": max(work), "mean_work": c.mean_work}},
        )
    return tuple(out)


def _symbols(
    r: CpRing, spec: ModelSpec, hw: HardwareSpec, *, seq: int, cp: int, micro_batch: int,
    dtype: Dtype, link: Link, with_latency: bool,
) -> dict[str, dict[str, Scalar]]:  # fmt: skip
    block, L = r.kv_block_bytes, r.full_attention_layers
    bw, cp_block = r.bandwidth_bytes_per_s, {"cp": cp, "block_bytes": r.kv_block_bytes}
    return {
        "tokens_per_rank": {"s": seq, "cp": cp},
        "kv_block_bytes": {"s": seq, "cp": cp, "b": micro_batch, "n_kv": r.n_kv, "d_k": r.d_k,
                           "d_v": r.d_v, "dtype_bytes": dtype.bytes},
        "ring_steps": {"cp": cp},
        "full_attention_layers": {"num_hidden_layers": spec.num_hidden_layers},
        "fwd_kv_bytes_per_layer": cp_block,
        "bwd_kv_bytes_per_layer": cp_block,
        "bwd_dkv_bytes_per_layer": {"cp": cp, "grad_block_bytes": r.grad_block_bytes},
        "ring_sends_per_layer_count": {"cp": cp},
        "fwd_send_bytes_per_micro_batch": {"L_full": L,
                                           "fwd_bytes_per_layer": r.fwd_kv_bytes_per_layer},
        "bwd_send_bytes_per_micro_batch": {"L_full": L},
        "send_bytes_per_micro_batch": {"L_full": L},
        "comm_time_s": {"send_bytes": r.send_bytes_per_micro_batch, "bandwidth_bytes_per_s": bw,
                        "link": link.value, "nodes": r.nodes,
                        **latency_inputs(hw, r.ring_latency, with_latency)},
        "kv_step_time_s": {"block_bytes": block, "bandwidth_bytes_per_s": bw, "link": link.value,
                           **latency_inputs(hw, r.hop, with_latency)},
        "block_pair_flop": {"c": r.tokens_per_rank, "b": micro_batch, "heads": r.q_heads,
                            "d_k": r.d_k, "d_v": r.d_v},
        "attn_step_time_s": {"flop": r.block_pair_flop,
                             "achieved_flop_per_s": r.achieved_flop_per_s},
        "ulysses_fits": {"n_kv": r.n_kv, "n_q": spec.num_attention_heads, "cp": cp},
    }  # fmt: skip


def row_terms(
    r: CpRing, spec: ModelSpec, hw: HardwareSpec, *, seq: int, cp: int, micro_batch: int,
    dtype: Dtype, link: Link, chunks: int, with_latency: bool,
) -> tuple[Term, ...]:  # fmt: skip
    """The terms of one ``tpcalc cp`` row: the ring of ``r`` (computed with these inputs),
    Ulysses' limit, and the causal balance over ``chunks`` chunks."""
    ring = ring_terms(
        r, spec, hw, seq=seq, cp=cp, micro_batch=micro_batch, dtype=dtype, link=link,
        with_latency=with_latency, only=ROW,
    )  # fmt: skip
    return (*ring, *causal_terms(causal_balance(chunks, cp), cp))


def ring_terms(
    r: CpRing, spec: ModelSpec, hw: HardwareSpec, *, seq: int, cp: int, micro_batch: int,
    dtype: Dtype, link: Link, with_latency: bool, only: tuple[str, ...],
) -> tuple[Term, ...]:  # fmt: skip
    """The rows ``only`` of ``r`` (computed with these inputs); ``tpcalc layout`` quotes a few
    in its CP row."""
    table = explanations(latency_source(hw, with_latency))
    symbols = _symbols(
        r, spec, hw, seq=seq, cp=cp, micro_batch=micro_batch, dtype=dtype, link=link,
        with_latency=with_latency,
    )  # fmt: skip
    return terms(r, {k: table[k] for k in only}, symbols=symbols)
