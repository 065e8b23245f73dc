"""The request every report takes: what is trained (``Workload``) and how it is split (``Layout``).

Issue 8 §2. The command line builds both once per command from the shared option definitions
(``tpcalc.cli.options``, ``parallel_options``, ``time_options``: one type and one default per
flag) and hands them to a report in ``tpcalc.reports``; Python callers do the same::

    from tpcalc.reports.request import Layout, Workload
    from tpcalc.reports.tp import comm_report

    work = Workload.load("llama3-70b", "h100-sxm", seq=8192)
    comm_report(work, tp="1,8")  # one row per t

Decisions:

- It lives in ``reports`` because ``Workload.load`` resolves names and paths through the
  catalog, which is the reports layer's job; calc never imports it.
- ``Workload`` holds the *resolved* model and hardware (``ModelSpec``, ``HardwareSpec``), the
  sequence length (with the stderr note when it was defaulted), the micro-batch, dtype, SP,
  recompute, activation model, memory techniques and state recipe. Sizes are checked here, with
  the option's name in the message.
- ``Layout`` holds the sizes (tp, cp, pp, dp, ep, etp), the ZeRO stage, the pipeline schedule
  (vpp, schedule, micro-batches per step), the node size and the world size, as given: each
  report checks what it prices, with the messages it always gave. ``gpus_per_node=None`` means
  the hardware's.
- A sweep command (``comm --tp 1,2,4,8``, ``dp --dp 8,64``, ``pipeline --pp 4,8``, ...) passes
  the swept dimension beside the request; the base ``Layout`` gives every other dimension.
- Pricing choices that are not part of the run (``with_latency``, ``link``, ``time_model``,
  ``params``, the overlaps of the step model) stay keyword arguments of the reports.
- One type and one default per flag in every command (``tpcalc.cli.request`` maps each option
  to its field; tests/test_request_options.py checks the definitions): ``--sp`` is on
  everywhere; a size (``--tp``, ``--dp``, ``--pp``, ``--cp``, ``--ep``) has one syntax, a list
  where the command sweeps it and one value where it prices one layout (a list there is refused
  by name). Two defaults differ on purpose: ``--microbatches`` (1 in ``dp``, 32 in ``pipeline``
  and ``layout``) and flops' tri-state ``--mtp`` (it follows ``--params``).
- Calc keeps its own inputs: ``Layout.parallel`` builds ``calc.layout.groups.ParallelLayout``
  and ``Workload.run`` builds ``LayoutRun``: the one conversion, shared by every report.
"""

from __future__ import annotations

from msgspec import Struct, field

from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
from tpcalc.calc.params.states import fp8_storage_note
from tpcalc.choices import ActivationModel, Recompute, Schedule, StateRecipe
from tpcalc.reports.inputs import node_size, positive, seq_warnings
from tpcalc.specs import HardwareSpec, ModelSpec
from tpcalc.units import Dtype


class Workload(Struct, frozen=True, kw_only=True):
    """What is trained, on which card: the same for every layout a report prices.

    ``warnings`` carries the defaulted-sequence note (``reports.inputs.seq_warnings``) that every
    report prints on stderr.
    """

    spec: ModelSpec
    hw: HardwareSpec
    seq: int
    micro_batch: int = 1
    dtype: Dtype = Dtype.bf16
    sp: bool = True
    recompute: Recompute = Recompute.selective
    activations: ActivationModel = ActivationModel.exact
    memory: MemoryTechniques = field(default_factory=MemoryTechniques)
    recipe: StateRecipe = StateRecipe.zero16
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        positive(self.seq, "--seq")
        positive(self.micro_batch, "--micro-batch")

    @classmethod
    def load(
        cls,
        model: str | ModelSpec,
        hardware: str | HardwareSpec,
        *,
        seq: int | None = None,
        micro_batch: int = 1,
        dtype: Dtype = Dtype.bf16,
        sp: bool = True,
        recompute: Recompute = Recompute.selective,
        activations: ActivationModel = ActivationModel.exact,
        memory: MemoryTechniques | None = None,
        recipe: StateRecipe = StateRecipe.zero16,
    ) -> Workload:
        """Load the model and the hardware by name or path (or take them loaded); ``seq=None``
        takes the model's training length, with a warning when that length is tpcalc's default.
        """
        from tpcalc.catalog import load_hardware, load_model

        spec = load_model(model) if isinstance(model, str) else model
        hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
        note = fp8_storage_note(recipe, hw)
        warnings = (*seq_warnings(spec, seq), *([note] if note else []))
        return cls(
            spec=spec,
            hw=hw,
            seq=spec.seq_length if seq is None else seq,
            micro_batch=micro_batch,
            dtype=dtype,
            sp=sp,
            recompute=recompute,
            activations=activations,
            memory=memory if memory is not None else MemoryTechniques(),
            recipe=recipe,
            warnings=warnings,
        )

    @classmethod
    def of_run(
        cls, model: str | ModelSpec, hardware: str | HardwareSpec, run: LayoutRun
    ) -> Workload:
        """The request a calculators' ``LayoutRun`` came from (the planner's candidates), so
        ``reports.layout.layout_report`` prices it exactly as ``tpcalc layout`` would."""
        return cls.load(
            model, hardware, seq=run.seq, micro_batch=run.micro_batch, dtype=run.dtype,
            sp=run.sp, recompute=run.recompute, activations=run.activations,
            memory=run.memory, recipe=run.recipe,
        )  # fmt: skip

    def run(self, layout: Layout, *, with_latency: bool) -> LayoutRun:
        """The calculators' ``LayoutRun``: this workload on ``layout``'s pipeline schedule."""
        return LayoutRun(
            seq=self.seq, microbatches=layout.microbatches, micro_batch=self.micro_batch,
            vpp=layout.vpp, schedule=layout.schedule, recipe=self.recipe, sp=self.sp,
            recompute=self.recompute, dtype=self.dtype, with_latency=with_latency,
            activations=self.activations, memory=self.memory,
        )  # fmt: skip

    def node(self, layout: Layout) -> int:
        """GPUs per node: ``layout.gpus_per_node`` (checked) or the hardware's."""
        return node_size(layout.gpus_per_node, self.hw.gpus_per_node.value)


class Layout(Struct, frozen=True, kw_only=True):
    """How the workload is split: sizes, ZeRO stage, pipeline schedule, node and world size."""

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int = 1  # expert tensor parallel (Megatron --expert-tensor-parallel-size)
    zero: int = 0
    vpp: int = 1
    schedule: Schedule = Schedule.one_f_one_b
    microbatches: int = 1  # micro-batches per step (gradient-accumulation steps)
    gpus_per_node: int | None = None  # None: the hardware's
    world_size: int | None = None  # None: tp·cp·pp·dp

    @classmethod
    def of(cls, parallel: ParallelLayout, run: LayoutRun) -> Layout:
        """The request a calculators' ``ParallelLayout`` and ``LayoutRun`` came from."""
        return cls(
            tp=parallel.tp, cp=parallel.cp, pp=parallel.pp, dp=parallel.dp, ep=parallel.ep,
            etp=parallel.etp, zero=int(parallel.zero), vpp=run.vpp, schedule=run.schedule,
            microbatches=run.microbatches, gpus_per_node=parallel.gpus_per_node,
            world_size=parallel.world_size,
        )  # fmt: skip

    def parallel(self, gpus_per_node: int) -> ParallelLayout:
        """The calculators' ``ParallelLayout`` on nodes of ``gpus_per_node`` GPUs."""
        from tpcalc.calc.dp.stage import zero_stage

        return ParallelLayout(
            tp=self.tp, cp=self.cp, pp=self.pp, dp=self.dp, ep=self.ep, etp=self.etp,
            zero=zero_stage(self.zero), world_size=self.world_size, gpus_per_node=gpus_per_node,
        )  # fmt: skip


class StageSplit(Struct, frozen=True, kw_only=True):
    """The layers of each pipeline stage set by hand, for a report that sweeps pp (``tpcalc
    pipeline --pp 8,16``): read against each pp, as ``pipeline.stage_split`` reads them for one
    layout (``tpcalc layout`` carries the same choices in its step-time options). Nothing set:
    the even split."""

    first_stage_layers: int | None = None  # Megatron-LM --decoder-first-pipeline-num-layers
    last_stage_layers: int | None = None  # --decoder-last-pipeline-num-layers
    pipeline_layout: str | None = None  # Megatron-Core --pipeline-model-parallel-layout
    embedding_in_split: bool = False  # --account-for-embedding-in-pipeline-split
    loss_in_split: bool = False  # --account-for-loss-in-pipeline-split

    def counts(self, num_layers: int, pp: int, vpp: int) -> tuple[int, ...] | None:
        """The decoder layers of each of the pp·vpp virtual stages, None for the even split
        (``step.hand_split``, the road ``tpcalc layout`` takes); raises a one-line TpcalcError
        when the split does not fit this pp and vpp."""
        from tpcalc.calc.time.pipeline_layout import parse_pipeline_layout
        from tpcalc.calc.time.step import TimeOptions, hand_split

        text = self.pipeline_layout
        opts = TimeOptions(
            first_stage_layers=self.first_stage_layers, last_stage_layers=self.last_stage_layers,
            chunk_layers=parse_pipeline_layout(text, pp * vpp) if text else None,
            embedding_in_split=self.embedding_in_split, loss_in_split=self.loss_in_split,
        )  # fmt: skip
        return hand_split(opts, num_layers, pp, vpp)

    def echo(self) -> dict[str, int | str | bool | None]:
        return {
            "first_stage_layers": self.first_stage_layers,
            "last_stage_layers": self.last_stage_layers,
            "pipeline_layout": self.pipeline_layout,
            "embedding_in_split": self.embedding_in_split,
            "loss_in_split": self.loss_in_split,
        }
