"""Label, formula and source of every ``TpFlops`` field (the explain layer beside ``flops.py``),
and the conversion to the ``Term`` rows ``tpcalc flops`` prints."""

from __future__ import annotations

from tpcalc.calc.tp.flops import TpFlops
from tpcalc.choices import AttentionFlops, ParamConvention
from tpcalc.explain import Explanation, terms
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.terms import Scalar, Term, Unit

SRC_6N = "Kaplan et al. 2020 §2.1; Narayanan et al. 2021 §5.1; seed 003 §7.3.5 table 7-7"
SRC_ACTIVE = (
    "DeepSeek-V3 report §1 (37B of 671B activated per token): an MoE token multiplies k of the "
    "E routed experts, so 6·N counts the active parameters (tpcalc.calc.params.counts)"
)
SRC_CAUSAL = (
    "Megatron-LM training.py num_floating_point_operations: causal attention computes half the "
    "s² scores (its s/h term carries a factor 1/2 since core_r0.10)"
)
SRC_DELTANET = (
    "Gated DeltaNet (Yang et al. 2024, arXiv 2412.06464) §3.3 chunkwise form: per chunk of C "
    "tokens, state matmuls 3·2·C·d_k·d_v, intra-chunk 3·2·C²·d_k + 2·2·C²·d_v and the UT "
    "inverse 2·C³/3, per value head; fla chunk size C = 64; backward = 2 × forward"
)
SRC_ATTENTION = "Narayanan et al. 2021 Eq. 3 (s/6h term) without the recompute pass"
TOTAL = "flop_per_rank"

# The flags and inputs of ``TpFlops`` that its rows echo rather than print; explained so
# that every field of the result has its text.
FLAG_EXPLANATIONS: dict[str, Explanation] = {
    "t": Explanation("t", Unit.count, "tensor-parallel size", SRC_6N),
    "seq": Explanation("s", Unit.count, "sequence length", SRC_6N),
    "micro_batch": Explanation("b", Unit.count, "micro-batch size", SRC_6N),
    "moe": Explanation(
        "active parameters", Unit.text, "the model routes tokens to experts", SRC_ACTIVE
    ),
    "mtp": Explanation(
        "MTP counted", Unit.text, "--mtp, default: --params all yes, matmul no",
        "DeepSeek-V3 report §2.2 (MTP modules)",
    ),
    "mtp_counted": Explanation(
        "MTP in N", Unit.text, "mtp and the model has MTP layers",
        "DeepSeek-V3 report §2.2 (MTP modules)",
    ),
    "attention": Explanation(
        "attention-score term", Unit.text, "--attention", SRC_ATTENTION
    ),
}  # fmt: skip


def params_source(params: ParamConvention) -> str:
    """Which seed uses this parameter convention (the source shown for N)."""
    if params is ParamConvention.all:
        return "seed 003 §7.3.5: 6 × 705.5 亿 counts every parameter"
    return "seed 000: matmul parameters (no input embedding, vision tower or MTP)"


def explanations(
    params: ParamConvention, *, moe: bool, mtp: bool, mask: AttentionFlops
) -> dict[str, Explanation]:
    """The explain table of the ``TpFlops`` rows, in display order: N's label names its
    convention (``params``, active for an MoE, ``mtp`` when the module is counted) and the
    attention formula its ``mask``."""
    active = " active" if moe else ""
    causal = mask is AttentionFlops.causal
    return {
        "n_params": Explanation(
            f"N ({params.value}{active}{', + MTP' if mtp else ''})", Unit.params,
            f"parameters counted as '{params.value}'"
            + (", active (k of E routed experts)" if moe else ""),
            params_source(params) + (f"; {SRC_ACTIVE}" if moe else ""),
        ),
        "tokens": Explanation("tokens", Unit.count, "s·b", ""),
        "dense_flop_per_rank": Explanation(
            "6N·tokens/t", Unit.flop, "6·N·s·b/t", SRC_6N, TOTAL
        ),
        "attention_flop_per_rank": Explanation(
            "attention s² /t", Unit.flop,
            "6·b·s²·n_h·(d_qk + d_v)·L_full/t" + (" · 1/2 (causal)" if causal else ""),
            SRC_ATTENTION + (f"; {SRC_CAUSAL}" if causal else ""), TOTAL,
        ),
        "linear_attention_flop_per_rank": Explanation(
            "Gated DeltaNet chunked delta rule /t", Unit.flop,
            "3·H_v·(s/C)·b·2·(3C·d_k·d_v + 3C²·d_k + 2C²·d_v + C³/3)·L_linear/t",
            SRC_DELTANET, TOTAL,
        ),
        "flop_per_rank": Explanation(
            "FLOP per rank", Unit.flop, "sum of the parts above", SRC_6N
        ),
        "forward_flop_per_rank": Explanation(
            "forward", Unit.flop, "2/6 of the total", SRC_6N
        ),
        "backward_flop_per_rank": Explanation(
            "backward", Unit.flop, "4/6 of the total (seed 000: backward = 4·N·tokens)", SRC_6N
        ),
        "achieved_flop_per_s": Explanation(
            "achieved", Unit.flop_per_s, "hardware config", "the card's achieved_flop_per_s"
        ),
        "compute_time_s": Explanation(
            "compute time", Unit.seconds, "FLOP per rank / achieved FLOP/s",
            "seed 003 §7.3.5 table 7-7",
        ),
        "backward_time_s": Explanation(
            "backward time", Unit.seconds, "backward FLOP per rank / achieved FLOP/s",
            "seed 000 (DP vs backward: 1.05 s)",
        ),
    }  # fmt: skip


def result_explanations(f: TpFlops, hw: HardwareSpec) -> dict[str, Explanation]:
    """The rows of ``f`` in display order: the attention parts only when counted, the achieved
    rate sourced from the card."""
    table = explanations(f.params, moe=f.moe, mtp=f.mtp_counted, mask=f.mask)
    table["achieved_flop_per_s"] = Explanation(
        "achieved", Unit.flop_per_s, "hardware config", hw.achieved_flop_per_s.source
    )
    if not f.attention:
        del table["attention_flop_per_rank"]
    if not f.linear_attention_counted:
        del table["linear_attention_flop_per_rank"]
    return table


def symbols(f: TpFlops, spec: ModelSpec) -> dict[str, dict[str, Scalar]]:
    """The numbers substituted into each row's formula (shown by --explain); the Gated
    DeltaNet row's only when it is counted (``result_explanations`` shows it only then)."""
    d_qk = spec.head_dim_resolved
    out: dict[str, dict[str, Scalar]] = {
        "tokens": {"s": f.seq, "b": f.micro_batch},
        "dense_flop_per_rank": {"N": f.n_params, "s": f.seq, "b": f.micro_batch, "t": f.t},
        "attention_flop_per_rank": {
            "b": f.micro_batch, "s": f.seq, "n_h": spec.num_attention_heads, "d_qk": d_qk,
            "d_v": (spec.v_head_dim or d_qk) if spec.is_mla else d_qk,
            "L_full": spec.full_attention_layers, "mask": f.mask.value, "t": f.t,
        },
        "compute_time_s": {"flop": f.flop_per_rank, "achieved": f.achieved_flop_per_s},
    }  # fmt: skip
    if f.linear_attention_counted:
        # Here only: the activation records it pulls in cost every command's start-up.
        from tpcalc.calc.activations.exact.linear_attention import FLA_CHUNK_SIZE

        out["linear_attention_flop_per_rank"] = {
            "H_v": spec.linear_num_value_heads or 0, "d_k": spec.linear_key_head_dim or 0,
            "d_v": spec.linear_value_head_dim or 0, "C": FLA_CHUNK_SIZE,
            "L_linear": spec.linear_attention_layers, "t": f.t,
        }  # fmt: skip
    return out


def tp_flops_terms(f: TpFlops, spec: ModelSpec, hw: HardwareSpec) -> tuple[Term, ...]:
    """The rows of ``tpcalc flops`` for one result, in display order."""
    return terms(f, result_explanations(f, hw), symbols=symbols(f, spec))
