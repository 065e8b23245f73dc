"""Norms: what LayerNorm / RMSNorm keep for backward, fused (TE) or unfused (PyTorch primitives).

Fused (TE ``LayerNormLinear`` / apex ``FusedLayerNorm``, Korthikanti et al. 2022 §4.1 counts the
2sbh input): the 16-bit input, plus fp32 per-row statistics the paper leaves out (mean and
1/sigma for LayerNorm, 1/rms for RMSNorm). The normalised output is kept by the next linear layer
(``norm_output``), with SP as the local s/t shard that Megatron all-gathers again in backward
(Korthikanti §4.2.2).

Unfused (Hugging Face ``LlamaRMSNorm``: ``x.float()``, ``pow(2).mean``, ``rsqrt``, ``x * r``,
``.to(bf16)``, ``weight * x``): autograd keeps the fp32 copy (for ``pow`` and ``mul``), the fp32
1/rms, and the normalised 16-bit tensor (for the weight multiply); the 16-bit input itself is not
kept. LayerNorm written the same way keeps the centred fp32 copy instead.
"""

from __future__ import annotations

from tpcalc.calc.activations.exact.records import Layout, SavedDtype, Split, TensorRecord, rec


def norm_records(
    name: str,
    part: str,
    shape: tuple[int, ...],
    splits: tuple[Split, ...],
    act: SavedDtype,
    *,
    layernorm: bool,
    fused: bool,
    paper: bool = False,
) -> list[TensorRecord]:
    """Tensors one norm over the last dim of ``shape`` keeps; statistics have ``shape[:-1]``."""
    rows = shape[:-1]
    fp32 = SavedDtype.fp32
    if fused:
        out = [rec(f"{name}.input", part, shape, act, splits, paper=paper, note="norm input")]
        if layernorm:
            out.append(rec(f"{name}.mean", part, rows, fp32, splits, note="fp32 row mean"))
        out.append(rec(f"{name}.rstd", part, rows, fp32, splits, note="fp32 1/sigma per row"))
        return out
    copy = "centred input" if layernorm else "input"
    return [
        rec(f"{name}.x_fp32", part, shape, fp32, splits, note=f"fp32 {copy} (pow, mul)"),
        rec(f"{name}.rstd", part, rows, fp32, splits, note="fp32 1/sigma (rsqrt output)"),
        rec(f"{name}.normalized", part, shape, act, splits, note="kept by weight multiply"),
    ]


def layer_norm_records(
    name: str, part: str, lay: Layout, width: int, *, layernorm: bool, fused: bool,
    paper: bool = True,
) -> list[TensorRecord]:  # fmt: skip
    """A norm over ``width`` on the SP region's tokens: a layer's pre-attention / pre-MLP norm
    (Table 2 counts its input), or with ``paper=False`` one outside the layers."""
    shape = (lay.norm_tokens, lay.b, width)
    return norm_records(
        name, part, shape, lay.norm_split, lay.act, layernorm=layernorm, fused=fused, paper=paper
    )


def norm_output(
    name: str, part: str, lay: Layout, width: int, *, paper: bool = True
) -> TensorRecord:
    """The norm output kept by the linear layer(s) that read it (QKV, fc1, router, the output
    layer, ...; ``paper=False`` for a linear outside the layers, which Table 2 does not count).

    With SP, Megatron keeps the local [s/t, b, h] shard and all-gathers it again in backward
    (Korthikanti et al. 2022 §4.2.2); without SP every TP rank keeps the whole [s, b, h].
    """
    shape = (lay.norm_tokens, lay.b, width)
    return rec(name, part, shape, lay.act, lay.norm_split, paper=paper, note="input of the linear")


def dropout_mask(name: str, part: str, lay: Layout, width: int) -> TensorRecord:
    """The 1-byte mask of the dropout before a residual add (Korthikanti §4.1: sbh each)."""
    shape = (lay.norm_tokens, lay.b, width)
    return rec(name, part, shape, SavedDtype.bool, lay.norm_split, paper=True, note="dropout mask")
