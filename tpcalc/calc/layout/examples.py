"""The two training layouts seed 000 cites, as data: what the sources state, and nothing more.

Each example pins the layout and the workload its sources publish; the MFU a source measured is
carried as a ``Cited`` figure that the layout report shows beside its own estimate.
"""

from __future__ import annotations

from msgspec import Struct

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import ParallelLayout
from tpcalc.calc.layout.summary import Cited


class LayoutExample(Struct, frozen=True):
    """A published layout: model and hardware names, the sizes, the workload, a cited MFU."""

    name: str
    model: str
    hardware: str
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    zero: ZeroStage
    seq: int
    microbatches: int
    source: str
    cited: Cited | None = None

    def layout(self, gpus_per_node: int) -> ParallelLayout:
        return ParallelLayout(
            tp=self.tp, cp=self.cp, pp=self.pp, dp=self.dp, ep=self.ep, zero=self.zero,
            gpus_per_node=gpus_per_node,
        )  # fmt: skip

    def matches(self, model: str, layout: ParallelLayout, hardware: str | None = None) -> bool:
        """Same model and sizes and, when ``hardware`` is given, the same card: a cited MFU
        was measured on that card only (Llama 3's 41% on H100)."""
        dims = (layout.tp, layout.cp, layout.pp, layout.dp, layout.ep)
        same_dims = dims == (self.tp, self.cp, self.pp, self.dp, self.ep)
        same_card = hardware is None or hardware == self.hardware
        return model == self.model and same_card and same_dims


LLAMA3_405B = LayoutExample(
    name="llama3-405b-16k",
    model="llama3-405b",
    hardware="h100-sxm",
    tp=8, cp=1, pp=16, dp=128, ep=1,
    zero=ZeroStage.optimizer,
    seq=8192,
    microbatches=16,
    source=(
        "seed 000 summary: Llama 3 405B [TP, CP, PP, DP] = 8 × 1 × 16 × 128 on 16,384 H100, "
        "BF16 MFU 41%; Llama 3 paper (arXiv 2407.21783) Table 4: seq 8,192, batch/DP 16"
    ),
    cited=Cited(
        mfu=0.41,
        source="seed 000 summary; Llama 3 paper Table 4 (measured BF16 MFU, 16,384 H100)",
    ),
)  # fmt: skip

DEEPSEEK_V3 = LayoutExample(
    name="deepseek-v3-2048",
    model="deepseek-v3",
    hardware="h800",
    tp=1, cp=1, pp=16, dp=128, ep=64,
    zero=ZeroStage.optimizer,
    seq=4096,
    microbatches=32,
    source=(
        "seed 000 summary: DeepSeek-V3 PP 16 × EP 64 × ZeRO-1 DP, no TP; DeepSeek-V3 report "
        "§3.2: 2,048 H800, seq 4K; micro-batches per step are not published (32 assumed)"
    ),
)  # fmt: skip

EXAMPLES = {e.name: e for e in (LLAMA3_405B, DEEPSEEK_V3)}


def matching_example(
    model: str, layout: ParallelLayout, hardware: str | None = None
) -> LayoutExample | None:
    """The published example with this model, these sizes and (when given) this hardware, if
    any (for its cited MFU)."""
    return next((e for e in EXAMPLES.values() if e.matches(model, layout, hardware)), None)
