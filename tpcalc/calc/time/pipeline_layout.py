"""Megatron-Core's ``--pipeline-model-parallel-layout`` string, read into the decoder layers of
each virtual pipeline stage (``TimeOptions.chunk_layers``).

Grammar (megatron/core/transformer/pipeline_parallel_layer_layout.py): ``|`` ends a stage, ``t``
is a decoder layer, ``E`` the embedding, ``m`` an MTP module, ``L`` the loss; ``(...)*n`` and
``x*n`` repeat; commas and spaces are cosmetic. "Et*4|(t*4|)*14tmL" is 16 stages of 4, 4 × 14
and 1 decoder layers. tpcalc places the embedding on the first stage and the LM head, loss and
MTP modules on the last (``step.stage_layers``), so a layout that puts them elsewhere cannot
be priced and is refused with the reason.
"""

from __future__ import annotations

import re

from tpcalc.errors import InputError

SYMBOLS = frozenset("EtmL")  # embedding, decoder layer, MTP module, loss
_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_BARE_GROUP = re.compile(r"\([^()]*\)(?!\*\d)")
_REPEAT = re.compile(r"(.)\*(\d+)")
# Longest expanded layout read: far above any real model's layers and stages (DeepSeek-V3's
# 61 layers on 64 stages is ~200 symbols), low enough that "(t*999)*999" cannot exhaust memory.
MAX_EXPANDED = 100_000


def parse_pipeline_layout(text: str, stages: int) -> tuple[int, ...]:
    """Decoder layers of each of the ``stages`` virtual stages (pp · vpp) in ``text``; raises
    ``InputError`` naming what is wrong (module docstring for the grammar)."""
    flat = _expand(text.replace(",", "").replace(" ", ""), text)
    if not flat:
        raise InputError("--pipeline-layout is empty; e.g. 'Et*4|(t*4|)*14tmL' (see --help)")
    unknown = set(flat) - SYMBOLS - {"|"}
    if unknown:
        raise InputError(
            f"--pipeline-layout {text!r}: unknown symbols {''.join(sorted(unknown))}; "
            "valid: E (embedding), t (decoder layer), m (MTP module), L (loss), | (stage end), "
            "x*n and (...)*n repeats"
        )
    chunks = flat.split("|")
    if len(chunks) != stages:
        raise InputError(
            f"--pipeline-layout {text!r}: {len(chunks)} stages; pp · vpp = {stages} are needed"
        )
    if not chunks[0].startswith("E") or flat.count("E") != 1:
        raise InputError(
            f"--pipeline-layout {text!r}: the embedding 'E' must open the first stage, once"
        )
    if "L" not in chunks[-1] or any("m" in c or "L" in c for c in chunks[:-1]):
        raise InputError(
            f"--pipeline-layout {text!r}: tpcalc puts the loss 'L' and MTP modules 'm' on the "
            "last stage; a layout with them elsewhere cannot be priced"
        )
    return tuple(c.count("t") for c in chunks)


def _expand(flat: str, text: str) -> str:
    """``flat`` with every ``(...)*n`` (innermost first) and ``x*n`` written out."""
    budget = [MAX_EXPANDED]

    def repeat(g: re.Match[str]) -> str:
        out = len(g.group(1)) * int(g.group(2))
        budget[0] -= out
        if budget[0] < 0:
            raise InputError(
                f"--pipeline-layout {text!r}: expands to more than {MAX_EXPANDED:,} symbols"
            )
        return g.group(1) * int(g.group(2))

    while "(" in flat:  # innermost groups first
        grown = _GROUP.sub(repeat, flat)
        if grown == flat or _BARE_GROUP.search(flat):
            raise InputError(
                f"--pipeline-layout {text!r}: every group '(...)' needs its ')' and a repeat "
                "count, e.g. (t*4|)*14"
            )
        flat = grown
    return _REPEAT.sub(repeat, flat)


def layers_text(counts: tuple[int, ...]) -> str:
    """Layers per virtual stage with repeats folded: (4, 4, 4, 1) -> "4×3+1"."""
    parts: list[list[int]] = []
    for n in counts:
        if parts and parts[-1][0] == n:
            parts[-1][1] += 1
        else:
            parts.append([n, 1])
    return "+".join(f"{n}×{k}" if k > 1 else str(n) for n, k in parts)


def split_text(counts: tuple[int, ...] | None) -> str:
    """The echo of a stage split: "even", or the layers of each virtual stage set by hand
    (``step.hand_split``) folded by ``layers_text``."""
    return layers_text(counts) if counts else "even"
