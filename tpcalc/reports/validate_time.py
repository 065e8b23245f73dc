"""`tpcalc validate`: predicted step time against published, measured training runs.

Each row of ``tpcalc/validation/runs.yaml`` (NVIDIA NeMo / Megatron-Bridge performance summaries,
the Llama 3 paper) becomes a Workload and a Layout; the step-time model predicts its step and
the throughput the source printed is compared on tokens/s/GPU, which no FLOP-counting convention
can bend. Options a row does not print take the framework defaults named in ``FRAMEWORK``,
each with its source; they are the same for every row (never tuned to one).
"""

from __future__ import annotations

import math
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from msgspec import Struct, field

from tpcalc.calc.dp.zero import ZeroStage
from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
from tpcalc.calc.time.pipeline_layout import parse_pipeline_layout, split_text
from tpcalc.calc.time.step import Overlap, StepTime, TimeOptions, hand_split, step_time
from tpcalc.catalog import hardware_names, load_hardware, load_model, model_names
from tpcalc.choices import AttentionKernel, LossKernel, Recompute, Schedule
from tpcalc.configfile import parse, read_text
from tpcalc.errors import ConfigError, InputError
from tpcalc.terms import Report, Row, Scalar, Term, Unit, term
from tpcalc.units import Dtype

E = TypeVar("E", bound=Enum)

# What NVIDIA's performance recipes run when a row does not print it (source for each):
FRAMEWORK = {
    "tp_comm_overlap": (
        "TP > 1 overlaps TP communication (Megatron-Bridge scripts/performance: "
        "CommOverlapConfig(tp_comm_overlap=True) on H100/B200; NeMo 24.07 performance recipes "
        "set tp_comm_overlap for every TP > 1 model)"
    ),
    "distributed_optimizer": (
        "Megatron distributed optimizer with overlapped gradient reduce-scatter and parameter "
        "all-gather (use_distributed_optimizer, overlap_grad_reduce, overlap_param_gather: "
        "on in every NeMo/Megatron-Bridge performance recipe)"
    ),
    "sequence_parallel": "sequence parallelism whenever TP > 1 (WorkloadBaseConfig rule)",
    "schedule": "interleaved 1F1B when vp > 1, else 1F1B (Megatron-Core schedules)",
    "causal": "causal attention (every model in the table is a decoder)",
    "moe_dispatcher": (
        "the recipe's moe_token_dispatcher_type: flex (DeepEP / HybridEP) sends a token across "
        "the network once per remote node holding its experts (DeepSeek-V3 report §3.2.1; "
        "DeepEP docs/legacy.md counts its RDMA bytes that way); alltoall (NCCL), or a preset "
        "that does not describe the row, sends every copy"
    ),
    "moe_probs_in_act": (
        "a Megatron-Bridge run weights each expert's output by its router probability inside "
        "the expert's activation, so the token combine keeps no expert output "
        "(moe_probs_in_act): Megatron-Core does so since core_v0.13.0 (NVIDIA/Megatron-LM "
        "2659630721, 'perf(MoE): Memory efficient token permutation', 2025-04-09: "
        "activation_func_with_probs in experts.py, the unpermute given no probabilities), and "
        "every Megatron-Bridge table here (25.11 on) runs a later Megatron-Core"
    ),
    "loss_kernel": (
        "the cross-entropy kernel the row's recipe runs (recipe.loss, read from the recipe at "
        "its commit): Transformer Engine's (cross_entropy_loss_fusion with "
        "cross_entropy_fusion_impl te: every Megatron-Bridge performance launcher sets te, "
        "scripts/performance/utils/overrides.py _set_common_perf_overrides and "
        "perf_recipes/_common.py _benchmark_common), Megatron-Core's own (fused or not, "
        "impl native: NeMo 24.07, Megatron-Core's default); a row that records none keeps "
        "tpcalc's one FP32 copy (seed 003 §7.3.4)"
    ),
    "gb200_nvlink_domain": (
        "GB200 NVL72 jobs take 16 trays (64 GPUs) per rack (Slurm block topology, "
        "--segment 16), so power-of-two groups stay inside one NVLink domain of 64"
    ),
}
# The recipe repositories whose runs weight by the router probabilities in the expert's
# activation (see FRAMEWORK["moe_probs_in_act"]).
PROBS_IN_ACT_RECIPES = frozenset({"NVIDIA-NeMo/Megatron-Bridge"})
# The NVLink domain a job sees, where it is not the card's gpus_per_node (see FRAMEWORK).
JOB_NVLINK_DOMAIN = {"gb200": 64}
SUPPORTED_KINDS = ("dense", "moe")


class Case(Struct, frozen=True):
    """One published run as tpcalc inputs, with what the source measured."""

    id: str
    model: str
    hardware: str
    kind: str
    dtype: Dtype
    gpus: int
    layout: ParallelLayout
    run: LayoutRun
    options: TimeOptions
    measured_tokens_per_s_per_gpu: float | None
    measured_tflop_per_s_per_gpu: float | None
    source: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    release: str = ""  # the software the run measured (the summary's container), or the document
    # how the measured tokens/s/GPU were read: as printed, or counted back from printed TFLOP/s
    measured_from: str = "as printed"


def runs_path() -> Any:
    return resources.files("tpcalc") / "validation" / "runs.yaml"


def heldout_path() -> Path:
    """The held-out runs shipped with tpcalc (``validation/heldout.yaml``), as a path."""
    return Path(str(resources.files("tpcalc") / "validation" / "heldout.yaml"))


def load_runs(path: Path | None = None) -> list[dict[str, Any]]:
    """The rows of the shipped table, or of a user's ``path`` read as safely as any config
    (``configfile``: regular files up to 1 MiB, bounded nesting, one-line errors)."""
    if path is None:
        data = yaml.safe_load(runs_path().read_text(encoding="utf-8"))
    else:
        data = parse(read_text(Path(path)), Path(path))
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ConfigError(
            f"{path}: not a runs file: expected a mapping with 'runs:', a list of runs "
            "(see tpcalc/validation/runs.yaml)"
        )
    return runs


def _int(value: Any, default: int = 1) -> int:
    return int(value) if isinstance(value, int) and value > 0 else default


def _zero_stage(row: dict[str, Any], recipe: dict[str, Any]) -> ZeroStage:
    """The stage the run sharded its states to: Megatron FSDP (the summary's FSDP column above
    0, or the recipe's use_megatron_fsdp) gathers parameters per micro-batch as ZeRO-3 does;
    every other Megatron-Bridge and NeMo recipe uses the distributed optimizer (ZeRO-1)."""
    if row.get("fsdp") or recipe.get("use_megatron_fsdp"):
        return ZeroStage.parameters
    if recipe.get("use_distributed_optimizer") is False:  # Megatron-LM before its 2022 ZeRO-1
        return ZeroStage.none
    return ZeroStage.optimizer


def _schedule(row: dict[str, Any], recipe: dict[str, Any], vp: int) -> Schedule:
    """The pipeline schedule a row's recipe names (``pipeline_schedule``: DeepSeek-V3's
    DualPipe), else Megatron's: interleaved with virtual stages, 1F1B without."""
    named = recipe.get("pipeline_schedule")
    if named is None:
        return Schedule.interleaved if vp > 1 else Schedule.one_f_one_b
    return row_enum(row, "recipe pipeline_schedule", Schedule, named)


def row_enum(row: dict[str, Any], what: str, choices: type[E], value: Any) -> E:
    """``choices(value)``, or a ConfigError naming the row, the field and the valid values."""
    try:
        return choices(value)
    except ValueError:
        valid = ", ".join(str(c.value) for c in choices)
        raise ConfigError(
            f"{row['id']}: {what} {value!r} is not one tpcalc knows; valid: {valid}"
        ) from None


def case_of(row: dict[str, Any]) -> Case | str:
    """The row as tpcalc inputs, or why it cannot be computed (unsupported kind, no config)."""
    model = row["model"].get("tpcalc") or row["model"].get("needs_config")
    if row["kind"] not in SUPPORTED_KINDS:
        return f"{row['id']}: {row['kind']} models (Mamba layers) are not modelled"
    if model not in model_names():
        return f"{row['id']}: no model config '{model}' yet"
    if row["hardware"] not in hardware_names():
        return f"{row['id']}: no hardware config '{row['hardware']}' yet"
    tp, pp, cp = _int(row["tp"]), _int(row["pp"]), _int(row["cp"])
    vp = _int(row["vp"]) if isinstance(row["vp"], int) else 1
    ep, etp = _int(row["ep"]), _int(row.get("etp"))
    dp = row["gpus"] // (tp * pp * cp)
    mbs = row["micro_batch"] or 1
    microbatches = row["global_batch"] // (dp * mbs)
    recipe = recipe_options(row)
    recompute_layers = recipe.get("recompute_num_layers")
    modules = tuple(recipe.get("recompute_modules") or ())
    recompute = _granularity(recipe)
    schedule = _schedule(row, recipe, vp)
    layout = ParallelLayout(
        gpus_per_node=JOB_NVLINK_DOMAIN.get(
            row["hardware"], load_hardware(row["hardware"]).gpus_per_node.value
        ),
        tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, zero=_zero_stage(row, recipe),
    )  # fmt: skip
    run = LayoutRun(
        seq=row["seq_length"], microbatches=microbatches, micro_batch=mbs, vpp=vp,
        schedule=schedule,
        sp=tp > 1 and row.get("sequence_parallel") is not False,
        recompute=recompute, dtype=Dtype(row["dtype"]),
        memory=MemoryTechniques(
            recompute_modules=modules, mtp=_trains_mtp(row, recipe),
            attention=attention_kernel(recipe).value, moe_probs_in_act=_probs_in_act(row),
        ),
    )  # fmt: skip
    overlap = Overlap(
        tp_comm=bool(recipe.get("tp_comm_overlap", True)) and tp > 1,
        # Megatron's EP overlap flags; unset, DualPipe overlaps by its own schedule (None)
        ep_a2a=bool(recipe.get("moe_a2a_overlap") or recipe.get("overlap_moe_expert_parallel_comm"))
        or (None if schedule is Schedule.dualpipe else False),
        # a recipe that turns the DDP overlaps off (ddp.overlap_grad_reduce / overlap_param_gather
        # = False, e.g. Megatron-Bridge perf_recipes DeepSeek-V3 H100) exposes them
        dp_grad_reduce=recipe.get("overlap_grad_reduce") is not False,
        dp_param_gather=recipe.get("overlap_param_gather") is not False,
        # Megatron overlap_p2p_comm false: the stage-to-stage sends wait (NeMo 24.07's Nemotron-4
        # 340B launcher config; Megatron-LM 2021-2022 p2p_communication: batch_isend_irecv, wait)
        pp_p2p=recipe.get("overlap_p2p_comm") is not False,
    )
    options = TimeOptions(
        overlap=overlap, recompute_layers=recompute_layers,
        ep_node_dedup=recipe.get("moe_token_dispatcher_type") == "flex",
        pp_scatter_gather=bool(recipe.get("scatter_gather_tensors_in_pipeline")),
        chunk_layers=layout_chunk_layers(recipe.get("pipeline_model_parallel_layout"), pp * vp),
        embedding_in_split=bool(recipe.get("account_for_embedding_in_pipeline_split")),
        loss_in_split=bool(recipe.get("account_for_loss_in_pipeline_split")),
    )  # fmt: skip
    measured = row["measured"]
    src = row["source"]
    where = ", ".join(
        str(src[k]) for k in ("document", "container", "table", "commit") if src.get(k)
    )
    tokens, read = measured_tokens(row, load_model(model))
    return Case(
        id=row["id"], model=model, hardware=row["hardware"], kind=row["kind"],
        dtype=run.dtype, gpus=row["gpus"], layout=layout, run=run, options=options,
        measured_tokens_per_s_per_gpu=tokens,
        measured_tflop_per_s_per_gpu=measured.get("model_tflop_per_s_per_gpu"), source=where,
        release=str(src.get("container") or src.get("document") or ""), measured_from=read,
    )  # fmt: skip


TRILLION_TOKENS = 1e12
SECONDS_PER_HOUR = 3600


def measured_tokens(row: dict[str, Any], spec: Any) -> tuple[float | None, str]:
    """The measured tokens/s/GPU of a row and how it was read: as printed; else from printed
    GPU hours per trillion tokens (a whole run's average: DeepSeek-V3 report §1); else from a
    printed step time (every token of the global batch, once per step, over the GPUs: no FLOP count
    involved); else from printed model TFLOP/s with the source's FLOP convention
    (``tokens_from_tflops``; None where it states none)."""
    measured = row["measured"]
    if measured.get("tokens_per_s_per_gpu"):
        return measured["tokens_per_s_per_gpu"], "as printed"
    if measured.get("gpu_hours_per_trillion_tokens"):
        gpu_s = float(measured["gpu_hours_per_trillion_tokens"]) * SECONDS_PER_HOUR
        return TRILLION_TOKENS / gpu_s, "10¹² tokens / (printed GPU hours per 10¹² tokens · 3600 s)"
    if measured.get("step_time_s"):
        tokens = row["global_batch"] * row["seq_length"]
        per_gpu = tokens / (float(measured["step_time_s"]) * row["gpus"])
        return per_gpu, "global batch · sequence / (printed step time · GPUs)"
    counted = tokens_from_tflops(row, spec)
    if counted is None:
        return None, "as printed"
    name = measured["flop_convention"]["name"]
    return counted, f"printed model TFLOP/s / FLOP per token ({name})"


# NeMo 1.x launcher configs name Megatron-Core's recompute_granularity
# activations_checkpoint_granularity (NeMo megatron_base_model: the transformer config's
# recompute_granularity is read from it).
GRANULARITY_KEYS = ("recompute_granularity", "activations_checkpoint_granularity")


def _granularity(recipe: dict[str, Any]) -> Recompute:
    """The recompute a recipe states for time: "selective" with no module list is
    Megatron-Core's default selective recompute, the core attention (TransformerConfig
    recompute_modules default ["core_attn"]; Korthikanti et al. 2022 §5), tpcalc's
    ``Recompute.selective``; with a module list the modules say it (``recompute_modules``).
    An empty list is not "no module list": Megatron-Core fills the default only when
    recompute_modules is None (``if self.recompute_modules is None``), so "selective" with []
    recomputes nothing (Megatron-Bridge perf_recipes GPT-OSS-120B GB200 MXFP8 @ 4ab94df).
    Full recompute of N layers per chunk is ``recompute_num_layers`` (block); full with no
    count recomputes every layer (Megatron-LM's 2021 --checkpoint-activations)."""
    granularity = next((recipe[k] for k in GRANULARITY_KEYS if recipe.get(k)), None)
    if granularity == Recompute.selective.value and recipe.get("recompute_modules") is None:
        return Recompute.selective
    if granularity == Recompute.full.value and recipe.get("recompute_num_layers") is None:
        return Recompute.full  # every layer (Megatron-LM 2021 --checkpoint-activations)
    return Recompute.none


# Megatron-Core attention_backend values that run its own attention, the scores materialised
# (AttnBackend.local: megatron/core/transformer/dot_product_attention.py; unfused: TE's
# UnfusedDotProductAttention), which the 2021 code ran for every model: tpcalc's eager kernel.
EAGER_BACKENDS = frozenset({"local", "unfused"})


def attention_kernel(recipe: dict[str, Any]) -> AttentionKernel:
    """The attention kernel a recipe names: eager for Megatron's own (``EAGER_BACKENDS``), else
    flash (every NeMo / Megatron-Bridge recipe leaves Transformer Engine to pick its fused
    kernel)."""
    if recipe.get("attention_backend") in EAGER_BACKENDS:
        return AttentionKernel.eager
    return AttentionKernel.flash


# FLOP counts of a sources' TFLOP/s, by name (``measured.flop_convention``), per token: with
# the row's model, sequence and the vocabulary the source states.
def _narayanan_2021_eq3(spec: Any, seq: int, vocab: int) -> float:
    """Narayanan et al. 2021 §5.1 Eq. 3, per token: 96·l·h²·(1 + s/(6h) + V/(16·l·h)), which
    counts the recompute forward (every run of its Table 1 recomputes activations)."""
    h, layers = spec.hidden_size, spec.num_hidden_layers
    return 96 * layers * h**2 * (1 + seq / (6 * h) + vocab / (16 * layers * h))


FLOP_CONVENTIONS = {"narayanan-2021-eq3": _narayanan_2021_eq3}
FLOP_PER_TFLOP = 1e12


def tokens_from_tflops(row: dict[str, Any], spec: Any) -> float | None:
    """Measured tokens/s/GPU of a row that prints model TFLOP/s only, counted back with the
    FLOP convention its source states (``measured.flop_convention``: name and vocabulary);
    None when it states none (the Llama 3 paper rows: predicted, not scored)."""
    measured = row["measured"]
    convention = measured.get("flop_convention")
    tflops = measured.get("model_tflop_per_s_per_gpu")
    if not convention or not tflops:
        return None
    per_token = FLOP_CONVENTIONS.get(convention.get("name"))
    if per_token is None:
        raise ConfigError(
            f"{row['id']}: flop_convention {convention.get('name')!r} is not one tpcalc "
            f"knows; valid: {', '.join(FLOP_CONVENTIONS)}"
        )
    flop_per_s = float(tflops) * FLOP_PER_TFLOP
    return flop_per_s / per_token(spec, row["seq_length"], int(convention["vocab"]))


def layout_chunk_layers(layout: Any, stages: int) -> tuple[int, ...] | None:
    """Decoder layers of each virtual stage in a recipe's Megatron-Core pipeline layout string
    (``calc.time.pipeline_layout``), or None when there is no layout or one tpcalc cannot
    place (not ``stages`` stages, the embedding not first, the loss and MTP not last): the
    row then splits its layers evenly."""
    if not isinstance(layout, str) or not layout:
        return None
    try:
        return parse_pipeline_layout(layout, stages)
    except InputError:
        return None


def _probs_in_act(row: dict[str, Any]) -> bool:
    """Whether the run's software applies the router probabilities inside the expert's
    activation (``FRAMEWORK["moe_probs_in_act"]``): its recipe is Megatron-Bridge's."""
    return (row.get("recipe") or {}).get("repository") in PROBS_IN_ACT_RECIPES


def _trains_mtp(row: dict[str, Any], recipe: dict[str, Any]) -> bool:
    """Whether the run trains its MTP module: the table says "w/o MTP", or the recipe sets
    mtp_num_layers (Megatron-Bridge's DeepSeek-V3 recipe: 1 by default)."""
    if "w/o mtp" in str(row["model"].get("published", "")).lower():
        return False
    return bool(recipe.get("mtp_num_layers", 1))


# Preset fields that set only how many micro-batches a step runs, not what a rank holds or does:
# the performance launcher takes them from its command line (Megatron-Bridge
# scripts/performance/argument_parser.py -gb/--global_batch_size; utils/overrides.py
# `recipe.train.global_batch_size = args.global_batch_size`, lines 223-224 @ 5776a6d) and keeps
# every other preset option, so a row that differs from its preset there alone ran the
# preset's per-rank options.
PER_STEP_FIELDS = frozenset({"global_batch_size"})


def recipe_options(row: dict[str, Any]) -> dict[str, Any]:
    """The options a row's performance-recipe preset sets and the table does not print
    (``recipe``: fields, the launcher's derived settings, library defaults), or nothing when
    the preset describes another layout than the printed row (``disagrees_with_row``): the
    measured run then used options the source does not state, and the FRAMEWORK defaults apply.
    A preset that differs from the row in the global batch alone describes the same layout
    (``PER_STEP_FIELDS``), so its options apply.
    """
    return {} if preset_disagreement(row) else preset_options(row)


def preset_disagreement(row: dict[str, Any]) -> dict[str, Any]:
    """Where the row's recipe preset describes another layout than the printed row: its
    ``disagrees_with_row`` entries beyond ``PER_STEP_FIELDS`` (empty: the preset applies)."""
    differ = (row.get("recipe") or {}).get("disagrees_with_row") or {}
    return {k: v for k, v in differ.items() if k not in PER_STEP_FIELDS}


def preset_options(row: dict[str, Any]) -> dict[str, Any]:
    """Every option the row's recipe preset sets (library defaults, pipeline split, the
    launcher's derived settings, the preset's fields), whether or not it describes the row."""
    recipe = row.get("recipe") or {}
    split = {k: v for k, v in (recipe.get("pipeline_split") or {}).items() if k != "source"}
    return {
        **recipe.get("defaults", {}), **split, **recipe.get("derived", {}),
        **recipe.get("fields", {}),
    }  # fmt: skip


def loss_kernel(row: dict[str, Any]) -> LossKernel:
    """The cross-entropy kernel of a row's recipe (``recipe.loss``; ``FRAMEWORK["loss_kernel"]``)
    as tpcalc's ``--loss-kernel``: Transformer Engine's where the fusion is on with impl te,
    Megatron-Core's own for any other recorded setting (its fused and unfused kernels both
    take an FP32 copy beside the 16-bit logits), the seeds' FP32 copy where none is recorded.
    Read whether or not the preset's layout matches the row, like ``precision_options``: the
    launcher sets the kernel for every layout. Memory only: the step-time model does not read it.
    """
    loss = (row.get("recipe") or {}).get("loss")
    if not loss:
        return LossKernel.fp32_copy
    impl = loss.get("cross_entropy_fusion_impl") if loss.get("cross_entropy_loss_fusion") else None
    return LossKernel.te if impl == "te" else LossKernel.megatron


def precision_options(row: dict[str, Any]) -> dict[str, Any]:
    """The mixed-precision facts of a row's recipe (``recipe.precision``: compute dtype,
    ``fp8_recipe``, ``fp8_param_gather``), or nothing. Read whether or not the preset's layout
    matches the row (``disagrees_with_row``): the precision config follows the compute dtype
    the table prints, not the preset's layout fields. Memory only: the step-time model does not
    read them."""
    recipe = row.get("recipe") or {}
    return {k: v for k, v in (recipe.get("precision") or {}).items() if k != "source"}


def predict(case: Case) -> StepTime:
    """The step-time model on one case."""
    spec, hw = load_model(case.model), load_hardware(case.hardware)
    return step_time(spec, hw, case.layout, case.run, case.options)


class Outcome(Struct, frozen=True):
    case: Case
    step: StepTime
    error: float | None  # predicted / measured − 1, tokens/s/GPU


def outcomes(rows: list[dict[str, Any]]) -> tuple[list[Outcome], list[str]]:
    """Every computable row predicted, and a reason for every row that is not."""
    done, skipped = [], []
    for i, row in enumerate(rows):
        try:
            case = case_of(row)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            where = row.get("id", f"run {i + 1}")
            raise ConfigError(
                f"{where}: a field is missing or not of its type ({type(exc).__name__}: {exc}); "
                "see tpcalc/validation/runs.yaml for the fields a run needs"
            ) from None
        if isinstance(case, str):
            skipped.append(case)
            continue
        try:
            st = predict(case)
        except InputError as exc:
            skipped.append(f"{case.id}: {exc}")
            continue
        measured = case.measured_tokens_per_s_per_gpu
        err = st.tokens_per_s_per_gpu / measured - 1 if measured else None
        done.append(Outcome(case, st, err))
    return done, skipped


def mean_abs(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors) if errors else math.nan


def validate_report(path: Path | None = None, hardware: str | None = None) -> Report:
    """One row per published run: measured and predicted tokens/s/GPU and the error; the notes
    give mean |error| and the worst row per hardware kind, per release measured (the
    summary's container) and for dense vs MoE."""
    rows = load_runs(path)
    if hardware:
        rows = [r for r in rows if r["hardware"] == hardware]
    done, skipped = outcomes(rows)
    out = [_row(o) for o in done]
    return Report(
        title="Step time against published, measured runs (tokens/s/GPU)",
        rows=tuple(out),
        warnings=tuple(f"skipped {s}" for s in skipped),
        notes=tuple(_summary(done)),
    )


def layout_text(c: Case) -> str:
    """A run's layout in one line: TP PP CP VP EP (ETP where it is not 1) DP, micro-batch and
    micro-batches."""
    lay = c.layout
    etp = f" ETP{lay.etp}" if lay.etp > 1 else ""
    return (
        f"TP{lay.tp} PP{lay.pp} CP{lay.cp} VP{c.run.vpp} EP{lay.ep}{etp} DP{lay.dp} "
        f"mbs{c.run.micro_batch} m{c.run.microbatches}"
    )


def _row(o: Outcome) -> Row:
    c, st = o.case, o.step
    inputs: dict[str, Scalar] = {
        "id": c.id, "model": c.model, "hardware": c.hardware, "kind": c.kind,
        "dtype": c.dtype.value, "gpus": c.gpus, "seq": c.run.seq, "layout": layout_text(c),
        "ep_dispatch": "node-aware" if c.options.ep_node_dedup else "all-to-all",
        "stage_layers": split_text(
            hand_split(c.options, load_model(c.model).num_hidden_layers, c.layout.pp, c.run.vpp)
        ),
    }  # fmt: skip
    terms: list[Term] = [
        term(
            "measured_tokens_per_s_per_gpu", "measured", c.measured_tokens_per_s_per_gpu,
            Unit.count, formula=c.measured_from, source=c.source,
        ),
        term(
            "predicted_tokens_per_s_per_gpu", "predicted", st.tokens_per_s_per_gpu, Unit.count,
            formula="tokens per step / step time / GPUs", source="tpcalc.calc.time.step",
        ),
        term(
            "error", "error", o.error, Unit.ratio, formula="predicted / measured − 1",
            source="tokens/s/GPU (issue 9: the comparison no FLOP convention bends)",
        ),
        term(
            "step_time_s", "step time", st.step_time_s, Unit.seconds,
            formula="step-time model", source="tpcalc.calc.time.step",
        ),
        term("mfu_ratio", "MFU", st.mfu_ratio, Unit.ratio,
             formula="model FLOP/s / peak of the GEMM dtype", source="PaLM App. B"),
    ]  # fmt: skip
    return Row(inputs=inputs, terms=tuple(terms))


def _summary(done: list[Outcome]) -> list[str]:
    lines = []
    groups: dict[str, list[Outcome]] = {}
    for o in done:
        if o.error is None:
            continue
        groups.setdefault(f"{o.case.hardware} {o.case.kind}", []).append(o)
        groups.setdefault(f"all {o.case.kind}", []).append(o)
        if o.case.release:  # the software each summary measured (releases differ: 25.11 MoE)
            groups.setdefault(f"{o.case.release} {o.case.kind}", []).append(o)
    for name, items in sorted(groups.items()):
        worst = max(items, key=lambda o: abs(o.error or 0.0))
        lines.append(
            f"{name}: {len(items)} rows, mean |error| {mean_abs([o.error or 0 for o in items]):.1%}"
            f", worst {worst.case.id} {worst.error:+.1%}"
        )
    return lines
