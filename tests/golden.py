"""The one table of golden figures the tests check: every figure the two seed documents print.

Each entry is id -> (seed, printed text), copied from ../shared/figures/seed-figures.yaml (the
project must not read ../shared at test time); the id is the figure's key in that file, which
names its section, meaning and inputs. ``expected(id)`` reads a numeric entry as a value in
base units with the printed precision as its tolerance ("18.8 GB" is 18.8e9 bytes ± 0.05e9), so
a test asserts ``expected("q-tp-step").matches(value)`` instead of repeating 18.8 and 0.05.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Printed unit -> base units (GB = 1e9 bytes, as both documents use; seed-figures.yaml header).
SCALE = {"GB": 1e9, "MB": 1e6, "MiB": 2**20, "TFLOP": 1e12, "s": 1.0, "ms": 1e-3, "%": 1e-2,
         "": 1.0}  # fmt: skip

# id -> (seed, printed text)
PRINTED = {
    "q-grad-bf16": ("000", "55.6 GB"),
    "q-dp-ring-8": ("000", "97.2 GB"),
    "q-dp-ring-64": ("000", "109.4 GB"),
    "q-dp-naive-8": ("000", "388.9 GB"),
    "q-dp-naive-64": ("000", "3,500 GB"),
    "q-states-1": ("000", "444.5 GB"),
    "q-states-ratio": ("000", "5.6"),
    "q-zero1-8": ("000", "152.8 GB"),
    "q-zero2-8": ("000", "104.2 GB"),
    "q-zero3-8": ("000", "55.6 GB"),
    "q-zero3-comm": ("000", "145.9 GB"),
    "q-zero3-vs-dp": ("000", "1.5"),
    "q-free-for-act": ("000", "24.4 GB"),
    "q-act-selective": ("000", "45.6 GB"),
    "q-act-selective-tp8-sp": ("000", "5.7 GB"),
    "q-dp-time-ib": ("000", "1.94 s"),
    "q-bwd-time": ("000", "1.05 s"),
    "q-ddp-bucket": ("000", "25 MiB"),
    "q-tp-msg": ("000", "4,096 x 5,120 x 2 bytes"),
    "q-tp-ar-card": ("000", "73.4 MB"),
    "q-tp-step": ("000", "18.8 GB"),
    "q-tp-flop-rank": ("000", "79 TFLOP"),
    "q-tp-nvlink": ("000", "117 ms"),
    "q-tp-ib": ("000", "376 ms"),
    "q-nvlink-vs-ib": ("000", "3.2"),
    "q-ffn-per-card": ("000", "2176"),
    "q-toy-ffn-per-card": ("000", "8"),
    "q-heads-per-card": ("000", "3"),
    "q-kv-replication-8": ("000", "2"),
    "q-kv-replication-4": ("000", "1"),
    "q-allgather-vs-ar": ("000", "3.4"),
    "q-pp-layers-per-stage": ("000", "8"),
    "q-pp-p2p": ("000", "0.0 GB"),
    "q-pp-bubble": ("000", "21.9%"),
    "q-pp-bubble-share": ("000", "17.9%"),
    "q-pp-interleaved": ("000", "5.5%"),
    "q-zb-h1": ("000", "1/3"),
    "q-cp-block": ("000", "0.1 GB"),
    "q-cp-steps": ("000", "7"),
    "q-cp-layer": ("000", "0.5 GB"),
    "q-cp-causal-load": ("000", "10 : 26 : 42 : 58"),
    "q-ep-experts-per-card": ("000", "4"),
    "q-ep-routed-params": ("000", "654B"),
    "q-ep-max-nodes": ("000", "4"),
    "q-ds-one-card-years": ("000", "304"),
    "q-llama405-4d": ("000", "8 x 1 x 16 x 128"),
    "q-ds-parallel": ("000", "PP 16 x EP 64 x ZeRO-1 DP"),
    "l-act-msg": ("003", "134.2 MB"),
    "l-ar-card": ("003", "234.9 MB"),
    "l-ar-layer": ("003", "939.5 MB"),
    "l-ar-step": ("003", "75.2 GB"),
    "l-ar-formula": ("003", "8 (t-1)/t s b h elements"),
    "l-nvlink-time": ("003", "0.17 s"),
    "l-nvlink-share": ("003", "15%"),
    "l-ib-time": ("003", "1.50 s"),
    "l-ib-share": ("003", "139%"),
    "l-bw-ratio": ("003", "9"),
    "l-compute": ("003", "1.08 s"),
    "l-heads-per-card": ("003", "8 query heads, 1 KV head"),
    "l-wq-shard": ("003", "[8192, 1024]"),
    "l-wk-shard": ("003", "[8192, 128]"),
    "l-attn-out": ("003", "[s, 1024] x [1024, 8192]"),
    "l-gate-up-shard": ("003", "[8192, 3584]"),
    "l-down-shard": ("003", "[3584, 8192]"),
    "l-kv-max-t": ("003", "8"),
    "l-vocab-shard": ("003", "[16032, 8192]"),
    "l-logits-bf16": ("003", "2.10 GB"),
    "l-logits-fp32": ("003", "4.20 GB"),
    "l-layer-params": ("003", "8.56 亿 / 8 = 1.07 亿"),
    "l-unsplit-act-layer": ("003", "0.67 GB"),
    "l-unsplit-act-model": ("003", "53.7 GB"),
    "l-unsplit-act-sp": ("003", "0.084 GB"),
    "l-states": ("003", "1,128.9 GB"),
    "l-states-tp8": ("003", "141 GB"),
    "l-sp-layer-time": ("003", "7.7 ms -> 7.2 ms"),
    "h-forward": ("003", "[7, -2]"),
    "h-card-partials": ("003", "[4, 1] + [3, -3]"),
    "h-row-first-wrong": ("003", "[2, 1, 1, 4] vs [2, 1, 0, 3]"),
    "h-backward": ("003", "dX = [5, -1]"),
}


@dataclass(frozen=True)
class Expected:
    """A printed figure as a number: ``value`` and ``tolerance`` in base units."""

    fid: str
    printed: str
    value: float
    tolerance: float

    @property
    def source(self) -> str:
        return f"seed {PRINTED[self.fid][0]} figure {self.fid} (seed-figures.yaml)"

    def matches(self, computed: float) -> bool:
        """True when ``computed`` rounds to the printed figure (± half its last digit)."""
        return abs(computed - self.value) <= self.tolerance * (1 + 1e-9)


_NUMBER = re.compile(r"^(-?[\d,]*\.?\d+) ?(GB|MB|MiB|TFLOP|ms|s|%)?$")


def expected(fid: str) -> Expected:
    """The numeric figure ``fid``: "1.50 s" -> 1.5 s ± 0.005 s; "139%" -> 1.39 ± 0.005."""
    printed = PRINTED[fid][1]
    match = _NUMBER.match(printed)
    if match is None:
        raise ValueError(f"{fid}: {printed!r} is not a single number with a unit")
    digits, unit = match.group(1).replace(",", ""), match.group(2) or ""
    decimals = len(digits.partition(".")[2])
    scale = SCALE[unit]
    return Expected(fid, printed, float(digits) * scale, 0.5 * 10**-decimals * scale)
