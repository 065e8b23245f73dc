"""One request model from the command line (issue 8 §2): every option that becomes a field of
the ``Workload`` or ``Layout`` has one definition (one type, one help, one parser) and one
default in every command, and ``tpcalc.cli.request`` is the one map from option to field."""

from __future__ import annotations

import importlib
import typing

import pytest

from tpcalc.calc.layout.groups import MemoryTechniques
from tpcalc.choices import MoeDispatcher, Recompute, RouterDtype, Schedule, StateRecipe
from tpcalc.cli.request import (
    LAYOUT_OPTIONS,
    TECHNIQUE_OPTIONS,
    WORKLOAD_OPTIONS,
    layout_of,
    workload_of,
)
from tpcalc.errors import InputError
from tpcalc.reports.request import Layout
from tpcalc.units import Dtype

# The commands that price a run, and the sizes each sweeps (one row per value); a swept size
# is the report's own argument, declared as a list option with no default (None).
SWEEPS: dict[str, tuple[str, ...]] = {
    "comm": ("tp",),
    "memory": ("tp",),
    "flops": ("tp",),
    "check": ("tp",),
    "dp": ("dp",),
    "zero": ("dp", "zero"),
    "pipeline": ("pp",),
    "cp": ("cp",),
    "ep": ("ep",),
    "layout": (),
}
# `tpcalc plan` searches these: each is a pin ("--pp 1,2,4", its own definition with the search's
# help), never a default, so they are checked apart (test_plan_pins_default_to_the_whole_search);
# every other request option plan declares is held to the one definition and default.
PLAN_PINS = (
    "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch", "zero", "recompute",
    "recompute_modules", "schedule", "sp",
)  # fmt: skip
# Defaults that differ on purpose, each with its reason; anything else that differs is drift.
DIFFERENT_DEFAULTS = {
    # dp and zero price one step of gradient accumulation by default (zero: seed 000's 145.9 GB,
    # 1.5x DP); a pipeline needs m ≥ pp to fill (32 is seed 003's and the Megatron recipes' order
    # of magnitude)
    "microbatches": {"dp": 1, "zero": 1, "pipeline": 32, "layout": 32},
    # flops: None follows --params ('all' counts the MTP module); layout counts it by default
    "mtp": {"flops": None, "layout": True, "plan": True},
}
# One flag, two definitions, on purpose: flops' --mtp is tri-state (None follows --params) and
# changing it would change what 'tpcalc flops' prints by default.
DIFFERENT_DEFINITIONS = {"mtp"}
REQUEST = (
    {"model", "hardware", "recompute_modules"} | set(WORKLOAD_OPTIONS) | set(TECHNIQUE_OPTIONS)
)


def declarations(command: str) -> dict[str, tuple[object, object]]:
    """Each parameter of a command: (its Annotated option type, its default)."""
    import inspect

    fn = getattr(importlib.import_module(f"tpcalc.cli.{command}"), command)
    hints = typing.get_type_hints(fn, include_extras=True)
    return {
        name: (hints[name], p.default)
        for name, p in inspect.signature(fn).parameters.items()
        if name != "ctx"
    }


ALL = {command: declarations(command) for command in SWEEPS}
PLAN = declarations("plan")
ALL["plan"] = {k: v for k, v in PLAN.items() if k not in PLAN_PINS}
SWEEPS = {**SWEEPS, "plan": ()}


@pytest.mark.parametrize("option", sorted(REQUEST | set(LAYOUT_OPTIONS)))
def test_one_definition_and_one_default_per_request_option(option: str) -> None:
    fixed = {c: d[option] for c, d in ALL.items() if option in d and option not in SWEEPS[c]}
    swept = {c: d[option] for c, d in ALL.items() if option in d and option in SWEEPS[c]}
    # one shared Annotated definition (cli/options.py, parallel_options.py, time_options.py)
    if option not in DIFFERENT_DEFINITIONS:
        assert len({annotation for annotation, _ in fixed.values()}) <= 1, fixed
    assert len({annotation for annotation, _ in swept.values()}) <= 1, swept
    defaults = {c: default for c, (_, default) in fixed.items()}
    if option in DIFFERENT_DEFAULTS:
        assert defaults == DIFFERENT_DEFAULTS[option]
    elif option != "model":  # ep defaults to an MoE model (cli/ep.py DEFAULT_MOE_MODEL)
        assert len(set(defaults.values())) <= 1, defaults
    assert all(default is None for _, default in swept.values()), swept


def test_every_request_option_maps_to_a_field() -> None:
    # an option a command declares under a request name must be read by the request builder
    fields = set(WORKLOAD_OPTIONS.values()) | {"model", "hardware"}
    assert fields <= {
        "model", "hardware", "seq", "micro_batch", "dtype", "sp", "recompute", "activations",
        "recipe",
    }  # fmt: skip
    assert set(TECHNIQUE_OPTIONS.values()) <= set(MemoryTechniques.__struct_fields__)
    assert set(LAYOUT_OPTIONS.values()) <= set(Layout.__struct_fields__)


def test_layout_of_takes_the_sizes_and_leaves_the_sweep_out() -> None:
    params = {"tp": 8, "pp": "4,8", "dp": 2, "microbatches": 16, "gpus_per_node": None}
    base = layout_of(params, sweep=("pp",))
    assert base == Layout(tp=8, dp=2, microbatches=16)  # gpus_per_node None: the card's
    assert layout_of({"zero": 1, "schedule": Schedule.dualpipe}) == Layout(
        zero=1, schedule=Schedule.dualpipe
    )


def test_workload_of_builds_the_memory_techniques_from_the_shared_options() -> None:
    params = {
        "model": "deepseek-v3", "hardware": "h800", "seq": 4096, "micro_batch": 2,
        "dtype": Dtype.fp8, "recompute": Recompute.none, "state_recipe": StateRecipe.bf16_moments,
        "recompute_modules": "layernorm,moe_act", "fp8_cache": True,
        "moe_dispatcher": MoeDispatcher.allgather, "router_dtype": RouterDtype.fp64,
        "capacity_factor": None, "dropout": False,
    }  # fmt: skip
    work = workload_of(params)
    assert (work.spec.name, work.hw.name, work.seq, work.micro_batch) == (
        "deepseek-v3", "h800", 4096, 2,
    )  # fmt: skip
    assert (work.dtype, work.recompute, work.recipe) == (
        Dtype.fp8, Recompute.none, StateRecipe.bf16_moments,
    )  # fmt: skip
    assert work.memory == MemoryTechniques(
        recompute_modules=("layernorm", "moe_act"), fp8_cache=True, moe_dispatcher="allgather",
        router_dtype="fp64", dropout=False,
    )  # fmt: skip
    assert work.sp is True and work.warnings == ()  # defaults; seq was given


def test_workload_of_names_the_option_of_a_bad_size() -> None:
    with pytest.raises(InputError, match="--micro-batch must be a positive integer, got 0"):
        workload_of({"model": "qwen3.8", "micro_batch": 0})
    with pytest.raises(InputError, match="--recompute-modules"):
        workload_of({"model": "qwen3.8", "recompute_modules": "bogus"})


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [("layout", "--dp", "8,64"), ("layout", "--pp", "4,8"), ("ep", "--cp", "2,4"),
     ("layout", "--ep", "8,64"), ("pipeline", "--dp", "2,4"), ("dp", "--tp", "1,2")],
)  # fmt: skip
def test_one_layout_commands_take_one_size_in_the_list_syntax(cli, command, option, value):
    r = cli(command, option, value)
    assert r.code == 2
    assert "this command prices one" in r.err and "one row each" in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_the_one_conversion_to_the_calculators_inputs() -> None:
    from tpcalc.calc.dp.zero import ZeroStage
    from tpcalc.calc.layout.groups import LayoutRun, ParallelLayout
    from tpcalc.reports.request import Workload

    work = Workload.load(
        "llama3-70b", "h100-sxm", seq=8192, micro_batch=2, dtype=Dtype.fp8,
        recompute=Recompute.full, recipe=StateRecipe.megatron18,
    )  # fmt: skip
    lay = Layout(
        tp=8, cp=2, pp=4, dp=2, zero=1, vpp=2, schedule=Schedule.interleaved, microbatches=16,
        world_size=128,
    )  # fmt: skip
    assert lay.parallel(8) == ParallelLayout(
        tp=8, cp=2, pp=4, dp=2, zero=ZeroStage.optimizer, world_size=128, gpus_per_node=8
    )
    assert work.run(lay, with_latency=True) == LayoutRun(
        seq=8192, microbatches=16, micro_batch=2, vpp=2, schedule=Schedule.interleaved,
        recipe=StateRecipe.megatron18, dtype=Dtype.fp8, recompute=Recompute.full,
        with_latency=True,
    )  # fmt: skip
    assert work.node(lay) == 8  # the card's (h100-sxm: 8 per node)
    assert work.node(Layout(gpus_per_node=4)) == 4
    with pytest.raises(InputError, match="--gpus-per-node must be a positive integer, got 0"):
        work.node(Layout(gpus_per_node=0))


def test_calc_inputs_convert_back_to_the_request_they_came_from():
    """The planner's candidates carry calc inputs; Layout.of / Workload.of_run give the request
    `tpcalc layout` would build, and converting it again returns the same calc inputs."""
    from tpcalc.calc.dp.zero import ZeroStage
    from tpcalc.calc.layout.groups import LayoutRun, MemoryTechniques, ParallelLayout
    from tpcalc.choices import Recompute, Schedule
    from tpcalc.reports.request import Layout, Workload

    parallel = ParallelLayout(tp=8, pp=4, dp=2, zero=ZeroStage(1), gpus_per_node=8)
    run = LayoutRun(
        seq=8192, microbatches=8, micro_batch=2, vpp=2, schedule=Schedule.interleaved,
        recompute=Recompute.full, memory=MemoryTechniques(recompute_modules=("core_attn",)),
    )  # fmt: skip
    work, lay = Workload.of_run("llama3-70b", "h100-sxm", run), Layout.of(parallel, run)
    assert lay.parallel(work.node(lay)) == parallel
    assert work.run(lay, with_latency=run.with_latency) == run


def test_plan_pins_default_to_the_whole_search() -> None:
    # every dimension plan searches is a pin with no default (None: search every value), and
    # each takes the list syntax the other commands sweep with (a str parsed as "1,2,4")
    for name in PLAN_PINS:
        annotation, default = PLAN[name]
        assert default is None, name
        assert typing.get_args(annotation)[0] in (str | None, bool | None), name
