"""The shared options build the request: one map from option to ``Workload``/``Layout`` field.

Every command that prices a run takes ``ctx: typer.Context`` and, inside its ``build``, calls
``workload_of(ctx.params)`` and, when it prices a layout, ``layout_of(ctx.params, sweep=...)``.
The maps below are the only place an option becomes a field of the request
(``tpcalc.reports.request``), so a flag means the same thing in every command; its one type and
one default live in ``tpcalc.cli.options``, ``parallel_options`` and ``time_options``, and
tests/test_request_options.py checks that no command redefines them.

An option left unset (``None``) keeps the field's default (the model's sequence length, the
card's node size, the product of the sizes). A swept option (``--dp 8,64`` in ``tpcalc dp``)
is the report's own argument, so ``layout_of`` leaves it out. Nothing here imports a calculator
until a command runs (``tpcalc CMD --help`` stays light).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from tpcalc.cli.options import DEFAULT_HARDWARE

if TYPE_CHECKING:
    from tpcalc.calc.layout.groups import MemoryTechniques
    from tpcalc.reports.request import Layout, Workload

# option parameter name -> Workload field (model and hardware are Workload.load's names)
WORKLOAD_OPTIONS: dict[str, str] = {
    "seq": "seq",
    "micro_batch": "micro_batch",
    "dtype": "dtype",
    "sp": "sp",
    "recompute": "recompute",
    "activations": "activations",
    "state_recipe": "recipe",
}
# option parameter name -> MemoryTechniques field (Workload.memory); --recompute-modules is
# parsed and checked by memory_techniques below
TECHNIQUE_OPTIONS: dict[str, str] = {
    "fp8_cache": "fp8_cache",
    "fp8_linear_inputs": "fp8_linear_inputs",
    "moe_probs_in_act": "moe_probs_in_act",
    "mtp": "mtp",
    "offload_layers": "offload_layers",
    "moe_dispatcher": "moe_dispatcher",
    "capacity_factor": "capacity_factor",
    "router_dtype": "router_dtype",
    "dropout": "dropout",
    "attention": "attention",
    "loss_kernel": "loss_kernel",
}
# option parameter name -> Layout field
LAYOUT_OPTIONS: dict[str, str] = {
    name: name
    for name in (
        "tp", "cp", "pp", "dp", "ep", "etp", "zero", "vpp", "schedule", "microbatches",
        "gpus_per_node", "world_size",
    )
}  # fmt: skip


def _given(params: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The fields set by ``params`` (unset options, None, keep the field's default)."""
    return {field: params[name] for name, field in names.items() if params.get(name) is not None}


def techniques_of(params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``MemoryTechniques`` fields the shared memory options set (``TECHNIQUE_OPTIONS``),
    enums as their values (``MemoryTechniques`` keeps str)."""
    return {
        field: value.value if isinstance(value, Enum) else value
        for field, value in _given(params, TECHNIQUE_OPTIONS).items()
    }


def workload_of(params: Mapping[str, Any]) -> Workload:
    """The command's ``Workload`` from its parsed options (``ctx.params``); raises
    ``TpcalcError`` for a model, card or size that cannot be used (call it inside ``build``)."""
    from tpcalc.reports.request import Workload

    return Workload.load(
        params["model"],
        params.get("hardware") or DEFAULT_HARDWARE,
        memory=memory_techniques(params.get("recompute_modules"), **techniques_of(params)),
        **_given(params, WORKLOAD_OPTIONS),
    )


def recompute_modules(value: str | None) -> tuple[str, ...]:
    """The --recompute-modules list as a tuple (checked against Megatron's module names)."""
    if not value:
        return ()
    from tpcalc.calc.activations.exact.techniques import check_recompute_modules

    modules = tuple(m.strip() for m in value.split(",") if m.strip())
    check_recompute_modules(modules)
    return modules


def memory_techniques(modules: str | None, **techniques: Any) -> MemoryTechniques:
    """The run's memory techniques (``Workload.memory``) from the shared options, with the
    --recompute-modules list checked; the rest keep ``MemoryTechniques``' defaults."""
    from tpcalc.calc.layout.groups import MemoryTechniques

    return MemoryTechniques(recompute_modules=recompute_modules(modules), **techniques)


def layout_of(params: Mapping[str, Any], *, sweep: tuple[str, ...] = ()) -> Layout:
    """The command's base ``Layout``; the ``sweep`` options are the report's own arguments."""
    from tpcalc.reports.request import Layout

    sizes = {name: field for name, field in LAYOUT_OPTIONS.items() if name not in sweep}
    return Layout(**_given(params, sizes))
